"""The lazy rescale (Note [Lazy rescale] in softmax.py): the online softmax with a
row's max kept until a block passes it by a factor of 2^8, in a float32 emulation of the
kernel's step against the exact softmax; the option `lazy_rescale`: its defaults on both
targets, the warp's vote and branch in the PTX, the kernels it does not apply to. Its
numerics on a GPU: tests/gpu/test_gpu_lazy_rescale.py and the other suites' bundles."""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from attnc.backend.softmax import LAZY_LOG2
from attnc.testing import build_with, variant_source

F32 = np.float32
C = F32(0.125 * np.log2(np.e))          # the folded scale (Note [Folded scale]) of head dim 64


def online(blocks: list[np.ndarray], v_blocks: list[np.ndarray], lazy: bool):
    """(o, lse in exp2 units, rescales) of the kernel's steps over score blocks (rows x
    keys, raw units, -inf masked), in float32: the running max, the lazy keep test and
    alpha as softmax.py's `step` emits them, O rescaled only where a row moved."""
    rows = blocks[0].shape[0]
    m = np.full(rows, -np.inf, F32)
    l = np.zeros(rows, F32)
    o = np.zeros((rows, v_blocks[0].shape[1]), F32)
    rescales = 0
    with np.errstate(invalid="ignore", over="ignore"):
        for s, v in zip(blocks, v_blocks):
            m_new = np.maximum(m, s.max(axis=1))
            if lazy:
                grow = m_new - m
                keep = ~(grow > F32(LAZY_LOG2) / C)         # unordered (NaN) keeps
                m_new = np.where(keep, m, m_new)
            neg_mc = -(m_new * C)
            alpha = np.exp2(m * C + neg_mc).astype(F32)
            if lazy:
                alpha = np.where(keep, F32(1), alpha)
            alpha = np.nan_to_num(alpha, nan=1.0)                # -inf - -inf: an empty row's O is 0
            p = np.exp2(s * C + neg_mc[:, None]).astype(F32)
            p = np.nan_to_num(p, nan=0.0)
            if not lazy or (~keep).any():
                o = o * alpha[:, None]
                rescales += 1
            l = l * alpha + p.sum(axis=1)
            o = o + p @ v
            m = m_new
    lse = m * C + np.log2(l)
    return o / l[:, None], lse, rescales


def exact(blocks, v_blocks):
    s = np.concatenate(blocks, axis=1).astype(np.float64) * float(C)
    v = np.concatenate(v_blocks, axis=0).astype(np.float64)
    mx = s.max(axis=1, keepdims=True)
    p = np.exp2(s - mx)
    return (p @ v) / p.sum(axis=1, keepdims=True), mx[:, 0] + np.log2(p.sum(axis=1))


@pytest.mark.parametrize("jump", [0.0, 20.0, 200.0, 2000.0])
def test_lazy_steps_give_the_softmax(jump):
    """Blocks whose scores rise by `jump` (raw units) from one block to the next: the
    lazy kernel's O and lse are the exact softmax's to f32 rounding; below the threshold
    it never rescales after the first block, past it every block moves its rows."""
    rng = np.random.default_rng(int(jump))
    blocks = [(rng.standard_normal((16, 64)) * 4 + jump * k).astype(F32) for k in range(6)]
    blocks[0][3, :] = -np.inf                   # a row empty in the first block only
    v_blocks = [rng.standard_normal((64, 32)).astype(F32) for _ in blocks]
    o, lse, rescales = online(blocks, v_blocks, lazy=True)
    want_o, want_lse = exact(blocks, v_blocks)
    np.testing.assert_allclose(o, want_o, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-4)
    threshold = LAZY_LOG2 / float(C)
    if jump == 0.0:
        assert rescales == 2            # the first block (from -inf), then row 3's first scores
    if jump * 0.9 > threshold:
        assert rescales == len(blocks)


