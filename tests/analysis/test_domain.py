"""Transfer functions of the interval domain: sound on every concrete pair, tight where
the operands range independently (the case of `i` and `j` over a tile).

Bounds are symbols evaluated afterwards, so the symbolic code paths (selects on signs,
min/max of corners) are what is checked, not constant folding. Division and modulo by
zero follow the reference (`x // 0 == x % 0 == 0`).
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from attnc.analysis import domain as D
from attnc.analysis.domain import Interval
from attnc.analysis.symbolic import Builder, evaluate

small = st.integers(-12, 12)
pairs = st.tuples(small, small).map(sorted)


def _floordiv(x, y):
    return x // y if y else 0


def _mod(x, y):
    return x % y if y else 0


BINARY = {
    "add": (D.add, lambda x, y: x + y, True),
    "sub": (D.sub, lambda x, y: x - y, True),
    "mul": (D.mul, lambda x, y: x * y, True),
    "min": (D.min_, min, True),
    "max": (D.max_, max, True),
    "floordiv": (D.floordiv, _floordiv, False),
    "mod": (D.mod, _mod, False),
}


def _symbolic(S, name, lo_hi, const):
    if const:
        return Interval(S.const(lo_hi[0]), S.const(lo_hi[0]))
    return Interval(S.sym(name + "_lo"), S.sym(name + "_hi"))


def _env(a, b):
    return {"a_lo": a[0], "a_hi": a[1], "b_lo": b[0], "b_hi": b[1]}


@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=150, deadline=None)
@given(a=pairs, b=pairs, b_const=st.booleans())
def test_binary_transfer_is_sound(name, a, b, b_const):
    abstract, concrete, exact = BINARY[name]
    S = Builder()
    if b_const:
        b = (b[0], b[0])
    out = abstract(S, _symbolic(S, "a", a, False), _symbolic(S, "b", b, b_const))
    env = _env(a, b)
    lo = None if out.lo is None else evaluate(out.lo, env)
    hi = None if out.hi is None else evaluate(out.hi, env)
    values = {concrete(x, y) for x in range(a[0], a[1] + 1) for y in range(b[0], b[1] + 1)}
    assert lo is None or lo <= min(values)
    assert hi is None or max(values) <= hi
    if exact:
        assert (lo, hi) == (min(values), max(values))


@settings(max_examples=150, deadline=None)
@given(a=pairs)
def test_abs_and_neg_are_exact(a):
    S = Builder()
    sym = _symbolic(S, "a", a, False)
    env = _env(a, (0, 0))
    values = range(a[0], a[1] + 1)
    for out, f in ((D.abs_(S, sym), abs), (D.neg(S, sym), lambda x: -x)):
        got = (evaluate(out.lo, env), evaluate(out.hi, env))
        assert got == (min(map(f, values)), max(map(f, values)))


PREDICATES = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "slt": lambda x, y: x < y,
              "sle": lambda x, y: x <= y, "sgt": lambda x, y: x > y, "sge": lambda x, y: x >= y}


@pytest.mark.parametrize("pred", sorted(PREDICATES))
@settings(max_examples=100, deadline=None)
@given(a=pairs, b=pairs)
def test_compare_is_exact_on_independent_intervals(pred, a, b):
    S = Builder()
    t = D.compare(S, pred, _symbolic(S, "a", a, False), _symbolic(S, "b", b, False))
    outcomes = {PREDICATES[pred](x, y) for x in range(a[0], a[1] + 1) for y in range(b[0], b[1] + 1)}
    env = _env(a, b)
    assert evaluate(t.may_true, env) == (True in outcomes)
    assert evaluate(t.may_false, env) == (False in outcomes)


def test_unbounded_sides_stay_possible():
    S = Builder()
    top = D.TOP
    t = D.compare(S, "slt", top, Interval(S.const(0), S.const(0)))
    assert (t.may_true, t.may_false) == (S.true, S.true)
    assert D.add(S, top, Interval(S.const(1), S.const(1))) == top
    assert D.max_(S, top, Interval(S.const(0), S.const(3))).lo is not None   # max(x, 0) >= 0
    assert D.mod(S, top, Interval(S.const(8), S.const(8))) == Interval(S.const(0), S.const(7))


def test_select_uses_only_the_branches_that_can_be_taken():
    S = Builder()
    a, b = Interval(S.const(0), S.const(1)), Interval(S.const(10), S.const(11))
    for may_true, may_false, want in ((True, False, (0, 1)), (False, True, (10, 11)), (True, True, (0, 11))):
        c = D.Truth(S.true if may_true else S.false, S.true if may_false else S.false)
        out = D.select(S, c, a, b)
        assert (evaluate(out.lo, {}), evaluate(out.hi, {})) == want


def test_three_valued_logic():
    S = Builder()
    T, F, U = (D.Truth(S.true, S.false), D.Truth(S.false, S.true), D.Truth(S.true, S.true))
    assert D.not_(S, T) == F
    assert D.xor(S, T, T) == F and D.xor(S, T, F) == T and D.xor(S, U, T) == U
    for x, y in itertools.product((T, F, U), repeat=2):
        assert D.within(S, S.false, D.xor(S, x, y)) == D.Truth(S.false, S.false)
