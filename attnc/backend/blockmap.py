"""The GPU block map of a mask that reads params: a small kernel, generated from the
same `mask_mod` region, that classifies every tile before the attention kernel runs.

    blockmap[b, h_m, m_block, n_block]  (u8)  0 = SKIP (nothing kept), 1 = MIXED, 2 = FULL
                                               (bits 0-1), a MIXED tile's holds bits 2-3

for every batch b, head slot h_m (one slot when the mask does not read h), query block
[m_block * block_m, +block_m) and key block [n_block * block_n, +block_n); rows >= M and
keys >= N do not count. With a tile table (`BlockMapPlan.qtiles`, Note [Document-aligned
tiles] in qtiles.py) m_block is the table's tile t instead, its rows the tile's [row0,
row_end) and its key blocks [key0 + n_block * block_n, +block_n): only the
cdiv(N - key0, block_n) blocks of such a row are written, and read. `blockmap_plan` decides the shapes and the launch, `emit_blockmap_kernel`
writes the kernel, `blockmap_hooks` answers the attention kernel's mask questions
(Note [Mask hooks] in kernel_spec.py) from the map.

Note [Block map kernel]: one CTA of 128 threads per GROUPS = 4 groups of TILES = 4
consecutive key blocks of a query block, grid (cdiv(N, 16 * block_n), cdiv(M, block_m)
or the table's tiles, B * H_m) (z = b * H_m + h_m): a CTA per tile made the launch
itself the cost (32768 CTAs at B = 4, M = N = 8192, 128x64: 21 us with no work in them),
and the first two steps need one warp per tile. The CTA takes its groups
one after the other (those that hold a block below the row's end); in group g, warp w
takes key block 4 * (4 * blockIdx.x + g) + w (four groups a CTA ran fastest against one
and eight: results/sm80_h200.md, "Block map kernel"). In each group:

1. The tile class of `attn-analyze-masks`: a tile it proves SKIP or FULL (e.g. the upper
   triangle of a causal mask) is decided without evaluating anything.
2. For the tiles it leaves MIXED, Note [Tile intervals] and Note [Sampled elements].
3. The tiles still undecided are walked element by element, one after the other by the
   whole CTA (their bits reach every thread through one `bar.red.popc`: warp w's lanes
   0 .. 2^w - 1 vote for its tile). Thread t walks its share of the tile, UNROLL elements
   per pass (thread t always holds the key column t % block_n when that divides 128, so
   loads that depend on j only are loop-invariant), and every warp folds the pass into
   warp-uniform `vote.any(kept)` / `vote.all(kept or out of range)`; a warp stops once it
   has seen both (the tile is MIXED whatever the rest holds). `bar.red.or/and` then
   reduce the warps and thread 0 writes the byte.

Lane 0 of warp w writes the byte of a tile decided by step 1 or 2.

Note [Tile intervals]: proving a tile SKIP element by element needs all of its
block_m * block_n elements (the whole lower triangle of a documents mask, 8192 per
128x64 tile), so a tile the static class leaves MIXED is first evaluated once on
intervals (blockmap_intervals.py): b and h are points, i the tile's rows [m_lo, m_hi - 1]
and j its keys [n_lo, n_hi - 1] (m_hi, n_hi already clamped to M, N: rows and keys out
of range are not in the box, as the element walk does not count them), every i32 an
interval and every i1 a (may be true, may be false) pair, each operation by a sound
transfer function (Note [Interval transfer functions]). A param read is the [min, max]
of the tensor over its clamped index box, walked by the tile's warp (RANGE_UNROLL loads
per lane and trip, `redux.sync.min/max`: no shared memory, no barrier), TOP past
PARAM_CAP elements. If the mask may be true nowhere the tile is SKIP, if it may be false
nowhere FULL, and only otherwise the element walk runs: so the map is exactly what the
element walk alone gives. For documents, doc[b, i] over the rows and doc[b, j] over the
keys give SKIP for a tile whose two id ranges do not overlap and FULL for one that lies
in one document (below the diagonal); the tiles that straddle a document boundary are
MIXED, which Note [Sampled elements] proves. Whether a variant has the interval step is
decided at compile time (`BlockMapPlan.intervals`): a region with an operation the
evaluator does not model (floats, f32 params, ...) has only the samples in step 2.

Note [Sampled elements]: intervals prove SKIP and FULL, never MIXED; but two concrete
elements of a tile, one kept and one dropped, do. So in step 2 lane l of the tile's warp
also evaluates the mask (`emit_mask`, as the element walk does) at row l // 4 of 8 and
column l % 4 of 4 spread evenly over the tile, corners included, and `vote.any` of kept
and of dropped together prove MIXED. A tile crossed by one boundary (the diagonal, a
document start in its rows or its keys, a window's edge) has corners on both sides of
it, so only the tiles whose samples all agree while the intervals cannot decide them are
left to the element walk. The samples' loads are issued with the first trips of the
interval walks, before any value is used (Note [Loads first]).

With the intervals and the samples the map of documents of 1000 at M = N = 8192 takes
about a ninth of the element walk's time, whatever the documents' length
(results/sm80_h200.md, "Block map kernel").

Note [Conjuncts a tile holds]: a mask with a row interval and a residual (Notes [Row
intervals] and [Residual conjuncts] in hooks.py: `doc[b, i] == doc[b, j] and j <= i`) is
tested in a MIXED tile as both, per score. But most MIXED tiles of such a mask are MIXED
for one of the two alone: a documents tile on the diagonal inside one document needs
only `j <= i`, one below the diagonal across a document start only the ids' compare
(112 and 168 of the 296 MIXED 128x64 tiles of a head at N = 8192, documents of 1000; 16
need both). So step 2 also evaluates each conjunct on the tile's intervals (the same
`TileIntervals` pass, `truths`) and a MIXED tile's byte gets RESIDUAL_HOLDS when every
residual conjunct may fail nowhere on the tile and INTERVAL_HOLDS when no free or linear
conjunct may (`BlockMapPlan.holds`: only masks with both parts and the interval step).
The bits are proofs over the tile's rows and keys clamped to M and N, and never set
otherwise (the element walk's tiles, the static class's): the attention kernel
(`blockmap_holds` here, `ScoreMasker._split` in sm80_masks.py) then tests only the other
part. It must still drop the keys >= N itself: a ragged last key block may hold its
interval part on its keys < N (rows past N that read the last document id, M > N), so
the residual alone is tested only in a block wholly below N. Every reader of the class
masks the byte with CLASS_BITS. Against the same kernels testing both parts (the same
outputs to the bit), documents + causal ran 3-4 % faster on sm_80 and 3 % on sm_90a at
head dim 128 (results/sm80_h200.md and sm90a_h200.md, "Conjuncts a tile holds").

Note [Full range from the map]: the attention kernel's `kv_range` (blockmap_hooks) scans
the map's row of its query block, each lane every 32nd block (all warps alike), for the
first and last non-SKIP blocks and for the FULL ones: their first, last + 1 and count,
reduced over the warp by redux.sync min/max/add. When the FULL blocks form one
contiguous run (count == last + 1 - first) it is the full range, whose blocks the kernel
then computes without keep() and without asking tile_partial; otherwise (none, or
several runs) the full range is empty and every block is asked, as before. Either way
lo <= full_lo <= full_hi <= hi.

Note [Block map ABI]: the runtime owns the map, a scratch buffer it passes by name to
every kernel that lists it. It does not zero it: the map kernel fills it ("fills" in the
manifest), writing every block of every query tile that the attention kernel may read
(Note [Filled scratch] in runtime/attnc_runtime/kernel.py). The attention kernel lists it
through the `ExtraParam('scratch', 'blockmap', bytes)` that `blockmap_hooks` returns, whose
manifest entry is exactly `plan.scratch` (the manifest parser refuses a scratch sized two
ways); the hooks read it with `e.arg(param.key)`, and `H` with `e.dim('H')` when the map
is per head. The block-map kernel's own parameters, in order: the scratch, every symbolic
dim of the variant (i32, `variant.dims` order), then the pointer of each param tensor the
mask reads. No strides: a param tensor is contiguous (the runtime checks), and the mask
reads it as the attention kernel does (`MapNames`, hooks.load_param), row-major from its
shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from mlir import ir
from mlir.dialects import arith, gpu, llvm, nvvm, scf

from attnc.analysis.to_arith import inline_function
from attnc.backend.bundle import kernel_symbol
from attnc.backend.blockmap_intervals import Ival, TileIntervals, Tri, WarpRange, point, unsupported
from attnc.backend.hook_walks import MaskConjuncts
from attnc.backend.hooks import RegionCode, size_dims
from attnc.backend.kernel_spec import ExtraParam, KvCtx, KvRange
from attnc.backend.nvgpu_builders import Emit, GlobalPtr, warp_vote
from attnc.backend.qtiles import SCRATCH as QTILES, QTilesPlan, cdiv_factor, read_entry, tile_count
from attnc.errors import AttncError
from attnc.frontend.variant import Tensor
from attnc.ir import MASK_MOD, PARAM, attention_ops, error_at, get_bool, region_block, yielded
from attnc.passes.analyze_masks import mask_functions

if TYPE_CHECKING:
    from attnc.backend.run_ranges import RunRest

SCRATCH = "blockmap"
SKIP, MIXED, FULL = 0, 1, 2
CLASS_BITS = 3               # a map byte's class; a MIXED tile's byte may add:
RESIDUAL_HOLDS = 4           # the residual conjuncts hold on the whole tile (Note [Conjuncts a tile holds])
INTERVAL_HOLDS = 8           # the free and linear conjuncts hold on the whole tile
THREADS = 128
TILES = THREADS // 32        # tiles per group: one per warp for the static and interval steps
GROUPS = 4                   # groups of TILES key blocks per CTA, one after the other
MIN_CTAS = 8                 # CTAs per SM that ptxas must fit (64 registers a thread)
SAMPLE_COLS = 4              # lane l samples row l // 4 of 8 and column l % 4 of 4 of its tile
_UNDECIDED = 3               # a tile left to the element walk (never written)
UNROLL = 4                   # elements per thread between two warp votes
SCAN_UNROLL = 4              # map bytes per lane and trip of the attention kernel's row scan

DimValue = str | int


@dataclass(frozen=True)
class BlockMapPlan:
    variant: str
    block_m: int
    block_n: int
    per_head: bool                   # whether mask_mod reads h (else one head slot)
    batch: DimValue
    heads: DimValue
    seq_q: DimValue
    seq_k: DimValue
    dims: tuple[str, ...]            # every symbolic dim, passed as i32 in this order
    params: tuple[Tensor, ...]       # the param tensors the mask reads (frontend Tensors)
    intervals: bool = False          # whether tiles go through Note [Tile intervals]
    holds: bool = False              # whether MIXED tiles record the conjuncts they hold (Note
                                     # [Conjuncts a tile holds])
    qtiles: Optional[QTilesPlan] = None  # the query tiles of a tile table (Note [Document-aligned
                                     # tiles], qtiles.py); None: the fixed grid
    runs: Optional["RunRest"] = None  # no map is built, the table's runs give the ranges
                                     # (Note [Ranges from the runs], run_ranges.py)

    @property
    def built(self) -> bool:
        """Whether the bundle builds the map (else only the tile table: `runs`)."""
        return self.runs is None

    @property
    def symbol(self) -> str:
        return kernel_symbol(self.variant, "blockmap")

    @property
    def head_slots(self) -> DimValue:
        return self.heads if self.per_head else 1

    @property
    def query_tiles(self) -> list:
        """The query tiles of a (b, h_m), as manifest factors: the grid's query blocks, or
        the tile table's length."""
        return self.qtiles.tiles if self.qtiles else [cdiv_factor(self.seq_q, self.block_m)]

    @property
    def scratch(self) -> dict:
        """The scratch param, exactly as every kernel reading the map must list it."""
        return {"kind": "scratch", "name": SCRATCH,
                "bytes": [self.batch, self.head_slots, *self.query_tiles, cdiv_factor(self.seq_k, self.block_n)]}

    @property
    def never_empty(self) -> frozenset[str]:
        """The dims >= 1 wherever the block-map kernel evaluates the mask: those of its
        grid (a launch with an empty grid is skipped)."""
        sizes = (self.batch, self.seq_q, self.seq_k) + ((self.heads,) if self.per_head else ())
        return frozenset(d for d in sizes if isinstance(d, str))

    @property
    def kernel_params(self) -> list[dict]:
        return ([self.scratch] + ([self.qtiles.scratch] if self.qtiles else [])
                + [{"kind": "dim", "name": d, "type": "i32"} for d in self.dims]
                + [{"kind": "ptr", "tensor": p.name} for p in self.params])

    @property
    def kernel(self) -> dict:
        """The manifest's kernel entry (launch it before the attention kernel)."""
        z = [self.batch] + ([self.heads] if self.per_head else [])
        return {"name": "blockmap", "symbol": self.symbol, "block": [THREADS, 1, 1],
                "dynamic_smem_bytes": 0,
                "grid": [[cdiv_factor(self.seq_k, self.block_n * TILES * GROUPS)], self.query_tiles, z],
                "params": self.kernel_params,
                "role": "mask", "fills": [SCRATCH]}     # the runtime may keep the map (Note [Reused masks], kernel.py)


