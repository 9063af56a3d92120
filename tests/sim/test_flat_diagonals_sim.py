"""Beyond its flat diagonals (Note [Flat diagonals] in attnc/ir/diagonals.py) a tile of
scores computes the values of d = j - i once: T5's relative bias (examples/relative_bias.attn,
flat at |d| >= 92; compiled as a bias s + f, BiasCode in attnc/backend/score_forms.py) and
a softcapped clipped relative position of d = i - j (flat at |d| >= 16; ScaledScoreCode
there; on sm_100a the hook's own region) run in the PTX emulator on sm_80, sm_90a and
sm_100a against attnc.reference, at a shape whose key blocks lie on both sides of the
diagonal, near it and beyond the bounds. T5's bias is one value per tile there, which the
softmax takes as an offset (Note [Offsets of far tiles] in attnc/backend/softmax.py); a bias
that also reads i is added per score, with its values of d computed once.
The same kernels built with bounds too near the diagonal (the lowering's check bypassed)
give wrong scores: the tiles beyond the bounds do take the once-computed values."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import attnc.backend.hooks as hooks
import attnc.ir.diagonals as diagonals
from attnc.frontend import load, load_file
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import ptx_bundle
from tests.gpu.gpu_support import bind_sizes, compare, make_case
from tests.sim.test_examples_sim import emulated

T5 = Path(__file__).resolve().parents[2] / "examples" / "relative_bias.attn"
CLIPPED = """attention clipped {
  q: f16[B, H, M, 64]
  k: f16[B, H, N, 64]
  v: f16[B, H, N, 64]
  param w: f32[H, 33]
  score_mod(s, b, h, i, j) = let d = i - j in 20.0 * tanh((s + 4.0 * w[h, min(max(d, -16), 16) + 16]) / 20.0)
  out o: f16[B, H, M, 64]
}
"""

ROW_SCALED = """attention row_scaled {
  q: f16[B, H, M, 64]
  k: f16[B, H, N, 64]
  v: f16[B, H, N, 64]
  param w: f32[H, 33]
  score_mod(s, b, h, i, j) = s + w[h, min(max(j - i, -16), 16) + 16] * float(i % 3 + 1)
  out o: f16[B, H, M, 64]
}
"""


def _run(arch: str, source: Path | str = T5, lanes: bool = False):
    variant = load_file(str(source)) if isinstance(source, Path) else load(source, "clipped.attn")
    rng = np.random.default_rng(3)
    sizes = bind_sizes(variant, batch=1, heads=1, heads_kv=1, m=200, n=330, rng=rng)
    case = make_case(variant, sizes, {}, rng)
    options = {} if arch == "sm_100a" else {"pass_pipeline": pipeline_with_options(arch, {"lanes": lanes})}
    kernel, out, ref = emulated(ptx_bundle(source, arch=arch, **options), variant, case)
    assert kernel.last_reports == []
    return compare(variant, out, ref)


# Note [Diagonals across the warp] (attn-hoist{lanes}, on by default there): sm_80's and
# sm_90a's lanes share the diagonals near the bounds, or each computes its own; sm_100a's
# thread holds a row, and takes neither.
ARCHS = [("sm_80", False), ("sm_90a", False), ("sm_100a", False), ("sm_80", True), ("sm_90a", True)]


@pytest.mark.parametrize("arch, lanes", ARCHS)
def test_t5_beyond_its_flat_diagonals_matches_the_reference(arch, lanes):
    assert _run(arch, lanes=lanes) == []


@pytest.mark.parametrize("arch, lanes", ARCHS)
def test_a_softcapped_clipped_position_of_i_minus_j_matches_the_reference(arch, lanes):
    assert _run(arch, CLIPPED, lanes) == []


@pytest.mark.parametrize("arch, lanes", ARCHS)
def test_a_bias_of_d_and_i_matches_the_reference(arch, lanes):
    assert _run(arch, ROW_SCALED, lanes) == []


@pytest.mark.parametrize("arch, lanes", ARCHS)
def test_bounds_too_near_the_diagonal_would_change_the_scores(monkeypatch, arch, lanes):
    monkeypatch.setattr(diagonals, "flat_bounds", lambda block, names: (-20, 20))
    monkeypatch.setattr(hooks, "flat_holds", lambda *args: True)
    assert _run(arch, lanes=lanes) != []

