"""sm_100a's persistent CTAs in the PTX emulator (attn-warp-specialize{persistent=1}: Notes
[The walk over query blocks] in attnc/schedule/walk.py and [Persistent CTAs on sm_100a] in
attnc/backend/sm100a.py): on an emulated GPU of one SM the grid is one CTA, whose roles walk
every query block (two heads of two 256-row blocks at M = 300) in rounds, their rings
running on from block to block; on three SMs, three CTAs share them. Zero race or protocol
reports are allowed."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import attnc
from attnc.driver import CompileOptions, compile_mlir
from attnc.frontend import load_file
from attnc.passes.pipelines import format_pipeline, pipeline_with, target_pipeline
from attnc.testing import ptx_bundle, variant_source
from attnc_sim.device import SimDevice, SimKernel
from tests.gpu.gpu_support import bind_sizes, compare, make_case
from tests.sim.test_examples_sim import typed_inputs
from tests.sim.test_steps_sim import check_against_reference
from tests.sim.test_walk_sim import BOTTOM_RIGHT

ROOT = Path(__file__).resolve().parents[2]
ONE_SM = SimDevice(multiprocessors=1)


def persistent_bundle(path: Path, options: str = "persistent=1"):
    names = format_pipeline(target_pipeline("sm_100a")).split(",")
    names[names.index("attn-warp-specialize")] = f"attn-warp-specialize{{{options}}}"
    return ptx_bundle(path, arch="sm_100a", pass_pipeline=",".join(names))


@pytest.mark.parametrize("example, options", [("mha", "persistent=1"), ("sliding_window", "persistent=1"),
                                              ("gemma2", "persistent=1 walk_order=linear"),
                                              ("docs_sink", "persistent=1")])
def test_one_cta_walks_every_query_block(example, options):
    path = ROOT / "examples" / f"{example}.attn"
    bundle = persistent_bundle(path, options)
    assert "MinSms" in str(bundle.manifest.kernels[-1].grid)
    m, n = (200, 300) if example == "docs_sink" else (300, 200)     # its ids index queries and keys alike
    check_against_reference(bundle, path, m, n, device=ONE_SM)


@pytest.mark.parametrize("example, options", [("mha", "persistent=1"), ("gemma2", "persistent=1 walk_order=linear")])
def test_three_ctas_share_the_blocks(example, options):
    """Three SMs: three CTAs take the six query blocks (two heads of three at M = 700) in two
    rounds, the snake order reversing the CTAs' turn in the second."""
    path = ROOT / "examples" / f"{example}.attn"
    check_against_reference(persistent_bundle(path, options), path, 700, 300, device=SimDevice(multiprocessors=3))


def test_blocks_without_keys_in_the_walk(tmp_path):
    """Causal from the bottom right, M = 300 and N = 64: the first query block of each head
    keeps no key, so the walk meets blocks whose KV loops run no step."""
    path = tmp_path / "bottom_right.attn"
    path.write_text(BOTTOM_RIGHT)
    check_against_reference(persistent_bundle(path), path, 300, 64, device=ONE_SM)


def test_each_block_starts_from_zero():
    """Note [Accumulators start at zero]: the CTA's one walk runs head 0's blocks, then head
    1's, in the same tensor memory. An infinite value of head 0's V makes its O infinite or
    NaN (as the reference's); head 1's O must not inherit it (its first rescale multiplies the
    stale accumulator by 0: inf x 0 is NaN)."""
    path = ROOT / "examples" / "mha.attn"
    variant = load_file(str(path))
    rng = np.random.default_rng(3)
    sizes = bind_sizes(variant, batch=1, heads=2, heads_kv=2, m=300, n=200, rng=rng)
    case = make_case(variant, sizes, {}, rng)
    case["v"][0, 0, 5, :] = np.inf
    bundle = persistent_bundle(path)
    kernel = SimKernel(bundle, device=ONE_SM, seed=1)
    out = kernel(**typed_inputs(bundle, case))
    assert kernel.last_reports == []
    assert not np.isfinite(out["o"][0, 0]).any()
    ref = attnc.reference(variant, **case)
    head1 = {"o": out["o"][:, 1:]}
    assert compare(variant, head1, {"o": ref["o"][:, 1:]}) == []


def test_roles_walking_apart_are_refused():
    """One role's walk edited by hand to another order than the others' (its roles would take
    different blocks in a round): the lowering refuses it at the op."""
    from tests.passes.test_pass_errors import _in_role, _plan, _refused, _replaced
    plan = _plan("sm_100a", "attn-verify-pipeline", {"attn-warp-specialize": {"persistent": 1}})
    edited = _in_role(plan, "load", lambda text: _replaced(text, '{order = "snake"}', '{order = "linear"}'))
    error = _refused(edited, "sm_100a", "attn-lower-sm100a")
    assert "attn-lower-sm100a: every role of a CTA walks the query blocks in one order" in error.message
    assert error.span is not None


def test_one_q_tile_keeps_o_apart_from_the_next_blocks_q(tmp_path):
    """With one Q tile a CTA (head dim 256) O's staging tile takes Q's bytes once the KV loop
    is done -- but for a persistent CTA, whose load warp meanwhile brings the next block's Q
    there (the emulator reported the correction's O stores landing on that copy): so O has a
    buffer of its own, and at head dim 256 the plan fits with 64-key blocks."""
    path = tmp_path / "d256.attn"
    path.write_text(variant_source("d256", 256, lse=True))
    pipeline = pipeline_with("sm_100a", {"attn-tile": {"block_n": 64}, "attn-warp-specialize": {"persistent": 1}})
    plan = compile_mlir(path.read_text(), "d256.attn", CompileOptions(arch="sm_100a", pass_pipeline=pipeline)).text
    sO = re.search(r'\{[^{}]*name = "sO"[^{}]*\}', plan).group(0)
    assert "alias_of" not in sO, sO
    check_against_reference(ptx_bundle(path, arch="sm_100a", pass_pipeline=pipeline), path, 300, 200,
                            device=ONE_SM)
