"""Document-aligned query tiles: for a mask with a conjunct `P[.., i] == P[.., j]` (a
documents mask), query tiles that start where a document starts, with key blocks that
start there too, in place of the fixed grid of query and key blocks.

    qtiles[b, h_m, t]  (4 x i32)  row0, row_end, key0, key_end

Tile t of (b, h_m) holds the rows [row0, row_end) (at most block_m of them) and its key
block n the keys [key0 + n * block_n, + block_n) below N. With the tiles aligned, key_end
is the end of the run the tile lies in (Note [Ranges from the runs] in run_ranges.py);
on the grid it is -1 (nothing known). Entries past the last tile are (M, M, 0, -1).
`qtiles_plan` decides the shapes, `emit_qtiles_kernel` writes the kernel that fills the
table on the GPU (launched before the block map, which then classifies the tiles of this
table: blockmap.py, `BlockMapPlan.qtiles`; or alone, run_ranges.py).

Note [Document-aligned tiles]: on the fixed grid a document of 1000 positions starts
inside a query block and inside a key block. Every query block of it then has a MIXED
first key block (the document's start), a query block that straddles two documents
visits the whole earlier document with every tile MIXED, and the diagonal crosses two
64-key blocks of a 128-row block. At M = N = 8192, documents of 1000 + causal, 128x64
tiles: 345 FULL + 296 MIXED tiles a head on the grid, 450 FULL + 131 MIXED (all of them
on the diagonal, none testing the ids) with tiles that start at the documents' starts.

The tiles come from the ids at run time, so any sorted ids work (FlashAttention's varlen
layout, derived from the mask instead of given as cumulative lengths):

* segments: the runs of equal v(i) = P[.., i] over the rows i < M; a tile starts at each
  run's start and every block_m rows after it within the run, with key0 = the run's start
  and key_end = the run's end.
* Why the keys below key0 can be left out: the conjunct drops key j for row i unless
  v(j) == v(i). When v is non-decreasing over [0, M), a run starting at s has v(j) <=
  v(s - 1) < v(s) = v(i) for every key j < s and row i of the run, so the mask keeps none
  of them. The kernel checks that v is non-decreasing; the keys >= key0 are all in the
  tile's blocks and classified by the block map, so nothing else is assumed -- or, without
  a map, from key_end: the keys in [key_end, M) are dropped for the same reason
  (Note [Ranges from the runs] in run_ranges.py).
* Otherwise (ids not sorted, or runs whose tiles, cdiv(length, block_m) each, outnumber
  the table's) the table is the fixed grid: row0 = t * block_m, key_end = -1, and key0 =
  the start of the run that holds row0 where the ids are sorted (every row of the tile
  is in that run or a later one: the reason above drops every key below it), else 0.
  With documents the table cannot hold (a partial tile each that outgrows the spare
  quarter: at M = 8192 and block_m = 128, equal documents of 1-102, 129-204, 257-305 or
  385-409 positions) the tiles then visit their own few key blocks, each MIXED, instead
  of the whole causal range: documents of 96 + causal, M = N = 8192, head dim 128, ran
  slower than the causal kernel with key0 = 0 and 17 times faster with it
  (results/sm80_h200.md, "Document-aligned tiles").

The table holds SPARE_NUM * cdiv(M, SPARE_DEN * block_m) tiles, 5/4 of the grid's: room
for a partial tile per run when runs are 4 * block_m long on average (documents of 1000
at block_m = 128 need 66 of the 80 at M = 8192); the attention kernel's grid is as long,
and a CTA past the last tile returns at once.

Where the table is the default (choice_defaults.py): a kernel of one query block per CTA
without a producer warpgroup, on sm_80 and on sm_90a (whose one-warpgroup kernel takes its
rows and key origin the same way), and sm_100a's without persistent CTAs (Note [Tile
table on sm_100a] in sm100a_tiles.py, a tile its CTA's block_m x q_tiles rows). Documents of 1000 +
causal ran 6-11 % faster than the same kernel on the grid, on sm_80 and sm_90a
(results/sm80_h200.md and sm90a_h200.md, "Document-aligned tiles").

The table's order is the order the tiles were found in (but for the end of the last
batch's: Note [Longest tiles last]), and the attention kernel takes it
from the last entry to the first (Note [Heads first] in kernel_abi.py): each document's tiles
heaviest first, neighbouring tiles of a document running together and sharing its keys in
the L2. Sorting the table by work instead (longest first over all documents, which a
list-scheduling model says shortens the grid's tail from 4-5 % to under 1 %) ran the k-th
tile of every document together, whose keys do not fit in the L2: documents + causal on
sm_80 ran 5-10 % slower, sm_90a the same (results/sm80_h200.md, "Document-aligned
tiles").

Note [Longest tiles last]: the grid's last CTAs decide when it ends. On the heads-first
grid (Note [Heads first] in kernel_abi.py: every head of one entry, then the next entry, batch
by batch) the last CTAs to start are the last batch's first entries: documents' tiles of
every length, each document's longest first. A slot that starts a long one late runs on
after the others have run out of work: documents of 1000 + causal at M = N = 8192, head
dim 128 on sm_80, the slots sat idle 4.7 % of the launch after their last CTA
(bench/cta_timeline.py), which a list-scheduling model of the grid reproduces
(bench/tail_model.py), and in which the model's longest-first order over the whole grid
leaves 0.6 %. (At head dim 64, 64-row tiles and 32 heads, the model's tail is 0.4 %:
nothing to gain there.) Over the
whole grid that order runs every document's k-th tile together, whose keys do not fit in
the L2 (above: slower). So only the end is reordered: with `tail_per_sm` = k (QTilesPlan;
attn-kernel-choices' tail_waves times ForwardSpec.resident_ctas), the tables of the last
batch move their first R = min(total, cdiv(k * %nsmid, H), THREADS) entries (total: the
tiles written), the last R * H CTAs to start, into order of row_end - key0 (the keys from
the run's start to the tile's end: a tile's key blocks under a causal mask, and no worse
a guess than the table's order elsewhere), the longest at the highest index, which starts
first; equal ones keep their order. Any order of the entries is correct: a CTA reads only
its own, and a block map is built over the table as it is then. The table kernel does it
last, step (4) of Note [Tile table kernel], and not where the runtime launches the small
grid instead (Note [Small grids] in kernel_abi.py: its order starts every (b, h)'s longest tile
first already), which it tells from the grid's CTAs against %nsmid as the runtime does
from the SM count. (%nsmid may exceed the SM count: R and the small-grid bound then err
on the large side, which costs nothing but order.)
With tail_waves 2 the idle end falls to 1.3 % and the launch runs about 2 % faster at
head dim 128 (within the rounds' spread at 64), for about 0.5 us more in the table kernel
(results/sm80_h200.md, "Longest tiles last").

Note [Tile table kernel]: one CTA of THREADS threads per (b, h_m); thread t walks the
rows [t * C, (t + 1) * C), C = cdiv(M, THREADS) rounded up to whole trips of UNROLL rows
(threads whose rows start past M walk none: below THREADS * UNROLL rows, all but the
first), with each trip's loads issued first, twice:
(1) whether v is non-decreasing there, its first and last run start, and how many tiles
start from its first run start on; a CTA max-scan gives each thread the last run start
before its rows, and with it the tiles that start in its rows before its first run
start, in closed form; a CTA sum-scan of its tiles gives its first tile's index and the
total;
(2) the entries, walking again. A thread writes row_end of the tile before each of its
tiles (the tiles are contiguous), thread 0 that of the last;
(3) key_end, thread t for tiles t, t + THREADS, ...: after a barrier, a run's last tile
(the next has another key0) writes its row_end as the key_end of the run's first tile,
t - (row0 - key0) / block_m; after another, the run's other tiles copy it from there.
(Written in (2), key_end took a loop per run start inside the unrolled walk, which
spilled the kernel's registers and made it slower; a store per run start there still
spilled: results/sm80_h200.md, "Tile table kernel".)
(4) in the last batch's tables, Note [Longest tiles last]: after a barrier, thread t < R
puts the weight of entry t in shared memory; after another it counts there the entries
to start before its own, and writes entry t (held in its registers) to its place.
The scans: shfl.up within a warp, then the warps' totals through shared memory, one a
lane, scanned the same way in every warp.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mlir import ir
from mlir.dialects import arith, gpu, llvm, nvvm, scf

from attnc.backend.bundle import kernel_symbol
from attnc.backend.hooks import load_param, size_dims
from attnc.backend.mask_hooks import ExtraParam
from attnc.backend.nvgpu_builders import CtaBarrier, Emit, GlobalPtr, Smem, _asm, _op, st_shared_b32
from attnc.frontend.variant import Tensor
from attnc.ir import PARAM, defining_op, int_constant

SCRATCH = "qtiles"
THREADS = 1024
UNROLL = 8
ENTRY_BYTES = 16
SPARE_NUM, SPARE_DEN = 5, 4         # the table: SPARE_NUM * cdiv(M, SPARE_DEN * block_m) tiles
TAIL_WAVES = 2                      # Note [Longest tiles last]: the default on the heads-first grid
MAX_TAIL_WAVES = 64                 # (R is at most THREADS anyway)
SCAN_BYTES = 2 * 32 * 4             # the two scans' warp totals
WEIGHT_BYTES = THREADS * 4          # the weights of Note [Longest tiles last], after them

DimValue = str | int


# ---------------------------------------------------------------- the pattern

@dataclass(frozen=True)
class SegmentIds:
    """`P[idx] == P[idx']` of the mask: `param` read at `indices`, with i for a row and j
    for a key at the axis marked 'pos'; every other index is 'b', 'h' or an int. (The
    table is per head when the mask reads h anywhere, as the block map is: `per_head`.)"""
    param: str
    indices: tuple          # 'b' | 'h' | 'pos' | int, per axis of the param


def segment_ids(block: ir.Block, params: list[Tensor]) -> Optional[SegmentIds]:
    """The first top-level conjunct of the mask region `block` of the form P[.., i, ..]
    == P[.., j, ..] with P an i32 param (hook_walks.MaskConjuncts), else None."""
    found = segment_conjunct(block, params)
    return found[1] if found else None


def segment_conjunct(block: ir.Block, params: list[Tensor]) -> Optional[tuple[ir.Value, SegmentIds]]:
    """(the i1 of the conjunct, its ids) of `segment_ids`, or None."""
    from attnc.backend.hook_walks import MaskConjuncts
    args = list(block.arguments)
    for value, negated in MaskConjuncts.of(block).residual:
        op = defining_op(value)
        if negated or op is None or op.name != "arith.cmpi" or _predicate(op) != 0:
            continue
        reads = [defining_op(v) for v in op.operands]
        if any(r is None or r.name != PARAM for r in reads) or reads[0].operands[0] != reads[1].operands[0]:
            continue
        tensor = params[ir.BlockArgument(reads[0].operands[0]).arg_number - 3]
        if tensor.dtype != "i32":
            continue
        template = _template(list(reads[0].operands[1:]), list(reads[1].operands[1:]), args)
        if template is not None:
            return value, SegmentIds(tensor.name, template)
    return None


def _predicate(op: ir.Operation) -> int:
    return ir.IntegerAttr(op.attributes["predicate"]).value


def _template(row: list, key: list, args: list) -> Optional[tuple]:
    """The index template when `row` reads i where `key` reads j (or the other way) at
    exactly one axis and both read the same b, h or constant everywhere else."""
    b, h, i, j = args
    out, pos = [], 0
    for x, y in zip(row, key):
        if {x, y} == {i, j}:
            pos += 1
            out.append("pos")
        elif x == y and x == b:
            out.append("b")
        elif x == y and x == h:
            out.append("h")
        elif int_constant(x) is not None and int_constant(x) == int_constant(y):
            out.append(int_constant(x))
        else:
            return None
    return tuple(out) if pos == 1 and len(row) == len(key) else None


# ---------------------------------------------------------------- the plan

@dataclass(frozen=True)
class QTilesPlan:
    variant: str
    block_m: int
    per_head: bool                  # one table per (b, h) (the ids read h; else per b)
    batch: DimValue
    heads: DimValue
    seq_q: DimValue
    dims: tuple[str, ...]           # every symbolic dim, passed as i32 in this order
    param: Tensor
    ids: SegmentIds
    tail_per_sm: int = 0            # Note [Longest tiles last]: CTAs per SM at the grid's end (0: off)
    small_grid_per_sm: int = 0      # and the CTAs per SM up to which the runtime launches the
                                    # bundle's small grid instead (Note [Small grids]; 0: none)

    @property
    def symbol(self) -> str:
        return kernel_symbol(self.variant, "qtiles")

    @property
    def tiles(self) -> list:
        """The table's tiles per (b, h_m), as manifest factors."""
        return table_factors(self.seq_q, self.block_m)

    @property
    def scratch(self) -> dict:
        return {"kind": "scratch", "name": SCRATCH,
                "bytes": [self.batch, self.heads if self.per_head else 1, *self.tiles, ENTRY_BYTES]}

    @property
    def kernel_params(self) -> list[dict]:
        return ([self.scratch] + [{"kind": "dim", "name": d, "type": "i32"} for d in self.dims]
                + [{"kind": "ptr", "tensor": self.param.name}])

    @property
    def kernel(self) -> dict:
        z = [self.batch] + ([self.heads] if self.per_head else [])
        return {"name": "qtiles", "symbol": self.symbol, "block": [THREADS, 1, 1],
                "dynamic_smem_bytes": SCAN_BYTES + (WEIGHT_BYTES if self.tail_per_sm else 0),
                "grid": [[1], [1], z],
                "params": self.kernel_params, "role": "mask", "fills": [SCRATCH]}


