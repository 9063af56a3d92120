"""`attn-analyze-masks`: classify every tile of the KV loop by what `mask_mod` does to it.

Targets: all (target-independent L2 pass). Runs after `attn-tile`.

Expects: L2 IR (attnc/ir/attn.irdl.mlir) with `attn.kernel` ops (or tiled
`attn.attention` ops, of hand-written IR) carrying `block_m`, `block_n` (from
`attn-tile`), `dims` (the symbolic dims, in order), `q_shape`/`k_shape` (axis 2 gives M
and N) and `has_mask_mod`; the mask is `mask_mod(b, h, i, j: i32) -> i1`, the region of
the program's attn.mask op.

Leaves: the same ops with `mask_kind` set, and for a masked variant two functions next
to the kernel's, written in `arith` (computed in i64) and referenced from the op:

* `mask_kind = "none"`: no mask; nothing else is added.
* `mask_kind = "static"`: the mask is a function of b, h, i, j and the dims only; the
  functions below decide every tile exactly where intervals can (see below).
* `mask_kind = "runtime"`: the mask reads a `param` or computes in floats; the
  functions still hold (they skip what the integer part rules out, e.g. the upper
  triangle of `doc[b, i] == doc[b, j] and j <= i`) but a tile they call MIXED may still
  be all-kept or all-dropped: a block map computed on the GPU refines them.

`tile_class_fn = @<f>_tile_class(m_lo, m_hi, n_lo, n_hi, b, h, <dims>) -> i32`: for the
non-empty tile of rows [m_lo, m_hi) and keys [n_lo, n_hi) (0 <= m_lo < m_hi <= M,
0 <= n_lo < n_hi <= N), 0 = SKIP (nothing kept), 1 = MIXED (apply the mask per
element), 2 = FULL (everything kept: no per-element mask).

`kv_range_fn = @<f>_kv_range(m_block, b, h, <dims>) -> (start_0, end_0, ...,
start_K-1, end_K-1, full_start, full_end)`, with `kv_segments = K`: for the non-empty
query block `m_block` (rows [m_block * R, min((m_block + 1) * R, M)), R = block_m, times
q_tiles where a CTA runs several Q tiles: `query_block_rows`),
K sorted, disjoint, half-open ranges of `n_block`, possibly empty, outside of which every
key block is SKIP (one per top-level disjunct of the mask: prefix-LM keeps the prefix
and the causal band), then one range of key blocks that are all FULL for this query
block (inside the segments; the kernel can run it without the per-element mask, as
FlashAttention peels the masked blocks at the diagonal and the window edge).

    before:
      %o = "attn.attention"(%q, %k, %v) ({score_mod}, {
      ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
        %keep = arith.cmpi sle, %j, %i : i32
        "gpu.yield"(%keep) : (i1) -> ()
      }, {sink}) {block_m = 128, block_n = 128, dims = ["B", "H", "M", "N"], ...}
    after:
      %o = "attn.attention"(%q, %k, %v) (...same regions...) {..., mask_kind = "static",
          tile_class_fn = @causal_tile_class, kv_range_fn = @causal_kv_range,
          kv_segments = 1 : i64}
      func.func private @causal_tile_class(%m_lo: i32, %m_hi: i32, %n_lo: i32,
          %n_hi: i32, %b: i32, %h: i32, %B: i32, %H: i32, %M: i32, %N: i32) -> i32 {
        ... %may_keep = n_lo < m_hi, %may_drop = m_lo + 1 < n_hi ...
        ... select(%may_keep, select(%may_drop, 1, 2), 0) ...
      }
      func.func private @causal_kv_range(%m_block: i32, %b: i32, %h: i32, %B: i32,
          %H: i32, %M: i32, %N: i32) -> (i32, i32, i32, i32) {
        ... (0, min(m_block, (N + 127) // 128 - 1) + 1,       visit [0, diagonal]
             0, min(m_block, (N + 127) // 128)) ...         full below the diagonal
      }

On an attn.kernel, the KV loop is cut by what the analysis found (tile_program.py,
split_kv_loops): an `attn.kv_range` op calls the kv_range function, and each segment,
the highest first, gets a loop over its mixed blocks above the fully kept ones (with the
attn.mask op), one over the fully kept ones (without it: no per-element mask) and one
over the mixed blocks below them, each over steps from the segment's top down (Note [Key
blocks top down] in tile_program.py); skipped blocks are in no loop. For mask_kind
"runtime" the range is the block map row's instead, `attn.block_map_range` (one segment;
on sm_100a only where the analysis gives one: `reads_map_range`), the mixed loops read
each block's class from the block map (`attn.block_map_read`, whose result the mask op
takes last), and a mask comparing
document ids reads the tile table at the top of the program (`attn.tile_table_read`,
Note [Document-aligned tiles] in attnc/backend/qtiles.py). Mask kind "none" leaves the
one loop as attn-tile built it.

    before (causal, in the kernel):
      %r:3 = scf.for %t = %c0 to %blocks ... { %n = arith.subi %top, %t ... "attn.mask"(...) ... }
               {kv_blocks = "all"}
    after:
      %kv:4 = "attn.kv_range"(%m_block, %b, %h, %B, %H, %M, %N) {fn = @causal_kv_range}
      %top = arith.subi %kv#1, %c1           (and %above, %below, %steps: %kv#1 minus
                                              %after_full, %first_full, %kv#0)
      %r0:3 = scf.for %t = %c0 to %above ... { %n = arith.subi %top, %t ... "attn.mask" ... }
                {kv_blocks = "mixed"}
      %r1:3 = scf.for %t = %above to %below ... { %n = ...; no mask } {kv_blocks = "full"}
      %r2:3 = scf.for %t = %below to %steps ... { %n = ... "attn.mask" ... } {kv_blocks = "mixed"}

The analysis is `attnc.analysis` (a pure function of the region, see Note [Conditional
narrowing] in attnc/analysis/intervals.py); this file reads the op and writes the IR.

Note [What the analysis holds for]: the functions answer for the tile sizes and the
mask_mod the pass saw, which it records (`mask_block_m`, `mask_block_n`, `mask_digest`:
a digest of the region's operations, not of their locations). A pass may change either
afterwards (attn-tile run again; a user's pass rewriting the mask; an edited dump), and
the lowerings then evaluated the new mask per element inside the old mask's key ranges:
a window widened from 1024 to 4096 keys after the analysis kept only 1024 of them (found
by a review). `mask_functions` refuses an analysis that no longer holds, and the pass run
again redoes it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.analysis.region import Program, read_region
from attnc.analysis.tile_classes import KV_ARGS, TILE_ARGS, MaskSummary, summarize_mask, unanalysed
from attnc.analysis.to_arith import emit_function, fits_64_bits
from attnc.frontend.depth import run_deep
from attnc.ir.ops import KERNEL
from attnc.passes.registry import Pass

TILE_SIZES = ("block_m", "block_n")
MAX_TILE = 4096


@dataclass(frozen=True)
class MaskFunctions:
    """What the pass recorded on one attn.kernel (or tiled attn.attention), for the passes and backends after it.

    `tile_class` and `kv_range` are the func.func ops (None for kind 'none'); call them,
    or copy their bodies where needed with `attnc.analysis.to_arith.inline_function`.
    For a kernel's KV loop of query block m: `kv_range(m, b, h, *dims)` gives
    (start_0, end_0, ..., start_{segments-1}, end_{segments-1}, full_start, full_end)."""

    kind: str                        # 'none', 'static' or 'runtime'
    dims: tuple[str, ...]            # the trailing arguments of both functions, in order
    tile_class: object = None
    kv_range: object = None
    segments: int = 0


@dataclass(frozen=True)
class AnalyzeMasks(Pass):
    """Classify KV tiles as skip / full / mixed from mask_mod (tile_class, kv_range) and cut the KV loop by class."""

    name: ClassVar[str] = "attn-analyze-masks"

    def run(self, module) -> None:
        analyze_masks(module)


def analyze_masks(module) -> None:
    """Analyse every attn.kernel (or tiled attn.attention) under `module` not analysed yet (`mask_kind` unset),
    analysed for other tile sizes (attn-tile ran again since: the old functions go), or whose
    recorded analysis is not one this pass writes (an edited dump: it is made afresh)."""
    from attnc.ir import attention_ops

    for op in attention_ops(module):
        if "mask_kind" in op.attributes and _malformed(op):
            _forget(op)
        if "mask_kind" not in op.attributes:
            run_deep(_analyze, op)          # Note [Deep expressions]


def _analyze(op) -> None:
    with op.context:
        try:
            _record(op, summarize_as(op))
        except OverflowError as e:
            from attnc.ir import error_at
            raise error_at(op, f"the mask's integer arithmetic reaches beyond 64 bits ({e}): "
                               f"integers are exact up to 64 bits; rewrite it with smaller values") from None


def mask_functions(op) -> MaskFunctions:
    """The analysis results recorded on `op` (after this pass ran)."""
    from mlir import ir
    from attnc.ir import error_at, get_int, get_str

    if "mask_kind" not in op.attributes:
        raise error_at(op, f"{op.name} has no mask analysis: run attn-analyze-masks first")
    stale = _stale(op)
    if stale:
        raise error_at(op, stale)
    kind, dims = get_str(op, "mask_kind"), mask_dims(op)
    functions = "kv_range_fn" in op.attributes
    if kind not in ("none", "static", "runtime") or (kind == "none") == functions:
        raise error_at(op, f"{op.name} has mask_kind = \"{kind}\" and {'a' if functions else 'no'} kv_range "
                           f"function: the analysis writes one for \"static\" and \"runtime\" and none for "
                           f"\"none\": run attn-analyze-masks again")
    if kind == "none":
        return MaskFunctions(kind, dims)
    table = ir.SymbolTable(_enclosing_function(op).parent)
    found = []
    for key in ("tile_class_fn", "kv_range_fn"):
        name = _function_name(op, key)
        if name is None or name not in table:
            raise error_at(op, f"{op.name} has mask_kind = \"{kind}\" and no function '{key}' names (a symbol "
                               f"of the module that attn-analyze-masks writes): run attn-analyze-masks again")
        found.append(table[name])
    tile, kv = found
    segments = get_int(op, "kv_segments")
    results = len(ir.FunctionType(ir.TypeAttr(kv.attributes["function_type"]).value).results)
    if segments < 1 or results != 2 * segments + 2:
        raise error_at(op, f"{op.name} has kv_segments = {segments}, and its kv_range function "
                           f"@{ir.StringAttr(kv.attributes['sym_name']).value} returns {results} bounds "
                           f"(2 a segment and the fully kept range's 2): run attn-analyze-masks again")
    return MaskFunctions(kind, dims, tile, kv, segments)


def far_edge(op) -> bool:
    """Whether a query block's key range is one segment that may have mixed blocks below
    its fully kept ones (a window's far edge), by the static kv_range function: unless the
    range and the fully kept one start at one constant (causal, a prefix). False where the
    analysis no longer holds (the lowering refuses that kernel)."""
    from attnc.ir.ops import int_constant

    if "mask_kind" not in op.attributes or _stale(op):
        return False
    found = mask_functions(op)
    if found.kind != "static" or found.segments != 1:
        return False
    returned = list(found.kv_range.regions[0].blocks[0].operations)[-1].operands
    start, full_start = int_constant(returned[0]), int_constant(returned[2])
    return start is None or start != full_start


def summarize_as(op, program: Program | None = None) -> MaskSummary:
    """Read the op and run the analysis (attnc.analysis) of its mask_mod, or of `program`
    in its place (a mask_mod rewritten as a Program, over the same arguments and dims),
    with the checks and the fallback the pass applies: no IR is changed here."""
    from attnc.ir import MASK_MOD, error_at, get_bool, get_int, get_shape

    missing = [key for key in TILE_SIZES if key not in op.attributes]
    if missing:
        raise error_at(op, f"attn-analyze-masks needs the tile sizes, but '{missing[0]}' is not "
                           f"set: run attn-tile before it")
    for key in TILE_SIZES:
        # A hand-set size past any CTA's rows would reach the analysis' 64-bit bound checks
        # and be blamed on the mask.
        if not 1 <= get_int(op, key) <= MAX_TILE:
            raise error_at(op, f"attn-analyze-masks: {key} = {get_int(op, key)} is no tile size "
                               f"(1 to {MAX_TILE}); attn-tile sets it")
    dims = mask_dims(op)
    sizes = frozenset(d for key in ("q_shape", "k_shape", "v_shape") for d in get_shape(op, key)[:3]
                      if isinstance(d, str))
    exact = check_integer_widths(op, sizes)
    if program is None and get_bool(op, "has_mask_mod"):
        program = mask_program(op, MASK_MOD, dims)
    block_m, block_n = query_block_rows(op), get_int(op, "block_n")
    seq_k = get_shape(op, "k_shape")[2]
    summary = summarize_mask(program, block_m=block_m, block_n=block_n,
                             seq_q=get_shape(op, "q_shape")[2], seq_k=seq_k)
    if summary.kind == "none" or (exact and _emittable(summary, dims, sizes, block_m)):
        return summary
    return unanalysed(summary, block_n=block_n, seq_k=seq_k)


def _emittable(summary: MaskSummary, dims: tuple[str, ...], sizes: frozenset, block_m: int) -> bool:
    """Whether the functions `_record` emits compute the summary's bounds without leaving
    64 bits (attnc.analysis.to_arith.fits_64_bits): the tile arguments and the dims that
    size q, k or v are at most 2^30 (the runtime refuses more; a query block at most
    2^30 / block_m), other dims i32."""
    bounds = {**{name: 1 << 30 for name in TILE_ARGS + KV_ARGS}, "m_block": (1 << 30) // block_m,
              **{d: 1 << 30 if d in sizes else 1 << 31 for d in dims}}
    plan = summary.plan
    results = [summary.classes.tile_class(summary.builder),
               *(x for segment in plan.segments for x in segment), *plan.full]
    return fits_64_bits(results, bounds)


def check_integer_widths(op, sizes: frozenset) -> bool:
    """Whether every integer of mask_mod that is read as a value (compared, divided,
    converted, an index: Note [Exact integers] in attnc/backend/exact_ints.py) stays
    inside 64 bits; `sizes`: the dims that size q, k or v. The kernels and the reference
    compute such a value in 64 bits and wrap, while the analysis reasons on unbounded
    integers, so where one may leave 64 bits it proves nothing (`unanalysed`: every tile
    MIXED; the per-element test wraps as the reference does). A value of any hook that
    lies outside 64 bits whatever the indices are is an error at the value."""
    from attnc.backend.exact_ints import IntPlan
    from attnc.ir import MASK_MOD, error_at, region_block

    exact = True
    from attnc.ir.kernel import hook_indices

    for region in hook_indices(op):
        block = region_block(op, region)
        plan = IntPlan.of(block, sizes)
        for inner in block.operations:
            for value in inner.results:
                lo, hi = plan.ranges.get(value, (0, 0))
                if value not in plan.wide:
                    continue
                if lo >= 1 << 63 or hi < -(1 << 63):
                    reach = lo if lo >= 1 << 63 else hi
                    raise error_at(inner, f"this integer is always beyond 64 bits (at least {abs(reach):.3g} in "
                                          f"size): integers are exact up to 64 bits; rewrite it with smaller values")
                if region == MASK_MOD:
                    exact = exact and -(1 << 63) <= lo and hi < 1 << 63
    return exact


def _stale(op) -> str | None:
    """Why the recorded analysis does not hold for the op as it is now, or None: its
    functions answer for other tiles (attn-tile ran again, or a dump was edited), or for
    another mask (a pass after the analysis rewrote mask_mod). An analysis that recorded
    no sizes or no digest (a dump of an older attnc) is taken as it is."""
    from attnc.ir import get_int, get_str

    if "mask_block_m" in op.attributes:
        made = (get_int(op, "mask_block_m"), get_int(op, "mask_block_n"))
        now = (query_block_rows(op), get_int(op, "block_n"))
        if made != now:
            return (f"the mask analysis was made for {'x'.join(map(str, made))} tiles, and the op is "
                    f"now tiled {'x'.join(map(str, now))}: run attn-analyze-masks after attn-tile")
    if "mask_digest" in op.attributes and get_str(op, "mask_digest") != _mask_digest(op):
        return ("the mask analysis was made for another mask_mod (it changed since): run "
                "attn-analyze-masks after every pass that changes the mask")
    return None


def _mask_digest(op) -> str:
    """A digest of the value mask_mod yields as an expression: each value is named by its
    operation, attributes, result type and operands' names, so the digest is the same
    whatever the order of the operations and however often a constant is repeated, and
    leaves out locations and attn-hoist's levels. (canonicalize, which README lets run anywhere, moves the
    region's constants out and Note [Hoisted constants] brings them back in another order:
    a digest of the operations in order called the same mask another; found by a review.)"""
    import hashlib

    from attnc.ir import MASK_MOD, get_bool, region_block

    if not get_bool(op, "has_mask_mod"):
        return "none"
    block = region_block(op, MASK_MOD)
    names = {arg: f"arg{k}:{arg.type}" for k, arg in enumerate(block.arguments)}
    for inner in block.operations:
        # (where attn-hoist computes a value does not change the mask)
        attrs = sorted((key, str(inner.attributes[key])) for key in inner.attributes if key != "attn.level")
        text = repr((inner.name, attrs, [names.get(v, f"outside:{v.type}") for v in inner.operands],
                     [str(r.type) for r in inner.results]))
        name = hashlib.sha256(text.encode()).hexdigest()
        names.update({r: f"{name}:{k}" for k, r in enumerate(inner.results)})
    return name[:16]          # the terminator's: the mask's value


def _function_name(op, key: str) -> str | None:
    """The symbol attribute `key` of the op names, or None."""
    from mlir import ir

    attr = op.attributes[key] if key in op.attributes else None
    return ir.FlatSymbolRefAttr(attr).value if isinstance(attr, ir.FlatSymbolRefAttr) else None


def _malformed(op) -> bool:
    """Whether the op's recorded analysis fails `mask_functions`' checks: stale (`_stale`), or
    edited by hand."""
    from attnc.errors import AttncError

    try:
        mask_functions(op)
    except AttncError:
        return True
    return False


def _forget(op) -> None:
    """Remove the op's mask analysis: its attributes and the functions they name."""
    from mlir import ir

    table = ir.SymbolTable(_enclosing_function(op).parent)
    for key in ("tile_class_fn", "kv_range_fn"):
        name = _function_name(op, key)
        if name is not None and name in table:
            table[name].erase()
    for key in ("mask_kind", "tile_class_fn", "kv_range_fn", "kv_segments", "mask_block_m", "mask_block_n"):
        if key in op.attributes:
            del op.attributes[key]


