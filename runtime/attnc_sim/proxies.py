"""Shared memory written through the generic proxy and read through the async proxy.

Note [Generic writes the async proxy reads]: the PTX memory model gives shared memory two
views (PTX ISA 8.6, "Proxies"): threads' ld / st go through the generic proxy, while
wgmma's and tcgen05.mma's shared operands, tcgen05.cp's source and the bulk and tensor
(TMA) stores' sources are read through the async proxy. A thread's generic write reaches
an async-proxy read only if the thread runs `fence.proxy.async` (all state spaces, or
`.shared::cta` / `.shared::cluster`) after the write and before the synchronization that
orders the read after it (9.7.12.4, "membar / fence"): the O tile a warpgroup writes
before its TMA store, an operand a thread stores before the MMA that reads it. Without
the fence the hardware may read stale bytes, which the emulator, having one copy of
shared memory, never shows.

So each shared byte records the thread whose generic write has not been fenced since
(`st.shared`, a generic `st` into shared memory, `stmatrix`); that thread's
fence.proxy.async clears its bytes; a write by an asynchronous copy (cp.async, TMA, bulk)
replaces the bytes and clears them; and an async-proxy read of a recorded byte is a
'proxy' report naming the writer. The fence is checked where the read is issued, which
the kernel's synchronization places after the writer's fence: a fence run after that
synchronization, but before a late read is issued, passes here (races.py's checks cover
the ordering itself). Left out: cp.async (non-bulk), whose writes the async proxy reads
after the copies' wait and the barrier after it, as attnc's sm_90a kernels (the
"Proxies" item of attnc/backend/sm90a.py's docstring) and Triton's fence insertion treat
them; atomics on shared memory; and the other direction (an async-proxy write after a
generic access of the same bytes), which in every kernel here the mbarrier that
publishes the async write orders.
"""
from __future__ import annotations

import numpy as np

from attnc_sim.state import WARP


def _marks(cta) -> np.ndarray:
    """Per shared byte: 1 + the CTA thread whose generic write is unfenced, else 0."""
    marks = cta.__dict__.get("proxy_marks")
    if marks is None:
        marks = cta.__dict__["proxy_marks"] = np.zeros(cta.smem.size, np.int32)
    return marks


def generic_write(w, lanes: np.ndarray, offs: np.ndarray, width: int) -> None:
    """Threads `lanes` of warp w wrote `width` bytes each at shared offsets `offs`."""
    marks = _marks(w.cta)
    marks[offs[:, None] + np.arange(width)] = (w.index * WARP + lanes + 1)[:, None]
    w.cta.__dict__["proxy_unfenced"] = True


def async_write(cta, span: np.ndarray) -> None:
    """An asynchronous copy wrote the shared bytes `span`."""
    if cta.__dict__.get("proxy_unfenced"):
        _marks(cta)[span] = 0


def fence(w) -> None:
    """The active lanes of w ran fence.proxy.async over shared memory."""
    cta = w.cta
    if not cta.__dict__.get("proxy_unfenced"):
        return
    marks = _marks(cta)
    marks[np.isin(marks, w.index * WARP + np.flatnonzero(w.wmask) + 1)] = 0
    cta.__dict__["proxy_unfenced"] = bool(marks.any())


def check_async_read(w, span: np.ndarray, where: str, what: str) -> None:
    """`what`, issued by w at `where`, reads the shared bytes `span` through the async proxy."""
    cta = w.cta
    if not cta.__dict__.get("proxy_unfenced"):
        return
    marks = _marks(cta)[span]
    if marks.any():
        at = int(np.flatnonzero(marks)[0])
        writer = int(marks[at]) - 1
        cta.launch.report("proxy", w, where,
                          f"{what} reads shared byte {int(span[at]):#x} through the async proxy; thread "
                          f"{writer % WARP} of warp {writer // WARP} wrote it through the generic proxy "
                          "with no fence.proxy.async after the write")
