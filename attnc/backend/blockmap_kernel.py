"""The block-map kernel (blockmap.py says what the map holds and `blockmap_plan` its shapes):
`emit_blockmap_kernel` adds it to a gpu.module, `build_blockmap_module` builds a module of
it alone. Notes [Conjuncts a tile holds] and [Block map ABI] are blockmap.py's, [Loads
first] and [Interval transfer functions] blockmap_intervals.py's.

Note [Block map kernel]: one CTA of 128 threads per `groups` (4 by default: attn-mask-kernels's
option, Note [The block map's program]) groups of TILES = 4 consecutive key blocks of a
query block, grid (cdiv(N, 4 * groups * block_n), cdiv(M, block_m)
or the table's tiles, B * H_m) (z = b * H_m + h_m): a CTA per tile made the launch
itself the cost (32768 CTAs at B = 4, M = N = 8192, 128x64: 21 us with no work in them),
and the first two steps need one warp per tile. The CTA takes its groups
one after the other (those that hold a block below the row's end); in group g, warp w
takes key block 4 * (groups * blockIdx.x + g) + w (four groups a CTA ran fastest against
one and eight: results/sm80_h200.md, "Block map kernel"). In each group:

1. The tile class of `attn-analyze-masks`: a tile it proves SKIP or FULL (e.g. the upper
   triangle of a causal mask) is decided without evaluating anything.
2. For the tiles it leaves MIXED, Note [Tile intervals] and Note [Sampled elements] (each
   where attn.classify turns it on: else the tile stays undecided).
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
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, gpu, llvm, nvvm, scf

from attnc.analysis.to_arith import inline_function
from attnc.backend.blockmap import (FULL, INTERVAL_HOLDS, MIXED, RESIDUAL_HOLDS, SCRATCH, SKIP, THREADS,
                                    TILES, UNROLL, BlockMapPlan, DimValue, MapNames, _arg_key, _arg_type,
                                    _attention, _i8, _redux, emit_mask)
from attnc.backend.blockmap_intervals import Ival, TileIntervals, Tri, WarpRange, point
from attnc.backend.hook_walks import MaskConjuncts
from attnc.backend.hooks import size_dims
from attnc.backend.nvgpu_builders import Emit, GlobalPtr, warp_vote
from attnc.backend.qtiles import SCRATCH as QTILES, read_entry
from attnc.ir import MASK_MOD, region_block, yielded
from attnc.passes.analyze_masks import mask_functions

MIN_CTAS = 8                 # CTAs per SM that ptxas must fit (64 registers a thread)
SAMPLE_COLS = 4              # lane l samples row l // 4 of 8 and column l % 4 of 4 of its tile
_UNDECIDED = 3               # a tile left to the element walk (never written)


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
        """The CTA's `groups` groups of TILES key blocks, one after the other (those that
        hold a block below n_blocks: a CTA-uniform count)."""
        e, groups = self.e, self.plan.groups
        first = e.mul(cta, groups)
        left = e.cdiv(e.max(e.sub(self.n_blocks, e.mul(first, TILES)), 0), TILES)
        loop = scf.ForOp(e.c32(0), e.min(left, groups), e.c32(1))
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
        the 32 sampled elements (Note [Sampled elements]) differ, else _UNDECIDED (each
        step where the plan has it); holds:
        the RESIDUAL_HOLDS and INTERVAL_HOLDS bits of a MIXED tile (Note [Conjuncts a tile
        holds]), else 0."""
        e = self.e
        block = region_block(self.op, MASK_MOD)
        kept = truth = None
        if self.plan.samples:
            # The samples' loads first, then the walks' (Note [Loads first]), then their uses.
            i, j = sample_element(e, t.m_lo, t.m_hi, t.n_lo, t.n_hi, lane)
            kept = emit_mask(e, block, [self.b, self.h, i, j], self.names)
        if self.plan.intervals:
            ranges = WarpRange(e, self.names, lane, 32,
                               lambda x, kind: _redux(e, x, getattr(nvvm.ReduxKind, kind.upper())))
            box = [point(self.b), point(self.h), Ival(t.m_lo, e.sub(t.m_hi, 1)), Ival(t.n_lo, e.sub(t.n_hi, 1))]
            truth, holds = tile_truths(e, block, ranges, box, self.plan.holds)
        cls = e.c32(_UNDECIDED)
        if kept is not None:
            mixed = e.land(warp_vote(e, kept, "any"), warp_vote(e, e.xor(kept, e.true()), "any"))
            cls = e.select(mixed, MIXED, cls)
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


def _cta_reduce(e: Emit, pred: ir.Value, kind: str) -> ir.Value:
    """bar.red.{and,or}.pred across the CTA (also a barrier): i1."""
    reduction = nvvm.BarrierReduction.AND if kind == "and" else nvvm.BarrierReduction.OR
    res = nvvm.BarrierOp(e.i32, reductionOp=reduction,
                         reductionPredicate=arith.extui(e.i32, pred)).result
    return e.ne(res, 0)
