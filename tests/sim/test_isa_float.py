"""Floating-point instructions against hand-worked values (PTX ISA 8.x, 9.7.3 "Floating-Point
Instructions": min / max and their .NaN, fma's single rounding, the .approx functions'
special values, .ftz)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from attnc_sim.isa_float import fma_f32
from tests.sim.ptx_harness import run_kernel

INF, NAN = np.float32(np.inf), np.float32(np.nan)
SUB = np.float32(1e-40)                 # an f32 subnormal


def _unary(opcode: str, xs) -> np.ndarray:
    body = f"""
    ld.global.f32 %f1, [%a1];
    {opcode} %f2, %f1;
    st.global.f32 [%a0], %f2;"""
    x = np.resize(np.array(xs, np.float32), 32)
    return run_kernel(body, [np.zeros(32, np.float32), x]).arrays[0][:len(xs)]


def _binary(opcode: str, xs, ys) -> np.ndarray:
    body = f"""
    ld.global.f32 %f1, [%a1];
    ld.global.f32 %f2, [%a2];
    {opcode} %f3, %f1, %f2;
    st.global.f32 [%a0], %f3;"""
    x, y = (np.resize(np.array(v, np.float32), 32) for v in (xs, ys))
    return run_kernel(body, [np.zeros(32, np.float32), x, y]).arrays[0][:len(xs)]


def test_min_max_nan_rules():
    """min/max: one NaN input gives the other input, two give NaN; .NaN: any NaN gives NaN."""
    xs, ys = [NAN, 1.0, NAN, -2.0], [1.0, NAN, NAN, 3.0]
    assert _binary("min.f32", xs, ys).tolist()[:2] == [1.0, 1.0]
    assert np.isnan(_binary("min.f32", xs, ys)[2])
    assert _binary("max.f32", xs, ys)[[0, 1, 3]].tolist() == [1.0, 1.0, 3.0]
    got = _binary("min.NaN.f32", xs, ys)
    assert np.isnan(got[:3]).all() and got[3] == -2.0
    got = _binary("max.NaN.f32", xs, ys)
    assert np.isnan(got[:3]).all() and got[3] == 3.0


def test_approx_special_values():
    """ex2(-inf) = +0, ex2(+inf) = +inf; lg2(+-0) = -inf, lg2(negative) = NaN, lg2(+inf) = +inf;
    rcp(+-0) = +-inf; rsqrt(+0) = +inf; tanh(+-inf) = +-1."""
    ex2 = _unary("ex2.approx.f32", [-INF, INF, 0.0])
    assert ex2.view(np.uint32).tolist() == [0, 0x7F800000, 0x3F800000]
    lg2 = _unary("lg2.approx.f32", [0.0, -0.0, -1.0, INF])
    assert lg2[0] == -INF and lg2[1] == -INF and np.isnan(lg2[2]) and lg2[3] == INF
    assert _unary("rcp.approx.f32", [0.0, -0.0]).tolist() == [INF, -INF]
    assert _unary("rsqrt.approx.f32", [0.0])[0] == INF
    assert _unary("tanh.approx.f32", [INF, -INF]).tolist() == [1.0, -1.0]


def test_ftz_flushes_subnormal_inputs_and_results():
    """.ftz: subnormal inputs act as zero of their sign and subnormal results become zero:
    ex2.approx.ftz(subnormal) = ex2(0) = 1, rcp.approx.ftz(-subnormal) = -inf,
    lg2.approx.ftz(subnormal) = -inf; mul.ftz of two small normals is +0; without .ftz it
    is the subnormal."""
    assert _unary("ex2.approx.ftz.f32", [SUB])[0] == 1.0
    assert _unary("rcp.approx.ftz.f32", [-SUB])[0] == -INF
    assert _unary("lg2.approx.ftz.f32", [SUB])[0] == -INF
    small = np.float32(2.0 ** -70)
    assert _binary("mul.rn.ftz.f32", [small], [small]).view(np.uint32)[0] == 0
    assert _binary("mul.rn.f32", [small], [small])[0] == np.float32(2.0 ** -140)


def _exact_fma(a, b, c, mode="rn"):
    """fma rounded once from the exact rational a * b + c."""
    v = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    r = np.float32(float(v))
    near = [np.nextafter(r, -INF), r, np.nextafter(r, INF)]
    exact = [x for x in near if Fraction(float(x)) == v]
    if exact:
        return exact[0]
    below = max(x for x in near if Fraction(float(x)) < v)
    above = min(x for x in near if Fraction(float(x)) > v)
    if mode == "rm" or mode == "rz" and v > 0:
        return below
    if mode == "rp" or mode == "rz" and v < 0:
        return above
    d_lo, d_hi = v - Fraction(float(below)), Fraction(float(above)) - v
    if d_lo != d_hi:
        return below if d_lo < d_hi else above
    return below if int(np.float32(below).view(np.uint32)) % 2 == 0 else above


def test_fma_double_rounding_cases():
    """fma.rn.f32 rounds a * b + c once: with a = b = 1 + 2^-12, a * b = 1 + 2^-11 + 2^-24 is
    halfway between two f32 values, so c = +-2^-80 decides the rounding (a float64 sum would
    round the halfway point to even and lose it)."""
    x = np.float32(1 + 2.0 ** -12)
    tiny = np.float32(2.0 ** -80)
    body = """
    ld.global.f32 %f1, [%a1];
    ld.global.f32 %f2, [%a2];
    fma.rn.f32 %f3, %f1, %f1, %f2;
    st.global.f32 [%a0], %f3;"""
    c = np.resize(np.array([tiny, -tiny, 0], np.float32), 32)
    got = run_kernel(body, [np.zeros(32, np.float32), np.full(32, x), c]).arrays[0][:3]
    assert got.tolist() == [1 + 2.0 ** -11 + 2.0 ** -23, 1 + 2.0 ** -11, 1 + 2.0 ** -11]


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
def test_fma_is_exactly_rounded(mode):
    """fma_f32 against exact rational arithmetic, on products cancelled by c to near a
    rounding boundary (where one float64 rounding is not enough)."""
    rng = np.random.default_rng(11)
    n = 600
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c = (-(a.astype(np.float64) * b)).astype(np.float32)
    c[: n // 2] += rng.standard_normal(n // 2).astype(np.float32) * np.float32(2.0 ** -30)
    c[n // 2:] = rng.standard_normal(n // 2).astype(np.float32) * np.float32(2.0 ** -60)
    got = fma_f32(a, b, c, mode)
    want = np.array([_exact_fma(x, y, z, mode) for x, y, z in zip(a, b, c)], np.float32)
    assert (got.view(np.uint32) == want.view(np.uint32)).all()


@pytest.mark.parametrize("mode", ["rz", "rm", "rp"])
def test_directed_add_and_sub_are_exactly_rounded(mode):
    """add/sub with .rz/.rm/.rp round the exact sum: x + 1.5 * 2^23 rounded down is floor(x)
    even for x = -2^-31, whose float64 sum with the shifter rounds to the shifter itself (the
    FMA-pipe exp2's floor, Note [Exponentials on the FMA pipe]: a GPU run of a kernel once
    disagreed with the emulator in one row through it)."""
    shifter = np.float32(12582912.0)
    xs = np.array([-2.0 ** -31, 2.0 ** -31, -2.0 ** -29, -1e-30, 1e-30, 0.0, -0.0, -3.5, 1e-40], np.float32)
    for op, sign in (("add", 1), ("sub", -1)):
        got = _binary(f"{op}.{mode}.f32", xs, np.full(len(xs), sign * shifter, np.float32))
        want = [_exact_fma(x, np.float32(1), shifter, mode) for x in xs]
        assert got.view(np.uint32).tolist() == np.array(want, np.float32).view(np.uint32).tolist(), op


def test_packed_f32x2_arithmetic_works_on_each_half():
    """sm_100's add/sub/mul/fma .rn.f32x2 on b64 registers: each f32 half as its f32
    instruction would (the low half from the first vector element: `mov.b64 d, {lo, hi}`)."""
    body = """
    ld.global.b32 %r1, [%a1];
    ld.global.b32 %r2, [%a2];
    mov.b64 %rd1, {%r1, %r2};
    mov.b64 %rd2, {%r2, %r1};
    add.rn.f32x2 %rd3, %rd1, %rd2;
    sub.rn.f32x2 %rd4, %rd1, %rd2;
    mul.rn.f32x2 %rd5, %rd1, %rd2;
    fma.rn.f32x2 %rd6, %rd1, %rd2, %rd3;
    mov.b64 {%r3, %r4}, %rd4;
    mov.b64 {%r5, %r6}, %rd6;
    mov.b64 {%r7, %r8}, %rd5;
    st.global.b32 [%a3], %r3;
    st.global.b32 [%a4], %r4;
    st.global.b32 [%a5], %r5;
    st.global.b32 [%a6], %r8;"""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(32).astype(np.float32)
    y = rng.standard_normal(32).astype(np.float32) * np.float32(1e-3)
    out = run_kernel(body, [np.zeros(32, np.float32), x, y] + [np.zeros(32, np.float32) for _ in range(4)]).arrays
    assert np.array_equal(out[3], x - y) and np.array_equal(out[4], y - x)
    # the low half of fma(x, y, x + y): exactly rounded, as fma.rn.f32 gives it
    assert np.array_equal(out[5], fma_f32(x, y, x + y))
    assert np.array_equal(out[6], y * x)
