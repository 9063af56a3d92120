"""One MLIR `Context` with the `attn` dialect loaded, and text <-> module helpers.

The dialect comes from `attn.irdl.mlir` through `irdl.load_dialects`. Loading it
twice into one context aborts the process (MLIR asserts on a duplicate op
registration), so `load_attn_dialect` checks first and is safe to call any
number of times.
"""
from __future__ import annotations

import functools
from importlib import resources

from mlir import ir
from mlir._mlir_libs import _mlir
from mlir.dialects import irdl

# Upstream dialects the attn IR uses; loaded eagerly so that ops built with
# `Operation.create` by name are registered ones.
UPSTREAM_DIALECTS = ("builtin", "func", "arith", "math", "gpu", "scf")

# Note [Dialect modules]: MLIR's bindings give an op of dialect D its Python class from
# the module `<prefix>.D` of the first search prefix that has one, and remember only a
# module found: for attn, which has no module in mlir.dialects, every access to an op
# (a walk's visit, an operand's owner) tried the import again, about two thousand
# failed imports per compile. attnc.ir.dialects.attn is found once and remembered.
DIALECT_MODULES = "attnc.ir.dialects"
if DIALECT_MODULES not in _mlir.globals.dialect_search_modules:
    _mlir.globals.append_dialect_search_prefix(DIALECT_MODULES)


@functools.lru_cache(maxsize=1)
def dialect_source() -> str:
    """The text of attn.irdl.mlir."""
    return resources.files("attnc.ir").joinpath("attn.irdl.mlir").read_text()


def is_attn_loaded(ctx: ir.Context) -> bool:
    return ctx.is_registered_operation("attn.attention")


def load_attn_dialect(ctx: ir.Context) -> None:
    """Load the attn dialect into `ctx` unless it is there already."""
    if is_attn_loaded(ctx):
        return
    with ctx, ir.Location.unknown():
        irdl.load_dialects(ir.Module.parse(dialect_source()))


def make_context() -> ir.Context:
    """A fresh Context with the upstream dialects attnc uses and the attn dialect."""
    ctx = ir.Context()
    for name in UPSTREAM_DIALECTS:
        ctx.dialects[name]
    load_attn_dialect(ctx)
    return ctx


def parse_module(text: str, ctx: ir.Context | None = None) -> ir.Module:
    """Parse attn IR text (e.g. a FileCheck input) in `ctx`, or in a new context."""
    ctx = ctx or make_context()
    load_attn_dialect(ctx)
    with ctx:
        return ir.Module.parse(text)


def to_text(module_or_op, *, locations: bool = True) -> str:
    """Printed IR; with `locations`, every op's `loc(...)` inline (no #loc aliases),
    so a line of IR says which `.attn` line it came from."""
    op = getattr(module_or_op, "operation", module_or_op)
    return op.get_asm(enable_debug_info=locations, use_local_scope=locations)
