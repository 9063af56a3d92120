"""Walks over a hook region's values that the kernel code is built from, emitting nothing:
the coefficient of j in an i32 (`_j_coefficient`), the range of an i32 at j = 0
(`_int_range`, Note [Exact bounds] in row_intervals.py), a finite interval holding a
float (`_interval`, Note [Bounded score_mod] in softmax.py) and the top-level
conjuncts of a mask (`MaskConjuncts`, Notes [Row intervals] and [Residual conjuncts] in
row_intervals.py).

Each visits a value once however often `let`s reuse it (`_once_per_value`, or an
explicit order of the values), and none recurses on the depth of an expression beyond
a bound (Note [Deep expressions] in attnc/frontend/depth.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from mlir import ir

from attnc.backend.exact_ints import I32, fits_i32
from attnc.backend.hook_arith import _f32_constant
from attnc.ir import DIM, cmpi_predicate, defining_op, depends_on, int_constant, yielded

_NEGATED = {"slt": "sge", "sle": "sgt", "sgt": "sle", "sge": "slt"}


def _once_per_value(walk):
    """`walk(value, *args, memo=...)`, a recursive walk over a region's values, computed
    once per value: a `let` used twice is one value, and a walk per use would be
    exponential in a chain of lets. A top-level call starts a memo (or shares the one it
    is given), and the walk passes `memo` on to its recursive calls."""

    @functools.wraps(walk)
    def once(value: ir.Value, *args, memo: dict | None = None):
        memo = {} if memo is None else memo
        if value not in memo:
            memo[value] = walk(value, *args, memo=memo)
        return memo[value]

    return once


def _j_coefficient(value: ir.Value, j: ir.Value, j_tainted: set) -> int | None:
    """c when the i32 `value` is R + c * j with R independent of j, else None. Each value
    of j_tainted under `value` once, operands before their users: no recursion on the
    depth of the expression (Note [Deep expressions] in attnc/frontend/depth.py)."""
    memo: dict = {}
    for v in _operands_first(value, j_tainted):
        memo[v] = _j_coefficient_of(v, j, j_tainted, memo)
    return memo.get(value, 0 if value not in j_tainted else None)


def _j_coefficient_of(value: ir.Value, j: ir.Value, j_tainted: set, memo: dict) -> int | None:
    """`_j_coefficient` of one value, that of its operands in `memo` (0: free of j)."""
    if value == j:
        return 1
    op = defining_op(value)
    if op is None:
        return None
    side = lambda v: memo[v] if v in j_tainted else 0  # noqa: E731
    if op.name in ("arith.addi", "arith.subi"):
        x, y = (side(v) for v in op.operands)
        if x is None or y is None:
            return None
        return x + y if op.name == "arith.addi" else x - y
    if op.name == "arith.muli":
        for v, w in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
            c = int_constant(w)
            if c is not None:
                x = side(v)
                return None if x is None else x * c
    return None


def _operands_first(value: ir.Value, within: set) -> list:
    """The values of `within` that `value` is computed from (itself included), each once,
    every one after the operands it has in `within`."""
    order: list = []
    done: set = set()
    stack = [(value, False)]
    while stack:
        v, expanded = stack.pop()
        if v in done or v not in within:
            continue
        op = defining_op(v)
        if expanded or op is None:
            done.add(v)
            order.append(v)
            continue
        stack.append((v, True))
        stack.extend((w, False) for w in reversed(list(op.operands)) if w not in done)
    return order


def _sub(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    return (x[0] - y[1], x[1] - y[0])


@_once_per_value
def _int_range(value: ir.Value, abi_dims: frozenset, depth: int = 0, *, memo: dict) -> tuple[int, int]:
    """Bounds on the i32 `value` of a mask region where j = 0: b, h and i in [0, 2^31),
    the ABI's dims (`abi_dims`) too, any other dim and every param anywhere in i32; sums,
    differences, products, min, max and selects by interval arithmetic; anything else any
    i32. A value that may leave i32 gets I32 too: a term with such a side never fits with
    the margin, so RowInterval.bounds solves it in i64, exactly (the kernel computes the
    value itself in i64: Note [Exact integers]). Unlike IntPlan's ranges these hold at
    j = 0, the point each row's bounds are solved at."""
    c = int_constant(value)
    if c is not None:
        return (c, c)
    op = defining_op(value)
    if op is None:
        return (0, 0) if ir.BlockArgument(value).arg_number == 3 else (0, I32[1])
    if depth > 32:
        return I32
    if op.name == DIM:
        return (0, I32[1]) if ir.StringAttr(op.attributes["name"]).value in abi_dims else I32
    sides = lambda: [_int_range(v, abi_dims, depth + 1, memo=memo) for v in op.operands]  # noqa: E731
    if op.name == "arith.select":
        _, x, y = sides()
        return (min(x[0], y[0]), max(x[1], y[1]))
    if op.name not in ("arith.addi", "arith.subi", "arith.muli", "arith.minsi", "arith.maxsi"):
        return I32
    x, y = sides()
    if op.name == "arith.addi":
        r = (x[0] + y[0], x[1] + y[1])
    elif op.name == "arith.subi":
        r = _sub(x, y)
    elif op.name == "arith.muli":
        ends = [a * b for a in x for b in y]
        r = (min(ends), max(ends))
    else:
        pick = min if op.name == "arith.minsi" else max
        r = (pick(x[0], y[0]), pick(x[1], y[1]))
    return r if fits_i32(r) else I32


