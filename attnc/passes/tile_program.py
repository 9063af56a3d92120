"""The L2 tile program's loop nest, built by attn-tile and re-cut by attn-analyze-masks
(the ops: attnc/ir/tiles.py; the level: attn.irdl.mlir, "L2, the tile program").

`to_kernel` turns one L1 attn.attention into an attn.kernel whose region loads the Q
tile, runs the KV loop and stores O (and LSE); `replace_kv_loops` replaces the KV
loop(s) of a kernel by loops over given block ranges, each with or without the mask
op, threading the running max, sum and O through them. Every KV loop is an `scf.for`
over i32 steps marked `kv_blocks = "all" | "mixed" | "full"`, whose first op is the
key block of its step (Note [Key blocks top down]).

Note [Key blocks top down]: a query block visits its key blocks from the highest down,
so that the blocks a mask cuts at the diagonal and the ragged end of N come first and
the fully kept ones after them run without the mask (as the kernels of
attnc/backend/kv_schedule.py walk them). Each KV loop runs over steps t, and its body's
first op is the block of step t,

    %top = arith.subi %end, %c1          the highest block of the range (its step 0)
    scf.for %t = %lo to %hi step %c1 ... {
      %n = arith.subi %top, %t           the key block of step t
      ...
    } {kv_blocks = ...}

A range of loops shares its `%top`, and the loops follow one another in step space (a
loop starts at the step where the one before ended; the first at step 0). The lowerings
build their walk from these steps: sm_80's and sm_90a's count them as the kernel's step
(Note [Steps op by op] in attnc/backend/kv_steps.py), sm_100a's lower the loop as it
stands. `kv_block`, `first_kv_block` and `block_of_step` are how passes read and write a
loop's blocks.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, scf

from attnc.ir import DIM, MASK_MOD, SCORE_MOD, SINK, YIELD, error_at, get_bool, get_int, get_shape, get_str
from attnc.ir import tiles
from attnc.ir.tiles import tile_type

KV_LOOP = "kv_blocks"          # the marker attribute of a KV loop, and which blocks it runs


@dataclass(frozen=True)
class TileTypes:
    """The types of the program's tiles, from the kernel's attributes."""
    q: ir.Type
    k: ir.Type
    v: ir.Type
    s: ir.Type
    p: ir.Type
    rows: ir.Type
    acc: ir.Type
    o: ir.Type

    @staticmethod
    def of(op: ir.Operation, out_dtype: str) -> "TileTypes":
        block_m, block_n = get_int(op, "block_m"), get_int(op, "block_n")
        d_qk, d_v, dtype = get_int(op, "head_dim_qk"), get_int(op, "head_dim_v"), get_str(op, "dtype")
        if dtype not in ("bf16", "f16", "f32"):     # f32: refused by the lowerings, which name the MMA
            raise error_at(op, f'attribute dtype = "{dtype}": q, k and v are "bf16" or "f16"')
        return TileTypes(q=tile_type([block_m, d_qk], dtype, "smem"), k=tile_type([block_n, d_qk], dtype, "smem"),
                         v=tile_type([block_n, d_v], dtype, "smem"), s=tile_type([block_m, block_n], "f32", "reg"),
                         p=tile_type([block_m, block_n], dtype, "reg"), rows=tile_type([block_m], "f32", "reg"),
                         acc=tile_type([block_m, d_v], "f32", "reg"), o=tile_type([block_m, d_v], out_dtype, "reg"))


@dataclass(frozen=True)
class KvRange:
    """Steps [lo, hi) of a key range whose step 0 visits block `top`, run with the mask
    op (`masked`) or without; `block_map`: the mask op takes the block map's class of each
    block (Note [Key blocks top down])."""
    lo: ir.Value
    hi: ir.Value
    top: ir.Value
    masked: bool
    block_map: bool = False


HookSource = Callable[[], ir.Block]     # a fresh block of a hook's region for each op holding it


# --- attn-tile: L1 -> the program -------------------------------------------------------
def to_kernel(attention: ir.Operation) -> ir.Operation:
    """Replace `attention` by its attn.kernel (the attributes it has, tile included)."""
    attrs = {name: attention.attributes[name] for name in attention.attributes}
    with attention.context, attention.location:
        kernel = ir.Operation.create(tiles.KERNEL, results=[r.type for r in attention.results],
                                     operands=list(attention.operands), attributes=attrs, regions=1,
                                     ip=ir.InsertionPoint(attention))
        i32 = tiles.i32()
        body = kernel.regions[0].blocks.append(i32, i32, i32)
        hooks = {k: attention.regions[k].blocks[0] for k, key in _HAS.items() if get_bool(attention, key)}
        hooks[SINK] = attention.regions[SINK].blocks[0]
        for old, new in zip(attention.results, kernel.results):
            old.replace_all_uses_with(new)
        with ir.InsertionPoint(body):
            _program(kernel, body, hooks)
    attention.erase()
    return kernel


_HAS = {SCORE_MOD: "has_score_mod", MASK_MOD: "has_mask_mod"}


def rebuild_program(kernel: ir.Operation) -> ir.Operation:
    """Build the kernel's program anew for the tile its attributes give (attn-tile run
    again), with one KV loop over all blocks and the hooks its ops hold now."""
    from attnc.ir.kernel import hook_holder, hook_indices

    body = kernel.regions[0].blocks[0]
    old = list(body.operations)
    hooks = {k: hook_holder(kernel, k).regions[0].blocks[0] for k in hook_indices(kernel)}
    with kernel.context, kernel.location, ir.InsertionPoint.at_block_begin(body):
        _program(kernel, body, hooks)
    for op in reversed(old):
        op.erase()
    return kernel


def _program(kernel: ir.Operation, body: ir.Block, hooks: dict[int, ir.Block]) -> None:
    """Note [Q tiles of a CTA]: with q_tiles = T > 1 the CTA's query block is T Q tiles
    of block_m rows, each with its own Q, running max, sum and O and its own copy of every
    op on them (tagged `q_tile`): the KV loops load each K and V once for all of them,
    and the mask analysis classifies key blocks for the whole query block (a block is
    fully kept only where every tile keeps all of it). A KV step computes every tile's S
    before any tile's softmax, as FlashAttention-4's MMA warp issues S0 and S1 back to
    back: a role that runs both tiles' GEMMs then waits for P0 only after issuing S1."""
    q, k, v = kernel.operands
    b, h, m_block = body.arguments
    out_dtype = str(ir.RankedTensorType(kernel.results[0].type).element_type)
    types = TileTypes.of(kernel, out_dtype)
    for t in q_tile_indices(kernel):
        with tiles.for_q_tile(t):
            tiles.load(q, "q", [b, h, m_block], types.q)
    state = []
    for _ in q_tile_indices(kernel):
        state += [tiles.fill(float("-inf"), types.rows), tiles.fill(0.0, types.rows), tiles.fill(0.0, types.acc)]
    blocks = kv_block_count(kernel)
    zero = arith.constant(tiles.i32(), 0)
    several = len(q_tile_indices(kernel)) > 1
    score = _once(hooks[SCORE_MOD], several) if SCORE_MOD in hooks else None
    mask = _once(hooks[MASK_MOD], several) if MASK_MOD in hooks else None
    top = arith.subi(blocks, arith.constant(tiles.i32(), 1))
    state = _kv_loop(kernel, KvRange(zero, blocks, top, mask is not None), state, score, mask, "all")
    sink = _once(hooks[SINK], several)
    for k, t in enumerate(q_tile_indices(kernel)):
        row_max, row_sum, acc = state[3 * k:3 * k + 3]
        with tiles.for_q_tile(t):
            o, lse = tiles.finalize(acc, row_max, row_sum, h, types.o, sink())
            tiles.store(o, "o", [b, h, m_block])
            if len(kernel.results) > 1:
                tiles.store(lse, "lse", [b, h, m_block])
    while _discard:
        _discard.pop().erase()
    ir.Operation.create(YIELD, results=[], operands=[])


