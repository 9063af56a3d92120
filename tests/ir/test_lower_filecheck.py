"""L1 of every example, checked with FileCheck (tests/ir/lower/<example>.mlir)."""
from pathlib import Path

import pytest

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]
CHECKS = sorted((ROOT / "tests/ir/lower").glob("*.mlir"))
EXAMPLES = sorted((ROOT / "examples").glob("*.attn"))


def test_every_example_has_a_filecheck_test():
    assert {p.stem for p in CHECKS} == {p.stem for p in EXAMPLES}


@pytest.mark.parametrize("path", CHECKS, ids=lambda p: p.stem)
def test_lowering(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(path.relative_to(ROOT))
    assert not failures, "\n".join(failures)
