"""Names and small accessors of the attn dialect, shared by the frontend and passes.

Attribute readers raise `AttncError` at the op's location when an attribute is
missing or has the wrong kind, so a pass fed hand-written IR fails with a message
rather than a Python exception.
"""
from __future__ import annotations

from mlir import ir

from attnc.ir.locations import error_at

ATTENTION = "attn.attention"
KERNEL = "attn.kernel"       # the L2 op attn-tile puts in attn.attention's place
DIM = "attn.dim"
PARAM = "attn.param"
YIELD = "gpu.yield"          # see Note [Region terminators] in attn.irdl.mlir
GPU_MODULE = "gpu.module"    # where the lowering puts the kernels (upstream dialects only)

SCORE_MOD, MASK_MOD, SINK = 0, 1, 2
REGION_NAMES = ("score_mod", "mask_mod", "sink")


def attention_ops(root) -> list[ir.Operation]:
    """Every variant op under `root` (a module or any op), in program order: the
    attn.attention ops of L1 and the attn.kernel ops attn-tile made of them, which
    keep their attributes (attnc/ir/kernel.py answers what else a pass asks of one).
    The walk enters neither a variant op (none nests another) nor a gpu.module: the
    lowering's kernels are thousands of ops, and hold no variant."""
    found: list[ir.Operation] = []

    def visit(op):
        name = op.name
        if name in (ATTENTION, KERNEL):
            found.append(op.operation)
            return ir.WalkResult.SKIP
        return ir.WalkResult.SKIP if name == GPU_MODULE else ir.WalkResult.ADVANCE

    getattr(root, "operation", root).walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def region_block(op: ir.Operation, index: int) -> ir.Block:
    """The single block of hook region `index` (SCORE_MOD, MASK_MOD or SINK), self-contained
    (Note [Hoisted constants]): attn.attention's region, or that of the op of an
    attn.kernel's program that holds the hook (attnc/ir/kernel.py)."""
    if op.name == KERNEL:
        from attnc.ir.kernel import hook_holder
        op = hook_holder(op, index)
        index = 0
    block = op.regions[index].blocks[0]
    _sink_constants(op, block)
    return block


# Note [Hoisted constants]: the hook regions are not isolated from above (IRDL cannot say
# so), and upstream passes such as canonicalize or cse, run before the lowering in a
# user's pipeline, hoist their constants into the enclosing function. The analysis then
# saw unknown values (a window mask lost its band: more tiles masked than needed) and the
# lowering produced IR that failed verification. Reading a region sinks such constants
# back: each is cloned at the top of the region, which then uses its copy. (The param
# tensors a region reads are the function's arguments, from outside by design.)
def _sink_constants(op: ir.Operation, block: ir.Block) -> None:
    defined = set(block.arguments) | {r for o in block.operations for r in o.results}
    copies: dict = {}
    for user in list(block.operations):
        for k, value in enumerate(user.operands):
            if value in defined:
                continue
            owner = value.owner
            if isinstance(owner, ir.Block) and isinstance(value.type, ir.RankedTensorType):
                continue        # a param tensor (the function's argument)
            if isinstance(owner, ir.Block) or owner.name != "arith.constant":
                raise error_at(user, f"this op of the {op.name} op's hook region reads a value defined outside "
                                     f"the region ({value.type}); a hook reads only its arguments, its own "
                                     f"values, constants and the param tensors")
            if value not in copies:
                copies[value] = owner.clone(ir.InsertionPoint.at_block_begin(block)).results[0]
            user.operands[k] = copies[value]


def yielded(block: ir.Block) -> ir.Value:
    """The value a hook region returns (the operand of its terminator)."""
    return list(block.operations)[-1].operands[0]


# --- attribute access ------------------------------------------------------------------
def get_int(op: ir.Operation, key: str) -> int:
    attr = _get(op, key)
    if not isinstance(attr, ir.IntegerAttr):
        raise error_at(op, f"attribute '{key}' of {op.name} must be an integer, got {attr}")
    return attr.value


