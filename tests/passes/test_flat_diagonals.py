"""Flat diagonals (Note [Flat diagonals] in attnc/ir/diagonals.py): the bounds attn-hoist
records on a hook's d = j - i, by the interval analysis -- exact for integers, widened for
floats and more for the hardware's transcendentals -- and the lowering's check of a bound
edited by hand. The kernels beyond the bounds run in the emulator against the reference in
tests/sim/test_flat_diagonals_sim.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnc.backend.lowering import build
from attnc.driver import CompileOptions, compile_file, compile_mlir, optimize_mlir
from attnc.errors import AttncError
from attnc.passes.lower_kernel import compile_result_of
from attnc.passes.pipelines import format_pipeline, target_pipeline

ROOT = Path(__file__).resolve().parents[2]
T5 = (ROOT / "examples" / "relative_bias.attn").read_text()


def _variant(score: str, params: str = "param w: f32[H, 40]") -> str:
    return ("attention v {\n  q: f16[B, H, M, 64]\n  k: f16[B, H, N, 64]\n  v: f16[B, H, N, 64]\n"
            f"  {params}\n  score_mod(s, b, h, i, j) = {score}\n  out o: f16[B, H, M, 64]\n}}\n")


def _bounds(source: str, pipeline: str = "attn-tile,attn-hoist") -> tuple:
    """(flat_below, flat_above) on the score_mod's d, None where absent."""
    text = compile_mlir(source, "v.attn", CompileOptions(arch="sm_90a", pass_pipeline=pipeline)).text
    line = next((ln for ln in text.splitlines() if "arith.subi" in ln and "attn.flat_" in ln), "")
    found = [re.search(rf"attn\.flat_{side} = (-?\d+)", line) for side in ("below", "above")]
    return tuple(int(m.group(1)) if m else None for m in found)


@pytest.mark.parametrize("score, bounds", [
    # T5: the last bucket of each side from |d| = 91 on; shown from 92 (log's tolerance)
    (None, (-92, 92)),
    # an integer clamp: exact
    ("s + w[h, min(max(j - i, -8), 8) + 8]", (-8, 8)),
    # d = i - j, clamped below only by max, above by min
    ("s + w[h, min(max(i - j, 0), 16)]", (0, 16)),
    # a float clamp: 50.0 from |d| = 51 on (the int's conversion widened)
    ("s + min(float(abs(j - i)), 50.0) * w[h, 0]", (-51, 51)),
    # linear in d (ALiBi): flat nowhere
    ("s + w[h, 0] * float(j - i)", (None, None)),
    # tanh saturates in f32, but not within tanh.approx's tolerance
    ("s + w[h, 0] * tanh(float(j - i) / 4.0)", (None, None)),
    # one side only
    ("let d = j - i in s + where(d > 5, w[h, 1], w[h, 2] * float(d))", (None, 6)),
    # each j - i its own op: d is the first, whose only value read is its compare
    ("s + where(j - i > 5, w[h, 1], w[h, 2] * float(j - i))", (5, 6)),
])
def test_the_bounds_attn_hoist_records(score, bounds):
    assert _bounds(T5 if score is None else _variant(score)) == bounds


def test_without_hoisting_or_with_flat_off_no_bounds_are_recorded():
    assert _bounds(T5, "attn-tile,attn-hoist{hoist=false}") == (None, None)
    assert _bounds(T5, "attn-tile,attn-hoist{flat=false}") == (None, None)


def _plan() -> str:
    specs = target_pipeline("sm_90a")
    return compile_file("examples/relative_bias.attn", CompileOptions(
        arch="sm_90a", pass_pipeline=format_pipeline(specs[:-1]))).text


def _lowered(plan: str):
    return build(compile_result_of(optimize_mlir(plan, "plan.mlir", CompileOptions(
        arch="sm_90a", pass_pipeline=target_pipeline("sm_90a")[-1].name))), cubin=False)


def test_a_bound_nearer_the_diagonal_is_refused_at_d(monkeypatch):
    monkeypatch.chdir(ROOT)
    plan = _plan()
    assert plan.count("attn.flat_below = -92 : i64") >= 2
    with pytest.raises(AttncError) as info:
        _lowered(plan.replace("attn.flat_below = -92 : i64", "attn.flat_below = -60 : i64"))
    assert info.value.render().startswith(
        "examples/relative_bias.attn:9:15: error: attn.flat_below = -60, attn.flat_above = 92: the values this hook "
        "computes from d are not shown the same beyond there (attn-hoist finds attn.flat_below = -92, "
        "attn.flat_above = 92")


def test_a_bound_farther_from_the_diagonal_is_followed(monkeypatch):
    monkeypatch.chdir(ROOT)
    plan = _plan()
    near, far = (_lowered(plan.replace("attn.flat_above = 92 : i64", f"attn.flat_above = {b} : i64")).ptx
                 for b in (92, 500))
    assert near != far
