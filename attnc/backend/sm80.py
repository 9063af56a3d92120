"""The sm_80 forward kernel (FlashAttention-2 style), built directly in upstream dialects.

One CTA per (m_block, h, b) (m_block = gridDim.x - 1 - blockIdx.x, or on y or z as Notes
[Heads first] and [Tiles last] in kernel_abi.py say; two blocks per CTA with Note [Two
query blocks per CTA]); `num_warps` warps, warp w owning rows [w*block_m/num_warps,
(w+1)*block_m/num_warps) of the Q tile in 16-row MMA tiles.

    load Q[m_block]                             ─┐ cp.async groups (the prologue: forward_loads.py)
    load K[n0], V[n0], K[n1], ..., K[n_{S-1}]    ─┘ one group each (S = stages)
    for t, n in enumerate(hi-1 down to lo):     # partial blocks first (peeled), then full
        wait K[n]; bar.sync                     # (n: the t-th block of the schedule, kv_schedule.py)
        load V[n+S-1 steps] -> its slot; commit
        S = Q K[n]^T                            # ldmatrix.x4 + mma.m16n8k16, f32 acc
        [score_mod; keep/bound mask: partial blocks only]
        online softmax (exp2, scale folded)     # quad shuffles, no smem
        wait V[n]; bar.sync                     # also: every warp is done with K[n]'s slot
        load K[n+S steps] -> K[n]'s slot; commit  (S = 1: before the softmax)
        O = O * alpha + P V[n]                  # P re-packed in registers as the A operand
    [sink folded into m, l]
    O /= l; store O (and lse = m*scale + ln l)

That is the plan's step; each step is built from the ops of the IR's KV loop, a pattern
per op (`_lower_<op>`), in the order they stand there (Note [Steps op by op] in
kv_steps.py). Here the kernel's body, `_Sm80Forward` (sm90.py's kernels extend it); its copies from
global memory, the prologue's and the steps' (Notes [Q before the range], [cp.async group
counting], [Lean step loads], [Skipped blocks], [First block before the map]), are
forward_loads.py's (`ForwardLoads`, which it derives from); how it is launched, its
parameters and grid, is kernel_abi.py's (`kernel_abi`), and kernel_module.py builds it
into a gpu.module (`build_kernel_module`).

Note [P as A operand]: the m16n8k16 accumulator of rows g, g+8 and columns 2t, 2t+1 of
two adjacent n8 atoms is exactly the A fragment of a k16 step (rows g, g+8; k 2t, 2t+8),
so P needs no shuffle, only a cvt to f16x2/bf16x2 pairs (warps split rows only).

Note [Where V is waited for]: with one K/V slot (FA2) the next K can only be loaded once
V[n] has landed and every warp is done with K[n], so that wait comes right after QK^T
to give the K load the softmax and PV to land. With two or more slots K[n+S] is issued
a whole step ahead anyway, and waiting for V after the softmax gives V longer to land
and keeps ptxas from hoisting V's ldmatrix above the softmax (which spilled registers
at 128x64 tiles, head dim 128).

Note [Rolled QK^T]: fully unrolled, the QK^T k-steps let ptxas hoist every K fragment
of the tile into registers ahead of the MMAs (64 registers at 64x64 K tiles) and then
spill the softmax state. With qk_unroll = u > 0, the k-steps run as a loop of u steps per
trip, kept rolled by `#llvm.loop_unroll<disable>` (PTX `.pragma "nounroll"`), which
bounds that look-ahead to u steps.

Note [Two query blocks per CTA]: with `blocks_per_cta` = 2 a CTA runs query blocks
nb-1-c and c (nb = cdiv(M, block_m), c = blockIdx.x < nb-1-c; one block when they meet),
so under a causal mask every CTA gets the same work. After the first block's last step
(cp.async.wait_group 0, then a CTA barrier: no warp reads Q or a K/V slot any more) the
second block's prologue loads are issued before the first block's epilogue, which
hides their latency behind the normalisation and the O stores. Both blocks are
`select`s of the loop counter: a loop-invariant block index let LLVM hoist the second
block's addresses and ranges out of the loop and hold them in registers throughout
(300 bytes of spills at head dim 64).

Note [Dead rows]: the steps run from the top of the key range down, so a causal-like mask
(a row interval whose end grows with the row) puts the diagonal in the first block, and
with 128-row query blocks and 64-key blocks the first block's top 64 rows keep none of
its keys. With a warp's rows contiguous those are warps 0 and 1 whole, on two of the
SM's four sub-partitions, while warps 2 and 3 do the work; so the warps' 16-row tiles
interleave instead (`atom_rows` = 16 * num_warps: warp w owns rows 16w and 16w + 64 of a
128-row block at 4 warps), and each warp holds one dead tile and one live one. The first
step then runs a tile at a time, each in a branch (`_first_by_tiles`): a vote over the
warp of each tile's rows (the row interval empty on the block's keys, or the row past
the query block's end, where nothing is stored) skips the tile's QK^T, softmax and P.V,
its O left zero and its softmax state initial -- which is what the step computes for
rows that keep no key, to the bit. Only the first step: its O is zero and nothing is
carried into the branches; such branches on every masked step carry O through them
(the first build of that spilled 112 bytes at 128x64 tiles, head dim 128; not timed).

Against the same kernel without it (the same outputs to the bit), documents + causal and
window 1024 at head dim 128 ran 1-3 % faster (results/sm80_h200.md, "Dead rows"): less
than the half block a query block saves (documents: about 9 blocks a query block), likely
because the first step waits for its loads (Q and the first K/V, from memory), so the
work it saves turns into waiting for the next block's K, and only the SM's other CTA
gains. Every masked step's MMAs predicated on the vote instead (`@p mma.sync`, no
branch) spilled and ran slower.
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import nvvm, scf

from attnc.backend.kernel_spec import ForwardSpec
from attnc.backend.mask_hooks import KvCtx, mask_hooks
from attnc.backend.nvgpu_builders import (Approx, CpAsync, CtaBarrier, Emit, GlobalPtr, LdMatrix, MmaSync,
                                          Quad, Smem, values_if, warp_vote)
from attnc.backend.qtiles import qtiles_param, read_entry
from attnc.backend.epilogue import Epilogue, StagedRows
from attnc.backend.kv_schedule import KvSchedule, schedule
from attnc.backend.kv_steps import KvSteps, StepOp
from attnc.backend.forward_loads import ForwardLoads
from attnc.backend.score_masks import ElementCoords, ScoreMasker, rows_of
from attnc.backend.softmax import ONES_BF16X2, ONES_F16X2, OnlineSoftmax, SoftmaxState
from attnc.backend.smem_tiles import FragmentReader, SwizzledTile, TileLoader

LOG2E = math.log2(math.e)
SMEM_SYMBOL = "attnc_dynamic_smem"


class _Sm80Forward(ForwardLoads):
    """Emits the kernel body at the current insertion point."""

    def __init__(self, spec: ForwardSpec, args: dict[str, ir.Value]):
        self.spec = spec
        self.e = e = Emit(args)
        self.cp = CpAsync(e)
        self.bar = CtaBarrier()
        self.mma = MmaSync(e, spec.dtype)
        self.smem = Smem(e, SMEM_SYMBOL)
        self.kv_range_fn, self.keep_fn = mask_hooks(spec)
        self.steps = spec.kv_steps or KvSteps.default(spec.stages)      # Note [Steps op by op]
        scale_log2 = LOG2E * spec.score_mod_out if spec.score_mod else spec.scale * LOG2E
        self.softmax = OnlineSoftmax(e, Approx(e), Quad(e), scale_log2, spec.static_max, spec.exp2_on_fma,
                                     spec.rescale_lazily, spec.row_sum_on_mma)
        # O's n8 atoms per 16-row atom; with row sums on the tensor cores one more, P.1
        # (Note [Row sums on the tensor cores] in softmax.py)
        self.o_atoms = spec.head_dim_v // 8 + spec.row_sum_on_mma
        self.q_tile = SwizzledTile(0, spec.block_m, spec.head_dim_qk)
        self.k_tile = SwizzledTile(spec.q_tile_bytes, spec.block_n, spec.head_dim_qk)
        self.v_tile = SwizzledTile(spec.q_tile_bytes + spec.k_tile_bytes, spec.block_n, spec.head_dim_v)
        self.slot_bytes = spec.k_tile_bytes + spec.v_tile_bytes
        # The query tile's rows [tile_row0, row_end) and its keys' origin key0 (None: the
        # grid's m_block * block_m, M and 0); n_keys: the keys from key0 on. A tile
        # table's tile sets them (Note [Document-aligned tiles] in qtiles.py).
        self.tile_row0, self.row_end, self.key0, self.n_keys = None, e.dim("M"), None, e.dim("N")
        self.key_end = None

    # ------------------------------------------------------------ setup
    def _coordinates(self) -> None:
        """The CTA's and the thread's coordinates; with one query block per CTA, that
        block's too (in the order of the first kernels, which ptxas's allocation was tuned
        on)."""
        e, s = self.e, self.spec
        tid = nvvm.read_ptx_sreg_tid_x(e.i32)
        self.tid = tid
        self.warp = e.shr(tid, 5)
        self.lane = e.and_(tid, 31)
        one_block = s.blocks_per_cta == 1
        self.m_block, self.h, self.b = self._grid_item(one_block)
        self.kv_h = e.div(self.h, e.div(e.dim("H"), e.dim("HKV")))
        if s.aligned_tiles:
            z = e.add(e.mul(self.b, e.dim("H")), self.h) if s.tiles_per_head else self.b
            self.tile_row0, self.row_end, self.key0, self.key_end = read_entry(
                e, e.arg(qtiles_param().key), z, self.m_block, e.dim("M"), s.block_m)
            self.n_keys = e.max(e.sub(e.dim("N"), self.key0), 0)     # key0 > N where M > N
        self.warp_row0 = e.mul(self.warp, 16 if s.skips_dead_rows else s.rows_per_warp)
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
        if s.grid_tiles_last:
            count, index, head = nvvm.read_ptx_sreg_nctaid_z, nvvm.read_ptx_sreg_ctaid_z, nvvm.read_ptx_sreg_ctaid_x
            batch = nvvm.read_ptx_sreg_ctaid_y
        elif s.grid_heads_first:
            count, index, head = nvvm.read_ptx_sreg_nctaid_y, nvvm.read_ptx_sreg_ctaid_y, nvvm.read_ptx_sreg_ctaid_x
        m_block = None
        if with_block:
            last = e.sub(count(e.i32), 1)
            ctaid = index(e.i32)
            if s.grid_heads_first or s.grid_tiles_last:
                # What LLVM knows of ctaid.y or .z (< 65535) changed its address arithmetic enough
                # for ptxas to spill (sliding window, 128x64 tiles, head dim 128: 124 bytes
                # on sm_80); opaque, it assembles as ctaid.x's did.
                ctaid = e.opaque(ctaid)
            m_block = e.sub(last, ctaid)
        return m_block, head(e.i32), batch(e.i32)

    def _operand_bases(self) -> None:
        """Each lane's ldmatrix base addresses of the Q, K and V tiles."""
        e = self.e
        self.reader = rd = FragmentReader(e, LdMatrix(e), self.smem, self.lane)
        self.q_base = rd.base(self.q_tile, rd.A, row0=self.warp_row0)
        self.k_base = rd.base(self.k_tile, rd.B)
        self.v_base = rd.base(self.v_tile, rd.B_TRANS)

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
                           score_in, s.row_interval, s.interval_test_form, s.row_residual)

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
        clamp_top = s.step_loads_lean and not s.blockmap
        return schedule(e, self.kv_range_fn(e, self._ctx(m_block)), self.n_keys, s.block_n, clamp_top)

    # ------------------------------------------------------------ the two GEMMs
    def _qk(self, slot, atoms=None):
        """S = Q K^T for the K tile in `slot`, of the warp's 16-row tiles `atoms` (default:
        all): k16 steps fully unrolled, or (qk_unroll > 0) a loop of qk_unroll steps per
        trip (Note [Rolled QK^T])."""
        s = self.spec
        atoms = range(s.m_atoms) if atoms is None else atoms
        zero = self.e.cf(0.0)
        n_atoms = s.block_n // 8
        acc = [[[zero] * 4 for _ in range(n_atoms)] for _ in atoms]
        k_base = self.reader.at_slot(self.k_base, slot)
        steps, per_trip = s.head_dim_qk // 16, s.qk_steps_per_trip
        if not per_trip or per_trip >= steps:
            return self._qk_steps(acc, self.q_base, k_base, range(steps), atoms)
        flat = [x for mi in acc for atom in mi for x in atom]
        loop = scf.ForOp(self.e.c32(0), self.e.c32(steps // per_trip), self.e.c32(1), flat)
        loop.operation.attributes["llvm.loop_annotation"] = ir.Attribute.parse(
            "#llvm.loop_annotation<unroll = #llvm.loop_unroll<disable = true>>")
        with ir.InsertionPoint(loop.body):
            group = loop.induction_variable
            q_base = self.reader.k_group_base(self.q_tile, self.q_base, group, per_trip)
            k_group = self.reader.k_group_base(self.k_tile, k_base, group, per_trip)
            acc = self._qk_steps(_tiles_of(list(loop.inner_iter_args), len(atoms), n_atoms),
                                 q_base, k_group, range(per_trip), atoms)
            scf.yield_([x for mi in acc for atom in mi for x in atom])
        return _tiles_of(list(loop.results), len(atoms), n_atoms)

    def _qk_steps(self, acc, q_base, k_base, steps, atoms):
        """acc[a] += the k16 `steps` of Q's 16-row tile atoms[a] times K."""
        s, mma, rd = self.spec, self.mma, self.reader
        for kk in steps:
            q = [rd.a_operand(self.q_tile, q_base, mi, kk, s.atom_rows) for mi in atoms]
            for n_pair in range(s.block_n // 16):
                k = rd.b_operand(self.k_tile, k_base, n_pair, kk)
                for a in range(len(atoms)):
                    acc[a][2 * n_pair] = mma(q[a], k[0:2], acc[a][2 * n_pair])
                    acc[a][2 * n_pair + 1] = mma(q[a], k[2:4], acc[a][2 * n_pair + 1])
        return acc

    # ------------------------------------------------------------ Note [Dead rows]
    def _live_atoms(self, n_block) -> list:
        """Per 16-row tile of the warp, a warp-uniform i1: false where each of its rows
        keeps no key of block n_block by the mask's row interval or lies past the query
        block's end (where nothing is stored)."""
        e, s = self.e, self.spec
        first = self.masker.coords.block_start(n_block)
        last = e.sub(e.min(e.add(first, s.block_n), e.dim("N")), 1)
        live = []
        # Opaque: the mask's own rows, CSE'd with these, stayed live through QK^T (spills).
        row0 = e.opaque(self.row0)
        for mi in range(s.m_atoms):
            lane_dead = None
            for half in (0, 1):
                i = e.add(row0, s.atom_rows * mi + 8 * half)
                lo, hi = s.row_interval(e, self.b, self.h, i)
                bottom = first if lo is None else e.max(lo, first)
                row_dead = e.or_(e.lt(e.min(hi, last), bottom), e.ge(i, self.row_end))
                lane_dead = row_dead if lane_dead is None else e.land(lane_dead, row_dead)
            live.append(e.xor(warp_vote(e, lane_dead, "all"), e.true()))
        return live

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

    def _pv(self, p, acc_o, slot):
        """O += P.V; with row sums on the tensor cores, O's last atom += P.1 (acc_o and p:
        of the warp's 16-row tiles, or of some of them)."""
        s, mma, rd = self.spec, self.mma, self.reader
        v_base = rd.at_slot(self.v_base, slot)
        if s.row_sum_on_mma:
            ones = [self.e.c32(ONES_BF16X2 if s.dtype == "bf16" else ONES_F16X2)] * 2
        for kk in range(s.block_n // 16):
            for d_pair in range(s.head_dim_v // 16):
                v = rd.b_operand_trans(self.v_tile, v_base, d_pair, kk)
                for mi in range(len(acc_o)):
                    acc_o[mi][2 * d_pair] = mma(p[mi][kk], v[0:2], acc_o[mi][2 * d_pair])
                    acc_o[mi][2 * d_pair + 1] = mma(p[mi][kk], v[2:4], acc_o[mi][2 * d_pair + 1])
            if s.row_sum_on_mma:
                for mi in range(len(acc_o)):
                    acc_o[mi][-1] = mma(p[mi][kk], ones, acc_o[mi][-1])
        return acc_o

    # ------------------------------------------------------------ one KV step, op by op
    def _step(self, t, kv: KvSchedule, acc_o, state: SoftmaxState, mode: str, first: bool = False,
              top: bool = True):
        """Step t visits n_block = kv.block(t), lowered from the ops of the KV loop body of
        its kind, in their order (Note [Steps op by op] in kv_steps.py). mode: 'partial'
        (masked; when the mask has `tile_partial`, only if it or the ragged N edge says so;
        a block `tile_skip` rules out is not computed, Note [Skipped blocks] in
        forward_loads.py) | 'full' (no mask, nothing asked); `top`: of the range's top
        partial blocks, not its bottom ones; `first`: the first step, by tiles (Note
        [Dead rows])."""
        body = self.steps.body(mode, top)
        step = _Step(self, t, kv, mode, acc_o, state, body)
        for op in body:
            if first and op.name == "mma" and op.what == "qk":
                return self._first_by_tiles(t, step.n_block, kv, step.slot(0), mode, step.skip(), step.ragged,
                                            step.ask_skip)
            getattr(self, f"_lower_{op.name}")(op, step)
            if op is step.scores_end:
                step.finish_scores()
        return step.acc_o, step.state

    def _lower_cp_async_wait(self, op, step) -> None:
        self.cp.wait(op.count)

    def _lower_cta_barrier(self, op, step) -> None:
        self.bar.sync()

    def _lower_cp_async_commit(self, op, step) -> None:
        self.cp.commit()

    def _lower_slot_read(self, op, step) -> None:
        step.skip()         # the step's tile_skip answer, once its loads may be issued

    def _lower_load(self, op, step) -> None:
        step.skip()
        step.ahead[op.what] = op.count

    def _lower_slot_write(self, op, step) -> None:
        """The copy of the load this slot write takes: of the step's own block (ahead 0)
        or of the block `ahead` steps later, where the schedule has one (then a group is
        committed either way: Note [cp.async group counting])."""
        e, name, ahead = self.e, op.what, step.ahead[op.what]
        if ahead == 0:
            self._load_kv(name, step.n_block, step.slot(0), step.partial, step.skip())
            return
        n_block, exists = step.kv.ahead(e, step.t, step.n_block, ahead)
        self._load_kv_guarded(name, n_block, step.slot(ahead), exists, step.ragged, step.ask_skip)

    def _lower_mma(self, op, step) -> None:
        if op.what == "qk":
            step.rows = rows_of(self._qk(step.slot(0)))
        else:
            step.acc_o = self._pv(step.p, step.acc_o, step.slot(0))

    def _lower_score_mod(self, op, step) -> None:
        step.modify()

    def _lower_mask(self, op, step) -> None:
        step.finish_scores()

    def _lower_block_map_read(self, op, step) -> None:
        """The block's class in the map is read where the step asks it: whether the block
        is skipped with the step's first slot read or load, whether it is partial at the
        mask (tile_skip, tile_partial: blockmap_hooks.py)."""

    def _lower_softmax_step(self, op, step) -> None:
        probs, step.state, step.alpha = self._softmax_step(step.rows, step.state, step.mode)
        step.p = self._pack_p(probs)

    def _lower_rescale(self, op, step) -> None:
        if step.alpha is not None:
            step.acc_o = self._rescale(step.acc_o, step.alpha, self.softmax.moved)

    def _first_by_tiles(self, t, n_block, kv: KvSchedule, slot, mode: str, skip, ragged, ask_skip):
        """Note [Dead rows]: the first step (O zero, the softmax state initial) one 16-row
        tile of the warp at a time, each in a branch that a tile whose rows keep no key
        of the block skips: its O stays zero and its state initial."""
        e, s = self.e, self.spec
        live = self._live_atoms(n_block)
        init = self.softmax.initial(2)
        p_regs = 4 * (s.block_n // 16)
        tiles = []
        for mi in range(s.m_atoms):
            def scored(mi=mi):
                masker = self._masker_from(e.add(self.row0, s.atom_rows * mi))
                rows = self._scores(self._qk(slot, [mi]), n_block, mode, skip, masker)
                probs, state, _ = self._softmax_step(rows, init, mode)
                p = [e.bitcast_i32(x) for kk in self._pack_p(probs)[0] for x in kk]
                return p + state.m + state.l
            tiles.append(values_if(live[mi], scored, [e.c32(0)] * p_regs + init.m + init.l))
        self.softmax.moved = None       # a tile's branch set it: a value of that branch only
        self._wait_v_and_load_k(t, n_block, kv, slot, ragged, ask_skip)
        zero = e.cf(0.0)
        acc_o, m, l = [], [], []
        for mi, values in enumerate(tiles):
            p = [values[4 * kk:4 * kk + 4] for kk in range(s.block_n // 16)]
            rows = values[p_regs:]
            m, l = m + rows[:2], l + rows[2:]
            zeros = [[zero] * 4 for _ in range(self.o_atoms)]
            out = values_if(live[mi], lambda p=p, zeros=zeros: self._flat(self._pv([p], [zeros], slot)),
                            self._flat([zeros]))
            acc_o.append(_tiles_of(out, 1, self.o_atoms)[0])
        return acc_o, SoftmaxState(m, l)

    def _rescale(self, acc_o, alpha, moved):
        """O *= alpha per row; with `moved` (Note [Lazy rescale]), only in a warp where
        some row's max moved."""
        e, s = self.e, self.spec

        def scaled():
            return [[[e.fmul(x, alpha[2 * mi + i // 2]) for i, x in enumerate(atom)]
                     for atom in acc_o[mi]] for mi in range(s.m_atoms)]
        if moved is None:
            return scaled()
        return self._unflatten(values_if(warp_vote(e, moved, "any"), lambda: self._flat(scaled()),
                                         self._flat(acc_o)))

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
            holds = s.tile_holds(e, self._ctx(), n_block) if s.mask_split else None
            return masker.mask(rows, n_block, holds=holds)
        partial = e.gt(masker.coords.block_end(n_block), e.dim("N"))
        ctx = self._ctx()
        if s.tile_partial is not None:
            partial = e.or_(s.tile_partial(e, ctx, n_block), partial)
        holds = s.tile_holds(e, ctx, n_block) if s.mask_split else None
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

    def _loop(self, t_lo, t_hi, kv: KvSchedule, acc_o, state: SoftmaxState, mode: str, top: bool = True):
        """scf.for over steps [t_lo, t_hi), carrying O, m and l."""
        loop = scf.ForOp(t_lo, t_hi, self.e.c32(1), self._carried(acc_o, state))
        with ir.InsertionPoint(loop.body):
            it = list(loop.inner_iter_args)
            scf.yield_(self._carried(*self._step(loop.induction_variable, kv, *self._unpack_carried(it), mode,
                                                 top=top)))
        return self._unpack_carried(list(loop.results))

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
        return _tiles_of(flat, self.spec.m_atoms, atoms or self.o_atoms)

    # ------------------------------------------------------------ the kernel
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
        if s.blocks_per_cta == 1:
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

    def _steps(self, kv: KvSchedule):
        """Every KV step of the current block: (O accumulators, softmax state)."""
        e, s = self.e, self.spec
        zero = e.cf(0.0)
        acc_o = [[[zero] * 4 for _ in range(self.o_atoms)] for _ in range(s.m_atoms)]
        state = self.softmax.initial(2 * s.m_atoms)
        t_full = kv.steps_above(e, kv.full_hi)
        t_first = e.c32(0)
        if s.skips_dead_rows:
            # Note [Dead rows]: the first partial step, peeled
            values = values_if(e.gt(t_full, 0), lambda: self._carried(*self._step(
                t_first, kv, acc_o, state, "partial", first=True)), self._carried(acc_o, state))
            acc_o, state = self._unpack_carried(values)
            t_first = e.min(t_full, 1)
        acc_o, state = self._loop(t_first, t_full, kv, acc_o, state, "partial")
        t_low = kv.steps_above(e, kv.full_lo if kv.full_lo is not None else kv.lo)
        acc_o, state = self._loop(t_full, t_low, kv, acc_o, state, "full")
        if kv.full_lo is not None:
            acc_o, state = self._loop(t_low, kv.total(e), kv, acc_o, state, "partial", top=False)
        return acc_o, state

    def _epilogue(self, acc_o, state: SoftmaxState) -> None:
        e, s = self.e, self.spec
        if s.row_sum_on_mma:
            # Note [Row sums on the tensor cores]: rows g and g + 8 of atom mi are 2 mi
            # and 2 mi + 1, their whole sums in the P.1 atom's accumulators 0 and 2
            state = SoftmaxState(state.m, [atoms[-1][i] for atoms in acc_o for i in (0, 2)])
            acc_o = [atoms[:-1] for atoms in acc_o]
        stage = None
        if s.o_staged:
            # Note [Staged O]: every warp is past its last read of the tiles (and every
            # thread's copies have landed: emit's wait) before any overwrites them.
            self.bar.sync()
            rows = s.rows_per_warp
            stage = StagedRows(self.smem.address(e.mul(self.warp, rows * s.head_dim_v * 2)),
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


class _Step:
    """What the patterns of one KV step share (`_Sm80Forward._step`): the step's block
    and kind, the values its ops leave for the next (S as rows, P, the softmax state and
    alpha, O) and, made once when first asked, its tile_skip answer and slot offsets."""

    def __init__(self, kernel: _Sm80Forward, t, kv: KvSchedule, mode: str, acc_o, state: SoftmaxState,
                 body: tuple[StepOp, ...]):
        e, s = kernel.e, kernel.spec
        self.kernel, self.t, self.kv, self.mode = kernel, t, kv, mode
        self.n_block = kv.block(e, t)
        # Full steps only ever load blocks below full_hi <= N / block_n: no row predicates;
        # with lean loads, no step's loads of later blocks either (Note [Lean step loads]).
        self.partial = mode != "full"
        self.ragged = self.partial and not s.step_loads_lean
        self.ask_skip = self.partial and s.asks_tile_skip
        self.acc_o, self.state = acc_o, state
        self.rows = self.p = self.alpha = None
        self.modded = self.masked = False
        self.ahead: dict[str, int] = {}
        # After the last of QK^T, score_mod and mask, S is masked (finish_scores).
        self.scores_end = [op for op in body if op.name in ("score_mod", "mask") or op.what == "qk"][-1]
        self._slots: dict[int, object] = {}
        self._skip = self

    def skip(self):
        """The block's tile_skip answer, when the step asks it (else None)."""
        if self._skip is self:
            self._skip = self.kernel._skip(self.n_block) if self.ask_skip else None
        return self._skip

    def slot(self, ahead: int):
        """The byte offset of the K/V slot of step t + ahead."""
        stages = self.kernel.spec.stages
        key = ahead % stages
        if key not in self._slots:
            self._slots[key] = self.kernel._slot_offset(key, self.t)
        return self._slots[key]

    def modify(self) -> None:
        """The score_mod on S (once)."""
        if not self.modded:
            self.rows = self.kernel.masker.modify(self.rows, self.n_block)
            self.modded = True

    def finish_scores(self) -> None:
        """The score_mod and the mask on S, those not yet applied."""
        self.modify()
        if not self.masked:
            self.rows = self.kernel._masked(self.rows, self.n_block, self.mode, self.skip())
            self.masked = True


def _tiles_of(flat: list, tiles: int, n_atoms: int) -> list:
    """flat [x...] -> acc[tile][atom][4] of `tiles` 16-row tiles of n_atoms n8 atoms."""
    return [[flat[(mi * n_atoms + a) * 4:(mi * n_atoms + a + 1) * 4] for a in range(n_atoms)]
            for mi in range(tiles)]