def test_no_lazy_rescale_where_its_threshold_is_not_a_finite_f32():
    """A scale below about 2e-38 would make the threshold in raw units +inf: no row would
    leave -inf (a review found the kernel's O NaN there); such a softmax is not lazy."""
    from attnc.backend.softmax import OnlineSoftmax
    assert OnlineSoftmax(None, None, None, 0.125, lazy=True).lazy
    assert not OnlineSoftmax(None, None, None, 1e-39, lazy=True).lazy
    assert not OnlineSoftmax(None, None, None, 0.125, lazy=False).lazy


# ------------------------------------------------------------------ the kernels

CAUSAL = variant_source("causal", 128)
SOFTCAP = variant_source("softcap", 128, score_mod="30.0 * tanh(s / 30.0)")


@functools.lru_cache(maxsize=None)
def built(source: str, arch: str, lower: tuple = ()):
    return build_with(source, "lazy.attn", arch, cubin=False, **dict(lower))


def votes(ptx: str) -> int:
    return len(re.findall(r"\bvote\.sync\.any\.pred\b", ptx))


def test_on_by_default_on_sm80_with_a_vote_per_step_loop():
    """The default sm_80 causal kernel rescales lazily: a warp vote before each step
    loop's rescale (one per copy of the step), none with the option off; the explicit
    default builds the same kernel."""
    art = built(CAUSAL, "sm_80")
    assert art.manifest["specialization"]["lazy_rescale"] is True
    off = built(CAUSAL, "sm_80", (("lazy_rescale", 0),))
    assert off.manifest["specialization"]["lazy_rescale"] is False
    assert votes(off.ptx) == 0 and votes(art.ptx) >= 2
    assert built(CAUSAL, "sm_80", (("lazy_rescale", 1),)).ptx == art.ptx


def test_off_by_default_at_head_dim_64():
    """At head dim 64 the vote and branch cost more than the rescale they skip (as
    measured): off by default, on when asked."""
    causal64 = variant_source("causal", 64)
    art = built(causal64, "sm_80")
    assert art.manifest["specialization"]["lazy_rescale"] is False and votes(art.ptx) == 0
    assert votes(built(causal64, "sm_80", (("lazy_rescale", 1),)).ptx) >= 2


def test_not_where_the_max_is_a_constant():
    """Softcap in bf16 has a constant max (Note [Bounded score_mod]): no rescale to skip,
    the option changes nothing."""
    art = built(SOFTCAP, "sm_80")
    assert art.manifest["specialization"]["lazy_rescale"] is False
    assert built(SOFTCAP, "sm_80", (("lazy_rescale", 1),)).ptx == art.ptx


def test_sm90a_carries_moved_to_its_delayed_rescale():
    """sm_90a rescales O an iteration late (after the P.V in flight lands): the vote takes
    the flag carried with alpha. On by default at head dim 128 (the producer warpgroup's
    causal kernel), off in persistent CTAs (a band) and at head dim 64, as measured."""
    art = built(CAUSAL, "sm_90a")
    assert art.manifest["specialization"]["lazy_rescale"] is True and votes(art.ptx) >= 2
    off = built(CAUSAL, "sm_90a", (("lazy_rescale", 0),))
    assert votes(off.ptx) == 0
    band = variant_source("band", 128, mask="j <= i and i - j < 1024")
    band_art = built(band, "sm_90a")
    assert band_art.manifest["specialization"]["persistent"] is True
    assert band_art.manifest["specialization"]["lazy_rescale"] is False and votes(band_art.ptx) == 0
    asked = built(band, "sm_90a", (("lazy_rescale", 1),))          # on request: the rotated consumer
    assert asked.manifest["specialization"]["persistent"] is True and votes(asked.ptx) >= 2
    causal64 = variant_source("causal", 64)
    assert built(causal64, "sm_90a").manifest["specialization"]["lazy_rescale"] is False
    assert votes(built(causal64, "sm_90a", (("lazy_rescale", 1),)).ptx) >= 2
