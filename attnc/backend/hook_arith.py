"""Arithmetic the hooks emit where the MLIR lowering has none or rounds otherwise, and
the f32 constants of a region: `divide` (x / y rounded to nearest, Note [Division] in
hooks.py), `square_root` (sqrt(x) rounded to nearest, Note [Square root] there),
`floordiv` (Python's //, which the LLVM lowering has no pattern for), `_fabs` (|x|
without libdevice), `_fold` (a float op on constants, evaluated in f32) and the readers
of constants `_f32_constant`, `_reciprocal`, `_power_of_two`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from mlir import ir
from mlir.dialects import arith

from attnc.backend.nvgpu_builders import Emit
from attnc.ir import defining_op


def divide(e: Emit, x: ir.Value, y: ir.Value, r: ir.Value) -> ir.Value:
    """x / y rounded to nearest (Note [Division]), from r, 1/y within a few ulps (a
    constant's reciprocal, rcp.approx): q = x * r, one Newton step on the residual
    (q + r * (x - q * y), the FMA's residual exact), then whichever of q and its two
    neighbours leaves the smallest residual |x - q' * y|: the nearest, as no quotient of
    a y that is not a power of two lies halfway. Where x * r is zero or not finite it is
    the quotient (a signed zero, x / 0, infinities, NaN, overflow); subnormal divisors
    flush to zero, as rcp.approx.ftz does."""
    def residual(t):
        return e.fma(arith.negf(t), y, x)

    first = e.fmul(x, r)
    q = e.fma(residual(first), r, first)
    bits = arith.bitcast(e.i32, q)
    best, least = q, _fabs(e, residual(q))
    for step in (1, -1):
        near = arith.bitcast(e.f32, e.add(bits, step))
        off = _fabs(e, residual(near))
        closer = arith.cmpf(arith.CmpFPredicate.OLT, off, least)
        best, least = arith.select(closer, near, best), arith.select(closer, off, least)
    size = _fabs(e, first)
    ordinary = arith.andi(arith.cmpf(arith.CmpFPredicate.OLT, size, e.cf(float("inf"))),
                          arith.cmpf(arith.CmpFPredicate.OGT, size, e.cf(0.0)))
    return arith.select(ordinary, best, first)


# Note [Square root]'s scalings: x below 2^-64 is taken times 2^96 (its root times 2^-48),
# above 2^64 times 2^-64 (its root times 2^32), so the steps see x in [2^-64, 2^64], where
# rsqrt.approx.ftz's input and every product below are normal f32.
_SQRT_SCALES = ((2.0 ** -64, 2.0 ** 96, 2.0 ** -48), (2.0 ** 64, 2.0 ** -64, 2.0 ** 32))


def square_root(e: Emit, x: ir.Value, rsqrt: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """sqrt(x) rounded to nearest (Note [Square root] in hooks.py), from `rsqrt`, which
    gives 1/sqrt of its operand within a few ulps (rsqrt.approx): y = x * r and one
    Newton step on the residual x - y * y (an FMA), then y, or its neighbour above or below
    where the exact residual says the root lies past the midpoint on that side. Zeros,
    +inf and NaN are their own roots; a negative x gives NaN."""
    scaled, back = x, e.cf(1.0)
    for bound, into, out in _SQRT_SCALES:
        pred = arith.CmpFPredicate.OLT if bound < 1 else arith.CmpFPredicate.OGT
        outside = arith.cmpf(pred, x, e.cf(bound))
        scaled = arith.select(outside, e.fmul(x, e.cf(into)), scaled)
        back = arith.select(outside, e.cf(out), back)
    r = rsqrt(scaled)
    first = e.fmul(scaled, r)
    y = e.fma(e.fma(arith.negf(first), first, scaled), e.fmul(r, e.cf(0.5)), first)
    # The residual x - y^2 of a y within 2 ulps of the root is an exact f32 and a multiple
    # of ulp(y)^2, as are y * ulp(y) and y * ulp(y - 1 ulp): the midpoints' tests
    # x > (y + u/2)^2 and x < (y - u'/2)^2 are these comparisons, exactly.
    residual = e.fma(arith.negf(y), y, scaled)
    bits = arith.bitcast(e.i32, y)
    ulp = e.fmul(arith.bitcast(e.f32, e.and_(bits, 0x7F800000)), e.cf(2.0 ** -23))
    ulp_below = arith.select(e.eq(e.and_(bits, 0x7FFFFF), 0), e.fmul(ulp, e.cf(0.5)), ulp)
    up = arith.cmpf(arith.CmpFPredicate.OGT, residual, e.fmul(y, ulp))
    down = arith.cmpf(arith.CmpFPredicate.OLE, residual, arith.negf(e.fmul(y, ulp_below)))
    nearest = arith.select(up, arith.bitcast(e.f32, e.add(bits, 1)),
                           arith.select(down, arith.bitcast(e.f32, e.sub(bits, 1)), y))
    ordinary = arith.andi(arith.cmpf(arith.CmpFPredicate.OGT, x, e.cf(0.0)),
                          arith.cmpf(arith.CmpFPredicate.OLT, x, e.cf(float("inf"))))
    special = arith.select(arith.cmpf(arith.CmpFPredicate.OLT, x, e.cf(0.0)), e.cf(float("nan")), x)
    return arith.select(ordinary, e.fmul(nearest, back), special)


def _fabs(e: Emit, x: ir.Value) -> ir.Value:
    """|x| by clearing the sign bit (the GPU lowering would send llvm.intr.fabs to libdevice)."""
    bits = arith.bitcast(e.i32, x)
    return arith.bitcast(e.f32, arith.andi(bits, arith.constant(e.i32, 0x7FFFFFFF)))


def floordiv(e: Emit, a: ir.Value, b: ir.Value) -> ir.Value:
    """Python's a // b on signed integers (0 when b == 0, as the region interpreter
    defines it): the truncating quotient, minus 1 when the remainder is non-zero and
    its sign differs from b's. By -1 it is -a, wrapping (the residue `%` needs: the
    smallest integer by -1 overflows, which a hardware division leaves undefined)."""
    zero = arith.constant(a.type, 0)
    minus_one = arith.constant(a.type, -1)
    b_zero = arith.cmpi(arith.CmpIPredicate.eq, b, zero)
    b_minus_one = arith.cmpi(arith.CmpIPredicate.eq, b, minus_one)
    divisor = arith.select(arith.ori(b_zero, b_minus_one), arith.constant(a.type, 1), b)
    q = arith.divsi(a, divisor)
    r = arith.subi(a, arith.muli(q, divisor))
    signs_differ = arith.cmpi(arith.CmpIPredicate.slt, arith.xori(r, divisor), zero)
    inexact = arith.cmpi(arith.CmpIPredicate.ne, r, zero)
    adjust = arith.extui(a.type, arith.andi(inexact, signs_differ))
    quotient = arith.select(b_minus_one, arith.subi(zero, a), arith.subi(q, adjust))
    return arith.select(b_zero, zero, quotient)


_F32_FOLDS = {
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply, "arith.divf": np.divide,
    "arith.negf": np.negative, "math.exp": np.exp, "math.exp2": np.exp2, "math.log": np.log,
    "math.log2": np.log2, "math.sqrt": np.sqrt, "math.rsqrt": lambda x: np.float32(1) / np.sqrt(x),
    "math.tanh": np.tanh, "math.absf": np.abs, "math.floor": np.floor, "math.ceil": np.ceil,
}


def _fold(name: str, operands) -> float | None:
    """The f32 value of a float op on constants only (finite results), else None."""
    if name not in _F32_FOLDS:
        return None
    values = [_f32_constant(v) for v in operands]
    if any(v is None for v in values):
        return None
    with np.errstate(all="ignore"):
        result = np.float32(_F32_FOLDS[name](*values))
    return float(result) if np.isfinite(result) else None


def _f32_constant(value: ir.Value) -> np.float32 | None:
    owner = defining_op(value)
    if owner is None or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    return np.float32(attr.value) if isinstance(attr, ir.FloatAttr) else None


def _power_of_two(x: float) -> bool:
    """Whether x is +-2^k: x * y is then exactly y / (1 / x) (both normal f32)."""
    return np.frexp(abs(x))[0] == 0.5


def _reciprocal(value: ir.Value) -> float | None:
    """1/c when `value` is an f32 constant c whose reciprocal is a normal f32, else None."""
    c = _f32_constant(value)
    if c is None or c == 0 or not np.isfinite(c):
        return None
    r = np.float32(1) / c
    return float(r) if np.isfinite(r) and abs(r) >= 2.0 ** -126 else None
