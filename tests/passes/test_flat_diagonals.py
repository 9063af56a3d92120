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


def test_lanes_edited_in_on_sm_100a_are_refused_at_d(monkeypatch):
    """attn.flat_lanes on the op d of an sm_100a kernel, whose threads hold rows of scores:
    refused at the op by the lowering, not ignored."""
    monkeypatch.chdir(ROOT)
    specs = target_pipeline("sm_100a")
    plan = compile_file("examples/relative_bias.attn", CompileOptions(
        arch="sm_100a", pass_pipeline=format_pipeline(specs[:-1]))).text
    edited = plan.replace("attn.flat_below = -92 : i64", "attn.flat_below = -92 : i64, attn.flat_lanes")
    assert edited != plan
    with pytest.raises(AttncError) as info:
        build(compile_result_of(optimize_mlir(edited, "plan.mlir", CompileOptions(
            arch="sm_100a", pass_pipeline=specs[-1].name))), cubin=False)
    assert info.value.render().startswith(
        "examples/relative_bias.attn:9:15: error: attn.flat_lanes: a thread of sm_100a's kernel holds a row of "
        "scores, so its lanes have no diagonals to share")


def test_a_bound_farther_from_the_diagonal_is_followed(monkeypatch):
    monkeypatch.chdir(ROOT)
    plan = _plan()
    near, far = (_lowered(plan.replace("attn.flat_above = 92 : i64", f"attn.flat_above = {b} : i64")).ptx
                 for b in (92, 500))
    assert near != far


@pytest.mark.parametrize("score", [
    None,
    "s + w[h, min(max(j - i, -8), 8) + 8]",
    "s + w[h, min(max(i - j, 0), 16)]",
    "s + min(float(abs(j - i)), 50.0) * w[h, 0]",
    "let d = j - i in s + where(d > 5, w[h, 1], w[h, 2] * float(d))",
    "let d = j - i in s + w[h, min(int(log(float(max(abs(d), 1))) * 4.0), 39)]",
    "let d = i - j in s + w[h, where(d > 30, 39, where(d < -30, 0, 20 + (d // 3)))]",
])
def test_the_region_is_the_same_beyond_its_bounds(score):
    """The claim itself, checked by the region interpreter (attnc/ir/interp.py, f32 as the
    reference): with s, b and h fixed, the hook's value is the same at every d beyond each
    bound -- sampled densely next to it and sparsely far out -- for random params."""
    import numpy as np

    from attnc.driver import lower_variant
    from attnc.frontend import load
    from attnc.ir import SCORE_MOD, attention_ops, region_block
    from attnc.ir.diagonals import diagonal_values, flat_bounds
    from attnc.ir.interp import eval_region

    variant = load(T5 if score is None else _variant(score), "v.attn")
    module = lower_variant(variant)
    (op,) = attention_ops(module)
    block = region_block(op, SCORE_MOD)
    below, above = flat_bounds(block, ("s", "b", "h", "i", "j"))
    assert (below, above) != (None, None)
    root = diagonal_values(block, ("s", "b", "h", "i", "j"))[0]
    sign = -1 if root.operands[0] == block.arguments[3] else 1     # the bounds are of d = i - j
    fn_args = list(op.parent.regions[0].blocks[0].arguments)
    name = "bias" if score is None else "w"
    table = np.random.default_rng(5).standard_normal((2, 40 if score else 32)).astype(np.float32)
    dims = {"B": 1, "H": 2, "M": 1 << 20, "N": 1 << 20}

    def value(d: int):
        i = 1 << 19                                 # d as the hook computes it, i and j in range
        return eval_region(block, (0.25, 0, 1, i, i + sign * d), dims=dims, params={name: table},
                           param_names={fn_args[3]: name})
    offsets = [*range(0, 400), *(1 << k for k in range(9, 19))]
    for bound, side in ((below, -1), (above, 1)):
        if bound is not None:
            values = {float(value(bound + side * k)) for k in offsets}
            assert len(values) == 1, (bound, sorted(values)[:4])


def _fmas(arch: str) -> int:
    """The f32 FMAs in T5's PTX for `arch` (every one, in every branch)."""
    from attnc.testing import ptx_bundle

    return ptx_bundle(T5, arch=arch).code["ptx"].decode().count("fma.rn.f32")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_a_far_tiles_bias_is_the_softmaxs_offset(monkeypatch, arch):
    """Note [Offsets of far tiles] (attnc/backend/softmax.py): beyond its flat diagonals T5
    leaves a tile's scores as QK^T gave them, where adding its bias to each took an FMA a
    score (64 a thread and tile on sm_80 and sm_90a; on sm_100a 32 a chunk of the thread's
    row, Note [Affine scores on sm_100a]), less the 2 a row or chunk that the softmax takes
    for the offset. Its kernels run against the reference in tests/sim/test_flat_diagonals_sim.py."""
    from attnc.backend.score_forms import BiasCode

    folded = _fmas(arch)
    monkeypatch.setattr(BiasCode, "of_diagonal", property(lambda self: False))
    assert _fmas(arch) - folded >= 48
