"""Every example of examples/ on a real GPU against attnc.reference.

Each example as bf16 and fp16 at head dims 64 and 128 (diff_head_dims: QK/V 128/64 and
64/128), one bundle each (tools/build_gpu_bundles.py --suites examples), at ragged
shapes M = N = 333, M = 200 < N = 517 and M = 517 > N = 200 (bottom-right masks leave
rows empty there), with B = 2 and GQA H = 8, HKV = 2 where the example has its own KV
heads (MHA: H = 8; MQA: HKV = 1). docs_sink runs at M = N (a document id per position)
and at M = 517 > N = 200, where the rows past N read the last id (bounds-safe reads): its
ragged last key block then holds `j <= i` on its keys < N while its ids differ, which the
kernel must still cut at N (Note [Conjuncts a tile holds]). Params: ALiBi slopes
2**(-8 (h + 1) / H), document ids sorted small integers per batch with the last 4 keys a
document of their own (so that the ragged key block straddles a document start), other
f32 params uniform in [-1, 1]; a dim no tensor carries (P of prefix_lm) at random in [1, N]. o and lse must match within gpu_support's tolerances.
Each example's `_other` bundle (attn-kernel-choices' other choices) also runs at M = 64 (one
query block) and M = 256 (two whole blocks of 128 rows).
"""
from __future__ import annotations

import pytest

from gpu_support import bundle_cases, check_against_reference, skip_reason

pytestmark = pytest.mark.gpu

SHAPES = [(333, 333), (200, 517), (517, 200)]
SQUARE_SHAPES = [(333, 333), (517, 517), (517, 200)]
# With the other kernel choices (two query blocks per CTA where the default has one):
# one query block in all, and whole blocks of 128 rows.
OTHER_SHAPES = [(64, 200), (256, 256)]
OTHER_SQUARE_SHAPES = [(64, 64), (256, 256)]


def shapes(entry: dict) -> list[tuple[int, int]]:
    square = entry.get("square")
    extra = (OTHER_SQUARE_SHAPES if square else OTHER_SHAPES) if entry.get("other_choices") else []
    return (SQUARE_SHAPES if square else SHAPES) + extra


@pytest.mark.parametrize("entry,m,n", list(bundle_cases("examples", shapes)))
def test_example_matches_reference(gpu, entry, m, n):
    check_against_reference(entry, m, n, seed=m * 7919 + n)


def _keys_optional(entry: dict) -> bool:
    """Whether the example runs with no keys: no dim drawn from N (`dim P`) and no param
    with an axis of N (an empty param axis is refused while there are query rows)."""
    import attnc_runtime
    from attnc.frontend import load
    from gpu_support import BUNDLES

    variant = load(attnc_runtime.load(BUNDLES / entry["path"]).manifest.source)
    extra = set(variant.dims) - {d for t in (variant.q, variant.k, variant.v) for d in t.shape}
    return not extra and all("N" not in t.shape and variant.k.shape[2] not in t.shape for t in variant.params)


@pytest.mark.parametrize("entry,m,n", list(bundle_cases("examples", lambda entry: [(200, 0)])))
def test_example_with_no_keys(gpu, entry, m, n):
    """N = 0 with query rows: every row is empty, o = 0 and lse = -inf as the reference
    (dsl.md), from the kernels' own N = 0 path (sm80.py's first-block guard) -- found
    untested by a review."""
    if not skip_reason(entry) and not _keys_optional(entry):
        pytest.skip("the example needs keys (a param or a dim of N)")
    check_against_reference(entry, m, n, seed=17)


# Windows wide enough to cut: the shapes above have at most 517 keys, inside both examples'
# windows (1024 and 4096 keys), so a kernel that dropped the window passed them (found by
# a review). B = 1, H = 2 (gemma2: HKV = 1) keeps the reference's work small.
WINDOW_SHAPES = {"sliding_window": [(1500, 1500), (1100, 2000)], "gemma2": [(4500, 4500)]}


@pytest.mark.parametrize("entry,m,n", list(bundle_cases("examples", lambda e: WINDOW_SHAPES.get(e.get("example"), []))))
def test_a_window_that_cuts(gpu, entry, m, n):
    """Rows past the window's width lose their oldest keys: o and lse as the reference's."""
    from gpu_support import run_against_reference
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    problems, sizes, source = run_against_reference(entry, m, n, batch=1, heads=2, heads_kv=1, seed=m + n)
    assert not problems, f"{entry['name']} at {sizes}:\n  " + "\n  ".join(problems) + "\n" + source
