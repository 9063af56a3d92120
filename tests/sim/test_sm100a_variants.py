"""Generated variants (tests/gpu/variant_gen.py) compiled for sm_100a and run in the emulator
against the reference, with the GPU tests' tolerances: an f32 O at head dim 128 and at 96
(64-byte swizzled rows), head dim 256 (one Q tile a CTA, two K/V stages: seed 7), a mask and
a score_mod that read params, sinks, LSE, GQA. These four are CI's; tools/sim_variants.py runs
every seed, at larger shapes (results/sm100a_emulator.md)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from attnc.driver import CompileOptions, compile_mlir
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


@pytest.mark.parametrize("d_qk, d_v", [(96, 128), (128, 96)])
def test_k_and_v_of_other_row_widths_share_their_ring(d_qk, d_v):
    """K and V take turns in one ring (attn-alloc-smem's sKV), one swizzle for both: the widest
    whose atom divides both rows -- 64 bytes for 192- and 256-byte rows. With V's 128 bytes K's
    TMA boxes were 64 columns wide, 96 / 64 boxes landed a third short, and the MMA warp
    waited for the missing bytes forever. Two key blocks, so that the ring turns."""
    source = (f"attention mixed {{\n  q: f16[B, H, M, {d_qk}]\n  k: f16[B, H, N, {d_qk}]\n"
              f"  v: f16[B, H, N, {d_v}]\n  mask_mod(b, h, i, j) = j <= i + 100\n"
              f"  out o: f16[B, H, M, {d_v}]\n  out lse: f32[B, H, M]\n}}\n")
    plan = compile_mlir(source, "mixed.attn", CompileOptions(arch="sm_100a")).text
    assert re.search(r'name = "sKV", [^}]*swizzle = "xor64B"', plan)
    variant = load(source, "mixed.attn")
    bundle = ptx_bundle(source, arch="sm_100a")
    rng = np.random.default_rng(3)
    sizes = bind_sizes(variant, batch=1, heads=2, heads_kv=1, m=70, n=200, rng=rng)
    kernel, out, ref = emulated(bundle, variant, make_case(variant, sizes, {}, rng))
    assert kernel.last_reports == []
    assert compare(variant, out, ref) == []
