"""A mask whose key range is two segments with a gap between them -- a prefix and a causal
window, prefix_window below -- compiled for every target and run in the PTX emulator
against attnc.reference. The program walks the higher segment first, top down (Note [Key
blocks top down] in attnc/passes/tile_program.py), which sm_100a's kernel follows as it
stands; at M = N = 600 the last query blocks skip the blocks between the prefix and the
window."""
from __future__ import annotations

import re

import numpy as np
import pytest

from attnc.driver import CompileOptions, compile_mlir
from attnc.frontend import load
from attnc.ir import to_text
from attnc.testing import ptx_bundle
from tests.gpu.gpu_support import bind_sizes, compare, make_case
from tests.sim.test_examples_sim import emulated

SOURCE = """
attention prefix_window {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  dim P
  mask_mod(b, h, i, j) = j < P or (j <= i and i - j < 64)
  out o: bf16[B, H, M, 64]
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_two_segments_walked_top_down_in_emulator(arch):
    plan = to_text(compile_mlir(SOURCE, "prefix_window.attn", CompileOptions(
        arch=arch, pass_pipeline="attn-tile,attn-analyze-masks")).module, locations=False)
    assert "kv_segments = 2" in plan and plan.count("kv_blocks = ") == 6
    # the tops of the segments' walks, the higher one's (the end of segment 1) first
    tops = re.findall(r"= arith\.subi %\d+#(\d), %c1_i32", plan)
    assert tops == ["3", "1"], tops
    variant = load(SOURCE, "prefix_window.attn")
    rng = np.random.default_rng(3)
    sizes = {**bind_sizes(variant, batch=1, heads=1, heads_kv=1, m=600, n=600, rng=rng), "P": 20}
    case = make_case(variant, sizes, {}, rng)
    kernel, out, ref = emulated(ptx_bundle(SOURCE, arch=arch), variant, case)
    assert kernel.last_reports == []
    assert compare(variant, out, ref) == []