def q_tile_indices(kernel: ir.Operation) -> list[int | None]:
    """The `q_tile` of each Q tile's ops: [None] for a CTA of one (Note [Q tiles of a CTA])."""
    count = get_int(kernel, "q_tiles") if "q_tiles" in kernel.attributes else 1
    return list(range(count)) if count > 1 else [None]


def _once(block: ir.Block, copies: bool = False) -> HookSource:
    """The hook's block itself, then (`copies`: for a CTA's further Q tiles) copies of it."""
    reserve: list[ir.Operation] = []
    if copies:
        reserve.append(block.owner.clone())     # a copy of its holder, erased with the loop's
        _discard.append(reserve[0])
    region = _region_index(block.owner, block) if copies else 0
    taken: list[bool] = []

    def source() -> ir.Block:
        if not taken:
            taken.append(True)
            return block
        clone = reserve[0].clone()
        _discard.append(clone)
        return clone.regions[region].blocks[0]
    return source


def _region_index(op: ir.Operation, block: ir.Block) -> int:
    return next(k for k, r in enumerate(op.regions) if len(r.blocks) and r.blocks[0] == block)


def kv_block_count(kernel: ir.Operation) -> ir.Value:
    """cdiv(N, block_n) as i32 (N: axis 2 of k, a dim or a fixed size)."""
    n = dim_value(get_shape(kernel, "k_shape")[2])
    block_n = arith.constant(tiles.i32(), get_int(kernel, "block_n"))
    one = arith.constant(tiles.i32(), 1)
    return arith.divsi(arith.addi(n, arith.subi(block_n, one)), block_n)


