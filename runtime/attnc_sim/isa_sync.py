"""CTA synchronization: named barriers (bar.sync, bar.arrive, bar.red, barrier.*),
mbarriers (init, arrive, expect_tx, try_wait / test_wait .parity), fences
(fence.proxy.async: proxies.py), setmaxnreg.

A warp at a barrier blocks (isa.BLOCK) and the engine runs others; the barrier's
completion moves each waiter past it. A named barrier counts threads, a warp arriving
for its 32; its count must be the same at every arrival of a phase. An mbarrier lives
in `Cta.mbarriers` by shared address; `mbarrier_at` finds it for any family (TMA,
tcgen05.commit).
"""
from __future__ import annotations

import numpy as np

from attnc_sim import isa, proxies
from attnc_sim.errors import SimError
from attnc_sim.isa_warp import require_converged
from attnc_sim.state import WARP, NamedBarrier


# --- named barriers ---------------------------------------------------------------

def _barrier_arrive(w, bar_id: int, count: int | None, where: str, wait: bool, on_release=None) -> bool:
    """`w` arrives at named barrier `bar_id`; True when the barrier completed now."""
    cta = w.cta
    bar = cta.barriers.setdefault(bar_id, NamedBarrier())
    expected = count if count is not None else WARP * sum(1 for x in cta.warps if not x.done)
    if bar.arrived and bar.expected != expected:
        cta.launch.report("barrier", w, where, f"named barrier {bar_id} expects {expected} threads here "
                                               f"but {bar.expected} at an earlier arrival of this phase")
    bar.expected = expected
    bar.all_threads = count is None
    bar.arrived += WARP
    if wait:
        bar.waiters.append((w, on_release))
    if bar.arrived >= bar.expected:
        if bar.arrived > bar.expected:
            cta.launch.report("barrier", w, where, f"named barrier {bar_id}: {bar.arrived} threads arrived "
                                                   f"for a count of {bar.expected}")
        _release(cta, bar_id)
        return True
    return False


def _release(cta, bar_id):
    bar = cta.barriers.pop(bar_id)
    for waiter, on_release in bar.waiters:
        proxies.acquired(waiter)
        if on_release is not None:
            on_release(waiter)
        waiter.pc += 1
        waiter.blocked = False
        waiter.waiting = None


def recheck_barriers(cta):
    """After a warp exits: a barrier counting every thread may now be complete."""
    live = WARP * sum(1 for x in cta.warps if not x.done)
    for bar_id, bar in list(cta.barriers.items()):
        if getattr(bar, "all_threads", False) and bar.arrived >= live:
            _release(cta, bar_id)


def _count_of(ctx, ops, i):
    if len(ops) > i:
        r = ctx.reader(ops[i], "u32")
        return lambda w: int(r(w)[np.flatnonzero(w.mask)[0]])
    return lambda w: None


@isa.register("bar.sync", "barrier.sync", "bar.arrive", "barrier.arrive", "barrier.cta.sync",
              "barrier.cta.arrive", "bar.cta.sync", "bar.cta.arrive")
def bar(ins, ctx):
    wait = "arrive" not in ins.parts
    ident = ctx.reader(ins.operands[0], "u32")
    count = _count_of(ctx, ins.operands, 1)
    where = ins.where()

    def run(w):
        require_converged(w, None, where)
        bar_id = int(ident(w)[np.flatnonzero(w.mask)[0]])
        w.waiting = f"named barrier {bar_id}"
        done = _barrier_arrive(w, bar_id, count(w), where, wait)
        if not wait:
            w.waiting = None
            return None
        if done:
            proxies.acquired(w)
        return isa.JUMP if done else isa.BLOCK
    return run


