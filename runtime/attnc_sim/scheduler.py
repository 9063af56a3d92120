"""The seeded scheduler: which warp runs next, for how long, and when asynchronous
operations complete.

A warp runs until it blocks (a barrier, an mbarrier wait), exits, or has run its slice: a
seeded random number of instructions in [1, 2 * quantum] (`quantum` 0: no slices, warps
switch at synchronization points only). Every switch is a scheduling point.

An asynchronous operation (cp.async, wgmma, later TMA and tcgen05) is an `AsyncOp`:
issued by a warp, it is `pending` until `complete()` runs it. The scheduler completes
pending operations at points it picks (seeded) between the issue and the point the PTX
ISA guarantees completion, where the handler that owns that guarantee (wait_group, an
mbarrier's phase) completes what is still pending itself. So a kernel that reads data
before that point reads it before the operation landed, and the race checks report it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field


class AsyncOp:
    """One asynchronous operation; subclasses define `_run` (the effect) and may hold
    what it reads and writes so the race checks know (isa_mem.py, isa_sm90.py)."""

    done = False
    where = ""                  # the issuing instruction's PTX line, for reports

    def complete(self) -> None:
        if not self.done:
            self.done = True
            self._run()

    def _run(self) -> None:
        raise NotImplementedError


@dataclass
class Report:
    """A race or protocol error the emulator found."""
    kind: str           # 'read-before-complete', 'write-while-read', 'proxy', 'tcgen05-fence',
                        # 'mbarrier', 'barrier', 'deadlock'
    warp: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.warp}: {self.message} at {self.where}"


@dataclass
class Scheduler:
    """Seeded choices: the next warp to run, its slice, and early completion of pending
    operations. `early`: the chance, at each scheduling point, that a pending operation
    completes then; `quantum`: the mean slice in instructions (0: run to a synchronization
    point); `record`: keep `trace`, the (CTA, warp, pc) of every slice's start."""
    seed: int = 0
    early: float = 0.25
    quantum: int = 64
    record: bool = False
    rng: random.Random = field(init=False)
    pending: list = field(default_factory=list)
    trace: list = field(default_factory=list)

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    def slice(self) -> int:
        """How many instructions the picked warp may run before the next switch."""
        return self.rng.randint(1, 2 * self.quantum) if self.quantum > 0 else 1 << 62

    def issue(self, op: AsyncOp) -> None:
        self.pending.append(op)

    def pick(self, warps: list):
        w = warps[self.rng.randrange(len(warps))] if len(warps) > 1 else warps[0]
        if self.record:
            self.trace.append((w.cta.ctaid, w.index, w.pc))
        return w

    def tick(self) -> None:
        """A scheduling point: complete some pending operations, in random order."""
        if not self.pending:
            return
        keep = []
        for op in self.pending:
            if op.done:
                continue
            if self.rng.random() < self.early:
                op.complete()
            else:
                keep.append(op)
        self.pending = [op for op in keep if not op.done]

    def complete_one(self) -> bool:
        """Complete one pending operation (every warp is blocked); False when none is left."""
        self.pending = [op for op in self.pending if not op.done]
        if not self.pending:
            return False
        op = self.pending.pop(self.rng.randrange(len(self.pending)))
        op.complete()
        return True
