"""attn-block-map FileCheck tests: tests/passes/block_map.mlir (the program, the options, the errors)."""
from pathlib import Path

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


def test_block_map(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/block_map.mlir"))
    assert not failures, "\n".join(failures)
