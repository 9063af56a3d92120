"""attn-kernel-choices FileCheck tests: tests/passes/kernel_choices.mlir (the choices on
their ops, by default and from the options, and the errors its header lists)."""
from pathlib import Path

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


def test_kernel_choices(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/kernel_choices.mlir"))
    assert not failures, "\n".join(failures)
