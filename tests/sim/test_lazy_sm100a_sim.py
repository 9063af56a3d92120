"""sm_100a's lazy rescale in the PTX emulator (Note [Lazy rescale on sm_100a] in
attnc/backend/sm100a.py): scores built to climb from key block to key block, by more than
2^8 in half the rows of every other correction warp and by less in the others, so that some
warps rescale O in the middle of the KV loop and the others skip it; the kernel with the lazy
rescale (the default) and without it against the reference, with no race or protocol
report, and the correction warps' reads of O counted: a stale max is consistent, so the
result alone would not show a rescale that is never skipped, or one skipped too often."""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

import attnc
from attnc.frontend import load_file
from attnc.passes.pipelines import format_pipeline, target_pipeline
from attnc.testing import ptx_bundle
from attnc_sim import isa
from attnc_sim.device import SimKernel
from tests.gpu.gpu_support import bind_sizes, compare, make_case
from tests.sim.test_examples_sim import typed_inputs

MHA = Path(__file__).resolve().parents[2] / "examples" / "mha.attn"


def bundle_with(lazy: bool):
    names = format_pipeline(target_pipeline("sm_100a")).split(",")
    names[names.index("attn-kernel-choices")] = f"attn-kernel-choices{{lazy_rescale={int(lazy)}}}"
    return ptx_bundle(MHA, arch="sm_100a", pass_pipeline=",".join(names))


def climbing_case(variant, m: int, n: int, block_n: int):
    """q and k whose scores stand `climb` natural units times their key block's level
    (1, 0, 3, 2) higher, row by row: 12 (past the 2^8 of the lazy max, whose threshold is
    8 / log2(e) = 5.5 units) in the even rows of even warps of each 128-row Q tile (a warp
    whose vote is mixed), 1 in the others (the odd warps' votes all skip), plus noise."""
    rng = np.random.default_rng(11)
    sizes = bind_sizes(variant, batch=1, heads=1, heads_kv=1, m=m, n=n, rng=rng)
    case = make_case(variant, sizes, {}, rng)
    d = case["q"].shape[-1]
    rows = np.arange(m)
    climb = np.where(((rows % 128) // 32 % 2 == 0) & (rows % 2 == 0), 12.0, 1.0)
    # the blocks' levels: whichever way the KV loop walks them, the max climbs in its middle
    steps = np.array([1, 0, 3, 2])[np.arange(n) // block_n % 4]
    # s = (q . k) / sqrt(d): column 0 of q carries the row's climb, column 0 of k the block
    q = 0.3 * rng.standard_normal((m, d))
    k = 0.3 * rng.standard_normal((n, d))
    q[:, 0] = climb * np.sqrt(d) / 4
    k[:, 0] = 4 * steps
    case["q"] = q[None, None].astype(np.float32)
    case["k"] = k[None, None].astype(np.float32)
    return case


def counting(monkeypatch, opcode: str) -> collections.Counter:
    """{warp index: `opcode` executed} of the kernels the emulator decodes from now on."""
    counts = collections.Counter()
    decode = isa._REGISTRY[opcode]

    def counted(ins, ctx):
        run = decode(ins, ctx)

        def step(w):
            counts[w.index] += 1
            return run(w)
        return step
    monkeypatch.setitem(isa._REGISTRY, opcode, counted)
    return counts


@pytest.mark.parametrize("lazy", [True, False])
def test_climbing_scores(lazy, monkeypatch):
    """One CTA (two Q tiles of 128 rows), four key blocks, 8 chunks of 16 columns a row of O.
    A correction warp reads O's row in every rescale and once for the final O; the lazy
    rescale leaves it the first block's (from -inf) and, in the warps with climbing rows,
    the one block whose level passes the max by 2 (the key loop walks 1, 0, 3, 2 either
    way round)."""
    variant = load_file(str(MHA))
    bundle = bundle_with(lazy)
    assert (b"vote.sync.any" in bundle.code["ptx"]) == lazy
    assert bundle.manifest.specialization["lazy_rescale"] == lazy
    case = climbing_case(variant, 256, 512, block_n=128)
    reads = counting(monkeypatch, "tcgen05.ld")
    kernel = SimKernel(bundle, seed=2)
    out = kernel(**typed_inputs(bundle, case))
    assert kernel.last_reports == []
    ref = attnc.reference(variant, **case)
    assert compare(variant, out, ref) == []
    tiles, chunks, blocks = 2, 8, 4
    rescales = {8: 2, 9: 1, 10: 2, 11: 1} if lazy else dict.fromkeys(range(8, 12), blocks)
    assert {w: reads[w] for w in range(8, 12)} == {w: tiles * chunks * (r + 1) for w, r in rescales.items()}
