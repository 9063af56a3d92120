"""cvt against hand-worked values (PTX ISA 8.x, 9.7.9.21 "cvt" and 6.5 "Rounding Modifiers"):
rn / rz / rm / rp to bf16 and f16, the packed bf16x2 / f16x2 forms, rni / rzi / rmi / rpi to
integers and integral floats, int <-> float with saturation, NaN -> 0."""
from __future__ import annotations

import numpy as np
import pytest

from tests.sim.ptx_harness import run_kernel


def _cvt16(opcode: str, xs) -> list[str]:
    """f32 -> a 16-bit result's bits, as hex strings."""
    body = f"""
    ld.global.f32 %f1, [%a1];
    {opcode} %h1, %f1;
    cvt.u32.u16 %r1, %h1;
    st.global.b32 [%a0], %r1;"""
    x = np.resize(np.array(xs, np.float32), 32)
    return [hex(v) for v in run_kernel(body, [np.zeros(32, np.uint32), x]).arrays[0][:len(xs)]]


@pytest.mark.parametrize("mode, want", [
    # 1 + 2^-8: halfway between bf16 1.0 and 1 + 2^-7; 1 + 3 * 2^-8: halfway between 1 + 2^-7 and
    # 1 + 2^-6; 1 + 2^-9 and -(1 + 2^-9): just above 1.0 in magnitude
    ("rn", ["0x3f80", "0x3f82", "0x3f80", "0xbf80"]),     # ties to even
    ("rz", ["0x3f80", "0x3f81", "0x3f80", "0xbf80"]),
    ("rm", ["0x3f80", "0x3f81", "0x3f80", "0xbf81"]),
    ("rp", ["0x3f81", "0x3f82", "0x3f81", "0xbf80"]),
])
def test_f32_to_bf16_rounding(mode, want):
    xs = [1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -9, -(1 + 2.0 ** -9)]
    assert _cvt16(f"cvt.{mode}.bf16.f32", xs) == want


@pytest.mark.parametrize("mode, want", [
    # 1 + 2^-11: halfway between f16 1.0 and 1 + 2^-10; 65520: halfway between the largest f16
    # (65504) and the next binade's first value: rn goes to infinity
    ("rn", ["0x3c00", "0x7c00", "0xbc00"]),
    ("rz", ["0x3c00", "0x7bff", "0xbc00"]),
    ("rm", ["0x3c00", "0x7bff", "0xbc01"]),
    ("rp", ["0x3c01", "0x7c00", "0xbc00"]),
])
def test_f32_to_f16_rounding(mode, want):
    assert _cvt16(f"cvt.{mode}.f16.f32", [1 + 2.0 ** -11, 65520.0, -(1 + 2.0 ** -11)]) == want


def test_nan_stays_nan_in_bf16_and_f16():
    got = _cvt16("cvt.rn.bf16.f32", [np.nan])[0], _cvt16("cvt.rn.f16.f32", [np.nan])[0]
    assert int(got[0], 16) & 0x7FFF > 0x7F80 and int(got[1], 16) & 0x7FFF > 0x7C00


@pytest.mark.parametrize("form, want", [("bf16x2", 0x3F804000), ("f16x2", 0x3C004000)])
def test_packed_conversion_puts_a_in_the_upper_half(form, want):
    """cvt.rn.bf16x2.f32 d, a, b: d = {cvt(a), cvt(b)} with a in bits 16-31."""
    body = f"""
    cvt.rn.{form}.f32 %r1, 0f3F800000, 0f40000000;
    st.global.b32 [%a0], %r1;"""
    assert run_kernel(body, [np.zeros(32, np.uint32)]).arrays[0][0] == want


def _f2i(opcode: str, xs, dtype=np.int32) -> list:
    body = f"""
    ld.global.f32 %f1, [%a1];
    {opcode} %r1, %f1;
    st.global.b32 [%a0], %r1;"""
    x = np.resize(np.array(xs, np.float32), 32)
    return run_kernel(body, [np.zeros(32, dtype), x]).arrays[0][:len(xs)].tolist()


