"""Floating-point instructions: add, sub, mul, div, fma, min, max, abs, neg on f32/f64
(add, sub, mul and fma on sm_100's packed f32x2 too, each half as f32), and the
approximations ex2, lg2, tanh, rcp, sqrt, rsqrt, sin, cos.

Rounding: `.rn` is numpy's float32 arithmetic (IEEE round-to-nearest-even). The
directed modes (`.rz`, `.rm`, `.rp`) of add and sub are exactly rounded fmas (x * 1 + y);
of mul and div they compute in float64 and round the result toward the mode's direction. An f32 fma is exactly rounded (`fma_f32`, Note [Exact fma]); an f64
fma is numpy's unfused x * y + z. `.ftz` flushes subnormal inputs and results to zero of the same sign,
as the hardware does; `.sat` clamps to [0, 1] (NaN to 0). ex2.approx.f32 (with or without
.ftz), tanh.approx.f32 and rcp, rsqrt, lg2 `.approx.ftz.f32` give an sm_90 GPU's results bit
for bit (attnc_sim.approx). The other `.approx` functions (sin, cos, sqrt, and rcp, rsqrt, lg2
without .ftz) use numpy's exact function, within 2 ulp of the hardware's.
"""
from __future__ import annotations

import numpy as np

from attnc_sim import approx as approx_sfu
from attnc_sim import isa

_TINY = {np.float32: np.float32(np.finfo(np.float32).tiny), np.float64: np.float64(np.finfo(np.float64).tiny)}


def flush(x: np.ndarray) -> np.ndarray:
    """Subnormals to zero of the same sign (.ftz)."""
    tiny = _TINY[x.dtype.type]
    return np.where(np.abs(x) < tiny, np.copysign(x.dtype.type(0), x), x).astype(x.dtype)


def saturate(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), x.dtype.type(0), np.clip(x, 0, 1)).astype(x.dtype)


def round_f32(exact: np.ndarray, mode: str) -> np.ndarray:
    """float64 values rounded to float32 in PTX rounding mode `mode` (rn, rz, rm, rp)."""
    r = exact.astype(np.float32)
    if mode == "rn":
        return r
    back = r.astype(np.float64)
    inf = np.float32(np.inf)
    if mode == "rz":
        over = np.abs(back) > np.abs(exact)
        return np.where(over, np.nextafter(r, np.float32(0)), r).astype(np.float32)
    if mode == "rm":
        return np.where(back > exact, np.nextafter(r, -inf), r).astype(np.float32)
    if mode == "rp":
        return np.where(back < exact, np.nextafter(r, inf), r).astype(np.float32)
    raise ValueError(mode)


# Note [Exact fma]: an f32 product is exact in float64 (48 significant bits), so
# fma(x, y, z) = RN32(p + z) with p = x * y exact. Adding in float64 gives s = RN64(p + z)
# and TwoSum's e with p + z = s + e exactly. RN32(s) is the correct result unless s lies
# exactly halfway between two f32 values and e != 0 (any other f32 rounding boundary
# between s and p + z would be a float64 nearer to p + z than s): then the neighbour on
# e's side is. The directed modes need the same correction where s itself is an f32
# value and e != 0 (the exact result lies past it on e's side).