@isa.register("bar.red", "barrier.red", "barrier.cta.red")
def bar_red(ins, ctx):
    op = ins.parts[-2]
    ty = ins.parts[-1]
    ops = ins.operands
    d = ctx.writer(ops[0], "pred" if ty == "pred" else "u32")
    ident = ctx.reader(ops[1], "u32")
    count = _count_of(ctx, ops, 2) if len(ops) == 4 else (lambda w: None)
    c = ctx.reader(ops[-1], "pred")
    where = ins.where()

    def run(w):
        require_converged(w, None, where)
        cta = w.cta
        bar_id = int(ident(w)[np.flatnonzero(w.mask)[0]])
        acc = cta.__dict__.setdefault("bar_red", {})
        vals = c(w)[w.mask]
        cur = acc.get(bar_id, {"and": True, "or": False, "popc": 0})
        acc[bar_id] = {"and": cur["and"] and bool(vals.all()), "or": cur["or"] or bool(vals.any()),
                       "popc": cur["popc"] + int(vals.sum())}

        def on_release(waiter, box=acc, key=bar_id):
            result = box["__result__" + str(key)]
            waiter.wmask, waiter.wfull = waiter.mask, waiter.full
            d(waiter, np.full(WARP, result[op], np.bool_ if ty == "pred" else np.uint32))

        w.waiting = f"named barrier {bar_id} (bar.red)"
        bar_state = cta.barriers.get(bar_id)
        expected = count(w) if count(w) is not None else WARP * sum(1 for x in cta.warps if not x.done)
        arrived = (bar_state.arrived if bar_state else 0) + WARP
        if arrived >= expected:
            acc["__result__" + str(bar_id)] = acc.pop(bar_id)
        done = _barrier_arrive(w, bar_id, count(w), where, True, on_release)
        if done:
            proxies.acquired(w)
        return isa.JUMP if done else isa.BLOCK
    return run


# --- mbarriers ----------------------------------------------------------------------

class MBarrier:
    """An mbarrier object: `expected` arrivals per phase, `pending` still to come in the
    current phase, `tx` transaction bytes still to come, `phase` phases completed."""

    def __init__(self, cta, addr: int, expected: int):
        self.cta, self.addr, self.expected = cta, addr, expected
        self.pending, self.tx, self.phase = expected, 0, 0
        self.waiters: list = []

    def arrive(self, w, count: int, where: str, pending_only: bool = False) -> int:
        """`count` arrivals (of threads); the phase they arrived on."""
        phase = self.phase
        self.pending -= count
        if self.pending < 0:
            self.cta.launch.report("mbarrier", w, where,
                                   f"mbarrier at shared {self.addr:#x}: {count} arrivals where "
                                   f"{self.pending + count} were pending (init count {self.expected}, phase {self.phase})")
        self._maybe_complete()
        return phase

    def add_pending(self, w, count: int, where: str) -> None:
        self.pending += count

    def expect_tx(self, w, nbytes: int, where: str) -> None:
        self.tx += nbytes

    def complete_tx(self, w, nbytes: int, where: str) -> None:
        self.tx -= nbytes
        if self.tx < 0:
            self.cta.launch.report("mbarrier", w, where, f"mbarrier at shared {self.addr:#x}: "
                                                         f"{-self.tx} more transaction bytes completed than expected")
        self._maybe_complete()

    def phase_done(self, parity: int) -> bool:
        """try_wait.parity: the phase of parity `parity` has completed."""
        return (self.phase & 1) != parity

    def _maybe_complete(self):
        if self.pending <= 0 and self.tx <= 0:
            self.phase += 1
            self.pending, self.tx = self.expected, 0
            for waiter in self.waiters:
                waiter.blocked = False
                waiter.waiting = None
            self.waiters.clear()


def mbarrier_at(w, addr: int, where: str) -> MBarrier:
    bar = w.cta.mbarriers.get(addr)
    if bar is None:
        raise SimError(f"{w.name()}: no mbarrier initialized at shared {addr:#x} at {where}")
    return bar


def _one(values, w, what, where):
    """The value all active lanes agree on (one mbarrier per instruction per warp)."""
    vals = values[w.wmask]
    if vals.size and (vals != vals[0]).any():
        raise SimError(f"{w.name()}: lanes use different {what} in one instruction at {where}; not supported")
    return int(vals[0])


@isa.register("mbarrier.init")
def mbarrier_init(ins, ctx):
    addr = ctx.address(ins.operands[0])
    count = ctx.reader(ins.operands[1], "u32")
    where = ins.where()

    def run(w):
        a = _one(addr(w), w, "mbarriers", where)
        if a % 8:
            raise SimError(f"{w.name()}: mbarrier at misaligned shared address {a:#x} at {where}")
        w.cta.mbarriers[a] = MBarrier(w.cta, a, _one(count(w), w, "counts", where))
    return run


