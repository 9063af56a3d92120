"""The variants the GPU suites and benchmarks build beside the examples
(tools/build_gpu_bundles.py): hooks of reused `let`s and of integers past 32 bits, and the
cases of bench/bench_variants.py (peers.md) and its sweeps."""
from __future__ import annotations

# --- reused_lets ---------------------------------------------------------------------------

REUSED_LETS = {
    # name: (hook, params, first, step, lets, last, fills); integers stay inside i32 at
    # the tests' sizes (12 doublings of a difference of indices)
    "doubled": ("mask_mod", "", "i - j", "{p} + {p}", 12, "{p} <= 0 and j <= i", {}),
    "doubled_window": ("mask_mod", "", "i - j", "{p} + {p}", 12, "{p} >= 0 and {p} < 100 * 4096", {}),
    "nested_where": ("mask_mod", "", "i - j", "where({p} > 7, {p}, {p} + 1)", 30, "{p} >= 0 and j <= i", {}),
    "or": ("mask_mod", "", "j <= i", "{p} or {p}", 30, "{p}", {}),
    "and_not": ("mask_mod", "", "j <= i and i - j < 70", "not (not ({p} and {p}))", 30, "{p}", {}),
    "documents": ("mask_mod", "  param doc: i32[B, N]\n", "doc[b, j] - doc[b, i]", "{p} + {p}", 12,
                  "{p} == 0 and j <= i", {"doc": "sorted_ids"}),
    "tanh": ("score_mod", "", "s", "tanh({p}) + tanh({p})", 30, "{p}", {}),
    "halves": ("score_mod", "", "s", "{p} * 0.5 + {p} * 0.5", 30, "{p}", {}),
}


# --- exact_ints ----------------------------------------------------------------------------

EXACT_INTS = {
    # name: (hook, source); at M = 200, N = 65573 each reads a value past 2^31 (Note [Exact
    # integers]): 32-bit arithmetic would keep, weigh or pick other keys
    "square": ("mask_mod", "(i - j) * (i - j) < 2000000000"),
    "product_mod": ("mask_mod", "(i * j * 300) % 1000 < 500 and j - i < 60000"),
    "where": ("mask_mod", "where(i > j, i, j * j) // 1000 < 3000000"),
    "square_bias": ("score_mod", "s - float((i - j) * (i - j)) * 0.000000001"),
    # int(x) saturates at the i32 bounds and takes NaN to 0 (Note [Saturating int], hooks.py)
    "int_saturates": ("mask_mod", "int(float(j) * 100000.0) == 2147483647 or j - i < 3"),
    "int_of_nan": ("score_mod", "s + float(int(sqrt(float(j) - 60000.0))) * 0.01"),
    # a division decides keys (Note [Division], hooks.py): by a constant, by an index
    "over_41": ("mask_mod", "int(float(i) / 41.0) == int(float(j) / 41.0) or j - i > 65000"),
    "over_index": ("mask_mod", "int(float(j) / float(i + 1)) % 7 == 0 and j < 70000"),
    # row 7's scores all below -f32max / log2(e): an empty row, o = 0, lse = -inf, no NaN
    # (Note [Empty rows], softmax.py; the test replaces the reference's row 7)
    "empty_by_score": ("score_mod", "where(i == 7, -3.0e38, s)"),
    # a causal mask as a score of -1e30: the blocks above the diagonal, walked first, give
    # probabilities of at most 1 (Note [Rounded-up max], softmax.py; their rows were NaN)
    "masked_by_score": ("score_mod", "where(j > i, -1.0e30, s)"),
    # a temperature: s * c scaled once (Note [Score scalings], score_forms.py; it was s * c^2)
    "temperature": ("score_mod", "s * 2.0"),
    # min and max order -0.0 below +0.0 (Note [Signed zeros in min and max],
    # attnc/reference_eval.py); s * 0.0 is -0.0 where s < 0
    "signed_zeros": ("score_mod", "s + where(1.0 / min(s * 0.0, 0.0) > 0.0, 0.5, 0.0)"
                                  " + where(1.0 / max(s * 0.0, 0.0) > 0.0, 0.25, 0.0)"),
}


# --- bench_variants (peers.md) -------------------------------------------------------------

# examples/relative_bias.attn's T5 bias (an int() per score: Note [One cvt for int()] in
# attnc/backend/ptx.py; its buckets once per diagonal: Note [Values of a diagonal] in
# attnc/backend/hooks.py)
T5_BIAS = ("let d = j - i in let side = where(d > 0, 16, 0) in let n = abs(d) in "
           "let far = min(8 + int(log(float(max(n, 1)) / 8.0) / log(128.0 / 8.0) * 8.0), 15) in "
           "s + bias[h, side + where(n < 8, n, far)]")

BENCH_CASES = {
    # case: (params, score_mod, mask_mod, fills)
    "causal": ("", None, "j <= i", {}),
    "softcap_causal": ("", "30.0 * tanh(s / 30.0)", "j <= i", {}),
    "alibi_causal": ("  param slopes: f32[H]\n", "s + slopes[h] * (j - i)", "j <= i", {"slopes": "alibi"}),
    "window1024": ("", None, "j <= i and i - j < 1024", {}),
    "doc_causal": ("  param doc: i32[B, N]\n", None, "doc[b, i] == doc[b, j] and j <= i", {}),
    "t5_causal": ("  param bias: f32[H, 32]\n", T5_BIAS, "j <= i", {}),
}


SWEEP_WINDOWS = (256, 512, 1024, 2048, 4096)
SWEEP_CASES = {f"window{w}": ("", None, f"j <= i and i - j < {w}", {}) for w in SWEEP_WINDOWS}
# Cases only experiment bundles build (tools/build_exp_bundles.py): documents without
# the causal bound, tiles without a diagonal to mask (bench/doc_scaling.py); no mask at
# all (bench/bench_sm80.py's unmasked kernels); the T5 bias without a mask.
EXP_CASES = {"doc_only": ("  param doc: i32[B, N]\n", None, "doc[b, i] == doc[b, j]", {}),
             "full": ("", None, None, {}),
             "t5": ("  param bias: f32[H, 32]\n", T5_BIAS, None, {})}
