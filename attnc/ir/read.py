"""Attn IR as `attnc opt` reads it (a --dump-dir file, perhaps edited by hand): parsed and
verified, integers wider than 64 bits refused, and every error located in the text given
or, where an op carries its `.attn` location, in that file (with its line read from disk)."""
from __future__ import annotations

from pathlib import Path

from attnc.errors import AttncError


def in_input(error: AttncError, filename: str, text: str) -> AttncError:
    """`error` located in the input: IR without locations (MLIR names it "-") in
    `filename`'s `text`, an unlocated one at the file, and with the source line read from
    disk where its location names a file there."""
    if error.filename in (None, "-"):
        error.filename, error.source = filename, text
    elif error.span is None:
        error.located(filename, text)
    _attach_source_from_disk(error)
    return error


def parse_ir(text: str, filename: str = "<input>"):
    """An attn IR module from text; a parse or verification error is an AttncError,
    located in the text, or in the `.attn` file when the failing op carries its
    location (MLIR names parsed text "-", hence `filename`)."""
    from mlir import ir
    from attnc.ir import error_at, filename_of, make_context
    ctx = make_context()
    try:
        with ctx, ir.Location.unknown():
            module = ir.Module.parse(text)
    except ir.MLIRError as e:
        diag = e.error_diagnostics[0] if e.error_diagnostics else None
        if diag is None:
            raise AttncError(str(e), filename=filename) from None
        error = error_at(diag.location, diag.message)
        if filename_of(diag.location) in (None, "-"):
            error.filename, error.source = filename, text
        _attach_source_from_disk(error)
        raise error from None
    try:
        _check_integer_widths(module.operation)
    except AttncError as e:
        raise in_input(e, filename, text) from None
    return module


def _check_integer_widths(root) -> None:
    """Refuse an integer attribute or value wider than 64 bits (a hand-edited `: i128`):
    attnc reads integers as 64-bit ones, and the bindings abort the process on a wider one."""
    from mlir import ir
    from attnc.ir import error_at

    found = []

    def visit(op):
        message = _too_wide(op, ir)
        if message:
            found.append((op, f"{message}: attnc reads integers of up to 64 bits"))
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    if found:
        raise error_at(*found[0])


def _too_wide(op, ir) -> str | None:
    """What of `op` is an integer wider than 64 bits: an attribute (or an element of one),
    a result or an argument of its regions' blocks; None if nothing."""
    def width(t) -> int:
        return t.width if isinstance(t, ir.IntegerType) else 0

    def attr_width(attr) -> int:
        if isinstance(attr, ir.ArrayAttr):
            return max((attr_width(a) for a in attr), default=0)
        if isinstance(attr, ir.DictAttr):
            return max((attr_width(attr[k].attr) for k in range(len(attr))), default=0)
        return width(attr.type) if isinstance(attr, ir.IntegerAttr) else 0

    for k in range(len(op.attributes)):
        named = op.attributes[k]
        if (w := attr_width(named.attr)) > 64:
            return f"attribute '{named.name}' of {op.name} holds an i{w}"
    for value in op.results:
        if width(value.type) > 64:
            return f"{op.name} gives an i{width(value.type)}"
    for arg in (a for region in op.regions for block in region.blocks for a in block.arguments):
        if width(arg.type) > 64:
            return f"a block argument of {op.name} is an i{width(arg.type)}"
    return None


def _attach_source_from_disk(e: AttncError) -> None:
    if e.source is not None or e.span is None:
        return
    try:
        e.located(e.filename, Path(e.filename).read_text())
    except (OSError, UnicodeDecodeError):
        pass