def blockmap_plan(result, block_m: int, block_n: int) -> BlockMapPlan:
    """The block map of the (single) attn.kernel of a compile result (after
    attn-analyze-masks), at the attention kernel's tile sizes. Meant for masks that read
    params (`mask_kind = "runtime"`), it is right for any mask_mod."""
    op, variant = _attention(result), result.variant
    if not get_bool(op, "has_mask_mod"):
        raise error_at(op, "a block map needs a mask_mod")
    if (block_m * block_n) % (THREADS * UNROLL):
        raise error_at(op, f"a {block_m}x{block_n} tile cannot be walked by {THREADS} threads "
                           f"{UNROLL} elements at a time")
    block = region_block(op, MASK_MOD)
    read = {_param_index(o.operands[0]) for o in _ops(block) if o.name == PARAM}
    params = tuple(p for k, p in enumerate(variant.params) if k in read)
    intervals = unsupported(block, variant.params) is None
    parts = MaskConjuncts.of(block)
    return BlockMapPlan(variant.name, block_m, block_n, _uses(block, block.arguments[1]),
                        variant.batch, variant.heads, variant.seq_q, variant.seq_k,
                        tuple(variant.dims), params, intervals,
                        intervals and bool(parts.linear) and bool(parts.residual))


def _attention(result) -> ir.Operation:
    ops = attention_ops(result.module)
    if len(ops) != 1:
        raise AttncError(f"a block map is built for one attn.kernel, found {len(ops)}")
    return ops[0]


