"""attn-verify-pipeline through `attnc opt` on L5 IR files: the sound IR the passes leave
(verify_pipeline.mlir) and hand edits of it with a planted bug -- a removed arrive, a
wrong arrive count, a cp.async noinc count off by one, a wait on the wrong parity; in the
ping-pong plan a removed named-barrier arrive; in sm_80's plan a V prefetched one step too
far for its ring; the producer's Q written after its KV loop, a deadlock of two rings --
refused at the op where the protocol breaks."""
from pathlib import Path

import pytest

from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["verify_pipeline.mlir", "verify_pipeline_no_arrive.mlir",
                                  "verify_pipeline_count.mlir", "verify_pipeline_noinc.mlir",
                                  "verify_pipeline_parity.mlir", "verify_pipeline_turn.mlir",
                                  "verify_pipeline_prefetch.mlir", "verify_pipeline_two_rings.mlir"])
def test_verify_pipeline(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes") / name)
    assert not failures, "\n".join(failures)
