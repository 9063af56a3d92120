"""attn-tile FileCheck tests: tests/passes/tile.mlir (choices) and tile_errors.mlir
(one RUN line per error the pass raises, with its exact message and location)."""
from pathlib import Path

import pytest

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]
CHECKS = sorted((ROOT / "tests/passes").glob("tile*.mlir"))


def test_the_checks_exist():
    assert {p.name for p in CHECKS} >= {"tile.mlir", "tile_errors.mlir"}


@pytest.mark.parametrize("path", CHECKS, ids=lambda p: p.stem)
def test_tile(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(path.relative_to(ROOT))
    assert not failures, "\n".join(failures)
