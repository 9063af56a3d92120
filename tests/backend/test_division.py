"""Note [Division] (hooks.py): `divide`, the kernels' x / y, rounds to nearest as IEEE
(and the reference) do, from a reciprocal that may be a few ulps off. Run on the CPU
(host_jit.py) against numpy's f32 division, bit for bit.

Found by a review: a division by a constant was a multiplication by its
rounded reciprocal (41 * f32(1/41) = 0.99999994, so `int(float(i) / 41.0)` was 0 at
i = 41 and a block-diagonal mask kept (40, 41)), and any other division div.full.f32.
"""
from __future__ import annotations

import numpy as np
import pytest

from attnc.backend.hook_arith import divide
from attnc.ir.context import make_context
from tests.backend.host_jit import host_function

TINY = np.float32(2.0 ** -126)


@pytest.fixture(scope="module")
def run():
    return host_function({"x": "f32", "y": "f32", "r": "f32"},
                         lambda e, a: [divide(e, a["x"], a["y"], a["r"])], make_context())


def ulps_off(r: np.float32, k: int) -> np.float32:
    return (np.array([r], np.float32).view(np.int32) + k).view(np.float32)[0]


def check(run, xs, y, offsets=(0,)):
    y = np.float32(y)
    for k in offsets:
        r = ulps_off(np.float32(1) / y, k)
        for x in xs:
            x = np.float32(x)
            with np.errstate(all="ignore"):
                want = x / y
            if np.isfinite(want) and 0 < abs(want) < TINY:
                continue            # subnormal quotients: the kernels flush them (Note [Division])
            got = np.float32(run(x=float(x), y=float(y), r=float(r))[0])
            assert (np.isnan(got) and np.isnan(want)) or got.view(np.int32) == want.view(np.int32), \
                (float(x), float(y), k, float(got), float(want))


CONSTANTS = [41.0, 0.3, 1.1, 33.0, 3.0, 7.0, 10.0, float(np.log(np.float32(16))), -5.5, 1e-30, 3e30]


@pytest.mark.parametrize("y", CONSTANTS)
def test_integers_over_a_constant_are_exact(run, y):
    """int(float(i) / y) at and around every multiple: the review's cases (41, 0.3, 1.1)."""
    check(run, range(0, 4000), y)


@pytest.mark.parametrize("y", CONSTANTS)
def test_any_float_over_any_divisor_from_an_inexact_reciprocal(run, y):
    """Random x over 120 binades and signs, with the reciprocal exact or up to 2 ulps off
    (what rcp.approx may give)."""
    rng = np.random.default_rng(int(abs(y) * 1000) % 2**32)
    xs = (rng.uniform(1, 2, 400) * 2.0 ** rng.integers(-60, 60, 400) * rng.choice([-1, 1], 400)).astype(np.float32)
    check(run, xs, y, offsets=(0, 1, -1, 2, -2))


def test_special_values(run):
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1.0, -1.0]
    for y in [41.0, -2.5, 3e38]:
        check(run, specials, y)
    for x in [1.0, -1.0, 0.0, np.inf]:         # x / 0 and x / inf from the reciprocal rcp gives
        for y, r in [(0.0, np.inf), (-0.0, -np.inf), (np.inf, 0.0)]:
            with np.errstate(all="ignore"):
                want = np.float32(x) / np.float32(y)
            got = np.float32(run(x=x, y=y, r=r)[0])
            assert (np.isnan(got) and np.isnan(want)) or got == want, (x, y, got, want)
