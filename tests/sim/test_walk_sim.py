"""Persistent CTAs in the PTX emulator (Note [The walk over query blocks] in
attnc/schedule/walk.py): on an emulated GPU of one SM the grid is one CTA, which walks all
four query blocks (two heads of two 128-row blocks) in four rounds, in either order, its
K/V ring, Q's slot
and, with ping-pong, the consumers' turns running on from block to block (Note [Ping-pong
turns] in attnc/schedule/sync.py). Zero race or protocol reports are allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

import attnc
from attnc.passes.pipelines import format_pipeline, target_pipeline
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
    bundle = attnc.compile(path, arch="sm_90a", pass_pipeline=",".join(names)).bundle
    assert "MinSms" in str(bundle.manifest.kernels[-1].grid)
    check_against_reference(bundle, path, 200, 300, device=SimDevice(multiprocessors=1))
