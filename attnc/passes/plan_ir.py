"""The L3-L5 schedule in the IR: `attn.role`, `attn.channel`, `attn.buffer` and
`attn.barrier` ops, written after an `attn.kernel` (or tiled `attn.attention`) op and read back.

Each op is the IR form of one frozen value of attnc/schedule (`Role`, `Channel`,
`Buffer`, `Barrier`): one attribute per field, so a pass reads what the previous
pass wrote, never recomputes it, and a researcher can edit the plan in a dumped
`.mlir` file and re-run the later plan passes and the verifier on it (`attnc opt`).
The lowerings build only the plan the plan passes make by default, and refuse
another (Note [The lowerings build the default plan] in lower_sm80.py).
"""
from __future__ import annotations

import dataclasses

from mlir import ir

from attnc.errors import AttncError
from attnc.ir import error_at, get_int, get_str
from attnc.schedule.alloc import Buffer, Tile
from attnc.schedule.recipes import SMEM_BYTES, Channel, Recipe, Role
from attnc.schedule.sync import Barrier

OP_OF = {Role: "attn.role", Channel: "attn.channel", Buffer: "attn.buffer", Barrier: "attn.barrier"}
TMEM_COLUMNS = {"sm_100a": 512}


def plan_ops(attention: ir.Operation, kind: type) -> list[ir.Operation]:
    """The plan ops of `kind` that belong to `attention` (same block, after it)."""
    name = OP_OF[kind]
    ops, seen = [], False
    for op in attention.block.operations:
        if op.operation == attention:
            seen = True
        elif seen and op.name in ("attn.attention", "attn.kernel"):
            break
        elif seen and op.name == name:
            ops.append(op.operation)
    return ops


def write(attention: ir.Operation, values) -> None:
    """Insert one plan op per value, before the terminator of the attention op's block."""
    block = attention.block
    with attention.context, attention.location, ir.InsertionPoint.at_block_terminator(block):
        for value in values:
            ir.Operation.create(OP_OF[type(value)], attributes=_attributes(value))


def read(attention: ir.Operation, kind: type) -> list:
    return [_value(op, kind) for op in plan_ops(attention, kind)]


def require(attention: ir.Operation, kind: type, pass_name: str, producer: str) -> list:
    values = read(attention, kind)
    if not values:
        raise error_at(attention, f"{pass_name} needs the {OP_OF[kind]} ops that {producer} "
                                  f"writes; run {producer} first")
    return values


def recipe_of(attention: ir.Operation, pass_name: str) -> Recipe:
    """The recipe as the IR states it: roles and channels from L3, budgets from the target."""
    target = required_attr(attention, "target", pass_name)
    roles = require(attention, Role, pass_name, "attn-warp-specialize")
    channels = read(attention, Channel)
    return Recipe(target, tuple(roles), tuple(channels), SMEM_BYTES[target],
                  TMEM_COLUMNS.get(target, 0))


def tile_of(attention: ir.Operation, pass_name: str) -> Tile:
    for key in ("block_m", "block_n"):
        required_attr(attention, key, pass_name, integer=True)
    sizes = {key: get_int(attention, key) for key in ("block_m", "block_n", "head_dim_qk", "head_dim_v")}
    sizes["q_tiles"] = get_int(attention, "q_tiles") if "q_tiles" in _names(attention) else 1
    for key, value in sizes.items():
        if value < 1:
            # an edited dump: name the value, not what the passes would make of it
            raise error_at(attention, f"{pass_name}: the tile has {key} = {value}; it must be at least 1")
    return Tile(sizes["block_m"], sizes["block_n"], sizes["head_dim_qk"], sizes["head_dim_v"],
                get_str(attention, "dtype"), sizes["q_tiles"])


def _names(op: ir.Operation) -> set[str]:
    return set(op.attributes)


def required_attr(attention, key: str, pass_name: str, integer: bool = False):
    """An attribute attn-tile records on `attention`, or an error naming the pass that needs it."""
    if key not in _names(attention):
        raise error_at(attention, f"{pass_name} needs the '{key}' attribute that attn-tile "
                                  f"records; run attn-tile first")
    return get_int(attention, key) if integer else get_str(attention, key)


def _attributes(value) -> dict[str, ir.Attribute]:
    attrs = {}
    for f in dataclasses.fields(value):
        x = getattr(value, f.name)
        if f.name == "alias_of":
            continue
        attrs[f.name] = _to_attr(0 if x is None else x)
    if isinstance(value, Buffer) and value.alias_of:
        attrs["alias_of"] = ir.StringAttr.get(value.alias_of)
    return attrs


def _to_attr(x) -> ir.Attribute:
    if isinstance(x, bool):
        return ir.BoolAttr.get(x)
    if isinstance(x, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), x)
    if isinstance(x, str):
        return ir.StringAttr.get(x)
    if isinstance(x, tuple):
        return ir.ArrayAttr.get([_to_attr(e) for e in x])
    raise AttncError(f"cannot store {x!r} in a plan op")


def _from_attr(attr: ir.Attribute):
    if isinstance(attr, ir.BoolAttr):
        return attr.value
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    if isinstance(attr, ir.StringAttr):
        return attr.value
    if isinstance(attr, ir.ArrayAttr):
        return tuple(_from_attr(e) for e in attr)
    return str(attr)


def _value(op: ir.Operation, kind: type):
    attrs = {name: _from_attr(op.attributes[name]) for name in op.attributes}
    kwargs = {}
    for f in dataclasses.fields(kind):
        if f.name in attrs:
            kwargs[f.name] = attrs[f.name]
        elif f.default is dataclasses.MISSING:
            raise error_at(op, f"{op.name} is missing its '{f.name}' attribute")
    if kind is Role and kwargs.get("regs") == 0:
        kwargs["regs"] = None
    if kind is Barrier and isinstance(kwargs.get("tx_bytes"), int):
        kwargs["tx_bytes"] = (kwargs["tx_bytes"],)      # a dump from before Note [Bytes per fill]
    return kind(**kwargs)
