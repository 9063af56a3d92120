"""The `.approx` f32 functions as an sm_90 GPU computes them, bit for bit: ex2 (with and
without .ftz), and rcp, rsqrt, lg2 with .ftz.

Each function reduces its argument to a 23-bit fraction, evaluates the special function
unit's piecewise quadratic on it in fixed point (Note [SFU quadratic interpolation]) and puts
the exponent back; the Notes below say how, per function. The tables are in
`approx_tables`. All of it is integer arithmetic on whole arrays.

tanh.approx.f32 uses the same interpolator on per-binade segments of |x| instead of a reduced
fraction (Note [tanh.approx]).
"""
from __future__ import annotations

import functools

import numpy as np

from attnc_sim import approx_tables as tables

# Note [SFU quadratic interpolation]: the special function unit approximates f on a
# 23-bit fraction k (a fixed-point number in [0, 1)) by 2^m quadratics: segment s = the top
# m bits of k, xl = its other L = 23 - m bits, and
#
#     Q = C0[s] + C1[s] xl + C2[s] sq(xl),     result fraction = Q >> R,
#
# with sq(xl) the square of xl formed by a column-truncated squarer: of the partial products
# xl_i xl_j 2^(i+j) (each pair i < j counted once at 2^(i+j+1)), only those of weight
# >= 2^(2L-15) are summed, and the sum is shifted down to its 15 kept bits. C0 is a 26-bit
# value plus a constant of the function below it (C0 mod 2^13 is the same in every
# segment), C1 is 16 bits and C2 10 to 12, signed: the sizes of Oberman and Siu's
# multifunction interpolator (ARITH 2005). m, L and R per function:
#
#     ex2    m = 6, L = 17, R = 15     result 2^(k 2^-23) in 2^-23 steps of [1, 2)
#     rcp    m = 7, L = 16, R = 15     1 / (1 + k 2^-23) in 2^-24 steps of (1/2, 1]
#     rsqrt  m = 7, L = 17, R = 16     over [1, 4) (k has 24 bits), 2^-24 steps of (1/2, 1]
#     lg2    m = 6, L = 17, R = 3      log2(1 + k 2^-23) in 2^-36 steps of [0, 1)
#
# The coefficients were fitted to an H200's results on every fraction (tools/
# sim_isa_vs_gpu.py, Note [Sweeps]); with them the model gives each of those results
# exactly. No sum is rounded: every truncation is a shift toward minus infinity.

_MASK23 = (1 << 23) - 1
_CANONICAL_NAN = np.uint32(0x7FFFFFFF)


def _squarer(bits: int) -> np.ndarray:
    """sq(xl) of Note [SFU quadratic interpolation] for every xl of `bits` bits."""
    x = np.arange(1 << bits, dtype=np.int64)
    cut = 2 * bits - 15                     # the lightest partial product kept
    total = np.zeros_like(x)
    for j in range(bits):
        bj = (x >> j) & 1
        if 2 * j >= cut:
            total += bj << (2 * j)
        lo = max(0, cut - 1 - j)            # partners i < j with i + j + 1 >= cut
        if lo < j:
            total += (bj * ((x >> lo) & ((1 << (j - lo)) - 1))) << (j + 1 + lo)
    return total >> cut


class _Quadratic:
    """One function's segments: `evaluate(k)` is Q >> R for fractions k of 23 (+1) bits;
    `table()` all of them at once, built on first use."""

    def __init__(self, c0, c1, c2, xl_bits: int, shift: int):
        self.c0 = np.array(c0, np.int64)
        self.c1 = np.array(c1, np.int64)
        self.c2 = np.array(c2, np.int64)
        self.xl_bits, self.shift = xl_bits, shift
        self.sq = _squarer(xl_bits)
        self._table = None

    def evaluate(self, k: np.ndarray) -> np.ndarray:
        s = k >> self.xl_bits
        xl = k & ((1 << self.xl_bits) - 1)
        return (self.c0[s] + self.c1[s] * xl + self.c2[s] * self.sq[xl]) >> self.shift

    def table(self) -> np.ndarray:
        if self._table is None:
            xl = np.arange(1 << self.xl_bits, dtype=np.int64)
            q = self.c1[:, None] * xl + self.c2[:, None] * self.sq
            q += self.c0[:, None]
            self._table = (q >> self.shift).reshape(-1)
        return self._table