def _record(op, summary: MaskSummary) -> None:
    """Write the summary: `mask_kind` and the tile sizes it holds for, and for a mask the
    two functions and their names."""
    from mlir import ir
    from attnc.ir import get_int, set_int, set_str

    set_str(op, "mask_kind", summary.kind)
    set_int(op, "mask_block_m", query_block_rows(op))
    set_int(op, "mask_block_n", get_int(op, "block_n"))
    set_str(op, "mask_digest", _mask_digest(op))      # Note [What the analysis holds for]
    if summary.kind == "none":
        return
    kernel = _enclosing_function(op)
    table = ir.SymbolTable(kernel.parent)
    base = ir.StringAttr(kernel.attributes["sym_name"]).value
    S, classes, dims = summary.builder, summary.classes, mask_dims(op)
    tile_class = classes.tile_class(S)
    with op.context:
        tile = emit_function(_fresh(table, f"{base}_tile_class"), TILE_ARGS + dims, [tile_class],
                             loc=op.location, ip=ir.InsertionPoint.after(kernel),
                             names={classes.may_keep: "may_keep", classes.may_drop: "may_drop",
                                    tile_class: "tile_class"})
        plan = summary.plan
        results = [x for segment in plan.segments for x in segment] + list(plan.full)
        names = {x: f"{('start', 'end')[k % 2]}_{k // 2}" for k, x in enumerate(results)}
        names.update({plan.full[0]: "full_start", plan.full[1]: "full_end"})
        kv = emit_function(_fresh(table, f"{base}_kv_range"), KV_ARGS + dims, results,
                           loc=op.location, ip=ir.InsertionPoint.after(tile), names=names)
        for key, fn in (("tile_class_fn", tile), ("kv_range_fn", kv)):
            op.attributes[key] = ir.FlatSymbolRefAttr.get(ir.StringAttr(fn.attributes["sym_name"]).value)
    set_int(op, "kv_segments", len(summary.plan.segments))
    if op.name == KERNEL:
        _split_loops(op, summary)


