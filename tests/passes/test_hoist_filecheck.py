"""attn-hoist FileCheck tests: tests/passes/hoist.mlir (the levels, the option, the error)."""
from pathlib import Path

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


def test_hoist(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/hoist.mlir"))
    assert not failures, "\n".join(failures)
