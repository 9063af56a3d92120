"""The abstract values of the mask analysis and their transfer functions.

* `Interval(lo, hi)`: an i32 value lies in [lo, hi]; the bounds are symbolic integers
  (`symbolic.Expr`), `None` meaning unbounded.
* `Truth(may_true, may_false)`: an i1 value is true somewhere / false somewhere in the
  region analysed; both are symbolic booleans. (false, false) is the empty region,
  (true, true) is "unknown": Kleene logic with a bottom.

Every function here is pure and sound: for any concrete operands inside the abstract
ones, the concrete result is inside the abstract result. They are as tight as intervals
allow when each operand ranges independently over its interval (the case for `i` and
`j` over a rectangular tile); correlated operands (`i - i`) are handled soundly, not
tightly. Integer arithmetic is exact (no i32 wrap-around), as the DSL defines it;
division by zero is excluded (it has no meaning in a mask).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from attnc.analysis.symbolic import Builder, Expr, as_const

Bound = Expr | None


@dataclass(frozen=True)
class Interval:
    lo: Bound
    hi: Bound


@dataclass(frozen=True)
class Truth:
    may_true: Expr
    may_false: Expr


TOP = Interval(None, None)


def point(x: Expr) -> Interval:
    return Interval(x, x)


def constant_of(a: Interval) -> int | None:
    """The value of an interval that is one known number, else None."""
    if a.lo is None or a.lo is not a.hi:
        return None
    return as_const(a.lo)


def _both(f: Callable, x: Bound, y: Bound) -> Bound:
    return None if x is None or y is None else f(x, y)


def _finite(S: Builder, x: Bound, y: Bound, pick) -> Bound:
    """min/max of two bounds where None is the infinity that `pick` discards."""
    if x is None:
        return y
    if y is None:
        return x
    return pick(x, y)


# --- lattice ------------------------------------------------------------------------
def hull(S: Builder, a: Interval, b: Interval) -> Interval:
    return Interval(_both(S.min, a.lo, b.lo), _both(S.max, a.hi, b.hi))


def intersect(S: Builder, a: Interval, b: Interval) -> Interval:
    return Interval(_finite(S, a.lo, b.lo, S.max), _finite(S, a.hi, b.hi, S.min))


def nonempty(S: Builder, a: Interval) -> Expr:
    return S.true if a.lo is None or a.hi is None else S.le(a.lo, a.hi)


def select(S: Builder, cond: Truth, a: Interval, b: Interval) -> Interval:
    """The value of `cond ? a : b`, where `a` was computed where cond holds and `b`
    where it does not: only the branches that can be taken contribute."""
    both = S.and_(cond.may_true, cond.may_false)

    def bound(x: Bound, y: Bound, pick) -> Bound:
        if x is None or y is None:
            return None
        return S.select(both, pick(x, y), S.select(cond.may_true, x, y))
    return Interval(bound(a.lo, b.lo, S.min), bound(a.hi, b.hi, S.max))


# --- arithmetic ---------------------------------------------------------------------
def add(S: Builder, a: Interval, b: Interval) -> Interval:
    return Interval(_both(S.add, a.lo, b.lo), _both(S.add, a.hi, b.hi))


def sub(S: Builder, a: Interval, b: Interval) -> Interval:
    return Interval(_both(S.sub, a.lo, b.hi), _both(S.sub, a.hi, b.lo))


def neg(S: Builder, a: Interval) -> Interval:
    return Interval(None if a.hi is None else S.scale(a.hi, -1),
                    None if a.lo is None else S.scale(a.lo, -1))


def scale(S: Builder, a: Interval, c: int) -> Interval:
    if c == 0:
        return point(S.const(0))
    lo = None if a.lo is None else S.scale(a.lo, c)
    hi = None if a.hi is None else S.scale(a.hi, c)
    return Interval(lo, hi) if c > 0 else Interval(hi, lo)


def mul(S: Builder, a: Interval, b: Interval) -> Interval:
    for x, y in ((a, b), (b, a)):
        c = constant_of(y)
        if c is not None:
            return scale(S, x, c)
    if None in (a.lo, a.hi, b.lo, b.hi):
        return TOP
    zero = S.const(0)
    if as_const(S.le(zero, a.lo)) and as_const(S.le(zero, b.lo)):
        return Interval(S.mul(a.lo, b.lo), S.mul(a.hi, b.hi))
    corners = [S.mul(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return Interval(_fold(S.min, corners), _fold(S.max, corners))


def _fold(f, xs):
    out = xs[0]
    for x in xs[1:]:
        out = f(out, x)
    return out


def floordiv(S: Builder, a: Interval, b: Interval) -> Interval:
    c = constant_of(b)
    if c == 0:
        return TOP
    if c is not None:
        d = S.const(c)
        lo = None if a.lo is None else S.floordiv(a.lo, d)
        hi = None if a.hi is None else S.floordiv(a.hi, d)
        return Interval(lo, hi) if c > 0 else Interval(hi, lo)
    if None in (a.lo, a.hi, b.lo, b.hi):
        return TOP
    # Of one sign, x // y is monotone in x and in y: the corners bound it. Otherwise
    # |x // y| <= |x| for every y != 0.
    one_sign = S.or_(S.le(S.const(1), b.lo), S.le(b.hi, S.const(-1)))
    corners = [S.floordiv(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    big = S.max(S.scale(a.lo, -1), a.hi)
    return Interval(S.select(one_sign, _fold(S.min, corners), S.scale(big, -1)),
                    S.select(one_sign, _fold(S.max, corners), big))


def mod(S: Builder, a: Interval, b: Interval) -> Interval:
    """`a - (a // b) * b`, the floor modulo (sign of the divisor)."""
    c = constant_of(b)
    if c == 0:
        return TOP
    if c is None:
        if b.lo is None or b.hi is None:
            return TOP
        one = S.const(1)
        return Interval(S.min(S.add(b.lo, one), S.const(0)), S.max(S.sub(b.hi, one), S.const(0)))
    period = Interval(S.const(0), S.const(c - 1)) if c > 0 else Interval(S.const(c + 1), S.const(0))
    if a.lo is None or a.hi is None:
        return period
    d = S.const(c)
    q = S.floordiv(a.lo, d)
    same = S.eq(q, S.floordiv(a.hi, d))      # one period: a - q*c is exact
    base = S.scale(q, c)
    return Interval(S.select(same, S.sub(a.lo, base), period.lo),
                    S.select(same, S.sub(a.hi, base), period.hi))


def min_(S: Builder, a: Interval, b: Interval) -> Interval:
    return Interval(_both(S.min, a.lo, b.lo), _finite(S, a.hi, b.hi, S.min))


def max_(S: Builder, a: Interval, b: Interval) -> Interval:
    return Interval(_finite(S, a.lo, b.lo, S.max), _both(S.max, a.hi, b.hi))


def abs_(S: Builder, a: Interval) -> Interval:
    zero = S.const(0)
    if a.lo is not None and as_const(S.le(zero, a.lo)):
        return a
    if a.hi is not None and as_const(S.le(a.hi, zero)):
        return neg(S, a)
    n = neg(S, a)
    lo = zero
    for x in (a.lo, n.lo):
        lo = lo if x is None else S.max(lo, x)
    return Interval(lo, _both(S.max, a.hi, n.hi))


# --- comparisons ----------------------------------------------------------------------
NEGATED = {"eq": "ne", "ne": "eq", "slt": "sge", "sge": "slt", "sle": "sgt", "sgt": "sle"}
SWAPPED = {"eq": "eq", "ne": "ne", "slt": "sgt", "sgt": "slt", "sle": "sge", "sge": "sle"}


def compare(S: Builder, pred: str, a: Interval, b: Interval) -> Truth:
    """The truth of `a pred b` for a signed predicate."""
    if pred in ("sgt", "sge"):
        return compare(S, SWAPPED[pred], b, a)
    if pred == "ne":
        t = compare(S, "eq", a, b)
        return Truth(t.may_false, t.may_true)
    if pred == "eq":
        overlap = S.and_(_may(S, S.le, a.lo, b.hi), _may(S, S.le, b.lo, a.hi))
        if None in (a.lo, a.hi, b.lo, b.hi):
            return Truth(overlap, S.true)
        same = S.and_(S.eq(a.lo, a.hi), S.eq(b.lo, b.hi), S.eq(a.lo, b.lo))
        return Truth(overlap, S.not_(same))
    strict = S.lt if pred == "slt" else S.le
    return Truth(_may(S, strict, a.lo, b.hi), _may(S, lambda x, y: S.not_(strict(y, x)), b.lo, a.hi))


def _may(S: Builder, rel, x: Bound, y: Bound) -> Expr:
    """rel(x, y) where an unbounded side makes it possible."""
    return S.true if x is None or y is None else rel(x, y)


# --- three-valued logic ---------------------------------------------------------------
def not_(S: Builder, a: Truth) -> Truth:
    return Truth(a.may_false, a.may_true)


def xor(S: Builder, a: Truth, b: Truth) -> Truth:
    return Truth(S.or_(S.and_(a.may_true, b.may_false), S.and_(a.may_false, b.may_true)),
                 S.or_(S.and_(a.may_true, b.may_true), S.and_(a.may_false, b.may_false)))


def within(S: Builder, feasible: Expr, a: Truth) -> Truth:
    """`a` restricted to a region that exists only where `feasible` holds."""
    return Truth(S.and_(feasible, a.may_true), S.and_(feasible, a.may_false))

