"""Every environment knob attnc reads, declared once: name, type, default, meaning.

A knob is read when it is used, not at import, so a test (or a long-lived
process) that changes the environment sees the change. A malformed value is an
`AttncError` naming the variable, never a silent default. `describe()` renders
the table the README carries.

To add a knob: declare it below with `Knob(...)`, give it an accessor if callers
want one, and add its row to the README (the text `describe()` prints).

Note: the runtime (`attnc_runtime`) never imports this module (it must run without the
compiler); it reads one variable of its own, ATTNC_POISON_SCRATCH, with this module's
spelling of booleans (kernel.poison_requested; tests/runtime/test_env.py keeps the two in step).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, TypeVar

from attnc.errors import AttncError

T = TypeVar("T")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _parse_bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise AttncError(f"environment variable {name}={text!r} is not a boolean; use one of "
                     f"{', '.join(_TRUE)} or {', '.join(_FALSE[1:])}", filename="attnc")


def _parse_path(name: str, text: str) -> Path | None:
    """A path; empty (`ATTNC_CACHE_DIR=`) is unset, not the current folder."""
    return Path(text).expanduser() if text.strip() else None


@dataclass(frozen=True)
class Knob(Generic[T]):
    name: str
    type_name: str                       # for the docs: 'bool', 'path', ...
    default: Callable[[], T]             # computed at use (e.g. depends on $HOME)
    default_text: str
    parse: Callable[[str, str], T]
    doc: str

    def get(self) -> T:
        text = os.environ.get(self.name)
        value = None if text is None else self.parse(self.name, text)
        return self.default() if value is None else value


CACHE_DIR: Knob[Path] = Knob(
    "ATTNC_CACHE_DIR", "path", lambda: Path("~/.cache/attnc").expanduser(), "~/.cache/attnc",
    _parse_path,
    "Where the kernel cache keeps compiled bundles, one folder per cache key.")

DISABLE_CACHE: Knob[bool] = Knob(
    "ATTNC_DISABLE_CACHE", "bool", lambda: False, "0", _parse_bool,
    "1 to compile every time: the cache is neither read nor written.")

DEBUG: Knob[bool] = Knob(
    "ATTNC_DEBUG", "bool", lambda: False, "0", _parse_bool,
    "1 to show the traceback of an internal compiler error.")

VERIFY_BESIDE: Knob[bool] = Knob(
    "ATTNC_VERIFY_BESIDE", "bool", lambda: True, "1", _parse_bool,
    "0 to run `attn-verify-pipeline`'s exploration in place rather than in a forked process beside the later "
    "passes and the backend (Note [The check beside the lowering] in `attnc/schedule/beside.py`).")

KNOBS: tuple[Knob, ...] = (CACHE_DIR, DISABLE_CACHE, DEBUG, VERIFY_BESIDE)


def cache_dir() -> Path:
    return CACHE_DIR.get()


def cache_disabled() -> bool:
    return DISABLE_CACHE.get()


def describe() -> str:
    """The knobs as a Markdown table."""
    rows = ["| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
    rows += [f"| `{k.name}` | {k.type_name} | `{k.default_text}` | {k.doc} |" for k in KNOBS]
    return "\n".join(rows)
