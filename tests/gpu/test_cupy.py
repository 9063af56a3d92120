"""The runtime on cupy arrays (the task's "torch or cupy tensors"): every f16 example bundle
(tools/build_gpu_bundles.py --suites examples; cupy has no bf16) with q, k, v and its params
as cupy arrays, launched inside a non-blocking cupy stream. The outputs must come back as
cupy arrays allocated by the runtime, and match attnc.reference as test_examples.py's do;
docs_sink's block map kernel and its scratch go through cupy's allocator and stream too.
"""
from __future__ import annotations

import pytest

from gpu_support import bundle_cases, check_against_reference

pytestmark = pytest.mark.gpu

SHAPES = [(200, 517)]
SQUARE_SHAPES = [(333, 333)]


def shapes(entry: dict) -> list[tuple[int, int]]:
    if entry.get("dtype", "f16") != "f16" or entry.get("other_choices"):    # (no bundles: one case, skipped)
        return []
    return SQUARE_SHAPES if entry.get("square") else SHAPES


@pytest.fixture(scope="module")
def cupy_gpu(gpu):
    return pytest.importorskip("cupy", reason="cupy is not installed")


@pytest.mark.parametrize("entry,m,n", list(bundle_cases("examples", shapes)))
def test_example_on_cupy_arrays(cupy_gpu, entry, m, n):
    check_against_reference(entry, m, n, seed=m * 7919 + n, label=f"{entry['name']} (cupy)", library="cupy")
