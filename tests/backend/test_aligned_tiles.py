"""Document-aligned query tiles (Note [Document-aligned tiles], attnc/backend/qtiles.py):
which masks get them, the options, and the bundle's kernels (the table, the map where the
runs do not give the ranges: Note [Ranges from the runs], run_ranges.py). The tiles themselves
run in tests/gpu/test_gpu_aligned_tiles.py."""
from __future__ import annotations

import re

import pytest

from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.passes import kernel_choices
from attnc.testing import build_with

DOCS = """attention docs {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  param doc: i32[B, N]
  param other: i32[B, N]
  param f: f32[B, N]
  mask_mod(b, h, i, j) = MASK
  out o: bf16[B, H, M, 64]
}
"""


def _build(mask: str, arch: str = "sm_80", **options):
    return build_with(DOCS.replace("MASK", mask), "docs.attn", arch, cubin=False, **options)


def _kernels(artifacts) -> list[str]:
    return [k["name"] for k in artifacts.manifest["kernels"]]


def _at_register_floor(artifacts) -> bool:
    """Whether the default bound of Note [CTAs per SM] (kernel_spec.py) leaves a thread just
    128 registers: its CTAs an SM share the SM's 64K registers at 128 each."""
    choices = kernel_choices.read(attention_ops(artifacts.result.module)[0])
    threads = artifacts.manifest["kernels"][-1]["block"][0]
    return choices["min_ctas_unless_spills"] and choices["min_ctas_per_sm"] * threads * 128 >= 64 * 1024


@pytest.mark.parametrize("mask, kernels", [
    # Note [Ranges from the runs] (run_ranges.py): the rest of the mask reads no param.
    ("doc[b, i] == doc[b, j] and j <= i", ["qtiles", "attn_fwd"]),
    ("doc[b, j] == doc[b, i]", ["qtiles", "attn_fwd"]),
    ("doc[b, i] == doc[b, j] and (j <= 10 or i - j < 100)", ["qtiles", "attn_fwd"]),
    # Another param read: the map classifies the table's tiles.
    ("j <= i and doc[b, i] == doc[b, j] and other[b, j] > 0", ["qtiles", "blockmap", "attn_fwd"]),
    ("doc[b, i] == doc[b, j] and f[b, j] > 0.0", ["qtiles", "blockmap", "attn_fwd"]),
])
def test_a_documents_conjunct_gets_a_tile_table(mask, kernels):
    artifacts = _build(mask)
    assert _kernels(artifacts) == kernels
    spec = artifacts.manifest["specialization"]
    assert spec["aligned_tiles"] is True
    assert spec["run_ranges"] is (kernels == ["qtiles", "attn_fwd"]) and spec["blockmap"] is (not spec["run_ranges"])
    table = artifacts.manifest["kernels"][0]["params"][0]
    assert table["name"] == "qtiles"
    # The map and the attention kernel read the table and size their query tiles by it.
    for kernel in artifacts.manifest["kernels"][1:]:
        assert table in kernel["params"]
    assert artifacts.manifest["kernels"][-1]["grid"][1] == [5, ["cdiv", "M", 4 * spec["block_m"]]]


def test_the_run_ranges_option():
    """On by default but at sm_90a's register floor (head dim 64 here: four CTAs an SM,
    128 registers); asked for where it cannot be, an error."""
    mask = "doc[b, i] == doc[b, j] and j <= i"
    assert _kernels(_build(mask, run_ranges=False)) == ["qtiles", "blockmap", "attn_fwd"]
    assert _at_register_floor(_build(mask, "sm_90a"))
    assert _kernels(_build(mask, "sm_90a")) == ["qtiles", "blockmap", "attn_fwd"]
    assert _kernels(_build(mask, "sm_90a", run_ranges=True)) == ["qtiles", "attn_fwd"]
    wide = build_with(DOCS.replace("MASK", mask).replace(", 64]", ", 128]"), "docs.attn", "sm_90a", cubin=False)
    assert not _at_register_floor(wide) and _kernels(wide) == ["qtiles", "attn_fwd"]
    # A bound the user gives is kept whatever ptxas says: the runs then too.
    assert _kernels(_build(mask, "sm_90a", min_ctas_per_sm=4)) == ["qtiles", "attn_fwd"]
    assert _kernels(_build(mask, min_ctas_per_sm=4)) == ["qtiles", "attn_fwd"]
    with pytest.raises(AttncError, match="run_ranges needs a mask whose other conjuncts read no param"):
        _build("doc[b, i] == doc[b, j] and other[b, j] > 0", run_ranges=True)
    with pytest.raises(AttncError, match="run_ranges needs the aligned tiles"):
        _build(mask, run_ranges=True, aligned_tiles=False)
    with pytest.raises(AttncError, match="run_ranges needs a kernel with one query block"):
        _build("doc[b, i] != doc[b, j]", run_ranges=True)


