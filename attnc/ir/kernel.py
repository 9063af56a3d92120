"""What the passes after attn-tile and the lowerings ask of an attn.kernel (L2), in one
place: where a hook's region is, and the variant the op describes.

    hook_holder(kernel, MASK_MOD)     # the first attn.mask op of the program
    program_ops(kernel, names)        # the program's ops of those names, in order
    hook_blocks(op)                   # the blocks of the hooks op has (L1 or L2)
    kernel_variant(op)                # a KernelVariant: name, dtypes, shapes, dims, params, ...

Note [The variant from the IR]: the lowerings build the kernel from what the op says,
never from the `.attn` source the module may carry. The frontend writes every fact the
backend needs as an attribute (attnc/frontend/lower.py: dtype, head dims, scale, dims,
the q/k/v and param shapes, param dtypes, output names) and the output dtypes are the
function's result types, so `kernel_variant` rebuilds from them the subset of
`attnc.frontend.Variant` the backend reads; an attribute edited in a dump is compiled
as edited.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from attnc.errors import Span
from attnc.frontend.variant import Tensor
from attnc.ir.locations import error_at, span_of
from attnc.ir.ops import ATTENTION, MASK_MOD, REGION_NAMES, SCORE_MOD, SINK, get_int, get_shape, get_str

HOLDERS = {SCORE_MOD: "attn.score_mod", MASK_MOD: "attn.mask", SINK: "attn.finalize"}
_HAS = {SCORE_MOD: "has_score_mod", MASK_MOD: "has_mask_mod", SINK: "has_sink"}


def hook_holder(kernel: ir.Operation, index: int) -> ir.Operation:
    """The first op of the kernel's program holding hook `index` (in program order)."""
    found = []

    def visit(op):
        if op.name == HOLDERS[index]:
            found.append(op.operation)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    for op in kernel.regions[0].blocks[0].operations:
        if found:
            break
        op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    if not found:
        raise error_at(kernel, f"attn.kernel has no {HOLDERS[index]} op holding its {REGION_NAMES[index]}")
    return found[0]


def program_ops(kernel: ir.Operation, names) -> dict[str, list[ir.Operation]]:
    """The ops of the kernel's program named in `names`, by name, each list in program order
    (one walk)."""
    found: dict[str, list[ir.Operation]] = {name: [] for name in names}

    def visit(op):
        if op.name in found:
            found[op.name].append(op.operation)
        return ir.WalkResult.ADVANCE

    for op in kernel.regions[0].blocks[0].operations:
        op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def hook_indices(op: ir.Operation) -> list[int]:
    """The hooks `op` holds a region of: all three on attn.attention (absent ones as
    their defaults); on attn.kernel those whose op is in the program."""
    if op.name == ATTENTION:
        return [SCORE_MOD, MASK_MOD, SINK]
    return [k for k in (SCORE_MOD, MASK_MOD, SINK) if _holds(op, k)]


def _holds(kernel: ir.Operation, index: int) -> bool:
    from attnc.errors import AttncError
    try:
        hook_holder(kernel, index)
    except AttncError:
        return False
    return True


def hook_blocks(op: ir.Operation) -> list[ir.Block]:
    from attnc.ir.ops import region_block
    return [region_block(op, k) for k in hook_indices(op)]


# --- the variant ------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelVariant:
    """The variant an attn.attention or attn.kernel describes (Note [The variant from the
    IR]): the fields and properties of `attnc.frontend.Variant` the backend reads."""

    name: str
    q: Tensor
    k: Tensor
    v: Tensor
    params: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    dims: tuple[str, ...]
    scale: float
    source: str
    filename: str
    span: Span

    batch = property(lambda self: self.q.shape[0])
    heads = property(lambda self: self.q.shape[1])
    heads_kv = property(lambda self: self.k.shape[1])
    seq_q = property(lambda self: self.q.shape[2])
    seq_k = property(lambda self: self.k.shape[2])
    head_dim_qk = property(lambda self: self.q.shape[3])
    head_dim_v = property(lambda self: self.v.shape[3])
    dtype = property(lambda self: self.q.dtype)
    has_lse = property(lambda self: self.output("lse") is not None)
    inputs = property(lambda self: (self.q, self.k, self.v, *self.params))

    def param(self, name: str) -> Tensor | None:
        return next((p for p in self.params if p.name == name), None)

    def output(self, name: str) -> Tensor | None:
        return next((t for t in self.outputs if t.name == name), None)


