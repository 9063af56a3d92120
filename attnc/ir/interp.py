"""Evaluate one hook region of `attn.attention` on scalars, op by op as the L1 IR says.

`eval_region(block, args, dims=..., params=...)` runs the ops of a score_mod,
mask_mod or sink block in order and returns the value its `gpu.yield` returns.
Integers are i32 as the region types them (two's-complement wrap: the kernels compute
the values that could leave i32 in 64 bits instead, Note [Exact integers] in
attnc/backend/exact_ints.py, so they and the reference differ from this where an
integer passes 2^31), floats f32 (numpy float32 arithmetic),
booleans i1; `attn.dim` reads `dims`, `attn.param` reads `params[name]` with each
index clamped into range (the dialect's documented semantics). It is how the tests
check that the lowering means what the reference (attnc/reference_eval.py) means.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
from mlir import ir

from attnc.ir.ops import DIM, PARAM, YIELD
from attnc.reference_eval import maximum, minimum

_I32 = np.int32
_F32 = np.float32


def _i32(x) -> np.int32:
    return _I32(((int(x) + 2**31) % 2**32) - 2**31)


def _floordiv(a, b):
    return _i32(int(a) // int(b)) if int(b) else _i32(0)


def _fptosi(x) -> np.int32:
    """int(x): toward zero, saturating at the i32 bounds, NaN to 0 (Note [Saturating int])."""
    if np.isnan(x):
        return np.int32(0)
    return np.int32(min(max(np.trunc(np.float64(x)), -2.0 ** 31), 2.0 ** 31 - 1))


_INT_BINARY: dict[str, Callable] = {
    "arith.addi": lambda a, b: _i32(int(a) + int(b)),
    "arith.subi": lambda a, b: _i32(int(a) - int(b)),
    "arith.muli": lambda a, b: _i32(int(a) * int(b)),
    "arith.floordivsi": _floordiv,
    "arith.minsi": lambda a, b: min(a, b),
    "arith.maxsi": lambda a, b: max(a, b),
    "arith.andi": lambda a, b: a & b,
    "arith.ori": lambda a, b: a | b,
    "arith.xori": lambda a, b: a ^ b,
}
_FLOAT_BINARY: dict[str, Callable] = {
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
    "arith.divf": np.divide, "arith.minimumf": minimum, "arith.maximumf": maximum,
}
_UNARY: dict[str, Callable] = {
    "arith.negf": np.negative, "math.absf": np.abs, "math.absi": lambda x: _i32(abs(int(x))),
    "math.exp": np.exp, "math.exp2": np.exp2, "math.log": np.log, "math.log2": np.log2,
    "math.sqrt": np.sqrt, "math.rsqrt": lambda x: _F32(1) / np.sqrt(x), "math.tanh": np.tanh,
    "math.floor": np.floor, "math.ceil": np.ceil,
    "arith.sitofp": lambda x: _F32(x), "arith.fptosi": _fptosi,
}
_CMP: dict[str, Callable] = {
    "eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal,
    "sgt": np.greater, "sge": np.greater_equal,
    "OEQ": np.equal, "UNE": np.not_equal, "OLT": np.less, "OLE": np.less_equal,
    "OGT": np.greater, "OGE": np.greater_equal,
}


def eval_region(block: ir.Block, args, *, dims: Mapping[str, int] | None = None,
                params: Mapping[str, np.ndarray] | None = None, param_names=None):
    """The value `block` yields for block arguments `args`.

    `params` maps a param name to its array; `param_names` maps each param tensor
    Value (a function argument) to that name, as the `params` attribute orders them.
    """
    env: dict = {}
    for arg, value in zip(block.arguments, args):
        env[arg] = _F32(value) if isinstance(arg.type, ir.F32Type) else _typed(arg.type, value)
    with np.errstate(all="ignore"):        # f32 overflow and log(0) are IEEE results
        for op in block.operations:
            if op.name == YIELD:
                return env[op.operands[0]]
            env[op.results[0]] = _step(op, op.name, env, dims or {}, params or {},
                                       param_names or {})
    raise ValueError("the region has no terminator")


def _typed(ty: ir.Type, value):
    if isinstance(ty, ir.IntegerType) and ty.width == 1:
        return bool(value)
    return _i32(value)


def _step(op, name: str, env: dict, dims, params, param_names):
    operands = [env.get(v) for v in op.operands]
    if name == "arith.constant":
        return _constant(op)
    if name in _INT_BINARY:
        return _INT_BINARY[name](*operands)
    if name in _FLOAT_BINARY:
        return _F32(_FLOAT_BINARY[name](*operands))
    if name in _UNARY:
        return _UNARY[name](operands[0])
    if name in ("arith.cmpi", "arith.cmpf"):
        predicate = ir.IntegerAttr(op.attributes["predicate"]).value
        return bool(_CMP[_predicate_name(name, predicate)](*operands))
    if name == "arith.select":
        return operands[1] if operands[0] else operands[2]
    if name == DIM:
        return _i32(dims[ir.StringAttr(op.attributes["name"]).value])
    if name == PARAM:
        return _param(op, operands[1:], params, param_names)
    raise NotImplementedError(f"the region interpreter has no rule for {name}")


def _predicate_name(op_name: str, value: int) -> str:
    from mlir.dialects import arith
    enum = arith.CmpIPredicate if op_name == "arith.cmpi" else arith.CmpFPredicate
    return enum(value).name


def _constant(op):
    attr = op.attributes["value"]
    if isinstance(attr, ir.FloatAttr):
        return _F32(attr.value)
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    return _i32(ir.IntegerAttr(attr).value)


def _param(op, indices, params, param_names):
    table = np.asarray(params[param_names[op.operands[0]]])
    idx = tuple(int(np.clip(int(i), 0, size - 1)) for i, size in zip(indices, table.shape))
    value = table[idx]
    return _F32(value) if table.dtype.kind == "f" else _i32(value)
