"""FileCheck tests of the L3-L5 passes (warp-specialize, alloc-smem/tmem, insert-pipelines):
tests/passes/schedule.mlir (plans per target, incl. a two-role mbarrier ring) and
schedule_errors.mlir (every error with its message and location)."""
from pathlib import Path

import pytest

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["schedule.mlir", "schedule_errors.mlir"])
def test_schedule(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes") / name)
    assert not failures, "\n".join(failures)
