"""attnc.reference on the corners of dsl.md "Semantics" and of the expression language.

Expected values are computed here by hand: Python's own `//`, `%`, `math` functions and
explicit loops, never the reference's evaluator.
"""
from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import attnc.reference as reference_module
from attnc.errors import AttncError
from attnc.frontend import load
from attnc.reference import reference

# hooks compute in f32 (attnc/reference_eval.py), the formulas here in float64
HOOK_TOL = dict(rtol=1e-5, atol=1e-5)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def variant_source(name, body, *, lse=False, d=64, extra=""):
    out_lse = "  out lse: f32[B, H, M]\n" if lse else ""
    return (f"attention {name} {{\n"
            f"  q: f16[B, H, M, {d}]\n  k: f16[B, H, N, {d}]\n  v: f16[B, H, N, {d}]\n"
            f"{extra}{body}\n  out o: f16[B, H, M, {d}]\n{out_lse}}}\n")


def qkv(b, h, m, n, d=64, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(np.float16)
                 for shape in ((b, h, m, d), (b, h, n, d), (b, h, n, d)))


def softmax_rows(scores, keep, v):
    """Row softmax of one (M, N) score matrix over the kept keys, times v; empty rows -> 0."""
    o = np.zeros((scores.shape[0], v.shape[1]))
    for i in range(scores.shape[0]):
        kept = np.flatnonzero(keep[i])
        if kept.size:
            w = np.exp(scores[i, kept] - scores[i, kept].max())
            o[i] = w @ v[kept] / w.sum()
    return o


def strict():
    """Turn every numpy floating-point event and every warning into an error."""
    class Strict:
        def __enter__(self):
            self.errstate = np.errstate(all="raise")
            self.errstate.__enter__()
            self.caught = warnings.catch_warnings()
            self.caught.__enter__()
            warnings.simplefilter("error")

        def __exit__(self, *exc):
            self.caught.__exit__(*exc)
            self.errstate.__exit__(*exc)
    return Strict()


# --- rows with nothing kept --------------------------------------------------------

def test_bottom_right_causal_with_more_queries_than_keys():
    source = variant_source("br", "  mask_mod(b, h, i, j) = j <= i + (N - M)", lse=True)
    q, k, v = qkv(1, 2, 6, 4)
    with strict():
        out = reference(source, q=q, k=k, v=v)
    assert np.all(out["o"][:, :, :2] == 0.0) and np.all(out["lse"][:, :, :2] == -np.inf)
    assert np.all(np.isfinite(out["o"])) and np.all(np.isfinite(out["lse"][:, :, 2:]))
    # Row i >= 2 keeps keys 0 .. i - 2.
    s = np.einsum("hmd,hnd->hmn", q[0].astype(float), k[0].astype(float)) / 8.0
    i, j = np.arange(6)[:, None], np.arange(4)[None, :]
    for h in range(2):
        want = softmax_rows(s[h], j <= i - 2, v[0, h].astype(float))
        np.testing.assert_allclose(out["o"][0, h], want, **HOOK_TOL)


def test_mask_that_is_always_false():
    source = variant_source("none", "  mask_mod(b, h, i, j) = i < 0", lse=True)
    q, k, v = qkv(2, 2, 3, 5)
    with strict():
        out = reference(source, q=q, k=k, v=v)
    assert np.all(out["o"] == 0.0) and np.all(out["lse"] == -np.inf)


def test_sink_alone_when_nothing_is_kept():
    """Only the sink is left: l = exp(0) = 1, so o = 0 and lse = sink."""
    source = variant_source("sink_only", "  param sinks: f32[H]\n"
                            "  mask_mod(b, h, i, j) = i < 0\n  sink(h) = sinks[h]", lse=True)
    q, k, v = qkv(1, 2, 3, 4)
    with strict():
        out = reference(source, q=q, k=k, v=v, sinks=np.array([1.5, -2.0], np.float32))
    assert np.all(out["o"] == 0.0)
    np.testing.assert_array_equal(out["lse"][0], [[1.5] * 3, [-2.0] * 3])