def dim_value(dim: str | int) -> ir.Value:
    if isinstance(dim, int):
        return arith.constant(tiles.i32(), dim)
    return ir.Operation.create(DIM, results=[tiles.i32()], operands=[],
                               attributes={"name": ir.StringAttr.get(dim)}).result


# --- the KV loops -----------------------------------------------------------------------
def kv_loops(kernel: ir.Operation) -> list[ir.Operation]:
    """The kernel's KV loops, in program order."""
    return [op.operation for op in kernel.regions[0].blocks[0].operations
            if op.operation.name == "scf.for" and KV_LOOP in op.operation.attributes]


def step_block_op(loop: ir.Operation) -> ir.Operation | None:
    """The first op of scf.for `loop`'s body where it is `%n = arith.subi %top, %t`, %top
    defined before the loop: the key block of the trip's step (Note [Key blocks top down]);
    else None."""
    block = loop.regions[0].blocks[0]
    first = next(iter(block.operations), None)
    if first is None or first.operation.name != "arith.subi" or first.operands[1] != block.arguments[0] \
            or first.operands[0] in list(block.arguments):
        return None
    return first.operation


def kv_block_op(loop: ir.Operation) -> ir.Operation:
    """`step_block_op` of KV loop `loop`, refused at the loop where it has none."""
    found = step_block_op(loop)
    if found is None:
        raise error_at(loop, "a KV loop's body starts with the key block of its step, `%n = arith.subi %top, "
                             "%t` with %top defined before the loop (Note [Key blocks top down] in "
                             "attnc/passes/tile_program.py)")
    return found


def kv_block(loop: ir.Operation) -> ir.Value:
    """The key block a trip of KV loop `loop` visits."""
    return kv_block_op(loop).result


def first_kv_block(loop: ir.Operation) -> ir.Value:
    """The key block of step 0 of KV loop `loop`'s range, where its first loop starts: the
    range's top, a value defined before the loops."""
    return kv_block_op(loop).operands[0]


def block_of_step(loop: ir.Operation, step: ir.Value) -> ir.Value:
    """The key block that step `step` of KV loop `loop`'s key range visits, built at the
    insertion point."""
    return arith.subi(first_kv_block(loop), step)


