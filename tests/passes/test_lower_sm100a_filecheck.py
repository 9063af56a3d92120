"""attn-lower-sm100a FileCheck tests: tests/passes/lower_sm100a.mlir (the L6 kernel in the
module, its ABI, and the pass's errors on a plan the pipeline makes; those on edited IR are
tested in tests/backend/test_sm100a.py)."""
from pathlib import Path

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


def test_lower_sm100a(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/lower_sm100a.mlir"))
    assert not failures, "\n".join(failures)
