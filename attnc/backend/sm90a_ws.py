"""The sm_90a forward kernel with a producer warpgroup (FlashAttention-3's roles).

Note [Producer warpgroup]: warpgroup 0 (threads 0..127) only loads; warpgroups 1..C
(`num_warps` = 4C warps, 64 query rows each) only compute. The two sides meet at
mbarriers in shared memory (after the tiles), one per event:

    q_full                  the Q tile has landed                  producer -> consumers
    k_full[s], v_full[s]    slot s holds the K (V) of its step     producer -> consumers
    k_empty[s], v_empty[s]  every consumer warp is done with it    consumers -> producer

The producer's copies are smem_tiles.py's cp.async into the same swizzled tiles; each
of its 128 threads then arrives on the full barrier with `cp.async.mbarrier.arrive
.noinc`, which counts once that thread's copies have landed (so a full barrier expects
128 arrivals). A consumer warp releases a slot with one arrival (lane 0) once the wgmma
that read it was waited for (an empty barrier expects num_warps). Step t uses slot
t mod S for the (t div S)-th time: consumers wait for the full phase of parity
(t div S) & 1, the producer for the empty phase of the opposite parity, which a fresh
barrier has already "completed" (the first S loads do not wait).

The producer issues K one step ahead of V -- K0, K1, V0, K2, V1, ... -- as the
consumers read them: iteration u of Note [wgmma overlap] (sm90a.py) runs QK^T(u) with
P.V(u - 1). K(u)'s slot frees when QK^T(u) was waited for, V(u)'s when P.V(u) was
(iteration u + 2, after the wait at its top), so with S stages K is loaded up to S
steps ahead and V S - 1.

With two consumer warpgroups and `pingpong`, they take turns at the tensor cores
(FlashAttention-3's ping-pong): a warpgroup issues its GEMMs of an iteration only
after the other issued its own (named barriers 1 and 2, 256 threads: one warpgroup
syncs, the other arrives), so that one's softmax runs while the other's GEMMs do.
Warpgroup 1 arrives once at the start to go first; warpgroup 0 syncs once more at the
end, which keeps both barriers' counts balanced.

Registers (setmaxnreg): with two or more consumer warpgroups the CTA is one per SM and
the roles' budgets are the plan's `regs` (by default the producer keeps 24 registers per
thread and the consumers share the rest, 240 each for two; with three, 192-row tiles, it
keeps 32 and they get 160: attnc/schedule/recipes.py). ptxas keeps setmaxnreg only in a
kernel declared one CTA per SM (.minnctapersm 1, sm80.py) and assembled as a whole
program (Note [Whole-program assembly] in cubin.py). The consumers' wgmma reads the
tiles through the async proxy after waiting on the full barrier, and fence.proxy.async
orders the cp.async writes (the generic proxy) before them. A producer thread waits for
all its copies before it exits. Where this kernel is the default, and what it measured:
`default_producer` in attnc/schedule/recipes.py.

Note [Persistent CTAs]: with `persistent` the grid is at most one CTA per SM
(manifest grid factor min_sms), and each CTA loops over query blocks w = ctaid.x,
then 2G - 1 - ctaid.x, 2G + ctaid.x, ... (G = gridDim.x; a snake, so that a CTA that
took a heavy block in one round takes a light one in the next; `walk_order=linear` on
attn-warp-specialize takes rG + ctaid.x every round), w -> (m_block, head,
batch) with m_block fastest and the heaviest (last) m_block first. Producer and
consumers walk the same blocks and count the K/V steps from the CTA's first (`t_base`),
so the ring's slots and phases run on across blocks: the consumers release every slot
they used -- the last two V slots of a block too, after its last P.V -- and Q's, through
one more barrier, q_empty, once the block's last QK^T landed. The producer then loads
the next block's Q, K and V while the consumers finish the last P.V and store O. Its tile
addresses are computed per block (an opaque copy of tid): hoisted out of the loop over
blocks, LLVM kept them live through it and ptxas spilled them. (The causal kernel's
producer, in 24 registers, still spills 284 bytes at head dim 128; the window's
spills nothing.) With ping-pong the consumers' turns run on from block to block (Note
[Ping-pong turns] in attnc/schedule/sync.py). The IR shows the walk in every role (Note
[The walk over query blocks] in attnc/schedule/walk.py). Where it is the default, and what
it measured: `default_persistent` in attnc/schedule/recipes.py.

Note [The next block's first QK^T]: without ping-pong the persistent consumers run a
rotated loop (_consume_rotated): an iteration issues its block's first QK^T, stores
the previous block's O while that runs (O and its softmax state carried from the last
iteration; the last block's after the loop), then waits for it and runs the block's
steps, so that the tensor cores are not idle through the epilogue: window 1024 at head
dim 128 5 % faster, persistent causal 2 % (results/sm90a_h200.md, "The next block's first
QK^T"). S must not leave the branch that issued it: with step 0's S passed out of an
scf.if (or carried around the loop) instead of into the steps in the same branch,
ptxas kept the consumers' S twice, spilled 700 bytes and serialized the wgmma. The IR
shows that rotation (Note [The next block's first QK^T in the IR] in
attnc/schedule/walk_ahead.py).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import nvvm, scf

from attnc.backend import sm90a
from attnc.backend.block_walk import BlockWalk
from attnc.backend.forward import TargetLowering, own_ops
from attnc.backend.kernel_spec import PRODUCER_THREADS
from attnc.backend.nvgpu_builders import MBarrier, NamedBarrier, fence_async_proxy, set_max_registers
from attnc.backend.smem_layout import init_order
from attnc.backend.smem_tiles import TileLoader
from attnc.backend.wgmma_trips import Load, Trip
from attnc.schedule.alloc import MBARRIER_BYTES
from attnc.schedule.recipes import consumer_registers, producer_registers


def _setup(cx) -> None:
    """sm90a.py's state, with the producer plan's trips and loads, and the mbarriers."""
    sm90a.setup(cx)
    cx.trips = cx.spec.steps.trips      # Note [Overlapped steps op by op] (wgmma_steps.py)
    cx.loads = cx.spec.steps.loads      # Note [Loads op by op] (load_steps.py)
    cx.trip_kind = Trip
    cx.mbar = MBarrier(cx.e)


def _barrier(cx, key: str, slot=None):
    """The shared address of barrier `key` (tile_side; of K/V slot index `slot`, an
    i32): where the plan's attn.mbarrier_init puts it (Note [Mbarriers as planned])."""
    e = cx.e
    offset = e.c32(cx.spec.layout.barrier(key).offset)
    if slot is not None:
        offset = e.add(offset, e.mul(slot, MBARRIER_BYTES))
    return cx.smem.address(offset)