def test_the_run_hooks_replace_every_grid_answer():
    """The analysis' grid answers (kv_range, tile_skip, tile_partial, kv_hint) would be
    wrong for a table's tile, and refuse one (test_the_grid_hooks_refuse_a_table_tile):
    the kernel builds, so none is asked, and no map is read. The mask is split where the
    ids are its only residual (their conjunct's holding comes from the runs), and the
    diagonal's block is loaded before the scan."""
    artifacts = _build("doc[b, i] == doc[b, j] and j <= i")
    spec = artifacts.manifest["specialization"]
    assert spec["run_ranges"] and not spec["blockmap"]
    scratch = [p["name"] for p in artifacts.manifest["kernels"][-1]["params"] if p["kind"] == "scratch"]
    assert scratch == ["qtiles"]
    assert spec["split_mask"] and spec["early_first"]
    # Another residual conjunct beside the ids': the map records which part a MIXED tile
    # holds, the runs could only say it of the ids, so the map stays the default.
    other = "doc[b, i] == doc[b, j] and j <= i and (i - j) % 3 == 0"
    assert _kernels(_build(other)) == ["qtiles", "blockmap", "attn_fwd"]
    assert _build(other).manifest["specialization"]["split_mask"]
    # The runs say nothing of the other residual: the forced kernel tests every conjunct.
    forced = _build(other, run_ranges=True).manifest["specialization"]
    assert forced["run_ranges"] and forced["interval_test"] is not None and not forced["split_mask"]
    assert _kernels(_build(other, split_mask=False)) == ["qtiles", "attn_fwd"]     # the record unread


@pytest.mark.parametrize("mask", [
    "doc[b, i] != doc[b, j]",                       # not equality
    "doc[b, i] == doc[b, j] or j <= i",             # not a conjunct
    "doc[b, i] == other[b, j]",                     # two params
    "f[b, i] == f[b, j]",                           # not i32
    "doc[b, i] == doc[0, j]",                       # other indices differ
    "doc[b, i + 1] == doc[b, j]",                   # not i itself
])
def test_other_masks_keep_the_grid(mask):
    artifacts = _build(mask)
    assert _kernels(artifacts) == ["blockmap", "attn_fwd"]
    assert artifacts.manifest["specialization"]["aligned_tiles"] is False
    with pytest.raises(AttncError, match="aligned_tiles"):
        _build(mask, aligned_tiles=True)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_option_turns_the_table_off(arch):
    mask = "doc[b, i] == doc[b, j] and j <= i"
    artifacts = _build(mask, arch, aligned_tiles=False)
    assert _kernels(artifacts) == ["blockmap", "attn_fwd"]
    assert artifacts.manifest["specialization"]["aligned_tiles"] is False


def test_sm90a_one_warpgroup_kernel_takes_its_tiles_from_the_table():
    """sm_90a's kernel without a producer warpgroup (64-row tiles, the grid's query blocks
    fastest) gets the table by default, as sm_80's does."""
    artifacts = _build("doc[b, i] == doc[b, j] and j <= i", "sm_90a")
    assert _kernels(artifacts) == ["qtiles", "blockmap", "attn_fwd"]
    spec = artifacts.manifest["specialization"]
    assert spec["aligned_tiles"] is True and spec["producer_warpgroup"] is False
    assert artifacts.manifest["kernels"][2]["grid"] == [[5, ["cdiv", "M", 4 * spec["block_m"]]], ["H"], ["B"]]


def test_a_producer_warpgroup_keeps_the_grid():
    mask = "doc[b, i] == doc[b, j] and j <= i"
    artifacts = _build(mask, "sm_90a", producer=True)
    assert _kernels(artifacts) == ["blockmap", "attn_fwd"]
    assert artifacts.manifest["specialization"]["aligned_tiles"] is False
    with pytest.raises(AttncError, match="aligned_tiles needs a kernel with one query block per CTA and no producer"):
        _build(mask, "sm_90a", aligned_tiles=True, producer=True)


def test_the_tile_table_kernel_reads_the_ids_param_only():
    artifacts = _build("doc[b, i] == doc[b, j] and other[b, j] > 0")
    table = artifacts.manifest["kernels"][0]
    assert [p.get("tensor") for p in table["params"] if p["kind"] == "ptr"] == ["doc"]
    assert table["role"] == "mask" and table["grid"] == [[1], [1], ["B"]]
    assert ".entry attnc_docs_qtiles" in artifacts.ptx


def test_each_mask_kernel_names_what_it_fills_and_the_map_reads_the_table():
    kernels = _build("doc[b, i] == doc[b, j] and j <= i", run_ranges=False).manifest["kernels"]
    assert [k.get("fills") for k in kernels] == [["qtiles"], ["blockmap"], None]
    assert {p["name"] for p in kernels[1]["params"] if p["kind"] == "scratch"} == {"blockmap", "qtiles"}


