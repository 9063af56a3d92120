"""Symbolic integers and booleans over a tile's bounds and the runtime dims.

The mask analysis (`intervals.py`) bounds every value of `mask_mod` by expressions of
the tile origin (`m_lo`, `m_hi`, `n_lo`, `n_hi`), the CTA's `b` and `h` and the runtime
dims (`M`, `N`, `P`, ...). This module is the algebra those expressions live in:

* an integer is a linear form `c + sum(k * atom)` with atoms that are symbols or the
  non-linear terms `min`, `max`, `floordiv`, `mul` and `select`;
* a boolean is a constant, `L <= 0` or `L == 0` for a linear form `L`, or `not`/`and`/`or`.

Every node is interned by a `Builder`, so equal expressions are the same object and the
DAG stays shared. Constructors fold what is decidable from the form alone: constants,
`min(x + 2, x + 5)`, `x - x`, `(4 * m + 3) // 4`, `a <= b` when `a - b` is a number,
tightest-of for `and`/`or` of comparisons of the same form. The algebra is exact integer
arithmetic (the DSL's indices are exact; the emitted arith code uses i64).

`evaluate` gives an expression's value for concrete symbols; `to_arith.py` emits it.
"""
from __future__ import annotations

import math
from typing import Mapping


_SPLIT_BUDGET = 8   # at most this many comparisons when `le` takes min/max apart


class Expr:
    """An interned node. `kind` is 'lin' (integers) or a boolean kind; atoms are
    'sym', 'min', 'max', 'fdiv', 'mul', 'select' and appear only inside a 'lin'."""

    __slots__ = ("kind", "args", "id", "__weakref__")

    def __init__(self, kind: str, args: tuple, id_: int):
        self.kind, self.args, self.id = kind, args, id_

    @property
    def is_bool(self) -> bool:
        return self.kind in BOOL_KINDS

    def __repr__(self) -> str:
        return show(self)


BOOL_KINDS = ("const", "le", "eq", "not", "and", "or")


