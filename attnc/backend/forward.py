"""The forward kernel's body as both targets build it: the CTA's coordinates and query
block, the loads (forward_loads.py), the scores' score_mod and mask, the online softmax
step, the loops' carried values, the query blocks a CTA runs, and the epilogue
(`ForwardKernel`). What a target adds are its GEMMs and its KV steps: sm80.py's
(`Sm80Forward`: ldmatrix and mma.sync, the steps built op by op from the IR) and
sm90a.py's (`Sm90aForward`: wgmma, overlapped steps; sm90a_ws.py's producer
warpgroup). Neither target derives from the other; both derive from this.

Note [Two query blocks per CTA]: with `q_blocks_per_cta` = 2 a CTA runs query blocks
nb-1-c and c (nb = cdiv(M, block_m), c = blockIdx.x < nb-1-c; one block when they meet),
so under a causal mask every CTA gets the same work. After the first block's last step
(cp.async.wait_group 0, then a CTA barrier: no warp reads Q or a K/V slot any more) the
second block's prologue loads are issued before the first block's epilogue, which
hides their latency behind the normalisation and the O stores. Both blocks are
`select`s of the loop counter: a loop-invariant block index let LLVM hoist the second
block's addresses and ranges out of the loop and hold them in registers throughout
(300 bytes of spills at head dim 64).
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import nvvm, scf

from attnc.backend.epilogue import Epilogue, StagedRows
from attnc.backend.forward_loads import ForwardLoads
from attnc.backend.kernel_spec import ForwardSpec
from attnc.backend.kv_schedule import KvSchedule, schedule
from attnc.backend.mask_hooks import KvCtx, mask_hooks
from attnc.backend.nvgpu_builders import Approx, CpAsync, CtaBarrier, Emit, GlobalPtr, MmaSync, Quad, Smem
from attnc.backend.qtiles import qtiles_param, read_entry
from attnc.backend.score_masks import ElementCoords, ScoreMasker, rows_of
from attnc.backend.smem_tiles import SwizzledTile, TileLoader
from attnc.backend.softmax import OnlineSoftmax, SoftmaxState

LOG2E = math.log2(math.e)
SMEM_SYMBOL = "attnc_dynamic_smem"


class ForwardKernel(ForwardLoads):
    """Emits a target's kernel body at the current insertion point; a target's class gives
    `_operand_bases` (its GEMMs' operand addresses) and `_steps` (every KV step of the
    current query block)."""

    def __init__(self, spec: ForwardSpec, args: dict[str, ir.Value]):
        self.spec = spec
        self.e = e = Emit(args)
        self.cp = CpAsync(e)
        self.bar = CtaBarrier()
        self.mma = MmaSync(e, spec.dtype)
        self.smem = Smem(e, SMEM_SYMBOL)
        self.kv_range_fn, self.keep_fn = mask_hooks(spec)
        scale_log2 = LOG2E * spec.score_mod_out if spec.score_mod else spec.scale * LOG2E
        self.softmax = OnlineSoftmax(e, Approx(e), Quad(e), scale_log2, spec.static_max, spec.exp2_fma,
                                     spec.lazy_rescale, spec.mma_row_sum)
        # O's n8 atoms per 16-row atom; with row sums on the tensor cores one more, P.1
        # (Note [Row sums on the tensor cores] in softmax.py)
        self.o_atoms = spec.head_dim_v // 8 + spec.mma_row_sum
        layout = spec.layout            # Note [Buffers as placed] in smem_layout.py
        self.q_tile = SwizzledTile(layout.q, spec.block_m, spec.head_dim_qk)
        self.k_tile = SwizzledTile(layout.k, spec.block_n, spec.head_dim_qk)
        self.v_tile = SwizzledTile(layout.v, spec.block_n, spec.head_dim_v)
        self.slot_bytes = layout.slot
        # The query tile's rows [tile_row0, row_end) and its keys' origin key0 (None: the
        # grid's m_block * block_m, M and 0); n_keys: the keys from key0 on. A tile
        # table's tile sets them (Note [Document-aligned tiles] in qtiles.py).
        self.tile_row0, self.row_end, self.key0, self.n_keys = None, e.dim("M"), None, e.dim("N")
        self.key_end = None

    def _coordinates(self) -> None:
        """The CTA's and the thread's coordinates; with one query block per CTA, that
        block's too (in the order of the first kernels, which ptxas's allocation was tuned
        on)."""
        e, s = self.e, self.spec
        tid = nvvm.read_ptx_sreg_tid_x(e.i32)
        self.tid = tid
        self.warp = e.shr(tid, 5)
        self.lane = e.and_(tid, 31)
        one_block = s.q_blocks_per_cta == 1
        self.m_block, self.h, self.b = self._grid_item(one_block)
        self.kv_h = e.div(self.h, e.div(e.dim("H"), e.dim("HKV")))
        if s.aligned_tiles:
            z = e.add(e.mul(self.b, e.dim("H")), self.h) if s.tiles_per_head else self.b
            self.tile_row0, self.row_end, self.key0, self.key_end = read_entry(
                e, e.arg(qtiles_param().key), z, self.m_block, e.dim("M"), s.block_m)
            self.n_keys = e.max(e.sub(e.dim("N"), self.key0), 0)     # key0 > N where M > N
        self.warp_row0 = e.mul(self.warp, 16 if s.dead_rows else s.rows_per_warp)
        if one_block:
            self._set_row0(self.m_block)
        self.col0 = e.shl(e.and_(self.lane, 3), 1)
        self.loader = TileLoader(e, self.cp, self.smem, tid, s.threads)
        self._operand_bases()
        if one_block:
            self._set_masker()

    def _grid_item(self, with_block: bool = True):
        """(query block, head, batch) of this CTA from the grid (the query block None
        without `with_block`): the heaviest query blocks first (under a causal mask, the
        last ones), for a shorter tail; the grid's axes as Notes [Heads first] and [Tiles
        last] say."""
        e, s = self.e, self.spec
        count, index, head = nvvm.read_ptx_sreg_nctaid_x, nvvm.read_ptx_sreg_ctaid_x, nvvm.read_ptx_sreg_ctaid_y
        batch = nvvm.read_ptx_sreg_ctaid_z
        if s.tiles_last:
            count, index, head = nvvm.read_ptx_sreg_nctaid_z, nvvm.read_ptx_sreg_ctaid_z, nvvm.read_ptx_sreg_ctaid_x
            batch = nvvm.read_ptx_sreg_ctaid_y
        elif s.heads_first:
            count, index, head = nvvm.read_ptx_sreg_nctaid_y, nvvm.read_ptx_sreg_ctaid_y, nvvm.read_ptx_sreg_ctaid_x
        m_block = None
        if with_block:
            last = e.sub(count(e.i32), 1)
            ctaid = index(e.i32)
            if s.heads_first or s.tiles_last:
                # What LLVM knows of ctaid.y or .z (< 65535) changed its address arithmetic enough
                # for ptxas to spill (sliding window, 128x64 tiles, head dim 128: 124 bytes
                # on sm_80); opaque, it assembles as ctaid.x's did.
                ctaid = e.opaque(ctaid)
            m_block = e.sub(last, ctaid)
        return m_block, head(e.i32), batch(e.i32)

    def _operand_bases(self) -> None:
        """The target's operand addresses of the Q, K and V tiles (in `_coordinates`)."""
        raise NotImplementedError

    def _steps(self, kv: KvSchedule):
        """Every KV step of the current block: (O accumulators, softmax state)."""
        raise NotImplementedError

    def _set_block(self, m_block) -> None:
        """Make `m_block` the query block the steps and the epilogue work on."""
        self.m_block = m_block
        self._set_row0(m_block)
        self._set_masker()

    def _set_row0(self, m_block) -> None:
        # The accumulator rows/columns a lane holds: row g (+8), columns 2t, 2t+1 (+8 per atom).
        e = self.e
        self.row0 = e.add(e.add(self._first_row(m_block), self.warp_row0), e.shr(self.lane, 2))

    def _first_row(self, m_block):
        """The first row of query block m_block (the tile table's, Note [Document-aligned tiles])."""
        return self.tile_row0 if self.tile_row0 is not None else self.e.mul(m_block, self.spec.block_m)

    def _set_masker(self) -> None:
        self.masker = self._masker_from(self.row0)

    def _masker_from(self, row0) -> ScoreMasker:
        """The masker of score rows whose first (row g of the warp's first 16-row tile) is row0."""
        e, s = self.e, self.spec
        coords = ElementCoords(e, row0, self.col0, s.block_n, self.key0, s.atom_rows)
        score_in = s.scale if s.score_mod_in is None else s.score_mod_in
        return ScoreMasker(e, coords, self.b, self.h, s.scale, s.score_mod, self.keep_fn, s.score_bias,
                           score_in, s.row_interval, s.interval_test, s.row_residual)

    def _tensor(self, name: str, b, h) -> GlobalPtr:
        e = self.e
        elems = e.add(e.mul(e.to_i64(b), e.arg(f"stride_{name}_0")), e.mul(e.to_i64(h), e.arg(f"stride_{name}_1")))
        bits = 32 if name == "lse" or (name == "o" and self.spec.o_dtype == "f32") else 16
        return GlobalPtr(e, e.arg(name), bits).offset(elems)

    def _kv_range(self, m_block=None) -> KvSchedule:
        """The hook's range for `m_block` (default: the current block) as a schedule (Note
        [Mask hooks] in mask_hooks.py, kv_schedule.py)."""
        e, s = self.e, self.spec
        # Note [Lean step loads] (forward_loads.py): a block map's range is inside the map, a
        # band's is clamped.
        clamp_top = s.lean_loads and not s.blockmap
        return schedule(e, self.kv_range_fn(e, self._ctx(m_block)), self.n_keys, s.block_n, clamp_top)

    def _pack_p(self, probs):
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

    def _scores(self, acc_s, n_block, mode: str, skip, masker: ScoreMasker | None = None):
        """S of block n_block as rows, with the score_mod and (mode 'partial') the mask
        applied; `skip`: the block's tile_skip answer, when asked; `masker`: that of the
        rows of acc_s (default: the warp's)."""
        masker = self.masker if masker is None else masker
        return self._masked(masker.modify(rows_of(acc_s), n_block), n_block, mode, skip, masker)

    def _masked(self, rows, n_block, mode: str, skip, masker: ScoreMasker | None = None):
        """`rows` of block n_block with (mode 'partial') the mask applied."""
        e, s = self.e, self.spec
        masker = self.masker if masker is None else masker
        if mode != "partial":
            return rows
        if s.tile_partial is None and skip is None:
            # Every block is masked; tile_holds may still spare a part of the test.
            holds = s.tile_holds(e, self._ctx(), n_block) if s.split_mask else None
            return masker.mask(rows, n_block, holds=holds)
        partial = e.gt(masker.coords.block_end(n_block), e.dim("N"))
        ctx = self._ctx()
        if s.tile_partial is not None:
            partial = e.or_(s.tile_partial(e, ctx, n_block), partial)
        holds = s.tile_holds(e, ctx, n_block) if s.split_mask else None
        return masker.mask_if(rows, n_block, partial if skip is None else e.or_(partial, skip), skip, holds)

    def _softmax_step(self, rows, state: SoftmaxState, mode: str):
        s = self.spec
        # A score_mod may give -inf (or a bias table hold it) even in a full block.
        scored = s.score_mod is not None or s.score_bias is not None
        return self.softmax.step(rows, state, check_inf=mode != "full" or scored)

    def _ctx(self, m_block=None) -> KvCtx:
        e, s = self.e, self.spec
        m_block = self.m_block if m_block is None else m_block
        return KvCtx(m_block, self.b, self.h, e.dim("M"), e.dim("N"), s.block_m, s.block_n,
                     aligned=s.aligned_tiles, n_keys=self.n_keys, row0=self.tile_row0, row_end=self.row_end,
                     key0=self.key0, key_end=self.key_end)

    @staticmethod
    def _flat(acc_o) -> list:
        return [x for mi in acc_o for atom in mi for x in atom]

    def _carried(self, acc_o, state: SoftmaxState) -> list:
        """The flat list [O..., m..., l...] that `_unpack_carried` reads."""
        return self._flat(acc_o) + state.m + state.l

    def _unpack_carried(self, values):
        """(O accumulators, softmax state) from the flat list [O..., m..., l...]."""
        s = self.spec
        n_o = s.m_atoms * self.o_atoms * 4
        return self._unflatten(values[:n_o]), SoftmaxState(values[n_o:n_o + 2 * s.m_atoms],
                                                           values[n_o + 2 * s.m_atoms:])

    def _unflatten(self, flat, atoms: int | None = None):
        return tiles_of(flat, self.spec.m_atoms, atoms or self.o_atoms)

    def emit(self) -> None:
        e, s = self.e, self.spec
        self._coordinates()
        self.kv_ptr = {n: self._tensor(n, self.b, self.kv_h) for n in ("k", "v")}
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
        if s.q_blocks_per_cta == 1:
            self._one_block()
            return
        # Note [Two query blocks per CTA]
        ctaid = nvvm.read_ptx_sreg_ctaid_x(e.i32)
        first_block = e.sub(e.sub(e.cdiv(e.dim("M"), s.block_m), 1), ctaid)
        items = e.select(e.lt(ctaid, first_block), e.c32(2), e.c32(1))
        self._prologue(first_block)
        loop = scf.ForOp(e.c32(0), items, e.c32(1))
        with ir.InsertionPoint(loop.body):
            item = loop.induction_variable
            # Both blocks as functions of `item`: values of a loop-invariant block would
            # be hoisted out of the loop and held in registers through it.
            first = e.eq(item, 0)
            self._set_block(e.select(first, first_block, ctaid))
            acc_o, state = self._steps(self._kv_range())
            self.cp.wait(0)
            self.bar.sync()         # every warp is done with Q and the K/V slots
            then = scf.IfOp(e.lt(e.add(item, 1), items))
            with ir.InsertionPoint(then.then_block):
                following = e.select(first, ctaid, first_block)
                self._prologue(following)
                scf.yield_([])
            self._epilogue(acc_o, state)
            scf.yield_([])

    def _one_block(self) -> None:
        kv = self._prologue(self.m_block)
        acc_o, state = self._steps(kv)
        self.cp.wait(0)
        self._epilogue(acc_o, state)

    def _epilogue(self, acc_o, state: SoftmaxState) -> None:
        e, s = self.e, self.spec
        if s.mma_row_sum:
            # Note [Row sums on the tensor cores]: rows g and g + 8 of atom mi are 2 mi
            # and 2 mi + 1, their whole sums in the P.1 atom's accumulators 0 and 2
            state = SoftmaxState(state.m, [atoms[-1][i] for atoms in acc_o for i in (0, 2)])
            acc_o = [atoms[:-1] for atoms in acc_o]
        stage = None
        if s.staged_o:
            # Note [Staged O]: every warp is past its last read of the tiles (and every
            # thread's copies have landed: emit's wait) before any overwrites them.
            self.bar.sync()
            rows = s.rows_per_warp
            start = e.mul(self.warp, rows * s.head_dim_v * 2)
            stage = StagedRows(self.smem.address(e.add(start, s.layout.o) if s.layout.o else start),
                               e.add(self._first_row(self.m_block), self.warp_row0), rows, s.atom_rows)
        epilogue = Epilogue(e, self.softmax, s.o_dtype, self.row0, self.col0, self.lane, stage, self.row_end,
                            s.atom_rows)
        epilogue.store(acc_o, state, self._tensor("o", self.b, self.h), e.arg("stride_o_2"),
                       self._tensor("lse", self.b, self.h) if s.with_lse else None, self._sink())

    def _sink(self):
        """The sink logit in the running max's units (Note [Sinks] in softmax.py)."""
        s = self.spec
        if s.sink is None:
            return None
        value = s.sink(self.e, self.h)
        return self.e.fmul(value, 1.0 / (s.score_mod_out if s.score_mod else s.scale))


class ScoredStep:
    """What a KV step built op by op does to its S (sm80.py's `_Step`, wgmma_trips.py's
    `Trip`): `rows`, with the score_mod and then the mask applied once each, where the
    step's ops ask for them; `skip_answer()`, the block's tile_skip answer or None."""

    kernel: ForwardKernel
    n_block = None
    mode = "partial"
    rows = None
    modded = masked = False

    def skip_answer(self):
        return None

    def modify(self) -> None:
        """The score_mod on S (once)."""
        if not self.modded:
            self.rows = self.kernel.masker.modify(self.rows, self.n_block)
            self.modded = True

    def finish_scores(self) -> None:
        """The score_mod and the mask on S, those not yet applied."""
        self.modify()
        if not self.masked:
            self.rows = self.kernel._masked(self.rows, self.n_block, self.mode, self.skip_answer())
            self.masked = True


def tiles_of(flat: list, tiles: int, n_atoms: int) -> list:
    """flat [x...] -> acc[tile][atom][4] of `tiles` 16-row tiles of n_atoms n8 atoms."""
    return [[flat[(mi * n_atoms + a) * 4:(mi * n_atoms + a + 1) * 4] for a in range(n_atoms)]
            for mi in range(tiles)]
