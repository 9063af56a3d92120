"""Which key blocks the sm_80 kernel visits, and in which order (Note [Mask hooks] in
mask_hooks.py gives what a mask answers; this turns the answer into loop bounds).

Step t = 0, 1, ... of the KV loop visits the t-th visited block counting down from the
top, so that the partial blocks at the diagonal and the ragged N edge come first:

    contiguous  [lo, hi):                   n_block(t) = hi - 1 - t
    segmented   [s_0, e_0) u ... u [s_K-1, e_K-1) (sorted, disjoint, holes skipped):
                n = e_K-1 - 1 - t, then for k = K-1 .. 1: if n < s_k: n -= s_k - e_k-1

The loop splits where the full range [full_lo, full_hi) starts and ends in step space:
steps [0, t_full) are partial (masked), [t_full, t_low) full, [t_low, total) partial.

Note [Segment normalisation]: the kernel clamps what a hook gives it, so that a loose
or degenerate answer (an empty segment written as (5, 2), a segment past N) still
walks only blocks in [0, cdiv(N, block_n)), each once: every end is raised to its
start and every start to the previous end; the full range is clamped into [lo, hi).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mlir import ir

from attnc.backend.mask_hooks import KvRange
from attnc.backend.nvgpu_builders import Emit


@dataclass(frozen=True)
class KvSchedule:
    lo: Any
    full_lo: Any            # None: statically no partial blocks below the full range
    full_hi: Any
    hi: Any
    segments: tuple = ()    # normalised (start, end) pairs; () for [lo, hi)

    # -- the blocks of the steps
    def block(self, e: Emit, t):
        """The key block step t visits."""
        if not self.segments:
            return e.sub(e.sub(self.hi, 1), t)
        n = e.sub(e.sub(self.segments[-1][1], 1), t)
        for (_, prev_end), (start, _) in reversed(list(zip(self.segments, self.segments[1:]))):
            n = e.select(e.lt(n, start), e.sub(n, e.sub(start, prev_end)), n)
        return n

    def ahead(self, e: Emit, t, n_block, k: int) -> tuple[Any, Callable]:
        """(the block of step t + k, a function of it giving whether that step exists)."""
        if not self.segments:
            return e.sub(n_block, k), lambda n: e.ge(n, self.lo)
        later = e.add(t, k)
        return self.block(e, later), lambda n: e.lt(later, self.total(e))

    def first(self, e: Emit, k: int) -> tuple[Any, Callable]:
        """(the block of step k of the prologue, whether that step exists)."""
        if not self.segments:
            return e.sub(e.sub(self.hi, 1), k), lambda n: e.ge(n, self.lo)
        return self.block(e, e.c32(k)), lambda n: e.lt(e.c32(k), self.total(e))

    # -- where the loops split
    def steps_above(self, e: Emit, x):
        """How many visited blocks are >= x."""
        if not self.segments:
            return e.sub(self.hi, x)
        count = None
        for start, end in self.segments:
            part = e.max(e.sub(end, e.max(start, x)), 0)
            count = part if count is None else e.add(count, part)
        return count

    def total(self, e: Emit):
        return self.steps_above(e, self.lo)

    def below_full(self, e: Emit):
        """The first step below the full range: [t_full, below_full) are its steps."""
        return self.steps_above(e, self.full_lo if self.full_lo is not None else self.lo)

    # -- the loops over the steps
    def key_loops(self, count: int) -> tuple["KeyLoop", ...]:
        """The loops that walk the steps (Note [Key loops] in sm80.py), at most `count`
        (the kernel's kv_loops): a loop per kind of block, or merged."""
        if count == 1:
            return (KeyLoop("start", "total", "partial", edge="mixed"),)
        near = KeyLoop("start", "full", "partial")
        if self.full_lo is None:
            return near, KeyLoop("full", "low", "full")
        if count == 2:
            return near, KeyLoop("full", "total", "partial", top=False, edge="far")
        return near, KeyLoop("full", "low", "full"), KeyLoop("low", "total", "partial", top=False)

    def masked_step(self, e: Emit, loop: "KeyLoop", t, t_full, t_low):
        """Of merged `loop`'s step t, whether its block is mixed: above the full range
        (t < t_full, `steps_above(full_hi)`) or below it (t >= t_low, `below_full`); None
        for a loop of one kind of block."""
        if loop.edge is None:
            return None
        if loop.edge == "far":
            return e.ge(t, t_low)
        above = e.lt(t, t_full)
        return above if self.full_lo is None else e.or_(above, e.ge(t, t_low))


@dataclass(frozen=True)
class KeyLoop:
    """A loop over the steps from bound `lo` to bound `hi` -- "start" (the first step a
    loop takes), "full" (t_full, the full range's first step), "low" (`below_full`) or
    "total" -- of blocks of `mode` ("partial" or "full"), built from the trip of the
    first mixed IR loop (`top`) or of the last; `edge`: a merged loop's, "mixed" (every
    kind) or "far" (full and far edge's blocks), which masks a step where its block is
    mixed (`KvSchedule.masked_step`)."""
    lo: str
    hi: str
    mode: str
    top: bool = True
    edge: str | None = None


def schedule(e: Emit, r: KvRange, N, block_n: int, clamp_top: bool = False) -> KvSchedule:
    """A mask's answer clamped to lo <= full_lo <= full_hi <= hi, with full blocks below
    N / block_n (they hold no row >= N whatever the hook says: their loads are unpredicated);
    `clamp_top`: also hi <= cdiv(N, block_n), as segments always are (Note [Lean step loads]
    in forward_loads.py)."""
    as_value = lambda v: v if isinstance(v, ir.Value) else e.c32(v)  # noqa: E731
    if r.segments:
        full_hi = e.min(as_value(r.full_hi), e.div(N, block_n))
        return normalise(e, [(as_value(a), as_value(b)) for a, b in r.segments], as_value(r.full_lo),
                         full_hi, e.cdiv(N, block_n))
    lo, hi = as_value(r.lo), as_value(r.hi)
    if clamp_top:
        n_blocks = e.cdiv(N, block_n)
        lo = e.min(lo, n_blocks)
        hi = e.clamp(hi, lo, n_blocks)
    else:
        hi = e.max(hi, lo)
    full_hi = e.clamp(e.min(as_value(r.full_hi), e.div(N, block_n)), lo, hi)
    # A statically empty low partial range (lo == full_lo == a constant) needs no loop.
    static_low = not isinstance(r.lo, ir.Value) and not isinstance(r.full_lo, ir.Value) and r.lo == r.full_lo
    full_lo = None if static_low else e.clamp(as_value(r.full_lo), lo, full_hi)
    return KvSchedule(lo, full_lo, full_hi, hi)


def normalise(e: Emit, segments, full_lo, full_hi, n_blocks) -> KvSchedule:
    """A segmented schedule from a hook's answer (Note [Segment normalisation])."""
    clean, prev_end = [], e.c32(0)
    for start, end in segments:
        start = e.clamp(start, prev_end, n_blocks)
        end = e.clamp(end, start, n_blocks)
        clean.append((start, end))
        prev_end = end
    lo, hi = clean[0][0], clean[-1][1]
    full_hi = e.clamp(full_hi, lo, hi)
    return KvSchedule(lo, e.clamp(full_lo, lo, full_hi), full_hi, hi, tuple(clean))
