"""sm_100a's query tiles from a tile table (Note [Tile table on sm_100a] in
attnc/backend/sm100a_tiles.py), their key ranges from the table's runs or from a block map,
run in the PTX emulator against attnc.reference: documents
+ causal with the LSE at M = N = 800, documents of 256, 300, 200 and 44 rows, so that the
CTAs' 256-row tiles (two Q tiles of 128) end at a Q tile's end (O through TMA), inside the
second Q tile and inside the first (O copied by the epilogue warp's lanes below row_end,
none of the second). The CTAs take the table from its last entry, so a tile that wrote rows
past its end would overwrite rows its successor wrote first. Ids the table cannot align
(short documents, unsorted ids) give it the grid's tiles. Zero race or protocol reports are
allowed."""
from __future__ import annotations

import numpy as np
import pytest

import attnc
from attnc.frontend import load_file
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import ptx_bundle, variant_source
from attnc_sim.device import SimKernel
from tests.gpu.gpu_support import compare
from tests.sim.test_examples_sim import typed_inputs

DOCS_CAUSAL, DOC = "doc[b, i] == doc[b, j] and j <= i", ("doc: i32[B, N]",)
SOURCE = variant_source("docs_causal", 64, mask=DOCS_CAUSAL, params=DOC, lse=True)
DOCUMENTS = (256, 300, 200, 44)
SIZE = sum(DOCUMENTS)


def _case(ids: str = "documents"):
    """The inputs, with document ids `ids`: DOCUMENTS; `short`, documents of 20 rows, more
    tiles than the table holds (its grid, each tile's keys from its first row's document);
    `unsorted`, ids out of order (the grid, every tile's keys from 0)."""
    rng = np.random.default_rng(5)
    shape = (1, 1, SIZE, 64)
    case = {name: rng.standard_normal(shape).astype(np.float32) for name in ("q", "k", "v")}
    doc = np.repeat(np.arange(len(DOCUMENTS)), DOCUMENTS)
    if ids == "short":
        doc = np.arange(SIZE) // 20
    elif ids == "unsorted":
        doc = rng.integers(0, 3, SIZE)
    case["doc"] = doc.reshape(1, SIZE).astype(np.int32)
    return case


def _bundle(tmp_path, options: dict):
    path = tmp_path / "docs_causal.attn"
    path.write_text(SOURCE)
    return path, ptx_bundle(path, arch="sm_100a", pass_pipeline=pipeline_with_options("sm_100a", options))


# The kernels of each way to find a tile's key blocks: the table's runs (the default: the
# rest of the mask, j <= i, is static), a block map over the table's tiles, the grid's map.
KERNELS = {"runs": ["qtiles", "attn_fwd"], "map": ["qtiles", "blockmap", "attn_fwd"],
           "grid": ["blockmap", "attn_fwd"]}
OPTIONS = {"runs": {}, "map": {"run_ranges": "false"}, "grid": {"aligned_tiles": "false"}}


@pytest.mark.parametrize("ranges, ids", [("runs", "documents"), ("map", "documents"), ("grid", "documents"),
                                         ("runs", "short"), ("map", "short"), ("runs", "unsorted")])
def test_table_tiles_compute_the_reference(tmp_path, ranges, ids):
    path, bundle = _bundle(tmp_path, OPTIONS[ranges])
    spec = bundle.manifest.specialization
    assert (spec["aligned_tiles"], spec["run_ranges"]) == (ranges != "grid", ranges == "runs")
    assert [k.name for k in bundle.manifest.kernels] == KERNELS[ranges]
    variant, case = load_file(str(path)), _case(ids)
    kernel = SimKernel(bundle, seed=1)
    out = kernel(**typed_inputs(bundle, case))
    assert kernel.last_reports == []
    assert compare(variant, out, attnc.reference(variant, **case)) == []


# The table's entries (5 * cdiv(800, 4 * 256) = 5 of them, all tiles here) and the rows of
# each; CTA c takes entry 4 - c.
TILES = [(0, 256), (256, 512), (512, 556), (556, 756), (756, 800)]


