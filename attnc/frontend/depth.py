"""How deep a hook may be, and the recursion its walks get (no MLIR here: the frontend's).

Note [Deep expressions]
~~~~~~~~~~~~~~~~~~~~~~~
The typer, the lowering and the mask analysis walk a hook recursively, a few Python
frames per level of the expression. Python's default limit (1000 frames on a main
thread of 8 MiB) is reached at a few hundred levels: a mask of 150 nested `where`s or
a sum of 250 terms. Rather than each walk being rewritten as a loop, the stages that
walk expressions run through `run_deep`: in a thread with a stack of `STACK_BYTES`
and a recursion limit of `FRAMES`, enough for `MAX_HOOK_DEPTH` levels at up to
`FRAMES_PER_LEVEL` frames each. The depth of a hook is bounded where it is read: the
parser bounds the nesting of the source, and sema (`hook_depth`) the depth of the
expression once its `let`s are substituted (a `let` chain is as deep as the sum of
its values), with an error at the expression that passes `MAX_HOOK_DEPTH`. Every
walk therefore stays within `FRAMES`, and the big stack keeps Python's own limit
the one that would trip first. A call already inside such a thread runs directly.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable, TypeVar

MAX_HOOK_DEPTH = 1000           # levels of a hook once its `let`s are substituted
FRAMES_PER_LEVEL = 40           # a generous bound on the frames any walk takes per level
FRAMES = MAX_HOOK_DEPTH * FRAMES_PER_LEVEL + 2000      # plus the frames below the walk
STACK_BYTES = 1 << 29           # reserved address space; only the pages touched are used

T = TypeVar("T")

_deep = threading.local()
_lock = threading.Lock()


def run_deep(fn: Callable[..., T], *args, **kwargs) -> T:
    """`fn(*args, **kwargs)` with room for `FRAMES` frames of recursion (Note [Deep
    expressions]); its exception, if any, is raised here."""
    if getattr(_deep, "active", False):
        return fn(*args, **kwargs)
    outcome: dict = {}

    def body() -> None:
        _deep.active = True
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as e:       # re-raised in the caller's thread
            outcome["error"] = e

    with _lock:
        old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
        sys.setrecursionlimit(max(old_limit, FRAMES))
        try:
            threading.stack_size(STACK_BYTES)
            try:
                worker = threading.Thread(target=body, name="attnc-deep")
                worker.start()
            finally:
                threading.stack_size(old_stack)
            worker.join()
        finally:
            sys.setrecursionlimit(old_limit)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