def test_float_to_int_rounding_saturation_and_nan():
    """Float -> integer saturates to the destination's range and NaN gives 0; rni rounds
    halves to even, rzi toward zero, rmi down, rpi up."""
    xs = [2.5, 3.5, -2.5, 2.7, -2.7, np.nan, 3e9, -3e9]
    assert _f2i("cvt.rni.s32.f32", xs) == [2, 4, -2, 3, -3, 0, 2**31 - 1, -2**31]
    assert _f2i("cvt.rzi.s32.f32", xs) == [2, 3, -2, 2, -2, 0, 2**31 - 1, -2**31]
    assert _f2i("cvt.rmi.s32.f32", xs) == [2, 3, -3, 2, -3, 0, 2**31 - 1, -2**31]
    assert _f2i("cvt.rpi.s32.f32", xs) == [3, 4, -2, 3, -2, 0, 2**31 - 1, -2**31]
    assert _f2i("cvt.rzi.u32.f32", [-1.0, 5e9, 7.9], np.uint32) == [0, 2**32 - 1, 7]


def test_float_to_integral_float_and_sat():
    """cvt.rmi.f32.f32 / cvt.rpi.f32.f32 round to an integral value in f32; cvt.sat.f32.f32
    clamps to [0, 1] with NaN -> 0."""
    body = """
    ld.global.f32 %f1, [%a1];
    cvt.rmi.f32.f32 %f2, %f1;
    cvt.rpi.f32.f32 %f3, %f1;
    cvt.sat.f32.f32 %f4, %f1;
    st.global.f32 [%a0], %f2;
    st.global.f32 [%a2], %f3;
    st.global.f32 [%a3], %f4;"""
    x = np.resize(np.array([-1.5, 1.2, np.nan, 0.25], np.float32), 32)
    out = run_kernel(body, [np.zeros(32, np.float32), x, np.zeros(32, np.float32), np.zeros(32, np.float32)]).arrays
    assert out[0][[0, 1, 3]].tolist() == [-2.0, 1.0, 0.0] and out[2][[0, 1, 3]].tolist() == [-1.0, 2.0, 1.0]
    assert out[3][:4].tolist() == [0.0, 1.0, 0.0, 0.25]


def test_int_to_float_rounding():
    """2^24 + 1 and 2^24 + 3 are not f32 values: rn goes to even, rz down, rp up; u32's
    2^32 - 1 rounds to 2^32."""
    body = """
    ld.global.b32 %r1, [%a1];
    cvt.rn.f32.s32 %f1, %r1;
    cvt.rz.f32.s32 %f2, %r1;
    cvt.rp.f32.s32 %f3, %r1;
    cvt.rn.f32.u32 %f4, %r1;
    st.global.f32 [%a0], %f1;
    st.global.f32 [%a2], %f2;
    st.global.f32 [%a3], %f3;
    st.global.f32 [%a4], %f4;"""
    x = np.resize(np.array([2**24 + 1, 2**24 + 3, -1], np.int32), 32)
    z = [np.zeros(32, np.float32) for _ in range(4)]
    out = run_kernel(body, [z[0], x, z[1], z[2], z[3]]).arrays
    assert out[0][:2].tolist() == [2**24, 2**24 + 4]
    assert out[2][:2].tolist() == [2**24, 2**24 + 2]
    assert out[3][:2].tolist() == [2**24 + 2, 2**24 + 4]
    assert out[4][2] == 2.0 ** 32


def test_int_to_int_saturation():
    """cvt.sat.u16.s32 clamps into [0, 65535]; without .sat the value is truncated."""
    body = """
    ld.global.b32 %r1, [%a1];
    cvt.sat.u16.s32 %h1, %r1;
    cvt.u16.u32 %h2, %r1;
    cvt.u32.u16 %r2, %h1;
    cvt.u32.u16 %r3, %h2;
    st.global.b32 [%a0], %r2;
    st.global.b32 [%a2], %r3;"""
    x = np.resize(np.array([-5, 70000, 123], np.int32), 32)
    out = run_kernel(body, [np.zeros(32, np.uint32), x, np.zeros(32, np.uint32)]).arrays
    assert out[0][:3].tolist() == [0, 65535, 123]
    assert out[2][:3].tolist() == [65531, 70000 - 65536, 123]
