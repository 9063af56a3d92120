"""Integers past 32 bits on a real GPU against attnc.reference (Note [Exact integers],
attnc/backend/exact_ints.py).

The `exact_ints` suite (tools/build_gpu_bundles.py --suites exact_ints) holds masks and a
score_mod whose integers leave 32 bits at 2^16 keys: a squared distance, a product taken
modulo 1000, a product picked by `where` and divided, a squared distance as a bias. In
32-bit arithmetic each would keep, weigh or pick other keys than the reference does; the
kernels compute those values in 64 bits. Two more convert floats out of range: `int(x)`
saturates at the i32 bounds and takes NaN to 0 (Note [Saturating int], hooks.py).
"""
from __future__ import annotations

import pytest

from gpu_support import bundle_cases, run_against_reference, skip_reason

pytestmark = pytest.mark.gpu

SHAPES = [(200, 65573)]


@pytest.mark.parametrize("entry,m,n", list(bundle_cases("exact_ints", lambda entry: SHAPES)))
def test_integers_past_32_bits_match_reference(gpu, entry, m, n):
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    problems, sizes, source = run_against_reference(entry, m, n, batch=1, heads=2, heads_kv=2, seed=m)
    assert not problems, f"{entry['name']} at {sizes}:\n  " + "\n  ".join(problems) + "\n" + source
