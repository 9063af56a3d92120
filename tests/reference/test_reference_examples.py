"""attnc.reference on every example, against formulas written out independently here.

The expected side never calls the reference's evaluator: each test builds its score
modification, mask matrix and sinks by hand (numpy broadcasting or plain Python
loops), and `expected_attention` computes the softmax row by row over the kept keys.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from attnc.reference import reference

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> str:
    return (EXAMPLES / f"{name}.attn").read_text()


def inputs(b, h, hkv, m, n, d, dv=None, *, seed=0, gain=1.0):
    """Random q, k, v with values exactly representable in f16 and in bf16 (passed as f16
    to the reference, which takes them as the example's declared dtype): 8 significant
    bits, nothing below 2**-6 but zero."""
    rng = np.random.default_rng(seed)

    def exact(x):
        x = np.where(np.abs(x) < 2.0 ** -6, 0.0, x)
        mantissa, exponent = np.frexp(x)
        return np.ldexp(np.round(mantissa * 256) / 256, exponent).astype(np.float16)

    q = exact(gain * rng.standard_normal((b, h, m, d)))
    k = exact(rng.standard_normal((b, hkv, n, d)))
    v = exact(rng.standard_normal((b, hkv, n, dv or d)))
    return q, k, v


def expected_attention(q, k, v, *, scale=None, score=None, keep=None, sink=None):
    """Softmax attention written out row by row.

    score(S, b, h) -> S' rewrites the (M, N) score matrix of one (b, h); keep is a
    (B, H, M, N) boolean array (all true when None); sink an (H,) array or None.
    """
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    batch, heads, rows, d = q.shape
    group = heads // k.shape[1]
    scale = f32(1.0 / math.sqrt(d) if scale is None else scale)     # a scale is an f32 (Note [Scale in f32])
    o = np.zeros((batch, heads, rows, v.shape[3]))
    lse = np.zeros((batch, heads, rows))
    for b in range(batch):
        for h in range(heads):
            kk, vv = k[b, h // group], v[b, h // group]
            scores = scale * (q[b, h] @ kk.T)
            if score is not None:
                scores = score(scores, b, h)
            for i in range(rows):
                kept = np.arange(k.shape[2]) if keep is None else np.flatnonzero(keep[b, h, i])
                terms = list(scores[i, kept]) + ([sink[h]] if sink is not None else [])
                top = max(terms, default=-math.inf)
                if top == -math.inf:
                    o[b, h, i], lse[b, h, i] = 0.0, -math.inf
                    continue
                weights = np.exp(scores[i, kept] - top)
                total = weights.sum() + (math.exp(sink[h] - top) if sink is not None else 0.0)
                o[b, h, i] = weights @ vv[kept] / total
                lse[b, h, i] = top + math.log(total)
    return o, lse


def f32(x: float) -> float:
    return float(np.float32(x))


def positions(m, n):
    """Row and column index matrices (M, 1) and (1, N)."""
    return np.arange(m)[:, None], np.arange(n)[None, :]


def per_head(mask, b, h):
    return np.broadcast_to(mask, (b, h, *mask.shape[-2:]))


def close(actual, wanted):
    np.testing.assert_allclose(actual, wanted, rtol=1e-10, atol=1e-12)


# The reference computes the hooks in f32, as dsl.md says (attnc/reference_eval.py);
# the formulas here in float64. A score_mod or an f32 param moves the outputs by about
# f32's rounding, far below what a wrong mask bit or formula moves them.
HOOK_TOL = dict(rtol=1e-5, atol=1e-5)


def close_hooked(actual, wanted):
    np.testing.assert_allclose(actual, wanted, **HOOK_TOL)


# --- the examples ----------------------------------------------------------------

def test_mha_with_more_keys_than_queries():
    q, k, v = inputs(2, 3, 3, 5, 7, 128)
    out = reference(example("mha"), q=q, k=k, v=v)
    assert set(out) == {"o"} and out["o"].dtype == np.float64
    close(out["o"], expected_attention(q, k, v, scale=1 / math.sqrt(128))[0])


def test_gemma2_gqa_softcap_causal_lse():
    q, k, v = inputs(2, 4, 2, 6, 6, 128, gain=30.0)     # scores well past the cap of 50
    out = reference(example("gemma2"), q=q, k=k, v=v)
    i, j = positions(6, 6)
    keep = per_head((i >= j) & (i - j < 4096), 2, 4)
    o, lse = expected_attention(q, k, v, score=lambda s, b, h: 50.0 * np.tanh(s / 50.0), keep=keep)
    close_hooked(out["o"], o)
    close_hooked(out["lse"], lse)


def test_gemma2_window_binds():
    source = example("gemma2").replace("4096", "3")
    q, k, v = inputs(1, 4, 2, 9, 9, 128, seed=1)
    i, j = positions(9, 9)
    keep = per_head((i >= j) & (i - j < 3), 1, 4)
    o, lse = expected_attention(q, k, v, score=lambda s, b, h: 50.0 * np.tanh(s / 50.0), keep=keep)
    out = reference(source, q=q, k=k, v=v)
    close_hooked(out["o"], o)
    close_hooked(out["lse"], lse)


@pytest.mark.parametrize("m, n", [(5, 5), (3, 7), (6, 4)])
def test_alibi_bottom_right_causal(m, n):
    q, k, v = inputs(2, 3, 3, m, n, 64, seed=m * n)
    slopes = np.array([0.5, 0.25, 0.125], np.float32)
    i, j = positions(m, n)
    bias = slopes[:, None, None].astype(np.float64) * (j - i)       # (H, M, N)
    keep = per_head(j <= i + (n - m), 2, 3)
    o, _ = expected_attention(q, k, v, score=lambda s, b, h: s + bias[h], keep=keep)
    out = reference(example("alibi"), q=q, k=k, v=v, slopes=slopes)
    close_hooked(out["o"], o)
    if m > n:      # the first m - n rows see no key at all
        assert np.all(out["o"][:, :, : m - n] == 0.0)


def test_docs_sink():
    q, k, v = inputs(2, 2, 2, 8, 8, 64, seed=3)
    doc = np.array([[0, 0, 0, 1, 1, 2, 2, 2], [0, 1, 1, 1, 1, 1, 3, 3]], np.int32)
    sinks = np.array([0.3, 4.0], np.float32)
    i, j = positions(8, 8)
    keep = np.zeros((2, 2, 8, 8), bool)
    for b in range(2):
        same_doc = doc[b][:, None] == doc[b][None, :]
        keep[b] = same_doc & (j <= i)
    o, _ = expected_attention(q, k, v, keep=keep, sink=sinks.astype(np.float64))
    out = reference(example("docs_sink"), q=q, k=k, v=v, doc=doc, sinks=sinks)
    close(out["o"], o)
    # The sink takes a share of every row: the weights of the keys sum to less than 1.
    weights_only = reference(example("docs_sink"), q=q, k=k, v=np.ones_like(v), doc=doc,
                             sinks=sinks)["o"]
    assert np.all(weights_only < 1.0) and np.all(weights_only > 0.0)


@pytest.mark.parametrize("prefix", [0, 3, 20])
def test_prefix_lm(prefix):
    q, k, v = inputs(1, 2, 2, 8, 8, 128, seed=prefix)
    i, j = positions(8, 8)
    keep = per_head((j < prefix) | (j <= i), 1, 2)
    out = reference(example("prefix_lm"), q=q, k=k, v=v, P=prefix)
    close(out["o"], expected_attention(q, k, v, keep=keep)[0])


def t5_bucket(d: int) -> int:
    """T5's bucket of the signed distance d = j - i, as the example's comment states it."""
    side = 16 if d > 0 else 0
    n = abs(d)
    if n < 8:
        return side + n
    return side + min(8 + int(math.log(max(n, 1) / 8.0) / math.log(128.0 / 8.0) * 8.0), 15)


def test_t5_bucket_by_hand():
    assert [t5_bucket(d) for d in (0, -1, 1, -7, 7, 8, -8, 12, 16, 127, 128, 500, -500)] == \
           [0, 1, 17, 7, 23, 24, 8, 25, 26, 31, 31, 31, 15]


def test_relative_bias_t5_buckets():
    m = n = 150                      # distances out to +-149, past the last bucket
    q, k, v = inputs(1, 2, 2, m, n, 64, seed=5)
    table = np.random.default_rng(6).standard_normal((2, 32)).astype(np.float32)
    bucket = np.array([[t5_bucket(j - i) for j in range(n)] for i in range(m)])
    bias = table.astype(np.float64)[:, bucket]                      # (H, M, N)
    o, _ = expected_attention(q, k, v, score=lambda s, b, h: s + bias[h])
    out = reference(example("relative_bias"), q=q, k=k, v=v, bias=table)
    close_hooked(out["o"], o)


def test_sliding_window_binds():
    m = n = 1040                     # the window of 1024 cuts in for the last rows
    q, k, v = inputs(1, 1, 1, m, n, 128, seed=7)
    i, j = positions(m, n)
    keep = per_head((j <= i) & (i - j < 1024), 1, 1)
    out = reference(example("sliding_window"), q=q, k=k, v=v)
    close(out["o"], expected_attention(q, k, v, keep=keep)[0])


def test_softcap():
    q, k, v = inputs(2, 2, 2, 4, 6, 128, seed=8, gain=20.0)
    o, _ = expected_attention(q, k, v, score=lambda s, b, h: 30.0 * np.tanh(s / 30.0))
    close_hooked(reference(example("softcap"), q=q, k=k, v=v)["o"], o)


def test_mqa_one_kv_head_causal_lse():
    q, k, v = inputs(2, 4, 1, 5, 5, 128, seed=9)
    i, j = positions(5, 5)
    o, lse = expected_attention(q, k, v, keep=per_head(j <= i, 2, 4))
    out = reference(example("mqa"), q=q, k=k, v=v)
    close(out["o"], o)
    close(out["lse"], lse)


def test_diff_head_dims_gqa():
    q, k, v = inputs(1, 4, 2, 3, 5, 128, dv=64, seed=10)
    out = reference(example("diff_head_dims"), q=q, k=k, v=v)
    assert out["o"].shape == (1, 4, 3, 64)
    close(out["o"], expected_attention(q, k, v)[0])


def test_gqa_maps_head_groups_to_kv_heads():
    """With H=4, HKV=2, heads 0-1 read KV head 0 and heads 2-3 read KV head 1."""
    q, k, v = inputs(1, 4, 2, 3, 4, 128, seed=11)
    q[:] = q[:, :1]                                   # every head asks the same question
    o = reference(example("diff_head_dims").replace("64]", "128]"), q=q, k=k, v=v)["o"]
    close(o[:, 0], o[:, 1])
    close(o[:, 2], o[:, 3])
    assert not np.allclose(o[:, 1], o[:, 2])
