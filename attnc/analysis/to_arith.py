"""Symbolic expressions (`symbolic.py`) as an `arith` function.

`emit_function` writes

    func.func private @name(%a: i32, %b: i32, ...) -> (i32, ...)

whose results are the given integer expressions of the argument names. The body
computes in i64 (arguments sign-extended once, on first use; results truncated), so
the bounds of products of indices and dims do not wrap. Each distinct subexpression is
emitted once. Comparisons come out in the readable shape `x + c < y` / `x <= y + c`.
`inline_function` copies such a function's body to where a kernel needs its results.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from attnc.analysis.symbolic import Expr, as_const


def emit_function(name: str, arg_names: Sequence[str], results: Sequence[Expr], *, loc, ip,
                  names: Mapping[Expr, str] | None = None):
    """Insert the function at `ip` (an mlir InsertionPoint) with location `loc`.

    Arguments, and the values of `names`, get a `NameLoc` of their name around `loc`,
    so IR printed with `use_name_loc_as_prefix` reads `%m_lo`, `%may_keep`."""
    from mlir import ir
    from mlir.dialects import func

    named = {e.id: n for e, n in (names or {}).items()}
    with loc:
        i32 = ir.IntegerType.get_signless(32)
        fn = func.FuncOp(name, ir.FunctionType.get([i32] * len(arg_names), [i32] * len(results)),
                         visibility="private", ip=ip)
        block = fn.add_entry_block(arg_locs=[ir.Location.name(n, childLoc=loc) for n in arg_names])
        with ir.InsertionPoint(block):
            emitter = _Emitter(dict(zip(arg_names, block.arguments)), named, loc)
            func.ReturnOp([emitter.result(e) for e in results])
    return fn


def fits_64_bits(results: Sequence[Expr], bounds: Mapping[str, int]) -> bool:
    """Whether every value `emit_function` computes for `results` stays inside i64, when
    each symbol's magnitude is at most `bounds[name]`. The analysis reasons on unbounded integers; its rewrites can
    multiply bounds (`x // c + rest <= 0` becomes `x + c * rest + 1 - c <= 0`, a runtime
    divisor is undone by a product), so a bound exact in Python may wrap in the emitted
    i64 code. A conservative magnitude per node: a sum's partial sums and scaled terms,
    a product, min, max and select are all bounded by it."""
    memo: dict[int, int] = {}

    def size(e: Expr) -> int:
        hit = memo.get(e.id)
        if hit is not None:
            return hit
        k, a = e.kind, e.args
        if k == "lin":
            value = abs(a[0]) + sum(abs(c) * size(x) for x, c in a[1])
        elif k == "sym":
            value = bounds[a[0]]
        elif k in ("min", "max"):
            value = max(size(x) for x in a)
        elif k == "select":                     # the condition's sums checked, its value 0 or 1
            size(a[0])
            value = max(size(a[1]), size(a[2]))
        elif k == "mul":
            value = min(size(a[0]) * size(a[1]), times(a[1], a[0]), times(a[0], a[1]))
        elif k == "fdiv":                       # floor(x / y) for |y| >= 1 (the divisor checked too)
            divisor, by = size(a[1]), as_const(a[1])
            value = size(a[0]) // abs(by) + 1 if by else max(size(a[0]), divisor) + 1
        else:                                   # booleans: their sums are checked, they are 0 or 1
            for x in a:
                if isinstance(x, Expr):
                    size(x)
            value = 1
        if value >= 1 << 63:
            raise _Wide
        memo[e.id] = value
        return value

    scaled: dict[tuple[int, int], int] = {}

    def times(y: Expr, d: Expr) -> int:
        """A bound on |y * d|, tighter than size(y) * size(d) where y is built of
        quotients by d: the analysis undoes `x // C` as `C * (x // C)`, within |x| + |C|
        (its divisor written `1 if C == 0 else C`, where C = 0 makes the product 0)."""
        key = (y.id, d.id)
        hit = scaled.get(key)
        if hit is not None:
            return hit
        k, a = y.kind, y.args
        y_atom = _atom(y)
        if y_atom is not y:
            value = times(y_atom, d)
        elif k == "fdiv" and _divides_as(a[1], d):
            value = size(a[0]) + size(d)
        elif k in ("min", "max"):
            value = max(times(x, d) for x in a)
        elif k == "select":                     # `y if d != 0 else z`: z * d = 0
            value = max(times(a[1], d), 0 if _nonzero_test(a[0], d) else times(a[2], d))
        elif k == "lin":
            value = abs(a[0]) * size(d) + sum(abs(c) * times(x, d) for x, c in a[1])
        else:
            value = size(y) * size(d)
        scaled[key] = value
        return value

    try:
        for e in results:
            size(e)
    except _Wide:
        return False
    return True


def _divides_as(divisor: Expr, d: Expr) -> bool:
    """Whether `divisor` is `d`, or `1 if d == 0 else d` (how the analysis guards a
    runtime divisor), so that `d * (x // divisor)` is within |x| + |d|."""
    divisor, atom = _atom(divisor), _atom(d)
    if divisor.id == atom.id:
        return True
    if divisor.kind != "select":
        return False
    cond, one, other = divisor.args
    return _atom(other).id == atom.id and as_const(one) == 1 and cond.kind == "eq" \
        and _atom(cond.args[0]).id == atom.id


def _atom(e: Expr) -> Expr:
    """The atom x of `e` = 1 * x + 0 (a sum of one term), else `e`."""
    if e.kind == "lin" and e.args[0] == 0 and len(e.args[1]) == 1 and e.args[1][0][1] == 1:
        return e.args[1][0][0]
    return e


def _nonzero_test(cond: Expr, d: Expr) -> bool:
    """Whether `cond` is `d >= 1 or d <= -1` (`-d + 1 <= 0 or d + 1 <= 0`), d one symbol."""
    x = _atom(d)
    if x is d:
        return False
    return cond.kind == "or" and all(c.kind == "le" for c in cond.args) and \
        sorted((c.args[0].args for c in cond.args), key=lambda t: t[1][0][1] if t[1] else 0) == \
        [(1, ((x, -1),)), (1, ((x, 1),))]


class _Wide(Exception):
    """A value of the emitted code may leave i64 (fits_64_bits)."""


def inline_function(fn, args: Sequence) -> list:
    """The results of `fn` (a single-block func.func, such as the pass emits) computed at
    the current insertion point from the values `args`: its ops are cloned there, so a
    kernel builder can evaluate `@<f>_tile_class` / `@<f>_kv_range` without a call."""
    block = fn.regions[0].blocks[0]
    mapping = dict(zip(block.arguments, args))
    for op in block.operations:
        if op.name == "func.return":
            return [mapping.get(v, v) for v in op.operands]
        copy = op.clone()
        for k, v in enumerate(op.operands):
            copy.operands[k] = mapping.get(v, v)
        mapping.update(zip(op.results, copy.results))
    raise ValueError(f"{fn.name} has no func.return")


class _Emitter:
    def __init__(self, args: dict, named: dict[int, str], loc):
        from mlir import ir

        self.ir = ir
        self.named, self.loc = named, loc
        self.i1 = ir.IntegerType.get_signless(1)
        self.i32 = ir.IntegerType.get_signless(32)
        self.i64 = ir.IntegerType.get_signless(64)
        self.args = args
        self.memo: dict[int, object] = {}
        self.consts: dict[tuple, object] = {}
        self.scaled: dict[tuple, object] = {}

    def result(self, e: Expr):
        from mlir.dialects import arith

        if as_const(e) is not None:
            return self.const(as_const(e), self.i32)
        return arith.trunci(self.i32, self.value(e))

    def const(self, value: int, ty=None):
        from mlir.dialects import arith

        ty = ty or self.i64
        if not -(1 << 63) <= int(value) < 1 << 63:
            raise OverflowError(f"the mask analysis needs the constant {int(value)}, beyond 64 bits")
        key = (str(ty), int(value))
        if key not in self.consts:
            self.consts[key] = arith.constant(ty, int(value))
        return self.consts[key]

    def value(self, e: Expr):
        hit = self.memo.get(e.id)
        if hit is None:
            hit = self.memo[e.id] = getattr(self, "_" + e.kind)(*e.args)
            name = self.named.get(e.id)
            owner = getattr(getattr(hit, "owner", None), "operation", None)
            if name is not None and isinstance(owner, self.ir.Operation) \
                    and owner.name != "arith.constant":
                owner.location = self.ir.Location.name(name, childLoc=self.loc)
        return hit

    # --- integers -------------------------------------------------------------------
    def _lin(self, const: int, terms):
        return self._sum([(x, k) for x, k in terms if k > 0], [(x, -k) for x, k in terms if k < 0],
                         const)

    def _sum(self, plus, minus, const: int):
        """sum(plus) - sum(minus) + const, all coefficients positive."""
        from mlir.dialects import arith

        acc = None
        for x, k in plus:
            v = self._scaled(x, k)
            acc = v if acc is None else arith.addi(acc, v)
        if acc is None and not minus:
            return self.const(const)
        if acc is None:
            acc = self.const(const)
            const = 0
        for x, k in minus:
            acc = arith.subi(acc, self._scaled(x, k))
        if const > 0:
            acc = arith.addi(acc, self.const(const))
        elif const < 0:
            acc = arith.subi(acc, self.const(-const))
        return acc

    def _scaled(self, atom: Expr, k: int):
        from mlir.dialects import arith

        if k == 1:
            return self.value(atom)
        key = (atom.id, k)
        if key not in self.scaled:
            self.scaled[key] = arith.muli(self.value(atom), self.const(k))
        return self.scaled[key]

    def _sym(self, name: str):
        from mlir.dialects import arith

        return arith.extsi(self.i64, self.args[name])

    def _min(self, *xs):
        return self._fold("minsi", xs)

    def _max(self, *xs):
        return self._fold("maxsi", xs)

    def _fold(self, op: str, xs):
        from mlir.dialects import arith

        acc = self.value(xs[0])
        for x in xs[1:]:
            acc = getattr(arith, op)(acc, self.value(x))
        return acc

    def _mul(self, a, b):
        from mlir.dialects import arith

        return arith.muli(self.value(a), self.value(b))

    def _fdiv(self, a, b):
        from mlir.dialects import arith

        return arith.floordivsi(self.value(a), self.value(b))

    def _select(self, c, a, b):
        from mlir.dialects import arith

        return arith.select(self.value(c), self.value(a), self.value(b))

    # --- booleans -------------------------------------------------------------------
    def _const(self, value: bool):
        return self.const(int(value), self.i1)

    def _le(self, lin: Expr):
        const, terms = lin.args       # P - Q + c <= 0: `P + (c-1) < Q` or `P <= Q - c`
        plus = [(x, k) for x, k in terms if k > 0]
        minus = [(x, -k) for x, k in terms if k < 0]
        if const > 0:
            return self._cmp("slt", self._sum(plus, [], const - 1), self._sum(minus, [], 0))
        return self._cmp("sle", self._sum(plus, [], 0), self._sum(minus, [], -const))

    def _eq(self, lin: Expr):
        const, terms = lin.args
        plus = [(x, k) for x, k in terms if k > 0]
        minus = [(x, -k) for x, k in terms if k < 0]
        return self._cmp("eq", self._sum(plus, [], max(const, 0)), self._sum(minus, [], max(-const, 0)))

    def _cmp(self, pred: str, a, b):
        from mlir.dialects import arith

        return arith.cmpi(getattr(arith.CmpIPredicate, pred), a, b)

    def _not(self, x):
        from mlir.dialects import arith

        return arith.xori(self.value(x), self.const(1, self.i1))

    def _and(self, *xs):
        return self._fold("andi", xs)

    def _or(self, *xs):
        return self._fold("ori", xs)
