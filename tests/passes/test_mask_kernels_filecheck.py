"""attn-mask-kernels FileCheck tests: tests/passes/mask_kernels.mlir (the program, the options, the errors)."""
from pathlib import Path

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


def test_mask_kernels(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/mask_kernels.mlir"))
    assert not failures, "\n".join(failures)
