"""A small concrete interpreter of `arith` functions, to check emitted code.

`compile_function(func_op)` turns a single-block `func.func` of integer `arith` ops
(what `to_arith.py` emits) into a Python callable on ints. Results wrap to their
bit width as in MLIR; `floordivsi` rounds down; a division by zero raises (the
emitted code guards every divisor it cannot prove non-zero).
"""
from __future__ import annotations

from typing import Callable

_CMP = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "slt": lambda a, b: a < b, "sle": lambda a, b: a <= b,
    "sgt": lambda a, b: a > b, "sge": lambda a, b: a >= b,
}

_BINARY = {
    "arith.addi": lambda a, b: a + b,
    "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b,
    "arith.floordivsi": lambda a, b: a // b,
    "arith.minsi": min,
    "arith.maxsi": max,
    "arith.andi": lambda a, b: a & b,
    "arith.ori": lambda a, b: a | b,
    "arith.xori": lambda a, b: a ^ b,
}


def _wrap(value: int, width: int) -> int:
    """Two's complement wrap to `width` bits (i1 is 0/1)."""
    if width == 1:
        return value & 1
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


def _width(ty) -> int:
    return int(str(ty)[1:])


def compile_function(func_op) -> Callable[..., tuple[int, ...]]:
    """A callable running `func_op` (an mlir func.func) on Python ints."""
    from mlir import ir

    from attnc.ir import cmpi_predicate

    block = func_op.regions[0].blocks[0]
    slot: dict = {}
    for k, arg in enumerate(block.arguments):
        slot[arg] = k
    steps: list[tuple] = []
    returns: list[int] = []
    for op in block.operations:
        name = op.name
        ins = [slot[v] for v in op.operands]
        if name == "func.return":
            returns = ins
            break
        out = len(slot)
        slot[op.results[0]] = out
        width = _width(op.results[0].type)
        if name == "arith.constant":
            value = ir.IntegerAttr(op.attributes["value"]).value
            steps.append((lambda env, v=_wrap(value, width): v, out))
        elif name in _BINARY:
            f = _BINARY[name]
            steps.append((lambda env, f=f, a=ins[0], b=ins[1], w=width: _wrap(f(env[a], env[b]), w), out))
        elif name == "arith.cmpi":
            f = _CMP[cmpi_predicate(op)]
            steps.append((lambda env, f=f, a=ins[0], b=ins[1]: int(f(env[a], env[b])), out))
        elif name == "arith.select":
            steps.append((lambda env, c=ins[0], a=ins[1], b=ins[2]: env[a] if env[c] else env[b], out))
        elif name in ("arith.extsi", "arith.trunci"):
            steps.append((lambda env, a=ins[0], w=width: _wrap(env[a], w), out))
        else:
            raise NotImplementedError(f"interp: unsupported op {name}")
    nargs = len(block.arguments)

    def run(*args: int) -> tuple[int, ...]:
        if len(args) != nargs:
            raise TypeError(f"expected {nargs} arguments, got {len(args)}")
        env = list(args) + [0] * len(steps)
        for step, out in steps:
            env[out] = step(env)
        return tuple(env[r] for r in returns)
    return run
