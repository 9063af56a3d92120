"""Shared helpers for the frontend tests: load a source and get its one diagnostic.

`expect_error` is the single place that enforces the error contract of the
frontend (style.md, convention 5): nothing but `AttncError` escapes, the error
is located, and `render()` shows `file:line:col: error: message`, the source
line and a caret under the column.
"""
from __future__ import annotations

import time
import traceback

import pytest

from attnc.errors import AttncError
from attnc.frontend import load

WINDOW_LIMIT = 200   # errors.py clips longer source lines to a window around the caret


def expect_error(source: str | bytes, filename: str = "t.attn", *, limit_s: float = 0.5) -> AttncError:
    """Load `source`, which must be rejected with an `AttncError` within `limit_s`."""
    start = time.perf_counter()
    try:
        load(source, filename)
    except AttncError as e:
        err = e
    except BaseException as e:  # noqa: BLE001 -- any other escape is the failure we test for
        tb = "".join(traceback.format_exception(e))
        pytest.fail(f"{type(e).__name__} escaped instead of AttncError:\n{tb}")
    else:
        pytest.fail("the source was accepted, expected an error")
    elapsed = time.perf_counter() - start
    assert elapsed < limit_s, f"took {elapsed:.2f}s (limit {limit_s}s)"
    assert_rendered(err, source, filename)
    return err


def assert_rendered(err: AttncError, source: str | bytes, filename: str) -> None:
    """`render()` is the located head line, then the source line, then a caret under the column."""
    assert err.span is not None, f"error without a position: {err.message}"
    line, col = err.span.line, err.span.col
    head, shown, caret = err.render().split("\n")
    assert head == f"{filename}:{line}:{col}: error: {err.message}"
    text = source if isinstance(source, str) else source.decode("utf-8", errors="replace")
    lines = text.split("\n")
    assert 1 <= line <= len(lines), f"line {line} is outside the source ({len(lines)} lines)"
    src = printable(lines[line - 1].rstrip("\r"))
    assert 1 <= col <= len(src) + 1, f"column {col} is outside line {line} ({len(src)} characters)"
    assert caret.strip() == "^" and caret.endswith("^"), f"bad caret line {caret!r}"
    if len(src) <= WINDOW_LIMIT:
        assert shown == src
        assert caret == " " * (col - 1) + "^"
    elif col <= len(src):
        # A clipped window: the caret still sits under the reported character.
        assert shown[len(caret) - 1] == src[col - 1]


def printable(text: str) -> str:
    """A source line as rendered: tabs and other unprintable characters take one cell each."""
    return "".join(c if c.isprintable() else (" " if c == "\t" else "?") for c in text)
