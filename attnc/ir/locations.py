"""Source positions in the IR: DSL spans to MLIR locations and back.

Every op the frontend builds carries `loc("file.attn":line:col)`; passes keep the
location of the op they rewrite. `span_of` reads it back so that a pass can raise
an `AttncError` that renders with the user's `.attn` line and a caret.
"""
from __future__ import annotations

from mlir import ir

from attnc.errors import AttncError, Span

# The attention's ops (ops.py's ATTENTION and KERNEL), whose location every op a pass
# makes from them shares
_ATTENTIONS = ("attn.attention", "attn.kernel")


def file_loc(filename: str, span: Span) -> ir.Location:
    """The MLIR location of `span` in `filename` (needs an active Context)."""
    return ir.Location.file(filename, span.line, span.col)


def span_of(op_or_loc) -> Span | None:
    """The `.attn` span of an op (or Location), or None when it has none.

    An op without a file location (one a pass built with an unknown location)
    answers with the nearest enclosing op that has one.
    """
    found = _file_location_of(op_or_loc)
    if found is None:
        return None
    return Span(found.start_line, found.start_col)


def filename_of(op_or_loc) -> str | None:
    found = _file_location_of(op_or_loc)
    return found.filename if found is not None else None


def error_at(op_or_loc, message: str, note: str | None = None) -> AttncError:
    """An AttncError located where `op_or_loc` came from in the `.attn` source, with
    `note` said after it; by default, for an op whose line does not tell it -- every op a
    pass makes from the attention has the attention's line -- which op it is
    (`op_in_words`)."""
    found = _file_location_of(op_or_loc)
    if note is None and found is not None and not isinstance(op_or_loc, ir.Location) \
            and _at_its_attention(getattr(op_or_loc, "operation", op_or_loc), found):
        note = op_in_words(op_or_loc)
    if found is None:
        return AttncError(message, note=note)
    return AttncError(message, Span(found.start_line, found.start_col), filename=found.filename, note=note)


# The attributes that tell an op from the others of its name, in this order
_IDENTITY = ("name", "kind", "operand", "tile", "kv_blocks")


def op_in_words(op) -> str:
    """`op` as a note names it: its name, the first of its identifying attributes (or,
    without one, the name of what its first operand is: the mbarrier an arrive or wait is
    on, the channel a slot op reads), and the pass that made it (the outermost pass name
    of its location: a pass's ops carry its name around the source location, design.md
    section 3)."""
    from attnc.ir.ops import defining_op

    op = getattr(op, "operation", op)
    key = next((k for k in _IDENTITY if k in op.attributes), None)
    words = f"at {op.name}" + (f" ({key} = {op.attributes[key]})" if key else "")
    source = defining_op(op.operands[0]) if key is None and len(op.operands) else None
    if source is not None and "name" in source.attributes:
        name = source.attributes["name"]
        words += f" (on {name.value if isinstance(name, ir.StringAttr) else name})"
    made = _maker(op.location)
    return words + (f", made by {made}" if made else "")


def _at_its_attention(op, found) -> bool:
    """Whether `op`, inside an attn.attention or attn.kernel, has that op's location
    (`found`, its own)."""
    if op.name in _ATTENTIONS:
        return False
    parent = op.parent
    while parent is not None and parent.name not in _ATTENTIONS:
        parent = parent.parent
    if parent is None:
        return False
    outer = _file_location_of(parent)
    return outer is not None and (outer.filename, outer.start_line, outer.start_col) == \
        (found.filename, found.start_line, found.start_col)


def _maker(loc: ir.Location) -> str | None:
    """The pass whose name wraps `loc`, the outermost (`attn-...`), or None."""
    if loc.is_a_name():
        name = loc.name_str
        return name if name.startswith("attn-") else _maker(loc.child_loc)
    return None


def _file_location_of(op_or_loc):
    if isinstance(op_or_loc, ir.Location):
        return _file_location(op_or_loc)
    op = getattr(op_or_loc, "operation", op_or_loc)
    while op is not None:
        found = _file_location(op.location)
        if found is not None:
            return found
        op = op.parent
    return None


def _file_location(loc: ir.Location):
    if loc.is_a_file():
        return loc
    if loc.is_a_name():
        return _file_location(loc.child_loc)
    if loc.is_a_callsite():
        return _file_location(loc.callee)
    if loc.is_a_fused():
        for inner in loc.locations:
            found = _file_location(inner)
            if found is not None:
                return found
    return None