def test_sink_of_minus_infinity_is_no_sink():
    body = "  param sinks: f32[H]\n  mask_mod(b, h, i, j) = j <= i\n  sink(h) = sinks[h]"
    causal = variant_source("c", "  mask_mod(b, h, i, j) = j <= i", lse=True)
    q, k, v = qkv(1, 2, 4, 4)
    with strict():
        out = reference(variant_source("s", body, lse=True), q=q, k=k, v=v,
                        sinks=np.full(2, -np.inf, np.float32))
    want = reference(causal, q=q, k=k, v=v)
    np.testing.assert_allclose(out["o"], want["o"], rtol=1e-12)
    np.testing.assert_allclose(out["lse"], want["lse"], rtol=1e-12)


def test_huge_sink_does_not_overflow():
    """m includes the sink, so exp(sink - m) <= 1 even for a sink far above every score."""
    source = variant_source("big", "  param sinks: f32[H]\n  sink(h) = sinks[h]", lse=True)
    q, k, v = qkv(1, 2, 3, 4)
    with strict():
        out = reference(source, q=q, k=k, v=v, sinks=np.array([1000.0, 0.0], np.float32))
    assert np.all(out["o"][0, 0] == 0.0) and np.all(out["lse"][0, 0] == 1000.0)
    s = q[0, 1].astype(float) @ k[0, 1].astype(float).T / 8.0
    np.testing.assert_allclose(out["lse"][0, 1], np.log(np.exp(s).sum(1) + 1.0), rtol=1e-12)


def test_integer_sink():
    source = variant_source("isink", "  sink(h) = h - 1", lse=True)
    q, k, v = qkv(1, 2, 2, 3)
    lse = reference(source, q=q, k=k, v=v)["lse"][0]
    for h in range(2):
        s = q[0, h].astype(float) @ k[0, h].astype(float).T / 8.0
        np.testing.assert_allclose(lse[h], np.log(np.exp(s).sum(1) + math.exp(h - 1)), rtol=1e-12)


def test_undefined_values_at_masked_positions_are_harmless():
    """log(0), log(<0) and // 0 where the mask drops the position: no NaN, no warning."""
    body = ("  score_mod(s, b, h, i, j) ="
            " s + log(float(j - i)) + float(7 // (j - i)) + float(7 % (j - i))\n"
            "  mask_mod(b, h, i, j) = j > i")
    q, k, v = qkv(1, 1, 4, 4, seed=12)
    with strict():
        out = reference(variant_source("undef", body, lse=True), q=q, k=k, v=v)
    s = q[0, 0].astype(float) @ k[0, 0].astype(float).T / 8.0
    keep = np.zeros((4, 4), bool)
    for i in range(4):
        for j in range(i + 1, 4):
            keep[i, j] = True
            s[i, j] += math.log(j - i) + 7 // (j - i) + 7 % (j - i)
    np.testing.assert_allclose(out["o"][0, 0], softmax_rows(s, keep, v[0, 0].astype(float)),
                               **HOOK_TOL)
    assert out["lse"][0, 0, 3] == -np.inf and np.all(np.isfinite(out["lse"][0, 0, :3]))


def test_lse_is_natural_log_of_the_row_sum():
    source = variant_source("plain", "", lse=True)
    q, k, v = qkv(1, 1, 3, 5)
    s = q[0, 0].astype(float) @ k[0, 0].astype(float).T / 8.0
    lse = reference(source, q=q, k=k, v=v)["lse"][0, 0]
    np.testing.assert_allclose(lse, [math.log(sum(math.exp(x) for x in row)) for row in s],
                               rtol=1e-12)


# --- expressions -------------------------------------------------------------------

