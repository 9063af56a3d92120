"""A hook region as plain data: what the mask analysis reads instead of MLIR objects.

`read_region(block)` turns the single block of an `attn.attention` region into a
`Program`: its values in order (the block arguments first, then one per op result),
each with its op name, operand indices, result type and the attribute that matters
(a constant's value, a `cmpi` predicate, an `attn.dim` name). The analysis then is a
pure function of a `Program`, testable without building IR.
"""
from __future__ import annotations

from dataclasses import dataclass

ARG = "arg"
YIELDS = ("gpu.yield", "attn.yield")   # hook regions end in gpu.yield (attn.irdl.mlir)
EXTERNAL = -1          # an operand defined outside the region (a param tensor)



@dataclass(frozen=True)
class Node:
    op: str                     # 'arg' for a block argument, else the op name
    operands: tuple[int, ...]   # indices of earlier nodes (EXTERNAL for outside values)
    type: str                   # 'i1', 'i32', 'f32', ...
    attr: object = None         # constant value, cmpi predicate name, dim name, arg index
    loc: object = None          # the op's mlir Location (None for block arguments)


@dataclass(frozen=True)
class Program:
    nodes: tuple[Node, ...]
    result: int                 # the node the yield returns
    yield_loc: object = None


def read_region(block) -> Program:
    """The `Program` of an mlir Block ending in a one-operand yield."""
    index: dict = {}
    nodes: list[Node] = []
    for k, arg in enumerate(block.arguments):
        index[arg] = len(nodes)
        nodes.append(Node(ARG, (), str(arg.type), k))
    ops = list(block.operations)
    for op in ops[:-1]:
        operands = tuple(index.get(v, EXTERNAL) for v in op.operands)
        for res in op.results:
            index[res] = len(nodes)
            nodes.append(Node(op.name, operands, str(res.type), _attr(op), op.location))
    term = ops[-1]
    if term.name not in YIELDS or len(term.operands) != 1:
        raise ValueError(f"the region must end in a yield of one value, found {term.name}")
    return Program(tuple(nodes), index.get(term.operands[0], EXTERNAL), term.location)


def _attr(op) -> object:
    from mlir import ir

    attrs = op.attributes
    if op.name == "arith.constant":
        value = attrs["value"]
        if isinstance(value, ir.IntegerAttr):
            v = ir.IntegerAttr(value).value
            return bool(v) if str(ir.IntegerAttr(value).type) == "i1" else v
        return None
    if op.name == "arith.cmpi":
        from attnc.ir import cmpi_predicate
        return cmpi_predicate(op)
    if op.name == "attn.dim":
        return ir.StringAttr(attrs["name"]).value
    return None
