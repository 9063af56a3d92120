"""Solving a symbolic condition for one symbol: an interval of values where it surely holds.

`inner_interval(S, cond, x, domain)` returns [lo, hi] (symbolic, inside `domain`) such
that `cond` is true for every x in it -- an *inner* approximation, possibly empty
(lo > hi), never containing a value where `cond` may fail. It is how the KV plan finds
the keys a query block keeps whatever the row: `cond` is "no row of the block drops key
j", a formula in j built by the interval analysis.

    L <= 0, L = k*x + r (x only there)   x <= floor(-r/k) (k > 0) / x >= ceil(r/-k) (k < 0)
    L = k*((x + e) // c) + r             the same for the quotient, then x's range of it
    L == 0                               L <= 0 and -L <= 0
    not (...)                            pushed inwards (De Morgan; not (L == 0) as two sides)
    A and B                              intersection (exact)
    A or B                               the hull when the two touch, else the larger one
    anything else with x in it           empty (sound: nothing claimed)
    anything without x                   the whole domain where it holds, else empty

`le` has already taken apart min/max of x and linearised `x // c`, so windows, chunks and
bands come out exact.
"""
from __future__ import annotations

from typing import Callable

from attnc.analysis.domain import Interval
from attnc.analysis.symbolic import Builder, Expr, as_const


def inner_interval(S: Builder, cond: Expr, x: Expr, domain: Interval,
                   size: Callable[[Interval], Expr] | None = None) -> Interval:
    """[lo, hi] within `domain` where `cond` holds for every value of the symbol `x`.
    Of two disjoint candidates the one of larger `size` is kept (default: hi - lo)."""
    atom = x.args[1][0][0]              # x is a symbol: the lin 1*sym
    return _Solver(S, atom, domain, size or (lambda a: S.sub(a.hi, a.lo))).solve(cond)


