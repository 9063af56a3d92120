"""Note [Square root] (hooks.py): `square_root`, the kernels' sqrt, rounds to nearest as
IEEE (and the reference) do, from a reciprocal square root that may be a few ulps off,
with no call in the kernel. Run on the CPU (host_jit.py) against numpy's f32 sqrt, bit
for bit; the kernels' PTX through ptxas.

Found by a review of the generated variants' assembly: sqrt was PTX's sqrt.rn.f32, whose
slow path ptxas calls as a subroutine, so every wgmma of such a kernel was serialized and
a score_mod of sqrt(s * s + 1.0) spilled 3,312 bytes on sm_90a.
"""
from __future__ import annotations

import numpy as np
import pytest
from mlir.dialects import arith, math

from attnc.backend import cubin
from attnc.backend.hook_arith import square_root
from attnc.backend.lowering import build
from attnc.driver import CompileOptions, compile_mlir
from attnc.ir.context import make_context
from tests.backend.host_jit import host_function
from tests.backend.test_hooks import source
from tests.backend.test_sm90 import SERIALIZED, no_spills

OFFSETS = (0, 1, -1, 3, -3, 8, -8)      # ulps between the rsqrt given and 1/sqrt(x) in f32


@pytest.fixture(scope="module")
def run():
    """sqrt(x) from an rsqrt k ulps off numpy's (the CPU's f32 1/sqrt of the scaled x)."""
    def body(e, a):
        def rsqrt(v):
            exact = arith.divf(e.cf(1.0), math.sqrt(v))
            return arith.bitcast(e.f32, e.add(arith.bitcast(e.i32, exact), a["k"]))
        return [square_root(e, a["x"], rsqrt)]
    return host_function({"x": "f32", "k": "i32"}, body, make_context())


def check(run, xs):
    for x in np.asarray(xs, np.float32):
        with np.errstate(invalid="ignore"):
            want = np.sqrt(x)
        for k in OFFSETS:
            got = np.float32(run(x=float(x), k=k)[0])
            assert (np.isnan(got) and np.isnan(want)) or got.view(np.int32) == want.view(np.int32), \
                (float(x), k, float(got), float(want))


def test_roots_next_to_midpoints(run):
    """x at and around the square of the midpoint between two f32 roots, in a few binades
    and at the ends of one (a root that is a power of 2, whose ulp below is half its ulp)."""
    ys = np.array([1.0, 1.5, 1.9999999, 2.0, 3.1415927, 1e-20, 1.2e19, 2.0 ** -40, 2.0 ** 60], np.float32)
    xs = []
    for y in ys:
        for side in (1, -1):
            neighbour = np.nextafter(y, np.float32(side * np.inf))
            mid = (np.float64(y) + np.float64(neighbour)) / 2
            x = np.float32(mid * mid)
            xs += [x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))]
        xs.append(np.float32(np.float64(y) ** 2))
    check(run, xs)


# x in [1, 4) whose root one Newton step alone misses from the rsqrt 1, 3 or 8 ulps off
# (the steps before the neighbour's choice; found over all 2^24 of them in numpy)
NEWTON_MISSES = [1.14332115650177, 1.183793544769287, 1.252241611480713, 1.529930830001831,
                 1.0333690643310547, 1.1299601793289185, 1.659347653388977, 1.8762410879135132,
                 1.3240946531295776, 1.463927149772644, 3.7277493476867676, 1.9692776203155518,
                 2.9304075241088867, 3.2043557167053223]


def test_roots_one_newton_step_misses(run):
    """At those x, and scaled by powers of 4 into other binades (and past the scalings'
    bounds), the root is still the nearest."""
    xs = np.array(NEWTON_MISSES, np.float32)
    check(run, np.concatenate([xs * np.float32(4.0 ** p) for p in (0, -40, -20, 15, 40, 60)]))


def test_any_float_from_an_inexact_rsqrt(run):
    """Random x over every binade of f32, subnormals included, with the rsqrt exact or up
    to 8 ulps off either way."""
    rng = np.random.default_rng(7)
    xs = (rng.uniform(1, 2, 300) * 2.0 ** rng.integers(-149, 128, 300)).astype(np.float32)
    check(run, xs[np.isfinite(xs) & (xs > 0)])


def test_special_values(run):
    check(run, [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -1e-40, 1e-45, 2.0 ** -126, 3.4028235e38,
                2.0 ** -64, 2.0 ** 64, np.nextafter(np.float32(2.0 ** -64), np.float32(0)),
                np.nextafter(np.float32(2.0 ** 64), np.float32(np.inf))])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_a_score_mod_with_sqrt_calls_nothing(arch):
    """The kernel of a score_mod with sqrt per score has no sqrt.rn.f32 and no call; on
    sm_90a its wgmma stay asynchronous and it spills nothing (it spilled 3,312 bytes)."""
    result = compile_mlir(source("roots", "score_mod(s, b, h, i, j) = sqrt(s * s + 1.0) - 1.0 + s * 0.5", hd=128),
                          "roots.attn", CompileOptions(arch=arch))
    art = build(result)
    assert "sqrt.rn" not in art.ptx and "call" not in art.ptx.replace("call.uni", "")
    if arch == "sm_90a":
        log = cubin.ptx_to_cubin(art.ptx, arch, verbose=True).info_log
        no_spills(log)
        assert SERIALIZED not in log, log