def replace_kv_loops(kernel: ir.Operation, ranges: Callable[[], Sequence[KvRange]]) -> None:
    """Replace the kernel's KV loops by one loop per range `ranges()` gives (built at
    the first loop's place), in order, keeping the hooks the first loops hold."""
    old = kv_loops(kernel)
    first = old[0]
    score_op = _first(first, tiles.SCORE_MOD_OP)
    mask_op = next((o for loop in old for o in [_first(loop, tiles.MASK_OP)] if o is not None), None)
    with kernel.context, first.location, ir.InsertionPoint(first):
        state = list(first.operands)[3:]
        for k, r in enumerate(ranges()):
            kind = ("mixed" if r.masked else "full") if mask_op is not None else "all"
            state = _kv_loop(kernel, r, state, _copies(score_op), _copies(mask_op) if r.masked else None, kind)
    for result, value in zip(old[-1].results, state):
        result.replace_all_uses_with(value)
    for loop in reversed(old):
        loop.erase()
    _erase_dead(kernel)


_PURE = (DIM, "arith.constant", "arith.addi", "arith.subi", "arith.divsi", "arith.minsi", "arith.maxsi")


def _erase_dead(kernel: ir.Operation) -> None:
    """Erase the program's index arithmetic (loop bounds, dims) that nothing reads."""
    body = kernel.regions[0].blocks[0]
    erased = True
    while erased:
        erased = False
        for op in reversed(list(body.operations)):
            if op.name in _PURE and not any(list(r.uses) for r in op.results):
                op.operation.erase()
                erased = True


def _first(loop: ir.Operation, name: str) -> ir.Operation | None:
    return next((o.operation for o in loop.regions[0].blocks[0].operations if o.operation.name == name), None)


def _copies(op: ir.Operation | None) -> HookSource | None:
    """A source of copies of `op`'s hook block (None without the op)."""
    if op is None:
        return None

    def copy() -> ir.Block:
        clone = op.clone()          # at the insertion point; erased once its block moved
        _discard.append(clone)
        return clone.regions[0].blocks[0]
    return copy


_discard: list = []         # the clones _copies made for the loop being built


def _kv_loop(kernel: ir.Operation, r: KvRange, state: list, score: HookSource | None,
             mask: HookSource | None, kind: str) -> list[ir.Value]:
    """One KV loop over [r.lo, r.hi): the running (max, sum, acc) in, out."""
    q, k, v = kernel.operands
    body = kernel.regions[0].blocks[0]
    b, h, m_block = body.arguments
    q_tiles = [o.result for o in body.operations if o.name == tiles.LOAD]      # the Q tiles (Note [Q tiles of a CTA])
    out_dtype = str(ir.RankedTensorType(kernel.results[0].type).element_type)
    types = TileTypes.of(kernel, out_dtype)
    if q_tiles and q_tiles[0].type != types.q:
        # a dump edited in its attributes (block_m, head_dim_qk, dtype) and not in its tiles
        raise error_at(kernel, f"the kernel's attributes (block_m, head_dim_qk, dtype) make Q's tile {types.q}, "
                               f"but the program loads {q_tiles[0].type}: they must agree")
    one = arith.constant(tiles.i32(), 1)
    loop = scf.ForOp(r.lo, r.hi, one, state)
    loop.operation.attributes[KV_LOOP] = ir.StringAttr.get(kind)
    with ir.InsertionPoint(loop.body):
        n = arith.subi(r.top, loop.induction_variable)
        carried = list(loop.inner_iter_args)
        k_tile = tiles.load(k, "k", [b, h, n], types.k)
        block_class = None          # the block map's class of the block, read once for every Q tile
        probs, out, scores = [], [], []
        for q_tile, t in zip(q_tiles, q_tile_indices(kernel)):
            with tiles.for_q_tile(t):
                scores.append(tiles.mma(q_tile, k_tile, "qk", types.s))     # every tile's S first
        for s, t, (row_max, row_sum, acc) in zip(scores, q_tile_indices(kernel), _triples(carried)):
            with tiles.for_q_tile(t):
                if score is not None:
                    s = tiles.hook_op(tiles.SCORE_MOD_OP, s, [b, h, m_block, n], score())
                if mask is not None:
                    if r.block_map and block_class is None:
                        with tiles.for_q_tile(None):
                            block_class = tiles.block_map_read(m_block, n, b, h)
                    coords = [b, h, m_block, n] + ([block_class] if r.block_map else [])
                    s = tiles.hook_op(tiles.MASK_OP, s, coords, mask())
                p, row_max, row_sum, factor = tiles.softmax_step(s, row_max, row_sum, types.p)
                probs.append(p)
                out.append([row_max, row_sum, tiles.rescale(acc, factor)])
        v_tile = tiles.load(v, "v", [b, h, n], types.v)
        for p, t, values in zip(probs, q_tile_indices(kernel), out):
            with tiles.for_q_tile(t):
                values[2] = tiles.mma(p, v_tile, "pv", types.acc, values[2])
        scf.YieldOp([x for values in out for x in values])
    while _discard:
        _discard.pop().erase()
    return list(loop.results)


