"""Run a decoded kernel over a grid: CTAs one after another, each CTA's warps interleaved
in a seeded order at synchronization points and at random points between them
(scheduler.py).

    launch = Launch(program, grid, block, dynamic_smem, memory, params, scheduler)
    launch.run(ctas=None)       # every CTA; or a list of (x, y, z) CTA ids
"""
from __future__ import annotations

import time

import numpy as np

from attnc_sim.errors import SimError
from attnc_sim.families import EXIT_CHECKS
from attnc_sim.isa import BLOCK, EXIT, JUMP
from attnc_sim.isa_sync import recheck_barriers
from attnc_sim.program import Program
from attnc_sim.scheduler import Report, Scheduler
from attnc_sim.state import LANES, WARP, Cta, GlobalMemory, Warp


class Launch:
    def __init__(self, program: Program, grid: tuple[int, int, int], block: tuple[int, int, int],
                 dynamic_smem: int, memory: GlobalMemory, params: bytes,
                 scheduler: Scheduler | None = None, raise_reports: bool = True):
        self.program, self.grid, self.block = program, tuple(grid), tuple(block)
        self.dynamic_smem, self.memory = dynamic_smem, memory
        self.params = np.frombuffer(bytearray(params.ljust(max(program.param_size, 8), b"\0")), np.uint8)
        self.scheduler = scheduler or Scheduler()
        self.raise_reports = raise_reports
        self.reports: list[Report] = []
        self.instructions = 0
        self._t0 = time.monotonic_ns()
        dyn_base = program.shared_addrs.get(next((v.name for v in program.kernel.shared if v.extern), ""), program.static_smem)
        self.smem_bytes = max(dyn_base + dynamic_smem, program.static_smem)

    # -- reports -----------------------------------------------------------------

    def report(self, kind: str, warp: Warp | None, where: str, message: str) -> None:
        r = Report(kind, warp.name() if warp else "-", where, message)
        self.reports.append(r)
        if self.raise_reports:
            raise SimError(str(r))

    # -- special registers -------------------------------------------------------

    def special_value(self, w: Warp, key: str, where: str) -> np.ndarray:
        if key in ("globaltimer", "globaltimer_lo", "clock64", "clock"):
            t = time.monotonic_ns() - self._t0 + self.instructions
            return np.full(WARP, t, np.uint64)
        raise SimError(f"special register %{key} not set for {w.name()}")

    def _specials(self, w: Warp, cta: Cta) -> dict:
        bx, by, bz = self.block
        tid = w.index * WARP + LANES
        u32 = lambda v: np.full(WARP, v, np.uint32) if np.isscalar(v) else v.astype(np.uint32)
        lane = LANES.astype(np.uint32)
        return {"tid.x": u32(tid % bx), "tid.y": u32(tid // bx % by), "tid.z": u32(tid // (bx * by)),
                "ntid.x": u32(bx), "ntid.y": u32(by), "ntid.z": u32(bz),
                "ctaid.x": u32(cta.ctaid[0]), "ctaid.y": u32(cta.ctaid[1]), "ctaid.z": u32(cta.ctaid[2]),
                "nctaid.x": u32(self.grid[0]), "nctaid.y": u32(self.grid[1]), "nctaid.z": u32(self.grid[2]),
                "laneid": lane, "warpid": u32(w.index), "nwarpid": u32(-(-bx * by * bz // WARP)),
                "smid": u32(0), "nsmid": u32(1), "gridid": u32(0),
                "dynamic_smem_size": u32(self.dynamic_smem), "total_smem_size": u32(self.smem_bytes),
                "lanemask_eq": (np.uint32(1) << lane).astype(np.uint32),
                "lanemask_lt": ((np.uint64(1) << lane.astype(np.uint64)) - 1).astype(np.uint32),
                "lanemask_le": ((np.uint64(2) << lane.astype(np.uint64)) - 1).astype(np.uint32),
                "lanemask_gt": (~((np.uint64(2) << lane.astype(np.uint64)) - 1)).astype(np.uint32),
                "lanemask_ge": (~((np.uint64(1) << lane.astype(np.uint64)) - 1)).astype(np.uint32)}

    # -- running -----------------------------------------------------------------

    def all_ctas(self) -> list[tuple[int, int, int]]:
        gx, gy, gz = self.grid
        return [(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)]

    def run(self, ctas=None) -> None:
        # inactive lanes compute on whatever their registers hold: numpy's warnings about
        # them (a division by zero) say nothing about the kernel
        with np.errstate(all="ignore"):
            for ctaid in (self.all_ctas() if ctas is None else ctas):
                self.run_cta(tuple(ctaid))

    def run_cta(self, ctaid: tuple[int, int, int]) -> Cta:
        cta = Cta(ctaid, self.smem_bytes)
        cta.launch = self
        nthreads = self.block[0] * self.block[1] * self.block[2]
        for i in range(-(-nthreads // WARP)):
            w = Warp(cta, i, self.program.layout, nthreads)
            w.special = self._specials(w, cta)
            w.blocked = False
            cta.warps.append(w)
        sched = self.scheduler
        live = list(cta.warps)
        while live:
            runnable = [w for w in live if not w.blocked]
            if not runnable:
                if sched.complete_one():
                    continue
                self._deadlock(cta, live)
            w = sched.pick(runnable)
            code = self._run_warp(w, sched.slice())
            if code == EXIT:
                live.remove(w)
                recheck_barriers(cta)
            sched.tick()
        for op in list(sched.pending):          # what a kernel left in flight lands before the launch ends
            op.complete()
        sched.pending.clear()
        self._check_exit(cta)
        return cta

    def _check_exit(self, cta: Cta) -> None:
        """Every family's end-of-CTA checks (families.EXIT_CHECKS)."""
        for family, check in EXIT_CHECKS:
            for item in check(cta) or ():
                if isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
                    kind, message = item
                else:                   # a check that returns bare items: name the family
                    kind, message = "exit", f"{family}: state left at exit: {item}"
                self.report(kind, None, f"CTA {cta.ctaid} at exit", message)

    def _deadlock(self, cta: Cta, live: list[Warp]) -> None:
        waits = "; ".join(f"warp {w.index} waits for {w.waiting} at {self.program.body[w.pc].where()}"
                          for w in live)
        self.report("deadlock", None, f"CTA {cta.ctaid}", f"every live warp is waiting: {waits}")
        raise SimError(f"deadlock in CTA {cta.ctaid}: {waits}")

    def _run_warp(self, w: Warp, budget: int) -> int | None:
        """Run `w` until it blocks, exits or has run `budget` instructions (None)."""
        ops, guards = self.program.ops, self.program.guards
        count = 0
        try:
            while True:
                if count >= budget:
                    return None
                pc = w.pc
                if pc == w.rpc:
                    if not _pop(w):
                        return EXIT
                    continue
                g = guards[pc]
                count += 1
                if g is None:
                    code = ops[pc](w)
                else:
                    m = g(w) & w.mask
                    if not m.any():
                        w.pc = pc + 1
                        continue
                    w.wmask, w.wfull = m, w.full and bool(m.all())
                    code = ops[pc](w)
                    w.wmask, w.wfull = w.mask, w.full
                if code is None:
                    w.pc = pc + 1
                elif code == JUMP:
                    pass
                elif code == BLOCK:
                    w.blocked = True
                    return BLOCK
                elif code == EXIT:
                    if not _exit_lanes(w, w.wmask if g is not None else w.mask):
                        return EXIT
                    w.wmask, w.wfull = w.mask, w.full
        except SimError:
            raise
        except Exception as e:  # a handler's bug or numpy's complaint: name the instruction
            ins = self.program.body[w.pc]
            raise SimError(f"{w.name()}: {type(e).__name__}: {e} at {ins.where()}") from e
        finally:
            self.instructions += count


def _exit_lanes(w: Warp, lanes: np.ndarray) -> bool:
    """The lanes `lanes` exit; False when the warp has no lane left to run."""
    w.exited = w.exited | lanes
    rest = w.mask & ~lanes
    if rest.any():
        w.set_mask(rest)
        w.pc += 1
        return True
    return _pop(w)


def _pop(w: Warp) -> bool:
    """Run the next path of the SIMT stack (Note [Reconvergence] in program.py); False
    when none is left (the warp is done)."""
    while w.stack:
        pc, mask, rpc = w.stack.pop()
        mask = mask & ~w.exited
        if mask.any():
            w.pc, w.rpc = pc, rpc
            w.set_mask(mask)
            return True
    w.done = True
    return False
