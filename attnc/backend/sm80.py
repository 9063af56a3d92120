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

That is the plan's order; each step is built from the ops of the IR's KV loop, a pattern
per op (`STEP_PATTERNS`), in the order they stand there, and so is what comes before the
loops (forward_loads.py's `prologue`) (Notes [Steps op by op] in kv_steps.py and [The role op by op] in
role_prologue.py). Here the kernel's GEMMs and steps, `SM80`: functions over the kernel's
state. What it shares with sm_90a's kernel -- the CTA's coordinates, the scores' hooks,
the softmax step, the query blocks a CTA runs, the epilogue -- is forward.py's
(`KernelState`), and its copies from global memory, the prologue's and the steps'
(Notes [Q before the range], [cp.async group counting], [Lean step loads], [Skipped
blocks], [First block before the map]), forward_loads.py's; how it is launched, its parameters
and grid, is kernel_abi.py's (`kernel_abi`), and kernel_module.py builds it into a
gpu.module (`build_kernel_module`).

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
spill the softmax state. With qk_unroll = u > 0 (`unroll` on the QK^T attn.mma,
attn-kernel-choices' option), the k-steps run as a loop of u steps per trip, kept rolled
by `#llvm.loop_unroll<disable>` (PTX `.pragma "nounroll"`), which bounds that look-ahead
to u steps.

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

Note [Key loops]: a key range is walked as up to three loops, each with a copy of the
step -- its mixed blocks near the diagonal, its full blocks (no mask), its mixed blocks
at the far edge (a window's) -- and Note [Dead rows] peels a fourth, so the sm_80 window
kernel was four steps of QK^T and P.V: at 128x64 tiles, head dim 128, 1,024 mma.sync in
11,000 lines of PTX, which LLVM and the assembler spend most of a compile on. The
choice kv_loops (attn-kernel-choices' option, `kv_loops` on attn.kernel) merges them:
at 2 the far edge's steps join the full blocks' loop, built from the far edge's loop's
trip; at 1 the steps after the peeled one are one loop, built from the first mixed
loop's trip (`KvSchedule.key_loops` lists a kernel's loops, for both targets). A merged
loop runs its mask in a branch on whether step t's block is mixed (t before the full
range's first step or at or after its end: the blocks the three loops mask), with the
same outputs; the loops it takes in must hold its trip, less the
mask and the map's read in the full one (`check_merged_trips` in kv_steps.py). What the
full steps pay: the test and the branch, the softmax's test for rows without a key, and
ptxas' schedule of a loop that holds the mask. sm_90a's overlapped trips take it too
(sm90a.py's `overlapped_steps`). One loop is the default for sm_80's windows, whose
compile it shortens by 30-40 % and whose kernels ran 1-5 % faster on an H200; causal,
whose range starts with its full blocks, ran up to 4 % slower for one copy fewer of
three. sm_90a keeps three: in its producer warpgroup's kernel one loop spills 68 bytes in
the consumers (40 with no mask at all, where three loops of the same steps spill none:
the loop's shape, not its mask, costs the registers) and two spill none but ran 0.3-1 %
slower (a window's compile 11-17 % shorter); its one-warpgroup kernel at head dim 64 needs
132 registers with two loops and 140 with one, past the 128 of its four CTAs an SM (Note
[CTAs per SM]), and ran 10 % slower with two (results/sm80_h200.md, sm90a_h200.md and
compile_times.md, "Key loops").
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import scf

from attnc.backend.forward import (COPY_PATTERNS, SCORE_PATTERNS, KernelState, ScoredStep, TargetLowering, own_ops,
                                   tiles_of)
from attnc.backend.kv_schedule import KvSchedule
from attnc.backend.kv_steps import StepOp
from attnc.backend.nvgpu_builders import LdMatrix, values_if, warp_vote
from attnc.backend.score_masks import rows_of
from attnc.backend.smem_tiles import FragmentReader
from attnc.backend.softmax import ONES_BF16X2, ONES_F16X2, SoftmaxState


def _setup(cx) -> None:
    cx.steps = cx.spec.steps.kv         # Note [Steps op by op]
    cx.prologue_ops = cx.steps.prologue
    cx.epilogue_ops = cx.steps.epilogue


def _operand_bases(cx) -> None:
    """Each lane's ldmatrix base addresses of the Q, K and V tiles."""
    e = cx.e
    cx.reader = rd = FragmentReader(e, LdMatrix(e), cx.smem, cx.lane)
    cx.q_base = rd.base(cx.q_tile, rd.A, row0=cx.warp_row0)
    cx.k_base = rd.base(cx.k_tile, rd.B)
    cx.v_base = rd.base(cx.v_tile, rd.B_TRANS)


def _qk(cx, slot, unroll: int, atoms=None):
    """S = Q K^T for the K tile in `slot`, of the warp's 16-row tiles `atoms` (default:
    all): k16 steps fully unrolled, or (`unroll` > 0, the QK^T op's) a loop of `unroll`
    steps per trip (Note [Rolled QK^T])."""
    s = cx.spec
    atoms = range(s.m_atoms) if atoms is None else atoms
    zero = cx.e.cf(0.0)
    n_atoms = s.block_n // 8
    acc = [[[zero] * 4 for _ in range(n_atoms)] for _ in atoms]
    k_base = cx.reader.at_slot(cx.k_base, slot)
    steps, per_trip = s.variant.head_dim_qk // 16, unroll
    if not per_trip or per_trip >= steps:
        return _qk_steps(cx, acc, cx.q_base, k_base, range(steps), atoms)
    flat = [x for mi in acc for atom in mi for x in atom]
    loop = scf.ForOp(cx.e.c32(0), cx.e.c32(steps // per_trip), cx.e.c32(1), flat)
    loop.operation.attributes["llvm.loop_annotation"] = ir.Attribute.parse(
        "#llvm.loop_annotation<unroll = #llvm.loop_unroll<disable = true>>")
    with ir.InsertionPoint(loop.body):
        group = loop.induction_variable
        q_base = cx.reader.k_group_base(cx.q_tile, cx.q_base, group, per_trip)
        k_group = cx.reader.k_group_base(cx.k_tile, k_base, group, per_trip)
        acc = _qk_steps(cx, tiles_of(list(loop.inner_iter_args), len(atoms), n_atoms),
                             q_base, k_group, range(per_trip), atoms)
        scf.yield_([x for mi in acc for atom in mi for x in atom])
    return tiles_of(list(loop.results), len(atoms), n_atoms)


def _qk_steps(cx, acc, q_base, k_base, steps, atoms):
    """acc[a] += the k16 `steps` of Q's 16-row tile atoms[a] times K."""
    s, mma, rd = cx.spec, cx.mma, cx.reader
    for kk in steps:
        q = [rd.a_operand(cx.q_tile, q_base, mi, kk, s.atom_rows) for mi in atoms]
        for n_pair in range(s.block_n // 16):
            k = rd.b_operand(cx.k_tile, k_base, n_pair, kk)
            for a in range(len(atoms)):
                acc[a][2 * n_pair] = mma(q[a], k[0:2], acc[a][2 * n_pair])
                acc[a][2 * n_pair + 1] = mma(q[a], k[2:4], acc[a][2 * n_pair + 1])
    return acc


def _live_atoms(cx, n_block) -> list:
    """Per 16-row tile of the warp, a warp-uniform i1: false where each of its rows
    keeps no key of block n_block by the mask's row interval or lies past the query
    block's end (where nothing is stored)."""
    e, s = cx.e, cx.spec
    first = cx.masker.coords.block_start(n_block)
    last = e.sub(e.min(e.add(first, s.block_n), e.dim("N")), 1)
    live = []
    # Opaque: the mask's own rows, CSE'd with these, stayed live through QK^T (spills).
    row0 = e.opaque(cx.row0)
    for mi in range(s.m_atoms):
        lane_dead = None
        for half in (0, 1):
            i = e.add(row0, s.atom_rows * mi + 8 * half)
            lo, hi = s.hooks.row_interval(e, cx.b, cx.h, i)
            bottom = first if lo is None else e.max(lo, first)
            row_dead = e.or_(e.lt(e.min(hi, last), bottom), e.ge(i, cx.row_end))
            lane_dead = row_dead if lane_dead is None else e.land(lane_dead, row_dead)
        live.append(e.xor(warp_vote(e, lane_dead, "all"), e.true()))
    return live


def _pv(cx, p, acc_o, slot):
    """O += P.V; with row sums on the tensor cores, O's last atom += P.1 (acc_o and p:
    of the warp's 16-row tiles, or of some of them)."""
    s, mma, rd = cx.spec, cx.mma, cx.reader
    v_base = rd.at_slot(cx.v_base, slot)
    if s.choices.mma_row_sum:
        ones = [cx.e.c32(ONES_BF16X2 if s.variant.dtype == "bf16" else ONES_F16X2)] * 2
    for kk in range(s.block_n // 16):
        for d_pair in range(s.variant.head_dim_v // 16):
            v = rd.b_operand_trans(cx.v_tile, v_base, d_pair, kk)
            for mi in range(len(acc_o)):
                acc_o[mi][2 * d_pair] = mma(p[mi][kk], v[0:2], acc_o[mi][2 * d_pair])
                acc_o[mi][2 * d_pair + 1] = mma(p[mi][kk], v[2:4], acc_o[mi][2 * d_pair + 1])
        if s.choices.mma_row_sum:
            for mi in range(len(acc_o)):
                acc_o[mi][-1] = mma(p[mi][kk], ones, acc_o[mi][-1])
    return acc_o


def _step(cx, t, kv: KvSchedule, acc_o, state: SoftmaxState, mode: str, first: bool = False,
          top: bool = True, edge=None):
    """Step t visits n_block = kv.block(t), lowered from the ops of the KV loop body of
    its kind, in their order (Note [Steps op by op] in kv_steps.py). mode: 'partial'
    (masked; when the mask has `tile_partial`, only if it or the ragged N edge says so;
    a block `tile_skip` rules out is not computed, Note [Skipped blocks] in
    forward_loads.py) | 'full' (no mask, nothing asked); `top`: of the range's top
    partial blocks, not its bottom ones; `first`: the first step, by tiles (Note
    [Dead rows])."""
    body = cx.steps.body(mode, top)
    step = _Step(cx, t, kv, mode, acc_o, state, body)
    step.edge = edge
    if not first:
        cx.target.run(cx, "step", body, step)
        return step.acc_o, step.state
    # the ops before QK^T as they stand, then the step by tiles
    qk = next(k for k, op in enumerate(body) if op.name == "mma" and op.what == "qk")
    cx.target.run(cx, "step", body[:qk], step)
    return _first_by_tiles(cx, t, step.n_block, kv, step.slot(0), mode, step.skip(), step.ragged, step.ask_skip,
                           body)


def _lower_slot_read(cx, op, step) -> None:
    step.skip()         # the step's tile_skip answer, once its loads may be issued


def _lower_load(cx, op, step) -> None:
    step.skip()
    step.ahead[op.what] = op.count


def _lower_slot_write(cx, op, step) -> None:
    """The copy of the load this slot write takes: of the step's own block (ahead 0)
    or of the block `ahead` steps later, where the schedule has one (then a group is
    committed either way: Note [cp.async group counting])."""
    e, name, ahead = cx.e, op.what, step.ahead[op.what]
    if ahead == 0:
        cx.load_kv(name, step.n_block, step.slot(0), step.partial, step.skip())
        return
    n_block, exists = step.kv.ahead(e, step.t, step.n_block, ahead)
    cx.load_kv_guarded(name, n_block, step.slot(ahead), exists, step.ragged, step.ask_skip)


def _lower_mma(cx, op, step) -> None:
    if op.what == "qk":
        step.rows = rows_of(_qk(cx, step.slot(0), op.choice("unroll")))
    else:
        step.acc_o = _pv(cx, step.p, step.acc_o, step.slot(0))


def _lower_block_map_read(cx, op, step) -> None:
    """The block's class in the map is read where the step asks it: whether the block
    is skipped with the step's first slot read or load, whether it is partial at the
    mask (tile_skip, tile_partial: blockmap_hooks.py)."""


def _lower_softmax_step(cx, op, step) -> None:
    probs, step.state, step.alpha = cx.softmax_step(step.rows, step.state, step.mode, op, step.offset)
    step.p = cx.pack_p(probs)


def _lower_rescale(cx, op, step) -> None:
    if step.alpha is not None:
        step.acc_o = _rescale(cx, step.acc_o, step.alpha, cx.softmax.moved)


def _first_by_tiles(cx, t, n_block, kv: KvSchedule, slot, mode: str, skip, ragged, ask_skip, body):
    """Note [Dead rows]: the first step (O zero, the softmax state initial) one 16-row
    tile of the warp at a time, each in a branch that a tile whose rows keep no key
    of the block skips: its O stays zero and its state initial; as the ops of `body`
    (QK^T, the mask, the softmax step) hold their choices."""
    e, s = cx.e, cx.spec
    qk = next(op for op in body if op.name == "mma" and op.what == "qk")
    softmax, mask = own_ops(body)
    live = _live_atoms(cx, n_block)
    init = cx.softmax.initial(2)
    p_regs = 4 * (s.block_n // 16)
    tiles = []
    for mi in range(s.m_atoms):
        def scored(mi=mi):
            masker = cx.masker_from(e.add(cx.row0, s.atom_rows * mi))
            rows, offset = cx.scores(_qk(cx, slot, qk.choice("unroll"), [mi]), n_block, mode, skip, mask, masker)
            probs, state, _ = cx.softmax_step(rows, init, mode, softmax, offset)
            p = [e.bitcast_i32(x) for kk in cx.pack_p(probs)[0] for x in kk]
            return p + state.m + state.l
        tiles.append(values_if(live[mi], scored, [e.c32(0)] * p_regs + init.m + init.l))
    cx.softmax.moved = None       # a tile's branch set it: a value of that branch only
    cx.wait_v_and_load_k(t, n_block, kv, slot, ragged, ask_skip)
    zero = e.cf(0.0)
    acc_o, m, l = [], [], []
    for mi, values in enumerate(tiles):
        p = [values[4 * kk:4 * kk + 4] for kk in range(s.block_n // 16)]
        rows = values[p_regs:]
        m, l = m + rows[:2], l + rows[2:]
        zeros = [[zero] * 4 for _ in range(cx.o_atoms)]
        out = values_if(live[mi], lambda p=p, zeros=zeros: cx.flat(_pv(cx, [p], [zeros], slot)),
                        cx.flat([zeros]))
        acc_o.append(tiles_of(out, 1, cx.o_atoms)[0])
    return acc_o, SoftmaxState(m, l)


def _rescale(cx, acc_o, alpha, moved):
    """O *= alpha per row; with `moved` (Note [Lazy rescale]), only in a warp where
    some row's max moved."""
    e, s = cx.e, cx.spec

    def scaled():
        return [[[e.fmul(x, alpha[2 * mi + i // 2]) for i, x in enumerate(atom)]
                 for atom in acc_o[mi]] for mi in range(s.m_atoms)]
    if moved is None:
        return scaled()
    return cx.unflatten(values_if(warp_vote(e, moved, "any"), lambda: cx.flat(scaled()),
                                     cx.flat(acc_o)))


def _loop(cx, t_lo, t_hi, kv: KvSchedule, acc_o, state: SoftmaxState, mode: str, top: bool = True, edge=None):
    """scf.for over steps [t_lo, t_hi), carrying O, m and l."""
    loop = scf.ForOp(t_lo, t_hi, cx.e.c32(1), cx.carried(acc_o, state))
    with ir.InsertionPoint(loop.body):
        it = list(loop.inner_iter_args)
        t = loop.induction_variable
        scf.yield_(cx.carried(*_step(cx, t, kv, *cx.unpack_carried(it), mode,
                                     top=top, edge=None if edge is None else edge(t))))
    return cx.unpack_carried(list(loop.results))


def _steps(cx, kv: KvSchedule):
    """Every KV step of the current block: (O accumulators, softmax state)."""
    e, s = cx.e, cx.spec
    zero = e.cf(0.0)
    acc_o = [[[zero] * 4 for _ in range(cx.o_atoms)] for _ in range(s.m_atoms)]
    state = cx.softmax.initial(2 * s.m_atoms)
    t_full = kv.steps_above(e, kv.full_hi)
    t_first = e.c32(0)
    if s.choices.dead_rows:
        # Note [Dead rows]: the first partial step, peeled
        values = values_if(e.gt(t_full, 0), lambda: cx.carried(*_step(
            cx, t_first, kv, acc_o, state, "partial", first=True)), cx.carried(acc_o, state))
        acc_o, state = cx.unpack_carried(values)
        t_first = e.min(t_full, 1)
    bounds = {"start": t_first, "full": t_full}

    def bound(name: str):       # "low" and "total" made where a loop first needs them
        if name not in bounds:
            bounds[name] = kv.below_full(e) if name == "low" else kv.total(e)
        return bounds[name]
    for loop in kv.key_loops(s.choices.kv_loops):           # Note [Key loops]
        low = bound("low") if loop.edge else None
        acc_o, state = _loop(cx, bound(loop.lo), bound(loop.hi), kv, acc_o, state, loop.mode, loop.top,
                             None if low is None else lambda t, loop=loop: kv.masked_step(e, loop, t, t_full, low))
    return acc_o, state


# Note [Steps op by op] (kv_steps.py): the pattern of each op of a KV loop's body
STEP_PATTERNS = {
    **COPY_PATTERNS, "slot_read": _lower_slot_read, "load": _lower_load,
    "slot_write": _lower_slot_write, "mma": _lower_mma, **SCORE_PATTERNS,
    "block_map_read": _lower_block_map_read, "softmax_step": _lower_softmax_step, "rescale": _lower_rescale,
}


SM80 = TargetLowering("sm_80", _setup, _operand_bases, _steps, {"step": STEP_PATTERNS})


class _Step(ScoredStep):
    """What the patterns of one KV step share (`_step`): the step's block
    and kind, the values its ops leave for the next (S as rows, P, the softmax state and
    alpha, O) and, made once when first asked, its tile_skip answer and slot offsets."""

    def __init__(self, kernel: KernelState, t, kv: KvSchedule, mode: str, acc_o, state: SoftmaxState,
                 body: tuple[StepOp, ...]):
        e, s = kernel.e, kernel.spec
        self.kernel, self.t, self.kv, self.mode = kernel, t, kv, mode
        self.n_block = kv.block(e, t)
        # Full steps only ever load blocks below full_hi <= N / block_n: no row predicates;
        # with lean loads, no step's loads of later blocks either (Note [Lean step loads]).
        self.partial = mode != "full"
        self.ragged = self.partial and not s.choices.lean_loads
        self.ask_skip = self.partial and s.asks_tile_skip
        self.acc_o, self.state = acc_o, state
        self.p = self.alpha = None
        self.ahead: dict[str, int] = {}
        # After the last of QK^T, score_mod and mask, S is masked (finish_scores).
        self.scores_end = [op for op in body if op.name in ("score_mod", "mask") or op.what == "qk"][-1]
        self._slots: dict[int, object] = {}
        self._skip = self

    def skip(self):
        """The block's tile_skip answer, when the step asks it (else None)."""
        if self._skip is self:
            self._skip = self.kernel.skip(self.n_block) if self.ask_skip else None
        return self._skip

    def slot(self, ahead: int):
        """The byte offset of the K/V slot of step t + ahead."""
        stages = self.kernel.spec.plan.stages
        key = ahead % stages
        if key not in self._slots:
            self._slots[key] = self.kernel.slot_offset(key, self.t)
        return self._slots[key]

    def skip_answer(self):
        return self.skip()
