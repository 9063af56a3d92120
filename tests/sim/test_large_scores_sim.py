"""Scores far from 0 (Note [Rounded-up max] in attnc/backend/softmax.py), run in the PTX
emulator on every target against attnc.reference: a causal mask written as a score_mod
of -1e30, whose blocks above the diagonal the kernel walks first (their rows were NaN),
and every score shifted by 1e5, whose LSE takes the row's rounded max back."""
from __future__ import annotations

import pytest

from attnc.testing import ptx_bundle
from tests.sim.test_steps_sim import check_against_reference

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
