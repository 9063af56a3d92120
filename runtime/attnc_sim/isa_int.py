"""Integer, bitwise, predicate and data-movement instructions: add, sub, mul, mad, div,
rem, min, max, abs, neg, and, or, xor, not, shl, shr, shf, bfe, bfi, prmt, setp, selp, mov.

The arithmetic opcodes are shared with floating point: a floating type goes to
isa_float's rules. Integer arithmetic wraps (numpy's fixed-width arithmetic).
"""
from __future__ import annotations

import numpy as np

from attnc_sim import isa, isa_float
from attnc_sim.state import DTYPE, WARP, WIDTH
from attnc_sim.ptx import Vec

INT_TYPES = {"b8", "u8", "s8", "b16", "u16", "s16", "b32", "u32", "s32", "b64", "u64", "s64"}
FLOAT_TYPES = {"f16", "bf16", "f32", "f64", "f16x2", "bf16x2", "f32x2"}


def type_of(ins) -> str:
    return ins.opcode.rsplit(".", 1)[1]


def binary(ins, ctx, ty, fn, out_ty=None):
    a = ctx.reader(ins.operands[1], ty)
    b = ctx.reader(ins.operands[2], ty)
    d = ctx.writer(ins.operands[0], out_ty or ty)
    return lambda w: d(w, fn(a(w), b(w)))


def unary(ins, ctx, ty, fn, out_ty=None):
    a = ctx.reader(ins.operands[1], ty)
    d = ctx.writer(ins.operands[0], out_ty or ty)
    return lambda w: d(w, fn(a(w)))


def _wide(ty):
    return {"u16": "u32", "s16": "s32", "u32": "u64", "s32": "s64"}[ty]


@isa.register("add", "sub")
def add_sub(ins, ctx):
    ty = type_of(ins)
    if ty in FLOAT_TYPES:
        return isa_float.arith(ins, ctx, ty)
    if "sat" in ins.parts:
        raise ctx.error("saturating integer add/sub is not supported")
    op = np.add if ins.parts[0] == "add" else np.subtract
    return binary(ins, ctx, ty, op)


@isa.register("mul")
def mul(ins, ctx):
    ty = type_of(ins)
    if ty in FLOAT_TYPES:
        return isa_float.arith(ins, ctx, ty)
    mode = ins.parts[1]
    if mode == "lo":
        return binary(ins, ctx, ty, np.multiply)
    if mode == "wide":
        wt = _wide(ty)
        wd = DTYPE[wt]
        return binary(ins, ctx, ty, lambda a, b: a.astype(wd) * b.astype(wd), wt)
    if mode == "hi" and WIDTH[ty] in (16, 32):
        wd, shift = DTYPE[_wide(ty)], WIDTH[ty]
        return binary(ins, ctx, ty, lambda a, b: ((a.astype(wd) * b.astype(wd)) >> shift).astype(DTYPE[ty]))
    if mode == "hi" and WIDTH[ty] == 64:
        return binary(ins, ctx, ty, mul_hi_64)
    raise ctx.error(f"{ins.opcode} is not supported")


