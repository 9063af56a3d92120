"""Online softmax over the S accumulators a thread holds (FA2, registers only).

A thread holds, for each of its accumulator rows r, a running max `m[r]` of the raw
scores (before scaling) and a thread-partial running sum `l[r]` of exp2 terms; the 4
lanes of a quad own one row, so the max is quad-reduced every step and the sum only
once, at the end (the rescale factor is the same on the 4 lanes).

Note [Folded scale]: with c = scale * log2(e), exp(scale * (s - m)) = exp2(s*c - m*c),
one FMA and one ex2.approx per element. Scores stay unscaled; with a score_mod the
kernel feeds already-scaled scores and c = log2(e).

Note [Empty rows]: in a partial tile a row may have every score at -inf, so its max is
-inf; the step then subtracts the lowest max m_low whose m_low * c is still finite
instead (exp2(-inf * c + finite) = 0 rather than NaN), and `finalize` gives o = 0,
lse = -inf for a row whose sum is 0. The same bound keeps a finite max below it, such
as the -3.4e38 of a score_mod `where(keep, s, -3.4e38)` on a row it drops entirely,
from overflowing m * c to -inf (a review found such rows NaN: alpha = exp2(-inf + inf));
their scores then give 0 too, so the row is empty: o = 0, lse = -inf (README: a row
whose largest kept score is below -f32max / log2(e) always comes out empty).

Note [Rounded-up max]: the exponent of a score x is x * c - M in one FMA, M the row's max
m times c rounded once per row. Rounded to nearest, the exponent of x = m is the rounding
error of m * c, which grows with |m * c|: 2^75 for a max of -1e30 (a block of a score_mod
`where(j > i, -1.0e30, s)` above the diagonal, walked first), whose p = exp2(2^75) = inf
turned the row into NaN at the next block's rescale (inf * 0), and up
to 512 already at |m * c| = 2^32 (-1e10 or +1e10 in natural units). So -M is m * -c
rounded toward -inf (mul.rm; with an offset, fma.rm): M >= m * c, every exponent is <= 0
and every p <= 1, whatever the scores' size. Where |m * c| < 2^24 the exponent of x = m
is off 0 by less than 1/2; beyond, the row's probabilities share one factor 2^-d,
0 <= d < ulp(m * c), which o = O / l cancels and the LSE takes back (it adds M, not
m * c, to log2(l)), unless it underflows: past |m * c| of about 2^30 (natural scores
beyond about +-7.4e8) a row may come out empty, o = 0 and lse = -inf (README); with f16
inputs, whose P.V takes P in f16 (smallest 2^-24), past 2^28 (+-1.9e8) its o may be 0
while l, in f32, still gives the right lse.

Note [Sinks]: a sink logit t (dsl.md) joins the softmax as one more kept score that
contributes no value: m' = max(m, t), l' = l * exp(m - m') + exp(t - m'), and O is
rescaled by exp(m - m') with it. It is folded in once, at `finalize`, in the running
max's units (t / u where the kernel's scores are natural / u: u = scale without a
score_mod). A row with nothing kept then gives o = 0 and lse = t: where t is its max,
its sum is the sink's term alone, taken as 1, not exp2 of t * c less its rounded-up
value (Note [Rounded-up max]), which underflows beyond |t| of about 7.4e8 (natural
units) and made such a row's lse -inf (found by a review). Where the max is another --
the constant max of a bounded score_mod (Note [Bounded score_mod]) -- the term is
exp2(t * c - M) as for a kept score, within the README's limit on a row's scores.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith

from attnc.backend.nvgpu_builders import Approx, Emit, Quad, exp2_fma

LN2 = math.log(2.0)
F32_MAX = 3.4028234663852886e38


@dataclass
class SoftmaxState:
    m: list     # running max per accumulator row (raw score units)
    l: list     # thread-partial running sum per accumulator row


# Note [Bounded score_mod]: when the score_mod's result provably lies in [lo, hi] in the
# running max's units (softcap: 30 * tanh(.) gives tanh's [-1, 1]) and the spread is
# small in natural units ((hi - lo) * out_factor <= STATIC_MAX_SPREAD, in kernel_spec.py,
# where ForwardSpec.static_max decides), the running max is the constant hi:
# p = exp(score - hi) >= exp(-64) never underflows f32 nor bf16's P (bf16 only: f16's P
# would flush rows whose scores sit far below hi), and never exceeds 1. The step then
# has no row max (no FMNMX per score, no quad shuffles), no rescale of O and of the sum
# (alpha = 1); a masked score is -inf and gives 0 as before, and an empty row keeps
# l = 0 (o = 0, lse = -inf). The same softmax, up to rounding.


# Note [Exponentials on the FMA pipe]: a probability's exp2 is one ex2.approx, a MUFU
# instruction on the SFU. An sm_90 SM's SFUs do 16 lanes per clock, its FP32 pipe 128,
# and it issues 4 warp instructions per clock: a MUFU warp instruction holds its
# sub-partition's SFU for 8 cycles but takes one issue slot. The softcap kernel runs
# two per score (tanh, ex2): 16 SFU cycles per score and warp, against 7.4 issued
# instructions per score in its steady loop (sm_90a, head dim 64, 64x128 tiles, in the
# SASS), so the SFU bounds it. With `exp2_fma` = k, positions 8-k..7 of every group of
# 8 consecutive values of a row (in the order `step` lists them; at block_n = 16 a row
# is one group of 4, positions 0..3, which only k > 4 reaches) compute exp2 as
# FlashAttention-4 does instead (`exp2_fma` in nvgpu_builders.py): 8 instructions
# (FMNMX, FADD.RM, 2 FADD, 3 FFMA, LEA), 6 of them on the FMA pipe, in place of one
# MUFU. k = 4 moves that loop to 12 SFU cycles and 11 issue slots per score: near
# balance, where the best k is for the GPU to say (`exp2_fma` in choice_defaults.py; results/
# sm90a_h200.md and sm80_h200.md, "Exponentials on the FMA pipe"). Only the
# probabilities: alpha and `finalize` keep ex2.approx (one per row, not per score);
# k = 0 is the SFU-only kernel, the same PTX.
# Accuracy: the cubic's relative error is at most 8.8e-5 for x in [-126, 8] (a float32
# emulation of the same operations, tests/backend/test_exp2_fma.py), below P's rounding
# to bf16 (2^-9) or f16 (2^-11) for P.V; the row sum sees the same values. x <= -127 and
# -inf give exactly 0 (so do masked scores), x in (-127, -126) a subnormal below 2^-126
# where ex2.approx.ftz flushes to 0; a score at the running max may come out of the FMA
# a rounding above 0, which the emulation takes as well (exact exponent for x < 128).


# Note [Lazy rescale]: FlashAttention-4's conditional rescale. A row keeps its
# running max m until a block's scores exceed it by more than LAZY_LOG2 = 8 in exp2 units
# ((m' - m) * c > 8, a factor of 2^8). Until then its probabilities are exp2(x * c - m * c)
# <= 2^8 (f32 and bf16/f16's P hold that), its alpha is exactly 1 and its O is left as it
# is. The result is the same softmax up to rounding: O and l carry the same stale max,
# which the final 1 / l and the lse (m * c + log2 l) cancel. On sm_80 and sm_90a a warp
# skips the multiply of its O accumulators (head_dim_v / 2 FMULs a row pair) unless some
# row of it moved (vote.any; `step` leaves this thread's part in `moved`), as a branch
# around them. A row with nothing kept so far (m' = -inf) keeps m = -inf. sm_90a's kernels
# carry `moved` with the step's alpha to their delayed rescale (`_scaled` in sm90a.py). By
# default above head dim 64, where it was measured to pay (`lazy_rescale` in
# choice_defaults.py; results/sm80_h200.md and sm90a_h200.md, "Lazy rescale"); on sm_100a
# at every head dim, where the correction warps vote on the factors the softmax warpgroups
# hand them (Note [Lazy rescale on sm_100a] in sm100a.py).


LAZY_LOG2 = 8.0


# Note [Offsets of far tiles]: a score_bias computed from d = j - i (and b, h) alone is
# one value k per tile beyond its flat diagonals (Note [Flat diagonals] in
# attnc/ir/diagonals.py), yet adding it to each score is one FFMA per score
# (s + k / scale). There the scores stay as QK^T gave them and the step takes
# k / scale as an offset: a lane's max of a row is max(x) + k / scale, one FADD a row
# (rounding is monotone, so that is the max of the rounded sums), taken before the
# quad's lanes combine theirs (each lane tests its own scores for the far side), and the
# offset joins -m * c in the exponent's FMA, one more FFMA a row: exp2(x * c + (k / scale
# * c - m * c)). A tile on the diagonals adds the bias to each score and has offset 0.
# The same softmax up to rounding: the bias is rounded once per tile, not into each
# score. `ScoreMasker.modify` (score_masks.py) chooses it; on sm_100a, where a thread
# holds a row, each 32 scores of it have their own offset (Note [Affine scores on
# sm_100a] in sm100a_scores.py), so `step` takes one per equal part of a row.


# Note [Row sums on the tensor cores]: a row's sum of probabilities is 64 FADDs per step
# and thread at 128x64 tiles (a tree over the thread's 16 scores of each of its 4 rows;
# the quad's lanes add theirs at `finalize`). With `sum_on_mma` the kernel computes it
# as P.1 instead: one more n8 atom of O per 16-row atom, whose B operand is the constant
# all-ones fragment (no shared memory read), so one mma.sync per (16 rows, 16 keys),
# block_n / 16 per atom and step -- 8 at 128x64 against those 64 FADDs. Its 4
# accumulators hold the sum of rows g and g + 8 twice each, over all 16 keys of every
# k-step: the quad reduction is part of the MMA. The atom is rescaled with O (the lazy
# rescale's branch covers it, and alpha is 1 in the rows that did not move), so the
# softmax keeps no l of its own (`initial` and `step` carry an empty list) and `finalize`
# takes the full sums from the kernel. The sum is of P as rounded for P.V (bf16 or f16)
# rather than of the f32 exponentials: numerator and denominator see the same values.
# That sum is off the f32 one by up to the rounding of P (2^-8 relative in bf16, where
# one key holds most of the row), which o divides out but the LSE keeps: a generated
# variant's LSE (property seed 191, ALiBi-like bias, a sink, 161 x 97) was 2.4e-3 off
# the reference with it and 8e-7 with f32 sums (results/sm80_h200.md, "Row sums on the
# tensor cores", which has where it pays). The spec refuses it in a kernel that writes
# the LSE.

ONES_BF16X2 = 0x3F803F80    # a B fragment register of two 1.0s
ONES_F16X2 = 0x3C003C00


class OnlineSoftmax:
    def __init__(self, e: Emit, approx: Approx, quad: Quad, scale_log2: float,
                 static_max: float | None = None, lazy: bool = False, sum_on_mma: bool = False):
        self.e, self.approx, self.quad = e, approx, quad
        self.sum_on_mma = sum_on_mma        # Note [Row sums on the tensor cores]
        self.scale_log2 = scale_log2
        self.static_max = static_max        # Note [Bounded score_mod]; None: the running max
        # Note [Lazy rescale]: the threshold in raw units must be a finite f32 (a scale
        # below about 2e-38 would make it +inf, and no row would leave -inf)
        threshold = LAZY_LOG2 / scale_log2 if lazy and scale_log2 > 0 else F32_MAX
        self.lazy_threshold = threshold if threshold < F32_MAX else None   # raw score units
        self.moved = None                   # after a lazy step: i1, some row of this thread moved
        # Note [Empty rows]: the lowest running max the exponentials take
        self.lowest = -min(F32_MAX, F32_MAX / scale_log2 * (1 - 2.0 ** -20))

    @property
    def lazy(self) -> bool:
        return self.lazy_threshold is not None

    def initial(self, rows: int) -> SoftmaxState:
        m0 = (lambda: self.e.cf(self.static_max)) if self.static_max is not None else self.e.neg_inf
        l0 = [] if self.sum_on_mma else [self.e.cf(0.0) for _ in range(rows)]
        return SoftmaxState([m0() for _ in range(rows)], l0)

    def _sums(self, state: SoftmaxState, probs: list) -> list:
        """l + sum(p) per row; none with sum_on_mma (the kernel's P.1 atoms hold them)."""
        if self.sum_on_mma:
            return []
        return [self.e.fadd(l_old, _tree(p, self.e.fadd)) for p, l_old in zip(probs, state.l)]

    def _step_static(self, scores: list[list], state: SoftmaxState, on_fma: int, offsets):
        """The step with the constant max (Note [Bounded score_mod]): alphas are None."""
        e = self.e
        e_c = e.cf(self.scale_log2)
        neg_mc = e.cf(-self.static_max * self.scale_log2)
        probs = [self._probs(row, e_c, neg_mc, on_fma, offsets) for row in scores]
        return probs, SoftmaxState(state.m, self._sums(state, probs)), None

    def step(self, scores: list[list], state: SoftmaxState, check_inf: bool, on_fma: int = 0, offsets=None):
        """scores[r] = row r's values. Returns (probabilities per row, new state, the
        factor each row's O accumulator must be multiplied by); `on_fma`: of every 8 scores,
        those whose exp2 the FMA pipe takes (the step op's exp2_fma); `offsets`: None, or
        f32s to add to the scores (Note [Offsets of far tiles]), one per equal part of
        every row (the first to its first len(row) / len(offsets) scores, and so on)."""
        if self.static_max is not None:
            return self._step_static(scores, state, on_fma, offsets)
        e = self.e
        e_c = e.cf(self.scale_log2)
        probs, m_new, l_new, alphas = [], [], [], []
        self.moved = None
        for r, (row, m_old) in enumerate(zip(scores, state.m)):
            m = e.fmax(m_old, self.quad.allreduce(self._lane_max(row, offsets), e.fmax))
            if self.lazy:
                # Note [Lazy rescale]: unordered (-inf - -inf) keeps the old max too
                keep = arith.cmpf(arith.CmpFPredicate.ULE, e.fsub(m, m_old), e.cf(self.lazy_threshold))
                m = e.select(keep, m_old, m)
                moved = e.xor(keep, e.true())
                self.moved = moved if self.moved is None else e.or_(self.moved, moved)
            m_safe = e.fmax(m, self.lowest) if check_inf else m            # Note [Empty rows]
            neg_mc = e.fmul_down(m_safe, -self.scale_log2)          # Note [Rounded-up max]
            alpha = self.approx.exp2(e.fma(m_old, e_c, neg_mc))
            if self.lazy:
                alpha = e.select(keep, e.cf(1.0), alpha)
            p = self._probs(row, e_c, neg_mc, on_fma, offsets)
            probs.append(p)
            m_new.append(m)
            if not self.sum_on_mma:     # else the kernel's P.1 atoms sum the rows
                l_new.append(e.fma(state.l[r], alpha, _tree(p, e.fadd)))
            alphas.append(alpha)
        return probs, SoftmaxState(m_new, l_new), alphas

    def _lane_max(self, row: list, offsets) -> ir.Value:
        """The max of this lane's scores of a row, each plus its part's offset: one FADD a
        part, before the quad's lanes meet (theirs may differ)."""
        e = self.e
        if offsets is None:
            return _tree(row, e.fmax)
        return _tree([e.fadd(_tree(part, e.fmax), k) for part, k in zip(_parts(row, offsets), offsets)], e.fmax)

    def _probs(self, row: list, e_c, neg_mc, on_fma: int, offsets=None) -> list:
        """exp2(x * c - m * c) for a row's scores x -- with an offset k, exp2(x * c +
        (k * c - m * c)), the probability of x + k -- the last `on_fma` of every 8 on the
        FMA pipe (positions 8 - on_fma..7 of each group of 8), the rest on the SFU (Note
        [Exponentials on the FMA pipe])."""
        e = self.e

        def exponents():        # each emitted just before its exp2
            for part, k in zip(_parts(row, offsets), offsets) if offsets is not None else [(row, None)]:
                shifted = neg_mc if k is None else e.fma_down(k, e_c, neg_mc)
                yield from (e.fma(x, e_c, shifted) for x in part)
        return [exp2_fma(e, y) if i % 8 >= 8 - on_fma else self.approx.exp2(y) for i, y in enumerate(exponents())]

    def _row_sum(self, l_part):
        """A row's whole sum: the quad's lanes' parts added, or with sum_on_mma already
        whole (the kernel's state.l at `finalize`)."""
        return l_part if self.sum_on_mma else self.quad.allreduce(l_part, self.e.fadd)

    def finalize(self, state: SoftmaxState, sink=None):
        """(the factor O is multiplied by per row: 1/l, 0 for an empty row; lse per row in
        natural log, -inf if empty). `sink`: the sink logit in raw score units (Note [Sinks]).
        With sum_on_mma, state.l holds each row's whole sum."""
        if sink is not None:
            return self._finalize_with_sink(state, sink)
        e = self.e
        inv, lse = [], []
        for m, l_part in zip(state.m, state.l):
            l = self._row_sum(l_part)
            empty = e.feq(l, 0.0)
            inv.append(e.select(empty, e.cf(0.0), self.approx.rcp(l)))
            # M + log2(l), M as the steps rounded it (Note [Rounded-up max])
            log2_sum = e.fsub(self.approx.log2(l), e.fmul_down(m, -self.scale_log2))
            lse.append(e.select(empty, e.neg_inf(), e.fmul(log2_sum, LN2)))
        return inv, lse

    def _finalize_with_sink(self, state: SoftmaxState, sink):
        e = self.e
        c = e.cf(self.scale_log2)
        inv, lse = [], []
        for m, l_part in zip(state.m, state.l):
            l = self._row_sum(l_part)
            m_safe = e.fmax(e.fmax(m, sink), self.lowest)
            neg_mc = e.fmul_down(m_safe, -self.scale_log2)          # Note [Rounded-up max]
            alpha = self.approx.exp2(e.fma(m, c, neg_mc))
            # Note [Sinks]: a row that kept nothing and whose max is its finite sink's is the sink's alone
            its_max = e.land(e.feq(sink, m_safe), arith.cmpf(arith.CmpFPredicate.OLT, sink, e.cf(float("inf"))))
            term = e.select(e.land(e.feq(l, 0.0), its_max), e.cf(1.0), self.approx.exp2(e.fma(sink, c, neg_mc)))
            total = e.fma(l, alpha, term)
            empty = e.feq(total, 0.0)
            inv.append(e.select(empty, e.cf(0.0), e.fmul(alpha, self.approx.rcp(total))))
            log2_sum = e.fsub(self.approx.log2(total), neg_mc)
            lse.append(e.select(empty, e.neg_inf(), e.fmul(log2_sum, LN2)))
        return inv, lse


def _parts(row: list, offsets: list) -> list[list]:
    """`row` in len(offsets) equal parts, in order."""
    size = len(row) // len(offsets)
    assert size * len(offsets) == len(row), "a row's offsets are one per equal part of it"
    return [row[k * size:(k + 1) * size] for k in range(len(offsets))]


def _tree(values: list, combine):
    """Pairwise reduction (shorter dependency chains than a left fold)."""
    while len(values) > 1:
        values = [combine(a, b) for a, b in zip(values[::2], values[1::2])] + \
                 ([values[-1]] if len(values) % 2 else [])
    return values[0]
