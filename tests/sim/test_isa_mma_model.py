"""The tensor-core accumulation model of mma.sync m16n8k16 (isa_mma, Note [Tensor-core
accumulation]): bit-exact agreement with an H200 on a sample of its results, and hand-worked
cases where the model's truncation gives another result than a correctly rounded sum.

tests/sim/data/mma_h200_sample.npz holds 24 warps per type of tools/sim_isa_vs_gpu.py's
mma cases (seed 0): the warps where float32 sums disagree with the GPU most often. Per
type: `{t}_warps` their indices in the case, `{t}_a`, `{t}_b`, `{t}_c` each lane's A, B and
C registers, `{t}_d` the D registers the H200 wrote.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnc_sim.isa_mma import A_INV, B_INV, C_INV, halves_to_f32, tensor_core_mma
from tests.sim.ptx_harness import run_kernel

SAMPLE = Path(__file__).parent / "data" / "mma_h200_sample.npz"
# 16 warps per type of the mma.*.edge sweeps (subnormal, zero, Inf and NaN inputs, huge C):
# those with NaN results, those with sums past FLT_MAX, and others; same layout as SAMPLE
EDGE_SAMPLE = Path(__file__).parent / "data" / "mma_edge_h200_sample.npz"

_MMA = """
    mul.wide.u32 %rd2, %tid, 16;
    mul.wide.u32 %rd4, %tid, 8;
    ld.param.u64 %rd1, [p1];
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd3];
    ld.param.u64 %rd1, [p2];
    add.s64 %rd3, %rd1, %rd4;
    ld.global.v2.b32 {%r5, %r6}, [%rd3];
    ld.param.u64 %rd1, [p3];
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd3];
    mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {%f5, %f6, %f7, %f8}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};
    ld.param.u64 %rd1, [p0];
    add.s64 %rd3, %rd1, %rd2;
    st.global.v4.f32 [%rd3], {%f5, %f6, %f7, %f8};"""


def _matrices(a, b, c, ty):
    """One warp's registers (lane-major, as stored) -> A (16, 16), B (16, 8), C (16, 8)."""
    am = halves_to_f32(np.ascontiguousarray(a.T), ty).reshape(-1)[A_INV].reshape(16, 16)
    bm = halves_to_f32(np.ascontiguousarray(b.T), ty).reshape(-1)[B_INV].reshape(16, 8)
    return am, bm, c.T.reshape(-1)[C_INV].reshape(16, 8)


@pytest.mark.parametrize("path", [SAMPLE, EDGE_SAMPLE], ids=["random", "edge"])
@pytest.mark.parametrize("ty", ["bf16", "f16"])
def test_mma_sync_matches_h200_bit_for_bit(ty, path):
    """mma.sync run by the emulator gives the H200's D registers exactly, for every lane of
    every sampled warp (3072 elements per type, 2048 at the formats' edges), NaN payloads
    and Inf included."""
    sample = np.load(path)
    a, b, c, want = (sample[f"{ty}_{k}"] for k in "abcd")
    warps = a.shape[0]
    got = run_kernel(_MMA.replace("{t}", ty), [np.zeros_like(want), a, b, c], threads=32 * warps).arrays[0]
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


@pytest.mark.parametrize("ty", ["bf16", "f16"])
def test_sample_separates_the_model_from_rounded_sums(ty):
    """The sample can fail a wrong model: a correctly rounded f32 sum of the exact products
    and C misses the GPU's D in over half of its elements."""
    sample = np.load(SAMPLE)
    differ = 0
    for w in range(sample[f"{ty}_a"].shape[0]):
        am, bm, cm = _matrices(sample[f"{ty}_a"][w], sample[f"{ty}_b"][w], sample[f"{ty}_c"][w], ty)
        _, _, dm = _matrices(sample[f"{ty}_a"][w], sample[f"{ty}_b"][w], sample[f"{ty}_d"][w], ty)
        rounded = (am.astype(np.float64) @ bm.astype(np.float64) + cm).astype(np.float32)
        differ += int((rounded != dm).sum())
        assert tensor_core_mma(am, bm, cm, ty).tolist() == dm.tolist()
    assert differ > 0.5 * 24 * 128


def _one_row(products_a, products_b, c=0.0, ty="bf16"):
    """D[0, 0] for A's row 0 = products_a, B's column 0 = products_b (padded with zeros)."""
    a = np.zeros((16, 16), np.float32)
    b = np.zeros((16, 8), np.float32)
    a[0, :len(products_a)] = products_a
    b[:len(products_b), 0] = products_b
    cm = np.zeros((16, 8), np.float32)
    cm[0, 0] = c
    return float(tensor_core_mma(a, b, cm, ty)[0, 0])