def mul_hi_64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The upper 64 bits of the 128-bit product (mul.hi.u64 / .s64), from 32-bit halves."""
    ua, ub = a.view(np.uint64), b.view(np.uint64)
    lo32 = np.uint64(0xFFFFFFFF)
    a0, a1, b0, b1 = ua & lo32, ua >> np.uint64(32), ub & lo32, ub >> np.uint64(32)
    mid1, mid2 = a1 * b0, a0 * b1
    carry = ((a0 * b0 >> np.uint64(32)) + (mid1 & lo32) + (mid2 & lo32)) >> np.uint64(32)
    hi = a1 * b1 + (mid1 >> np.uint64(32)) + (mid2 >> np.uint64(32)) + carry
    if a.dtype.kind == "i":         # signed: subtract b (resp. a) where a (resp. b) is negative
        hi = hi - np.where(a < 0, ub, np.uint64(0)) - np.where(b < 0, ua, np.uint64(0))
    return hi.view(a.dtype)


@isa.register("mad")
def mad(ins, ctx):
    ty = type_of(ins)
    if ty in FLOAT_TYPES:
        return isa_float.fma(ins, ctx)
    a, b = ctx.reader(ins.operands[1], ty), ctx.reader(ins.operands[2], ty)
    if ins.parts[1] == "lo":
        c = ctx.reader(ins.operands[3], ty)
        d = ctx.writer(ins.operands[0], ty)
        return lambda w: d(w, a(w) * b(w) + c(w))
    if ins.parts[1] == "wide":
        wt = _wide(ty)
        wd = DTYPE[wt]
        c = ctx.reader(ins.operands[3], wt)
        d = ctx.writer(ins.operands[0], wt)
        return lambda w: d(w, a(w).astype(wd) * b(w).astype(wd) + c(w))
    raise ctx.error(f"{ins.opcode} is not supported")


def _div(a, b):
    """PTX integer division: truncated toward zero; a zero divisor gives all ones."""
    zero = b == 0
    safe = np.where(zero, 1, b)
    if a.dtype.kind == "u":
        q = a // safe
    else:
        q = (np.abs(a.astype(np.int64)) // np.abs(safe.astype(np.int64))).astype(a.dtype)
        q = np.where((a < 0) != (safe < 0), -q, q).astype(a.dtype)
    return np.where(zero, a.dtype.type(-1) if a.dtype.kind == "i" else np.iinfo(a.dtype).max, q).astype(a.dtype)


@isa.register("div")
def div(ins, ctx):
    ty = type_of(ins)
    if ty in FLOAT_TYPES:
        return isa_float.arith(ins, ctx, ty)
    return binary(ins, ctx, ty, _div)


@isa.register("rem")
def rem(ins, ctx):
    ty = type_of(ins)
    return binary(ins, ctx, ty, lambda a, b: np.where(b == 0, a, a - _div(a, b) * b).astype(a.dtype))


@isa.register("min", "max")
def min_max(ins, ctx):
    ty = type_of(ins)
    if ty in FLOAT_TYPES:
        return isa_float.arith(ins, ctx, ty)
    op = np.minimum if ins.parts[0] == "min" else np.maximum
    if "relu" in ins.parts:
        return binary(ins, ctx, ty, lambda a, b: np.maximum(op(a, b), 0).astype(a.dtype))
    return binary(ins, ctx, ty, op)


@isa.register("abs", "neg")
def abs_neg(ins, ctx):
    ty = type_of(ins)
    if ty in FLOAT_TYPES:
        return isa_float.unary_op(ins, ctx, ty)
    return unary(ins, ctx, ty, np.abs if ins.parts[0] == "abs" else np.negative)


_BITWISE = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@isa.register("and", "or", "xor")
def bitwise(ins, ctx):
    return binary(ins, ctx, type_of(ins), _BITWISE[ins.parts[0]])


@isa.register("not")
def not_(ins, ctx):
    return unary(ins, ctx, type_of(ins), np.invert)


@isa.register("shl", "shr")
def shift(ins, ctx):
    ty = type_of(ins)
    width = WIDTH[ty]
    a = ctx.reader(ins.operands[1], ty)
    b = ctx.reader(ins.operands[2], "u32")
    d = ctx.writer(ins.operands[0], ty)
    dt = DTYPE[ty]
    if ins.parts[0] == "shl":
        def run(w):
            n = b(w)
            d(w, np.where(n >= width, 0, a(w) << np.minimum(n, width - 1).astype(dt)).astype(dt))
    elif ty.startswith("s"):
        def run(w):
            d(w, a(w) >> np.minimum(b(w), width - 1).astype(dt))
    else:
        def run(w):
            n = b(w)
            d(w, np.where(n >= width, 0, a(w) >> np.minimum(n, width - 1).astype(dt)).astype(dt))
    return run


@isa.register("shf")
def funnel_shift(ins, ctx):
    """shf.{l,r}.{clamp,wrap}.b32 d, a, b, c (PTX ISA, Logic and Shift Instructions: shf): the
    64 bits b:a (b the high word) shifted left (d: the high 32 bits) or right (d: the low 32)
    by n = min(c, 32) (clamp) or c & 31 (wrap). LLVM makes rotates of it."""
    _, direction, mode, ty = ins.parts
    if ty != "b32" or direction not in ("l", "r") or mode not in ("clamp", "wrap"):
        raise ctx.error(f"unsupported funnel shift {ins.opcode}")
    a, b, c = (ctx.reader(ins.operands[k], "u32") for k in (1, 2, 3))
    d = ctx.writer(ins.operands[0], "u32")

    def run(w):
        n = c(w).astype(np.uint64)
        n = np.minimum(n, np.uint64(32)) if mode == "clamp" else n & np.uint64(31)
        v = (b(w).astype(np.uint64) << np.uint64(32)) | a(w).astype(np.uint64)
        out = (v << n) >> np.uint64(32) if direction == "l" else v >> n
        d(w, (out & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    return run


@isa.register("bfe")
def bfe(ins, ctx):
    """bfe d, a, pos, len (PTX ISA, Integer Arithmetic Instructions: bfe): bits pos..pos+len-1
    of a, the positions past a's top bit and the bits above len filled with the sign bit
    a[min(pos + len - 1, msb)] (signed types, len > 0) or zero; pos and len are their low 8 bits."""
    ty = type_of(ins)
    width = WIDTH[ty]
    a = ctx.reader(ins.operands[1], ty)
    pos = ctx.reader(ins.operands[2], "u32")
    length = ctx.reader(ins.operands[3], "u32")
    d = ctx.writer(ins.operands[0], ty)
    ut = DTYPE["u" + ty[1:]]
    signed = ty.startswith("s")

    def run(w):
        p = (pos(w) & 0xFF).astype(np.int64)
        n = (length(w) & 0xFF).astype(np.int64)
        x = a(w).astype(ut).astype(np.uint64)
        kept = np.clip(np.minimum(n, width - p), 0, width)          # bits taken from a
        low = np.where(kept >= 64, ~np.uint64(0), (np.uint64(1) << np.minimum(kept, 63).astype(np.uint64)) - np.uint64(1))
        field = (x >> np.minimum(p, width - 1).astype(np.uint64)) & low
        field = np.where(kept > 0, field, np.uint64(0))
        if signed:
            top = np.minimum(p + n - 1, width - 1).astype(np.uint64)
            sign = (n > 0) & (((x >> top) & np.uint64(1)) == 1)
            field = np.where(sign, field | ~low, field)
        d(w, field.astype(ut))
    return run


@isa.register("bfi")
def bfi(ins, ctx):
    """bfi.b32 d, a, b, pos, len: b with `len` bits at `pos` replaced by a's low bits (PTX ISA
    9.7.1.21); pos and len are their low 8 bits, clamped to the width."""
    ty = type_of(ins)
    width = WIDTH[ty]
    a, b = ctx.reader(ins.operands[1], ty), ctx.reader(ins.operands[2], ty)
    pos, length = ctx.reader(ins.operands[3], "u32"), ctx.reader(ins.operands[4], "u32")
    d = ctx.writer(ins.operands[0], ty)

    def run(w):
        p = np.minimum(pos(w) & 0xFF, width).astype(object if width == 64 else np.uint64)
        n = np.minimum(length(w) & 0xFF, width).astype(p.dtype)
        n = np.minimum(n, width - p)
        ones = (np.ones(WARP, p.dtype) << n) - 1
        field = ones << np.minimum(p, width - 1)
        field = np.where(n == 0, 0, field)
        av, bv = a(w).astype(np.uint64).astype(p.dtype), b(w).astype(np.uint64).astype(p.dtype)
        out = (bv & ~field & ((1 << width) - 1)) | ((av << p) & field)
        d(w, out.astype(np.uint64).astype(DTYPE[ty]))
    return run


# prmt's modes: for a selector c (its low two bits, 0..3), the byte of {b, a} (8 bytes, a's
# lowest first) that each of d's bytes 0..3 takes (PTX ISA 9.7.8.7, prmt)
_PRMT_MODES = {
    "f4e": lambda c: [(c + i) & 7 for i in range(4)],       # forward 4 extract
    "b4e": lambda c: [(c - i) & 7 for i in range(4)],       # backward 4 extract
    "rc8": lambda c: [c] * 4,                               # replicate byte c
    "ecl": lambda c: [max(i, c) for i in range(4)],         # edge clamp left
    "ecr": lambda c: [min(i, c) for i in range(4)],         # edge clamp right
    "rc16": lambda c: [2 * (c & 1), 2 * (c & 1) + 1] * 2,   # replicate half c & 1
}


@isa.register("prmt")
def prmt(ins, ctx):
    """prmt.b32{.mode} d, a, b, c: d's bytes picked from the 8 bytes {b, a}. Default mode: byte
    i of d is selected by nibble i of c (bits 0-2 the byte, bit 3 replicate its sign)."""
    mode = ins.parts[-1] if ins.parts[-1] in _PRMT_MODES else None
    a, b = ctx.reader(ins.operands[1], "b32"), ctx.reader(ins.operands[2], "b32")
    c = ctx.reader(ins.operands[3], "b32")
    d = ctx.writer(ins.operands[0], "b32")
    if mode is not None:
        table = np.array([_PRMT_MODES[mode](k) for k in range(4)], np.uint64)     # c & 3 -> 4 bytes

    def run(w):
        src = (b(w).astype(np.uint64) << np.uint64(32)) | a(w).astype(np.uint64)
        cv = c(w).astype(np.uint64)
        out = np.zeros(WARP, np.uint64)
        for i in range(4):
            if mode is None:
                nib = (cv >> np.uint64(4 * i)) & np.uint64(0xF)
                sel, sign = nib & np.uint64(7), (nib & np.uint64(8)) != 0
            else:
                sel, sign = table[(cv & np.uint64(3)).astype(np.int64), i], False
            byte = (src >> (np.uint64(8) * sel)) & np.uint64(0xFF)
            byte = np.where(sign, np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), byte)
            out |= byte.astype(np.uint64) << np.uint64(8 * i)
        d(w, out.astype(np.uint32))
    return run


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}


def compare(op: str, ty: str):
    """The comparison `op` (setp's, set's) on operands of type `ty`."""
    if ty in FLOAT_TYPES:
        return isa_float.compare(op)
    return _CMP[op]


_COMBINE = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


@isa.register("setp")
def setp(ins, ctx):
    parts = ins.parts
    ty, cmp = parts[-1], compare(parts[1], parts[-1])
    if ty == "f32" and "ftz" in parts:
        cmp = isa_float.ftz_inputs(cmp)
    a, b = ctx.reader(ins.operands[1], ty), ctx.reader(ins.operands[2], ty)
    first, second = ctx.pair(ins.operands[0])
    p = ctx.writer(first, "pred")
    q = ctx.writer(second, "pred") if second is not None else None
    if len(ins.operands) == 4:                  # setp.cmp.bop: p = t bop c, q = !t bop c
        combine = _COMBINE[parts[2]]
        c = ctx.reader(ins.operands[3], "pred")
    else:
        combine, c = None, None

    def run(w):
        t = cmp(a(w), b(w))
        if combine is None:
            p(w, t)
            if q is not None:
                q(w, ~t)
            return
        cv = c(w)
        p(w, combine(t, cv))
        if q is not None:
            q(w, combine(~t, cv))
    return run


@isa.register("selp")
def selp(ins, ctx):
    ty = type_of(ins)
    a, b = ctx.reader(ins.operands[1], ty), ctx.reader(ins.operands[2], ty)
    c = ctx.reader(ins.operands[3], "pred")
    d = ctx.writer(ins.operands[0], ty)
    return lambda w: d(w, np.where(c(w), a(w), b(w)))


@isa.register("mov")
def mov(ins, ctx):
    ty = type_of(ins)
    dst, src = ins.operands
    if isinstance(src, Vec) or isinstance(dst, Vec):
        return _mov_parts(ctx, ty, dst, src)
    d = ctx.writer(dst, ty)
    a = ctx.reader(src, ty)
    return lambda w: d(w, a(w))


def _mov_parts(ctx, ty: str, dst, src):
    """mov.bN of a vector of equal parts (PTX's pack `mov.b64 d, {lo, hi}` and unpack
    `mov.b64 {lo, hi}, s`): the first part the lowest bits."""
    whole = DTYPE[f"b{WIDTH[ty]}"]
    parts = (src if isinstance(src, Vec) else dst).items
    width = WIDTH[ty] // len(parts)
    part_ty = f"b{width}"
    if isinstance(src, Vec):
        readers = [ctx.reader(p, part_ty) for p in parts]
        d = ctx.writer(dst, ty)

        def pack(w):
            out = np.zeros(WARP, whole)
            for k, r in enumerate(readers):
                out |= r(w).astype(whole) << whole(k * width)
            return d(w, out)
        return pack
    a = ctx.reader(src, ty)
    writers = [ctx.writer(p, part_ty) for p in parts]
    mask = whole((1 << width) - 1)

    def unpack(w):
        value = a(w).astype(whole)
        for k, d in enumerate(writers):
            d(w, ((value >> whole(k * width)) & mask).astype(DTYPE[part_ty]))
    return unpack
