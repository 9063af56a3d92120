"""Backward narrowing of boxes: the HC4-style half of Note [Conditional narrowing].

`Narrowing.revise(box, literal)` shrinks a box (`intervals.Box`) to one that still holds
every point where the literal may be true: a comparison gives each operand a target
interval, and `+`, `-`, `*` and `//` by constants (or by one symbolic value), `min`, `max`
and `abs` push targets down to the block arguments. `Narrowing.opposed(literals)` adds the
facts of Note [Opposite constraints]. Both read forward values through the interpreter.
"""
from __future__ import annotations

import math
from dataclasses import replace

from attnc.analysis import domain as D
from attnc.analysis.domain import TOP, Interval
from attnc.analysis.region import ARG, EXTERNAL, Node
from attnc.analysis.symbolic import Builder, Expr, as_const

AFFINE_OPS = ("arith.addi", "arith.subi", "arith.muli")

# Note [Opposite constraints]
# Interval propagation converges slowly on constraints that bound one linear form
# from both sides: `j <= i and i - j < W` with W <= 0 is empty, but each round only
# shaves one row off the box. Such pairs are summed instead (one Fourier-Motzkin
# step): `j - i <= 0` and `i - j - W + 1 <= 0` give `1 - W <= 0`, a fact the box
# needs to be non-empty. Over two index variables with unit coefficients (windows,
# bands) this makes the narrowed box exact.

# Note [One target per value]
# A mask's values form a DAG: `let d = i - j in d * d` uses `d` twice, and a chain of
# such lets reaches the block arguments along exponentially many paths. Pushing a target
# down each path separately repeats the work per path. `_push` instead collects, for each
# value, the intersection of the targets its consumers give it, and pushes that once:
# values are visited from the last node down, and a node's operands are earlier nodes, so
# every consumer has pushed before its operand is taken. The cost is one visit per value,
# and the result is at least as tight (the value must lie in every target at once).


class Narrowing:
    """The backward half of an `intervals.Interpreter` (which owns the memo tables)."""

    def __init__(self, interp):
        self.it, self.p, self.S = interp, interp.p, interp.S
        self._affines: dict = {}

    def revise(self, box, lit: tuple[int, bool]):
        """`box` narrowed so that it keeps the points where the literal may hold."""
        v, polarity = lit
        node, S = self.p.nodes[v], self.S
        if node.op == "arith.constant":
            return box if node.attr == polarity else replace(box, facts=S.false)
        first = self._node(node.operands[0]) if node.operands else None
        if node.op != "arith.cmpi" or first is None or first.type == "i1":
            return box
        pred = node.attr if polarity else D.NEGATED.get(node.attr)
        if pred not in D.SWAPPED:
            return box
        a, b = node.operands
        if pred in ("sgt", "sge"):
            a, b, pred = b, a, D.SWAPPED[pred]
        A, B = self.it.value(a, box), self.it.value(b, box)
        one = S.const(1)
        if pred == "eq":
            ta, tb = B, A
        elif pred == "ne":
            return box
        elif pred == "slt":
            ta = Interval(None, None if B.hi is None else S.sub(B.hi, one))
            tb = Interval(None if A.lo is None else S.add(A.lo, one), None)
        else:
            ta, tb = Interval(None, B.hi), Interval(A.lo, None)
        return replace(box, vars=self._push(((a, ta), (b, tb)), box))

    def _push(self, targets, box) -> tuple[Interval, ...]:
        """The box's variables narrowed so that each value `v` of the `(v, target)`
        pairs lies in its target (Note [One target per value])."""
        S, nodes = self.S, self.p.nodes
        narrowed = list(box.vars)
        pending: dict[int, Interval] = {}
        val = lambda x: self.it.value(x, box)     # noqa: E731 -- values before this revise

        def down(x: int, t: Interval) -> None:
            if x != EXTERNAL and t != TOP:
                pending[x] = D.intersect(S, pending[x], t) if x in pending else t

        for v, t in targets:
            down(v, t)
        while pending:
            v = max(pending)        # every consumer of v (a later node) has pushed to it
            target = pending.pop(v)
            node = nodes[v]
            ops = node.operands
            if node.op == ARG:
                narrowed[node.attr] = D.intersect(S, narrowed[node.attr], target)
            elif node.op == "arith.addi":
                down(ops[0], D.sub(S, target, val(ops[1])))
                down(ops[1], D.sub(S, target, val(ops[0])))
            elif node.op == "arith.subi" and self.it.mod_operands(node) is None:
                down(ops[0], D.add(S, target, val(ops[1])))
                down(ops[1], D.sub(S, val(ops[0]), target))
            elif node.op == "arith.muli":
                for x, y in (ops, ops[::-1]):
                    c = D.constant_of(val(y))
                    if c:
                        down(x, _unscale(S, target, c))
                        break
            elif node.op == "arith.floordivsi":
                divisor = val(ops[1])
                if divisor.lo is not None and divisor.lo is divisor.hi:
                    down(ops[0], _undivide(S, target, divisor.lo, val(ops[0])))
            elif node.op in ("arith.minsi", "arith.maxsi"):
                keep = Interval(target.lo, None) if node.op == "arith.minsi" else Interval(None, target.hi)
                down(ops[0], keep)
                down(ops[1], keep)
            elif node.op == "math.absi" and target.hi is not None:
                down(ops[0], Interval(S.scale(target.hi, -1), target.hi))
        return tuple(narrowed)

    def opposed(self, lits) -> Expr:
        """The facts that pairs of opposite affine literals imply (Note [Opposite constraints])."""
        S = self.S
        forms = [f for lit in lits for f in self._forms(lit)]
        facts = []
        for k, (c1, r1) in enumerate(forms):
            for c2, r2 in forms[k + 1:]:
                weights = _opposite(c1, c2)
                if weights is not None:
                    facts.append(S.le(S.add(S.scale(r1, weights[0]), S.scale(r2, weights[1])),
                                      S.const(0)))
        return S.and_(*facts)

    def _forms(self, lit: tuple[int, bool]) -> list[tuple[dict, Expr]]:
        """The literal as `sum(coeff * arg) + rest <= 0` forms, when it is affine."""
        v, polarity = lit
        node, S = self._node(v), self.S
        if node is None or node.op != "arith.cmpi" or node.attr not in D.SWAPPED:
            return []
        pred = node.attr if polarity else D.NEGATED[node.attr]
        a, b = (self._affine(x) for x in node.operands)
        if a is None or b is None or pred == "ne":
            return []
        diff = (_combine(a[0], b[0], -1), S.sub(a[1], b[1]))          # a - b
        flip = (_combine({}, diff[0], -1), S.scale(diff[1], -1))      # b - a
        one = S.const(1)
        return {"sle": [diff], "slt": [(diff[0], S.add(diff[1], one))],
                "sge": [flip], "sgt": [(flip[0], S.add(flip[1], one))],
                "eq": [diff, flip]}[pred]

    def _affine(self, v: int) -> tuple[dict, Expr] | None:
        """`v` as `sum(coeff * arg) + rest` with integer coefficients, else None."""
        if v in self._affines:
            return self._affines[v]
        node, S = self._node(v), self.S
        out = None
        if node is not None:
            whole = self.it.value(v, self.it.base)
            if node.op == ARG:
                out = ({node.attr: 1}, S.const(0))
            elif whole.lo is not None and whole.lo is whole.hi:
                out = ({}, whole.lo)
            elif node.op in AFFINE_OPS and self.it.mod_operands(node) is None:
                out = self._affine_of(node)
        self._affines[v] = out
        return out

    def _affine_of(self, node: Node) -> tuple[dict, Expr] | None:
        a, b = (self._affine(x) for x in node.operands)
        if a is None or b is None:
            return None
        S = self.S
        if node.op != "arith.muli":
            sign = 1 if node.op == "arith.addi" else -1
            return _combine(a[0], b[0], sign), S.add(a[1], b[1], sign)
        for (ca, ra), (cb, rb) in ((a, b), (b, a)):
            c = None if cb else as_const(rb)
            if c is not None:
                return _combine({}, ca, c), S.scale(ra, c)
        return None

    def _node(self, v: int) -> Node | None:
        return None if v == EXTERNAL else self.p.nodes[v]