def _triples(values: list) -> list[tuple]:
    """(max, sum, O) of each Q tile from the loop's carried values."""
    return [tuple(values[k:k + 3]) for k in range(0, len(values), 3)]


# --- attn-analyze-masks: the loops by tile class ----------------------------------------
def split_kv_loops(kernel: ir.Operation, kv_range_fn: str, segments: int, dims: Sequence[str],
                   block_map: bool, map_range: bool = False) -> None:
    """Replace the kernel's KV loops by three per segment of `kv_range_fn`'s answer, the
    highest segment first, each walked top down (Note [Key blocks top down]): the mixed
    blocks above the fully kept ones, the fully kept ones (no mask op), the mixed ones
    below them; `block_map`: the mixed loops read each block's class; `map_range`: the
    range is the block map row's (one segment, attn.block_map_range) instead."""
    old_ranges = _program_ops(kernel, (tiles.KV_RANGE, tiles.BLOCK_MAP_RANGE))

    def ranges() -> list[KvRange]:
        b, h, m_block = kernel.regions[0].blocks[0].arguments
        if map_range:
            bounds = tiles.block_map_range(m_block, b, h)
        else:
            args = [m_block, b, h] + [dim_value(d) for d in dims]
            bounds = tiles.kv_range(kv_range_fn, args, 2 * segments + 2)
        full_start, full_end = bounds[-2:]
        one, zero = arith.constant(tiles.i32(), 1), arith.constant(tiles.i32(), 0)
        found = []
        for start, end in reversed(list(zip(bounds[0:-2:2], bounds[1:-2:2]))):
            first_full = arith.minsi(arith.maxsi(full_start, start), end)
            after_full = arith.minsi(arith.maxsi(full_end, first_full), end)
            top = arith.subi(end, one)
            above, below, steps = (arith.subi(end, x) for x in (after_full, first_full, start))
            found += [KvRange(zero, above, top, True, block_map), KvRange(above, below, top, False),
                      KvRange(below, steps, top, True, block_map)]
        return found

    replace_kv_loops(kernel, ranges)
    _erase_unused(kernel, old_ranges)


def read_tile_table(kernel: ir.Operation, param: str | None) -> None:
    """Put the tile table's read of `param`'s ids at the top of the program (None: no
    table; one there from before goes)."""
    _erase_unused(kernel, _program_ops(kernel, (tiles.TILE_TABLE_READ,)))
    if param is None:
        return
    body = kernel.regions[0].blocks[0]
    b, h, m_block = body.arguments
    with kernel.context, kernel.location, ir.InsertionPoint.at_block_begin(body):
        tiles.tile_table_read(param, b, h, m_block)


def _program_ops(kernel: ir.Operation, names: tuple[str, ...]) -> list[ir.Operation]:
    return [op.operation for op in kernel.regions[0].blocks[0].operations if op.operation.name in names]


def _erase_unused(kernel: ir.Operation, ops: list[ir.Operation]) -> None:
    """Erase `ops` of the kernel's program and then the dims and constants only they read."""
    for op in ops:
        op.erase()
    _erase_dead(kernel)
