"""The sm_90a forward kernel with a producer warpgroup (FlashAttention-3's roles).

Note [Producer warpgroup]: warpgroup 0 (threads 0..127) only loads; warpgroups 1..C
(`num_warps` = 4C warps, 64 query rows each) only compute. The two sides meet at
mbarriers in shared memory (after the tiles), one per event:

    q_full                  the Q tile has landed                  producer -> consumers
    k_full[s], v_full[s]    slot s holds the K (V) of its step     producer -> consumers
    k_empty[s], v_empty[s]  every consumer warp is done with it    consumers -> producer

The producer's copies are sm80_tiles.py's cp.async into the same swizzled tiles; each
of its 128 threads then arrives on the full barrier with `cp.async.mbarrier.arrive
.noinc`, which counts once that thread's copies have landed (so a full barrier expects
128 arrivals). A consumer warp releases a slot with one arrival (lane 0) once the wgmma
that read it was waited for (an empty barrier expects num_warps). Step t uses slot
t mod S for the (t div S)-th time: consumers wait for the full phase of parity
(t div S) & 1, the producer for the empty phase of the opposite parity, which a fresh
barrier has already "completed" (the first S loads do not wait).

The producer issues K one step ahead of V -- K0, K1, V0, K2, V1, ... -- as the
consumers read them: iteration u of Note [wgmma overlap] (sm90.py) runs QK^T(u) with
P.V(u - 1). K(u)'s slot frees when QK^T(u) was waited for, V(u)'s when P.V(u) was
(iteration u + 2, after the wait at its top), so with S stages K is loaded up to S
steps ahead and V S - 1.

With two consumer warpgroups and `pingpong`, they take turns at the tensor cores
(FlashAttention-3's ping-pong): a warpgroup issues its GEMMs of an iteration only
after the other issued its own (named barriers 1 and 2, 256 threads: one warpgroup
syncs, the other arrives), so that one's softmax runs while the other's GEMMs do.
Warpgroup 1 arrives once at the start to go first; warpgroup 0 syncs once more at the
end, which keeps both barriers' counts balanced.

Registers (setmaxnreg): with two or more consumer warpgroups the producer keeps 24
registers per thread and the consumers share the rest (240 each for two), as the CTA
is one per SM. ptxas keeps setmaxnreg only in a kernel declared one CTA per SM
(.minnctapersm 1, sm80.py) and assembled as a whole program (Note [Whole-program
assembly] in cubin.py). The consumers' wgmma reads the tiles through the async proxy
after waiting on the full barrier, and fence.proxy.async orders the cp.async writes
(the generic proxy) before them. A producer thread waits for all its copies before it
exits. Where this kernel is the default, and what it measured: Sm80KernelSpec.warp_specialized.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import nvvm, scf

from attnc.backend.kernel_spec import MBARRIER_BYTES, PRODUCER_THREADS, SLOT_BARRIERS, SM90_REGISTERS_PER_SM
from attnc.backend.nvgpu_builders import MBarrier, NamedBarrier, fence_async_proxy, set_max_registers
from attnc.backend.sm80_tiles import TileLoader
from attnc.backend.sm90 import Sm90Forward

PRODUCER_REGISTERS = 24
MAX_CONSUMER_REGISTERS = 240


def consumer_registers(consumer_warpgroups: int) -> int:
    """Registers per consumer thread after setmaxnreg: what the producer's 24 leave of
    the SM's 64K, a multiple of 8, at most 240."""
    free = SM90_REGISTERS_PER_SM - PRODUCER_THREADS * PRODUCER_REGISTERS
    return min(MAX_CONSUMER_REGISTERS, free // (PRODUCER_THREADS * consumer_warpgroups) // 8 * 8)


class Sm90WsForward(Sm90Forward):
    """Emits the producer/consumer kernel body at the current insertion point."""

    def __init__(self, spec, args):
        super().__init__(spec, args)
        self.mbar = MBarrier(self.e)
        base, stages = spec.tiles_bytes, spec.stages
        self._bar_offsets = {"q_full": base}
        for i, name in enumerate(SLOT_BARRIERS):
            self._bar_offsets[name] = base + MBARRIER_BYTES * (1 + stages * i)

    def _barrier(self, name: str, slot=None):
        """The shared address of barrier `name` (of K/V slot index `slot`, an i32)."""
        e = self.e
        offset = e.c32(self._bar_offsets[name])
        if slot is not None:
            offset = e.add(offset, e.mul(slot, MBARRIER_BYTES))
        return self.smem.address(offset)

    def _use(self, t):
        """(slot index, parity of its full phase) of step t."""
        e, stages = self.e, self.spec.stages
        return e.rem(t, stages), e.and_(e.div(t, stages), 1)

    # ------------------------------------------------------------ the kernel
    def emit(self) -> None:
        e, s = self.e, self.spec
        tid = nvvm.read_ptx_sreg_tid_x(e.i32)
        self.m_block = e.sub(e.sub(nvvm.read_ptx_sreg_nctaid_x(e.i32), 1), nvvm.read_ptx_sreg_ctaid_x(e.i32))
        self.h = nvvm.read_ptx_sreg_ctaid_y(e.i32)
        self.b = nvvm.read_ptx_sreg_ctaid_z(e.i32)
        self.kv_h = e.div(self.h, e.div(e.dim("H"), e.dim("HKV")))
        self.kv_ptr = {n: self._tensor(n, self.b, self.kv_h) for n in ("k", "v")}
        first = scf.IfOp(e.eq(tid, 0))
        with ir.InsertionPoint(first.then_block):
            self.mbar.init(self._barrier("q_full"), PRODUCER_THREADS)
            for i in range(s.stages):
                slot = e.c32(i)
                self.mbar.init(self._barrier("k_full", slot), PRODUCER_THREADS)
                self.mbar.init(self._barrier("v_full", slot), PRODUCER_THREADS)
                self.mbar.init(self._barrier("k_empty", slot), s.num_warps)
                self.mbar.init(self._barrier("v_empty", slot), s.num_warps)
            scf.yield_([])
        self.bar.sync()
        role = scf.IfOp(e.lt(tid, PRODUCER_THREADS), has_else=True)
        with ir.InsertionPoint(role.then_block):
            self._producer(tid)
            scf.yield_([])
        with ir.InsertionPoint(role.else_block):
            self._consumer(e.sub(tid, PRODUCER_THREADS))
            scf.yield_([])

    @property
    def _sets_registers(self) -> bool:
        return self.spec.consumer_warpgroups >= 2

    # ------------------------------------------------------------ producer
    def _producer(self, tid) -> None:
        """Q, then K0, K1, V0, K2, V1, ...: each into its slot once the consumers
        released it, each followed by this thread's arrival on its full barrier."""
        e = self.e
        if self._sets_registers:
            set_max_registers(PRODUCER_REGISTERS, increase=False)
        self.loader = TileLoader(e, self.cp, self.smem, tid, PRODUCER_THREADS)
        self._load_q(self.m_block)
        self.mbar.arrive_on_copies(self._barrier("q_full"))
        kv = self._kv_range(self.m_block)
        total = kv.total(e)
        some = scf.IfOp(e.gt(total, 0))
        with ir.InsertionPoint(some.then_block):
            self._produce("k", kv, e.c32(0))
            loop = scf.ForOp(e.c32(0), total, e.c32(1))
            with ir.InsertionPoint(loop.body):
                t = loop.induction_variable
                following = e.add(t, 1)
                more = scf.IfOp(e.lt(following, total))
                with ir.InsertionPoint(more.then_block):
                    self._produce("k", kv, following)
                    scf.yield_([])
                self._produce("v", kv, t)
                scf.yield_([])
            scf.yield_([])
        # No copy of this thread is left in flight when it exits (the consumers may
        # still be waiting for the last ones).
        self.cp.wait(0)

    def _produce(self, name: str, kv, t) -> None:
        """Load K or V of step t into its slot once it is empty, then arrive on its full
        barrier. Rows at or past N are zero-filled, and so is a block the mask skips
        (Note [Skipped blocks] in sm80.py)."""
        e, s = self.e, self.spec
        slot, parity = self._use(t)
        self.mbar.wait(self._barrier(f"{name}_empty", slot), e.xor(parity, 1))
        n_block = kv.block(e, t)
        skip = self._skip(n_block) if s.tile_skip is not None else None
        self._load_kv(name, n_block, e.mul(slot, self.slot_bytes), True, skip)
        self.mbar.arrive_on_copies(self._barrier(f"{name}_full", slot))

    # ------------------------------------------------------------ consumers
    def _consumer(self, ctid) -> None:
        e, s = self.e, self.spec
        if self._sets_registers:
            set_max_registers(consumer_registers(s.consumer_warpgroups), increase=True)
        self.tid = ctid
        self.warp = e.shr(ctid, 5)
        self.lane = e.and_(ctid, 31)
        self.warp_row0 = e.mul(self.warp, s.rows_per_warp)
        self._set_row0(self.m_block)
        self.col0 = e.shl(e.and_(self.lane, 3), 1)
        self._operand_bases()
        self._set_masker()
        warpgroup = e.shr(self.warp, 2)
        if s.pingpong:
            self._turns = [NamedBarrier(e, 1 + g, 2 * PRODUCER_THREADS) for g in (0, 1)]
            self._first = e.eq(warpgroup, 0)
            second = scf.IfOp(e.eq(warpgroup, 1))
            with ir.InsertionPoint(second.then_block):
                self._turns[0].arrive()
                scf.yield_([])
        kv = self._kv_range(self.m_block)
        self.mbar.wait(self._barrier("q_full"), e.c32(0))
        acc_o, state = self._steps(kv)
        if s.pingpong:
            last = scf.IfOp(self._first)
            with ir.InsertionPoint(last.then_block):
                self._turns[0].sync()
                scf.yield_([])
        self._epilogue(acc_o, state)

    def _await_first(self) -> None:
        e = self.e
        self._await_full("k", e.c32(0))

    def _await_full(self, name: str, t) -> None:
        slot, parity = self._use(t)
        self.mbar.wait(self._barrier(f"{name}_full", slot), parity)
        fence_async_proxy()

    def _release(self, name: str, t) -> None:
        slot, _ = self._use(t)
        self.mbar.arrive(self._barrier(f"{name}_empty", slot), only=self.e.eq(self.lane, 0))

    def _await_step(self, u, n_block, kv, mode: str):
        """P.V(u - 2) has landed: release its V slot; wait for K(u) and V(u - 1)."""
        e, s = self.e, self.spec
        after_two = scf.IfOp(e.ge(u, 2))
        with ir.InsertionPoint(after_two.then_block):
            self._release("v", e.sub(u, 2))
            scf.yield_([])
        self._await_full("k", u)
        self._await_full("v", e.sub(u, 1))
        ask_skip = mode != "full" and s.tile_skip is not None
        return self._skip(n_block) if ask_skip else None

    def _await_last(self, last) -> None:
        self._await_full("v", last)

    def _k_read(self, u) -> None:
        self._release("k", u)

    def _turn_begin(self) -> None:
        if self.spec.pingpong:
            self._on_own_turn(lambda turn: turn.sync())

    def _turn_end(self) -> None:
        if self.spec.pingpong:
            self._on_own_turn(lambda turn: turn.arrive(), other=True)

    def _on_own_turn(self, action, other: bool = False) -> None:
        """`action` on this warpgroup's turn barrier (the other's with `other`)."""
        mine = scf.IfOp(self._first, has_else=True)
        with ir.InsertionPoint(mine.then_block):
            action(self._turns[1 if other else 0])
            scf.yield_([])
        with ir.InsertionPoint(mine.else_block):
            action(self._turns[0 if other else 1])
            scf.yield_([])
