"""sm_100a's query tiles from a tile table (Note [Tile table on sm_100a] in
attnc/backend/sm100a_tiles.py), run in the PTX emulator against attnc.reference: documents
+ causal with the LSE at M = N = 800, documents of 256, 300, 200 and 44 rows, so that the
CTAs' 256-row tiles (two Q tiles of 128) end at a Q tile's end (O through TMA), inside the
second Q tile and inside the first (O copied by the epilogue warp's lanes below row_end,
none of the second). The CTAs take the table from its last entry, so a tile that wrote rows
past its end would overwrite rows its successor wrote first. Zero race or protocol reports
are allowed."""
from __future__ import annotations

import numpy as np
import pytest

import attnc
from attnc.frontend import load_file
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import ptx_bundle
from attnc_sim.device import SimKernel
from tests.gpu.gpu_support import compare
from tests.sim.test_examples_sim import typed_inputs

SOURCE = """attention docs_causal {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  param doc: i32[B, N]
  mask_mod(b, h, i, j) = doc[b, i] == doc[b, j] and j <= i
  out o: bf16[B, H, M, 64]
  out lse: f32[B, H, M]
}
"""
DOCUMENTS = (256, 300, 200, 44)
SIZE = sum(DOCUMENTS)


def _case():
    rng = np.random.default_rng(5)
    shape = (1, 1, SIZE, 64)
    case = {name: rng.standard_normal(shape).astype(np.float32) for name in ("q", "k", "v")}
    case["doc"] = np.repeat(np.arange(len(DOCUMENTS)), DOCUMENTS).reshape(1, SIZE).astype(np.int32)
    return case


def _bundle(tmp_path, options: dict):
    path = tmp_path / "docs_causal.attn"
    path.write_text(SOURCE)
    return path, ptx_bundle(path, arch="sm_100a", pass_pipeline=pipeline_with_options("sm_100a", options))


@pytest.mark.parametrize("aligned", [True, False])
def test_table_tiles_compute_the_reference(tmp_path, aligned):
    path, bundle = _bundle(tmp_path, {} if aligned else {"aligned_tiles": "false"})
    assert bundle.manifest.specialization["aligned_tiles"] is aligned
    names = [k.name for k in bundle.manifest.kernels]
    assert names == (["qtiles", "blockmap", "attn_fwd"] if aligned else ["blockmap", "attn_fwd"])
    variant, case = load_file(str(path)), _case()
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
