"""Note [Block map on sm_100a] (attnc/backend/sm100a.py): the documents example's bundle fills
a block map first, and every role of the attention kernel walks the key blocks the map's row
keeps. Run in the emulator on the grid's query blocks (aligned_tiles off: the table's tiles
are tests/sim/test_tiles_sm100a_sim.py's) at M = N = 300 (256 rows, key blocks of 128): with
a document starting at row 256 the last query block visits one key block where a single
document makes it visit all three -- the CTA runs fewer instructions -- and its rows match
the reference either way."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import attnc
from attnc.frontend import load_file
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import ptx_bundle
from attnc_sim.device import SimKernel
from tests.gpu.gpu_support import compare
from tests.sim.test_examples_sim import typed_inputs

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/docs_sink.attn"
SIZE, START = 300, 256          # the second document starts at the last query block's first row


def _run(bundle, variant, doc: np.ndarray):
    rng = np.random.default_rng(3)
    shape = (1, 1, SIZE, 64)
    case = {name: rng.standard_normal(shape).astype(np.float32) for name in ("q", "k", "v")}
    case.update(doc=doc.reshape(1, SIZE).astype(np.int32), sinks=np.array([0.5], np.float32))
    kernel = SimKernel(bundle, seed=1)
    out = kernel(**typed_inputs(bundle, case), ctas=[(1, 0, 0)])     # the last query block
    assert kernel.last_reports == []
    attention = kernel.last_launches[-1]
    assert [launch.grid for launch in kernel.last_launches] == [(1, 2, 1), (2, 1, 1)]
    ref = attnc.reference(variant, **case)
    rows = kernel.last_written["o"].any(axis=-1)
    assert rows[0, 0, START:].all() and not rows[0, 0, :START].any()
    problems = compare(variant, {"o": np.where(rows[..., None], out["o"], ref["o"])}, ref)
    assert problems == []
    return attention.instructions


def test_the_roles_walk_the_blocks_the_map_keeps():
    variant = load_file(str(EXAMPLE))
    bundle = ptx_bundle(EXAMPLE, arch="sm_100a",
                        pass_pipeline=pipeline_with_options("sm_100a", {"aligned_tiles": "false"}))
    assert [k.name for k in bundle.manifest.kernels] == ["blockmap", "attn_fwd"]
    one = _run(bundle, variant, np.zeros(SIZE))
    two = _run(bundle, variant, (np.arange(SIZE) >= START).astype(np.int32))
    assert two < 0.7 * one        # 0.58: one KV step of three, and the fixed costs
