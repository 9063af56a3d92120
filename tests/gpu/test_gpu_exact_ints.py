"""Integers past 32 bits on a real GPU against attnc.reference (Note [Exact integers],
attnc/backend/exact_ints.py).

The `exact_ints` suite (tools/build_gpu_bundles.py --suites exact_ints) holds masks and a
score_mod whose integers leave 32 bits at 2^16 keys: a squared distance, a product taken
modulo 1000, a product picked by `where` and divided, a squared distance as a bias. In
32-bit arithmetic each would keep, weigh or pick other keys than the reference does; the
kernels compute those values in 64 bits. Two more convert floats out of range: `int(x)`
saturates at the i32 bounds and takes NaN to 0 (Note [Saturating int], hooks.py). Two
divide to decide keys (Note [Division], hooks.py), one empties a row by its scores
(Note [Empty rows], softmax.py), one masks by a score of -1e30 (Note [Rounded-up max],
softmax.py), one scales s by a temperature (Note [Score scalings], score_forms.py), and
one tells -0.0 from +0.0 through min and max (Note [Signed zeros in min and max],
attnc/reference_eval.py).
"""
from __future__ import annotations

import pytest

from gpu_support import BUNDLES, bundle_cases, run_against_reference, skip_reason

pytestmark = pytest.mark.gpu

SHAPES = [(200, 65573)]


@pytest.mark.parametrize("entry,m,n", list(bundle_cases("exact_ints", lambda entry: SHAPES)))
def test_integers_past_32_bits_match_reference(gpu, entry, m, n):
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    if entry.get("case") == "empty_by_score":
        pytest.skip("test_a_row_below_the_lowest_max_is_empty")
    problems, sizes, source = run_against_reference(entry, m, n, batch=1, heads=2, heads_kv=2, seed=m)
    assert not problems, f"{entry['name']} at {sizes}:\n  " + "\n  ".join(problems) + "\n" + source


@pytest.mark.parametrize("entry,m,n", list(bundle_cases("exact_ints", lambda entry: [(200, 3000)])))
def test_a_row_below_the_lowest_max_is_empty(gpu, entry, m, n):
    """score_mod where(i == 7, -3.0e38, s): row 7's max is below -f32max / log2(e), where
    the kernels' exp2 folding cannot reach (Note [Empty rows] in softmax.py). It was
    NaN; it is an empty row now (o = 0, lse = -inf), as README says, and every other row
    is the reference's."""
    if entry.get("case") != "empty_by_score":
        pytest.skip("another case")
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    import numpy as np
    import torch

    import attnc
    import attnc_runtime
    from attnc.frontend import load
    from gpu_support import compare
    kernel = attnc_runtime.load(BUNDLES / entry["path"])
    variant = load(kernel.manifest.source, f"{entry['name']}.attn")
    gen = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (torch.randn(1, 2, rows, 64, generator=gen, device="cuda", dtype=torch.bfloat16)
               for rows in (m, n, n))
    out = kernel(q, k, v)
    torch.cuda.synchronize()
    got = {name: t.float().cpu().numpy() for name, t in out.items()}
    assert np.isfinite(got["o"]).all() and not np.isnan(got["lse"]).any()
    assert (got["o"][:, :, 7] == 0).all() and np.isneginf(got["lse"][:, :, 7]).all()
    ref = attnc.reference(variant, *(t.float().cpu().numpy() for t in (q, k, v)))
    ref["o"][:, :, 7], ref["lse"][:, :, 7] = 0.0, -np.inf
    problems = compare(variant, got, ref)
    assert not problems, "\n".join(problems)
