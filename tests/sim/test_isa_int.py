"""Integer and bit instructions against hand-worked values (PTX ISA 8.x, chapter 9.7.1
"Integer Arithmetic Instructions", 9.7.8 "Data Movement and Conversion Instructions" for
prmt, 9.7.6 "Comparison and Selection Instructions" for setp/selp)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.sim.ptx_harness import run_kernel

A, B = 0x44332211, 0x88776655


def _prmt(mode: str, selectors) -> np.ndarray:
    body = f"""
    ld.global.b32 %r3, [%a1];
    mov.b32 %r1, {A};
    mov.b32 %r2, {B};
    prmt.b32{mode} %r4, %r1, %r2, %r3;
    st.global.b32 [%a0], %r4;"""
    c = np.resize(np.array(selectors, np.uint32), 32)
    return run_kernel(body, [np.zeros(32, np.uint32), c]).arrays[0][:len(selectors)]


def test_prmt_default_mode():
    """prmt: nibble i of c picks d's byte i from {b, a} (a's bytes 0-3, b's 4-7); bit 3 of the
    nibble replicates the picked byte's sign bit."""
    got = _prmt("", [0x3210, 0x7654, 0x0123, 0x000F, 0x0008])
    assert [hex(x) for x in got] == [hex(A), hex(B), "0x11223344", "0x111111ff", "0x11111100"]


@pytest.mark.parametrize("mode, c, want", [
    (".f4e", 1, 0x55443322),     # bytes 1, 2, 3, 4
    (".b4e", 0, 0x66778811),     # bytes 0, 7, 6, 5
    (".rc8", 2, 0x33333333),     # byte 2 four times
    (".ecl", 1, 0x44332222),     # bytes 1, 1, 2, 3
    (".ecr", 2, 0x33332211),     # bytes 0, 1, 2, 2
    (".rc16", 1, 0x44334433),    # bytes 2, 3, 2, 3
])
def test_prmt_modes(mode, c, want):
    assert hex(_prmt(mode, [c])[0]) == hex(want)


def _three(op: str, ty: str, a, b, c=None, out_ty=None, dtype=np.uint32):
    """One instruction `op.ty d, a, b[, c]` over lanes of operands read from arrays."""
    arrays = [np.zeros(32, dtype if out_ty is None else np.uint64)]
    srcs = []
    for i, v in enumerate([a, b] + ([c] if c is not None else [])):
        arrays.append(np.resize(np.asarray(v, dtype), 32))
        srcs.append(f"%r{10 + i}")
    wide = out_ty is not None
    body = "\n".join(f"ld.global.b32 %r{10 + i}, [%a{i + 1}];" for i in range(len(srcs)))
    if wide:
        body += f"\n{op}.{ty} %rd1, {', '.join(srcs)};\nmul.wide.u32 %rd2, %tid, 8;\nld.param.u64 %rd3, [p0];" \
                "\nadd.s64 %rd3, %rd3, %rd2;\nst.global.b64 [%rd3], %rd1;"
    else:
        body += f"\n{op}.{ty} %r1, {', '.join(srcs)};\nst.global.b32 [%a0], %r1;"
    return run_kernel(body, arrays).arrays[0]


def test_bfe():
    """bfe: len bits from pos; signed fills with a[min(pos+len-1, 31)]; len 0 gives 0;
    pos past bit 31 gives zeros (unsigned) or the sign bit everywhere (signed)."""
    a = [0xF0F01234, 0x00000F00, 0x00000F00, 0x80000000, 0x80000000, 0x12345678]
    pos = [4, 8, 8, 40, 40, 28]
    ln = [8, 4, 0, 4, 4, 8]
    u = _three("bfe", "u32", a, pos, ln)[:6]
    s = _three("bfe", "s32", a, pos, ln)[:6]
    assert [hex(x) for x in u] == ["0x23", "0xf", "0x0", "0x0", "0x0", "0x1"]
    assert [hex(x) for x in s] == ["0x23", "0xffffffff", "0x0", "0xffffffff", "0xffffffff", "0x1"]


