"""The error corpus: every file in errors/ must be rejected with its expected diagnostic.

Each `errors/NAME.attn` starts with `# EXPECT: LINE:COL: MESSAGE`, the exact
message and position (the comment itself is line 1). The file is loaded as bytes,
as `attnc.frontend.load_file` does, so encoding errors are part of the corpus.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from frontend_diagnostics import expect_error

CORPUS = Path(__file__).parent / "errors"
EXPECT = re.compile(rb"# EXPECT: (\d+):(\d+): (.*)\r?\n")

# Corpus cases that show a frontend bug: the expectation is the correct one, the
# frontend does not meet it yet. The owner removes an entry with the fix.
KNOWN_BUGS: dict[str, str] = {}


def _cases() -> list:
    cases = []
    for path in sorted(CORPUS.glob("*.attn")):
        marks = ()
        if path.stem in KNOWN_BUGS:
            marks = pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[path.stem])
        cases.append(pytest.param(path, id=path.stem, marks=marks))
    return cases


CASES = _cases()


def test_corpus_size_and_known_bugs():
    assert len(CASES) >= 45, f"the corpus shrank to {len(CASES)} cases"
    assert set(KNOWN_BUGS) <= {p.stem for p in CORPUS.glob("*.attn")}, "stale KNOWN_BUGS entry"


def _expectation(data: bytes) -> tuple[int, int, str]:
    m = EXPECT.match(data)
    assert m, "a corpus file must start with '# EXPECT: LINE:COL: MESSAGE'"
    return int(m[1]), int(m[2]), m[3].decode("utf-8")


@pytest.fixture(scope="module", autouse=True)
def _warm_parser():
    """Build the Lark parser once, so that the time limits measure the check alone."""
    expect_error(b"attention a {}", limit_s=30)


@pytest.mark.parametrize("path", CASES)
def test_corpus_case(path: Path):
    data = path.read_bytes()
    line, col, message = _expectation(data)
    err = expect_error(data, path.name)
    assert (err.message, err.span.line, err.span.col) == (message, line, col)


@pytest.mark.parametrize("path", CASES)
def test_corpus_case_as_text(path: Path):
    """A `str` source gets the same diagnostic as its UTF-8 bytes."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        pytest.skip("not UTF-8: only loadable as bytes")
    line, col, message = _expectation(data)
    err = expect_error(text, path.name)
    assert (err.message, err.span.line, err.span.col) == (message, line, col)
