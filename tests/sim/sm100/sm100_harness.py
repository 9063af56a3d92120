"""Run a small hand-written PTX kernel of sm_100a instructions through the emulator's engine.

The kernels under ptx/ use the sm_100a instructions and `harness.set` — an opcode this harness
registers that loads a register from a table the test gives (per warp and lane), so a kernel
needs no arithmetic or parameter loads. mbarriers are `RecordingMBarrier`s placed at the
shared addresses the test names: they record the arrivals and completed transaction bytes the
instructions deliver (the mbarrier's own phase rules are the core's, tested there).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from attnc_sim import isa, isa_control, isa_sm100  # noqa: F401  (register the families used)
from attnc_sim.engine import Launch
from attnc_sim.program import Program, _param_layout, _reconvergence, _shared_layout
from attnc_sim.ptx import Reg, parse_module
from attnc_sim.scheduler import Scheduler
from attnc_sim.state import GlobalMemory, RegLayout

PTX = Path(__file__).parent / "ptx"
VALUES: dict = {}          # register name -> function(warp index) -> 32 lane values


@isa.register("harness.set")
def harness_set(ins, ctx):
    ty = ins.parts[-1]
    name = ins.operands[0].name
    put = ctx.writer(ins.operands[0], ty)
    return lambda w: put(w, np.asarray(VALUES[name](w.index)))


class RecordingMBarrier:
    def __init__(self):
        self.arrivals, self.tx, self.waiters = [], 0, []

    def arrive(self, w, count, where):
        self.arrivals.append((w.index, where))
        for waiter in self.waiters:
            waiter.blocked = False
        self.waiters.clear()

    def complete_tx(self, w, nbytes, where):
        self.tx += nbytes


def decode(kernel) -> Program:
    """program.decode without importing every family (only those this harness loads)."""
    layout = RegLayout.of(kernel.regs)
    shared_addrs, static = _shared_layout(kernel)
    param_offsets, param_size = _param_layout(kernel)
    ctx = isa.Context(kernel, layout, shared_addrs, param_offsets, kernel.labels)
    ctx.reconverge = _reconvergence(kernel)
    ops, guards = [], []
    for pc, ins in enumerate(kernel.body):
        ctx.ins, ctx.pc = ins, pc
        ops.append(isa.lookup(ins)(ins, ctx))
        guards.append(None if ins.guard is None else
                      ctx.reader(Reg(("!" if ins.guard[1] else "") + ins.guard[0].name), "pred"))
    return Program(kernel, layout, ops, guards, kernel.body, ctx.reconverge, shared_addrs, static,
                   param_offsets, param_size)


SETUP: dict = {}


@isa.register("harness.init")
def harness_init(ins, ctx):
    """First instruction of a kernel: installs the test's mbarriers and setup in the CTA once."""
    def run(w):
        if not w.cta.__dict__.get("harness_ready"):
            w.cta.__dict__["harness_ready"] = True
            w.cta.mbarriers.update(SETUP["bars"])
            if SETUP["setup"]:
                SETUP["setup"](w.cta)
    return run


@isa.register("harness.wait")
def harness_wait(ins, ctx):
    """Block until the recording mbarrier at the address has had an arrival."""
    at = ctx.address(ins.operands[0])

    def run(w):
        bar = w.cta.mbarriers[int(at(w)[0])]
        if not bar.arrivals:
            bar.waiters.append(w)
            w.waiting = "a recorded arrival"
            return isa.BLOCK
    return run


@isa.register("harness.bar")
def harness_bar(ins, ctx):
    """Every warp of the CTA meets here (a stand-in for bar.sync, which is the core's)."""
    def run(w):
        met = w.cta.__dict__.setdefault("harness_bar", {})
        arrived = met.setdefault(w.pc, set())
        if w.index in arrived:
            return None
        arrived.add(w.index)
        if len(arrived) < len(w.cta.warps):
            w.waiting = "the harness barrier"
            return isa.BLOCK
        for other in w.cta.warps:
            other.blocked = False
        return None
    return run


@isa.register("harness.use")
def harness_use(ins, ctx):
    """Reads a register: records, per warp, whether an in-flight operation still owed it."""
    key = ctx.reg(ins.operands[0])

    def run(w):
        w.cta.__dict__.setdefault("harness_use", {})[w.index] = key in w.pending_regs
    return run


@isa.register("harness.mark")
def harness_mark(ins, ctx):
    """A snapshot of global memory at this point of the warp."""
    def run(w):
        w.cta.__dict__["harness_mark"] = w.cta.launch.memory.data.copy()
    return run


def registers(cta, launch, names, warp):
    """The 32 lanes of b32 registers `names` of one warp, as a (32, len(names)) array."""
    rows = [launch.program.layout.rows[n][1] for n in names]
    return cta.warps[warp].b32[rows].T.copy()


def run(name: str, threads: int, values: dict, smem_bytes: int = 65536, mbarriers=(), setup=None,
        params: bytes = b"", memory: GlobalMemory | None = None, early: float = 0.0, seed: int = 0):
    """Run kernel file `name` as one CTA; returns (launch, cta, {address: RecordingMBarrier})."""
    module = parse_module((PTX / name).read_text(), name)
    program = decode(next(iter(module.kernels.values())))
    VALUES.clear()
    VALUES.update(values)
    bars = {a: RecordingMBarrier() for a in mbarriers}
    SETUP.update(bars=bars, setup=setup)
    launch = Launch(program, (1, 1, 1), (threads, 1, 1), smem_bytes, memory or GlobalMemory(), params,
                    Scheduler(seed=seed, early=early), raise_reports=False)
    cta = launch.run_cta((0, 0, 0))
    return launch, cta, bars


def lane_is(warp: int, lane: int):
    """A predicate table entry true in one lane of one warp."""
    return lambda w: (np.arange(32) == lane) & (w == warp)


def const(value, dtype=np.uint32):
    return lambda w: np.full(32, value, dtype)
