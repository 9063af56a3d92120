"""Tensor memory one warp accesses after another: the tcgen05 fences around the
synchronization between them.

Note [tcgen05 fences]: tcgen05 operations are not ordered by thread synchronization alone
(PTX ISA 9.7.16.6, "Memory Consistency Model for 5th generation of TensorCore
operations"). Where warp A's tcgen05.ld, tcgen05.st or MMA touches tensor memory that
warp B's touches later -- a write on either side -- A runs tcgen05.fence::before_thread_sync
after its access and before the arrival or barrier that B waits for (a tcgen05.commit is
that fence for the MMAs it tracks, 9.7.16.6.4.2), and B runs
tcgen05.fence::after_thread_sync after that wait and before its access. The emulator runs
each warp in program order, so a missing fence changes nothing it computes; this check
reports it.

Each tensor-memory cell records the warp that last wrote it and the one that last read it,
with the time (proxies.tick: the CTA's clock of the events these checks compare). A warp's
before-fences and commits are its releases (a commit here releases every earlier access of
its warp, where the PTX ISA says the MMAs and copies it tracks: the MMA warp of attnc's
kernels issues nothing else); its after-fence covers what was released before its last
synchronization (proxies.acquired). An access of a cell another warp
accessed, a write on one side, is a 'tcgen05-fence' report unless that warp's first
release after its access comes before the synchronization the accessing warp's last
after-fence covers. MMAs count as their issuing warp's accesses, at their issue. As with
proxies.py, the synchronization is taken to order what came before it here; and only a
cell's last reader is kept, so of two warps reading it before a write, the later one is
checked.
"""
from __future__ import annotations

import bisect

import numpy as np

from attnc_sim import proxies, tmem


class _Order:
    def __init__(self):
        shape = (tmem.LANES, tmem.COLUMNS)
        self.writer, self.written = np.zeros(shape, np.int32), np.zeros(shape, np.int64)   # 1 + warp
        self.reader, self.read = np.zeros(shape, np.int32), np.zeros(shape, np.int64)
        self.releases: dict[int, list[int]] = {}    # warp -> clock of its before-fences and commits
        self.covers: dict[int, int] = {}            # warp -> the synchronization its after-fence covers


def _order(cta) -> _Order:
    o = cta.__dict__.get("tmem_order")
    if o is None:
        o = cta.__dict__["tmem_order"] = _Order()
    return o


def release(w) -> None:
    """w ran tcgen05.fence::before_thread_sync, or a tcgen05.commit."""
    _order(w.cta).releases.setdefault(w.index, []).append(proxies.tick(w.cta))


def after_sync(w) -> None:
    """w ran tcgen05.fence::after_thread_sync."""
    _order(w.cta).covers[w.index] = proxies.acquired_at(w)


def access(w, cells: tuple, write: bool, what: str, where: str) -> None:
    """w's `what` at `where` reads or writes the tensor-memory cells `cells` (an index of the
    (lanes, columns) array: arrays of lanes and of columns)."""
    o = _order(w.cta)
    unordered = _unordered(o, w, cells, write)
    if unordered is not None:
        warp, verb, lane, col = unordered
        w.cta.launch.report(
            "tcgen05-fence", w, where,
            f"{what} {'writes' if write else 'reads'} tensor memory (lane {lane}, column {col}) that warp "
            f"{warp} {verb} before, with no tcgen05.fence::before_thread_sync of that warp after its access "
            f"and tcgen05.fence::after_thread_sync of this one after the synchronization between them")
    now = proxies.tick(w.cta)
    if write:
        o.writer[cells], o.written[cells] = w.index + 1, now
    else:
        o.reader[cells], o.read[cells] = w.index + 1, now


def _unordered(o: _Order, w, cells: tuple, write: bool):
    """(warp, 'wrote' or 'read', lane, column) of an earlier access of another warp to
    `cells` that w's access is not ordered after, or None."""
    me, cover = w.index + 1, o.covers.get(w.index, -1)
    checks = ((o.writer, o.written, "wrote"),) + (((o.reader, o.read, "read"),) if write else ())
    for warps, times, verb in checks:
        other = warps[cells]
        seen = (other != 0) & (other != me)
        if not seen.any():
            continue
        other_time = times[cells]
        for key in np.unique(other[seen].astype(np.int64) << 40 | other_time[seen]):
            warp, then = int(key >> 40) - 1, int(key & ((1 << 40) - 1))
            fences = o.releases.get(warp, [])
            k = bisect.bisect_right(fences, then)
            if k < len(fences) and fences[k] < cover:
                continue
            at = np.flatnonzero((other == warp + 1) & (other_time == then))[0]
            lanes, cols = (np.broadcast_to(i, other.shape) for i in cells)
            return warp, verb, int(lanes.flat[at]), int(cols.flat[at])
    return None
