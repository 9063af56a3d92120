"""Where a compile's time goes: the table of `attnc compile --time-passes`.

    with timing.recording() as report:          # the CLI, given --time-passes
        ...                                     # the compile
    print(report.render(), file=sys.stderr)

Code marks its steps with `with timing.step("MLIR -> PTX"):`. Steps nest (MLIR -> PTX
inside the backend), a step entered again under the
same parent adds to its row, and with no report being recorded a step costs one
global lookup: the compiler marks its steps whether or not anyone asked. Only the steps
of the thread that records count: work a thread does beside it (a copy lowered and
assembled on a second core) shows as the time its caller waits for it.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    count: int = 0
    children: list[Step] = field(default_factory=list)

    def child(self, name: str) -> Step:
        for c in self.children:
            if c.name == name:
                return c
        self.children.append(Step(name))
        return self.children[-1]


class Report:
    """The steps of one compile, as a tree under `total`."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.total = Step("total")
        self.notes: list[str] = []
        self._open = [self.total]

    def enter(self, name: str) -> Step:
        s = self._open[-1].child(name)
        self._open.append(s)
        return s

    def leave(self, s: Step, seconds: float) -> None:
        s.seconds += seconds
        s.count += 1
        self._open.pop()

    def add(self, name: str, seconds: float) -> None:
        """A step measured by its caller (an upstream MLIR pass, timed from outside)."""
        self.leave(self.enter(name), seconds)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def render(self) -> str:
        """The steps in the order they first ran, a nested step under its parent; where a
        step's nested steps leave time of its own, a row says how much."""
        rows: list[tuple[str, float]] = []

        def walk(s: Step, indent: str) -> None:
            for c in s.children:
                rows.append((indent + c.name + (f" (x{c.count})" if c.count > 1 else ""), c.seconds))
                walk(c, indent + "  ")
            if s.children:
                rest = "other (imports, the rest)" if s is self.total else "the rest"
                rows.append((indent + rest, s.seconds - sum(c.seconds for c in s.children)))
        walk(self.total, "  ")
        rows.append(("  total", self.total.seconds))
        width = max(len(label) for label, _ in rows) + 2
        total = self.total.seconds
        lines = ["attnc: where the time went (wall seconds; not counting the interpreter's start)"]
        lines += [f"attnc: {n}" for n in self.notes]
        lines += [f"{label:<{width}}{seconds:8.3f} s {_share(seconds, total)}" for label, seconds in rows]
        return "\n".join(lines)


def _share(seconds: float, total: float) -> str:
    return f"{100 * seconds / total:5.1f}%" if total > 0 else ""


_report: Report | None = None


@contextmanager
def recording() -> Iterator[Report]:
    """Record the steps run inside; the report's total is the time spent inside."""
    global _report
    report, start = Report(), time.perf_counter()
    _report = report
    try:
        yield report
    finally:
        _report = None
        report.total.seconds = time.perf_counter() - start


def _recording() -> Report | None:
    """The report this thread's steps go to, if any."""
    report = _report
    return report if report is not None and report.thread == threading.get_ident() else None


@contextmanager
def step(name: str) -> Iterator[None]:
    report = _recording()
    if report is None:
        yield
        return
    s, start = report.enter(name), time.perf_counter()
    try:
        yield
    finally:
        report.leave(s, time.perf_counter() - start)


def add(name: str, seconds: float) -> None:
    report = _recording()
    if report is not None:
        report.add(name, seconds)


def note(text: str) -> None:
    report = _recording()
    if report is not None:
        report.note(text)


def active() -> bool:
    return _report is not None