def test_the_grid_hooks_refuse_a_table_tile():
    """The static analysis' range is of grid blocks (the first block's hint of a map on the
    aligned tiles: early_first): asked about a table's tile (whose m_block is a table
    index), it refuses instead of answering for the wrong rows."""
    from attnc.backend.lowering import mask_mode
    from attnc.backend.mask_hooks import KvCtx
    from attnc.backend.variant_hooks import variant_hooks
    artifacts = _build("doc[b, i] == doc[b, j] and j <= i", run_ranges=False)
    spec = artifacts.manifest["specialization"]
    assert spec["aligned_tiles"] and spec["blockmap"] and spec["early_first"]
    result = artifacts.result
    op = attention_ops(result.module)[0]
    hooks = variant_hooks(op, result.variant, mask_mode(op, result.variant), module=result.module)
    with pytest.raises(AssertionError, match="not a tile table's tiles"):
        hooks.kv_range(None, KvCtx(0, 0, 0, 1, 1, spec["block_m"], spec["block_n"], aligned=True, n_keys=1))


def test_the_last_tiles_start_longest_first_on_the_heads_first_grid():
    """Note [Longest tiles last]: on sm_80's heads-first grid the table kernel reorders the
    last batch's first tiles, as many as TAIL_WAVES resident grids' worth of CTAs (by
    %nsmid at run time); the attention kernel is the same. Off with tail_waves = 0, and on
    sm_90a's grid (query blocks fastest) where the last CTAs are one head's."""
    from attnc.backend.qtiles import TAIL_WAVES
    from attnc.testing import kernel_ptx
    mask = "doc[b, i] == doc[b, j] and j <= i"
    default = _build(mask)
    spec = default.manifest["specialization"]
    # Two CTAs an SM: 128 threads at up to 255 registers each, no bound (sm_80).
    assert spec["heads_first"] and spec["min_ctas_per_sm"] == 0
    assert default.manifest["kernels"][-1]["block"] == [128, 1, 1]
    assert spec["tail_per_sm"] == TAIL_WAVES * 2 == 4
    assert "%nsmid" in kernel_ptx(default.ptx, "attnc_docs_qtiles")
    assert "%nsmid" not in kernel_ptx(default.ptx, "attnc_docs_fwd")
    assert _build(mask, tail_waves=3).manifest["specialization"]["tail_per_sm"] == 6
    off = _build(mask, tail_waves=0)
    assert off.manifest["specialization"]["tail_per_sm"] == 0 and "%nsmid" not in off.ptx
    assert kernel_ptx(off.ptx, "attnc_docs_fwd") == kernel_ptx(default.ptx, "attnc_docs_fwd")
    assert _build(mask, "sm_90a").manifest["specialization"]["tail_per_sm"] == 0
    # Where the runtime may launch the small grid instead, the table kernel checks the grid's
    # size against %nsmid (Note [Small grids]); given heads_first there is no small grid.
    small_bound = re.compile(r"mov\.u32\s+(%r\d+), %nsmid;.*mul\.lo\.s32\s+%r\d+, \1, 20;", re.S)  # x 20 CTAs an SM
    assert "attnc_docs_fwd_tiles_last" in default.ptx
    assert small_bound.search(kernel_ptx(default.ptx, "attnc_docs_qtiles"))
    given = _build(mask, heads_first=True)
    assert given.manifest["specialization"]["tail_per_sm"] == 4 and "attnc_docs_fwd_tiles_last" not in given.ptx
    assert not small_bound.search(kernel_ptx(given.ptx, "attnc_docs_qtiles"))


def test_tail_waves_where_it_cannot_apply():
    mask = "doc[b, i] == doc[b, j] and j <= i"
    for waves in (-1, 65):
        with pytest.raises(AttncError, match=rf"tail_waves={waves}: expected 0 \(off\) to 64"):
            _build(mask, tail_waves=waves)
    with pytest.raises(AttncError, match="tail_waves orders the query tiles of a tile table"):
        _build(mask, tail_waves=1, aligned_tiles=False)
    with pytest.raises(AttncError, match="tail_waves orders the query tiles of a tile table"):
        _build("j <= i", tail_waves=1)
    with pytest.raises(AttncError, match="aligned_tiles needs a kernel"):     # the more useful message first
        _build("doc[b, i] != doc[b, j]", tail_waves=1, aligned_tiles=True)
    for arch, order in (("sm_90a", {}), ("sm_80", {"heads_first": False}), ("sm_80", {"tiles_last": True})):
        with pytest.raises(AttncError, match="heads-first grid"):
            _build(mask, arch, tail_waves=1, **order)
        assert _build(mask, arch, **order).manifest["specialization"]["tail_per_sm"] == 0
