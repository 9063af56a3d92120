"""attn-lower-sm80 FileCheck tests: tests/passes/lower_sm80.mlir (the L6 kernel in the
module, the block-map kernel, and the pass's errors on a plan the pipeline makes; those on
edited IR are tested in tests/passes/test_kv_steps.py, test_lower_plan.py and the like)."""
from pathlib import Path

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


def test_lower_sm80(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/lower_sm80.mlir"))
    assert not failures, "\n".join(failures)


def test_lower_sm80_steps(monkeypatch):
    """tests/passes/lower_sm80_steps.mlir: the KV steps built op by op, and refused edits."""
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/lower_sm80_steps.mlir"))
    assert not failures, "\n".join(failures)