def _use(cx, t):
    """(slot index, parity of its full phase) of step t (of the current block)."""
    e, stages = cx.e, cx.spec.plan.stages
    t = cx.global_step(t)
    return e.rem(t, stages), e.and_(e.div(t, stages), 1)


# ------------------------------------------------------------ the kernel
def _emit(cx) -> None:
    """The kernel's outline: the barriers' init, then the producer's and the consumers' roles."""
    e, s = cx.e, cx.spec
    tid = nvvm.read_ptx_sreg_tid_x(e.i32)
    if not s.plan.persistent:
        _set_item(cx, *cx.grid_item())
    first = scf.IfOp(e.eq(tid, 0))
    with ir.InsertionPoint(first.then_block):
        for bar, stage in init_order(s.layout.barriers):
            cx.mbar.init(_barrier(cx, bar.key, e.c32(stage) if bar.stages > 1 else None), bar.count)
        scf.yield_([])
    cx.bar.sync()
    role = scf.IfOp(e.lt(tid, PRODUCER_THREADS), has_else=True)
    with ir.InsertionPoint(role.then_block):
        _producer(cx, tid)
        scf.yield_([])
    with ir.InsertionPoint(role.else_block):
        _consumer(cx, e.sub(tid, PRODUCER_THREADS))
        scf.yield_([])