def fma_f32(x: np.ndarray, y: np.ndarray, z: np.ndarray, mode: str = "rn") -> np.ndarray:
    """The exactly rounded f32 fma of f32 arrays, in PTX rounding mode `mode`."""
    p = x.astype(np.float64) * y.astype(np.float64)
    z = z.astype(np.float64)
    s = p + z
    bb = s - p
    e = (p - (s - bb)) + (z - bb)
    e = np.where(np.isfinite(s), e, 0.0)
    r = round_f32(s, mode)
    back = r.astype(np.float64)
    inexact = e != 0
    if not inexact.any():
        return r
    if mode == "rn":
        toward = np.nextafter(r, np.where(back < s, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
        midpoint = inexact & (back != s) & ((back + toward.astype(np.float64)) * 0.5 == s)
        # the neighbour on e's side of s: the larger of the two for e > 0
        hi, lo = np.maximum(r, toward), np.minimum(r, toward)
        return np.where(midpoint, np.where(e > 0, hi, lo), r).astype(np.float32)
    on_value = inexact & (back == s)
    if mode == "rm":
        fix = on_value & (e < 0)
        return np.where(fix, np.nextafter(r, np.float32(-np.inf)), r).astype(np.float32)
    if mode == "rp":
        fix = on_value & (e > 0)
        return np.where(fix, np.nextafter(r, np.float32(np.inf)), r).astype(np.float32)
    fix = on_value & ((e > 0) != (s > 0))       # rz: the exact value is nearer zero than s
    return np.where(fix, np.nextafter(r, np.float32(0)), r).astype(np.float32)


def _canonical_nan(fn):
    """min.NaN / max.NaN: a NaN input gives the canonical NaN."""
    def run(a, b):
        r = fn(a, b)
        nan = np.isnan(r)
        return np.where(nan, np.array(0x7FFFFFFF, np.uint32).view(np.float32), r).astype(r.dtype) if nan.any() else r
    return run


_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
        "min": np.fmin, "max": np.fmax}
_MODES = ("rn", "rz", "rm", "rp")


def _with_modifiers(fn, parts, ty, n_in):
    ftz = "ftz" in parts and ty == "f32"
    sat = "sat" in parts
    if not ftz and not sat:
        return fn
    def wrapped(*xs):
        if ftz:
            xs = [flush(x) for x in xs]
        r = fn(*xs)
        if ftz:
            r = flush(r)
        if sat:
            r = saturate(r)
        return r
    return wrapped


def _pairs(fn):
    """`fn` of f32 arrays on both f32 halves of b64 operands (sm_100's packed f32x2
    arithmetic, elementwise on the pairs)."""
    def on_pairs(*xs):
        return fn(*(x.view(np.float32) for x in xs)).astype(np.float32).view(np.uint64)
    return on_pairs


def arith(ins, ctx, ty):
    """add/sub/mul/div/min/max of a floating type; of f32x2 (add, sub, mul), each half as f32."""
    from attnc_sim.isa_int import binary
    parts = ins.parts
    if ty == "f32x2" and parts[0] in ("add", "sub", "mul"):
        return binary(ins, ctx, "b64", _pairs(_arith_fn(ins, ctx, "f32")))
    if ty not in ("f32", "f64"):
        raise ctx.error(f"{ins.opcode}: only f32 and f64 arithmetic is supported")
    return binary(ins, ctx, ty, _arith_fn(ins, ctx, ty))


def _arith_fn(ins, ctx, ty):
    """The function of the arrays of an f32 or f64 add/sub/mul/div/min/max."""
    parts = ins.parts
    op = _OPS[parts[0]]
    if parts[0] == "min" or parts[0] == "max":
        if "xorsign" in parts:
            raise ctx.error(f"{ins.opcode} is not supported")
        # without .NaN, a NaN input gives the other input (fmin); with it, NaN (PTX ISA 9.7.3.11)
        fn = _canonical_nan(np.minimum if parts[0] == "min" else np.maximum) if "NaN" in parts else op
    else:
        mode = next((m for m in _MODES if m in parts), "rn")
        if parts[0] == "div" and "approx" in parts or "full" in parts:
            fn = lambda a, b: (a.astype(np.float64) / b).astype(np.float32)
        elif mode == "rn" or ty == "f64":
            if ty == "f64" and mode != "rn":
                raise ctx.error(f"{ins.opcode}: directed rounding of f64 is not supported")
            fn = op
        elif parts[0] in ("add", "sub"):
            # Note [Exact fma]'s correction: a float64 sum is not exact where the addends'
            # exponents lie more than 29 apart, and a directed rounding needs the exact sign
            # of what the sum dropped (x + 1.5 * 2^23 rounded down is floor(x) for x = -2^-31).
            sign = np.float32(1 if parts[0] == "add" else -1)
            fn = lambda a, b: fma_f32(a, np.float32(1), sign * b, mode)
        else:       # mul: a product of two f32 values is exact in float64
            fn = lambda a, b: round_f32(op(a.astype(np.float64), b.astype(np.float64)), mode)
    return _with_modifiers(fn, parts, ty, 2)


def fma(ins, ctx):
    """fma of f32 or f64; of f32x2, each half as f32."""
    parts = ins.parts
    ty = parts[-1]
    if ty not in ("f32", "f64", "f32x2"):
        raise ctx.error(f"{ins.opcode}: only f32, f32x2 and f64 fma is supported")
    mode = next((m for m in _MODES if m in parts), "rn")
    packed = ty == "f32x2"
    ty = "f32" if packed else ty
    a, b, c = (ctx.reader(op, "b64" if packed else ty) for op in ins.operands[1:4])
    d = ctx.writer(ins.operands[0], "b64" if packed else ty)
    if ty == "f32":
        def f(x, y, z):
            return fma_f32(x, y, z, mode)
    else:
        def f(x, y, z):
            return x * y + z
    f = _with_modifiers(f, parts, ty, 3)
    if packed:
        f = _pairs(f)
    return lambda w: d(w, f(a(w), b(w), c(w)))


isa.register("fma")(fma)


def unary_op(ins, ctx, ty):
    from attnc_sim.isa_int import unary
    fn = np.abs if ins.parts[0] == "abs" else np.negative
    return unary(ins, ctx, ty, _with_modifiers(fn, ins.parts, ty, 1))


_APPROX = {"ex2": np.exp2, "lg2": np.log2, "tanh": np.tanh, "rcp": lambda x: np.float32(1) / x,
           "sqrt": np.sqrt, "rsqrt": lambda x: np.float32(1) / np.sqrt(x), "sin": np.sin, "cos": np.cos}


# the sm_90 hardware's own results, bit for bit (attnc_sim.approx): (name, ftz) -> function
_HARDWARE = {("ex2", True): approx_sfu.ex2_ftz, ("ex2", False): approx_sfu.ex2,
             ("rcp", True): approx_sfu.rcp_ftz, ("rsqrt", True): approx_sfu.rsqrt_ftz,
             ("lg2", True): approx_sfu.lg2_ftz, ("tanh", False): approx_sfu.tanh}


@isa.register("ex2", "lg2", "tanh", "rcp", "sqrt", "rsqrt", "sin", "cos")
def approx(ins, ctx):
    from attnc_sim.isa_int import unary
    ty = ins.parts[-1]
    if ty not in ("f32", "f64"):
        raise ctx.error(f"{ins.opcode}: only f32 and f64 are supported")
    hardware = _HARDWARE.get((ins.parts[0], "ftz" in ins.parts))
    if ty == "f32" and "approx" in ins.parts and hardware is not None:
        return unary(ins, ctx, ty, hardware)
    base = _APPROX[ins.parts[0]]
    mode = next((m for m in _MODES if m in ins.parts), None)
    if mode not in (None, "rn") and ty == "f32":
        # rcp.rz etc.: the exact f64 result rounded in the mode
        fn = lambda x: round_f32(base(x.astype(np.float64)), mode)
    else:
        fn = base
    return unary(ins, ctx, ty, _with_modifiers(fn, ins.parts, ty, 1))


def _unordered(cmp):
    return lambda a, b: cmp(a, b) | np.isnan(a) | np.isnan(b)


_ORDERED = {"eq": np.equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "ne": lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b),
            "num": lambda a, b: ~np.isnan(a) & ~np.isnan(b),
            "nan": lambda a, b: np.isnan(a) | np.isnan(b)}


def compare(op: str):
    """setp's float comparison `op`: ordered ones are false on NaN, `...u` ones true."""
    if op in _ORDERED:
        return _ORDERED[op]
    if op.endswith("u") and op[:-1] in _ORDERED:
        return _unordered(_ORDERED[op[:-1]] if op != "neu" else np.not_equal)
    raise ValueError(f"unknown comparison {op}")


def ftz_inputs(cmp):
    return lambda a, b: cmp(flush(a), flush(b))