@pytest.mark.parametrize("cta", range(len(TILES)))
def test_each_cta_writes_its_tile_rows(tmp_path, cta):
    """One CTA of the attention kernel run alone (the mask kernels whole) writes O and the
    LSE of its table tile's rows, and no others."""
    path, bundle = _bundle(tmp_path, {})
    variant, case = load_file(str(path)), _case()
    kernel = SimKernel(bundle, seed=1)
    out = kernel(**typed_inputs(bundle, case), ctas=[(cta, 0, 0)])
    assert kernel.last_reports == []
    assert kernel.last_launches[-1].grid == (len(TILES), 1, 1)
    lo, hi = TILES[len(TILES) - 1 - cta]
    expected = np.zeros(SIZE, bool)
    expected[lo:hi] = True
    assert (kernel.last_written["o"][0, 0].all(axis=-1) == expected).all()
    assert (kernel.last_written["o"][0, 0].any(axis=-1) == expected).all()
    assert (kernel.last_written["lse"][0, 0] == expected).all()
    ref = attnc.reference(variant, **case)
    rows = {name: out[name][0, 0, lo:hi] for name in ("o", "lse")}
    assert compare(variant, rows, {name: ref[name][0, 0, lo:hi] for name in ("o", "lse")}) == []


# Other layouts of O and of the table: a per-head table (the ids read h), B = H = 2 with one
# KV head, an f32 O at head dim 128 (two swizzle blocks a row); head dim 256, one 128-row Q
# tile a CTA. Documents of 200 and 100 rows at M = N = 300: tiles that end inside a Q tile.
HEADS = """attention docs_heads {
  q: bf16[B, H, M, 128]
  k: bf16[B, HKV, N, 128]
  v: bf16[B, HKV, N, 128]
  param doc: i32[B, H, N]
  mask_mod(b, h, i, j) = doc[b, h, i] == doc[b, h, j]
  out o: f32[B, H, M, 128]
  out lse: f32[B, H, M]
}
"""
WIDE = variant_source("docs_wide", 256, mask=DOCS_CAUSAL, dtype="f16", params=DOC)


@pytest.mark.parametrize("source, batch, heads, heads_kv, q_tiles, keys",
                         [(HEADS, 2, 2, 1, 2, 300), (HEADS, 1, 2, 1, 2, 400), (WIDE, 1, 1, 1, 1, 300)],
                         ids=["per-head-f32", "keys-past-m", "head-dim-256"])
def test_other_layouts_compute_the_reference(tmp_path, source, batch, heads, heads_kv, q_tiles, keys):
    """keys-past-m: N = 400 > M = 300, where the keys past M have ids the table does not
    order (two documents mixed there), which the runs leave to the mask per score."""
    per_head = source is HEADS
    path = tmp_path / "docs.attn"
    path.write_text(source)
    bundle = ptx_bundle(path, arch="sm_100a")
    spec = bundle.manifest.specialization
    assert (spec["aligned_tiles"], spec["run_ranges"], spec["q_tiles"]) == (True, True, q_tiles)
    variant = load_file(str(path))
    rng = np.random.default_rng(9)
    size, d = 300, variant.head_dim_qk
    case = {"q": rng.standard_normal((batch, heads, size, d)).astype(np.float32)}
    case.update({name: rng.standard_normal((batch, heads_kv, keys, d)).astype(np.float32) for name in ("k", "v")})
    doc = np.concatenate([np.arange(size) >= 200, rng.integers(0, 2, keys - size)]).astype(np.int32)
    case["doc"] = np.broadcast_to(doc, (batch, heads, keys) if per_head else (batch, keys)).copy()
    if per_head:                    # the heads' documents differ
        case["doc"][:, 1, :size] = (np.arange(size) >= 90).astype(np.int32)
    kernel = SimKernel(bundle, seed=1)
    out = kernel(**typed_inputs(bundle, case))
    assert kernel.last_reports == []
    assert compare(variant, out, attnc.reference(variant, **case)) == []


