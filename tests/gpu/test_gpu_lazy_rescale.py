"""Lazy rescale on a real GPU (Note [Lazy rescale] in attnc/backend/softmax.py):
inputs whose scores climb toward the first keys, which the kernels visit last (key blocks
from the top down), so that rows' maxima move by far more than 2^8 in the middle of a row,
on every step, while rows weighted 0.05 stay under the threshold after their first block:
within one warp some rows move and others keep their max. Every example bundle whose O
has head dim 128 (where both targets rescale lazily by default, sm_90a a step late),
against attnc.reference: o, and lse where the example has it (gemma2), with a sink where
it has one (docs_sink).
"""
from __future__ import annotations

import pytest

from gpu_support import entries, run_against_reference, skip_reason

pytestmark = pytest.mark.gpu

SHAPES = [(333, 333), (517, 517)]


def _wide_entries() -> list:
    return [e for e in entries("examples") if e.get("name") == "no-bundles" or e["head_dim"][1] == 128]


def climbing(case: dict, sizes: dict) -> dict:
    """q >= 0 with rows weighted 1 or 0.05 in runs of 4 (rows 4r..4r+3 of a warp's 16);
    k shifted by up to 6 toward key 0: a block of 64 keys scores about 6 * 64 / N * sum(q)
    above the next one up, past the threshold (8 / (log2(e) / sqrt(128)) ~ 63) at N < 700."""
    import numpy as np

    q, k = case["q"], case["k"]
    weight = np.where((np.arange(q.shape[2]) // 4) % 2 == 0, 1.0, 0.05).astype(np.float32)
    case["q"] = np.abs(q) * weight[None, None, :, None]
    ramp = (6.0 * (1.0 - np.arange(k.shape[2]) / k.shape[2])).astype(np.float32)
    case["k"] = k + ramp[None, None, :, None]
    return case


@pytest.mark.parametrize("entry", _wide_entries(), ids=lambda e: e["name"])
@pytest.mark.parametrize("m,n", SHAPES)
def test_maxima_that_move_mid_row_match_reference(gpu, entry, m, n):
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    problems, sizes, _ = run_against_reference(entry, m, n, batch=1, heads=4, heads_kv=2, seed=m + n,
                                               adjust=climbing)
    assert not problems, f"{entry['name']} at {sizes}:\n  " + "\n  ".join(problems)
