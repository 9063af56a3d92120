"""Floating-point instructions: add, sub, mul, div, fma, min, max, abs, neg on f32/f64,
and the approximations ex2, lg2, tanh, rcp, sqrt, rsqrt, sin, cos.

Rounding: `.rn` is numpy's float32 arithmetic (IEEE round-to-nearest-even). The
directed modes (`.rz`, `.rm`, `.rp`) compute in float64 and round the result toward
the mode's direction. fma computes in float64 (an f32 product is exact there) and
rounds once more: it can differ from a fused f32 fma in the last bit in rare cases of
double rounding. `.ftz` flushes subnormal inputs and results to zero of the same sign,
as the hardware does; `.sat` clamps to [0, 1] (NaN to 0). The `.approx` functions use
numpy's exact f32 function: the hardware's are within 2 ulp of it (ex2, lg2, rcp) and
tanh.approx within its documented 2^-10.987 relative error, so results may differ from a
GPU's by that much.
"""
from __future__ import annotations

import numpy as np

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


def arith(ins, ctx, ty):
    """add/sub/mul/div/min/max of a floating type."""
    from attnc_sim.isa_int import binary
    parts = ins.parts
    if ty not in ("f32", "f64"):
        raise ctx.error(f"{ins.opcode}: only f32 and f64 arithmetic is supported")
    op = _OPS[parts[0]]
    if parts[0] == "min" or parts[0] == "max":
        if "NaN" in parts or "xorsign" in parts:
            raise ctx.error(f"{ins.opcode} is not supported")
        fn = op
    else:
        mode = next((m for m in _MODES if m in parts), "rn")
        if parts[0] == "div" and "approx" in parts or "full" in parts:
            fn = lambda a, b: (a.astype(np.float64) / b).astype(np.float32)
        elif mode == "rn" or ty == "f64":
            if ty == "f64" and mode != "rn":
                raise ctx.error(f"{ins.opcode}: directed rounding of f64 is not supported")
            fn = op
        else:
            fn = lambda a, b: round_f32(op(a.astype(np.float64), b.astype(np.float64)), mode)
    return binary(ins, ctx, ty, _with_modifiers(fn, parts, ty, 2))


def fma(ins, ctx):
    parts = ins.parts
    ty = parts[-1]
    if ty not in ("f32", "f64"):
        raise ctx.error(f"{ins.opcode}: only f32 and f64 fma is supported")
    mode = next((m for m in _MODES if m in parts), "rn")
    a, b, c = (ctx.reader(op, ty) for op in ins.operands[1:4])
    d = ctx.writer(ins.operands[0], ty)
    if ty == "f32":
        def f(x, y, z):
            return round_f32(x.astype(np.float64) * y + z, mode)
    else:
        def f(x, y, z):
            return x * y + z
    f = _with_modifiers(f, parts, ty, 3)
    return lambda w: d(w, f(a(w), b(w), c(w)))


isa.register("fma")(fma)


def unary_op(ins, ctx, ty):
    from attnc_sim.isa_int import unary
    fn = np.abs if ins.parts[0] == "abs" else np.negative
    return unary(ins, ctx, ty, _with_modifiers(fn, ins.parts, ty, 1))


_APPROX = {"ex2": np.exp2, "lg2": np.log2, "tanh": np.tanh, "rcp": lambda x: np.float32(1) / x,
           "sqrt": np.sqrt, "rsqrt": lambda x: np.float32(1) / np.sqrt(x), "sin": np.sin, "cos": np.cos}


@isa.register("ex2", "lg2", "tanh", "rcp", "sqrt", "rsqrt", "sin", "cos")
def approx(ins, ctx):
    from attnc_sim.isa_int import unary
    ty = ins.parts[-1]
    if ty not in ("f32", "f64"):
        raise ctx.error(f"{ins.opcode}: only f32 and f64 are supported")
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
