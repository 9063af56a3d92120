"""Vectorized evaluation of hook bodies for the reference (`attnc.reference`).

A hook body is evaluated once per block of the (b, h, i, j) index space, not once per
element: every hook argument is a numpy array shaped to broadcast against the others
(`b` as (B, 1, 1, 1), `j` as (1, 1, 1, N), the score `s` as the whole block), so an
expression evaluates to an array that broadcasts to the block. Each node's result is
cast to the type sema gave it, which pins down the arithmetic independently of numpy's
promotion rules:

* int   -> int64. `+ - *` are exact (two's-complement wrap beyond 2**63, never reached
           by index arithmetic); `//` and `%` follow Python (floor) semantics. The
           kernels' 32-bit integers agree wherever no intermediate leaves int32.
* float -> float32, as dsl.md says and the kernels compute: every operand a float
           operation takes is converted to f32 first (an int by rounding to nearest, as
           the kernels' sitofp), literals and f32 params are f32, and a score reaches
           score_mod as f32. So a float that a hook turns back into an integer, an
           index or a mask bit (`j <= int(float(i) * 0.7)`) is the kernels' value, not a
           float64 one a rounding away from it. Only the hooks are f32: the scores' dot
           products, the softmax and P.V stay float64 (attnc/reference.py).
* bool  -> bool. `and`/`or` evaluate both sides; nothing in the language has effects.

See Note [Total arithmetic] for what division by zero and domain errors give.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from attnc.frontend import ast
from attnc.frontend.ast import BOOL, FLOAT, INT
from attnc.frontend.variant import Hook

# Note [Total arithmetic]
# ~~~~~~~~~~~~~~~~~~~~~~~
# A hook is evaluated for every (b, h, i, j), including positions whose value is later
# masked away, so evaluation must never fail or warn. Float operations follow IEEE 754
# (log(0) = -inf, x / 0 = +-inf or nan, exp overflow = inf); integer `//` and `%` by
# zero give 0 (numpy's convention, which the kernels follow: hook_arith.floordiv and the
# frontend's `%` lowering); int() saturates at the i32 bounds and takes nan to 0 (Note
# [Saturating int] in attnc/backend/hooks.py). Warnings are silenced
# only around user expressions; the softmax in attnc/reference.py avoids them by
# construction (Note [Empty rows]).

DTYPES = {INT: np.int64, FLOAT: np.float32, BOOL: np.bool_}
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


# Note [Signed zeros in min and max]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The frontend lowers float min and max to arith.minimumf / maximumf, IEEE 754-2019's
# minimum and maximum: a NaN operand gives NaN, and -0.0 is below +0.0. The kernels
# compute that (LLVM's llvm.minimum, min.NaN.f32 in PTX), and so does MLIR's folding of
# constants. numpy's minimum propagates NaN too but returns either zero for (-0.0, +0.0),
# which `1.0 / min(-0.0, 0.0)` turns into a different infinity. Equal operands are where
# the choice matters: take the one with the sign bit (min) or without it (max).

def minimum(a, b):
    """IEEE 754-2019 minimum of floats (Note [Signed zeros in min and max]); integers as np.minimum."""
    out = np.minimum(a, b)
    if out.dtype.kind != "f":
        return out
    return np.where(a == b, np.where(np.signbit(a), a, b), out).astype(out.dtype, copy=False)[()]


def maximum(a, b):
    """IEEE 754-2019 maximum of floats (Note [Signed zeros in min and max]); integers as np.maximum."""
    out = np.maximum(a, b)
    if out.dtype.kind != "f":
        return out
    return np.where(a == b, np.where(np.signbit(a), b, a), out).astype(out.dtype, copy=False)[()]


def _trunc_to_int(x):
    """int(x) of a float: toward zero, saturating at the i32 bounds, NaN to 0 (Note
    [Saturating int] in attnc/backend/hooks.py)."""
    if x.dtype == np.int64:
        return x
    x = x.astype(np.float64)        # exactly: the i32 bounds are not f32 values
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(x), 0.0, np.clip(np.trunc(x), -2.0 ** 31, 2.0 ** 31 - 1)).astype(np.int64)


CALLS = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": _rsqrt, "tanh": np.tanh, "sigmoid": _sigmoid, "floor": np.floor,
    "ceil": np.ceil, "abs": np.abs, "min": minimum, "max": maximum,
    "where": np.where, "int": _trunc_to_int, "float": lambda x: x.astype(DTYPES[FLOAT]),
}

BINARY = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide,
    "//": np.floor_divide, "%": np.remainder,
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
    "==": np.equal, "!=": np.not_equal, "and": np.logical_and, "or": np.logical_or,
}

UNARY = {"-": np.negative, "+": lambda x: x, "not": np.logical_not}


def _f32(x: np.ndarray) -> np.ndarray:
    """A float operand as the language's floats (f32; DTYPES[FLOAT] decides, which a test
    may widen to float64 to see what f32 rounding changes)."""
    return x.astype(DTYPES[FLOAT], copy=False)


class Evaluator:
    """Evaluates hook bodies given the run's dims and `param` arrays.

    `dims` maps every dim name to its size; `params` maps each param's name to its
    array, already int64 (i32 params) or float32 (f32 params).
    """

    def __init__(self, dims: Mapping[str, int], params: Mapping[str, np.ndarray]):
        self.dims = {name: np.asarray(size, dtype=np.int64) for name, size in dims.items()}
        self.params = dict(params)

    def hook(self, hook: Hook, args: Sequence[np.ndarray]) -> np.ndarray:
        """The hook's body with its parameters bound, in order, to `args`."""
        env = {**self.dims, **dict(zip(hook.params, args))}
        with np.errstate(all="ignore"):
            return self._eval(hook.body, env)

    def _eval(self, e: ast.Expr, env: dict[str, np.ndarray]) -> np.ndarray:
        value = np.asarray(self._node(e, env))
        dtype = DTYPES[e.ty]
        return value if value.dtype == dtype else value.astype(dtype)

    def _node(self, e: ast.Expr, env: dict[str, np.ndarray]):
        if isinstance(e, ast.Num):
            return e.value
        if isinstance(e, ast.Name):
            if e.id not in env and e.stands_for is not None:     # Note [Canonical dims] in sema.py
                return e.stands_for if isinstance(e.stands_for, int) else env[e.stands_for]
            return env[e.id]
        if isinstance(e, ast.Let):
            value = self._eval(e.value, env)
            return self._eval(e.body, {**env, e.name: value})
        if isinstance(e, ast.Index):
            return self._index(e, env)
        if isinstance(e, ast.Call):
            args = [self._eval(a, env) for a in e.args]
            if e.ty == FLOAT:                   # where's condition stays a bool
                args = [a if a.dtype == np.bool_ else _f32(a) for a in args]
            return CALLS[e.fn](*args)
        if isinstance(e, ast.Unary):
            return UNARY[e.op](self._eval(e.operand, env))
        if isinstance(e, ast.Binary):
            lhs, rhs = self._eval(e.lhs, env), self._eval(e.rhs, env)
            if e.ty == FLOAT or (e.op in COMPARISONS and FLOAT in (e.lhs.ty, e.rhs.ty)):
                lhs, rhs = _f32(lhs), _f32(rhs)
            return BINARY[e.op](lhs, rhs)
        raise TypeError(f"reference: no evaluation rule for {type(e).__name__}")

    def _index(self, e: ast.Index, env: dict[str, np.ndarray]) -> np.ndarray:
        """`param[idx, ...]`, each index clamped into [0, size - 1] (README: bounds-safe)."""
        table = self.params[e.name]
        idx = tuple(np.clip(self._eval(a, env), 0, size - 1)
                    for a, size in zip(e.args, table.shape))
        return table[idx]
