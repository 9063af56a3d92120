"""The `.approx` functions against an H200's own results, bit for bit (attnc_sim.approx).

data/approx_h200_sample.npz holds inputs and the GPU's results drawn from
tools/sim_isa_vs_gpu.py's sweeps (every fraction of ex2 on both signs, integer parts, bits
below 2^-23, subnormal results; one binade of rcp, two of rsqrt and lg2) and base cases
(special values among them), with the first and last fraction of every segment of each
function's quadratics. A wrong coefficient, squarer column or truncation changes some of them.
data/tanh_h200_sample.npz holds 9,136 of tanh.approx.f32's base-case and tanh.neighbours
results: the smallest and largest input held in every segment, the edges of the ranges where
tanh(x) = x and tanh(x) = 1, special values, and a random draw.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnc_sim import approx

from ptx_harness import f32_bits, run_kernel

SAMPLE = Path(__file__).parent / "data" / "approx_h200_sample.npz"
TANH_SAMPLE = Path(__file__).parent / "data" / "tanh_h200_sample.npz"
FUNCTIONS = {"ex2.ftz": approx.ex2_ftz, "ex2": approx.ex2, "rcp.ftz": approx.rcp_ftz,
             "rsqrt.ftz": approx.rsqrt_ftz, "lg2.ftz": approx.lg2_ftz}
INF = np.float32(np.inf)
NAN_BITS = 0x7FFFFFFF


@pytest.fixture(scope="module")
def sample():
    return np.load(SAMPLE)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_sample_bit_exact(sample, name):
    x, gpu = sample[name + ".x"], sample[name + ".y"]
    got = FUNCTIONS[name](x)
    wrong = np.flatnonzero(f32_bits(got) != f32_bits(gpu))
    assert wrong.size == 0, [(x[i], gpu[i], got[i]) for i in wrong[:5]]


def test_tanh_sample_bit_exact():
    sample = np.load(TANH_SAMPLE)
    x, gpu = sample["x"], sample["y"]
    got = approx.tanh(x)
    wrong = np.flatnonzero(f32_bits(got) != f32_bits(gpu))
    assert wrong.size == 0, [(x[i], gpu[i], got[i]) for i in wrong[:5]]


def test_tanh_odd_identity_and_saturation():
    """tanh(-x) = -tanh(x) bit for bit; x itself below 2^-8, 1 from 8 up (Note
    [tanh.approx]); the last input below 8 is not 1."""
    x = np.random.default_rng(2).normal(0, 3, 4096).astype(np.float32)
    assert (f32_bits(approx.tanh(-x)) == f32_bits(-approx.tanh(x))).all()
    below_8 = np.nextafter(np.float32(8), np.float32(0))
    assert _bits(approx.tanh, [0.0, -0.0, 1e-40, 2.0 ** -9, 8.0, -8.0, INF, -INF, np.nan]) == \
        [0, 0x80000000, f32_bits(np.float32(1e-40)).item(), 0x3B000000, 0x3F800000, 0xBF800000,
         0x3F800000, 0xBF800000, NAN_BITS]
    assert approx.tanh(np.array([below_8]))[0] < 1


def _bits(fn, xs):
    return f32_bits(fn(np.array(xs, np.float32))).tolist()


def test_ex2_special_values():
    """Range ends, signed zeros, subnormal inputs, Inf and NaN; without .ftz, x < -126 goes
    through ex2(x / 2)^2 and gives subnormals down to 2^-149: ex2(-127) is one step below
    2^-127, as on the GPU."""
    sub = np.float32(1e-40)
    assert _bits(approx.ex2_ftz, [0.0, -0.0, sub, -sub, 1.0, -1.0, -126.0, -127.0, 127.0, 128.0,
                                  -INF, INF, np.nan]) == \
        [0x3F800000] * 4 + [0x40000000, 0x3F000000, 0x00800000, 0, 0x7F000000, 0x7F800000,
                            0, 0x7F800000, NAN_BITS]
    assert _bits(approx.ex2, [-126.0, -127.0, -149.0, -150.0, -INF, np.nan]) == \
        [0x00800000, 0x003FFFFF, 1, 0, 0, NAN_BITS]


def test_ex2_negative_side_is_the_mirrored_fraction():
    """ex2(-f) = ex2(1 - f - 2^-23) / 2 for a fraction f > 0: the fraction's bits are
    complemented (Note [ex2.approx]); ex2(-n - f) = ex2(-f) 2^-n exactly."""
    k = np.arange(8, 1 << 23, 8 * 997, dtype=np.int64)      # fractions that 5 + f keeps
    f = (k * 2.0 ** -23).astype(np.float32)
    mirrored = ((2 ** 23 - 1 - k) * 2.0 ** -23).astype(np.float32)
    assert (approx.ex2_ftz(-f) == approx.ex2_ftz(mirrored) / 2).all()
    assert (approx.ex2_ftz(-(f + np.float32(5))) == approx.ex2_ftz(-f) / 32).all()
    assert (approx.ex2_ftz(-f) != approx.ex2_ftz(1 - f) / 2).any()


def test_rcp_rsqrt_lg2_special_values():
    sub = np.float32(1e-40)
    assert _bits(approx.rcp_ftz, [0.0, -0.0, sub, -sub, INF, -INF, 2.0 ** 126, 2.0 ** 127, -1.0, np.nan]) == \
        [0x7F800000, 0xFF800000, 0x7F800000, 0xFF800000, 0, 0x80000000, 0x00800000, 0, 0xBF800000,
         NAN_BITS]
    assert _bits(approx.rsqrt_ftz, [0.0, -0.0, sub, INF, 1.0, 4.0, -1.0, np.nan]) == \
        [0x7F800000, 0xFF800000, 0x7F800000, 0, 0x3F800000, 0x3F000000, NAN_BITS, NAN_BITS]
    # lg2(1/2) is -(1 - 2^-23): F(1) is a few 2^-36 above 0 and the complement keeps it
    assert _bits(approx.lg2_ftz, [1.0, 0.5, 2.0, 0.0, -0.0, sub, INF, -1.0, np.nan]) == \
        [0, 0xBF7FFFFE, 0x3F800000, 0xFF800000, 0xFF800000, 0xFF800000, 0x7F800000, NAN_BITS,
         NAN_BITS]


def test_exponent_reduction_is_exact():
    """rcp(m 2^e) = rcp(m) 2^-e, rsqrt(m 4^e) = rsqrt(m) 2^-e over the normal range."""
    m = np.random.default_rng(1).uniform(1, 4, 4096).astype(np.float32)
    for e in (-60, -1, 3, 40):
        scaled = m * np.float32(2.0 ** e)
        assert (approx.rcp_ftz(scaled) == approx.rcp_ftz(m) * np.float32(2.0 ** -e)).all()
        scaled = m * np.float32(4.0 ** e)
        assert (approx.rsqrt_ftz(scaled) == approx.rsqrt_ftz(m) * np.float32(2.0 ** -e)).all()


@pytest.mark.parametrize("instruction, name", [("ex2.approx.ftz.f32", "ex2.ftz"), ("ex2.approx.f32", "ex2"),
                                               ("rcp.approx.ftz.f32", "rcp.ftz"),
                                               ("rsqrt.approx.ftz.f32", "rsqrt.ftz"),
                                               ("lg2.approx.ftz.f32", "lg2.ftz"),
                                               ("tanh.approx.f32", "tanh")])
def test_emulated_instruction_is_the_model(sample, instruction, name):
    """The emulator's instruction gives the GPU's bits (32 lanes of the sample)."""
    if name == "tanh":
        tanh = np.load(TANH_SAMPLE)
        x, gpu = tanh["x"][4000:4032], tanh["y"][4000:4032]
    else:
        x, gpu = sample[name + ".x"][-32:], sample[name + ".y"][-32:]
    body = f"""
    ld.global.f32 %f1, [%a1];
    {instruction} %f2, %f1;
    st.global.f32 [%a0], %f2;"""
    out = run_kernel(body, [np.zeros(32, np.float32), x]).arrays[0]
    assert f32_bits(out).tolist() == f32_bits(gpu).tolist()
