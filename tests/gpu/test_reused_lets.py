"""Variants whose `let`s use each value twice, on a real GPU against attnc.reference.

The `reused_lets` suite (tools/build_gpu_bundles.py --suites reused_lets) holds masks and
score_mods built from chains of lets with 2^n paths from result to input: doublings, 30
nested `where`s (past the mask analysis' budget, so its boxes are not narrowed), `or`s,
`and`s under double negations, document ids and tanh. The compiler takes each value once
(Note [One target per value] in attnc/analysis/narrowing.py, `_once_per_value` in
attnc/backend/hooks.py); here the kernels it builds must give the reference's answer.
"""
from __future__ import annotations

import pytest

from gpu_support import bundle_cases, check_against_reference

pytestmark = pytest.mark.gpu

SHAPES = [(300, 333), (700, 700)]


@pytest.mark.parametrize("entry,m,n", list(bundle_cases("reused_lets", lambda entry: SHAPES)))
def test_reused_lets_match_reference(gpu, entry, m, n):
    check_against_reference(entry, m, n, seed=m)