class _Solver:
    def __init__(self, S: Builder, atom: Expr, domain: Interval, size):
        self.S, self.atom, self.domain, self.size = S, atom, domain, size
        self.name = atom.args[0]
        one = S.const(1)
        self.empty = Interval(S.add(domain.hi, one), domain.hi)
        self._solved: dict[int, Interval] = {}
        self._mentions: dict[int, bool] = {}

    def solve(self, cond: Expr) -> Interval:
        """Once per expression: a condition shared by several parents (nested `where`s
        share their conditions) is solved once, not once per path to it."""
        hit = self._solved.get(cond.id)
        if hit is None:
            hit = self._solved[cond.id] = self._solve(cond)
        return hit

    def mentions_x(self, e: Expr) -> bool:
        """Whether `e` depends on x, memoised over the DAG (`symbols` walks it whole)."""
        memo = self._mentions
        stack = [(e, False)]
        while stack:
            node, children_done = stack.pop()
            if node.id in memo:
                continue
            kids = _children(node)
            if not children_done:
                stack.append((node, True))
                stack.extend((k, False) for k in kids if k.id not in memo)
                continue
            memo[node.id] = (node.kind == "sym" and node.args[0] == self.name) or any(memo[k.id] for k in kids)
        return memo[e.id]

    def _solve(self, cond: Expr) -> Interval:
        S = self.S
        if not self.mentions_x(cond):
            return Interval(S.select(cond, self.domain.lo, self.empty.lo), self.domain.hi)
        kind = cond.kind
        if kind == "le":
            return self._le(cond.args[0])
        if kind == "eq":
            lin = cond.args[0]
            return self.solve(S.and_(S.le(lin, S.const(0)), S.le(S.scale(lin, -1), S.const(0))))
        if kind == "not":
            inner = cond.args[0]
            if inner.kind == "eq":
                lin = inner.args[0]
                return self.solve(S.or_(S.le(lin, S.const(-1)), S.le(S.const(1), lin)))
            negated = [S.not_(c) for c in inner.args]
            if inner.kind == "and":
                return self.solve(S.or_(*negated))
            if inner.kind == "or":
                return self.solve(S.and_(*negated))
        if kind == "and":
            return self._intersect([self.solve(c) for c in cond.args])
        if kind == "or":
            out = self.solve(cond.args[0])
            for c in cond.args[1:]:
                out = self._union(out, self.solve(c))
            return out
        return self.empty

    def _le(self, lin: Expr) -> Interval:
        """k * t + r <= 0 where t, the only term with x, is x or (s*x + e) // c."""
        S = self.S
        with_x = [(t, k) for t, k in lin.args[1] if self.mentions_x(t)]
        if len(with_x) != 1:
            return self.empty
        t, k = with_x[0]
        rest = S.add(lin, S._atom(t.kind, *t.args), -k)
        if t is self.atom:
            return self._bound(k, rest, lambda lo, hi: (lo, hi))
        c = as_const(t.args[1]) if t.kind == "fdiv" else None
        s = dict(t.args[0].args[1]).get(self.atom) if c else None
        e = S.add(t.args[0], S.sym(self.name), -s) if s in (1, -1) else None
        if e is None or self.mentions_x(e):
            return self.empty

        def through_floor(lo, hi):
            # q = (s*x + e) // c in [lo, hi]  <=>  s*x + e in [c*lo, c*hi + c - 1]
            lo = None if lo is None else S.sub(S.scale(lo, c), e)
            hi = None if hi is None else S.sub(S.add(S.scale(hi, c), S.const(c - 1)), e)
            if s == 1:
                return lo, hi
            return (None if hi is None else S.scale(hi, -1)), (None if lo is None else S.scale(lo, -1))
        return self._bound(k, rest, through_floor)

    def _bound(self, k: int, rest: Expr, to_x) -> Interval:
        """Where k * t + rest <= 0, for t a function of x given by `to_x` (t's bounds ->
        x's bounds)."""
        S = self.S
        if k > 0:                               # t <= floor(-rest / k)
            lo, hi = to_x(None, S.floordiv(S.scale(rest, -1), S.const(k)))
        else:                                   # t >= ceil(rest / -k)
            lo, hi = to_x(S.ceildiv(rest, -k), None)
        return self._clip(Interval(lo, hi))

    def _clip(self, a: Interval) -> Interval:
        S = self.S
        return Interval(self.domain.lo if a.lo is None else S.max(a.lo, self.domain.lo),
                        self.domain.hi if a.hi is None else S.min(a.hi, self.domain.hi))

    def _intersect(self, parts: list[Interval]) -> Interval:
        S = self.S
        return Interval(S.max(*(p.lo for p in parts)), S.min(*(p.hi for p in parts)))

    def _union(self, a: Interval, b: Interval) -> Interval:
        """An interval inside a | b: their hull when they overlap or touch, else the
        longer one; an empty side gives the other."""
        S = self.S
        if a.hi is b.hi:            # two rays (or one empty): the hull, emptiness included
            return Interval(S.min(a.lo, b.lo), a.hi)
        if a.lo is b.lo:
            return Interval(a.lo, S.max(a.hi, b.hi))
        one = S.const(1)
        a_empty, b_empty = S.lt(a.hi, a.lo), S.lt(b.hi, b.lo)
        touch = S.and_(S.le(a.lo, S.add(b.hi, one)), S.le(b.lo, S.add(a.hi, one)))
        a_longer = S.le(self.size(b), self.size(a))
        pick_a = S.or_(b_empty, S.and_(S.not_(a_empty), a_longer))

        def bound(x: Expr, y: Expr, hull) -> Expr:
            joined = S.select(touch, hull(x, y), S.select(pick_a, x, y))
            return S.select(a_empty, y, S.select(b_empty, x, joined))
        return Interval(bound(a.lo, b.lo, S.min), bound(a.hi, b.hi, S.max))


def _children(e: Expr) -> list[Expr]:
    if e.kind == "lin":
        return [a for a, _ in e.args[1]]
    return [a for a in e.args if isinstance(a, Expr)]
