"""Note [Heads first] (kernel_abi.py): which kernels order their grid by head first, what the
manifest and the PTX then say, and the option. The numerics of the reordered kernels
run on a GPU (tests/gpu: the sliding-window and documents examples and property
variants with bands or block maps take it on sm_80)."""
from __future__ import annotations

from pathlib import Path

import pytest
from mlir import ir

from attnc.backend import ptx
from attnc.backend.kernel_abi import kernel_abi
from attnc.backend.kernel_module import build_kernel_module
from attnc.backend.kernel_spec import ForwardSpec
from attnc.backend.spec_checks import SpecError
from attnc.testing import build_with

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def order(example: str, arch: str = "sm_80", **options) -> str:
    """What the attention kernel's grid in the manifest of examples/<example>.attn runs
    fastest: "heads" or "blocks" (of queries)."""
    art = build_with((EXAMPLES / f"{example}.attn").read_text(), f"{example}.attn", arch, **options)
    x, y, z = art.manifest["kernels"][-1]["grid"]
    block_m = art.manifest["specialization"]["block_m"]
    # The query blocks: the grid's, or a tile table's (Note [Document-aligned tiles]).
    blocks = [5, ["cdiv", "M", 4 * block_m]] if art.manifest["specialization"]["aligned_tiles"] else [["cdiv", "M", block_m]]
    assert z == ["B"] and ["H"] in (x, y) and blocks in (x, y)
    assert art.manifest["specialization"]["heads_first"] is (x == ["H"])
    return "heads" if x == ["H"] else "blocks"


def test_a_band_on_sm_80_orders_its_grid_by_head_first():
    assert order("sliding_window") == "heads"
    assert order("sliding_window", heads_first="false") == "blocks"


def test_a_block_map_on_sm_80_orders_its_grid_by_head_first():
    """docs_sink's mask reads a param: its ranges come from the block map kernel, which
    runs first (kernels[0]) on a grid of its own."""
    assert order("docs_sink") == "heads"


def test_masks_that_read_keys_from_the_start_keep_query_blocks_first():
    assert order("gemma2") == "blocks"                      # causal
    assert order("prefix_lm") == "blocks"
    assert order("gemma2", heads_first="true") == "heads"   # the option, the other way


def test_sm_90a_keeps_query_blocks_first():
    """At head dim 64 (the one-warpgroup kernel, 64-row blocks) the window measured slower."""
    sp = ForwardSpec("bf16", 64, 64, block_m=64, block_n=64, num_warps=4, target="sm_90a", banded=True)
    assert sp.check().grid_heads_first is False
    assert kernel_abi(sp).grid == ((["cdiv", "M", 64],), ("H",), ("B",))


@pytest.mark.parametrize("order", ["heads_first", "tiles_last"])     # Notes [Heads first], [Tiles last]
def test_a_grid_order_needs_one_block_per_cta_and_no_producer(order):
    base = dict(dtype="bf16", head_dim_qk=128, head_dim_v=128, block_m=128, block_n=128, num_warps=8,
                target="sm_90a", **{order: True})
    with pytest.raises(SpecError, match=order):
        ForwardSpec(**base).check()                          # the producer warpgroup's kernel
    with pytest.raises(SpecError, match=order):
        ForwardSpec(**{**base, "target": "sm_80", "num_warps": 4, "q_blocks_per_cta": 2}).check()


def _reads(text: str) -> set[str]:
    return {r for r in ("%ctaid.x", "%ctaid.y", "%nctaid.x", "%nctaid.y") if r in text}


