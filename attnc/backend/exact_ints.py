"""Exact integer arithmetic for the hook regions (mask_mod, score_mod, sink) the kernels
inline: which i32 values of a region must be computed in 64 bits, and the ops that
compute them.

Note [Exact integers]
~~~~~~~~~~~~~~~~~~~~~
dsl.md defines integer arithmetic on indices as exact, and the reference computes it in
64 bits. The frontend types every integer i32, so `(i - j) * (i - j)` computed as the
region says wraps once |i - j| > 46340 and a long sequence keeps the wrong keys. The
kernels stay in i32 wherever that is exact, and only there:

* Every i32 value of the region gets its exact range (`IntPlan.ranges`): an index
  argument lies in [0, 2^30) and a dim that sizes q, k or v in [0, 2^30] (the runtime
  refuses larger sizes; rows and keys past M and N are computed but never kept), any other dim, an i32
  param element and an `int(x)` anywhere in i32; `+ - *`, `min`, `max`, `abs`, `where` and
  `//` by interval arithmetic on unbounded integers, `int(x)` from an interval of x
  when one is known (`float(n)`, + - * /, log, exp, sqrt, tanh, min, max, ...); `a - (a // b) * b` (how the
  frontend writes `a % b`) inside (-|b|, |b|), and a itself where b may be 0.
* `+ - *` are exact modulo 2^32 in i32, whatever their operands' ranges. So a value whose
  range leaves i32 is only wrong where its value, not its residue, is read: by a
  comparison, `min`/`max`/`abs`/`//`, a `float(x)`, or a param index. Such a value is
  *wide* (`IntPlan.wide`), and so is every operand of a wide `+ - *` whose own range
  leaves i32 (its residue would not do).
* A wide value is computed in i64 (its i32 operands sign-extended); an op that reads a
  wide value runs in i64 and, when its own result is not wide, is truncated back to i32:
  exact where the result's range fits, and the right residue for `+ - *` otherwise.

What the kernels compute is then the reference's value wherever that fits in 64 bits
(products of three indices may not). The masks and score_mods of the examples and the
benchmark have no wide value, and their kernels are unchanged. A region with a wide value
is evaluated on intervals in the block map with TOP read from a wide value as unbounded
(Note [Interval transfer functions] in blockmap_intervals.py).
"""
from __future__ import annotations

import math as pymath
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, math

from attnc.backend.nvgpu_builders import Emit
from attnc.ir import DIM, cmpi_predicate, defining_op, int_constant

I32 = (-(1 << 31), (1 << 31) - 1)
# The dims that size q, k, v (the runtime refuses sizes above 2^30: attnc_runtime.checks.
# MAX_SIZE_DIM) and i, j, b, h below them (an index past its size is never kept).
SIZE = (0, 1 << 30)
INDEX = (0, (1 << 30) - 1)
RING = frozenset(("arith.addi", "arith.subi", "arith.muli"))
# The ops IntPlan.emit builds at either width.
WIDTH_OPS = RING | {"arith.minsi", "arith.maxsi", "arith.floordivsi", "arith.select", "arith.cmpi", "math.absi"}

Range = tuple[int, int]


def _is_i32(value: ir.Value) -> bool:
    return isinstance(value.type, ir.IntegerType) and ir.IntegerType(value.type).width == 32


def fits_i32(r: Range, margin: int = 0) -> bool:
    """Whether `r` lies in i32, `margin` away from both ends."""
    return I32[0] + margin <= r[0] and r[1] <= I32[1] - margin


def _hull(*rs: Range) -> Range:
    return (min(r[0] for r in rs), max(r[1] for r in rs))


def _magnitude(r: Range) -> int:
    return max(abs(r[0]), abs(r[1]))


@dataclass(frozen=True)
class IntPlan:
    """The exact range of each i32 value of a region and the values computed in i64
    (Note [Exact integers])."""
    ranges: dict
    wide: frozenset

    @classmethod
    def of(cls, block: ir.Block, size_dims: frozenset = frozenset()) -> "IntPlan":
        """The plan of `block`, a hook region whose i32 arguments are indices; `size_dims`:
        the dims that size q, k or v (hooks.size_dims)."""
        ranges: dict = {a: INDEX for a in block.arguments if _is_i32(a)}
        ops = list(block.operations)
        for op in ops:
            if len(op.results) == 1 and _is_i32(op.results[0]):
                ranges[op.results[0]] = _transfer(op, ranges, size_dims)
        wide: set = set()
        for op in reversed(ops):            # every consumer of a value before the value
            ring_wide = op.name in RING and op.results[0] in wide
            for v in op.operands:
                if v in ranges and not fits_i32(ranges[v]) and (op.name not in RING or ring_wide):
                    wide.add(v)
        return cls(ranges, frozenset(wide))

    def emit(self, e: Emit, op: ir.Operation, operands: list) -> ir.Value:
        """`op` (one of WIDTH_OPS) on the emitted `operands`, at the width the plan says."""
        ints = [k for k, v in enumerate(op.operands) if _is_i32(v)]
        result = op.results[0]
        wide = result in self.wide or (op.name not in RING and any(op.operands[k] in self.wide for k in ints))
        width = e.i64 if wide else e.i32
        args = list(operands)
        for k in ints:
            args[k] = _to(width, args[k])
        value = _build(e, op, args)
        if wide and _is_i32(result) and result not in self.wide:
            value = arith.trunci(e.i32, value)
        return value