def _split_loops(op, summary: MaskSummary) -> None:
    """The kernel's KV loops by tile class (tile_program.split_kv_loops); a mask that
    reads params reads its block map in the mixed loops and, where it compares document
    ids (Note [Document-aligned tiles] in attnc/backend/qtiles.py), the tile table."""
    from mlir import ir
    from attnc.ir.roles import record_key_range
    from attnc.passes.tile_program import read_tile_table, split_kv_loops

    runtime = summary.kind == "runtime"
    fn = ir.FlatSymbolRefAttr(op.attributes["kv_range_fn"]).value
    segments = len(summary.plan.segments)
    split_kv_loops(op, fn, segments, mask_dims(op), runtime, reads_map_range(op, runtime, segments))
    read_tile_table(op, table_ids(op) if runtime else None)
    record_key_range(op)            # Note [The key range as made]


def reads_map_range(kernel, runtime: bool, segments: int) -> bool:
    """Whether the kernel walks the key blocks its block map's row keeps (attn.block_map_range,
    Note [Full range from the map] in attnc/backend/blockmap_hooks.py) rather than the
    analysis' segments: a mask that reads params, on sm_80 and sm_90a (or the tile table's
    runs in their place: Note [Ranges from the runs] in attnc/backend/run_ranges.py), and on
    sm_100a where the analysis gives one segment (Note [Block map on sm_100a])."""
    from attnc.ir import get_str

    return runtime and (get_str(kernel, "target") != "sm_100a" or segments == 1)


