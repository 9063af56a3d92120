"""Every example of examples/ on a real GPU against attnc.reference (issue 4, item 3).

Each example as bf16 and fp16 at head dims 64 and 128 (diff_head_dims: QK/V 128/64 and
64/128), one bundle each (tools/build_gpu_bundles.py --suites examples), at ragged
shapes M = N = 333, M = 200 < N = 517 and M = 517 > N = 200 (bottom-right masks leave
rows empty there), with B = 2 and GQA H = 8, HKV = 2 where the example has its own KV
heads (MHA: H = 8; MQA: HKV = 1). docs_sink runs at M = N only (a document id per
position). Params: ALiBi slopes 2**(-8 (h + 1) / H), document ids sorted small
integers per batch, other f32 params uniform in [-1, 1]; a dim no tensor carries (P of
prefix_lm) at random in [1, N]. o and lse must match within gpu_support's tolerances.
"""
from __future__ import annotations

import pytest

from gpu_support import bundle_cases, run_against_reference, skip_reason

pytestmark = pytest.mark.gpu

SHAPES = [(333, 333), (200, 517), (517, 200)]
SQUARE_SHAPES = [(333, 333), (517, 517)]


@pytest.mark.parametrize("entry,m,n", list(bundle_cases(
    "examples", lambda entry: SQUARE_SHAPES if entry.get("square") else SHAPES)))
def test_example_matches_reference(gpu, entry, m, n):
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    problems, sizes, source = run_against_reference(entry, m, n, seed=m * 7919 + n)
    assert not problems, f"{entry['name']} at {sizes}:\n  " + "\n  ".join(problems)
