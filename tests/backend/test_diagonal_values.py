"""A hook's values that depend on i and j only through d = j - i are emitted once per
diagonal of a tile's scores, not once per score (Note [Values of a diagonal] in
attnc/backend/hooks.py): T5's bucket (examples/relative_bias.attn: a log, an int() and
a param read of d) at head dim 64 on 22 diagonals of sm_80's 64 scores a thread, 34 of
sm_90a's, and once more for a tile beyond its flat diagonals (Note [Flat diagonals] in
attnc/ir/diagonals.py). With attn-hoist{lanes=true} (the default on both), near those a lane
computes 3 (sm_80) or 5 (sm_90a) of its warp's diagonals and reads its own from the lanes
that computed them (Note [Diagonals across the warp] in attnc/backend/warp_diagonals.py).
The control writes d as (j + 0) - i, which the sharing does not recognise: every score
computes its own. The emulator runs relative_bias against the reference on both targets
(tests/sim/test_examples_sim.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from attnc.backend.hooks import RegionCode
from attnc.backend.lowering import kernel_module_for
from attnc.driver import CompileOptions, compile_mlir
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import SM90A_ONE_WARPGROUP

ROOT = Path(__file__).resolve().parents[2]
T5 = (ROOT / "examples" / "relative_bias.attn").read_text()
UNSHARED = T5.replace("let d = j - i in", "let d = (j + 0) - i in")


def _lowered(source: str, arch: str, **tile) -> str:
    pipeline = pipeline_with_options(arch, tile)
    return str(kernel_module_for(compile_mlir(source, "rb.attn", CompileOptions(arch=arch, pass_pipeline=pipeline)))[0])


# (arch, the diagonals of a thread's 64 scores, of its warp's in 32s): sm_80's keys span
# rows 0-24 and columns 0-57 of a lane's first score, sm_90a's rows 0-8 and columns 0-121,
# each plus the lanes' spread of 13.
LAYOUTS = [("sm_80", 22, 3), ("sm_90a", 34, 5)]


@pytest.mark.parametrize("arch, diagonals, sets", LAYOUTS)
def test_t5_buckets_are_computed_once_per_diagonal(arch, diagonals, sets):
    """Both kernels at 64 scores a thread (sm_90a's of one consumer warpgroup, 64x128): on
    sm_80 the unshared bias, read per score, would take 64-key tiles and T5's 128
    (attnc/passes/tile_table.py); with
    attn-hoist{lanes=true} a lane computes a few of its warp's diagonals, with lanes=false
    those of its own scores."""
    assert "let d = (j + 0) - i in" in UNSHARED
    tile = {"block_n": 64} if arch == "sm_80" else SM90A_ONE_WARPGROUP
    across = _lowered(T5, arch, **tile, lanes=True)
    unshared = _lowered(UNSHARED, arch, **tile)
    alone = _lowered(T5, arch, **tile, lanes=False)
    for op in ("math.log", "llvm.load", "fptosi"):
        n, k, m = across.count(op), alone.count(op), unshared.count(op)
        assert m > 0 and k * 64 == m * (diagonals + 1) and n * 64 == m * (sets + 1), (op, n, k, m)
    shuffles = across.count("nvvm.shfl.sync  idx")
    assert shuffles > 0 and alone.count("nvvm.shfl.sync  idx") == unshared.count("nvvm.shfl.sync  idx") == 0


def _diagonals_emitted(monkeypatch, source: str) -> int:
    calls = []
    hoist = RegionCode.hoist_diagonal

    def counted(self, *args, **kwargs):
        calls.append(1)
        return hoist(self, *args, **kwargs)
    monkeypatch.setattr(RegionCode, "hoist_diagonal", counted)
    _lowered(source, "sm_80")
    return len(calls)


def _variant(score: str) -> str:
    return ("attention d {\n  q: f16[B, H, M, 64]\n  k: f16[B, H, N, 64]\n  v: f16[B, H, N, 64]\n"
            f"  param w: f32[H]\n  score_mod(s, b, h, i, j) = {score}\n  out o: f16[B, H, M, 64]\n}}\n")


@pytest.mark.parametrize("score, shared", [
    ("s + w[h] * log(float(abs(i - j) + 1))", True),    # a log of d: costs more than holding it
    ("where(j - i > 3, s, s * 0.5)", False),            # d's compare alone: as cheap as its result
    ("s + log(float(j + 1)) - log(float(i + 1))", False),   # i and j apart, not their difference
    ("s + log(float(max(j - i, 0) + i + 1))", False),   # d and i: not the diagonal's alone
])
def test_only_costly_values_of_the_difference_are_shared(monkeypatch, score, shared):
    assert (_diagonals_emitted(monkeypatch, _variant(score)) > 0) == shared
