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