def kernel_variant(op: ir.Operation, source: str = "", filename: str = "<input>") -> KernelVariant:
    """The variant of `op` from its attributes and result types; `source` and
    `filename` only locate errors and fill the bundle's record of the source."""
    span = span_of(op.location) or Span(1, 1)
    dtype = get_str(op, "dtype")
    _check_types(op, dtype)
    names, dtypes = _strings(op, "params"), _strings(op, "param_dtypes")
    shapes = [_shape(op, "param_shapes", s) for s in _array(op, "param_shapes")]
    if not len(names) == len(dtypes) == len(shapes):
        raise error_at(op, f"attributes params, param_dtypes and param_shapes describe {len(names)}, {len(dtypes)} "
                           f"and {len(shapes)} params: they must agree")
    params = tuple(Tensor(n, "param", d, s, span) for n, d, s in zip(names, dtypes, shapes))
    outputs = tuple(Tensor(n, n, _element(r.type), _shape_of(r.type, get_shape(op, "q_shape"), n), span)
                    for n, r in zip(_strings(op, "outputs"), op.results))
    name = get_str(op, "variant")
    if not name.isidentifier():
        raise error_at(op, f'attribute variant = "{name}": a variant\'s name is an identifier (the kernel\'s symbol '
                           f'is made of it)')
    return KernelVariant(
        name=name,
        q=Tensor("q", "q", dtype, get_shape(op, "q_shape"), span),
        k=Tensor("k", "k", dtype, get_shape(op, "k_shape"), span),
        v=Tensor("v", "v", dtype, get_shape(op, "v_shape"), span),
        params=params, outputs=outputs, dims=_strings(op, "dims"),
        scale=ir.FloatAttr(op.attributes["scale"]).value, source=source, filename=filename, span=span)


def _check_types(op: ir.Operation, dtype: str) -> None:
    """The attributes the kernel is built from agree with the operands' types: a dump
    edited in one place and not the other is refused, naming both."""
    for k, (name, shape_key) in enumerate((("q", "q_shape"), ("k", "k_shape"), ("v", "v_shape"))):
        t = ir.RankedTensorType(op.operands[k].type)
        element = str(t.element_type)
        if element != dtype:
            raise error_at(op, f"attribute dtype = \"{dtype}\" but {name} is a tensor of {element}: "
                               f"they must agree")
        shape = get_shape(op, shape_key)
        fixed = [(axis, size) for axis, size in enumerate(shape) if isinstance(size, int)]
        for axis, size in fixed:
            if axis >= t.rank or t.shape[axis] != size:
                raise error_at(op, f"attribute {shape_key} gives axis {axis} of {name} the size {size}, "
                                   f"but {name}'s type is {t}: they must agree")
    for key, shape_key in (("head_dim_qk", "q_shape"), ("head_dim_v", "v_shape")):
        if get_int(op, key) != get_shape(op, shape_key)[3]:
            raise error_at(op, f"attribute {key} = {get_int(op, key)} but {shape_key} ends in "
                               f"{get_shape(op, shape_key)[3]}: they must agree")


def _array(op: ir.Operation, key: str) -> list[ir.Attribute]:
    """The elements of array attribute `key` of `op`, or an error at `op`."""
    attr = op.attributes[key] if key in op.attributes else None
    if not isinstance(attr, ir.ArrayAttr):
        raise error_at(op, f"attribute '{key}' of {op.name} must be an array, got "
                           f"{attr if attr is not None else 'none'} (the frontend records it from the .attn source)")
    return list(attr)


def _strings(op: ir.Operation, key: str) -> tuple[str, ...]:
    items = _array(op, key)
    if not all(isinstance(a, ir.StringAttr) for a in items):
        raise error_at(op, f"attribute '{key}' of {op.name} must be an array of strings, got {op.attributes[key]}")
    return tuple(ir.StringAttr(a).value for a in items)


def _shape(op: ir.Operation, key: str, attr: ir.Attribute) -> tuple:
    """A param's shape in `key`: an array of dim names and sizes."""
    if not isinstance(attr, ir.ArrayAttr) or not all(isinstance(a, (ir.StringAttr, ir.IntegerAttr)) for a in attr):
        raise error_at(op, f"attribute '{key}' of {op.name} must hold arrays of dim names and sizes, got {attr}")
    return tuple(a.value for a in attr)


def _element(t: ir.Type) -> str:
    element = str(ir.RankedTensorType(t).element_type)
    return {"bf16": "bf16", "f16": "f16", "f32": "f32", "i32": "i32"}.get(element, element)


def _shape_of(t: ir.Type, q_shape: tuple, name: str) -> tuple:
    """An output's shape in dim names: o is q's rows by v's width, lse q's rows (the
    frontend's rule; the result type gives the fixed sizes)."""
    sizes = ir.RankedTensorType(t).shape
    named = q_shape[:3]
    return tuple(named) + tuple(sizes[3:]) if name == "o" else tuple(named)
