"""attn-insert-pipelines' guessed first block, FileCheck tests: tests/passes/first_guess.mlir
(the guess, its copies before the block map's range and its miss branch after it; the
option off; its errors)."""
from pathlib import Path

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


def test_first_guess(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/first_guess.mlir"))
    assert not failures, "\n".join(failures)