@pytest.mark.parametrize("ty", ["bf16", "f16"])
def test_terms_below_the_kept_bits_vanish(ty):
    """1 + 15 products of 2^-26: each is below 2^(0 - 25), the last kept bit at weight 2^0,
    and is truncated to 0 before the sum. The exact sum 1 + 15 * 2^-26 rounds to 1 + 2^-22
    in f32; the tensor core gives 1."""
    small = 2.0 ** -13
    assert _one_row([1.0] + [small] * 15, [1.0] + [small] * 15, ty=ty) == 1.0
    # one bit higher (2^-25) is kept: 1 + 15 * 2^-25, truncated to f32 (step 2^-23)
    assert _one_row([1.0] + [2 * small] * 15, [1.0] + [small] * 15, ty=ty) == 1.0 + 3 * 2.0 ** -23


def test_c_joins_the_block_of_products():
    """C = 1 and 16 products of 2^-26 (summing to 2^-22): C sets the alignment, so every
    product is truncated away and D = 1. Adding C to a separately formed sum of the products
    would give 1 + 2^-22, an f32 value."""
    small = 2.0 ** -13
    assert _one_row([small] * 16, [small] * 16, c=1.0) == 1.0
    assert _one_row([small] * 16, [small] * 16, c=0.0) == 2.0 ** -22


def test_reference_exponent_is_the_sum_of_the_factors_exponents():
    """1.5 * 1.5 = 2.25 has reference exponent 0 + 0 (not 1, its own), so the grid is 2^-25
    and 8 products of 2^-25 are kept: D = 2.25 + 2^-22. Aligning to the product's own
    exponent would truncate each of them to 0."""
    assert _one_row([1.5] + [2.0 ** -12] * 8, [1.5] + [2.0 ** -13] * 8) == 2.25 + 2.0 ** -22


def test_truncation_is_toward_zero_per_term():
    """1 - 2^-26: the negative term is truncated toward zero (to 0), so D = 1; truncating
    its two's complement (toward minus infinity) would give 1 - 2^-25, and then
    0.99999994 after rounding toward zero."""
    assert _one_row([1.0, -2.0 ** -13], [1.0, 2.0 ** -13]) == 1.0


def test_final_rounding_is_toward_zero():
    """1 + 2^-24 + 2^-25 (both kept) is 3/4 of an f32 step above 1: rounding to nearest
    gives 1 + 2^-23, the tensor core 1. Negative sums round toward zero too."""
    assert _one_row([1.0, 2.0 ** -12, 2.0 ** -12], [1.0, 2.0 ** -12, 2.0 ** -13]) == 1.0
    assert _one_row([-1.0, -2.0 ** -12, -2.0 ** -12], [1.0, 2.0 ** -12, 2.0 ** -13]) == -1.0


def test_exact_sums_are_exact():
    """Cancellation loses nothing that was kept: 2^10 - 2^10 + 3 * 2^-10 is 3 * 2^-10 (the
    small products are multiples of 2^(10 - 25)); a zero sum is +0."""
    assert _one_row([32.0, -32.0, 2.0 ** -5, 2.0 ** -4], [32.0, 32.0, 2.0 ** -5, 2.0 ** -5]) == 3 * 2.0 ** -10
    d = _one_row([1.0, -1.0], [1.0, 1.0])
    assert d == 0.0 and not np.signbit(d)


def test_nan_results_are_canonical_and_overflow_is_inf():
    """A NaN term (or Inf - Inf) gives the canonical NaN 0x7FFFFFFF, as on the GPU; a sum
    past FLT_MAX is Inf although the sum is otherwise rounded toward zero."""
    nan = np.float32(np.nan)
    for row in ([nan, 1.0], [np.inf, -np.inf]):
        d = np.float32(_one_row(row, [1.0, 1.0]))
        assert d.view(np.uint32) == 0x7FFFFFFF
    big = 2.0 ** 127
    assert _one_row([1.0], [1.0], c=np.float32(big) * 1.5) == 1.5 * big
    assert _one_row([2.0 ** 120], [2.0 ** 7], c=np.float32(big) * 1.5) == np.inf
    assert _one_row([-(2.0 ** 120)], [2.0 ** 7], c=np.float32(-big) * 1.5) == -np.inf


def test_edge_sample_separates_nan_payloads():
    """The edge sample can fail a model that lets NaNs through as numpy makes them: some of
    its GPU results are NaN, all of them 0x7FFFFFFF."""
    sample = np.load(EDGE_SAMPLE)
    d = np.concatenate([sample["bf16_d"].reshape(-1), sample["f16_d"].reshape(-1)])
    nan = np.isnan(d)
    assert nan.sum() > 100 and (d[nan].view(np.uint32) == 0x7FFFFFFF).all()
    assert np.float32(np.nan).view(np.uint32) != 0x7FFFFFFF        # numpy's own NaN is another