@pytest.mark.parametrize("op, want", [
    ("shf.l.wrap", ["0xabcdef01", "0x9abcdef0", "0x1234567", "0xabcdef01"]),
    ("shf.r.wrap", ["0x1234567", "0x12345678", "0xabcdef01", "0x1234567"]),
    ("shf.l.clamp", ["0xabcdef01", "0x9abcdef0", "0x1234567", "0x12345678"]),
    ("shf.r.clamp", ["0x1234567", "0x12345678", "0xabcdef01", "0x9abcdef0"]),
])
def test_funnel_shifts(op, want):
    """shf d, a, b, c: the 64 bits b:a (here 0x9abcdef0_12345678) shifted left (d: the high
    word) or right (the low word) by c & 31 (wrap: 36 shifts by 4) or min(c, 32) (clamp: 36
    by 32, which gives a left and b right); c = 4, 0, 28, 36."""
    out = _three(op, "b32", [0x12345678] * 4, [0x9ABCDEF0] * 4, [4, 0, 28, 36])
    assert [hex(x) for x in out[:4]] == want


def test_bfi():
    """bfi d, a, b, pos, len: b with bits pos..pos+len-1 from a's low bits, clipped at bit 31."""
    body = """
    ld.global.b32 %r10, [%a1];
    ld.global.b32 %r11, [%a2];
    ld.global.b32 %r12, [%a3];
    bfi.b32 %r1, 0xAB, 0xFFFFFFFF, %r10, %r11;
    bfi.b32 %r2, 0xAB, 0, %r10, %r12;
    st.global.b32 [%a0], %r1;
    st.global.b32 [%a4], %r2;"""
    pos = np.resize(np.array([8, 28, 0, 4], np.uint32), 32)
    ln = np.resize(np.array([8, 8, 0, 4], np.uint32), 32)
    out = run_kernel(body, [np.zeros(32, np.uint32), pos, ln, np.full(32, 32, np.uint32),
                            np.zeros(32, np.uint32)]).arrays
    assert [hex(x) for x in out[0][:4]] == ["0xffffabff", "0xbfffffff", "0xffffffff", "0xffffffbf"]
    assert [hex(x) for x in out[4][:4]] == ["0xab00", "0xb0000000", "0xab", "0xab0"]  # len 32 clipped


def test_signed_div_rem_truncate_toward_zero():
    """div.s32 / rem.s32: the quotient truncates toward zero, the remainder has a's sign."""
    a = [-7, 7, -7, 7, 0]
    b = [2, -2, -2, 2, 5]
    q = _three("div", "s32", a, b, dtype=np.int32)[:5]
    r = _three("rem", "s32", a, b, dtype=np.int32)[:5]
    assert q.tolist() == [-3, -3, 3, 3, 0]
    assert r.tolist() == [-1, 1, -1, 1, 0]


def test_mul_hi_and_wide():
    """mul.hi: the upper half of the double-width product; mul.wide: the whole product."""
    hi_u = _three("mul.hi", "u32", [0xFFFFFFFF, 0x80000000], [0xFFFFFFFF, 2])[:2]
    hi_s = _three("mul.hi", "s32", [-1, -2, 1 << 30], [-1, 3, 8], dtype=np.int32)[:3]
    wide_s = _three("mul.wide", "s32", [-3, 1 << 30], [5, 1 << 30], out_ty="s64", dtype=np.int32)
    wide_u = _three("mul.wide", "u32", [0xFFFFFFFF], [2], out_ty="u64")
    assert [hex(x) for x in hi_u] == ["0xfffffffe", "0x1"]
    assert hi_s.tolist() == [0, -1, 2]
    assert wide_s.view(np.int64)[:2].tolist() == [-15, 1 << 60]
    assert int(wide_u[0]) == 0x1FFFFFFFE