def _combine(a: dict, b: dict, k: int) -> dict:
    """The coefficients of a + k * b."""
    out = dict(a)
    for var, c in b.items():
        out[var] = out.get(var, 0) + k * c
    return {var: c for var, c in out.items() if c}


def _opposite(a: dict, b: dict) -> tuple[int, int] | None:
    """Positive (p, q) with p * a + q * b == 0 (both non-zero), else None."""
    if not a or a.keys() != b.keys():
        return None
    var = next(iter(a))
    p, q = abs(b[var]), abs(a[var])
    if a[var] * b[var] >= 0 or any(p * a[x] + q * b[x] for x in a):
        return None
    g = math.gcd(p, q)
    return p // g, q // g


def _unscale(S: Builder, t: Interval, c: int) -> Interval:
    """{x : c * x in t} for a non-zero constant c, as an interval."""
    lo, hi = t.lo, t.hi
    if c < 0:
        lo, hi = (None if hi is None else S.scale(hi, -1)), (None if lo is None else S.scale(lo, -1))
        c = -c
    return Interval(None if lo is None else S.ceildiv(lo, c),
                    None if hi is None else S.floordiv(hi, S.const(c)))


def _undivide(S: Builder, t: Interval, c: Expr, x: Interval) -> Interval:
    """{x in `x` : x // c in t} (as an interval) for a divisor that is one value `c`.

    c > 0: x in [t.lo * c, t.hi * c + c - 1]; c < 0: x // c = q iff (q + 1) * c < x <= q * c,
    so x in [(t.hi + 1) * c + 1, t.lo * c]; c = 0 (x // 0 is 0) says nothing about x. For a
    symbolic c the sign is selected at run time; a missing side keeps x's own bound."""
    one = S.const(1)
    pos = (None if t.lo is None else S.mul(t.lo, c),
           None if t.hi is None else S.add(S.mul(t.hi, c), S.sub(c, one)))
    neg = (None if t.hi is None else S.add(S.mul(S.add(t.hi, one), c), one),
           None if t.lo is None else S.mul(t.lo, c))
    is_pos, is_neg = S.le(one, c), S.le(c, S.const(-1))

    def pick(k: int) -> Expr | None:
        own = (x.lo, x.hi)[k]
        p, n = pos[k] or own, neg[k] or own
        if p is None or n is None:
            return None
        if own is None:      # c == 0 leaves x unbounded on this side
            return None if is_pos is not S.true and is_neg is not S.true else \
                (p if is_pos is S.true else n)
        return S.select(is_pos, p, S.select(is_neg, n, own))
    return Interval(pick(0), pick(1))
