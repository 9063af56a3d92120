"""attnc: a compiler for attention kernels.

`attnc.reference` and `attnc.frontend` import without MLIR (the GPU machine has
none); everything that builds IR imports MLIR lazily.
"""
from __future__ import annotations

from attnc.errors import AttncError, Span

__version__ = "0.1.0"
__all__ = ["AttncError", "Span", "__version__", "reference", "compile"]


def __getattr__(name: str):
    # `attnc.reference` is the submodule, made callable (attnc/reference.py), so
    # `attnc.reference(source, q=..., ...)` works whether or not it was imported yet.
    if name == "reference":
        import importlib
        return importlib.import_module("attnc.reference")
    raise AttributeError(f"module 'attnc' has no attribute '{name}'")


def compile(source, arch: str = "sm_80", **options):
    """Compile `.attn` source for `arch`; returns a callable kernel (attnc/driver.py)."""
    from attnc.driver import compile_kernel
    return compile_kernel(source, arch=arch, **options)
