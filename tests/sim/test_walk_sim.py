"""Persistent CTAs in the PTX emulator (Note [The walk over query blocks] in
attnc/schedule/walk.py): on an emulated GPU of one SM the grid is one CTA, which walks all
four query blocks (two heads of two 128-row blocks) in four rounds, in either order, its
K/V ring, Q's slot
and, with ping-pong, the consumers' turns running on from block to block (Note [Ping-pong
turns] in attnc/schedule/sync.py). Zero race or protocol reports are allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from attnc.passes.pipelines import format_pipeline, target_pipeline
from attnc.testing import ptx_bundle
from attnc_sim.device import SimDevice
from tests.sim.test_steps_sim import check_against_reference

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("example, options", [("sliding_window", "persistent=1"),
                                              ("mha", "persistent=1 pingpong=1"),
                                              ("gemma2", "persistent=1 walk_order=linear")])
def test_one_cta_walks_every_query_block(example, options):
    path = ROOT / "examples" / f"{example}.attn"
    names = format_pipeline(target_pipeline("sm_90a")).split(",")
    names[names.index("attn-warp-specialize")] = f"attn-warp-specialize{{{options}}}"
    bundle = ptx_bundle(path, arch="sm_90a", pass_pipeline=",".join(names))
    assert "MinSms" in str(bundle.manifest.kernels[-1].grid)
    check_against_reference(bundle, path, 200, 300, device=SimDevice(multiprocessors=1))


BOTTOM_RIGHT = """attention bottom_right {
  q: bf16[B, H, M, 128]
  k: bf16[B, H, N, 128]
  v: bf16[B, H, N, 128]
  mask_mod(b, h, i, j) = j <= i + (N - M)
  out o: bf16[B, H, M, 128]
}
"""


@pytest.mark.parametrize("options", ["persistent=1", "persistent=1 pingpong=1"])
def test_blocks_without_keys_in_the_walk(options, tmp_path):
    """Causal from the bottom right with M = 260 query rows and N = 64 keys: the first
    query block of each head keeps no key, so the walk meets blocks without steps, whose
    consumers release Q's slot at once and (without ping-pong) finish the last block's
    epilogue in their branch without steps."""
    path = tmp_path / "bottom_right.attn"
    path.write_text(BOTTOM_RIGHT)
    names = format_pipeline(target_pipeline("sm_90a")).split(",")
    names[names.index("attn-warp-specialize")] = f"attn-warp-specialize{{{options}}}"
    bundle = ptx_bundle(path, arch="sm_90a", pass_pipeline=",".join(names))
    check_against_reference(bundle, path, 260, 64, device=SimDevice(multiprocessors=1))
