"""The forward kernel's state and what both targets build alike: the CTA's coordinates and
query block, the loads (forward_loads.py), the scores' score_mod and mask, the online
softmax step, the loops' carried values, the query blocks a CTA runs, and the epilogue
(`KernelState`). A target is a `TargetLowering`: its patterns, one per attn op of the
IR's steps, and the few entries the outline calls (its GEMMs' operand addresses, its KV
steps) -- sm80.py's (`SM80`: ldmatrix and mma.sync), sm90a.py's (`SM90A`: wgmma,
overlapped steps) and sm90a_ws.py's (`SM90A_WS`: a producer warpgroup and its
consumers, whose trips take sm90a.py's patterns and add their waits and releases).
No target derives from another: each is a table of functions over the state.

Note [Two query blocks per CTA]: with `q_blocks_per_cta` = 2 (sm_80: the role's walk
over a pair of blocks, Notes [Two query blocks in the IR] in attnc/schedule/walk.py and
[The next block's loads in the IR] in walk_pairs.py) a CTA runs query blocks nb-1-c and c
(nb = cdiv(M, block_m), c = blockIdx.x < nb-1-c; one block when they meet), so under a
causal mask every CTA gets the same work. After the first block's last step
(cp.async.wait_group 0, then a CTA barrier: no warp reads Q or a K/V slot any more) the
second block's prologue loads are issued before the first block's epilogue, which
hides their latency behind the normalisation and the O stores. Both blocks are
`select`s of the loop counter: a loop-invariant block index let LLVM hoist the second
block's addresses and ranges out of the loop and hold them in registers throughout
(300 bytes of spills at head dim 64).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from mlir import ir
from mlir.dialects import nvvm, scf

from attnc.backend.epilogue import Epilogue, StagedRows
from attnc.backend.forward_loads import ForwardLoads
from attnc.backend.kernel_abi import grid_axes
from attnc.backend.kernel_spec import ForwardSpec
from attnc.backend.kv_schedule import KvSchedule, schedule
from attnc.backend.kv_steps import StepOp
from attnc.backend.mask_hooks import KvCtx, mask_hooks
from attnc.backend.nvgpu_builders import Approx, CpAsync, CtaBarrier, Emit, GlobalPtr, MmaSync, Quad, Smem
from attnc.backend.qtiles import qtiles_param, read_entry
from attnc.backend.score_masks import ElementCoords, ScoreMasker, rows_of
from attnc.backend.smem_tiles import SwizzledTile, TileLoader
from attnc.backend.softmax import OnlineSoftmax, SoftmaxState
from attnc.errors import AttncError

LOG2E = math.log2(math.e)
SMEM_SYMBOL = "attnc_dynamic_smem"


def read_grid(e: Emit, register: str, axis: str) -> ir.Value:
    """The special register `register` (ctaid, nctaid) of the grid's `axis` (x, y, z)."""
    return getattr(nvvm, f"read_ptx_sreg_{register}_{axis}")(e.i32)


def block_index(e: Emit, ctaid: ir.Value, axes: dict[str, str]) -> ir.Value:
    """The CTA's index on the query blocks' axis of the grid (`grid_axes`), read as `ctaid`.
    What LLVM knows of ctaid.y or .z (< 65535) changed its address arithmetic enough for
    ptxas to spill (sliding window, 128x64 tiles, head dim 128: 124 bytes on sm_80); opaque,
    it assembles as ctaid.x's did."""
    return ctaid if axes["block"] == "x" else e.opaque(ctaid)