@isa.register("mbarrier.inval")
def mbarrier_inval(ins, ctx):
    addr = ctx.address(ins.operands[0])
    where = ins.where()
    return lambda w: w.cta.mbarriers.pop(_one(addr(w), w, "mbarriers", where), None) and None


@isa.register("mbarrier.arrive", "mbarrier.arrive_drop")
def mbarrier_arrive(ins, ctx):
    ops = ins.operands
    token = ctx.writer(ops[0], "b64")
    addr = ctx.address(ops[1])
    expect = "expect_tx" in ins.parts
    extra = ctx.reader(ops[2], "u32") if len(ops) > 2 else None
    where = ins.where()
    drop = ins.parts[0] == "mbarrier.arrive_drop" or "arrive_drop" in ins.parts

    def run(w):
        bar = mbarrier_at(w, _one(addr(w), w, "mbarriers", where), where)
        lanes = int(w.wmask.sum())
        if expect:
            bar.expect_tx(w, _one(extra(w), w, "tx counts", where) * lanes, where)
            count = lanes
        else:
            count = lanes * (_one(extra(w), w, "counts", where) if extra is not None else 1)
        if drop:
            bar.expected -= lanes
        phase = bar.arrive(w, count, where)
        token(w, np.full(WARP, phase, np.uint64))
    return run


@isa.register("mbarrier.expect_tx")
def mbarrier_expect_tx(ins, ctx):
    addr = ctx.address(ins.operands[0])
    nbytes = ctx.reader(ins.operands[1], "u32")
    where = ins.where()

    def run(w):
        bar = mbarrier_at(w, _one(addr(w), w, "mbarriers", where), where)
        bar.expect_tx(w, _one(nbytes(w), w, "tx counts", where) * int(w.wmask.sum()), where)
    return run


@isa.register("mbarrier.try_wait", "mbarrier.test_wait")
def mbarrier_wait(ins, ctx):
    ops = ins.operands
    d = ctx.writer(ops[0], "pred")
    addr = ctx.address(ops[1])
    parity = "parity" in ins.parts
    arg = ctx.reader(ops[2], "u32" if parity else "b64")
    blocking = ins.parts[1] == "try_wait"
    where = ins.where()

    def run(w):
        a = _one(addr(w), w, "mbarriers", where)
        bar = mbarrier_at(w, a, where)
        v = _one(arg(w), w, "phases", where)
        ok = bar.phase_done(v & 1) if parity else bar.phase > v
        if not ok and blocking:
            # try_wait may time out and return false; the emulator waits instead, so the
            # warp runs again only when the phase may have completed
            bar.waiters.append(w)
            w.waiting = _MbarrierWait(bar, a, v & 1)
            return isa.BLOCK
        if ok:
            proxies.acquired(w)
        d(w, np.full(WARP, ok, np.bool_))
    return run


class _MbarrierWait:
    """What a warp blocked on an mbarrier waits for, described when a report asks: the
    arrivals and bytes still missing then, not when the wait began."""

    def __init__(self, bar, address: int, parity: int):
        self.bar, self.address, self.parity = bar, address, parity

    def __str__(self) -> str:
        return (f"mbarrier at shared {self.address:#x} (parity {self.parity}, {self.bar.pending} arrivals "
                f"and {self.bar.tx} tx bytes pending)")


# --- no-ops of a functional model ---------------------------------------------------------

@isa.register("fence", "membar")
def fence(ins, ctx):
    return lambda w: None


@isa.register("fence.proxy.async")
def fence_proxy_async(ins, ctx):
    """Orders the thread's generic accesses before its async-proxy ones (9.7.12.4): over
    shared memory unless the state space is .global (Note [Generic writes the async proxy
    reads] in proxies.py)."""
    if "global" in ins.parts:
        return lambda w: None
    return proxies.fence


@isa.register("setmaxnreg")
def setmaxnreg(ins, ctx):
    where = ins.where()
    return lambda w: require_converged(w, None, where)
