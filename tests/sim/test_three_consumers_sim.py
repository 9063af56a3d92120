"""sm_90a's 192-row tiles (`attn-tile{block_m=192}`: three consumer warpgroups of 64 rows,
FlashAttention-3's tile at head dim 64) run in the PTX emulator against attnc.reference at
small ragged shapes, each with more than one query block: with the producer warpgroup
(their default; setmaxnreg leaves the consumers 160 registers), in its persistent walk, and
as one cooperative role of 12 warps; and as attn-tile's default at head dim 64 (192x96).
Zero race or protocol reports are allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from attnc.passes.pipelines import format_pipeline, target_pipeline
from attnc.testing import ptx_bundle
from tests.sim.test_steps_sim import check_against_reference

ROOT = Path(__file__).resolve().parents[2]


def _pipeline(options: str, tile: str = "") -> str:
    names = format_pipeline(target_pipeline("sm_90a")).split(",")
    names[names.index("attn-tile")] = f"attn-tile{{block_m=192{tile}}}"
    if options:
        names[names.index("attn-warp-specialize")] = f"attn-warp-specialize{{{options}}}"
    return ",".join(names)


@pytest.mark.parametrize("example, options, tile, m, n, threads", [
    ("alibi", "", "", 200, 300, 512),                  # f16, head dim 64, ALiBi under a causal mask
    ("alibi", "", " block_n=96", 200, 300, 512),       # 96-key blocks: no spills at 160 registers
    ("docs_sink", "", "", 150, 200, 512),              # documents (a block map) and a sink
    ("mha", "persistent=true", "", 400, 300, 512),     # three query blocks walked by the CTAs
    ("gemma2", "producer=false", "", 250, 300, 384),   # softcap in a window, the cooperative role
])
def test_three_consumer_warpgroups_compute_the_reference(example, options, tile, m, n, threads):
    path = ROOT / "examples" / f"{example}.attn"
    bundle = ptx_bundle(path, arch="sm_90a", pass_pipeline=_pipeline(options, tile))
    chosen = bundle.manifest.specialization
    assert chosen["block_m"] == 192 and chosen["producer_warpgroup"] is (threads == 512)
    assert chosen["persistent"] is ("persistent" in options)
    assert bundle.manifest.kernels[-1].block == (threads, 1, 1)
    check_against_reference(bundle, path, m, n)


@pytest.mark.parametrize("example, m, n", [
    ("softcap", 250, 300),            # softcap under a causal mask, exp2_fma 0
    ("relative_bias", 200, 260),      # T5's buckets, no mask
])
def test_the_head_dim_64_default_computes_the_reference(tmp_path, example, m, n):
    """The default pipeline at head dim 64: 192x96 tiles, the producer and no exponential
    on the FMA pipe (attnc/passes/tile_table.py, choice_defaults.exp2_fma)."""
    path = tmp_path / f"{example}.attn"
    path.write_text((ROOT / "examples" / f"{example}.attn").read_text().replace("128]", "64]"))
    bundle = ptx_bundle(path, arch="sm_90a")
    chosen = bundle.manifest.specialization
    assert (chosen["block_m"], chosen["block_n"], chosen["exp2_fma"]) == (192, 96, 0)
    assert chosen["producer_warpgroup"] and bundle.manifest.kernels[-1].block == (512, 1, 1)
    check_against_reference(bundle, path, m, n)