def test_param_indices_are_clamped():
    source = variant_source("clamp", "  param t: f32[H, 8]\n"
                            "  score_mod(s, b, h, i, j) = s + t[h + 5, j - i] + t[h - 9, 3 * j]")
    q, k, v = qkv(1, 2, 4, 6, seed=1)
    t = np.arange(16, dtype=np.float32).reshape(2, 8)
    s = np.einsum("hmd,hnd->hmn", q[0].astype(float), k[0].astype(float)) / 8.0
    for h in range(2):
        for i in range(4):
            for j in range(6):
                s[h, i, j] += t[1, min(max(j - i, 0), 7)] + t[0, min(3 * j, 7)]
    out = reference(source, q=q, k=k, v=v, t=t)["o"][0]
    for h in range(2):
        np.testing.assert_allclose(out[h], softmax_rows(s[h], np.ones((4, 6), bool),
                                                        v[0, h].astype(float)), **HOOK_TOL)


def test_integer_semantics_floor_division_truncation_dims():
    body = ("  score_mod(s, b, h, i, j) = s + float((j - i) // 3) * 0.5 + float((j - i) % 3)"
            " - float(int(float(j - i) / 4.0)) + float(M * 100 + N * 10 + H - B) / 1000.0"
            " + float(-(i - j) // 2 + 7 // -2 + (-7) % 3)")
    q, k, v = qkv(2, 2, 5, 7, seed=2)
    m, n, heads, batch = 5, 7, 2, 2
    out = reference(variant_source("ints", body), q=q, k=k, v=v)["o"]
    for b in range(batch):
        s = np.einsum("hmd,hnd->hmn", q[b].astype(float), k[b].astype(float)) / 8.0
        for i in range(m):
            for j in range(n):
                d = j - i
                s[:, i, j] += ((d // 3) * 0.5 + d % 3 - math.trunc(d / 4)
                               + (m * 100 + n * 10 + heads - batch) / 1000.0
                               + (-(i - j) // 2 + 7 // -2 + (-7) % 3))
        for h in range(heads):
            np.testing.assert_allclose(out[b, h], softmax_rows(s[h], np.ones((m, n), bool),
                                                               v[b, h].astype(float)), **HOOK_TOL)


def test_int_saturates_at_32_bits_and_takes_nan_to_zero():
    # README: int(x) truncates toward zero to i32, saturating; NaN gives 0.
    body = ("  score_mod(s, b, h, i, j) = s + float(int(float(j - 2) * 1.0e10) // 1000000000)"
            " + float(int(sqrt(float(i) - 3.0)))")
    q, k, v = qkv(1, 1, 6, 5, seed=3)
    out = reference(variant_source("sat", body), q=q, k=k, v=v)["o"]
    s = np.einsum("md,nd->mn", q[0, 0].astype(float), k[0, 0].astype(float)) / 8.0
    sat = {-1: -2147483648 // 1000000000, 0: 0, 1: 2147483647 // 1000000000}
    for i in range(6):
        for j in range(5):
            s[i, j] += sat[int(np.sign(j - 2))] + (0 if i < 3 else math.trunc(math.sqrt(i - 3)))
    np.testing.assert_allclose(out[0, 0], softmax_rows(s, np.ones((6, 5), bool), v[0, 0].astype(float)),
                               **HOOK_TOL)


def test_every_builtin_and_boolean_operator():
    body = ("  score_mod(s, b, h, i, j) = let x = s / 8.0 in\n"
            "    exp(x) * 0.1 + exp2(x) * 0.1 + log(abs(x) + 1.0) + log2(abs(x) + 2.0)"
            " + sqrt(abs(x)) + rsqrt(abs(x) + 1.0) + tanh(x) + sigmoid(x) + floor(x) + ceil(x)"
            " + min(x, 0.25) + max(x, -0.25) + float(max(i, j) - min(i, j)) + float(abs(i - j))"
            " + where(i % 2 == 0, 1.0, -1.0) + where(j > 1, 2, 3)\n"
            "  mask_mod(b, h, i, j) = where(i > 2, j <= i, j >= i) and not (i == j + 1)"
            " or (j != 0 and i + j == 5)")
    q, k, v = qkv(1, 2, 6, 6, seed=3)
    out = reference(variant_source("builtins", body), q=q, k=k, v=v)["o"][0]
    s = np.einsum("hmd,hnd->hmn", q[0].astype(float), k[0].astype(float)) / 8.0
    keep = np.zeros((6, 6), bool)
    for i in range(6):
        for j in range(6):
            causal_either_way = j <= i if i > 2 else j >= i
            keep[i, j] = (causal_either_way and not (i == j + 1)) or (j != 0 and i + j == 5)
    for h in range(2):
        for i in range(6):
            for j in range(6):
                x = s[h, i, j] / 8.0
                s[h, i, j] = (math.exp(x) * 0.1 + 2.0 ** x * 0.1 + math.log(abs(x) + 1.0)
                              + math.log2(abs(x) + 2.0) + math.sqrt(abs(x))
                              + 1 / math.sqrt(abs(x) + 1.0) + math.tanh(x) + 1 / (1 + math.exp(-x))
                              + math.floor(x) + math.ceil(x) + min(x, 0.25) + max(x, -0.25)
                              + (max(i, j) - min(i, j)) + abs(i - j)
                              + (1.0 if i % 2 == 0 else -1.0) + (2 if j > 1 else 3))
        np.testing.assert_allclose(out[h], softmax_rows(s[h], keep, v[0, h].astype(float)),
                                   **HOOK_TOL)


def test_score_mod_that_ignores_the_score():
    """A constant score_mod: every kept key weighs the same, whatever q and k say."""
    source = variant_source("flat", "  score_mod(s, b, h, i, j) = 1")
    q, k, v = qkv(1, 1, 3, 4, seed=4)
    o = reference(source, q=q, k=k, v=v)["o"]
    np.testing.assert_allclose(o[0, 0], np.broadcast_to(v[0, 0].astype(float).mean(0), (3, 64)),
                               rtol=1e-12)


# --- inputs ------------------------------------------------------------------------

def test_sources_text_path_and_variant_agree():
    path = EXAMPLES / "softcap.attn"
    q, k, v = qkv(1, 2, 3, 3, d=128, seed=5)
    outs = [reference(s, q=q, k=k, v=v)["o"]
            for s in (path.read_text(), path, str(path), load(path.read_text()))]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_package_level_call_survives_the_import():
    """README: `attnc.reference(source, q=..., ...)`, also after `import attnc.reference`."""
    import attnc
    q, k, v = qkv(1, 1, 2, 2, d=128)
    first = attnc.reference(EXAMPLES / "mha.attn", q=q, k=k, v=v)
    second = attnc.reference(EXAMPLES / "mha.attn", q=q, k=k, v=v)
    np.testing.assert_array_equal(first["o"], second["o"])


def test_input_dtypes_are_read_as_float64():
    q, k, v = qkv(1, 2, 3, 4, d=128, seed=6)
    source = (EXAMPLES / "mha.attn").read_text()
    want = reference(source, q=q, k=k, v=v)["o"]
    for dtype in (np.float32, np.float64):
        got = reference(source, q=q.astype(dtype), k=k.astype(dtype), v=v.astype(dtype))["o"]
        np.testing.assert_array_equal(got, want)


def test_bfloat16_arrays_from_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in qkv(1, 2, 3, 4, d=128, seed=7))
    source = (EXAMPLES / "mha.attn").read_text()
    want = reference(source, q=q.astype(np.float32), k=k.astype(np.float32), v=v.astype(np.float32))
    np.testing.assert_array_equal(reference(source, q=q, k=k, v=v)["o"], want["o"])


def test_integer_param_given_as_integral_floats():
    q, k, v = qkv(1, 1, 4, 4, seed=8)
    doc = np.array([[0, 0, 1, 1]])
    sinks = np.zeros(1, np.float32)
    source = EXAMPLES / "docs_sink.attn"
    want = reference(source, q=q, k=k, v=v, doc=doc.astype(np.int32), sinks=sinks)["o"]
    got = reference(source, q=q, k=k, v=v, doc=doc.astype(np.float32), sinks=sinks)["o"]
    np.testing.assert_array_equal(got, want)


def test_dims_passed_by_keyword_when_consistent():
    q, k, v = qkv(1, 2, 3, 3, d=128, seed=9)
    source = EXAMPLES / "prefix_lm.attn"
    want = reference(source, q=q, k=k, v=v, P=np.int64(1))["o"]
    np.testing.assert_array_equal(reference(source, q=q, k=k, v=v, P=1, H=2, M=3)["o"], want)


def test_blocking_does_not_change_the_result(monkeypatch):
    """Blocks of rows, of heads and of batches all give the one-block answer."""
    source = (EXAMPLES / "gemma2.attn").read_text().replace("4096", "5")
    rng = np.random.default_rng(10)
    q = rng.standard_normal((3, 4, 7, 128)).astype(np.float16)
    k, v = (rng.standard_normal((3, 2, 9, 128)).astype(np.float16) for _ in range(2))
    whole = reference(source, q=q, k=k, v=v)
    for elements in (9, 2 * 9, 7 * 9 * 3, 7 * 9 * 4 * 2, 1):
        monkeypatch.setattr(reference_module, "BLOCK_ELEMENTS", elements)
        blocked = reference(source, q=q, k=k, v=v)
        np.testing.assert_allclose(blocked["o"], whole["o"], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(blocked["lse"], whole["lse"], rtol=1e-13)


def test_ten_million_scores_in_seconds():
    """B*H*M*N ~ 1e7 with a tanh score_mod and a mask; a few rows checked by hand."""
    rng = np.random.default_rng(11)
    def exact(shape):       # in f16 and in bf16, gemma2's dtype
        return (rng.integers(-96, 97, shape) / 32).astype(np.float16)

    q = exact((1, 4, 1600, 128))
    k, v = exact((1, 2, 1600, 128)), exact((1, 2, 1600, 128))
    start = time.perf_counter()
    out = reference(EXAMPLES / "gemma2.attn", q=q, k=k, v=v)
    assert time.perf_counter() - start < 10.0
    for h, i in ((0, 0), (1, 777), (3, 1599)):
        s = q[0, h, i].astype(float) @ k[0, h // 2, : i + 1].astype(float).T / math.sqrt(128)
        s = 50.0 * np.tanh(s / 50.0)
        w = np.exp(s - s.max())
        want = w @ v[0, h // 2, : i + 1].astype(float) / w.sum()
        np.testing.assert_allclose(out["o"][0, h, i], want, **HOOK_TOL)
        np.testing.assert_allclose(out["lse"][0, h, i], s.max() + math.log(w.sum()), **HOOK_TOL)


@pytest.mark.parametrize("name, dtype", [("gemma2", "bf16"), ("alibi", "f16")])
def test_q_k_v_are_taken_as_their_declared_dtype(name, dtype):
    """q, k and v given in float64 (here values of float32) are rounded to the declared dtype (to nearest, ties to
    even) before anything is computed: the same outputs as the rounded values give, and
    not those of the unrounded ones."""
    rng = np.random.default_rng(3)
    d = 128 if name == "gemma2" else 64
    q, k, v = (rng.standard_normal((1, 2, 40, d)).astype(np.float32).astype(np.float64) for _ in range(3))
    extra = {"slopes": np.full(2, 0.25, np.float32)} if name == "alibi" else {}
    rounded = [_round(x, dtype) for x in (q, k, v)]
    assert not np.array_equal(rounded[0], q)
    got = reference(EXAMPLES / f"{name}.attn", q=q, k=k, v=v, **extra)
    want = reference(EXAMPLES / f"{name}.attn", q=rounded[0], k=rounded[1], v=rounded[2], **extra)
    np.testing.assert_array_equal(got["o"], want["o"])


def _round(x, dtype):
    """Rounding written out apart from the reference's: f16 by numpy, bf16 by the bits of
    float32 (exact here: the values are float32's)."""
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float64)
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32).astype(np.float64)


def test_q_k_v_may_come_positionally():
    import attnc
    source = (EXAMPLES / "mha.attn").read_text()
    q, k, v = qkv(1, 2, 5, 7, d=128, seed=4)
    by_name = reference(source, q=q, k=k, v=v)["o"]
    np.testing.assert_array_equal(attnc.reference(source, q, k, v)["o"], by_name)
    np.testing.assert_array_equal(reference(source, q, k, v=v)["o"], by_name)
    with pytest.raises(Exception, match="given both positionally and by name"):
        reference(source, q, k, v, q=q)


def test_float_hooks_compute_in_f32_as_the_kernels():
    """dsl.md: float arithmetic is f32. In float64, 90 * 0.7 is 62.99999999999999 and int()
    gives 62; in f32 it is 63.0, which the kernels compute (found by a review: the
    reference, in float64, dropped key 63 of row 90)."""
    source = ("attention t {\n  q: f16[B, H, M, 64]\n  k: f16[B, H, N, 64]\n  v: f16[B, H, N, 64]\n"
              "  mask_mod(b, h, i, j) = j <= int(float(i) * 0.7)\n  out o: f16[B, H, M, 64]\n}\n")
    q, k, v = qkv(1, 1, 91, 64, d=64, seed=5)
    v[...] = 0
    v[0, 0, 63] = 1                              # o[row 90] is the weight of key 63
    assert np.float32(90) * np.float32(0.7) == 63 and int(90 * 0.7) == 62
    assert reference(source, q=q, k=k, v=v)["o"][0, 0, 90, 0] > 0


def test_i32_params_must_fit_in_32_bits():
    source = (EXAMPLES / "docs_sink.attn").read_text()
    q, k, v = qkv(1, 2, 4, 4, d=64, seed=6)
    with pytest.raises(AttncError, match=r"param 'doc' is i32 but the array holds values outside its range"):
        reference(source, q=q, k=k, v=v, doc=np.array([[0, 0, 2 ** 32, 2 ** 32]]), sinks=np.zeros(2, np.float32))


def test_integer_scores_and_sinks_are_rounded_to_f32():
    """Scores are f32 (dsl.md): an integer score_mod or sink is rounded to f32 as the
    kernels' sitofp rounds it, so 16777217 is 16777216 (found by a review: the reference
    took the int64 exactly, and gave this row other weights than the kernels)."""
    source = variant_source("iscore", "  score_mod(s, b, h, i, j) = 16777216 + j % 3")
    q, k, v = np.zeros((1, 1, 1, 64)), np.zeros((1, 1, 3, 64)), np.eye(3, 64)[None, None]
    o = reference(source, q=q, k=k, v=v)["o"][0, 0, 0, :3]
    w = np.exp(np.array([0.0, 0.0, 2.0]))           # f32 scores 2^24, 2^24, 2^24 + 2
    np.testing.assert_allclose(o, w / w.sum(), rtol=1e-12)

    source = variant_source("isink", "  score_mod(s, b, h, i, j) = 16777216.0\n  sink(h) = 16777217",
                            lse=True)
    out = reference(source, q=q, k=k[:, :, :1], v=v[:, :, :1])
    np.testing.assert_allclose(out["o"][0, 0, 0, 0], 0.5, rtol=1e-12)
    np.testing.assert_allclose(out["lse"][0, 0, 0] - 2.0 ** 24, math.log(2.0), atol=1e-8)


@pytest.mark.parametrize("fn, zero", [("min", "-"), ("max", "")])
def test_min_and_max_order_signed_zeros(fn, zero):
    """Float min and max are IEEE 754-2019's minimum and maximum, as the frontend lowers
    them (arith.minimumf / maximumf): -0.0 < +0.0, so 1 / min(-0.0, 0.0) is -inf and 1 /
    max(-0.0, 0.0) is +inf, in both operand orders (found by a review: numpy's minimum
    returned +0.0)."""
    for a, b in (("-0.0", "0.0"), ("0.0", "-0.0")):
        body = (f"  score_mod(s, b, h, i, j) = where(j == 0, "
                f"where(1.0 / {fn}({a}, {b}) > 0.0, 5.0, 0.0), 0.0)")
        q, k, v = np.zeros((1, 1, 1, 64)), np.zeros((1, 1, 2, 64)), np.eye(2, 64)[None, None]
        o = reference(variant_source("zeros", body), q=q, k=k, v=v)["o"][0, 0, 0, :2]
        w = np.exp(np.array([0.0 if zero == "-" else 5.0, 0.0]))
        np.testing.assert_allclose(o, w / w.sum(), rtol=1e-12)
