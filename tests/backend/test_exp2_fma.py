"""exp2 on the FMA pipe (Note [Exponentials on the FMA pipe] in sm80_softmax.py): the
algorithm of `exp2_fma` (nvgpu_builders.py) in a float32 emulation against numpy's
exp2."""
from __future__ import annotations

import numpy as np

from attnc.backend.nvgpu_builders import EXP2_POLY, EXP2_SHIFTER

F32 = np.float32


def _fma(a, b, c):
    """a * b + c rounded once to f32 (the f64 product of two f32 values is exact; the f64
    sum's rounding then to f32 can differ from one rounding only at ties)."""
    return (a.astype(np.float64) * b.astype(np.float64) + np.float64(c)).astype(F32)


def emulate_exp2_fma(x) -> np.ndarray:
    """The operations exp2_fma emits, in order, in float32. add.rm.f32 of x in [-127, 0]
    and the shifter (ulp 1 there) is exactly shifter + floor(x)."""
    x = np.maximum(np.asarray(x, F32), F32(-127.0))
    r = (F32(EXP2_SHIFTER) + np.floor(x)).astype(F32)
    f = (x - (r - F32(EXP2_SHIFTER))).astype(F32)
    p = np.full_like(f, F32(EXP2_POLY[2]))
    for c in (EXP2_POLY[1], EXP2_POLY[0], 1.0):
        p = _fma(p, f, F32(c))
    bits = p.view(np.int32).astype(np.int64) + (r.view(np.int32).astype(np.int64) << 23)
    return (bits & 0xFFFFFFFF).astype(np.uint32).view(F32)


def test_emulated_exp2_is_within_9e_5_relative_on_normal_results():
    """The Note's bound: 8.8e-5 at most for x in [-126, 0] (the error is the cubic's on
    f = x - floor(x); the exponent is added exactly)."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-1.0, 0.0, 1 << 20, dtype=F32),          # every f, densely
                        rng.uniform(-126.0, 0.0, 1 << 20).astype(F32),
                        np.arange(-126.0, 1.0, 0.5, dtype=F32)])
    exact = np.exp2(x.astype(np.float64))
    rel = np.abs(emulate_exp2_fma(x) - exact) / exact
    assert 8.0e-5 < rel.max() < 8.8e-5, rel.max()


def test_emulated_exp2_at_and_below_the_clamp():
    """-inf (a masked score), -127 and below give exactly 0 (p = 1 leaves no mantissa at
    exponent 0); (-127, -126) a subnormal below 2^-126, where ex2.approx.ftz gives 0; 0
    gives 1, and a rounding above 0 still about 1."""
    y = emulate_exp2_fma([-np.inf, -1000.0, -127.0, -126.5, 0.0, 1e-6])
    assert y[:3].tolist() == [0.0, 0.0, 0.0]
    assert 0.0 < y[3] < 2.0 ** -126
    assert y[4] == 1.0 and abs(y[5] - 1.0) < 1e-5
