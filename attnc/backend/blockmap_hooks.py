"""The attention kernel's mask hooks (Note [Mask hooks] in mask_hooks.py) answered from the
block map (blockmap.py, Notes [Block map ABI] and [Conjuncts a tile holds]): `blockmap_hooks`
(kv_range, tile_partial and the map's parameter), `blockmap_skip` and `blockmap_holds`, and
the warp's scan of a map row that run_ranges.py shares (`warp_range`, `scan_row`,
`row_range`).

Note [Full range from the map]: the attention kernel's `kv_range` (blockmap_hooks) scans
the map's row of its query block, each lane every 32nd block (all warps alike), for the
first and last non-SKIP blocks and for the FULL ones: their first, last + 1 and count,
reduced over the warp by redux.sync min/max/add. When the FULL blocks form one
contiguous run (count == last + 1 - first) it is the full range, whose blocks the kernel
then computes without keep() and without asking tile_partial; otherwise (none, or
several runs) the full range is empty and every block is asked, as before. Either way
lo <= full_lo <= full_hi <= hi.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm, nvvm, scf

from attnc.backend.blockmap import (CLASS_BITS, FULL, INTERVAL_HOLDS, RESIDUAL_HOLDS, SCRATCH, SKIP, BlockMapPlan,
                                    _i8, _redux)
from attnc.backend.mask_hooks import ExtraParam, KvCtx, KvRange
from attnc.backend.nvgpu_builders import Emit, GlobalPtr
from attnc.backend.qtiles import tile_count
from attnc.errors import AttncError

SCAN_UNROLL = 4              # map bytes per lane and trip of the attention kernel's row scan


def blockmap_param(plan: BlockMapPlan) -> ExtraParam:
    """The attention kernel's parameter for the map: its manifest entry is `plan.scratch`."""
    return ExtraParam("scratch", SCRATCH, bytes=tuple(plan.scratch["bytes"]))


def blockmap_hooks(plan: BlockMapPlan):
    """(kv_range, tile_partial, extra_params) for the attention kernel (Note [Mask hooks]
    in mask_hooks.py), reading the map (Note [Block map ABI]): kv_range visits the first
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

    return holds


def blockmap_skip(plan: BlockMapPlan):
    """The `tile_skip(e, ctx, n_block) -> i1` hook: block n_block keeps nothing."""

    def skip(e: Emit, c: KvCtx, n_block) -> ir.Value:
        row, _ = _map_row(e, plan, c)
        return e.eq(_load_class(e, row, n_block), SKIP)

    return skip


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
