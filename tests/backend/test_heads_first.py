"""Note [Heads first] (kernel_abi.py): which kernels order their grid by head first, what the
manifest and the PTX then say, and the option. The numerics of the reordered kernels
run on a GPU (tests/gpu: the sliding-window and documents examples and property
variants with bands or block maps take it on sm_80)."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir.roles import name_of, role_ops
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import build_with, kernel_ptx, variant_source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CAUSAL = variant_source("v", 64)            # bf16, d = 64: 128x128 tiles on sm_80


@functools.lru_cache(maxsize=None)
def _built(source: str, arch: str, options: tuple):
    return build_with(source, "v.attn", arch, **dict(options))


def built(source: str, arch: str = "sm_80", **options):
    return _built(source, arch, tuple(sorted(options.items())))


def example_source(name: str) -> str:
    return (EXAMPLES / f"{name}.attn").read_text()


def roles(source: str, arch: str, **options) -> set[str]:
    """The kernel's roles as the pipeline plans them (no PTX built); a refused choice raises."""
    pipeline = pipeline_with_options(arch, options)
    result = compile_mlir(source, "v.attn", CompileOptions(arch=arch, pass_pipeline=pipeline))
    return {name_of(r) for r in role_ops(attention_ops(result.module)[0])}


def order(example: str, arch: str = "sm_80", **options) -> str:
    """What the attention kernel's grid in the manifest of examples/<example>.attn runs
    fastest: "heads" or "blocks" (of queries)."""
    art = built(example_source(example), arch, **options)
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
    art = built(variant_source("v", 64, mask="j <= i and i - j < 1024"), "sm_90a")
    assert art.manifest["specialization"]["heads_first"] is False
    assert art.manifest["kernels"][-1]["grid"] == [[["cdiv", "M", 64]], ["H"], ["B"]]


@pytest.mark.parametrize("order", ["heads_first", "tiles_last"])     # Notes [Heads first], [Tiles last]
def test_a_grid_order_needs_one_block_per_cta_and_no_producer(order):
    mha = example_source("mha")
    assert "producer" in roles(mha, "sm_90a")
    with pytest.raises(AttncError, match=f"{order} needs a kernel with one query block per CTA"):
        roles(mha, "sm_90a", **{order: "true"})
    with pytest.raises(AttncError, match=f"{order} needs a kernel with one query block per CTA") as refused:
        roles(CAUSAL, "sm_80", q_blocks_per_cta=2, **{order: "true"})
    assert "this plan runs two query blocks per CTA (attn-warp-specialize{q_blocks_per_cta=1} runs one)" \
        in str(refused.value)


def _reads(text: str) -> set[str]:
    return {r for r in ("%ctaid.x", "%ctaid.y", "%ctaid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z") if r in text}


def _kernel(art) -> str:
    """The attention kernel's PTX (without the small grid's kernel, where the bundle has it)."""
    return kernel_ptx(art.ptx, art.manifest["kernels"][-1]["symbol"])


def test_the_kernel_reads_its_query_block_from_grid_y():
    """Heads first: the query block is nctaid.y - 1 - ctaid.y and the head ctaid.x (the
    batch is ctaid.z either way)."""
    batch = {"%ctaid.z"}
    assert _reads(_kernel(built(CAUSAL, heads_first="true"))) == batch | {"%ctaid.x", "%ctaid.y", "%nctaid.y"}
    assert _reads(_kernel(built(CAUSAL, heads_first="false"))) == batch | {"%ctaid.x", "%ctaid.y", "%nctaid.x"}


# ---------------------------------------------------------------- Note [Tiles last]

def test_tiles_last_orders_the_grid_head_batch_query_block():
    """The option puts the query blocks (a tile table's tiles too) on the grid's z, the
    batch on y; it is off by default."""
    for example, blocks in (("gemma2", None), ("docs_sink", "table")):
        art = built(example_source(example), tiles_last="true")
        spec = art.manifest["specialization"]
        x, y, z = art.manifest["kernels"][-1]["grid"]
        assert (x, y) == (["H"], ["B"]) and spec["tiles_last"] is True and spec["heads_first"] is False
        assert z == ([5, ["cdiv", "M", 4 * spec["block_m"]]] if blocks else [["cdiv", "M", spec["block_m"]]])
        default = built(example_source(example))
        assert default.manifest["specialization"]["tiles_last"] is False
        assert default.manifest["kernels"][-1]["grid"][2] == ["B"]


def test_the_kernel_reads_its_query_block_from_grid_z_with_tiles_last():
    art = built(CAUSAL, tiles_last="true")
    assert _reads(_kernel(art)) == {"%ctaid.x", "%ctaid.y", "%ctaid.z", "%nctaid.z"}
    assert art.manifest["kernels"][-1]["grid"] == [["H"], ["B"], [["cdiv", "M", 128]]]


@pytest.mark.parametrize("example", ["gemma2", "docs_sink"])     # the grid as is; heads first
def test_the_small_grids_kernel_is_the_kernel_tiles_last_builds(example):
    """Note [Small grids]: the second kernel, the first's gpu.func with its grid reads
    moved, assembles to the PTX of the kernel built with tiles_last, but for its name."""
    default, ordered = built(example_source(example)), built(example_source(example), tiles_last="true")
    small = default.manifest["kernels"][-1]["small_grid"]["symbol"]
    symbol = ordered.manifest["kernels"][-1]["symbol"]
    assert small == f"{symbol}_tiles_last"
    assert _as(default.ptx, small, small) == _as(ordered.ptx, symbol, small)
    assert _as(default.ptx, small, small) != _as(default.ptx, symbol, small)


def _as(ptx: str, kernel: str, name: str) -> str:
    """The PTX of `kernel` named `name`, its block labels without the number that the
    module gives each function."""
    return re.sub(r"\$L__BB\d+_", "$L__BB_", kernel_ptx(ptx, kernel).replace(kernel, name))


def test_tiles_last_and_heads_first_are_not_given_together():
    with pytest.raises(AttncError, match="tiles_last and heads_first are two orders of the grid"):
        roles(example_source("mha"), "sm_80", tiles_last="true", heads_first="true")


# ---------------------------------------------------------------- Note [Small grids]

def test_a_causal_sm80_kernel_carries_its_tiles_last_build_for_small_grids():
    art = built(example_source("alibi"))
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
    art = built(example_source(example), arch, **options)
    assert "small_grid" not in art.manifest["kernels"][-1]
