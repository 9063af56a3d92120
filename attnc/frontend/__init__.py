"""The `.attn` frontend: parse, check, and (with MLIR present) lower to the attn dialect.

This package and `attnc.reference` import without MLIR: the GPU machine runs the
reference from here.
"""
from __future__ import annotations

import re
from pathlib import Path

from attnc.errors import AttncError
from attnc.frontend.parser import parse
from attnc.frontend.sema import check
from attnc.frontend.variant import Hook, Tensor, Variant

__all__ = ["parse", "check", "load", "load_file", "read_source", "Hook", "Tensor", "Variant"]


def load(source: str | bytes, filename: str = "<input>") -> Variant:
    """Parse and check `.attn` source; raises `AttncError` on the first mistake."""
    try:
        decl = parse(source, filename)
    except AttncError:
        if _MLIR.match(source if isinstance(source, str) else source.decode("utf-8", "replace")):
            raise AttncError(f"this is MLIR, not an .attn source: run passes on it with `attnc opt {filename} "
                             f"--pass-pipeline ...` (a dump's number says how many of its target's passes ran)",
                             filename=filename) from None
        raise
    text = source if isinstance(source, str) else source.decode("utf-8")
    return check(decl, text, filename)


# What an MLIR file (an `attnc compile --dump-dir` dump) starts with, past its comments.
_MLIR = re.compile(r"\ufeff?(?://[^\n]*\n|\s)*(?:module\b|func\.func\b|gpu\.module\b|\"builtin\.module\")")


def load_file(path: str | Path) -> Variant:
    return load(read_source(path), str(path))


def read_source(path: str | Path) -> bytes:
    """The bytes of a source file; a file that cannot be read is an `AttncError`
    ("attnc: error: ...", as the CLI prints refusals that have no source location)."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise AttncError(f"no such file: '{path}'", filename="attnc") from None
    except IsADirectoryError:
        raise AttncError(f"'{path}' is a directory, not a file", filename="attnc") from None
    except OSError as e:
        raise AttncError(f"cannot read '{path}': {e.strerror}", filename="attnc") from None