class Builder:
    """Creates interned, simplified expressions (one per analysis)."""

    def __init__(self):
        self._table: dict[tuple, Expr] = {}
        self._axioms: dict[tuple, int] = {}     # terms T -> largest k with T + k <= 0 known
        self.true = self._node("const", (True,))
        self.false = self._node("const", (False,))

    def _node(self, kind: str, args: tuple) -> Expr:
        key = (kind, args)
        node = self._table.get(key)
        if node is None:
            node = self._table[key] = Expr(kind, args, len(self._table))
        return node

    # --- integers ------------------------------------------------------------------
    def _lin(self, const: int, terms: Mapping[Expr, int]) -> Expr:
        items = tuple(sorted(((a, k) for a, k in terms.items() if k), key=lambda t: t[0].id))
        return self._node("lin", (const, items))

    def const(self, value: int) -> Expr:
        return self._lin(int(value), {})

    def sym(self, name: str) -> Expr:
        return self._lin(0, {self._node("sym", (name,)): 1})

    def _atom(self, kind: str, *args) -> Expr:
        return self._lin(0, {self._node(kind, args): 1})

    def add(self, a: Expr, b: Expr, k: int = 1) -> Expr:
        """a + k * b"""
        terms = dict(a.args[1])
        for atom, c in b.args[1]:
            terms[atom] = terms.get(atom, 0) + k * c
        return self._lin(a.args[0] + k * b.args[0], terms)

    def sub(self, a: Expr, b: Expr) -> Expr:
        return self.add(a, b, -1)

    def scale(self, a: Expr, k: int) -> Expr:
        return self._lin(a.args[0] * k, {atom: c * k for atom, c in a.args[1]})

    def mul(self, a: Expr, b: Expr) -> Expr:
        if as_const(b) is not None:
            return self.scale(a, as_const(b))
        if as_const(a) is not None:
            return self.scale(b, as_const(a))
        return self._atom("mul", *sorted((a, b), key=lambda e: e.id))

    def floordiv(self, a: Expr, b: Expr) -> Expr:
        """a // b, rounding down. A divisor of 0 is replaced by 1 (so code computing
        this never traps): the analysis only uses such quotients where the divisor is
        known to be non-zero."""
        c = as_const(b)
        if c is None:
            return self._atom("fdiv", a, self.select(self.eq(b, self.const(0)), self.const(1), b))
        if c == 0:
            return a
        if c < 0:
            a, c = self.scale(a, -1), -c
        const, terms = a.args
        whole = {atom: k // c for atom, k in terms if k % c == 0}
        rest = {atom: k for atom, k in terms if k % c != 0}
        q, r = divmod(const, c)
        return self.add(self._lin(q, whole), self._floordiv_rest(self._lin(r, rest), c))

    def _floordiv_rest(self, a: Expr, c: int) -> Expr:
        """a // c for c > 1 and no coefficient of `a` a multiple of c."""
        const, terms = a.args
        if not terms:
            return self.const(const // c)
        atom, k = terms[0]
        if len(terms) == 1 and k == 1 and atom.kind in ("min", "max"):
            # floor(x / c) is monotone: it goes inside min and max
            return self._extremum(atom.kind, [self.floordiv(self.add(x, self.const(const)), self.const(c))
                                              for x in atom.args])
        if k < 0:                       # floor(-x / c) = -floor((x + c - 1) / c)
            return self.scale(self.floordiv(self.add(self.scale(a, -1), self.const(c - 1)),
                                            self.const(c)), -1)
        return self._atom("fdiv", a, self.const(c))

    def ceildiv(self, a: Expr, c: int) -> Expr:
        return self.scale(self.floordiv(self.scale(a, -1), self.const(c)), -1)

    def min(self, *xs: Expr) -> Expr:
        return self._extremum("min", xs)

    def max(self, *xs: Expr) -> Expr:
        return self._extremum("max", xs)

    def _extremum(self, kind: str, xs) -> Expr:
        """n-ary min/max, flattened (`min(a, min(b, c) + 1)` is `min(a, b + 1, c + 1)`) and
        without the arguments another one provably bounds."""
        flat: list[Expr] = []
        for x in xs:
            const, terms = x.args
            if len(terms) == 1 and terms[0][1] == 1 and terms[0][0].kind == kind:
                flat.extend(self.add(y, self.const(const)) for y in terms[0][0].args)
            else:
                flat.append(x)
        keep: list[Expr] = []
        for x in flat:
            if any(self._bounds(kind, y, x) for y in keep):
                continue
            keep = [y for y in keep if not self._bounds(kind, x, y)]
            keep.append(x)
        if len(keep) == 1:
            return keep[0]
        return self._atom(kind, *sorted(keep, key=lambda e: e.id))

    def _bounds(self, kind: str, x: Expr, y: Expr) -> bool:
        """x makes y redundant: x <= y for min, x >= y for max (decided without taking
        min/max apart: this runs for every pair of arguments)."""
        return self._le(self.sub(x, y) if kind == "min" else self.sub(y, x), budget=0) is self.true

    def select(self, cond: Expr, a: Expr, b: Expr) -> Expr:
        if cond is self.true or a is b:
            return a
        if cond is self.false:
            return b
        if a.is_bool:
            return self.or_(self.and_(cond, a), self.and_(self.not_(cond), b))
        return self._atom("select", cond, a, b)

    # --- booleans ------------------------------------------------------------------
    def le(self, a: Expr, b: Expr) -> Expr:
        """a <= b, kept as `L <= 0` with L linear (see `_le`)."""
        return self._le(self.sub(a, b), budget=_SPLIT_BUDGET)

    def _le(self, L: Expr, budget: int) -> Expr:
        """`L <= 0`, folded with the axioms, the coefficients of L made coprime, and
        `max`/`min`/`//` atoms of L taken apart: `max(x, y) + r <= 0` is
        `x + r <= 0 and y + r <= 0`, `x // c + r <= 0` is `x + c*r - c + 1 <= 0`."""
        const, terms = L.args
        if not terms:
            return self.true if const <= 0 else self.false
        g = math.gcd(*(k for _, k in terms))
        const, terms = -(-const // g), tuple((x, k // g) for x, k in terms)
        known = self._by_axiom(const, terms)
        if known is not None:
            return self.true if known else self.false
        L = self._node("lin", (const, terms))
        for atom, k in terms:
            rest = self.add(L, self._atom(atom.kind, *atom.args), -k)
            if atom.kind in ("min", "max") and len(atom.args) <= budget:
                parts = [self._le(self.add(rest, e, k), budget // len(atom.args)) for e in atom.args]
                every = (atom.kind == "max") == (k > 0)
                return self.and_(*parts) if every else self.or_(*parts)
            c = as_const(atom.args[1]) if atom.kind == "fdiv" else None
            if c is not None and c > 0 and k in (1, -1):
                x = atom.args[0]
                if k == 1:      # x // c <= -rest  <=>  x <= -c*rest + c - 1
                    return self._le(self.add(self.add(x, rest, c), self.const(1 - c)), budget)
                return self._le(self.sub(self.scale(rest, c), x), budget)   # x // c >= rest
        return self._node("le", (L,))

    def axiom(self, a: Expr, b: Expr) -> None:
        """Declare `a <= b` (linear) true wherever these expressions are evaluated; the
        caller's contract, e.g. a tile is non-empty. `le` then folds what it implies."""
        const, terms = self.sub(a, b).args
        if not terms:               # between numbers: nothing to learn
            return
        g = math.gcd(*(k for _, k in terms))
        const, terms = -(-const // g), tuple((x, k // g) for x, k in terms)
        self._axioms[terms] = max(const, self._axioms.get(terms, const))

    def _by_axiom(self, const: int, terms: tuple) -> bool | None:
        """T + const <= 0 from an axiom T + k <= 0 (true when const <= k) or from
        -T + k <= 0 (false when k + const > 0)."""
        k = self._axioms.get(terms)
        if k is not None and const <= k:
            return True
        k = self._axioms.get(tuple((x, -c) for x, c in terms))
        if k is not None and k + const > 0:
            return False
        return None

    def lt(self, a: Expr, b: Expr) -> Expr:
        return self.le(self.add(a, self.const(1)), b)

    def ge(self, a: Expr, b: Expr) -> Expr:
        return self.le(b, a)

    def gt(self, a: Expr, b: Expr) -> Expr:
        return self.lt(b, a)

    def eq(self, a: Expr, b: Expr) -> Expr:
        const, terms = self.sub(a, b).args
        if not terms:
            return self.true if const == 0 else self.false
        g = math.gcd(*(k for _, k in terms))
        if const % g:
            return self.false
        if terms[0][1] < 0:
            g = -g
        return self._node("eq", (self._lin(const // g, {x: k // g for x, k in terms}),))

    def ne(self, a: Expr, b: Expr) -> Expr:
        return self.not_(self.eq(a, b))

    def not_(self, x: Expr) -> Expr:
        if x.kind == "const":
            return self.false if x.args[0] else self.true
        if x.kind == "not":
            return x.args[0]
        if x.kind == "le":                    # not (L <= 0)  <=>  1 - L <= 0
            return self.le(self.const(1), x.args[0])
        return self._node("not", (x,))

    def and_(self, *xs: Expr) -> Expr:
        return self._junction("and", xs, absorbing=self.false, neutral=self.true)

    def or_(self, *xs: Expr) -> Expr:
        return self._junction("or", xs, absorbing=self.true, neutral=self.false)

    def _junction(self, kind: str, xs, absorbing: Expr, neutral: Expr) -> Expr:
        flat: dict[int, Expr] = {}
        for x in xs:
            for y in (x.args if x.kind == kind else (x,)):
                if y is absorbing:
                    return absorbing
                if y is not neutral:
                    flat[y.id] = y
        if any(y.kind == "not" and y.args[0].id in flat for y in flat.values()):
            return absorbing
        items = self._tightest(kind, list(flat.values()))
        if not items:
            return neutral
        if len(items) == 1:
            return items[0]
        return self._node(kind, tuple(sorted(items, key=lambda e: e.id)))

    def _tightest(self, kind: str, items: list[Expr]) -> list[Expr]:
        """Of `L + c <= 0` for one L, `and` keeps the largest c, `or` the smallest."""
        best: dict[tuple, int] = {}
        out = []
        for y in items:
            if y.kind != "le":
                out.append(y)
                continue
            const, terms = y.args[0].args
            old = best.get(terms)
            if old is None or (const > old) == (kind == "and"):
                best[terms] = const
        for terms, const in best.items():
            opposite = best.get(tuple((x, -k) for x, k in terms))
            # L + c <= 0 and -L + d <= 0 need c + d <= 0; with `or` they cover all when c + d <= 1.
            if opposite is not None and (const + opposite > 0 if kind == "and" else const + opposite <= 1):
                return [self.false if kind == "and" else self.true]
        return out + [self._node("le", (self._node("lin", (c, t)),)) for t, c in best.items()]


def as_const(e: Expr) -> int | bool | None:
    """The value of a constant expression, else None."""
    if e.kind == "const":
        return e.args[0]
    if e.kind == "lin" and not e.args[1]:
        return e.args[0]
    return None


def symbols(e: Expr) -> set[str]:
    """The names of the symbols `e` depends on."""
    seen: set[int] = set()
    names: set[str] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if not isinstance(x, Expr) or x.id in seen:
            continue
        seen.add(x.id)
        if x.kind == "sym":
            names.add(x.args[0])
        elif x.kind == "lin":
            stack.extend(a for a, _ in x.args[1])
        else:
            stack.extend(a for a in x.args if isinstance(a, Expr))
    return names


def evaluate(e: Expr, env: Mapping[str, int], memo: dict | None = None) -> int | bool:
    """The value of `e` when each symbol has the value `env[name]`."""
    memo = {} if memo is None else memo
    hit = memo.get(e.id)
    if hit is not None:
        return hit
    value = _EVAL[e.kind](e.args, lambda x: evaluate(x, env, memo), env)
    memo[e.id] = value
    return value


_EVAL = {
    "lin": lambda a, ev, env: a[0] + sum(k * ev(x) for x, k in a[1]),
    "sym": lambda a, ev, env: env[a[0]],
    "min": lambda a, ev, env: min(ev(x) for x in a),
    "max": lambda a, ev, env: max(ev(x) for x in a),
    "mul": lambda a, ev, env: ev(a[0]) * ev(a[1]),
    "fdiv": lambda a, ev, env: ev(a[0]) // ev(a[1]),
    "select": lambda a, ev, env: ev(a[1]) if ev(a[0]) else ev(a[2]),
    "const": lambda a, ev, env: a[0],
    "le": lambda a, ev, env: ev(a[0]) <= 0,
    "eq": lambda a, ev, env: ev(a[0]) == 0,
    "not": lambda a, ev, env: not ev(a[0]),
    "and": lambda a, ev, env: all(ev(x) for x in a),
    "or": lambda a, ev, env: any(ev(x) for x in a),
}


def show(e: Expr) -> str:
    """A readable rendering, for messages and debugging."""
    k, a = e.kind, e.args
    if k == "lin":
        parts = [("-" if c < 0 else "+") + (show(x) if abs(c) == 1 else f"{abs(c)}*{show(x)}")
                 for x, c in a[1]]
        if a[0] or not parts:
            parts.append(f"{'-' if a[0] < 0 else '+'}{abs(a[0])}")
        text = "".join(parts)
        return text[1:] if text.startswith("+") else text
    if k == "sym":
        return a[0]
    if k in ("min", "max"):
        return f"{k}({', '.join(show(x) for x in a)})"
    if k == "mul":
        return f"({show(a[0])})*({show(a[1])})"
    if k == "fdiv":
        return f"({show(a[0])})//({show(a[1])})"
    if k == "select":
        return f"({show(a[1])} if {show(a[0])} else {show(a[2])})"
    if k == "const":
        return "true" if a[0] else "false"
    if k == "le":
        return f"{show(a[0])} <= 0"
    if k == "eq":
        return f"{show(a[0])} == 0"
    if k == "not":
        return f"not ({show(a[0])})"
    return f" {k} ".join(f"({show(x)})" for x in a)