def _ops(block: ir.Block):
    return list(block.operations)


def _uses(block: ir.Block, value: ir.Value) -> bool:
    return any(value == v for o in _ops(block) for v in o.operands)


def _param_index(tensor: ir.Value) -> int:
    """Params are the function arguments after q, k and v (attn.irdl.mlir)."""
    return ir.BlockArgument(tensor).arg_number - 3


# ---------------------------------------------------------------- mask_mod as code

def emit_mask(e: Emit, block: ir.Block, args, names: MapNames) -> ir.Value:
    """The i1 the mask region yields for `args` (b, h, i, j), compiled at the insertion
    point exactly as the attention kernel's keep() is (hooks.RegionCode: floor division
    expanded, float constants folded, the same division, params read by hooks.load_param),
    so that the map and the kernel never disagree about an element; the names resolve
    through `names` (a MapNames)."""
    return RegionCode(block, names, names.never_empty)(e, *args)


class MapNames:
    """How the mask region's names resolve in the block-map kernel, as hooks.KernelNames
    resolves them in the attention kernel (the part RegionCode and hooks.load_param read):
    every dim is the kernel's own i32 parameter of that name (`e.dim(name)`), a param
    tensor is known by its name (`params`: the variant's param tensors, in the order of
    the `params` attribute) and read through its pointer parameter `e.arg("ptr:<name>")`.
    `never_empty`: the dims that are >= 1 wherever the code runs (BlockMapPlan.never_empty);
    a param read whose shape has any other symbolic dim is guarded."""

    def __init__(self, params, never_empty: frozenset[str] = frozenset(), size_dims: frozenset[str] = frozenset()):
        self.params = {p.name: p for p in params}
        self.param_order = [p.name for p in params]
        self.never_empty = never_empty
        self.size_dims = size_dims      # dims in [0, 2^30] (hooks.size_dims; Note [Exact integers])

    def param_of(self, tensor: ir.Value) -> str:
        return self.param_order[_param_index(tensor)]

    def dim(self, e: Emit, name: str) -> ir.Value:
        return e.dim(name)

    def size(self, e: Emit, entry: DimValue) -> ir.Value:
        return e.c32(entry) if isinstance(entry, int) else self.dim(e, entry)