def planned_target(root) -> str | None:
    """The target attn-tile gave the first attn.attention under `root`; None before
    attn-tile, or without an attention op."""
    ops = attention_ops(root)
    return get_str(ops[0], "target") if ops and "target" in ops[0].attributes else None


def get_str(op: ir.Operation, key: str) -> str:
    attr = _get(op, key)
    if not isinstance(attr, ir.StringAttr):
        raise error_at(op, f"attribute '{key}' of {op.name} must be a string, got {attr}")
    return attr.value


def get_bool(op: ir.Operation, key: str) -> bool:
    attr = _get(op, key)
    if not isinstance(attr, ir.BoolAttr):
        raise error_at(op, f"attribute '{key}' of {op.name} must be true or false, got {attr}")
    return attr.value


def get_shape(op: ir.Operation, key: str) -> tuple[str | int, ...]:
    """A shape attribute: an array of dim names (strings) and fixed sizes (integers)."""
    attr = _get(op, key)
    if not isinstance(attr, ir.ArrayAttr):
        raise error_at(op, f"attribute '{key}' of {op.name} must be an array, got {attr}")
    return tuple(a.value for a in attr)


def set_int(op: ir.Operation, key: str, value: int) -> None:
    with op.context:
        op.attributes[key] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


def set_str(op: ir.Operation, key: str, value: str) -> None:
    with op.context:
        op.attributes[key] = ir.StringAttr.get(value)


def cmpi_predicate(op: ir.Operation) -> str:
    """The predicate of an `arith.cmpi` by name: 'eq', 'ne', 'slt', ..., 'uge'."""
    from mlir.dialects import arith
    return arith.CmpIPredicate(ir.IntegerAttr(op.attributes["predicate"]).value).name


def depends_on(block: ir.Block, *arg_indices: int) -> set:
    """The values of `block` (its arguments at `arg_indices` and every result computed
    from them, the terminator's operands included) that depend on those arguments."""
    tainted = {block.arguments[k] for k in arg_indices}
    for op in block.operations:
        if any(v in tainted for v in op.operands):
            tainted.update(op.results)
    return tainted


def defining_op(value: ir.Value) -> ir.Operation | None:
    """The operation that defines `value`, or None for a block argument."""
    owner = value.owner
    if not isinstance(owner, ir.Operation) and hasattr(owner, "operation"):
        owner = owner.operation
    return owner if isinstance(owner, ir.Operation) else None


def int_constant(value: ir.Value) -> int | None:
    """The Python int of a value an integer `arith.constant` defines (an i1 as 0 or 1),
    else None."""
    owner = defining_op(value)
    if owner is None or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    if isinstance(attr, ir.BoolAttr):          # i1 constants print as true/false
        return int(attr.value)
    if not isinstance(attr, ir.IntegerAttr):
        return None
    v = ir.IntegerAttr(attr).value
    return v & 1 if str(value.type) == "i1" else v


def _get(op: ir.Operation, key: str) -> ir.Attribute:
    if key not in op.attributes:
        raise error_at(op, f"{op.name} has no '{key}' attribute")
    return op.attributes[key]


def with_iter_args(loop: ir.Operation, extra: list) -> ir.Operation:
    """`loop` (an scf.for) again, carrying the `extra` values more: its attributes kept,
    its body's ops moved over and the uses of its arguments and results rebound to the new
    loop's (the body's terminator still yields what it did: the caller adds the new
    values). Returns the new loop."""
    from mlir.dialects import scf

    with ir.InsertionPoint(loop), loop.location:
        new = scf.ForOp(loop.operands[0], loop.operands[1], loop.operands[2], [*list(loop.operands)[3:], *extra])
    for name in loop.attributes:
        new.operation.attributes[name] = loop.attributes[name]
    body = loop.regions[0].blocks[0]
    for op in list(body.operations):
        new.body.append(op.operation)
    for old, fresh in zip(body.arguments, new.body.arguments):
        old.replace_all_uses_with(fresh)
    for old, fresh in zip(loop.results, new.results):
        old.replace_all_uses_with(fresh)
    loop.erase()
    return new