@pytest.mark.parametrize("ranges", ["runs", "map"])
def test_a_tile_visits_its_documents_key_blocks_only(tmp_path, monkeypatch, ranges):
    """The table's first tile of head 0 (rows [0, 200), its document's; CTA 4 of 5 takes
    entry 0) visits key blocks [0, 128) and [128, 256), not [256, 300), which holds the next
    document only: 2 blocks x 2 Q tiles x (8 K-steps of QK^T + 8 of P.V) tcgen05.mma, from
    the runs as from the map."""
    from tests.sim.test_lazy_sm100a_sim import counting

    path = tmp_path / "docs.attn"
    path.write_text(HEADS)
    bundle = ptx_bundle(path, arch="sm_100a", pass_pipeline=pipeline_with_options("sm_100a", OPTIONS[ranges]))
    variant = load_file(str(path))
    rng = np.random.default_rng(9)
    case = {"q": rng.standard_normal((1, 2, 300, 128)).astype(np.float32)}
    case.update({name: rng.standard_normal((1, 1, 300, 128)).astype(np.float32) for name in ("k", "v")})
    case["doc"] = np.broadcast_to((np.arange(300) >= 200).astype(np.int32), (1, 2, 300)).copy()
    issued = counting(monkeypatch, "tcgen05.mma")
    kernel = SimKernel(bundle, seed=1)
    out = kernel(**typed_inputs(bundle, case), ctas=[(4, 0, 0)])
    assert kernel.last_reports == []
    assert sum(issued.values()) == 2 * 2 * (128 // 16 + 128 // 16)
    ref = attnc.reference(variant, **case)
    assert compare(variant, {"o": out["o"][:, :1, :200]}, {"o": ref["o"][:, :1, :200]}) == []


def test_a_tile_within_one_q_tile_skips_the_other(tmp_path, monkeypatch):
    """Note [Q tiles without rows]: the table's second tile of head 0 (rows [200, 300), its
    document's; CTA 3 of 5 takes entry 1) lies within its first Q tile: one key block
    ([200, 328) from its key origin) x 1 Q tile x (8 K-steps of QK^T + 8 of P.V)
    tcgen05.mma, the exponentials of one softmax warpgroup (4 warps), and its rows are the
    reference's."""
    from tests.sim.test_lazy_sm100a_sim import counting

    path = tmp_path / "docs.attn"
    path.write_text(HEADS)
    bundle = ptx_bundle(path, arch="sm_100a")
    variant = load_file(str(path))
    rng = np.random.default_rng(9)
    case = {"q": rng.standard_normal((1, 2, 300, 128)).astype(np.float32)}
    case.update({name: rng.standard_normal((1, 1, 300, 128)).astype(np.float32) for name in ("k", "v")})
    case["doc"] = np.broadcast_to((np.arange(300) >= 200).astype(np.int32), (1, 2, 300)).copy()
    issued, exponentials = counting(monkeypatch, "tcgen05.mma"), counting(monkeypatch, "ex2")
    kernel = SimKernel(bundle, seed=1)
    out = kernel(**typed_inputs(bundle, case), ctas=[(3, 0, 0)])
    assert kernel.last_reports == []
    assert sum(issued.values()) == 1 * 1 * (128 // 16 + 128 // 16)
    assert len(exponentials) == 4
    ref = attnc.reference(variant, **case)
    rows = {name: out[name][:, :1, 200:] for name in ("o", "lse")}
    assert compare(variant, rows, {name: ref[name][:, :1, 200:] for name in ("o", "lse")}) == []


CORRECTION_WARPS = range(8, 12)       # the correction warpgroup's (attn-warp-specialize's sm_100a roles)


@pytest.mark.parametrize("rows, cta, q_tiles", [(300, 0, 2), (300, 1, 1), (100, 0, 1)])
def test_the_grid_works_on_q_tiles_with_rows(tmp_path, monkeypatch, rows, cta, q_tiles):
    """Note [Q tiles without rows] on the grid: query block 1 of M = 300 (rows [256, 300))
    and the one block of M = 100 work on their first Q tile only, block 0 of M = 300 on
    both (no mask): 3 key blocks of 128 (N = 300) x the Q tiles x (4 K-steps of QK^T at
    head dim 64 + 8 of P.V) tcgen05.mma, the exponentials of a softmax warpgroup (4
    warps) a Q tile, and each correction warp's stores of the final O (a row of 64 bf16,
    8 stores of 16 bytes) a Q tile; the CTA's rows are the reference's."""
    from tests.sim.test_lazy_sm100a_sim import counting

    path = tmp_path / "plain.attn"
    path.write_text(variant_source("plain", 64, mask=None))
    bundle = ptx_bundle(path, arch="sm_100a")
    variant = load_file(str(path))
    rng = np.random.default_rng(3)
    case = {"q": rng.standard_normal((1, 1, rows, 64)).astype(np.float32)}
    case.update({name: rng.standard_normal((1, 1, 300, 64)).astype(np.float32) for name in ("k", "v")})
    issued, exponentials = counting(monkeypatch, "tcgen05.mma"), counting(monkeypatch, "ex2")
    stores = counting(monkeypatch, "st")
    kernel = SimKernel(bundle, seed=1)
    out = kernel(**typed_inputs(bundle, case), ctas=[(cta, 0, 0)])
    assert kernel.last_reports == []
    assert sum(issued.values()) == 3 * q_tiles * (64 // 16 + 128 // 16)
    assert len(exponentials) == 4 * q_tiles
    assert {w: stores[w] for w in CORRECTION_WARPS} == {w: 8 * q_tiles for w in CORRECTION_WARPS}
    mine = slice(256 * cta, min(256 * cta + 256, rows))
    ref = attnc.reference(variant, **case)
    assert compare(variant, {"o": out["o"][:, :, mine]}, {"o": ref["o"][:, :, mine]}) == []
