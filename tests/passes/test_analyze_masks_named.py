"""attn-analyze-masks on the masks of dsl.md, from `.attn` source: on random sizes, tile
shapes and dims, every tile class and every KV range is exactly right (tight: skip and
full wherever they truly are; each KV segment starts and ends on a key block that keeps
something; the full range is the run of FULL blocks). Masks that are not affine are
never misclassified (sound), and a mask that reads a param is "runtime" and still sound
for any param values.

Exact classes come from the reference's evaluation of mask_mod (`mask_oracle`).
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from mask_oracle import analyze_source, check, keep_matrix

from attnc.testing import let_chain

NAMED = {
    "causal": "j <= i",
    "bottom_right_causal": "j <= i + (N - M)",
    "sliding_window": "j <= i and i - j < W",
    "sliding_window_100": "i >= j and i - j < 100",          # a constant width
    "two_sided_window": "abs(i - j) <= W",
    "prefix_lm": "j < P or j <= i",
    "chunked_causal": "i // C == j // C and j <= i",
    "chunked_causal_48": "i // 48 == j // 48 and j <= i",
    "block_diagonal": "i // 256 == j // 256",
    "global_tokens": "j < G or i < G or abs(i - j) < W",
}
# The full range (blocks every row keeps) is solved for j; through `j // C` with C a runtime
# dim it is not (it comes out empty, which is sound): only the per-tile classes are exact.
FULL_RANGE_NOT_TIGHT = {"chunked_causal"}
NON_AFFINE = {
    "stride_4": "(i - j) % 4 == 0",
    "product": "i * j < W * 8",
}

BLOCKS = st.sampled_from([16, 32, 64, 128])
SIZES = st.one_of(st.integers(1, 300), st.integers(100, 300))
DIMS = st.fixed_dictionaries({"W": st.integers(0, 200), "P": st.integers(-5, 320),
                              "C": st.integers(1, 150), "G": st.integers(-5, 100)})


def source(name: str, mask: str, params: str = "") -> str:
    return f"""attention {name} {{
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  dim W, P, C, G
  {params}
  mask_mod(b, h, i, j) = {mask}
  out o: bf16[B, H, M, 64]
}}"""


@pytest.fixture(scope="module")
def analyzed():
    """(name, block_m, block_n) -> (variant, what the pass recorded); compiled once."""
    cache = {}

    def get(name, mask, bm, bn):
        if (name, bm, bn) not in cache:
            cache[name, bm, bn] = analyze_source(source(name, mask), bm, bn)
        return cache[name, bm, bn]
    return get


@pytest.mark.parametrize("name", sorted(NAMED))
@settings(max_examples=25, deadline=None)
@given(M=SIZES, N=SIZES, bm=BLOCKS, bn=BLOCKS, dims=DIMS)
def test_named_masks_are_classified_exactly(analyzed, name, M, N, bm, bn, dims):
    variant, rec = analyzed(name, NAMED[name], bm, bn)
    assert rec.kind == "static"
    dims = {**dims, "B": 1, "H": 1, "M": M, "N": N}
    report = check(rec, keep_matrix(variant, dims), dims)
    assert not report.unsound, str(report)
    inexact = [x for x in report.inexact
               if name not in FULL_RANGE_NOT_TIGHT or "full range" not in str(x[1])]
    assert not inexact, str(report)


@pytest.mark.parametrize("name", sorted(NON_AFFINE))
@settings(max_examples=25, deadline=None)
@given(M=SIZES, N=SIZES, bm=BLOCKS, bn=BLOCKS, dims=DIMS)
def test_non_affine_masks_are_never_misclassified(analyzed, name, M, N, bm, bn, dims):
    variant, rec = analyzed(name, NON_AFFINE[name], bm, bn)
    dims = {**dims, "B": 1, "H": 1, "M": M, "N": N}
    report = check(rec, keep_matrix(variant, dims), dims)
    assert not report.unsound, str(report)


def test_a_non_affine_mask_is_mixed_where_intervals_cannot_tell():
    variant, rec = analyze_source(source("stride", NON_AFFINE["stride_4"]), 64, 64)
    dims = {"W": 0, "P": 0, "C": 1, "G": 0, "B": 1, "H": 1, "M": 256, "N": 256}
    assert rec.tile_class(0, 64, 64, 128, 0, 0, *(dims[d] for d in rec.dims)) == (1,)


@settings(max_examples=25, deadline=None)
@given(M=SIZES, bm=BLOCKS, bn=BLOCKS, data=st.data())
def test_documents_are_runtime_and_sound_for_any_document_ids(M, bm, bn, data):
    mask = "doc[b, i] == doc[b, j] and j <= i"
    variant, rec = analyze_source(source("docs", mask, "param doc: i32[B, N]"), bm, bn)
    assert rec.kind == "runtime"
    lengths = data.draw(st.lists(st.integers(1, 120), min_size=1, max_size=8))
    doc = np.repeat(np.arange(len(lengths)), lengths)[:M]
    doc = np.pad(doc, (0, M - len(doc)), constant_values=len(lengths))[None, :]
    dims = {"W": 0, "P": 0, "C": 1, "G": 0, "B": 1, "H": 1, "M": M, "N": M}
    report = check(rec, keep_matrix(variant, dims, params={"doc": doc}), dims)
    assert not report.unsound, str(report)
    # The integer part is exact: the tiles above the diagonal are skipped.
    above = [t for t in report.inexact if isinstance(t[1], int) and t[1] * bn >= (t[0] + 1) * bm]
    assert not above, str(report)


@settings(max_examples=20, deadline=None)
@given(bm=BLOCKS, bn=BLOCKS, W=st.integers(0, 150))
def test_fixed_sequence_lengths(bm, bn, W):
    """M and N may be numbers in the source; the analysis then folds them in."""
    fixed = source("fixed", "j <= i + 100 and i - j < W").replace("H, M, 64", "H, 200, 64") \
        .replace("H, N, 64", "H, 300, 64")
    variant, rec = analyze_source(fixed, bm, bn)
    dims = {"W": W, "P": 0, "C": 1, "G": 0, "B": 1, "H": 1, "M": 200, "N": 300}
    report = check(rec, keep_matrix(variant, dims), dims)
    assert not report.unsound and not report.inexact, str(report)


def test_float_masks_are_runtime_and_decide_nothing_they_cannot():
    variant, rec = analyze_source(source("floaty", "float(i) * 0.5 >= float(j) or j < P"), 64, 64)
    assert rec.kind == "runtime"
    dims = {"W": 0, "P": 70, "C": 1, "G": 0, "B": 1, "H": 1, "M": 256, "N": 256}
    report = check(rec, keep_matrix(variant, dims), dims)
    assert not report.unsound, str(report)
    # the integer disjunct is still exact: keys below P are kept by every row
    assert rec.tile_class(0, 64, 0, 64, 0, 0, *(dims[d] for d in rec.dims)) == (2,)


# --- values that lets reuse -----------------------------------------------------------
SHARED = {      # (first, step, last, the named mask it equals or None)
    "doubled": ("i - j", "{p} + {p}", "{p} <= 0 and j <= i", None),
    "doubled_window": ("i - j", "{p} + {p}", "{p} >= 0 and {p} < W * 4096", None),
    "conjoined": ("j <= i and i - j < W", "{p} and {p}", "{p}", "sliding_window"),
    "disjoined": ("j < P or j <= i", "{p} or {p}", "{p}", "prefix_lm"),
    "selected": ("i - j", "where({p} > W, {p}, {p} + 1)", "{p} >= 0 and j <= i", None),
}


def analysis_calls(mask: str) -> int:
    """Python calls into attnc.analysis while attn-analyze-masks analyses `mask`."""
    calls = [0]

    def count(frame, event, _):
        if event == "call" and "attnc/analysis/" in frame.f_code.co_filename.replace("\\", "/"):
            calls[0] += 1

    sys.setprofile(count)
    threading.setprofile(count)         # the analysis runs in a thread (Note [Deep expressions])
    try:
        analyze_source(source("shared", mask), 64, 64)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return calls[0]


@pytest.mark.parametrize("name", sorted(SHARED))
def test_the_analysis_takes_a_reused_value_once(name):
    """Note [One target per value] (narrowing.py), the literals' memo and the budget
    (intervals.py): a mask whose lets reuse each value twice costs about as much for its
    7th to 10th lets as for its 3rd to 6th, where each had cost 2^n or more (6 nested
    wheres ran for minutes)."""
    first, step, last, _ = SHARED[name]
    c2, c6, c10 = (analysis_calls(let_chain(first, step, n, last)) for n in (2, 6, 10))
    assert c10 - c6 <= 2 * (c6 - c2) + c2 // 10, (c2, c6, c10)


@pytest.mark.parametrize("name", sorted(SHARED))
@settings(max_examples=10, deadline=None)
@given(M=SIZES, N=SIZES, bm=BLOCKS, bn=BLOCKS, dims=DIMS)
def test_masks_with_reused_values_are_classified_soundly(analyzed, name, M, N, bm, bn, dims):
    """The same chains at 12 lets, checked against brute force: never wrong, and exact
    where the chain is a named mask (conjunctions and disjunctions of a literal with
    itself are taken once)."""
    first, step, last, equal = SHARED[name]
    variant, rec = analyzed(name, let_chain(first, step, 12, last), bm, bn)
    dims = {**dims, "B": 1, "H": 1, "M": M, "N": N}
    report = check(rec, keep_matrix(variant, dims), dims)
    assert not report.unsound, str(report)
    if equal is not None:
        assert not report.inexact, str(report)


# Found by a review: the analysis' bounds are exact on unbounded integers,
# and its rewrites multiply them (`x // c + rest <= 0` -> `x + c * rest + 1 - c <= 0`, a
# runtime divisor undone by a product), so the emitted i64 functions wrapped: tiles that
# keep keys came out SKIP and rows lost every key. And a mask whose values may themselves
# leave 64 bits wraps in the kernels and the reference, which unbounded bounds do not
# follow. Both now prove nothing: every tile MIXED, every key block visited.
WIDE = {
    "bounds_wrap": ("i // 2147483647 < j * 2147483647", {}),
    "runtime_divisor": ("i // P < j * P", {"P": 2147483647}),
    "runtime_divisor_50m": ("i // P < j * P", {"P": 50_000_000}),
    "with_causal": ("i // P <= j * P and j <= i", {"P": 2147483647}),
    "values_past_64_bits": ("(j - i) * 2147483647 * 2147483647 < 3", {}),
}


@pytest.mark.parametrize("name", sorted(WIDE))
@pytest.mark.parametrize("bm, bn", [(128, 128), (16, 16)])
def test_masks_past_64_bits_are_never_misclassified(name, bm, bn):
    mask, given = WIDE[name]
    variant, rec = analyze_source(source(name, mask), bm, bn)
    for M, N in ((256, 256), (1, 4), (300, 77)):
        dims = {"W": 0, "P": 1, "C": 1, "G": 0, **given, "B": 1, "H": 1, "M": M, "N": N}
        report = check(rec, keep_matrix(variant, dims), dims)
        assert not report.unsound, str(report)