# ---------------------------------------------------------------- the kernel

def _arg_key(p: dict) -> str:
    if p["kind"] == "ptr":
        return f"ptr:{p['tensor']}"   # what hooks.load_param reads (`e.arg`)
    return p["name"]                 # a dim (what `e.dim` reads), or the scratch


def _arg_type(p: dict) -> ir.Type:
    if p["kind"] in ("ptr", "scratch"):
        return ir.Type.parse("!llvm.ptr<1>")
    return ir.IntegerType.get_signless(32)     # a dim


def emit_blockmap_kernel(plan: BlockMapPlan, result, ip: ir.InsertionPoint):
    """Add the block-map `gpu.func` (Note [Block map kernel]) at `ip`, the body of a
    gpu.module in the context of `result.module`; returns it."""
    op = _attention(result)
    params = plan.kernel_params
    types = [_arg_type(p) for p in params]
    with ip, op.location:
        func = gpu.GPUFuncOp(ir.TypeAttr.get(ir.FunctionType.get(types, [])), plan.symbol,
                             kernel=True, known_block_size=[THREADS, 1, 1])
        # At most 64 registers a thread: eight CTAs an SM, whose loads hide each other's.
        func.operation.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), MIN_CTAS)
        entry = func.body.blocks.append(*types)
    with ir.InsertionPoint(entry), op.location:
        args = {_arg_key(p): a for p, a in zip(params, entry.arguments)}
        _BlockMapKernel(plan, op, result.variant, args).emit()
        gpu.ReturnOp([])
    return func


def build_blockmap_module(plan: BlockMapPlan, result) -> ir.Module:
    """A `gpu.container_module` holding only the block-map kernel (for `to_ptx`)."""
    with result.module.context, ir.Location.name(plan.symbol):
        module = ir.Module.create()
        module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
        with ir.InsertionPoint(module.body):
            gpu_module = gpu.GPUModuleOp("attnc_blockmap")
            gpu_module.bodyRegion.blocks.append()
        emit_blockmap_kernel(plan, result, ir.InsertionPoint(gpu_module.bodyRegion.blocks[0]))
        module.operation.verify()
    return module


@dataclass(frozen=True)
class _Tile:
    """A tile's rows [m_lo, m_hi) and keys [n_lo, n_hi) (i32; the his clamped to M, N)."""
    m_lo: ir.Value
    m_hi: ir.Value
    n_lo: ir.Value
    n_hi: ir.Value