@dataclass(frozen=True)
class TargetLowering:
    """A target's lowering of the forward kernel: functions over a `KernelState` `cx`.

    setup(cx)                 the target's own state on cx (its steps as read from the IR, ...)
    operand_bases(cx)         its GEMMs' operand addresses, once the coordinates are known
    steps(cx, kv)             every KV step of the current query block: (O, softmax state)
    patterns[family][op]      (cx, op, step) -> None: the pattern of each attn op of the IR's
                              steps, by family (the KV loops' trips, the last P.V, the loads)
    emit(cx)                  the kernel's outline (None: `KernelState.emit`)
    """
    name: str
    setup: Callable
    operand_bases: Callable
    steps: Callable
    patterns: Mapping[str, Mapping[str, Callable]]
    emit: Callable | None = None

    def run(self, cx: "KernelState", family: str, ops, step):
        """The patterns of `ops` of `family` on `step`, in their order; S is finished
        (score_mod and mask applied) after the op that ends the scores."""
        table = self.patterns[family]
        for op in ops:
            if op.name not in table:
                raise AttncError(f"the {self.name} lowering has no pattern for attn.{op.name} in its {family} ops")
            table[op.name](cx, op, step)
            if op is getattr(step, "scores_end", None):
                step.finish_scores()
        return step


def _cp_async_wait(cx, op, step) -> None:
    cx.cp.wait(op.count)


def _cta_barrier(cx, op, step) -> None:
    cx.bar.sync()


def _cp_async_commit(cx, op, step) -> None:
    cx.cp.commit()


# The patterns of a CTA's own copies' synchronization, as both targets' cooperative roles have them
COPY_PATTERNS = {"cp_async_wait": _cp_async_wait, "cta_barrier": _cta_barrier, "cp_async_commit": _cp_async_commit}


def _score_mod(cx, op, step) -> None:
    step.modify()


def _mask(cx, op, step) -> None:
    step.mask_op = op
    step.finish_scores()


# The patterns of the score ops, on a step's S (a `ScoredStep`), as both targets have them
SCORE_PATTERNS = {"score_mod": _score_mod, "mask": _mask}


def own_ops(ops) -> tuple:
    """(the softmax step, the mask or None) of `ops`: the ops whose choices a step built
    fused rather than op by op (sm80.py's dead-rows first step, sm90a_ws.py's first step
    issued early) takes (Note [Choices op by op])."""
    softmax = next(op for op in ops if op.name == "softmax_step")
    return softmax, next((op for op in ops if op.name == "mask"), None)


