"""The symbolic algebra: every simplification keeps the value, and the folds we rely on happen."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from attnc.analysis.symbolic import Builder, as_const, evaluate, show, symbols

NAMES = ("x", "y", "z")


def _int_tree(depth):
    leaf = st.one_of(st.tuples(st.just("c"), st.integers(-9, 9)), st.tuples(st.just("s"), st.sampled_from(NAMES)))
    if depth == 0:
        return leaf
    sub = _int_tree(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(st.sampled_from(["+", "-", "*", "min", "max", "//"]), sub, sub),
        st.tuples(st.just("//c"), sub, st.integers(-7, 7).filter(bool)),
        st.tuples(st.just("?"), _bool_tree(depth - 1), sub, sub),
    )


def _bool_tree(depth):
    ints = _int_tree(min(depth, 1))
    leaf = st.tuples(st.sampled_from(["<=", "<", "==", "!="]), ints, ints)
    if depth == 0:
        return leaf
    sub = _bool_tree(depth - 1)
    return st.one_of(leaf, st.tuples(st.sampled_from(["and", "or"]), sub, sub), st.tuples(st.just("not"), sub))


def build(S, t):
    op = t[0]
    if op == "c":
        return S.const(t[1])
    if op == "s":
        return S.sym(t[1])
    if op == "//c":
        return S.floordiv(build(S, t[1]), S.const(t[2]))
    if op == "?":
        return S.select(build(S, t[1]), build(S, t[2]), build(S, t[3]))
    if op == "not":
        return S.not_(build(S, t[1]))
    a, b = build(S, t[1]), build(S, t[2])
    return {"+": S.add, "-": S.sub, "*": S.mul, "min": S.min, "max": S.max, "//": S.floordiv,
            "<=": S.le, "<": S.lt, "==": S.eq, "!=": S.ne,
            "and": lambda p, q: S.and_(p, q), "or": lambda p, q: S.or_(p, q)}[op](a, b)


def direct(t, env):
    """The meaning of a tree, in plain Python (a divisor of 0 counts as 1, as documented)."""
    op = t[0]
    if op == "c":
        return t[1]
    if op == "s":
        return env[t[1]]
    if op == "//c":
        return direct(t[1], env) // t[2]
    if op == "?":
        return direct(t[2], env) if direct(t[1], env) else direct(t[3], env)
    if op == "not":
        return not direct(t[1], env)
    a, b = direct(t[1], env), direct(t[2], env)
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "min": lambda: min(a, b),
            "max": lambda: max(a, b), "//": lambda: a // (b or 1), "<=": lambda: a <= b,
            "<": lambda: a < b, "==": lambda: a == b, "!=": lambda: a != b,
            "and": lambda: a and b, "or": lambda: a or b}[op]()


envs = st.fixed_dictionaries({n: st.integers(-30, 30) for n in NAMES})


@settings(max_examples=300, deadline=None)
@given(st.one_of(_int_tree(3), _bool_tree(3)), st.lists(envs, min_size=1, max_size=5))
def test_simplifications_keep_the_value(tree, env_list):
    S = Builder()
    e = build(S, tree)
    for env in env_list:
        assert evaluate(e, env) == direct(tree, env), show(e)


def test_linear_forms_fold():
    S = Builder()
    x, y = S.sym("x"), S.sym("y")
    assert S.sub(S.add(x, y), y) is x
    assert as_const(S.sub(x, x)) == 0
    assert S.le(S.add(x, S.const(1)), S.add(x, S.const(2))) is S.true
    assert S.lt(x, x) is S.false
    assert S.le(S.scale(x, 2), S.scale(y, 2)) is S.le(x, y)          # gcd
    assert S.eq(S.scale(x, 2), S.const(3)) is S.false                 # 2x == 3 has no solution
    assert S.not_(S.le(x, y)) is S.lt(y, x)


def test_floordiv_normal_forms():
    S = Builder()
    m = S.sym("m")
    assert S.floordiv(S.add(S.scale(m, 4), S.const(3)), S.const(4)) is m              # (4m + 3) // 4
    assert S.floordiv(S.scale(m, 128), S.const(64)) is S.scale(m, 2)
    # floor is monotone: it goes inside max; ceil(x / c) and -floor(-x / c) are one atom
    n = S.sym("n")
    assert show(S.floordiv(S.max(m, n), S.const(8))) == "max((m)//(8), (n)//(8))"
    assert S.ceildiv(m, 8) is S.floordiv(S.add(m, S.const(7)), S.const(8))


def test_min_max_flatten_and_prune():
    S = Builder()
    x, y, z = (S.sym(n) for n in NAMES)
    one = S.const(1)
    assert S.min(x, S.add(x, one)) is x
    assert S.min(x, S.min(y, z)) is S.min(z, y, x)
    assert S.min(x, S.add(S.min(x, y), one)) is S.min(x, S.add(y, one))
    assert S.le(S.max(x, y), z) is S.and_(S.le(x, z), S.le(y, z))      # taken apart
    assert S.le(z, S.max(x, y)) is S.or_(S.le(z, x), S.le(z, y))


def test_junctions_keep_the_tightest_and_spot_contradictions():
    S = Builder()
    x, y = S.sym("x"), S.sym("y")
    assert S.and_(S.le(x, y), S.lt(x, y)) is S.lt(x, y)
    assert S.or_(S.le(x, y), S.lt(x, y)) is S.le(x, y)
    assert S.and_(S.lt(x, y), S.lt(y, x)) is S.false
    assert S.or_(S.le(x, y), S.le(y, x)) is S.true
    assert S.and_(S.le(x, y), S.not_(S.le(x, y))) is S.false


def test_axioms_decide_what_they_imply():
    S = Builder()
    lo, hi = S.sym("lo"), S.sym("hi")
    S.axiom(S.add(lo, S.const(1)), hi)          # lo < hi
    assert S.lt(lo, hi) is S.true
    assert S.le(lo, S.add(hi, S.const(5))) is S.true
    assert S.le(hi, lo) is S.false
    assert S.min(lo, hi) is lo


def test_symbols_lists_the_names_used():
    S = Builder()
    e = S.select(S.le(S.sym("a"), S.const(0)), S.floordiv(S.sym("b"), S.sym("c")), S.const(1))
    assert symbols(e) == {"a", "b", "c"}