_EX2 = _Quadratic(tables.EX2_C0, tables.EX2_C1, tables.EX2_C2, 17, 15)
_RCP = _Quadratic(tables.RCP_C0, tables.RCP_C1, tables.RCP_C2, 16, 15)
_RSQRT = _Quadratic(tables.RSQRT_C0, tables.RSQRT_C1, tables.RSQRT_C2, 17, 16)
_LG2 = _Quadratic(tables.LG2_C0, tables.LG2_C1, tables.LG2_C2, 17, 3)


_F32_TRUNCATE = np.uint64((1 << 64) - (1 << 29))   # float64 bits kept by an f32 truncation
_NAN32 = _CANONICAL_NAN.view(np.float32)


def _with_nans(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out, with the canonical NaN where x is NaN."""
    nan = np.isnan(x)
    return np.where(nan, _NAN32, out) if nan.any() else out


# Note [ex2.approx]: x is read as sign and magnitude, the magnitude as a fixed-point number
# with 23 fraction bits, truncated: n = trunc(|x|), k = trunc(frac(|x|) 2^23). For x >= 0 the
# result is 2^n E(k), E the quadratic on [1, 2). For x < 0 the fraction is negated by
# complementing its bits, as sign-magnitude hardware does cheaply: 2^-(n + f) =
# 2^-(n + 1) 2^(1 - f), and 1 - f is taken as ~k = 2^23 - 1 - k, one step below; k = 0 gives
# 2^-n exactly. So ex2(-f) is E at the mirrored fraction minus one step, halved: not E(k)
# reflected, and not E(1 - f) / 2. Results of 2^128 and up are Inf; below 2^-126 .ftz gives
# +0. Without .ftz, x < -126 is computed as ex2.ftz(x / 2)^2, the square rounded to nearest
# with subnormal results (the compiler's expansion): so ex2(-127) = 2^-127 - 2^-149
# (ex2(-63.5) is a little below 2^-63.5), ex2(-149) = 2^-149, ex2(-150) = 0. Subnormal x
# reads as 0 (result 1); NaN gives the canonical NaN, -Inf gives +0. The tables below hold
# E and the mirrored E for every k, and 2^+-n, so that an instruction costs a few gathers.

@functools.cache
def _ex2_tables():
    """(significands, scales): significands[sign 2^23 + k] is the significand in [1/2, 2)
    of 2^(+-(n + f)) / 2^(+-n); scales[sign 1024 + n] is 2^(+-n), Inf or 0 past the f32
    range (.ftz)."""
    e = _EX2.table().astype(np.float32) * np.float32(2.0 ** -23)             # exact: 24 bits
    mirrored = np.concatenate([[np.float32(1)], e[-2::-1] * np.float32(0.5)])   # E(2^23 - 1 - k) / 2
    n = np.arange(1024, dtype=np.float64)
    with np.errstate(over="ignore"):
        up = np.where(n <= 127, np.exp2(n), np.inf)
    down = np.where(n <= 126, np.exp2(-n), 0.0)
    return np.concatenate([e, mirrored]), np.concatenate([up, down])


def ex2_ftz(x: np.ndarray) -> np.ndarray:
    """ex2.approx.ftz.f32: Note [ex2.approx]."""
    x = np.asarray(x, np.float32)
    significands, scales = _ex2_tables()
    fixed = (np.fmin(np.abs(x), np.float32(512)) * np.float32(1 << 23)).astype(np.int64)   # NaN -> 512
    negative = (x < 0) * (1 << 23)
    significand = significands[negative | (fixed & _MASK23)]
    # a mirrored significand below 1 takes the step of 2^-(n + 1) (Note [ex2.approx])
    out = significand * scales[(negative >> 13) + (fixed >> 23)]
    out = np.where(out < _F32_TINY, 0.0, out) if negative.any() else out
    return _with_nans(x, out.astype(np.float32))


def ex2(x: np.ndarray) -> np.ndarray:
    """ex2.approx.f32 (no .ftz): Note [ex2.approx]."""
    x = np.asarray(x, np.float32)
    low = x < -126
    if not low.any():
        return ex2_ftz(x)
    half = ex2_ftz(np.where(low, x * np.float32(0.5), x))
    square = np.where(low, half, np.float32(0))
    with np.errstate(under="ignore"):
        return np.where(low, square * square, half).astype(np.float32)


# Note [rcp.approx and rsqrt.approx]: the exponent is taken out exactly and the quadratic
# evaluated on the fraction: rcp(m 2^e) = R(m) 2^-e with R(m) in (1/2, 1] (R(1) = 1), and
# rsqrt on the two binades [1, 4), m 2^e read as (m 2^(e mod 2)) 2^(e - e mod 2), so the
# table index has 24 bits, the exponent's parity on top. rsqrt(4^j) is taken as exactly
# 2^-j: the quadratic would give one step less, and an H200 gives rsqrt(1) = 1 (its sweep
# holds no other power of 4). .ftz: subnormal inputs read as zero of their sign and results
# below 2^-126 become zero of their sign. rcp(+-0) = +-Inf, rcp(+-Inf) = +-0; rsqrt(+-0) =
# +-Inf, rsqrt(+Inf) = +0, rsqrt(x < 0) = NaN; NaN in, canonical NaN out.

_F32_TINY = np.float32(np.finfo(np.float32).tiny)


@functools.cache
def _rcp_tables():
    """(R(k) in (1/2, 1] for every fraction k, scale[sign and biased exponent of x]:
    +-2^-e, +-Inf for zeros and subnormals, +-0 for infinities)."""
    r = _RCP.table().astype(np.float32) * np.float32(2.0 ** -24)
    e = np.arange(256) - 127
    scale = np.where(e == -127, np.inf, np.exp2(-e.clip(-126, 127).astype(np.float64)))
    scale[-1] = 0.0
    return r, np.concatenate([scale, -scale])


def rcp_ftz(x: np.ndarray) -> np.ndarray:
    """rcp.approx.ftz.f32: Note [rcp.approx and rsqrt.approx]."""
    x = np.asarray(x, np.float32)
    r, scales = _rcp_tables()
    bits = x.view(np.uint32)
    out = r[bits & _MASK23] * scales[bits >> 23]
    out = np.where(np.abs(out) < _F32_TINY, np.copysign(0.0, out), out)     # .ftz, sign kept
    return _with_nans(x, out.astype(np.float32))


@functools.cache
def _rsqrt_tables():
    """(rsqrt on [1, 4) indexed by parity 2^23 + fraction, with rsqrt(1) = 1;
    scale[biased exponent of x >= 0]: 2^-(e - e mod 2)/2, Inf for zeros and subnormals,
    0 for Inf)."""
    r = _RSQRT.table().astype(np.float32) * np.float32(2.0 ** -24)
    r[0] = 1.0
    e = np.arange(256) - 127
    scale = np.exp2(-((e - (e & 1)) // 2).astype(np.float64))
    scale[0], scale[-1] = np.inf, 0.0
    return r, scale


def rsqrt_ftz(x: np.ndarray) -> np.ndarray:
    """rsqrt.approx.ftz.f32: Note [rcp.approx and rsqrt.approx]."""
    x = np.asarray(x, np.float32)
    r, scales = _rsqrt_tables()
    bits = x.view(np.uint32)
    biased = (bits >> 23) & 0xFF
    out = (r[((biased & 1) ^ 1) << 23 | (bits & _MASK23)] * scales[biased]).astype(np.float32)
    zero = biased == 0                                                   # zeros and subnormals
    out = np.where(zero, np.copysign(np.float32(np.inf), x), out)
    bad = np.isnan(x) | ((x < 0) & ~zero)
    return np.where(bad, _NAN32, out) if bad.any() else out


# Note [lg2.approx]: lg2(m 2^e) = e + L(m), formed in fixed point with 36 fraction bits:
# F = L's quadratic (Q >> 3), and the sum e 2^36 + F, in two's complement, turned into sign
# and magnitude by complementing its bits (magnitude -v - 1 for v < 0), then converted to f32
# rounding toward zero. Hence lg2(1/2) = -(1 - 2^-23): F at m = 1 is not 0 but a few 2^-36.
# lg2(1) is 0 exactly. .ftz: subnormal or zero inputs give -Inf; x < 0 NaN; +Inf gives +Inf.


def lg2_ftz(x: np.ndarray) -> np.ndarray:
    """lg2.approx.ftz.f32: Note [lg2.approx]."""
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32).astype(np.int64)
    v = ((((bits >> 23) & 0xFF) - 127) << 36) + _LG2.table()[bits & _MASK23]
    magnitude = (v ^ (v >> 63)).astype(np.float64) * 2.0 ** -36         # -v - 1 for v < 0; exact
    truncated = (magnitude.view(np.uint64) & _F32_TRUNCATE).view(np.float64)
    out = np.where(v < 0, -truncated, truncated).astype(np.float32)
    out = np.where(x == 1, np.float32(0), out)
    zero = (bits & 0x7F800000) == 0                                    # zeros and subnormals
    out = np.where(zero, np.float32(-np.inf), out)
    out = np.where(np.isposinf(x), np.float32(np.inf), out)
    bad = np.isnan(x) | ((x < 0) & ~zero)
    return np.where(bad, _NAN32, out) if bad.any() else out


# Note [tanh.approx]: tanh is odd and read as sign and magnitude: tanh(-x) = -tanh(x) bit
# for bit. |x| < 2^-8 (zeros and subnormals included) gives x itself, |x| >= 8 gives 1,
# NaN the canonical NaN. On each binade 2^e <= |x| < 2^(e+1), e = -8 .. 2, the mantissa's top
# m_e + 17 bits are read (the rest is ignored): the top m_e pick one of 2^m_e segments, the
# other 17 are xl, and Q = C0 + C1 xl + C2 sq(xl) is evaluated as in Note [SFU quadratic
# interpolation] (the same squarer, L = 17); the result is Q 2^-G_e converted to f32
# rounding toward zero, with no other rounding. m_e and G_e:
#
#     e      -8  -7  -6  -5  -4  -3  -2  -1   0   1   2
#     m_e     0   0   0   1   1   2   2   2   3   4   3
#     G_e    41  40  39  38  37  37  37  36  37  39  37
#
# So above 1/2 the segments are 1/8 wide (1/2 on [4, 8)) and xl steps 2^-20 (2^-18 on
# [4, 8)). The segment layout shows in the error against tanh, a cubic ripple of one period
# per segment; the squarer's truncation shows as the steps of the residual of a plain
# quadratic fit. The coefficients (approx_tables) are integers with which every stored H200
# result of a segment is Q 2^-G_e truncated: C1 and C2 searched near a least-squares fit for
# a nonempty range of such C0, C0 the middle of that range. The stored results do not hold
# every input: coefficients fitted to a random half of them give the other half exactly on
# [1/8, 2) and miss 6 in 10^4 on [1/16, 1/8), 1 in 10^4 on [2, 8) (binades below 1/16 hold
# too few results to tell), so on inputs no run has held the model may be an ulp off. G_e is
# the smallest shift for which that search succeeded (from e = -4 down, the first one
# tried), not a rule read off the hardware.

_TANH_SEGMENT_BITS = (0, 0, 0, 1, 1, 2, 2, 2, 3, 4, 3)                # m_e for e = -8 .. 2
_TANH_SHIFTS = (41, 40, 39, 38, 37, 37, 37, 36, 37, 39, 37)            # G_e


@functools.cache
def _tanh_tables():
    """(C0, C1, C2 per segment; first segment, m_e and 2^-G_e per biased exponent 119 .. 129)."""
    bits = np.array(_TANH_SEGMENT_BITS, np.int64)
    first = np.concatenate([[0], np.cumsum(1 << bits)[:-1]])
    scales = np.exp2(-np.array(_TANH_SHIFTS, np.float64))
    coefficients = [np.array(c, np.int64) for c in (tables.TANH_C0, tables.TANH_C1, tables.TANH_C2)]
    return coefficients, first, bits, scales


def tanh(x: np.ndarray) -> np.ndarray:
    """tanh.approx.f32: Note [tanh.approx]."""
    x = np.asarray(x, np.float32)
    (c0, c1, c2), first, segment_bits, scales = _tanh_tables()
    magnitude = x.view(np.uint32) & np.uint32(0x7FFFFFFF)
    binade = ((magnitude >> 23).astype(np.int64) - 119).clip(0, 10)    # e + 8
    m = segment_bits[binade]
    kept = (magnitude & _MASK23).astype(np.int64) >> (6 - m)            # the top m + 17 bits
    row = first[binade] + (kept >> 17)
    xl = kept & ((1 << 17) - 1)
    q = c0[row] + c1[row] * xl + c2[row] * _EX2.sq[xl]                   # ex2's squarer: L = 17
    value = (q.astype(np.float64) * scales[binade]).view(np.uint64) & _F32_TRUNCATE
    out = np.minimum(value.view(np.float64), 1.0).astype(np.float32)
    out = np.where(magnitude < np.uint32(0x3B800000), np.abs(x), out)   # below 2^-8
    out = np.where(magnitude >= np.uint32(0x41000000), np.float32(1), out)   # 8 and up, Inf
    return _with_nans(x, np.copysign(out, x))