def cdiv_factor(size: DimValue, block: int):
    """cdiv(size, block) as a manifest factor."""
    return -(-size // block) if isinstance(size, int) else ["cdiv", size, block]


def table_factors(seq_q: DimValue, block_m: int) -> list:
    """The table's tiles per (b, h_m) as manifest factors (`tile_count` in the kernels)."""
    return [SPARE_NUM, cdiv_factor(seq_q, SPARE_DEN * block_m)]


def qtiles_plan(variant, block_m: int, ids: SegmentIds, per_head: bool, tail_per_sm: int = 0,
                small_grid_per_sm: int = 0) -> QTilesPlan:
    """The table for `variant`'s ids at `block_m`; `per_head`: the block map's (a table
    per head when the mask reads h anywhere, as the map is); `tail_per_sm` and
    `small_grid_per_sm`: Note [Longest tiles last]."""
    param = next(p for p in variant.params if p.name == ids.param)
    return QTilesPlan(variant.name, block_m, per_head, variant.batch, variant.heads, variant.seq_q,
                      tuple(variant.dims), param, ids, tail_per_sm, small_grid_per_sm)


def tile_count(e: Emit, M, block_m: int):
    """The table's tiles per (b, h_m) (i32), as QTilesPlan.tiles says."""
    return e.mul(e.cdiv(M, SPARE_DEN * block_m), SPARE_NUM)


def qtiles_param(plan: Optional[QTilesPlan] = None) -> ExtraParam:
    """The attention kernel's parameter for the table, with its size from `plan` (its key,
    `e.arg(qtiles_param().key)`, needs none)."""
    return ExtraParam("scratch", SCRATCH, bytes=tuple(plan.scratch["bytes"]) if plan else ())


def read_entry(e: Emit, table: ir.Value, z, t, M, block_m: int) -> tuple:
    """(row0, row_end, key0, key_end) of tile t of slot z (i32s) from the table pointer."""
    index = e.add(e.mul(e.to_i64(z), e.to_i64(tile_count(e, M, block_m))), e.to_i64(t))
    ptr = GlobalPtr(e, table, 32).offset(e.mul(index, e.c64(ENTRY_BYTES // 4))).ptr
    vec = llvm.load(ir.VectorType.get([4], e.i32), ptr, alignment=16, invariant=True)
    return tuple(llvm.extractelement(vec, e.c32(k)) for k in range(4))


# ---------------------------------------------------------------- the kernel

def emit_qtiles_kernel(plan: QTilesPlan, result, ip: ir.InsertionPoint, smem_symbol: str):
    """Add the tile-table `gpu.func` (Note [Tile table kernel]) at `ip` (a gpu.module body
    that declares the dynamic shared memory `smem_symbol`)."""
    from attnc.backend.blockmap import MapNames, _arg_key, _arg_type
    params = plan.kernel_params
    types = [_arg_type(p) for p in params]
    with ip, ir.Location.name(plan.symbol):
        func = gpu.GPUFuncOp(ir.TypeAttr.get(ir.FunctionType.get(types, [])), plan.symbol,
                             kernel=True, known_block_size=[THREADS, 1, 1])
        entry = func.body.blocks.append(*types)
    with ir.InsertionPoint(entry), ir.Location.name(plan.symbol):
        args = {_arg_key(p): a for p, a in zip(params, entry.arguments)}
        # Launched whatever M is (its grid is (1, 1, B * H_m)).
        never_empty = frozenset(d for d in (plan.batch,) + ((plan.heads,) if plan.per_head else ())
                                if isinstance(d, str))
        names = MapNames([plan.param], never_empty, size_dims(result.variant))
        _TableKernel(plan, args, names, smem_symbol).emit()
        gpu.ReturnOp([])
    return func


class _TableKernel:
    def __init__(self, plan: QTilesPlan, args: dict, names, smem_symbol: str):
        self.plan, self.names = plan, names
        self.table = args[SCRATCH]
        self.e = Emit({k: a for k, a in args.items() if k != SCRATCH})
        self.smem_symbol = smem_symbol

    def _size(self, d: DimValue):
        return self.names.size(self.e, d)

    def _id(self, i):
        """v(i): the ids' param at row i (clamped, as the mask reads it)."""
        e = self.e
        index = {"b": self.b, "h": self.h, "pos": i}
        indices = [index[x] if isinstance(x, str) else e.c32(x) for x in self.plan.ids.indices]
        return load_param(e, self.names, self.plan.param.name, indices, self.names.never_empty)

    def emit(self) -> None:
        e, p = self.e, self.plan
        self.smem = Smem(e, self.smem_symbol)
        tid = nvvm.read_ptx_sreg_tid_x(e.i32)
        self.tid, self.warp, self.lane = tid, e.shr(tid, 5), e.and_(tid, 31)
        z = nvvm.read_ptx_sreg_ctaid_z(e.i32)
        if p.per_head:
            self.b, self.h = e.div(z, self._size(p.heads)), e.rem(z, self._size(p.heads))
        else:
            self.b, self.h = z, e.c32(0)
        M = self.M = self._size(p.seq_q)
        self.tiles = tile_count(e, M, p.block_m)
        self.base = GlobalPtr(e, self.table, 32).offset(e.mul(e.to_i64(z), e.to_i64(e.mul(self.tiles, 4))))
        # Whole trips a thread (Note [Tile table kernel]): a thread whose rows start past M
        # walks none.
        chunk = e.mul(e.cdiv(e.cdiv(M, THREADS), UNROLL), UNROLL)
        self.c0 = e.min(e.mul(tid, chunk), M)
        self.c1 = e.min(e.add(self.c0, chunk), M)
        before = self._id(e.max(e.sub(self.c0, 1), 0))

        # (1) sorted; the first and the last run start in this thread's rows (c1, -1: none);
        # the tiles that start from the first on (the rows before it are of a run that
        # started in an earlier thread's rows: counted once the scan gives its start).
        def sorted_step(i, v, prev, state, inside):
            ok, first, last, count = state
            start = self._starts_run(i, v, prev)
            ok = e.land(ok, e.or_(e.eq(i, 0), e.ge(v, prev)))
            last = e.select(start, i, last)
            tile = e.land(e.ge(last, 0), e.eq(e.rem(e.sub(i, last), p.block_m), 0))
            return ok, e.select(start, e.min(first, i), first), last, e.add(count, arith.extui(e.i32, tile))
        ok, first, last, count = self._walk(before, [e.true(), self.c1, e.c32(-1), e.c32(0)], sorted_step)
        sorted_all = e.ne(nvvm.BarrierOp(e.i32, reductionOp=nvvm.BarrierReduction.AND,
                                           reductionPredicate=arith.extui(e.i32, ok)).result, 0)
        run0, _ = self._scan(last, "max", 0)

        # The tiles that start in this thread's rows: in [c0, first), those of run0's run.
        ahead = e.sub(e.cdiv(e.sub(first, run0), p.block_m), e.cdiv(e.sub(self.c0, run0), p.block_m))
        first_tile, total = self._scan(e.add(count, ahead), "add", 32 * 4)
        aligned = e.land(sorted_all, e.le(total, self.tiles))

        # (2) the entries: aligned, or the grid.
        grid_tiles = e.cdiv(M, p.block_m)
        then = scf.IfOp(aligned, has_else=True)
        with ir.InsertionPoint(then.then_block):
            def write_step(i, v, prev, state, inside):
                run, t = state
                run = e.select(self._starts_run(i, v, prev), i, run)
                starts = e.eq(e.rem(e.sub(i, run), p.block_m), 0)
                guard = scf.IfOp(e.land(inside, starts))    # a trip's rows past c1 are past M
                with ir.InsertionPoint(guard.then_block):
                    self._store(t, 0, i)
                    self._store(t, 2, run)
                    before_t = scf.IfOp(e.gt(t, 0))
                    with ir.InsertionPoint(before_t.then_block):
                        self._store(e.sub(t, 1), 1, i)
                        scf.yield_([])
                    scf.yield_([])
                return run, e.add(t, arith.extui(e.i32, starts))
            self._walk(before, [run0, first_tile], write_step)
            last_tile = scf.IfOp(e.land(e.eq(tid, 0), e.gt(total, 0)))
            with ir.InsertionPoint(last_tile.then_block):
                self._store(e.sub(total, 1), 1, M)
                scf.yield_([])
            # (3) key_end: a run's last tile gives its row_end to the run's first, which
            # gives it to the others.
            CtaBarrier().sync()         # the entries of every thread are written
            self._strided(e.c32(0), total, lambda t: self._run_end_to_first(t, total))
            CtaBarrier().sync()
            self._strided(e.c32(0), total, self._run_end_from_first)
            if p.tail_per_sm:
                self._longest_last(total)
            scf.yield_([])
        with ir.InsertionPoint(then.else_block):
            # The grid, each tile's key0 the start of its first row's run where the ids are
            # sorted (Note [Document-aligned tiles]: no later row keeps a key below it).
            def grid_step(i, v, prev, state, inside):
                run = e.select(self._starts_run(i, v, prev), i, state[0])
                guard = scf.IfOp(e.land(inside, e.eq(e.rem(i, p.block_m), 0)))
                with ir.InsertionPoint(guard.then_block):
                    self._entry(e.div(i, p.block_m), i, e.min(e.add(i, p.block_m), M),
                                e.select(sorted_all, run, e.c32(0)))
                    scf.yield_([])
                return [run]
            self._walk(before, [run0], grid_step)
            scf.yield_([])
        used = e.select(aligned, total, grid_tiles)
        self._strided(used, self.tiles, lambda t: self._entry(t, M, M, e.c32(0)))

    def _longest_last(self, total) -> None:
        """Note [Longest tiles last]: in the last batch's tables, the first R entries
        (the grid's last R query tiles of every head) in order of row_end - key0, so that
        the CTAs, which take the entries from the last to the first, start them longest
        first; not where the runtime launches the small grid (whose own order starts every
        (b, h)'s longest tile first). Thread t < R holds entry t and puts its weight in
        shared memory, where after a barrier every such thread counts the entries to
        start before its own."""
        e, p = self.e, self.plan
        heads, sms = self._size(p.heads), nvvm.read_ptx_sreg_nsmid(e.i32)
        wanted = e.eq(self.b, e.sub(self._size(p.batch), 1))
        if p.small_grid_per_sm:
            ctas = e.mul(e.mul(e.to_i64(self.tiles), e.to_i64(heads)), e.to_i64(self._size(p.batch)))
            wanted = e.land(wanted, e.gt(ctas, e.to_i64(e.mul(sms, p.small_grid_per_sm))))  # the heads-first grid's
        last = scf.IfOp(wanted)                     # CTA-uniform: the barriers inside are every thread's
        with ir.InsertionPoint(last.then_block):
            CtaBarrier().sync()     # key_end is written
            span = e.div(e.add(e.mul(sms, p.tail_per_sm), e.sub(heads, 1)), heads)
            count = e.min(e.min(total, span), THREADS)          # a thread an entry
            mine = e.lt(self.tid, count)
            slot = lambda t: self.smem.address(e.add(SCAN_BYTES, e.shl(t, 2)))     # noqa: E731
            held = e.max(e.min(self.tid, e.sub(total, 1)), 0)
            entry = llvm.load(ir.VectorType.get([4], e.i32), self._field(held, 0), alignment=16)
            own = e.sub(llvm.extractelement(entry, e.c32(1)), llvm.extractelement(entry, e.c32(2)))
            put = scf.IfOp(mine)
            with ir.InsertionPoint(put.then_block):
                st_shared_b32(slot(self.tid), own)
                scf.yield_([])
            CtaBarrier().sync()     # every weight is there; every moved entry is in its thread's registers
            # Launched before this entry after the reorder: the longer ones, and of the equally
            # long the later ones (launched first before it too).
            loop = scf.ForOp(e.c32(0), e.select(mine, count, e.c32(0)), e.c32(1), [e.c32(0)])
            with ir.InsertionPoint(loop.body):
                j = loop.induction_variable
                other = _ld_shared_b32(e, slot(j))
                ahead = e.or_(e.gt(other, own), e.land(e.eq(other, own), e.gt(j, self.tid)))
                scf.yield_([e.add(loop.inner_iter_args[0], arith.extui(e.i32, ahead))])
            move = scf.IfOp(mine)
            with ir.InsertionPoint(move.then_block):
                to = e.sub(e.sub(count, 1), loop.results[0])
                llvm.store(entry, self._field(to, 0), alignment=16)
                scf.yield_([])
            scf.yield_([])

    def _starts_run(self, i, v, prev):
        """Row i starts a run of equal ids (v = v(i), prev = v(i - 1))."""
        return self.e.or_(self.e.eq(i, 0), self.e.ne(v, prev))

    def _walk(self, before, init: list, step) -> list:
        """state = step(i, v(i), v(i - 1), state, inside) over this thread's rows, in order: a
        trip takes UNROLL rows, those past c1 (`inside` false) keep the state but still run
        `step`, which must not write for them."""
        e = self.e
        loop = scf.ForOp(self.c0, self.c1, e.c32(UNROLL), [before] + init)
        with ir.InsertionPoint(loop.body):
            first = loop.induction_variable
            rows = [e.add(first, u) for u in range(UNROLL)]
            values = [self._id(e.min(i, e.sub(self.M, 1))) for i in rows]
            prev, *state = loop.inner_iter_args
            for i, v in zip(rows, values):
                inside = e.lt(i, self.c1)
                new = step(i, v, prev, state, inside)
                state = [e.select(inside, n, o) for n, o in zip(new, state)]
                prev = v
            scf.yield_([prev] + state)
        return list(loop.results)[1:]

    def _scan(self, x, kind: str, smem_offset: int):
        """(the exclusive scan of x over the CTA's threads in order, the CTA's total):
        kind 'max' (identity -1) or 'add' (identity 0)."""
        e = self.e
        combine, identity = (e.max, -1) if kind == "max" else (e.add, 0)
        assert THREADS == 32 * 32, "a warp's lanes scan the warps' totals, one each"
        inclusive = _inclusive_scan(e, x, self.lane, combine)
        exclusive = e.select(e.eq(self.lane, 0), e.c32(identity), _shfl_up(e, inclusive, 1))
        slot = lambda w: self.smem.address(e.add(smem_offset, e.shl(w, 2)))   # noqa: E731
        last = scf.IfOp(e.eq(self.lane, 31))
        with ir.InsertionPoint(last.then_block):
            st_shared_b32(slot(self.warp), inclusive)
            scf.yield_([])
        CtaBarrier().sync()
        # The warps' totals, scanned again across the lanes of every warp (lane w: warp w's).
        warps = _inclusive_scan(e, _ld_shared_b32(e, slot(self.lane)), self.lane, combine)
        before = e.select(e.eq(self.warp, 0), e.c32(identity), e.shfl_idx(warps, e.sub(self.warp, 1)))
        return combine(before, exclusive), e.shfl_idx(warps, e.c32(31))

    def _field(self, t, field: int):
        """The address of a field (0-3) of entry t."""
        e = self.e
        return self.base.offset(e.add(e.mul(e.to_i64(t), e.c64(4)), e.c64(field))).ptr

    def _store(self, t, field: int, value) -> None:
        llvm.store(value, self._field(t, field))

    def _load(self, t, field: int):
        """A field of entry t as this CTA wrote it (a plain load: not through the
        read-only cache, after the barrier that orders the stores before it)."""
        return llvm.load(self.e.i32, self._field(t, field))

    def _first_of_run(self, t):
        """The first tile of tile t's run: t - (row0 - key0) / block_m (a run's tiles are
        consecutive, block_m rows apart from its start)."""
        e = self.e
        return e.sub(t, e.div(e.sub(self._load(t, 0), self._load(t, 2)), self.plan.block_m))

    def _run_end_to_first(self, t, total) -> None:
        """If tile t is its run's last (the next tile has another key0, or there is none),
        its row_end is the run's end: key_end of the run's first tile."""
        e = self.e
        following = e.min(e.add(t, 1), e.sub(total, 1))
        last = e.or_(e.eq(e.add(t, 1), total), e.ne(self._load(following, 2), self._load(t, 2)))
        then = scf.IfOp(last)
        with ir.InsertionPoint(then.then_block):
            self._store(self._first_of_run(t), 3, self._load(t, 1))
            scf.yield_([])

    def _run_end_from_first(self, t) -> None:
        e = self.e
        first = self._first_of_run(t)
        then = scf.IfOp(e.ne(first, t))
        with ir.InsertionPoint(then.then_block):
            self._store(t, 3, self._load(first, 3))
            scf.yield_([])

    def _entry(self, t, row0, row_end, key0) -> None:
        """A whole entry, with key_end -1: nothing known of the ids (the grid, or past the last tile)."""
        vec = llvm.mlir_undef(ir.VectorType.get([4], self.e.i32))
        for k, x in enumerate((row0, row_end, key0, self.e.c32(-1))):
            vec = llvm.insertelement(vec, x, self.e.c32(k))
        ptr = self.base.offset(self.e.mul(self.e.to_i64(t), self.e.c64(4))).ptr
        llvm.store(vec, ptr, alignment=16)

    def _strided(self, lo, hi, body) -> None:
        e = self.e
        loop = scf.ForOp(e.add(lo, self.tid), e.max(hi, e.add(lo, self.tid)), e.c32(THREADS))
        with ir.InsertionPoint(loop.body):
            body(loop.induction_variable)
            scf.yield_([])


def _inclusive_scan(e: Emit, x, lane, combine):
    """The inclusive scan of x over a warp's lanes in order."""
    for d in (1, 2, 4, 8, 16):
        up = _shfl_up(e, x, d)
        x = e.select(e.ge(lane, d), combine(x, up), x)
    return x


def _shfl_up(e: Emit, x, delta: int):
    return _op("nvvm.shfl.sync", [x.type], [e.c32(-1), x, e.c32(delta), e.c32(0)],
               {"kind": "#nvvm<shfl_kind up>"}).result


def _ld_shared_b32(e: Emit, addr):
    return _asm([e.i32], [addr], "ld.shared.b32 $0, [$1];", "=r,r").result