@_once_per_value
def _interval(value: ir.Value, depth: int = 0, *, memo: dict) -> tuple[float, float] | None:
    """A finite interval holding every value `value` takes, from its ops: constants,
    tanh, sums, differences, negations and products by constants; else None."""
    c = _f32_constant(value)
    if c is not None:
        return (float(c), float(c)) if np.isfinite(c) else None
    op = defining_op(value)
    if op is None or depth > 32:
        return None
    if op.name == "math.tanh":
        return (-1.0, 1.0)
    if op.name == "arith.negf":
        x = _interval(op.operands[0], depth + 1, memo=memo)
        return None if x is None else (-x[1], -x[0])
    if op.name in ("arith.addf", "arith.subf", "arith.mulf"):
        x, y = (_interval(v, depth + 1, memo=memo) for v in op.operands)
        if x is None or y is None:
            return None
        if op.name == "arith.addf":
            return (x[0] + y[0], x[1] + y[1])
        if op.name == "arith.subf":
            return (x[0] - y[1], x[1] - y[0])
        if x[0] == x[1] or y[0] == y[1]:
            ends = [a * b for a in x for b in y]
            return (min(ends), max(ends))
    return None


def _linear_term(op: ir.Operation, j: ir.Value, tainted, negated: bool):
    """(predicate, k, a, b) when `op` (negated or not) is `a - b <pred> 0` with a - b =
    d0 + k * j, k = +-1 and d0 free of j (Note [Row intervals]); else None."""
    pred = cmpi_predicate(op) if op.name == "arith.cmpi" else None
    if pred not in ("eq", *_NEGATED):
        return None
    if negated:
        if pred not in _NEGATED:
            return None
        pred = _NEGATED[pred]
    a, b = op.operands
    ka, kb = _j_coefficient(a, j, tainted), _j_coefficient(b, j, tainted)
    if ka is None or kb is None or ka - kb not in (1, -1):
        return None
    return pred, ka - kb, a, b


def _conjunct_operands(op: ir.Operation | None, negated: bool) -> list | None:
    """The (value, negated) conjuncts `op`'s result stands for when it is an `and` (not
    negated) or a `not` (xor with true), else None."""
    if op is not None and op.name == "arith.andi" and not negated:
        return [(v, False) for v in op.operands]
    if op is not None and op.name == "arith.xori":
        x, y = op.operands
        for v, w in ((x, y), (y, x)):
            if str(w.type) == "i1" and int_constant(w) == 1:
                return [(v, not negated)]
    return None


@dataclass(frozen=True)
class MaskConjuncts:
    """The top-level conjuncts of a mask region (Notes [Row intervals] and [Residual
    conjuncts]), each an i1 of the region with whether it stands under a `not`:

        free      (value, negated)        free of j
        linear    (value, negated, term)  term = (predicate, k, a, b): `a - b <pred> 0`
                                          with a - b = d0 + k * j
        residual  (value, negated)        the other conjuncts that depend on j

    The mask holds exactly when every conjunct does (the region yields their `and`)."""
    free: tuple
    linear: tuple
    residual: tuple

    @classmethod
    def of(cls, block: ir.Block) -> "MaskConjuncts":
        j = block.arguments[3]
        tainted = depends_on(block, 3)
        free: list = []
        linear: list = []
        residual: list = []
        seen: set = set()       # `c and c` is c: a conjunct reached twice is taken once

        # Left to right, with a stack rather than recursion (an `and` chain may be deep).
        stack = [(yielded(block), False)]
        while stack:
            value, negated = stack.pop()
            if (value, negated) in seen:
                continue
            seen.add((value, negated))
            if value not in tainted:
                free.append((value, negated))
                continue
            op = defining_op(value)
            inner = _conjunct_operands(op, negated)
            if inner is not None:
                stack.extend(reversed(inner))
                continue
            term = _linear_term(op, j, tainted, negated) if op is not None else None
            if term is not None:
                linear.append((value, negated, term))
            else:
                residual.append((value, negated))
        return cls(tuple(free), tuple(linear), tuple(residual))

    @property
    def interval(self) -> tuple:
        """(value, negated) of the conjuncts a row interval stands for: free and linear."""
        return self.free + tuple((v, n) for v, n, _ in self.linear)