class _BlockMapKernel:
    def __init__(self, plan: BlockMapPlan, op: ir.Operation, variant, args: dict):
        self.plan, self.op, self.args = plan, op, args
        self.e = Emit({k: a for k, a in args.items() if k not in (SCRATCH, QTILES)})
        self.names = MapNames(variant.params, plan.never_empty, size_dims(variant))

    def _size(self, d: DimValue) -> ir.Value:
        return self.names.size(self.e, d)

    def emit(self) -> None:
        e, s = self.e, self.plan
        self.tid = nvvm.read_ptx_sreg_tid_x(e.i32)
        warp, lane = e.div(self.tid, 32), e.and_(self.tid, 31)
        group, m_block = nvvm.read_ptx_sreg_ctaid_x(e.i32), nvvm.read_ptx_sreg_ctaid_y(e.i32)
        z = nvvm.read_ptx_sreg_ctaid_z(e.i32)
        if s.per_head:
            self.b, self.h = e.div(z, self._size(s.heads)), e.rem(z, self._size(s.heads))
        else:
            self.b, self.h = z, e.c32(0)
        n_blocks = e.cdiv(self._size(s.seq_k), s.block_n)
        # One byte per tile, rows of n_blocks per query tile (gridDim.y).
        wide = e.to_i64
        row = e.mul(e.add(e.mul(wide(z), wide(nvvm.read_ptx_sreg_nctaid_y(e.i32))), wide(m_block)),
                    wide(n_blocks))
        self.row = GlobalPtr(e, self.args[SCRATCH], 8).offset(row)
        M = self._size(s.seq_q)
        if s.qtiles is None:
            self.m_lo = e.mul(m_block, s.block_m)
            self.m_hi = e.min(e.add(self.m_lo, s.block_m), M)
            self.key0, self.n_blocks = e.c32(0), n_blocks
            self._groups(group, warp, lane)
            return
        # Note [Document-aligned tiles]: the table's tile; a CTA past the last one returns.
        self.m_lo, self.m_hi, self.key0, _ = read_entry(e, self.args[QTILES], z, m_block, M, s.block_m)
        self.n_blocks = e.cdiv(e.max(e.sub(self._size(s.seq_k), self.key0), 0), s.block_n)
        inside = scf.IfOp(e.lt(self.m_lo, M))
        with ir.InsertionPoint(inside.then_block):
            self._groups(group, warp, lane)
            scf.yield_([])

    def _groups(self, cta, warp, lane) -> None:
        """The CTA's GROUPS groups of TILES key blocks, one after the other (those that
        hold a block below n_blocks: a CTA-uniform count)."""
        e = self.e
        first = e.mul(cta, GROUPS)
        left = e.cdiv(e.max(e.sub(self.n_blocks, e.mul(first, TILES)), 0), TILES)
        loop = scf.ForOp(e.c32(0), e.min(left, GROUPS), e.c32(1))
        with ir.InsertionPoint(loop.body):
            self._tiles(e.add(first, loop.induction_variable), warp, lane)
            scf.yield_([])

    def _tiles(self, group, warp, lane) -> None:
        """Steps 1 to 3 of Note [Block map kernel] for the CTA's TILES key blocks."""
        e = self.e
        n_blocks = self.n_blocks
        first = e.mul(group, TILES)

        # Steps 1 and 2 (Note [Block map kernel]) for this warp's tile, warp-uniform.
        n_block = e.add(first, warp)
        exists = e.lt(n_block, n_blocks)
        tile = self._tile(n_block)
        static = self._static_class(tile)
        branch = scf.IfOp(e.land(exists, e.eq(static, MIXED)), [e.i32, e.i32], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.yield_(list(self._warp_class(tile, lane)))
        with ir.InsertionPoint(branch.else_block):
            scf.yield_([static, e.c32(0)])
        cls, holds = branch.results
        undecided = e.land(exists, e.eq(cls, _UNDECIDED))
        decided = scf.IfOp(e.land(e.land(exists, e.xor(undecided, e.true())), e.eq(lane, 0)))
        with ir.InsertionPoint(decided.then_block):
            self._store(n_block, e.or_(cls, holds))
            scf.yield_([])

        # The undecided tiles, one after the other by the whole CTA: bit w of `pending` is
        # warp w's (warp w's lanes 0 .. 2^w - 1 count in the popc).
        vote = e.land(undecided, e.lt(lane, e.shl(1, warp)))
        pending = nvvm.BarrierOp(e.i32, reductionOp=nvvm.BarrierReduction.POPC,
                                 reductionPredicate=arith.extui(e.i32, vote)).result
        walk = scf.ForOp(e.c32(0), e.c32(TILES), e.c32(1))
        with ir.InsertionPoint(walk.body):
            w = walk.induction_variable
            todo = scf.IfOp(e.ne(e.and_(e.shr(pending, w), 1), 0))
            with ir.InsertionPoint(todo.then_block):
                n_block = e.add(first, w)
                result = self._evaluate(self._tile(n_block))
                writer = scf.IfOp(e.eq(self.tid, 0))
                with ir.InsertionPoint(writer.then_block):
                    self._store(n_block, result)
                    scf.yield_([])
                scf.yield_([])
            scf.yield_([])

    def _tile(self, n_block) -> _Tile:
        e, s = self.e, self.plan
        n_lo = e.add(self.key0, e.mul(n_block, s.block_n))
        return _Tile(self.m_lo, self.m_hi, n_lo, e.min(e.add(n_lo, s.block_n), self._size(s.seq_k)))

    def _store(self, n_block, cls) -> None:
        e = self.e
        llvm.store(arith.trunci(_i8(), cls), self.row.offset(e.to_i64(n_block)).ptr)

    def _static_class(self, t: _Tile) -> ir.Value:
        """attn-analyze-masks' class of the tile: SKIP and FULL are proofs, MIXED a maybe."""
        functions = mask_functions(self.op)
        if functions.tile_class is None:
            return self.e.c32(MIXED)
        args = [t.m_lo, t.m_hi, t.n_lo, t.n_hi, self.b, self.h,
                *(self.e.dim(d) for d in functions.dims)]
        return inline_function(functions.tile_class, args)[0]

    def _warp_class(self, t: _Tile, lane) -> tuple[ir.Value, ir.Value]:
        """(class, holds) of a tile the static class leaves MIXED, by its warp
        (warp-uniform). The class: SKIP when the mask may be true nowhere in the tile's
        box, FULL when it may be false nowhere (Note [Tile intervals]), MIXED when two of
        the 32 sampled elements (Note [Sampled elements]) differ, else _UNDECIDED; holds:
        the RESIDUAL_HOLDS and INTERVAL_HOLDS bits of a MIXED tile (Note [Conjuncts a tile
        holds]), else 0."""
        e = self.e
        block = region_block(self.op, MASK_MOD)
        # The samples' loads first, then the walks' (Note [Loads first]), then their uses.
        i, j = sample_element(e, t.m_lo, t.m_hi, t.n_lo, t.n_hi, lane)
        kept = emit_mask(e, block, [self.b, self.h, i, j], self.names)
        truth = None
        if self.plan.intervals:
            ranges = WarpRange(e, self.names, lane, 32,
                               lambda x, kind: _redux(e, x, getattr(nvvm.ReduxKind, kind.upper())))
            box = [point(self.b), point(self.h), Ival(t.m_lo, e.sub(t.m_hi, 1)), Ival(t.n_lo, e.sub(t.n_hi, 1))]
            truth, holds = tile_truths(e, block, ranges, box, self.plan.holds)
        mixed = e.land(warp_vote(e, kept, "any"), warp_vote(e, e.xor(kept, e.true()), "any"))
        cls = e.select(mixed, MIXED, e.c32(_UNDECIDED))
        if truth is None:
            return cls, e.c32(0)
        cls = e.select(truth.may_true, e.select(truth.may_false, cls, FULL), e.c32(SKIP))
        return cls, e.select(e.eq(cls, MIXED), holds, e.c32(0))

    def _element(self, k):
        """Row and column in the tile of this thread's element k."""
        e, s = self.e, self.plan
        if THREADS % s.block_n == 0:
            row = e.add(e.div(self.tid, s.block_n), e.mul(k, THREADS // s.block_n))
            return row, e.rem(self.tid, s.block_n)
        flat = e.add(e.mul(k, THREADS), self.tid)
        return e.div(flat, s.block_n), e.rem(flat, s.block_n)

    def _evaluate(self, t: _Tile) -> ir.Value:
        """The class of a tile from its elements, by the whole CTA (Note [Block map kernel])."""
        e, s = self.e, self.plan
        passes = s.block_m * s.block_n // (THREADS * UNROLL)
        loop = scf.WhileOp([e.i32, e.i1, e.i1], [e.c32(0), _false(e), e.true()])
        before = loop.before.blocks.append(e.i32, e.i1, e.i1)
        with ir.InsertionPoint(before):
            k, any_kept, all_kept = before.arguments
            undecided = e.or_(e.xor(any_kept, e.true()), all_kept)
            scf.condition(e.land(e.lt(k, passes), undecided), [k, any_kept, all_kept])
        after = loop.after.blocks.append(e.i32, e.i1, e.i1)
        with ir.InsertionPoint(after):
            k, any_kept, all_kept = after.arguments
            some, every = _false(e), e.true()
            for u in range(UNROLL):
                kept, counts = self._keep(t, e.add(e.mul(k, UNROLL), u))
                some = e.or_(some, e.land(counts, kept))
                every = e.land(every, e.or_(e.xor(counts, e.true()), kept))
            scf.yield_([e.add(k, 1), e.or_(any_kept, warp_vote(e, some, "any")),
                        e.land(all_kept, warp_vote(e, every, "all"))])
        any_kept = _cta_reduce(e, loop.results[1], "or")
        all_kept = _cta_reduce(e, loop.results[2], "and")
        return e.select(any_kept, e.select(all_kept, FULL, e.c32(MIXED)), e.c32(SKIP))

    def _keep(self, t: _Tile, k):
        """(mask_mod at element k, whether that element is inside [0, M) x [0, N))."""
        e = self.e
        row, col = self._element(k)
        i, j = e.add(t.m_lo, row), e.add(t.n_lo, col)
        counts = e.land(e.lt(i, t.m_hi), e.lt(j, t.n_hi))
        keep = emit_mask(e, region_block(self.op, MASK_MOD), [self.b, self.h, i, j], self.names)
        return keep, counts


def tile_truths(e: Emit, block: ir.Block, ranges, box, holds: bool) -> tuple[Tri, ir.Value]:
    """The mask region over `box` (Note [Tile intervals]): its Tri, and (`holds`) the
    RESIDUAL_HOLDS and INTERVAL_HOLDS bits (i32) of the conjuncts that may fail nowhere
    in it (Note [Conjuncts a tile holds]), else 0."""
    parts = MaskConjuncts.of(block)
    groups = ((parts.residual, RESIDUAL_HOLDS), (parts.interval, INTERVAL_HOLDS)) if holds else ()
    conjuncts = [c for group, _ in groups for c in group]
    truths = TileIntervals(e, block, ranges).truths(box, [yielded(block)] + [v for v, _ in conjuncts])
    fails = {}                  # a conjunct holds on the box when it may fail nowhere in it
    for (value, negated), tri in zip(conjuncts, truths[1:]):
        fails[value, negated] = tri.may_true if negated else tri.may_false
    bits = e.c32(0)
    for group, bit in groups:
        every = e.true()
        for conjunct in group:
            every = e.land(every, e.xor(fails[conjunct], e.true()))
        bits = e.or_(bits, e.select(every, e.c32(bit), e.c32(0)))
    return truths[0], bits


def sample_element(e: Emit, m_lo, m_hi, n_lo, n_hi, lane) -> tuple[ir.Value, ir.Value]:
    """(i, j) of lane's sampled element of the tile [m_lo, m_hi) x [n_lo, n_hi) (Note
    [Sampled elements]): row lane // 4 of 8 and column lane % 4 of 4, evenly spread from
    the first to the last row and key, so lanes 0, 3, 28 and 31 hold the corners."""
    rows, cols = e.sub(m_hi, m_lo), e.sub(n_hi, n_lo)
    r, c = e.div(lane, SAMPLE_COLS), e.rem(lane, SAMPLE_COLS)
    i = e.add(m_lo, e.div(e.mul(r, e.sub(rows, 1)), 32 // SAMPLE_COLS - 1))
    j = e.add(n_lo, e.div(e.mul(c, e.sub(cols, 1)), SAMPLE_COLS - 1))
    return i, j


def _false(e: Emit) -> ir.Value:
    return arith.constant(e.i1, 0)


def _i8() -> ir.Type:
    return ir.IntegerType.get_signless(8)


def _cta_reduce(e: Emit, pred: ir.Value, kind: str) -> ir.Value:
    """bar.red.{and,or}.pred across the CTA (also a barrier): i1."""
    reduction = nvvm.BarrierReduction.AND if kind == "and" else nvvm.BarrierReduction.OR
    res = nvvm.BarrierOp(e.i32, reductionOp=reduction,
                         reductionPredicate=arith.extui(e.i32, pred)).result
    return e.ne(res, 0)


# ---------------------------------------------------------------- the attention kernel's side

def blockmap_param(plan: BlockMapPlan) -> ExtraParam:
    """The attention kernel's parameter for the map: its manifest entry is `plan.scratch`."""
    return ExtraParam("scratch", SCRATCH, bytes=tuple(plan.scratch["bytes"]))


def blockmap_hooks(plan: BlockMapPlan):
    """(kv_range, tile_partial, extra_params) for the attention kernel (Note [Mask hooks]
    in kernel_spec.py), reading the map (Note [Block map ABI]): kv_range visits the first
    to the last non-SKIP block of the query block's row, with the row's FULL blocks as the
    full range when they are one contiguous run (Note [Full range from the map]), else an
    empty one; tile_partial (class != FULL) is asked about every block outside it;
    `blockmap_skip(plan)` is the `tile_skip` hook for the SKIP blocks left inside (without
    it they are correct as partial blocks: keep() drops all of their elements)."""

    def kv_range(e: Emit, c: KvCtx) -> KvRange:
        row, n_blocks = _map_row(e, plan, c)
        if c.aligned:
            # The map kernel writes a table tile's blocks from its key origin on only.
            n_blocks = e.cdiv(c.n_keys, plan.block_n)
        return warp_range(e, lambda n: _load_class(e, row, n), n_blocks)

    def tile_partial(e: Emit, c: KvCtx, n_block) -> ir.Value:
        row, _ = _map_row(e, plan, c)
        return e.ne(_load_class(e, row, n_block), FULL)

    kv_range.__qualname__ = f"{_tag(plan)}.kv_range"
    tile_partial.__qualname__ = f"{_tag(plan)}.tile_partial"
    return kv_range, tile_partial, (blockmap_param(plan),)


def warp_range(e: Emit, load_class, n_blocks, unroll: int = SCAN_UNROLL) -> KvRange:
    """The KvRange of the blocks [0, n_blocks) whose classes `load_class(n)` gives, by the
    whole warp: each lane scans its share (`scan_row`), redux.sync reduces the lanes, and
    `row_range` makes the range (every warp of the CTA alike)."""
    lane = e.and_(nvvm.read_ptx_sreg_tid_x(e.i32), 31)
    scan = scan_row(e, load_class, lane, 32, n_blocks, unroll)
    reduced = [_redux(e, x, getattr(nvvm.ReduxKind, kind)) for x, kind in
               zip(scan, ("MIN", "MAX", "MIN", "MAX", "ADD"))]
    return row_range(e, *reduced)


def scan_row(e: Emit, load_class, lane, lanes: int, n_blocks, unroll: int = SCAN_UNROLL) -> list[ir.Value]:
    """One lane's share of the row scan of `kv_range` (Note [Full range from the map]):
    blocks lane, lane + lanes, ... below n_blocks, `load_class(n)` giving the class (i32)
    of block n. Returns (lo, hi, full_lo, full_hi, full_count) of this lane's blocks: the
    first and last + 1 non-SKIP block (n_blocks, 0 when none), the same of the FULL
    blocks, and how many are FULL; the warp then reduces them by min, max, min, max, add.

    A trip takes `unroll` of the lane's blocks and issues their loads before it uses
    any, so a row of up to 32 * SCAN_UNROLL blocks costs one load latency, not one per
    block (the scan is on the attention kernel's critical path: its K/V loads need the
    range). A block past the row reads the row's last byte and counts as SKIP."""
    step = lanes * unroll
    scan = scf.ForOp(lane, n_blocks, e.c32(step), [n_blocks, e.c32(0), n_blocks, e.c32(0), e.c32(0)])
    with ir.InsertionPoint(scan.body):
        first = scan.induction_variable
        blocks = [e.add(first, k * lanes) for k in range(unroll)]
        last = e.sub(n_blocks, 1)
        classes = [load_class(e.min(n, last)) for n in blocks]
        lo, hi, full_lo, full_hi, count = scan.inner_iter_args

        def widen(pred, first_, end, n):        # [first_, end) extended by block n where pred
            return e.select(pred, e.min(first_, n), first_), e.select(pred, e.max(end, e.add(n, 1)), end)

        for n, cls in zip(blocks, classes):
            inside = e.lt(n, n_blocks)
            visit, full = e.land(inside, e.ne(cls, SKIP)), e.land(inside, e.eq(cls, FULL))
            lo, hi = widen(visit, lo, hi, n)
            full_lo, full_hi = widen(full, full_lo, full_hi, n)
            count = e.add(count, arith.extui(e.i32, full))
        scf.yield_([lo, hi, full_lo, full_hi, count])
    return list(scan.results)


def row_range(e: Emit, lo, hi, full_lo, full_hi, count) -> KvRange:
    """The KvRange of a row from its reduced scan (`scan_row`): the blocks from the first
    to the last non-SKIP one, and as the full range the FULL blocks when they are one
    contiguous run (count == full_hi - full_lo), else an empty one at lo. Always
    lo <= full_lo <= full_hi <= hi (FULL blocks are visited ones)."""
    lo = e.min(lo, hi)
    run = e.land(e.gt(count, 0), e.eq(count, e.sub(full_hi, full_lo)))
    return KvRange(lo, e.select(run, full_lo, lo), e.select(run, full_hi, lo), hi)


def blockmap_holds(plan: BlockMapPlan):
    """The `tile_holds(e, ctx, n_block) -> (interval, residual)` hook (i1s): which groups
    of conjuncts the map proves to hold on the whole of block n_block (Note [Conjuncts a
    tile holds]); only for a plan with `holds`."""
    assert plan.holds, "the map records no conjuncts for this mask"

    def holds(e: Emit, c: KvCtx, n_block):
        row, _ = _map_row(e, plan, c)
        byte = _load_byte(e, row, n_block)
        return e.ne(e.and_(byte, INTERVAL_HOLDS), 0), e.ne(e.and_(byte, RESIDUAL_HOLDS), 0)

    holds.__qualname__ = f"{_tag(plan)}.tile_holds"
    return holds


def blockmap_skip(plan: BlockMapPlan):
    """The `tile_skip(e, ctx, n_block) -> i1` hook: block n_block keeps nothing."""

    def skip(e: Emit, c: KvCtx, n_block) -> ir.Value:
        row, _ = _map_row(e, plan, c)
        return e.eq(_load_class(e, row, n_block), SKIP)

    skip.__qualname__ = f"{_tag(plan)}.tile_skip"
    return skip


def _tag(plan: BlockMapPlan) -> str:
    """What sets the hooks' code apart (for Sm80KernelSpec.cache_key)."""
    return (f"blockmap({plan.variant}, {plan.block_m}x{plan.block_n}, per_head={plan.per_head}, "
            f"aligned={plan.qtiles is not None})")


def _map_row(e: Emit, plan: BlockMapPlan, c: KvCtx) -> tuple[GlobalPtr, ir.Value]:
    """The map's row of query block c.m_block (a GlobalPtr of bytes) and its length (the
    rows' stride: a table tile's blocks past cdiv(c.n_keys, block_n) are never written)."""
    assert c.aligned == (plan.qtiles is not None), "the map and the kernel disagree on the tiles"
    if (c.block_m, c.block_n) != (plan.block_m, plan.block_n):
        raise AttncError(f"the block map has {plan.block_m}x{plan.block_n} tiles, the attention "
                         f"kernel {c.block_m}x{c.block_n}")
    n_blocks = e.cdiv(c.N, plan.block_n)
    m_blocks = tile_count(e, c.M, plan.block_m) if c.aligned else e.cdiv(c.M, plan.block_m)
    z = e.add(e.mul(c.b, e.dim("H")), c.h) if plan.per_head else c.b
    wide = e.to_i64
    first = e.mul(e.add(e.mul(wide(z), wide(m_blocks)), wide(c.m_block)), wide(n_blocks))
    return GlobalPtr(e, e.arg(blockmap_param(plan).key), 8).offset(first), n_blocks


def _load_byte(e: Emit, row: GlobalPtr, n_block) -> ir.Value:
    """Block n_block's byte of a map row. The map is read-only while the attention kernel
    runs (invariant loads), and block indices are clamped at 0 alike everywhere, so LLVM
    reads a block's byte once however many questions a step asks about it."""
    return arith.extui(e.i32, llvm.load(_i8(), row.offset(e.to_i64(e.max(n_block, 0))).ptr, invariant=True))


def _load_class(e: Emit, row: GlobalPtr, n_block) -> ir.Value:
    return e.and_(_load_byte(e, row, n_block), CLASS_BITS)


def _redux(e: Emit, x: ir.Value, kind) -> ir.Value:
    return nvvm.ReduxOp(e.i32, x, kind, e.c32(-1)).result
