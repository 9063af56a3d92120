"""Checks that run beside the passes after them.

Note [The check beside the lowering]: attn-verify-pipeline reads the roles' programs from
the IR where it stands in the pipeline, and the exploration of their interleavings (pure
Python: 0.3-0.7 s for sm_90a's producer and consumer warpgroups, under 0.02 s for one
cooperative role) needs the IR no more. In a pipeline the driver runs (`running`), the
exploration of several roles runs in a forked process while the later passes -- the
kernel's choices, the lowering -- go on, and the driver waits for it when the pipeline
ends (`finish`): its violations are raised there, before any error of a later pass (the
order the passes ran in), and a kernel whose check fails never leaves the compiler.
Where the pipeline's kernel goes on to its code (`attnc compile`, `attnc.compile`), the
caller holds the checks (`held`) past the pipeline's end, through LLVM and ptxas, and waits
for them before the code leaves; a pipeline that fails still waits for them first. Only
a process with no other Python thread forks (a thread's locks would not come along);
elsewhere, on a system without fork, with ATTNC_VERIFY_BESIDE=0, outside a driver's
pipeline or for one role, the exploration runs in place. A child that fails hands its
explorations back to the parent, which runs them itself. What it saves:
results/compile_times.md, "The check beside the lowering".
"""
from __future__ import annotations

import contextlib
import gc
import os
import pickle
import threading
from typing import Callable, Iterator

from attnc import timing

_pending: list[Callable[[], None]] = []
_running = 0
_held = 0


@contextlib.contextmanager
def running() -> Iterator[None]:
    """A pipeline whose deferred checks are finished when it ends (the driver's)."""
    global _running
    _running += 1
    try:
        yield
    finally:
        _running -= 1


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Deferred checks that outlive the pipelines run inside: finished when this ends, an
    error of theirs raised before one in flight (the backend's)."""
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        finish()


def holding() -> bool:
    """Whether a caller waits for the deferred checks itself (`held`)."""
    return _held > 0


def deferring() -> bool:
    """Whether a check may run beside the passes after it."""
    return _running > 0


def defer(check: Callable[[], None]) -> None:
    """Run `check` (which raises what it finds) when the pipeline ends."""
    _pending.append(check)


def finish() -> None:
    """Wait for every deferred check; raise the first one's error."""
    checks = list(_pending)
    _pending.clear()
    errors = []
    for check in checks:
        try:
            check()
        except Exception as e:          # every child is waited for before one error is raised
            errors.append(e)
    if errors:
        raise errors[0]


def explore_beside(explorations: list[tuple], explore: Callable) -> Callable[[], list]:
    """Start `explore(*x)` for each of `explorations` (verify.py's: the channels, their
    roles' programs, ...); return what waits for them and gives their violations."""
    if not _forks() or all(len(x[1]) < 2 for x in explorations):
        # one role an exploration (sm_80, sm_90a's cooperative role): no interleavings to speak
        # of, explored in under 0.02 s, less than a fork costs
        found = [v for v in (explore(*x) for x in explorations) if v is not None]
        return lambda: found
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                        # the child: explore, send each violation's place
        # No cyclic garbage collection here: it would free the parent's dead MLIR objects,
        # whose destructors reach into a context whose threads did not come along (it
        # crashed the child). What the child makes it frees by reference counts.
        gc.disable()
        code = 1
        try:
            os.close(read)
            out = []
            for n, x in enumerate(explorations):
                v = explore(*x)
                if v is not None:
                    out.append((n, *_place(x[1], v.op), v.message))
            with os.fdopen(write, "wb") as f:
                pickle.dump(out, f)
            code = 0
        finally:
            os._exit(code)
    os.close(write)

    def wait() -> list:
        from attnc.schedule.verify import Violation

        with timing.step("attn-verify-pipeline: waiting for its exploration (Note [The check beside the "
                         "lowering])"):
            with os.fdopen(read, "rb") as f:
                data = f.read()
            _, status = os.waitpid(pid, 0)
        try:
            out = pickle.loads(data) if os.waitstatus_to_exitcode(status) == 0 else None
        except Exception:
            out = None
        if out is None or any(role is None for _, role, _, _ in out):
            with timing.step("attn-verify-pipeline: explored again in place (the child failed)"):
                return [v for v in (explore(*x) for x in explorations) if v is not None]
        return [Violation(explorations[n][1][role][k].op, message) for n, role, k, message in out]
    return wait


def _forks() -> bool:
    from attnc.config import VERIFY_BESIDE
    return hasattr(os, "fork") and threading.active_count() == 1 and VERIFY_BESIDE.get()


def _place(programs: dict, op) -> tuple:
    """(role, index) of the event of `programs` whose op is `op`; (None, None) if none."""
    for role, events in programs.items():
        for k, e in enumerate(events):
            if e.op is op:
                return role, k
    return None, None
