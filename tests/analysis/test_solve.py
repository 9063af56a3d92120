"""Solving a condition for one symbol: the interval returned only holds values where the
condition is true (inner), and is the exact solution set for bands and windows."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from attnc.analysis.domain import Interval
from attnc.analysis.solve import inner_interval
from attnc.analysis.symbolic import Builder, evaluate

ops = st.sampled_from(["<=", "<", "==", "!="])


def conditions(depth: int):
    """A condition on x (and y): comparisons of a*x + b*y + c, (x + c) // d, min/max."""
    term = st.one_of(
        st.tuples(st.just("lin"), st.integers(-3, 3), st.integers(-2, 2), st.integers(-20, 20)),
        st.tuples(st.just("div"), st.sampled_from([1, -1]), st.integers(-10, 10), st.integers(1, 9)),
        st.tuples(st.just("minmax"), st.sampled_from(["min", "max"]), st.integers(-20, 20)))
    atom = st.tuples(st.just("cmp"), term, ops, st.integers(-20, 20))
    if depth == 0:
        return atom
    sub = conditions(depth - 1)
    return st.one_of(atom, st.tuples(st.sampled_from(["and", "or"]), sub, sub),
                     st.tuples(st.just("not"), sub))


def build(S, t):
    x, y = S.sym("x"), S.sym("y")
    if t[0] == "cmp":
        kind = t[1][0]
        if kind == "lin":
            lhs = S.add(S.add(S.scale(x, t[1][1]), S.scale(y, t[1][2])), S.const(t[1][3]))
        elif kind == "div":
            lhs = S.floordiv(S.add(S.scale(x, t[1][1]), S.const(t[1][2])), S.const(t[1][3]))
        else:
            lhs = getattr(S, t[1][1])(x, S.add(y, S.const(t[1][2])))
        rhs = S.const(t[3])
        return {"<=": S.le, "<": S.lt, "==": S.eq, "!=": S.ne}[t[2]](lhs, rhs)
    if t[0] == "not":
        return S.not_(build(S, t[1]))
    return (S.and_ if t[0] == "and" else S.or_)(build(S, t[1]), build(S, t[2]))


@settings(max_examples=300, deadline=None)
@given(conditions(2), st.integers(-15, 15))
def test_every_value_of_the_interval_satisfies_the_condition(tree, y):
    S = Builder()
    cond = build(S, tree)
    got = inner_interval(S, cond, S.sym("x"), Interval(S.const(-40), S.const(40)))
    lo, hi = evaluate(got.lo, {"y": y}), evaluate(got.hi, {"y": y})
    assert -40 <= lo and hi <= 40 or lo > hi
    for x in range(lo, hi + 1):
        assert evaluate(cond, {"x": x, "y": y}), (x, lo, hi)


def test_a_window_is_solved_exactly():
    S = Builder()
    x, lo, hi, w = S.sym("x"), S.sym("lo"), S.sym("hi"), S.sym("w")
    # no row i in [lo, hi] drops key x from `x <= i and i - x < w`
    keeps = S.and_(S.le(x, lo), S.lt(S.sub(hi, x), w))
    got = inner_interval(S, keeps, x, Interval(S.const(0), S.const(999)))
    for env in ({"lo": 100, "hi": 163, "w": 50}, {"lo": 0, "hi": 63, "w": 1000}, {"lo": 5, "hi": 9, "w": 2}):
        want = [v for v in range(1000) if evaluate(keeps, {**env, "x": v})]
        span = (evaluate(got.lo, env), evaluate(got.hi, env))
        if want:
            assert span == (want[0], want[-1])
        else:
            assert span[0] > span[1]


def test_of_two_disjoint_pieces_the_larger_is_kept():
    S = Builder()
    x = S.sym("x")
    cond = S.or_(S.lt(x, S.const(10)), S.and_(S.le(S.const(50), x), S.le(x, S.const(80))))
    got = inner_interval(S, cond, x, Interval(S.const(0), S.const(100)))
    assert (evaluate(got.lo, {}), evaluate(got.hi, {})) == (50, 80)


def test_what_cannot_be_solved_is_empty():
    S = Builder()
    x = S.sym("x")
    cond = S.lt(S.mul(x, x), S.const(50))             # not linear in x
    got = inner_interval(S, cond, x, Interval(S.const(0), S.const(100)))
    assert evaluate(got.lo, {}) > evaluate(got.hi, {})
