"""attn-lower-sm90a FileCheck tests: tests/passes/lower_sm90a.mlir (the producer
warpgroup's and the cooperative kernel in the module, and the pass's errors)."""
from pathlib import Path

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


def test_lower_sm90a(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/lower_sm90a.mlir"))
    assert not failures, "\n".join(failures)
