"""Scores far from 0 (Note [Rounded-up max] in attnc/backend/softmax.py), run in the PTX
emulator on every target against attnc.reference: a causal mask written as a score_mod
of -1e30, whose blocks above the diagonal the kernel walks first (their rows were NaN),
and every score shifted by 1e5, whose LSE takes the row's rounded max back; and T5's
bias with every value per score."""
from __future__ import annotations

from pathlib import Path

import pytest

from attnc.testing import ptx_bundle
from tests.sim.test_steps_sim import check_against_reference

ROOT = Path(__file__).resolve().parents[2]

SOURCE = """attention large {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  score_mod(s, b, h, i, j) = SCORE
  out o: bf16[B, H, M, 64]
  out lse: f32[B, H, M]
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
@pytest.mark.parametrize("score", ["where(j > i, -1.0e30, s)", "s + 1.0e5"], ids=["masked_by_score", "shifted"])
def test_large_scores_compute_the_reference(tmp_path, arch, score):
    path = tmp_path / "large.attn"
    path.write_text(SOURCE.replace("SCORE", score))
    check_against_reference(ptx_bundle(path, arch=arch), path, 150, 300)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_t5_without_hoisting_computes_the_reference(arch):
    """attn-hoist{hoist=false}: T5's constants, placed per score, are made where each
    diagonal's values are (Note [Values of a diagonal] in attnc/backend/hooks.py; the
    kernel did not verify: a constant used outside its region)."""
    from attnc.passes.pipelines import pipeline_with
    path = ROOT / "examples" / "relative_bias.attn"
    pipeline = pipeline_with(arch, {"attn-hoist": {"hoist": "false"}})
    check_against_reference(ptx_bundle(path, arch=arch, pass_pipeline=pipeline), path, 150, 300)
