"""Shared memory written through the generic proxy and read through the async proxy.

Note [Generic writes the async proxy reads]: the PTX memory model gives shared memory two
views (PTX ISA 8.6, "Proxies"): threads' ld / st go through the generic proxy, while
wgmma's and tcgen05.mma's shared operands, tcgen05.cp's source and the bulk and tensor
(TMA) stores' sources are read through the async proxy. A generic write reaches an
async-proxy read only through a `fence.proxy.async` (all state spaces, or `.shared::cta` /
`.shared::cluster`; 9.7.12.4, "membar / fence") on the causality path from the write to
the read (the memory model's "proxy-preserved base causality order"): run by the writer
after its write, before the synchronization that orders the read after it (the O tile a
warpgroup writes before its TMA store), or by the reading thread after that
synchronization, before the read. Without it the hardware may read stale bytes, which the
emulator, having one copy of shared memory, never shows.

So each shared byte records the thread whose generic write has not been fenced since, and
when (a count of the CTA's writes, fences and synchronizations): `st.shared`, a generic
`st` into shared memory, `stmatrix`. The writer's fence.proxy.async clears its bytes; a
write by an asynchronous copy (cp.async, TMA, bulk) replaces the bytes and clears them;
and an async-proxy read of a byte still recorded is a 'proxy' report naming the writer,
unless the reading thread ran a fence after a synchronization of its warp (a CTA barrier,
an mbarrier wait) that came after the write. That synchronization is taken as ordering the
write, which races.py's checks do not prove: a write another warp made before it here,
unordered on a GPU, passes. Left out: cp.async (non-bulk), whose writes the async proxy
reads after the copies' wait and the barrier after it, as attnc's sm_90a kernels (the
"Proxies" item of attnc/backend/sm90a.py's docstring) and Triton's fence insertion treat
them; atomics on shared memory; and the other direction (an async-proxy write after a
generic access of the same bytes), which in every kernel here the mbarrier that publishes
the async write orders.
"""
from __future__ import annotations

import numpy as np

from attnc_sim.state import WARP


def _state(cta) -> tuple[np.ndarray, np.ndarray]:
    """Per shared byte: 1 + the CTA thread whose generic write is unfenced, else 0; and the
    write's time."""
    state = cta.__dict__.get("proxy_marks")
    if state is None:
        size = cta.smem.size
        state = cta.__dict__["proxy_marks"] = (np.zeros(size, np.int32), np.zeros(size, np.int32))
    return state


def tick(cta) -> int:
    """The CTA's clock: a count of the events the memory-order checks compare (generic
    writes, fences, synchronizations; tmem_order.py's tensor-memory accesses), this one's
    included."""
    now = cta.__dict__["proxy_clock"] = cta.__dict__.get("proxy_clock", 0) + 1
    return now


def _fenced_at(w) -> np.ndarray:
    """Per lane of w: the writes its last fence.proxy.async orders for its own async-proxy
    reads, those before the warp's last synchronization then (a time), -1 before any."""
    at = w.__dict__.get("proxy_fenced_at")
    if at is None:
        at = w.__dict__["proxy_fenced_at"] = np.full(WARP, -1, np.int64)
    return at


def generic_write(w, lanes: np.ndarray, offs: np.ndarray, width: int) -> None:
    """Threads `lanes` of warp w wrote `width` bytes each at shared offsets `offs`."""
    marks, times = _state(w.cta)
    span = offs[:, None] + np.arange(width)
    marks[span] = (w.index * WARP + lanes + 1)[:, None]
    times[span] = tick(w.cta)
    w.cta.__dict__["proxy_unfenced"] = True


def async_write(cta, span: np.ndarray) -> None:
    """An asynchronous copy wrote the shared bytes `span`."""
    if cta.__dict__.get("proxy_unfenced"):
        _state(cta)[0][span] = 0


def acquired(w) -> None:
    """w's warp passed a synchronization (a CTA barrier, an mbarrier phase it waited for):
    the writes before it are those a later fence of w's orders for w's reads."""
    w.__dict__["proxy_acquired_at"] = tick(w.cta)


def acquired_at(w) -> int:
    """The clock at w's last synchronization, -1 before any."""
    return w.__dict__.get("proxy_acquired_at", -1)


def fence(w) -> None:
    """The active lanes of w ran fence.proxy.async over shared memory."""
    cta = w.cta
    lanes = np.flatnonzero(w.wmask)
    _fenced_at(w)[lanes] = acquired_at(w)
    if not cta.__dict__.get("proxy_unfenced"):
        return
    marks, _ = _state(cta)
    marks[np.isin(marks, w.index * WARP + lanes + 1)] = 0
    cta.__dict__["proxy_unfenced"] = bool(marks.any())


def check_async_read(w, span: np.ndarray, where: str, what: str, lane: int | None = None) -> None:
    """`what`, issued by lane `lane` of w (None: by its active lanes together) at `where`,
    reads the shared bytes `span` through the async proxy."""
    cta = w.cta
    if not cta.__dict__.get("proxy_unfenced"):
        return
    marks, times = _state(cta)
    fenced = _fenced_at(w)
    since = fenced[lane] if lane is not None else fenced[w.wmask].min()
    bad = (marks[span] != 0) & (times[span] > since)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        writer = int(marks[span[at]]) - 1
        cta.launch.report("proxy", w, where,
                          f"{what} reads shared byte {int(span[at]):#x} through the async proxy; thread "
                          f"{writer % WARP} of warp {writer // WARP} wrote it through the generic proxy "
                          "with no fence.proxy.async between the write and this read (the writer's, or "
                          "this thread's after a synchronization that follows the write)")
