"""The `.attn` frontend: parse, check, and (with MLIR present) lower to the attn dialect.

This package and `attnc.reference` import without MLIR: the GPU machine runs the
reference from here.
"""
from __future__ import annotations

from pathlib import Path

from attnc.frontend.parser import parse
from attnc.frontend.sema import check
from attnc.frontend.variant import Hook, Tensor, Variant

__all__ = ["parse", "check", "load", "load_file", "Hook", "Tensor", "Variant"]


def load(source: str | bytes, filename: str = "<input>") -> Variant:
    """Parse and check `.attn` source; raises `AttncError` on the first mistake."""
    decl = parse(source, filename)
    text = source if isinstance(source, str) else source.decode("utf-8")
    return check(decl, text, filename)


def load_file(path: str | Path) -> Variant:
    path = Path(path)
    return load(path.read_bytes(), str(path))
