"""Scores far from 0 (Note [Rounded-up max] in attnc/backend/softmax.py), run in the PTX
emulator on every target against attnc.reference: a causal mask written as a score_mod
of -1e30, whose blocks above the diagonal the kernel walks first (their rows were NaN),
and every score shifted by 1e5, whose LSE takes the row's rounded max back; and T5's
and ALiBi's biases with every value per score."""
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


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
@pytest.mark.parametrize("example", ["relative_bias", "alibi"])
def test_biases_without_hoisting_compute_the_reference(arch, example):
    """attn-hoist{hoist=false}: T5's constants and ALiBi's slopes, placed per score, are
    made where each diagonal's values are (Note [Values of a diagonal] in
    attnc/backend/hooks.py; the kernel did not verify: a value used outside its region),
    and ALiBi's bias is computed per score, not in its form linear in j."""
    from attnc.passes.pipelines import pipeline_with
    path = ROOT / "examples" / f"{example}.attn"
    pipeline = pipeline_with(arch, {"attn-hoist": {"hoist": "false"}})
    check_against_reference(ptx_bundle(path, arch=arch, pass_pipeline=pipeline), path, 150, 300)


SINKS = """attention sunk {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  param sinks: f32[H]
  SCORE
  sink(h) = sinks[h]
  mask_mod(b, h, i, j) = j < i - 70
  out o: bf16[B, H, M, 64]
  out lse: f32[B, H, M]
}
"""
SOFTCAP = "score_mod(s, b, h, i, j) = 20.0 * tanh(s / 20.0)"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
@pytest.mark.parametrize("score, sinks", [("", (-1e10, -1e15)), (SOFTCAP, (0.5, -3.0))], ids=["large", "softcap"])
def test_a_row_that_keeps_nothing_has_its_sinks_lse(arch, score, sinks):
    """Rows 0-70 keep no key: o = 0 and lse = the sink -- also for sinks of -1e10 and
    -1e15, whose term exp2 of the rounding residual made 0 (lse -inf), and under a
    softcap, whose rows all take its bound as their max (a first fix gave them lse = 20
    there: found on the GPU) -- Note [Sinks] in attnc/backend/softmax.py; rows 71 on keep
    keys and the sink, and a sink of -inf leaves an empty row empty (lse -inf)."""
    import ml_dtypes
    import numpy as np

    import attnc
    from attnc_sim.device import SimKernel

    source = SINKS.replace("SCORE", score)
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((1, 3, 72, 64)).astype(np.float32).astype(ml_dtypes.bfloat16) for _ in range(3))
    sinks = np.array([*sinks, -np.inf], np.float32)
    out = SimKernel(ptx_bundle(source, arch=arch))(q, k, v, sinks=sinks)
    ref = attnc.reference(source, *(x.astype(np.float32) for x in (q, k, v)), sinks=sinks)
    assert (out["o"][:, :, :71].astype(np.float32) == 0).all()
    assert np.allclose(out["lse"][0, :2, :71], sinks[:2, None], rtol=1e-6, atol=1e-6)
    assert np.isneginf(out["lse"][0, 2, :71]).all() and np.isneginf(ref["lse"][0, 2, :71]).all()
    assert np.allclose(out["lse"], ref["lse"], rtol=1e-5, atol=2e-3)
    assert np.abs(out["o"].astype(np.float32) - ref["o"]).max() < 3e-2
