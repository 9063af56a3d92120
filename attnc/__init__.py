"""attnc: a compiler for attention kernels.

`attnc.reference` and `attnc.frontend` import without MLIR (the GPU machine has
none); everything that builds IR imports MLIR lazily.
"""
from __future__ import annotations

from attnc.errors import AttncError, Span

__version__ = "0.1.0"
__all__ = ["AttncError", "Span", "__version__", "reference", "compile"]


def reference(source, **tensors):
    """The numpy float64 meaning of a `.attn` variant (see attnc/reference.py)."""
    from attnc.reference import reference as _reference
    return _reference(source, **tensors)


def compile(source, arch: str = "sm_80", **options):
    """Compile `.attn` source for `arch`; returns a callable kernel (attnc/driver.py)."""
    from attnc.driver import compile_kernel
    return compile_kernel(source, arch=arch, **options)