def _to(width: ir.Type, value: ir.Value) -> ir.Value:
    """`value` (i32 or i64) as `width`: sign-extended, or truncated (its residue)."""
    have = ir.IntegerType(value.type).width
    want = ir.IntegerType(width).width
    if have == want:
        return value
    return arith.extsi(width, value) if want > have else arith.trunci(width, value)


_BUILDERS = {"arith.addi": arith.addi, "arith.subi": arith.subi, "arith.muli": arith.muli,
             "arith.minsi": arith.minsi, "arith.maxsi": arith.maxsi, "arith.select": arith.select,
             "math.absi": math.absi}


def _build(e: Emit, op: ir.Operation, args: list) -> ir.Value:
    from attnc.backend.hook_arith import floordiv

    if op.name in _BUILDERS:
        return _BUILDERS[op.name](*args)
    if op.name == "arith.floordivsi":
        return floordiv(e, *args)
    return arith.cmpi(getattr(arith.CmpIPredicate, cmpi_predicate(op)), *args)


def _transfer(op: ir.Operation, ranges: dict, size_dims: frozenset) -> Range:
    """The exact range of the i32 result of `op`, from its operands' (`ranges`)."""
    name = op.name
    c = int_constant(op.results[0])
    if c is not None:
        return (c, c)
    if name == DIM:
        return SIZE if ir.StringAttr(op.attributes["name"]).value in size_dims else I32
    if name == "arith.fptosi":
        return _truncated(_float_range(op.operands[0], ranges, {}))
    if name not in WIDTH_OPS or name == "arith.cmpi":
        return I32                  # params, anything else: an i32 as computed
    r = [ranges.get(v, I32) for v in op.operands]
    if name == "arith.select":
        return _hull(r[1], r[2])
    if name == "arith.addi":
        return (r[0][0] + r[1][0], r[0][1] + r[1][1])
    if name == "arith.subi":
        modulo = _modulo(op, ranges)
        return modulo if modulo is not None else (r[0][0] - r[1][1], r[0][1] - r[1][0])
    if name == "arith.muli":
        ends = [a * b for a in r[0] for b in r[1]]
        return (min(ends), max(ends))
    if name in ("arith.minsi", "arith.maxsi"):
        pick = min if name == "arith.minsi" else max
        return (pick(r[0][0], r[1][0]), pick(r[0][1], r[1][1]))
    if name == "math.absi":
        lo, hi = r[0]
        return (lo, hi) if lo >= 0 else (-hi, -lo) if hi <= 0 else (0, max(-lo, hi))
    # floordivsi: Python's floor division, 0 for a divisor 0 (hook_arith.floordiv)
    divisor = int_constant(op.operands[1])
    if divisor == 0:
        return (0, 0)
    if divisor is not None:
        ends = sorted((r[0][0] // divisor, r[0][1] // divisor))
        return (ends[0], ends[1])
    m = _magnitude(r[0])
    return (-m, m)


def _truncated(r: tuple[float, float] | None) -> Range:
    """The range of int(x) (an i32: the conversion saturates) for x in `r`, with a margin
    for f32 rounding; any i32 when `r` is None."""
    if r is None:
        return I32
    return (max(I32[0], pymath.floor(r[0]) - 1), min(I32[1], pymath.ceil(r[1]) + 1))


_MONOTONE = {"math.log": pymath.log, "math.log2": pymath.log2, "math.sqrt": pymath.sqrt,
             "math.exp": pymath.exp, "math.exp2": lambda x: 2.0 ** x,
             "math.floor": pymath.floor, "math.ceil": pymath.ceil}


def _float_range(value: ir.Value, ranges: dict, memo: dict, depth: int = 0) -> tuple[float, float] | None:
    """A finite interval holding the f32 `value` (up to rounding), or None: constants,
    float(x) of a ranged integer, + - * /, negation, min, max, abs, where, tanh and the
    monotone functions on their domains, each widened for f32's rounding (Note [Float
    rounding in ranges]); int()'s truncation is left to the caller's margin."""
    if value in memo:
        return memo[value]
    op = defining_op(value)
    r = None
    if op is not None and depth <= 64:
        name = op.name
        sub = lambda v: _float_range(v, ranges, memo, depth + 1)  # noqa: E731
        if name == "arith.constant":
            try:
                c = ir.FloatAttr(op.attributes["value"]).value
                r = (c, c) if pymath.isfinite(c) else None
            except ValueError:
                r = None
        elif name == "arith.sitofp":
            r = ranges.get(op.operands[0], I32)
        elif name in ("arith.addf", "arith.subf", "arith.mulf", "arith.divf",
                      "arith.minimumf", "arith.maximumf", "arith.minnumf", "arith.maxnumf"):
            x, y = sub(op.operands[0]), sub(op.operands[1])
            if x is not None and y is not None:
                r = _float_binary(name, x, y)
        elif name in ("arith.negf", "math.absf", "math.tanh") or name in _MONOTONE:
            x = sub(op.operands[0])
            if name == "math.tanh":
                r = (-1.0, 1.0)
            elif x is None:
                r = None
            elif name == "arith.negf":
                r = (-x[1], -x[0])
            elif name == "math.absf":
                r = (x[0], x[1]) if x[0] >= 0 else (-x[1], -x[0]) if x[1] <= 0 else (0.0, max(-x[0], x[1]))
            elif name in ("math.log", "math.log2") and x[0] <= 0:
                r = None
            elif name == "math.sqrt" and x[0] < 0:
                r = None
            else:
                try:
                    r = (_MONOTONE[name](x[0]), _MONOTONE[name](x[1]))
                except OverflowError:
                    r = None
        elif name == "arith.select":
            x, y = sub(op.operands[1]), sub(op.operands[2])
            r = None if x is None or y is None else _hull(x, y)
    if r is not None and name != "arith.constant":
        r = _rounded(r)
    if r is not None and not (pymath.isfinite(r[0]) and pymath.isfinite(r[1])):
        r = None
    memo[value] = r
    return r


# Note [Float rounding in ranges]: the kernels compute each float op in f32, and some of
# them approximately (ex2, lg2, tanh, rsqrt, Note [No libdevice] in ptx.py); float(n)
# of |n| > 2^24 rounds too. A review found `int(float(min(i, 999)) * 2149015.0)` one
# f32 rounding (63) above the exact product's range, so a sum of it stayed in i32 and
# wrapped. Every op's interval is therefore widened by a relative 2^-20 (f32 rounds by
# 2^-24; the approximate instructions stay within about 2^-22) and an absolute 2^-20
# (lg2.approx's error near 1), which covers an op's own error and what it carries on.
_RELATIVE = _ABSOLUTE = 2.0 ** -20


def _rounded(r: tuple[float, float]) -> tuple[float, float]:
    lo, hi = r
    return (lo - abs(lo) * _RELATIVE - _ABSOLUTE, hi + abs(hi) * _RELATIVE + _ABSOLUTE)


def _float_binary(name: str, x: tuple[float, float], y: tuple[float, float]) -> tuple[float, float] | None:
    if name == "arith.addf":
        return (x[0] + y[0], x[1] + y[1])
    if name == "arith.subf":
        return (x[0] - y[1], x[1] - y[0])
    if name == "arith.mulf":
        ends = [a * b for a in x for b in y]
        return (min(ends), max(ends))
    if name == "arith.divf":
        if y[0] <= 0 <= y[1]:
            return None
        ends = [a / b for a in x for b in y]
        return (min(ends), max(ends))
    pick = min if name in ("arith.minimumf", "arith.minnumf") else max
    return (pick(x[0], y[0]), pick(x[1], y[1]))


def _modulo(op: ir.Operation, ranges: dict) -> Range | None:
    """For `a - (a // b) * b` (the frontend's a % b), its range: inside (-|b|, |b|) with the
    sign of b (0 <= . < c for a constant c > 0), and a's own where b may be 0 (a // 0 is 0);
    else None."""
    a, product = op.operands
    prod = defining_op(product)
    if prod is None or prod.name != "arith.muli":
        return None
    quotient, b = prod.operands
    div = defining_op(quotient)
    if div is None or div.name != "arith.floordivsi" or div.operands[0] != a or div.operands[1] != b:
        return None
    c = int_constant(b)
    if c is not None:
        return (0, c - 1) if c > 0 else (c + 1, 0) if c < 0 else ranges.get(a, I32)
    rb, ra = ranges.get(b, I32), ranges.get(a, I32)
    m = _magnitude(rb)
    r = (-(m - 1), m - 1) if m > 0 else (0, 0)
    return _hull(r, ra) if rb[0] <= 0 <= rb[1] else r