class KernelState(ForwardLoads):
    """One kernel's state while it is built at the current insertion point: its record of
    the IR (`spec`), emitter and resource builders, tiles, coordinates, masker and
    softmax, and whatever its target's `setup` adds; the target-neutral steps as methods."""

    epilogue_ops: tuple = ()    # the role's finalize and stores (StepOps), where the target reads them

    def __init__(self, spec: ForwardSpec, args: dict[str, ir.Value], target: TargetLowering):
        self.spec, self.target = spec, target
        self.e = e = Emit(args)
        self.cp = CpAsync(e)
        self.bar = CtaBarrier()
        self.mma = MmaSync(e, spec.variant.dtype)
        self.smem = Smem(e, SMEM_SYMBOL)
        self.kv_range_fn, self.keep_fn = mask_hooks(spec)
        scale_log2 = LOG2E * spec.hooks.score_mod_out if spec.hooks.score_mod else spec.scale * LOG2E
        self.softmax = OnlineSoftmax(e, Approx(e), Quad(e), scale_log2, spec.static_max, spec.choices.lazy_rescale,
                                     spec.choices.mma_row_sum)
        # O's n8 atoms per 16-row atom; with row sums on the tensor cores one more, P.1
        # (Note [Row sums on the tensor cores] in softmax.py)
        self.o_atoms = spec.variant.head_dim_v // 8 + spec.choices.mma_row_sum
        layout = spec.layout            # Note [Buffers as placed] in smem_layout.py
        self.q_tile = SwizzledTile(layout.q, spec.block_m, spec.variant.head_dim_qk)
        self.k_tile = SwizzledTile(layout.k, spec.block_n, spec.variant.head_dim_qk)
        self.v_tile = SwizzledTile(layout.v, spec.block_n, spec.variant.head_dim_v)
        self.slot_bytes = layout.slot
        # The query tile's rows [tile_row0, row_end) and its keys' origin key0 (None: the
        # grid's m_block * block_m, M and 0); n_keys: the keys from key0 on. A tile
        # table's tile sets them (Note [Document-aligned tiles] in qtiles.py).
        self.tile_row0, self.row_end, self.key0, self.n_keys = None, e.dim("M"), None, e.dim("N")
        self.key_end = None
        self.t_base = None      # the steps of the CTA's earlier query blocks (Note [Persistent CTAs])
        target.setup(self)

    def coordinates(self) -> None:
        """The CTA's and the thread's coordinates; with one query block per CTA, that
        block's too (in the order of the first kernels, which ptxas's allocation was tuned
        on)."""
        e, s = self.e, self.spec
        tid = nvvm.read_ptx_sreg_tid_x(e.i32)
        self.tid = tid
        self.warp = e.shr(tid, 5)
        self.lane = e.and_(tid, 31)
        one_block = s.plan.q_blocks_per_cta == 1
        self.m_block, self.h, self.b = self.grid_item(one_block)
        self.kv_h = e.div(self.h, e.div(e.dim("H"), e.dim("HKV")))
        if s.aligned_tiles:
            z = e.add(e.mul(self.b, e.dim("H")), self.h) if s.tiles_per_head else self.b
            self.tile_row0, self.row_end, self.key0, self.key_end = read_entry(
                e, e.arg(qtiles_param().key), z, self.m_block, e.dim("M"), s.block_m)
            self.n_keys = e.max(e.sub(e.dim("N"), self.key0), 0)     # key0 > N where M > N
        self.warp_row0 = e.mul(self.warp, 16 if s.choices.dead_rows else s.rows_per_warp)
        if one_block:
            self.set_row0(self.m_block)
        self.col0 = e.shl(e.and_(self.lane, 3), 1)
        self.loader = TileLoader(e, self.cp, self.smem, tid, s.threads)
        self.target.operand_bases(self)
        if one_block:
            self.set_masker()

    def grid_item(self, with_block: bool = True):
        """(query block, head, batch) of this CTA from the grid (the query block None
        without `with_block`): the heaviest query blocks first (under a causal mask, the
        last ones), for a shorter tail; the grid's axes as Notes [Heads first] and [Tiles
        last] say."""
        e, axes = self.e, grid_axes(self.spec)
        m_block = None
        if with_block:
            last = e.sub(read_grid(e, "nctaid", axes["block"]), 1)
            m_block = e.sub(last, block_index(e, read_grid(e, "ctaid", axes["block"]), axes))
        return m_block, read_grid(e, "ctaid", axes["head"]), read_grid(e, "ctaid", axes["batch"])

    def set_block(self, m_block) -> None:
        """Make `m_block` the query block the steps and the epilogue work on."""
        self.m_block = m_block
        self.set_row0(m_block)
        self.set_masker()

    def set_row0(self, m_block) -> None:
        # The accumulator rows/columns a lane holds: row g (+8), columns 2t, 2t+1 (+8 per atom).
        e = self.e
        self.row0 = e.add(e.add(self.first_row(m_block), self.warp_row0), e.shr(self.lane, 2))

    def first_row(self, m_block):
        """The first row of query block m_block (the tile table's, Note [Document-aligned tiles])."""
        return self.tile_row0 if self.tile_row0 is not None else self.e.mul(m_block, self.spec.block_m)

    def set_masker(self) -> None:
        self.masker = self.masker_from(self.row0)

    def masker_from(self, row0) -> ScoreMasker:
        """The masker of score rows whose first (row g of the warp's first 16-row tile) is row0."""
        e, s = self.e, self.spec
        coords = ElementCoords(e, row0, self.col0, s.block_n, self.key0, s.atom_rows, self.lane)
        score_in = s.scale if s.hooks.score_mod_in is None else s.hooks.score_mod_in
        return ScoreMasker(e, coords, self.b, self.h, s.scale, s.hooks.score_mod, self.keep_fn, s.hooks.score_bias,
                           score_in, s.hooks.row_interval, s.hooks.row_residual)

    def tensor(self, name: str, b, h) -> GlobalPtr:
        e = self.e
        elems = e.add(e.mul(e.to_i64(b), e.arg(f"stride_{name}_0")), e.mul(e.to_i64(h), e.arg(f"stride_{name}_1")))
        bits = 32 if name == "lse" or (name == "o" and self.spec.o_dtype == "f32") else 16
        return GlobalPtr(e, e.arg(name), bits).offset(elems)

    def kv_range(self, m_block=None) -> KvSchedule:
        """The hook's range for `m_block` (default: the current block) as a schedule (Note
        [Mask hooks] in mask_hooks.py, kv_schedule.py)."""
        e, s = self.e, self.spec
        # Note [Lean step loads] (forward_loads.py): a block map's range is inside the map, a
        # band's is clamped.
        clamp_top = s.choices.lean_loads and not s.blockmap
        return schedule(e, self.kv_range_fn(e, self.ctx(m_block)), self.n_keys, s.block_n, clamp_top)

    def pack_p(self, probs):
        """P as A operands of m16n8k16, in place of S's registers (Note [P as A operand]):
        p[mi][kk] = the 4 registers of rows g, g+8 and keys 16kk + {2t, 2t+8}."""
        pack = self.mma.pack
        out = []
        for mi in range(len(probs) // 2):
            top, bottom = probs[2 * mi], probs[2 * mi + 1]
            out.append([[pack(top[c], top[c + 1]), pack(bottom[c], bottom[c + 1]),
                         pack(top[c + 2], top[c + 3]), pack(bottom[c + 2], bottom[c + 3])]
                        for c in range(0, len(top), 4)])
        return out

    def scores(self, acc_s, n_block, mode: str, skip, mask: StepOp | None, masker: ScoreMasker | None = None):
        """(S of block n_block as rows, with the score_mod and (mode 'partial') the mask
        applied; the offset the softmax adds to them or None, ScoreMasker.modify);
        `skip`: the block's tile_skip answer, when asked; `mask`: the step's attn.mask,
        whose choices say how; `masker`: that of the rows of acc_s (default: the warp's)."""
        masker = self.masker if masker is None else masker
        rows, offset = masker.modify(rows_of(acc_s), n_block)
        return self.masked(rows, n_block, mode, skip, mask, masker), offset

    def masked(self, rows, n_block, mode: str, skip, mask: StepOp | None, masker: ScoreMasker | None = None,
               edge=None):
        """`rows` of block n_block with (mode 'partial') the mask applied as the step's
        attn.mask `mask` chooses (Note [Choices op by op]): a row interval tested per
        score as its interval_test says, and with its split only the conjuncts the map
        does not prove on the tile (Note [Conjuncts a tile holds] in blockmap.py)."""
        e, s = self.e, self.spec
        masker = self.masker if masker is None else masker
        if mode != "partial":
            return rows
        test = mask.choice("interval_test") if mask is not None else None
        split = mask is not None and mask.choice("split")
        if s.hooks.tile_partial is None and skip is None:
            # Every block is masked; tile_holds may still spare a part of the test.
            holds = s.hooks.tile_holds(e, self.ctx(), n_block) if split else None
            if edge is not None:
                return masker.mask_if(rows, n_block, edge, holds=holds, test=test)
            return masker.mask(rows, n_block, holds=holds, test=test)
        partial = e.gt(masker.coords.block_end(n_block), e.dim("N"))
        ctx = self.ctx()
        if s.hooks.tile_partial is not None:
            partial = e.or_(s.hooks.tile_partial(e, ctx, n_block), partial)
        holds = s.hooks.tile_holds(e, ctx, n_block) if split else None
        partial = partial if skip is None else e.or_(partial, skip)
        return masker.mask_if(rows, n_block, partial if edge is None else e.and_(edge, partial), skip, holds, test)

    def softmax_step(self, rows, state: SoftmaxState, mode: str, op, offset=None):
        """The online softmax step of attn.softmax_step `op` (a StepOp) on `rows`, plus
        `offset` (ScoreMasker.modify's)."""
        s = self.spec
        # A score_mod may give -inf (or a bias table hold it) even in a full block.
        scored = s.hooks.score_mod is not None or s.hooks.score_bias is not None
        return self.softmax.step(rows, state, check_inf=mode != "full" or scored, on_fma=op.choice("exp2_fma"),
                                 offsets=None if offset is None else [offset])

    def ctx(self, m_block=None) -> KvCtx:
        e, s = self.e, self.spec
        m_block = self.m_block if m_block is None else m_block
        return KvCtx(m_block, self.b, self.h, e.dim("M"), e.dim("N"), s.block_m, s.block_n,
                     aligned=s.aligned_tiles, n_keys=self.n_keys, row0=self.tile_row0, row_end=self.row_end,
                     key0=self.key0, key_end=self.key_end)

    @staticmethod
    def flat(acc_o) -> list:
        return [x for mi in acc_o for atom in mi for x in atom]

    def carried(self, acc_o, state: SoftmaxState) -> list:
        """The flat list [O..., m..., l...] that `unpack_carried` reads."""
        return self.flat(acc_o) + state.m + state.l

    def unpack_carried(self, values):
        """(O accumulators, softmax state) from the flat list [O..., m..., l...]."""
        s = self.spec
        n_o = s.m_atoms * self.o_atoms * 4
        return self.unflatten(values[:n_o]), SoftmaxState(values[n_o:n_o + 2 * s.m_atoms],
                                                           values[n_o + 2 * s.m_atoms:])

    def unflatten(self, flat, atoms: int | None = None):
        return tiles_of(flat, self.spec.m_atoms, atoms or self.o_atoms)

    def emit(self) -> None:
        """The kernel's outline: coordinates, then each query block's prologue, steps and
        epilogue (Note [Two query blocks per CTA]; a tile table's tile)."""
        e, s = self.e, self.spec
        self.coordinates()
        self.kv_ptr = {n: self.tensor(n, self.b, self.kv_h) for n in ("k", "v")}
        if s.aligned_tiles:
            # Note [Document-aligned tiles]: block n's keys start at key0 + n * block_n; a
            # CTA past the table's last tile returns.
            self.kv_ptr = {n: p.offset(e.mul(e.to_i64(self.key0), e.arg(f"stride_{n}_2")))
                           for n, p in self.kv_ptr.items()}
            inside = scf.IfOp(e.lt(self.tile_row0, e.dim("M")))
            with ir.InsertionPoint(inside.then_block):
                self._one_block()
                scf.yield_([])
            return
        if s.plan.q_blocks_per_cta == 1:
            self._one_block()
            return
        # Note [Two query blocks per CTA]
        ctaid = nvvm.read_ptx_sreg_ctaid_x(e.i32)
        first_block = e.sub(e.sub(e.cdiv(e.dim("M"), s.block_m), 1), ctaid)
        items = e.select(e.lt(ctaid, first_block), e.c32(2), e.c32(1))
        self.prologue(first_block)
        loop = scf.ForOp(e.c32(0), items, e.c32(1))
        with ir.InsertionPoint(loop.body):
            item = loop.induction_variable
            # Both blocks as functions of `item`: values of a loop-invariant block would
            # be hoisted out of the loop and held in registers through it.
            first = e.eq(item, 0)
            self.set_block(e.select(first, first_block, ctaid))
            acc_o, state = self.target.steps(self, self.kv_range())
            self.cp.wait(0)
            self.bar.sync()         # every warp is done with Q and the K/V slots
            then = scf.IfOp(e.lt(e.add(item, 1), items))
            with ir.InsertionPoint(then.then_block):
                following = e.select(first, ctaid, first_block)
                self.prologue(following)
                scf.yield_([])
            self.epilogue(acc_o, state)
            scf.yield_([])

    def _one_block(self) -> None:
        kv = self.prologue(self.m_block)
        acc_o, state = self.target.steps(self, kv)
        self.cp.wait(0)
        self.epilogue(acc_o, state)

    def epilogue(self, acc_o, state: SoftmaxState) -> None:
        e, s = self.e, self.spec
        if s.choices.mma_row_sum:
            # Note [Row sums on the tensor cores]: rows g and g + 8 of atom mi are 2 mi
            # and 2 mi + 1, their whole sums in the P.1 atom's accumulators 0 and 2
            state = SoftmaxState(state.m, [atoms[-1][i] for atoms in acc_o for i in (0, 2)])
            acc_o = [atoms[:-1] for atoms in acc_o]
        stage = None
        store = next((op for op in self.epilogue_ops if op.name == "store" and op.what == "o"), None)
        if store is not None and store.choice("staged"):
            # Note [Staged O]: every warp is past its last read of the tiles (and every
            # thread's copies have landed: emit's wait) before any overwrites them.
            self.bar.sync()
            rows = s.rows_per_warp
            start = e.mul(self.warp, rows * s.variant.head_dim_v * 2)
            stage = StagedRows(self.smem.address(e.add(start, s.layout.o) if s.layout.o else start),
                               e.add(self.first_row(self.m_block), self.warp_row0), rows, s.atom_rows)
        epilogue = Epilogue(e, self.softmax, s.o_dtype, self.row0, self.col0, self.lane, stage, self.row_end,
                            s.atom_rows)
        epilogue.store(acc_o, state, self.tensor("o", self.b, self.h), e.arg("stride_o_2"),
                       self.tensor("lse", self.b, self.h) if s.variant.has_lse else None, self._sink())

    def _sink(self):
        """The sink logit in the running max's units (Note [Sinks] in softmax.py)."""
        s = self.spec
        if s.hooks.sink is None:
            return None
        value = s.hooks.sink(self.e, self.h)
        return self.e.fmul(value, 1.0 / (s.hooks.score_mod_out if s.hooks.score_mod else s.scale))


class ScoredStep:
    """What a KV step built op by op does to its S (sm80.py's `_Step`, wgmma_trips.py's
    `Trip`): `rows`, with the score_mod and then the mask applied once each, where the
    step's ops ask for them, and `offset`, what the softmax adds to them (ScoreMasker.modify);
    `skip_answer()`, the block's tile_skip answer or None."""

    kernel: KernelState
    n_block = None
    mode = "partial"
    rows = offset = None
    modded = masked = False
    mask_op = None          # the step's attn.mask, once its pattern ran
    edge = None             # i1: the step's block is masked (Note [Key loops] in sm80.py); None: by its mode

    def skip_answer(self):
        return None

    def modify(self) -> None:
        """The score_mod on S (once)."""
        if not self.modded:
            self.rows, self.offset = self.kernel.masker.modify(self.rows, self.n_block)
            self.modded = True

    def finish_scores(self) -> None:
        """The score_mod and the mask on S, those not yet applied."""
        self.modify()
        if not self.masked:
            self.rows = self.kernel.masked(self.rows, self.n_block, self.mode, self.skip_answer(), self.mask_op,
                                           edge=self.edge)
            self.masked = True


def tiles_of(flat: list, tiles: int, n_atoms: int) -> list:
    """flat [x...] -> acc[tile][atom][4] of `tiles` 16-row tiles of n_atoms n8 atoms."""
    return [[flat[(mi * n_atoms + a) * 4:(mi * n_atoms + a + 1) * 4] for a in range(n_atoms)]
            for mi in range(tiles)]
