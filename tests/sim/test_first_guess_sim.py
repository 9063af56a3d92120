"""The guessed first block (Note [The guessed first block in the IR] in
attnc/schedule/first_guess.py) of sm_80's role (a CTA's one query block, or its pair of
them; one K/V stage, K alone guessed), and of sm_90a's cooperative one where asked, run
in the PTX emulator against attnc.reference, where the guess misses: documents without
causality keep each query row's whole document, so a query block's range ends at its
documents' last key block, which the static analysis' top block (the last of the
sequence) or a table tile's diagonal guesses only for the last document. Both branches
run in one launch; zero race or protocol reports are allowed."""
from __future__ import annotations

import numpy as np
import pytest

import attnc
from attnc.frontend import load_file
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import ptx_bundle
from attnc_sim.device import SimKernel, numpy_dtype
from tests.gpu.gpu_support import bind_sizes, compare, make_case

SOURCE = """attention docs_whole {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  param doc: i32[B, N]
  mask_mod(b, h, i, j) = doc[b, i] == doc[b, j]
  out o: bf16[B, H, M, 64]
}
"""
SIZE = 300


def _case(path):
    variant = load_file(str(path))
    rng = np.random.default_rng(3)
    sizes = bind_sizes(variant, batch=1, heads=2, heads_kv=2, m=SIZE, n=SIZE, rng=rng)
    return variant, make_case(variant, sizes, {"doc": "sorted_ids"}, rng)


def _tops(doc: np.ndarray, block_m: int, block_n: int) -> list[int]:
    """The top key block each grid query block keeps (its documents' last key)."""
    last = {d: int(np.nonzero(doc == d)[0].max()) for d in np.unique(doc)}
    return [max(last[d] for d in np.unique(doc[r:r + block_m])) // block_n for r in range(0, len(doc), block_m)]


@pytest.mark.parametrize("arch, options", [
    ("sm_80", {"aligned_tiles": "false"}), ("sm_80", {}), ("sm_80", {"early_first": "false"}),
    ("sm_80", {"aligned_tiles": "false", "q_blocks_per_cta": "2"}),
    ("sm_80", {"aligned_tiles": "false", "stages": "1"}),
    ("sm_90a", {"aligned_tiles": "false", "early_first": "true"}), ("sm_90a", {"early_first": "true"}),
], ids=["hull-guess", "diagonal-guess", "no-guess", "pairs-hull-guess", "one-stage-hull-guess", "sm90a-hull-guess",
        "sm90a-diagonal-guess"])
def test_missed_guesses_compute_the_reference(tmp_path, arch, options):
    path = tmp_path / "docs_whole.attn"
    path.write_text(SOURCE)
    bundle = ptx_bundle(path, arch, pass_pipeline=pipeline_with_options(arch, options))
    spec = bundle.manifest.specialization
    assert spec["early_first"] is (options.get("early_first") != "false")
    assert spec["q_blocks_per_cta"] == int(options.get("q_blocks_per_cta", 1))
    assert "stages" not in options or spec["stages"] == int(options["stages"])   # one stage: K alone guessed
    variant, case = _case(path)
    if options.get("aligned_tiles") == "false":     # the guess misses for some blocks, hits for others
        tops = _tops(case["doc"][0], spec["block_m"], spec["block_n"])
        hull = -(-SIZE // spec["block_n"]) - 1
        assert hull in tops and any(top != hull for top in tops), tops
    inputs = {name: (value.astype(numpy_dtype(bundle.manifest.tensor(name).dtype))
                     if isinstance(value, np.ndarray) else value) for name, value in case.items()}
    kernel = SimKernel(bundle, seed=1)
    out = kernel(**inputs)
    assert kernel.last_reports == []
    assert compare(variant, out, attnc.reference(variant, **case)) == []
