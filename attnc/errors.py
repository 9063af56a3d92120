"""The one user-facing error type of attnc (and its warning).

Every mistake a user can make -- in the `.attn` source, in a compile option, in a
pass that finds a plan infeasible -- is raised as `AttncError` carrying a source
span, and rendered the way compilers do:

    gemma2.attn:7:22: error: unknown name 'x'
      score_mod(s, b, h, i, j) = x * s
                                 ^

Compiler frames never reach the user: the CLI prints `render()` and exits 1.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A 1-based (line, column) range in a source file; `end_*` is exclusive."""

    line: int
    col: int
    end_line: int | None = None
    end_col: int | None = None

    @staticmethod
    def of(meta) -> "Span":
        """The span of a lark `Tree.meta` or `Token`."""
        line = getattr(meta, "line", None) or 1
        col = getattr(meta, "column", None) or 1
        return Span(line, col, getattr(meta, "end_line", None), getattr(meta, "end_column", None))


class AttncError(Exception):
    """A user-facing error: a message, optionally located in a source file."""

    severity = "error"

    def __init__(self, message: str, span: Span | None = None, *,
                 filename: str = "<input>", source: str | None = None, note: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.filename = filename
        self.source = source
        self.note = note        # said after the error, at its place: which op of the IR it is at

    def located(self, filename: str, source: str) -> "AttncError":
        """Attach the file this error belongs to, unless it names another (an op of a
        `.mlir` file, whose location is in that file)."""
        if self.source is None and self.filename in ("<input>", filename):
            self.filename, self.source = filename, source
        return self

    def render(self) -> str:
        if self.span is None:
            return f"{self.filename}: {self.severity}: {self.message}" + self._note(self.filename)
        place = f"{self.filename}:{self.span.line}:{self.span.col}"
        head = f"{place}: {self.severity}: {self.message}"
        line_text = _source_line(self.source, self.span.line)
        if line_text is None:
            return head + self._note(place)
        line_text, col = _window(line_text, self.span.col)
        return f"{head}\n{line_text}\n{' ' * (col - 1)}^" + self._note(place)

    def _note(self, place: str) -> str:
        return f"\n{place}: note: {self.note}" if self.note else ""

    def __str__(self) -> str:
        return self.render()


class AttncWarning(AttncError, UserWarning):
    """A user-facing warning about the source (something declared and never used): rendered
    as an error is, never raised. The CLI prints it; `attnc.compile` issues it with
    `warnings.warn`."""

    severity = "warning"


_WINDOW = 100


def _window(text: str, col: int) -> tuple[str, int]:
    """Clip a very long source line to a window around `col` (1-based)."""
    if len(text) <= 2 * _WINDOW:
        return text, col
    start = max(0, col - 1 - _WINDOW // 2)
    clipped = text[start:start + _WINDOW]
    prefix = "..." if start > 0 else ""
    suffix = "..." if start + _WINDOW < len(text) else ""
    return prefix + clipped + suffix, col - start + len(prefix)


def _source_line(source: str | None, line: int) -> str | None:
    if source is None:
        return None
    lines = source.split("\n")
    if not 1 <= line <= len(lines):
        return None
    text = lines[line - 1].rstrip("\r")
    # Keep the caret under the right character: tabs and control characters
    # become one printable character each.
    return "".join(c if c.isprintable() else (" " if c == "\t" else "?") for c in text)


def spelled(choices) -> str:
    """`choices` as an error message lists them: (1, 2, 3) -> "1, 2 or 3"."""
    words = [str(c) for c in choices]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