def test_mul_hi_64():
    """mul.hi.u64 / .s64 against Python's unbounded integers."""
    rng = np.random.default_rng(3)
    a = np.concatenate([[-1, 1 << 62, -(1 << 63), 3], rng.integers(-(1 << 63), 1 << 63, 28, dtype=np.int64)])
    b = np.concatenate([[3, 4, -1, -(1 << 63)], rng.integers(-(1 << 63), 1 << 63, 28, dtype=np.int64)])
    body = """
    mul.wide.u32 %rd1, %tid, 8;
    ld.param.u64 %rd2, [p1];
    add.s64 %rd2, %rd2, %rd1;
    ld.global.b64 %rd3, [%rd2];
    ld.param.u64 %rd2, [p2];
    add.s64 %rd2, %rd2, %rd1;
    ld.global.b64 %rd4, [%rd2];
    mul.hi.s64 %rd5, %rd3, %rd4;
    mul.hi.u64 %rd6, %rd3, %rd4;
    ld.param.u64 %rd2, [p0];
    add.s64 %rd2, %rd2, %rd1;
    st.global.b64 [%rd2], %rd5;
    ld.param.u64 %rd2, [p3];
    add.s64 %rd2, %rd2, %rd1;
    st.global.b64 [%rd2], %rd6;"""
    out = run_kernel(body, [np.zeros(32, np.int64), a, b, np.zeros(32, np.uint64)]).arrays
    assert out[0].tolist() == [(int(x) * int(y)) >> 64 for x, y in zip(a, b)]
    assert out[3].tolist() == [((int(x) % 2**64) * (int(y) % 2**64)) >> 64 for x, y in zip(a, b)]


def test_setp_two_destinations_and_selp():
    """setp.cmp p|q, a, b: q = !p; with .bop and c: p = (a cmp b) bop c, q = !(a cmp b) bop c.
    selp d, a, b, p: a where p."""
    body = """
    ld.global.b32 %r10, [%a1];
    setp.lt.s32 %p1|%p2, %r10, 16;
    setp.ne.u32 %p5, %r10, 3;
    setp.lt.and.s32 %p3|%p4, %r10, 16, %p5;
    selp.b32 %r1, 1, 0, %p1;
    selp.b32 %r2, 2, 0, %p2;
    selp.b32 %r3, 4, 0, %p3;
    selp.b32 %r4, 8, 0, %p4;
    or.b32 %r1, %r1, %r2;
    or.b32 %r1, %r1, %r3;
    or.b32 %r1, %r1, %r4;
    st.global.b32 [%a0], %r1;"""
    out = run_kernel(body, [np.zeros(32, np.uint32), np.arange(32, dtype=np.uint32)]).arrays[0]
    assert out[3] == 0b0001          # t true, c false: p1 = t, p3 = t & c false, q's false
    assert out[0] == 0b0101          # t true, c true: p1, p3
    assert out[20] == 0b1010         # t false: p2, and q = !t & c


def test_mov_packs_and_unpacks_vectors():
    """mov.b64 d, {a, b} puts a in the low 32 bits and b in the high ones, and mov.b64
    {a, b}, d splits them back; mov.b32 of two b16 halves likewise (9.7.8.7 "mov")."""
    body = f"""
    ld.global.b32 %r1, [%a1];
    mov.b32 %r2, {B};
    mov.b64 %rd1, {{%r1, %r2}};
    mov.b64 {{%r3, %r4}}, %rd1;
    mov.b32 {{%h1, %h2}}, %r1;
    mov.b32 %r5, {{%h2, %h1}};
    xor.b32 %r6, %r3, %r4;
    xor.b32 %r6, %r6, %r5;
    st.global.b32 [%a2], %r6;
    mul.wide.u32 %rd2, %tid, 8;
    ld.param.u64 %rd3, [p0];
    add.s64 %rd3, %rd3, %rd2;
    st.global.b64 [%rd3], %rd1;"""
    lanes = (A + np.arange(32, dtype=np.uint32)).astype(np.uint32)
    out = run_kernel(body, [np.zeros(32, np.uint64), lanes, np.zeros(32, np.uint32)]).arrays
    assert [hex(x) for x in out[0][:2]] == [hex((B << 32) | A), hex((B << 32) | (A + 1))]
    swapped = ((lanes >> 16) | (lanes << 16)).astype(np.uint32)
    assert np.array_equal(out[2], lanes ^ np.uint32(B) ^ swapped)