def test_the_kernel_reads_its_query_block_from_grid_y():
    """Heads first: the query block is nctaid.y - 1 - ctaid.y and the head ctaid.x."""
    def ptx_of(**kw) -> str:
        sp = ForwardSpec("bf16", 64, 64, block_m=128, block_n=128, num_warps=4, symbol="hf_test",
                            mask="causal", **kw).check()
        with ir.Context():
            module, _ = build_kernel_module(sp)
            return ptx.to_ptx(module, "sm_80")
    assert _reads(ptx_of(heads_first=True)) == {"%ctaid.x", "%ctaid.y", "%nctaid.y"}
    assert _reads(ptx_of(heads_first=False)) == {"%ctaid.x", "%ctaid.y", "%nctaid.x"}


# ---------------------------------------------------------------- Note [Tiles last]

def test_tiles_last_orders_the_grid_head_batch_query_block():
    """The option puts the query blocks (a tile table's tiles too) on the grid's z, the
    batch on y; it is off by default."""
    for example, blocks in (("gemma2", None), ("docs_sink", "table")):
        art = build_with((EXAMPLES / f"{example}.attn").read_text(), f"{example}.attn", "sm_80", tiles_last="true")
        spec = art.manifest["specialization"]
        x, y, z = art.manifest["kernels"][-1]["grid"]
        assert (x, y) == (["H"], ["B"]) and spec["tiles_last"] is True and spec["heads_first"] is False
        assert z == ([5, ["cdiv", "M", 4 * spec["block_m"]]] if blocks else [["cdiv", "M", spec["block_m"]]])
        default = build_with((EXAMPLES / f"{example}.attn").read_text(), f"{example}.attn", "sm_80")
        assert default.manifest["specialization"]["tiles_last"] is False
        assert default.manifest["kernels"][-1]["grid"][2] == ["B"]


def test_the_kernel_reads_its_query_block_from_grid_z_with_tiles_last():
    sp = ForwardSpec("bf16", 64, 64, block_m=128, block_n=128, num_warps=4, symbol="tl_test",
                        mask="causal", tiles_last=True).check()
    with ir.Context():
        module, _ = build_kernel_module(sp)
        text = ptx.to_ptx(module, "sm_80")
    assert {r for r in ("%ctaid.x", "%ctaid.y", "%ctaid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z")
            if r in text} == {"%ctaid.x", "%ctaid.y", "%ctaid.z", "%nctaid.z"}
    assert kernel_abi(sp).grid == (("H",), ("B",), (["cdiv", "M", 128],))


def test_tiles_last_and_heads_first_are_not_given_together():
    with pytest.raises(SpecError, match="two orders"):
        ForwardSpec("bf16", 128, 128, block_m=128, block_n=64, num_warps=4, tiles_last=True,
                       heads_first=True).check()


# ---------------------------------------------------------------- Note [Small grids]

def test_a_causal_sm80_kernel_carries_its_tiles_last_build_for_small_grids():
    import re
    art = build_with((EXAMPLES / "alibi.attn").read_text(), "alibi.attn", "sm_80")
    kernel = art.manifest["kernels"][-1]
    assert kernel["small_grid"] == {"symbol": f"{kernel['symbol']}_tiles_last", "up_to_ctas_per_sm": 20,
                                    "grid": [["H"], ["B"], [["cdiv", "M", 128]]]}
    ptx_text = art.files[art.manifest["code"]["ptx"]].decode()
    assert re.findall(r"\.entry (\w+)", ptx_text) == [kernel["symbol"], f"{kernel['symbol']}_tiles_last"]


@pytest.mark.parametrize("example, arch, options", [
    ("sliding_window", "sm_80", {}),            # a band: the blocks' work is the same
    ("mha", "sm_80", {}),                       # no mask: the same again
    ("alibi", "sm_90a", {}),                    # sm_90a: measured slower (Note [Tiles last])
    ("alibi", "sm_80", {"tiles_last": "false"}),
    ("alibi", "sm_80", {"tiles_last": "true"}),
])
def test_no_small_grid_kernel(example, arch, options):
    art = build_with((EXAMPLES / f"{example}.attn").read_text(), f"{example}.attn", arch, **options)
    assert "small_grid" not in art.manifest["kernels"][-1]
