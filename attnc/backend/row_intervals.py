"""A mask_mod compiled as a row interval and a residual (Notes [Row intervals] and
[Residual conjuncts]): `RowInterval`, whose `bounds` are each accumulator row's keys
[lo, hi] (Note [Exact bounds]) and whose `residual_keep` tests the other conjuncts per
score; the split of the mask into conjuncts is hook_walks.MaskConjuncts.
"""
from __future__ import annotations

import functools
from typing import Mapping, Sequence

from mlir import ir
from mlir.dialects import arith

from attnc.backend.exact_ints import I32, fits_i32
from attnc.backend.hook_walks import MaskConjuncts, _int_range, _sub
from attnc.backend.hooks import KernelNames, RegionCode
from attnc.backend.nvgpu_builders import Emit

# Note [Row intervals]: a mask_mod that is a conjunction (`and`) of comparisons, each
# either free of j or of two i32 values whose difference is d0 + k * j with k = +1 or
# -1 and d0 free of j (`j <= i`, `i - j < W`, `j >= i - W + 1`, `j == i`, `not (j > i + 5)`),
# keeps, for each row, exactly the keys of one interval [lo(b, h, i), hi(b, h, i)]. In a
# partial tile the kernel then computes lo and hi once per accumulator row (the region
# evaluated at j = 0 gives each d0) and tests each score's column, a constant offset
# from the tile's first one, against them (Note [One compare per score], score_masks.py),
# instead of the region's ops (and the j < N test) per score.
#
# Note [Residual conjuncts]: the other conjuncts that depend on j (`or`, `!=`, a j
# coefficient other than +-1, j inside a param index or a division; and a negated `and`
# or an `or` whole, even with a linear comparison inside) are the residual:
# with at least one comparison linear in j, the row interval still bounds the keys and
# only the residual is evaluated per score, ANDed with the interval's test. Documents +
# causal (`doc[b, i] == doc[b, j] and j <= i`) then cost per score one compare of the two
# ids, the interval's bit test and two selects, where the whole region cost two to three
# compares and three selects (SASS of the sm_90a partial step at 64x64 tiles, d = 128:
# 135 ISETP, LOP3 and FSEL per thread and tile, was 178; documents at head dim 128 3-4 %
# faster: results/sm90a_h200.md, "Residual conjuncts"). A mask with no linear
# comparison keeps the per-element region.
# With a block map, a tile that the map proves to hold either part whole tests only the
# other (Note [Conjuncts a tile holds] in blockmap.py; `MaskConjuncts` is the split).
_FAR = 1 << 30              # beyond any key: hi without an upper bound, lo of a dropped row,
                            # and the clamp of every bound


# Note [Exact bounds]
# ~~~~~~~~~~~~~~~~~~~
# RowInterval.bounds solves `x <pred> y` for j: x - y = d0 + k * j, then t = -d0 or d0,
# and t - 1 or t + 1 for a strict comparison. Each of these may leave i32 where x and y
# do not (j - i < W with W = 2^31 - 1: d0 = -i - W; j > s[b, i] with s = 2^31 - 1:
# t + 1), and a bound far below -2^30 would wrap when the kernel subtracts the tile's
# first key from it. So a term is computed in i64 (clamped to [-_FAR, _FAR], then i32)
# unless `_int_range` shows that its sides keep x - y and the +-1 inside i32, and each
# bound is clamped on each side that its range can leave [-_FAR, _FAR]. A term of i and
# constants (causal, windows) stays in i32 with the clamps it had (a window's lo = i -
# 1023 needs only its upper one), where i64 min/max per row cost 0.5 % (window1024 at
# d = 64 on sm_80) to 1.5 % (sm_90a); a param or a dim in the term (i + N may leave i32)
# makes it i64.


def _clamp_far(e: Emit, bound: ir.Value, r: tuple[int, int] = I32) -> ir.Value:
    """`bound` (i32 or i64) clamped to [-_FAR, _FAR], as i32; `r`: a range known to hold
    it, whose sides inside [-_FAR, _FAR] need no clamp."""
    if r[1] > _FAR:
        bound = e.min(bound, _FAR)
    if r[0] < -_FAR:
        bound = e.max(bound, -_FAR)
    return arith.trunci(e.i32, bound) if bound.type != e.i32 else bound


def _reduce(emit_pick, pick, bounds: list) -> tuple[ir.Value, tuple[int, int]]:
    """The min or max (`emit_pick`: Emit.min or Emit.max; `pick`: min or max) of
    (bound, range) pairs, with its range."""
    return (functools.reduce(emit_pick, [v for v, _ in bounds]),
            (pick(r[0] for _, r in bounds), pick(r[1] for _, r in bounds)))


