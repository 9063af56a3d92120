"""Generated variants on a real GPU against attnc.reference: zero mismatches.

Each variant of the `property` suite (tests/gpu/variant_gen.py, seeds in index.json;
tools/build_gpu_bundles.py --suites property) runs at two small ragged shapes, M = 200,
N = 333 and M = 161, N = 97 (fixed sizes in a variant's shapes win), B = 2, H = 8 and
HKV = 2 where the variant has its own KV heads, params filled as the generator says.
A failure prints the seed and the source: `variant_gen.generate(seed)` gives it back.
"""
from __future__ import annotations

import pytest

from gpu_support import bundle_cases, check_against_reference

pytestmark = pytest.mark.gpu

SHAPES = [(200, 333), (161, 97)]


@pytest.mark.parametrize("entry,m,n", list(bundle_cases("property", lambda entry: SHAPES)))
def test_generated_variant_matches_reference(gpu, entry, m, n):
    check_against_reference(entry, m, n, seed=entry["seed"] * 31 + m, label=f"seed {entry['seed']}")
