"""Row sums on the tensor cores (Note [Row sums on the tensor cores] in softmax.py):
the sum of P as rounded for P.V, in a numpy emulation against the exact softmax; the
option `mma_row_sum`: its defaults, the MMAs it adds and the FADDs it takes away in the
PTX, the targets it is refused on. Its numerics on a GPU: the ALiBi and relative-bias
examples and the property test's affine score_mods, whose sm_80 kernels have it."""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from attnc.backend.softmax import ONES_BF16X2, ONES_F16X2
from attnc_runtime.device_array import float32_to_bf16_bits
from attnc.errors import AttncError
from attnc.testing import build_with, variant_source

ALIBI = ("attention alibi {\n  q: bf16[B, H, M, 128]\n  k: bf16[B, H, N, 128]\n  v: bf16[B, H, N, 128]\n"
         "  param slopes: f32[H]\n  score_mod(s, b, h, i, j) = s + slopes[h] * (j - i)\n"
         "  mask_mod(b, h, i, j) = j <= i\n  out o: bf16[B, H, M, 128]\n}\n")
CAUSAL = variant_source("causal", 128)


def bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16 as the kernels round P, back in float32."""
    return (float32_to_bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


def test_ones_are_two_one_halves():
    assert float32_to_bf16_bits(np.float32([1.0]))[0] == ONES_BF16X2 & 0xFFFF == ONES_BF16X2 >> 16
    assert np.float16(1.0).view(np.uint16) == ONES_F16X2 & 0xFFFF == ONES_F16X2 >> 16


@pytest.mark.parametrize("spread", [1.0, 8.0])
def test_sum_of_rounded_p_normalizes_as_well(spread):
    """O = bf16(P).V / l: with l the sum of the same rounded P (the MMA's) the output is
    as close to the exact softmax as with the float32 sum, and its rows' weights add to 1
    up to the f32 sum's rounding (with the f32 sum they add to 1 only up to P's)."""
    rng = np.random.default_rng(int(spread))
    s = (rng.standard_normal((64, 512)) * spread).astype(np.float32)
    v = bf16(rng.standard_normal((512, 64)).astype(np.float32))
    p = np.exp2(s - s.max(axis=1, keepdims=True)).astype(np.float32)
    p_mma = bf16(p)
    exact = (p.astype(np.float64) @ v) / p.sum(axis=1, dtype=np.float64)[:, None]
    err_mma = np.abs(p_mma @ v / p_mma.sum(axis=1)[:, None] - exact).max()
    err_f32 = np.abs(p_mma @ v / p.sum(axis=1)[:, None] - exact).max()
    assert err_mma <= 1.5 * err_f32 + 1e-6
    weights_mma = p_mma.sum(axis=1, dtype=np.float64) / p_mma.sum(axis=1)
    assert np.abs(weights_mma - 1).max() < 1e-6


@functools.lru_cache(maxsize=None)
def built(source: str, arch: str, lower: tuple = ()):
    return build_with(source, "rowsum.attn", arch, cubin=False, **dict(lower))


def mmas(ptx: str) -> int:
    return len(re.findall(r"\bmma\.sync\.aligned\.m16n8k16\b", ptx))


def ones_operands(ptx: str, ones: int = ONES_BF16X2) -> int:
    """mma.sync instructions whose B operand (PTX order: D, A, B, C) is the constant pair
    of ones."""
    regs_of_ones = {m.group(1) for m in re.finditer(rf"mov\.b32\s+(%r\d+),\s*{ones};", ptx)}
    count = 0
    for m in re.finditer(r"mma\.sync\.aligned\.m16n8k16\.[\w.]*\s*\{[^}]*\},\s*\{[^}]*\},\s*\{([^}]*)\}", ptx):
        count += all(r.strip() in regs_of_ones for r in m.group(1).split(","))
    return count


def test_on_by_default_for_an_affine_score_mod_on_sm80():
    """ALiBi (a score_bias) sums its rows on the tensor cores: one more MMA a (16 rows,
    16 keys) step, its B operand the constant ones, and no FADD tree per step; the
    explicit default builds the same kernel, off takes it away."""
    art = built(ALIBI, "sm_80")
    assert art.manifest["specialization"]["mma_row_sum"] is True
    off = built(ALIBI, "sm_80", (("mma_row_sum", 0),))
    assert off.manifest["specialization"]["mma_row_sum"] is False
    assert built(ALIBI, "sm_80", (("mma_row_sum", 1),)).ptx == art.ptx
    assert ones_operands(art.ptx) > 0 and ones_operands(off.ptx) == 0
    # every step copy gains block_n / 16 MMAs per 16-row atom (2 atoms a warp at 128x64)
    assert mmas(art.ptx) - mmas(off.ptx) == ones_operands(art.ptx)
    assert ones_operands(art.ptx) % (64 // 16 * 2) == 0
    adds = lambda ptx: len(re.findall(r"\badd\.(?:rn\.)?f32\b", ptx))  # noqa: E731
    assert adds(art.ptx) < adds(off.ptx) - 50


def test_off_by_default_elsewhere_and_on_when_asked():
    art = built(CAUSAL, "sm_80")
    assert art.manifest["specialization"]["mma_row_sum"] is False and ones_operands(art.ptx) == 0
    asked = built(CAUSAL, "sm_80", (("mma_row_sum", 1),))
    assert asked.manifest["specialization"]["mma_row_sum"] is True and ones_operands(asked.ptx) > 0


def test_f16_kernels_take_f16_ones():
    ptx = built(variant_source("causal16", 64, dtype="f16"), "sm_80", (("mma_row_sum", 1),)).ptx
    assert ones_operands(ptx, ONES_F16X2) > 0 and ones_operands(ptx, ONES_BF16X2) == 0


def test_refused_on_sm90a():
    """sm_90a's P.V is a wgmma: the option is an error there, never a silent no-op; its
    default there is off."""
    assert built(ALIBI, "sm_90a").manifest["specialization"]["mma_row_sum"] is False
    with pytest.raises(AttncError, match="mma_row_sum"):
        built(ALIBI, "sm_90a", (("mma_row_sum", 1),))


ALIBI_LSE = ALIBI.replace("  out o: bf16[B, H, M, 128]\n", "  out o: bf16[B, H, M, 128]\n  out lse: f32[B, H, M]\n")
assert ALIBI_LSE != ALIBI


def test_sum_of_rounded_p_moves_the_lse():
    """The sum of bf16-rounded P is off the f32 sum by up to P's rounding, 2^-8 relative
    where every probability in [0.5, 1) rounds the same way (here down by almost half
    their ulp, 2^-9): the LSE moves past the GPU tests' tolerance (2e-3), o does not
    (its numerator and denominator move together). Hence f32 sums in a kernel that
    writes the LSE."""
    p = np.float32([1.0] + [0.5 + 0.99 * 2.0 ** -9] * 8)
    assert (bf16(p)[1:] == 0.5).all()
    moved = abs(np.log(bf16(p).sum(dtype=np.float64)) - np.log(p.sum(dtype=np.float64)))
    assert 2e-3 < moved < 2.0 ** -8


def test_off_by_default_with_an_lse_and_refused_when_asked():
    art = built(ALIBI_LSE, "sm_80")
    assert art.manifest["specialization"]["mma_row_sum"] is False and ones_operands(art.ptx) == 0
    with pytest.raises(AttncError, match="mma_row_sum sums P as rounded to bf16.*LSE"):
        built(ALIBI_LSE, "sm_80", (("mma_row_sum", 1),))
