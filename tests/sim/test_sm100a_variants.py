"""Generated variants (tests/gpu/variant_gen.py) compiled for sm_100a and run in the emulator
against the reference, with the GPU tests' tolerances: an f32 O at head dim 128 and at 96
(64-byte swizzled rows), head dim 256 (one Q tile a CTA, two K/V stages: seed 7), a mask and
a score_mod that read params, sinks, LSE, GQA. Seeds 0-35 pass the same way (an O of another
type than q among them); these four are CI's."""
from __future__ import annotations

import numpy as np
import pytest

from attnc.frontend import load
from attnc.testing import ptx_bundle
from tests.gpu.gpu_support import bind_sizes, compare, make_case
from tests.gpu.variant_gen import generate
from tests.sim.test_examples_sim import emulated

SEEDS = (0, 4, 7, 24)


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_variant_in_emulator(seed):
    g = generate(seed)
    variant = load(g.source, f"prop_{seed}.attn")
    bundle = ptx_bundle(g.source, arch="sm_100a")
    rng = np.random.default_rng(seed)
    sizes = bind_sizes(variant, batch=1, heads=2, heads_kv=1, m=70, n=45, rng=rng)
    case = make_case(variant, sizes, g.fills(), rng)
    kernel, out, ref = emulated(bundle, variant, case)
    assert kernel.last_reports == []
    assert compare(variant, out, ref) == [], g.features
