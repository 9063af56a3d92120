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
from mlir.dialects import irdl

# Upstream dialects the attn IR uses; loaded eagerly so that ops built with
# `Operation.create` by name are registered ones.
UPSTREAM_DIALECTS = ("builtin", "func", "arith", "math", "gpu", "scf")


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