def table_ids(kernel) -> str | None:
    """The param of the document ids whose tile table the kernel may take its query tiles
    from (a conjunct P[.., i] == P[.., j]: Note [Document-aligned tiles] in
    attnc/backend/qtiles.py), or None."""
    from attnc.backend.qtiles import segment_conjunct
    from attnc.ir import MASK_MOD, region_block
    from attnc.ir.kernel import kernel_variant

    found = segment_conjunct(region_block(kernel, MASK_MOD), list(kernel_variant(kernel).params))
    return found[1].param if found else None


def query_block_rows(op) -> int:
    """The rows of a CTA's query block, which the analysis classifies key blocks for:
    block_m, times q_tiles where a CTA runs several Q tiles (Note [Q tiles of a CTA] in
    tile_program.py)."""
    from attnc.ir import get_int

    return get_int(op, "block_m") * (get_int(op, "q_tiles") if "q_tiles" in op.attributes else 1)


def mask_dims(op) -> tuple[str, ...]:
    from mlir import ir

    return tuple(ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes["dims"]))


def mask_program(op, region: int, dims: tuple[str, ...]) -> Program:
    """The mask_mod region as a `Program`, after the checks the IRDL verifier cannot do."""
    from attnc.ir import YIELD, error_at, region_block

    block = region_block(op, region)
    terminator = list(block.operations)[-1]
    if terminator.name != YIELD or len(terminator.operands) != 1 \
            or str(terminator.operands[0].type) != "i1":
        raise error_at(terminator, "mask_mod must end in a gpu.yield of one i1 (keep (i, j) or not)")
    program = read_region(block)
    for node in program.nodes:
        if node.op == "attn.dim" and node.attr not in dims:
            raise error_at(node.loc, f"dim '{node.attr}' is not one of the dims of {op.name} "
                                     f"({', '.join(dims)})")
    return program


def _enclosing_function(op):
    parent = op.parent
    while parent.name != "func.func":
        parent = parent.parent
    return parent


def _fresh(table, name: str) -> str:
    """`name`, or `name_1`, `name_2`, ... when a symbol of that name exists."""
    if name not in table:
        return name
    k = 1
    while f"{name}_{k}" in table:
        k += 1
    return f"{name}_{k}"