def _set_item(cx, m_block, h, b) -> None:
    """Make query block m_block of head h, batch b the one the loads, steps and
    epilogue work on."""
    e = cx.e
    cx.m_block, cx.h, cx.b = m_block, h, b
    cx.kv_h = e.div(h, e.div(e.dim("H"), e.dim("HKV")))
    cx.kv_ptr = {n: cx.tensor(n, b, cx.kv_h) for n in ("k", "v")}


def _for_each_item(cx, body, carried=()) -> list:
    """body(cx, round, values) for each query block of this CTA, in rounds of the grid
    (Note [Persistent CTAs]; one block, the grid's, round 0, unless persistent); body
    returns the K/V steps it ran and the values it carries to the next block's body
    (`carried` the first's). Returns the last values."""
    e, s = cx.e, cx.spec
    if not s.plan.persistent:
        return body(cx, e.c32(0), list(carried))[1]
    walk = cx._walk = BlockWalk(e, e.cdiv(e.dim("M"), s.block_m), e.dim("H"), e.dim("B"), s.plan.walk)
    loop = scf.ForOp(e.c32(0), walk.rounds, e.c32(1), [e.c32(0), *carried])
    with ir.InsertionPoint(loop.body):
        rnd, (t_base, *values) = loop.induction_variable, loop.inner_iter_args
        valid, item = walk.item(rnd)
        branch = scf.IfOp(valid, [v.type for v in loop.inner_iter_args], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            _set_item(cx, *item)
            cx.t_base = t_base
            steps, values = body(cx, rnd, values)
            scf.yield_([e.add(t_base, steps), *values])
        with ir.InsertionPoint(branch.else_block):
            scf.yield_(list(loop.inner_iter_args))
        scf.yield_(list(branch.results))
    return list(loop.results)[1:]


def _sets_registers(cx) -> bool:
    return cx.spec.consumer_warpgroups >= 2


# ------------------------------------------------------------ producer
def _producer(cx, tid) -> None:
    e = cx.e
    if _sets_registers(cx):
        s = cx.spec
        set_max_registers(s.plan.producer_regs or producer_registers(s.consumer_warpgroups), increase=False)
    cx.tid = tid
    cx.loader = TileLoader(e, cx.cp, cx.smem, tid, PRODUCER_THREADS)
    _for_each_item(cx, _produce_block)
    # No copy of this thread is left in flight when it exits (the consumers may
    # still be waiting for the last ones).
    cx.cp.wait(0)


def _produce_block(cx, rnd, carried):
    """Q's load, then K0 and the trips of Note [Loads op by op] (load_steps.py): K(t
    + 1) where there is one and V(t), in the order the IR's trip has them -- K0, K1,
    V0, K2, V1, ... by default."""
    e = cx.e
    if cx.spec.plan.persistent:
        # The copies' addresses are the block's: computed in its loop body, not
        # hoisted out of the loop over blocks and kept live through it (spills).
        cx.loader = TileLoader(e, cx.cp, cx.smem, e.opaque(cx.tid), PRODUCER_THREADS)
    # Q's slot: one, whose phase flips every round (Q's ring, of one stage, through the walk)
    q = Load(None, e.and_(rnd, 1), None, None)
    cx.target.run(cx, "load", cx.loads.q, q)
    kv = cx.kv_range(cx.m_block)
    total = kv.total(e)
    runs = cx.loads.runs()
    some = scf.IfOp(e.gt(total, 0))
    with ir.InsertionPoint(some.then_block):
        _load_run(cx, cx.loads.first, kv, e.c32(0))
        loop = scf.ForOp(e.c32(0), total, e.c32(1))
        with ir.InsertionPoint(loop.body):
            t = loop.induction_variable
            for tile, ops in runs:
                if tile == "v":
                    _load_run(cx, ops, kv, t)
                    continue
                following = e.add(t, 1)
                more = scf.IfOp(e.lt(following, total))
                with ir.InsertionPoint(more.then_block):
                    _load_run(cx, ops, kv, following)
                    scf.yield_([])
            scf.yield_([])
        scf.yield_([])
    return total, []


def _load_run(cx, ops, kv, t) -> None:
    """Ops of one tile's load of step t, a pattern each (Note [Loads op by op])."""
    cx.target.run(cx, "load", ops, Load(*_use(cx, t), kv, t))


def _load_wait(cx, op, load) -> None:
    """Until the consumers released the slot (its empty phase)."""
    tile = op.what
    cx.mbar.wait(_barrier(cx, f"{tile}_empty", load.slot), cx.e.xor(load.parity, 1))


def _load_write(cx, op, load) -> None:
    """The tile's copies into the slot; rows at or past N (M for Q) are zero-filled, and
    so is a block the mask skips (Note [Skipped blocks] in forward_loads.py)."""
    tile = op.what
    e, s = cx.e, cx.spec
    if tile == "q":
        cx.load_q(cx.m_block)
        return
    n_block = load.kv.block(e, load.t)
    skip = cx.skip(n_block) if s.hooks.tile_skip is not None else None
    cx.load_kv(tile, n_block, e.mul(load.slot, cx.slot_bytes), True, skip)


def _load_arrive(cx, op, load) -> None:
    """This thread's arrival on the full barrier, once its copies landed."""
    tile = op.what
    cx.mbar.arrive_on_copies(_barrier(cx, f"{tile}_full", load.slot))


# ------------------------------------------------------------ consumers
def _consumer(cx, ctid) -> None:
    e, s = cx.e, cx.spec
    if _sets_registers(cx):
        set_max_registers(s.plan.consumer_regs or consumer_registers(s.consumer_warpgroups), increase=True)
    cx.tid = ctid
    cx.warp = e.shr(ctid, 5)
    cx.lane = e.and_(ctid, 31)
    cx.warp_row0 = e.mul(cx.warp, s.rows_per_warp)
    if not s.plan.persistent:
        cx.set_row0(cx.m_block)
    cx.col0 = e.shl(e.and_(cx.lane, 3), 1)
    cx.target.operand_bases(cx)
    if not s.plan.persistent:
        cx.set_masker()
    if _qk_ahead(cx):
        _consume_rotated(cx)
    elif s.plan.pingpong and s.plan.persistent:
        # the turns run on from block to block (Note [Ping-pong turns] in sync.py)
        _first_turn(cx)
        _for_each_item(cx, _consume_block)
        _last_turn(cx)
    else:
        _for_each_item(cx, _consume_block)


def _qk_ahead(cx) -> bool:
    """Note [The next block's first QK^T]: the persistent kernel without ping-pong."""
    s = cx.spec
    return s.plan.persistent and not s.plan.pingpong


def _consume_rotated(cx) -> None:
    """Note [The next block's first QK^T]: each block's body issues its first QK^T,
    stores the previous block's O (carried: round, O, softmax state) while it runs,
    then runs the block's steps; the last block's O is stored after the loop."""
    e, s = cx.e, cx.spec
    start = cx.softmax.initial(2 * s.m_atoms)
    initial = [e.cf(0.0)] * (s.m_atoms * (s.variant.head_dim_v // 8) * 4) + start.m + start.l

    def body(cx, rnd, carried):
        prev, *rest = carried
        kv, total = _begin_block(cx, e.and_(rnd, 1))
        first = scf.IfOp(e.gt(total, 0), [v.type for v in rest], has_else=True)
        with ir.InsertionPoint(first.then_block):
            _await_full(cx, "k", e.c32(0))
            cx.wgmma.fence()
            acc = sm90a.qk_issue(cx, cx.slot_offset(0, e.c32(0)))
            _finish(cx, prev, rest)
            # S goes to the steps inside this branch (see the Note).
            scores = cx.unflatten(cx.wgmma.wait(acc), s.block_n // 8)
            cx.set_row0(cx.m_block)
            cx.set_masker()
            acc_o, state = sm90a.overlapped_steps(
                cx, kv, total, start, lambda cx, kv, state: _first_step_issued(cx, kv, state, scores))
            scf.yield_(cx.flat(acc_o) + state.m + state.l)
        with ir.InsertionPoint(first.else_block):
            _finish(cx, prev, rest)
            scf.yield_(initial)
        return total, [rnd, *first.results]

    prev, *rest = _for_each_item(cx, body, [e.c32(-1), *initial])
    _finish(cx, prev, rest)


def _finish(cx, prev, carried) -> None:
    """The epilogue of round `prev`'s block (none when prev < 0), whose O and softmax
    state are `carried` (flat)."""
    e = cx.e
    some = scf.IfOp(e.ge(prev, 0))
    with ir.InsertionPoint(some.then_block):
        _, (m_block, h, b) = cx._walk.item(prev)
        current = cx.h, cx.b, getattr(cx, "row0", None)
        cx.h, cx.b = h, b
        cx.set_row0(m_block)
        cx.epilogue(*cx.unpack_carried(list(carried)))
        cx.h, cx.b, cx.row0 = current
        scf.yield_([])


def _begin_block(cx, parity):
    """(the key schedule, its step count) of the current block, once its Q landed."""
    e = cx.e
    kv = cx.kv_range(cx.m_block)
    total = kv.total(e)
    cx._last_step = e.sub(total, 1)
    cx.mbar.wait(_barrier(cx, "q_full"), parity)
    if cx.spec.plan.persistent:
        # A block without steps never reads Q (else the last QK^T releases it: _k_read).
        empty = scf.IfOp(e.eq(total, 0))
        with ir.InsertionPoint(empty.then_block):
            _release_q(cx)
            scf.yield_([])
    return kv, total


def _consume_block(cx, rnd, carried):
    e, s = cx.e, cx.spec
    if s.plan.persistent:
        cx.set_row0(cx.m_block)
        cx.set_masker()
    per_block = s.plan.pingpong and not s.plan.persistent
    if per_block:
        _first_turn(cx)
    kv, total = _begin_block(cx, e.and_(rnd, 1))
    acc_o, state = cx.target.steps(cx, kv)
    if per_block:
        _last_turn(cx)
    cx.epilogue(acc_o, state)
    return total, []


def _first_turn(cx) -> None:
    """Note [Ping-pong turns] (sync.py): warpgroup 1 hands warpgroup 0 the first turn."""
    e = cx.e
    warpgroup = e.shr(cx.warp, 2)
    cx._turns = [NamedBarrier(e, ident, threads) for ident, threads in cx.trips.turns]   # Note [Turns as planned]
    cx._first = e.eq(warpgroup, 0)
    second = scf.IfOp(e.eq(warpgroup, 1))
    with ir.InsertionPoint(second.then_block):
        cx._turns[0].arrive()
        scf.yield_([])


def _last_turn(cx) -> None:
    """Warpgroup 0's last sync, which balances warpgroup 1's first arrive."""
    last = scf.IfOp(cx._first)
    with ir.InsertionPoint(last.then_block):
        cx._turns[0].sync()
        scf.yield_([])


def _await_full(cx, name: str, t) -> None:
    slot, parity = _use(cx, t)
    cx.mbar.wait(_barrier(cx, f"{name}_full", slot), parity)
    fence_async_proxy()


def _release(cx, name: str, t) -> None:
    slot, _ = _use(cx, t)
    cx.mbar.arrive(_barrier(cx, f"{name}_empty", slot), only=cx.e.eq(cx.lane, 0))


def _k_read(cx, u) -> None:
    _release(cx, "k", u)
    if cx.spec.plan.persistent:
        last = scf.IfOp(cx.e.eq(u, cx._last_step))
        with ir.InsertionPoint(last.then_block):
            _release_q(cx)
            scf.yield_([])


def _release_q(cx) -> None:
    cx.mbar.arrive(_barrier(cx, "q_empty"), only=cx.e.eq(cx.lane, 0))


# ------------------------------------------------ Note [Overlapped steps op by op]
def _first_step_issued(cx, kv, state, scores):
    """Step 0 where its QK^T was issued before, its S `scores` (Note [The next block's
    first QK^T]): its scores and softmax."""
    e, s = cx.e, cx.spec
    n0 = kv.block(e, e.c32(0))
    skip = cx.skip(n0) if s.hooks.tile_skip is not None else None
    _k_read(cx, e.c32(0))
    softmax, mask = own_ops(cx.trips.first)
    rows, offset = cx.scores(scores, n0, "partial", skip, mask)
    probs, state, alpha = cx.softmax_step(rows, state, "partial", softmax, offset)
    return state, sm90a.nothing_in_flight(cx, probs, alpha)


def _last_wait(cx, op, last) -> None:
    _await_full(cx, "v", last.step)


def _last_release_v_before(cx, op, last) -> None:
    _release_v_back(cx, last.step, 1)


def _release_v_back(cx, step, back: int) -> None:
    """Release V of step `step - back`, where there is one."""
    e = cx.e
    exists = scf.IfOp(e.ge(step, back))
    with ir.InsertionPoint(exists.then_block):
        _release(cx, "v", e.sub(step, back))
        scf.yield_([])


def _last_release_v(cx, op, last) -> None:
    _release(cx, "v", last.step)


def _trip_release_v_late(cx, op, trip) -> None:
    _release_v_back(cx, trip.u, 2)


def _trip_wait(cx, op, trip) -> None:
    _await_full(cx, op.what, trip.u if op.what == "k" else cx.e.sub(trip.u, 1))


def _trip_release_k(cx, op, trip) -> None:
    _release(cx, "k", trip.u)


def _trip_release_q(cx, op, trip) -> None:
    last = scf.IfOp(cx.e.eq(trip.u, cx._last_step))
    with ir.InsertionPoint(last.then_block):
        _release_q(cx)
        scf.yield_([])


def _turn_sync(cx, op, step) -> None:
    """Before a warpgroup issues its GEMMs: with ping-pong, its turn."""
    step.fence()
    if cx.spec.plan.pingpong:
        _on_own_turn(cx, lambda turn: turn.sync())


def _turn_arrive(cx, op, step) -> None:
    """After a warpgroup issued its GEMMs: with ping-pong, the other's turn."""
    if cx.spec.plan.pingpong:
        _on_own_turn(cx, lambda turn: turn.arrive(), other=True)


def _on_own_turn(cx, action, other: bool = False) -> None:
    """`action` on this warpgroup's turn barrier (the other's with `other`)."""
    mine = scf.IfOp(cx._first, has_else=True)
    with ir.InsertionPoint(mine.then_block):
        action(cx._turns[1 if other else 0])
        scf.yield_([])
    with ir.InsertionPoint(mine.else_block):
        action(cx._turns[0 if other else 1])
        scf.yield_([])


# The producer's patterns (Note [Loads op by op]), and the consumers': sm90a.py's with
# their waits and releases (Note [Overlapped steps op by op])
LOAD_PATTERNS = {"wait": _load_wait, "write": _load_write, "arrive": _load_arrive}


TURNS = {"turn_sync": _turn_sync, "turn_arrive": _turn_arrive}


TRIP_PATTERNS = {**sm90a.TRIP_PATTERNS, **TURNS, "wait": _trip_wait, "release_k": _trip_release_k,
                 "release_q": _trip_release_q, "release_v_late": _trip_release_v_late}


LAST_PATTERNS = {**sm90a.LAST_PATTERNS, **TURNS, "wait": _last_wait, "release_v_before": _last_release_v_before,
                 "release_v": _last_release_v}


SM90A_WS = TargetLowering("sm_90a (producer warpgroup)", _setup, sm90a.operand_bases, sm90a.steps,
                          {"trip": TRIP_PATTERNS, "last": LAST_PATTERNS, "load": LOAD_PATTERNS}, emit=_emit)
