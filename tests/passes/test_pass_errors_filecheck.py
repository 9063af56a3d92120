"""FileCheck tests of the errors of attn-analyze-masks, attn-alloc-tmem and
attn-overlap-gemms: every error each raises on an input a pass pipeline (or a short
hand-edited input) reaches, with its message and location (tests/passes/*_errors.mlir)."""
from pathlib import Path

import pytest

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["analyze_masks_errors.mlir", "alloc_tmem_errors.mlir",
                                  "overlap_gemms_errors.mlir"])
def test_pass_errors(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes") / name)
    assert not failures, "\n".join(failures)