def solve_term(e: Emit, term: tuple, r: tuple[int, int], value) -> tuple[str, ir.Value, tuple[int, int], bool]:
    """`a - b <pred> 0` with a - b = d0 + k * j (`term` = (pred, k, a, b); `r`: the range
    of a - b at j = 0, `value`: a and b as emitted at j = 0) solved for j: (side, v, its
    range, wide) with j == v (side "eq"), j <= v ("hi") or j >= v ("lo"); v is an i64
    when `wide` (Note [Exact bounds]: unless the range keeps x - y and its +-1 in i32)."""
    kind, k, x, y = term
    x, y = value(x), value(y)
    wide = not fits_i32(r, margin=1) or x.type != e.i32 or y.type != e.i32   # (Note [Exact integers])
    d0 = e.sub(e.to_i64(x), e.to_i64(y)) if wide else e.sub(x, y)
    # d0 + k * j  <pred>  0, solved for j (k = +1 or -1)
    t, r = (e.sub(0, d0), (-r[1], -r[0])) if k == 1 else (d0, r)
    strict = int(kind in ("slt", "sgt"))
    if kind == "eq":
        side, step = "eq", 0
    elif (kind in ("slt", "sle")) == (k == 1):        # an upper bound on j
        side, step = "hi", -strict
    else:                                              # a lower bound on j
        side, step = "lo", strict
    v = e.add(t, 1) if step > 0 else e.sub(t, 1) if step < 0 else t
    return side, v, (r[0] + step, r[1] + step), wide


def _truth(e: Emit, env: dict, value: ir.Value, negated: bool) -> ir.Value:
    """A conjunct of the region as emitted (`env`), negated when it stands under a `not`."""
    v = env.get(value, value)
    return e.xor(v, e.true()) if negated else v


class RowInterval(RegionCode):
    """Note [Row intervals]: `bounds(e, b, h, i)` -> (lo, hi), inclusive, with keep(b, h,
    i, j) exactly when lo <= j <= hi (lo None when nothing bounds j below) and, when the
    mask has a residual, `residual_keep(e, b, h, i, j)` (Note [Residual conjuncts]);
    build with `RowInterval.of` (None when no top-level conjunct of the mask is a
    comparison linear in j)."""

    def __init__(self, block: ir.Block, names: KernelNames, free: Sequence, linear: Sequence,
                 never_empty: frozenset[str], residual: Sequence = ()):
        super().__init__(block, names, never_empty)
        self.free = free            # (i1 free of j, negated)
        self.linear = linear        # (predicate, k, a, b): `a - b <pred> 0` with a - b = d0 + k * j
        self.residual = list(residual)      # (i1 of j outside that form, negated): Note [Residual conjuncts]
        # Note [Exact bounds]: the range of each term's a - b at j = 0, from the region once.
        abi_dims, memo = frozenset(names.abi_dims), {}
        self.ranges = [_sub(_int_range(a, abi_dims, memo=memo), _int_range(b, abi_dims, memo=memo))
                       for _, _, a, b in linear]

    @classmethod
    def of(cls, block: ir.Block, names: KernelNames,
           never_empty: frozenset[str] = frozenset()) -> "RowInterval | None":
        parts = MaskConjuncts.of(block)
        if not parts.linear:
            return None
        return cls(block, names, parts.free, [term for _, _, term in parts.linear], never_empty, parts.residual)

    def __repr__(self) -> str:
        return f"RowInterval({super().__repr__()})"

    def residual_keep(self, e: Emit, b, h, i, j, j_below_n: bool = False,
                      given: Mapping | None = None) -> ir.Value:
        """The residual conjuncts at (b, h, i, j) (i1; Note [Residual conjuncts]); true
        when there are none. `j_below_n`: the caller knows 0 <= j < N (Note [Indices
        known in range])."""
        if not self.residual:
            return e.true()
        env = self._run(e, self._start((b, h, i, j), given), in_range=self.known_in_range(j, j_below_n))
        return functools.reduce(e.land, (_truth(e, env, value, negated) for value, negated in self.residual))

    def bounds(self, e: Emit, b, h, i) -> tuple[ir.Value, ir.Value]:
        env = self._run(e, dict(zip(self.block.arguments, (b, h, i, e.c32(0)))))
        value = lambda v: env.get(v, v)  # noqa: E731
        alive = e.true()
        for keep, negated in self.free:
            alive = e.land(alive, _truth(e, env, keep, negated))
        lows, highs = [], []          # (bound, its range)
        for term, r in zip(self.linear, self.ranges):
            side, v, r, wide = solve_term(e, term, r, value)
            for bounds in {"eq": (lows, highs), "hi": (highs,), "lo": (lows,)}[side]:
                bounds.append((_clamp_far(e, v), (-_FAR, _FAR)) if wide else (v, r))
        hi = _clamp_far(e, *_reduce(e.min, min, highs)) if highs else e.c32(_FAR)
        if not lows and not self.free:
            return None, hi          # no lower bound (Note [One compare per score], score_masks.py)
        lo = _clamp_far(e, *_reduce(e.max, max, lows)) if lows else e.c32(-_FAR)
        return e.select(alive, lo, e.c32(_FAR)), hi
