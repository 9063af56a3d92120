"""Exact integers in the hook code (Note [Exact integers], attnc/backend/exact_ints.py):
run on the CPU (host_jit.py) at indices near 2^31, the code the kernels inline gives the
reference evaluator's 64-bit answer where i32 arithmetic would wrap (indices up to
2^30, the largest size the runtime takes); the examples'
hooks keep every integer in i32; a mask with a wide value gets no interval evaluation."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from attnc.backend.exact_ints import IntPlan
from attnc.backend.hooks import size_dims
from attnc.driver import CompileOptions, compile_mlir
from attnc.ir import MASK_MOD, SCORE_MOD, attention_ops, region_block
from tests.backend.host_jit import host_function
from tests.backend.test_hooks import (EXAMPLES, HOOK_ARGS, _abi_values, _arg_types, _hooks, example,
                                      reference_evaluator, source)

SIZE_MAX = 2 ** 30          # the runtime's largest size of q, k, v (checks.MAX_SIZE_DIM)

# Each variant reads a value that leaves i32 for some indices below 2^31.
WIDE = {
    "square": "mask_mod(b, h, i, j) = (i - j) * (i - j) < 2000000000",
    "abs_square": "mask_mod(b, h, i, j) = abs(i - j) * abs(i - j) // 3 > 700000000",
    "product_mod": "mask_mod(b, h, i, j) = (i * j) % 1000 < 500 or i * j > 2000000000 - i",
    "min_max": "mask_mod(b, h, i, j) = min(i * 3, j * 5) - max(i, j) > 1000000000",
    "where": "mask_mod(b, h, i, j) = where(i > j, i * j, j - i) // 1000 > 2000000",
    "let_sum": "mask_mod(b, h, i, j) = let s = i + j in let t = s + s in t // 4 > 1000000000 and s % 3 != 1",
    "runtime_dim": "dim P\n  mask_mod(b, h, i, j) = i + P > 2147483000 or j - P < -1073000000",
    "param_divisor": "param d: i32[H]\n  mask_mod(b, h, i, j) = (i * j) // d[h] > 2 * (i + j) or (i * j) % d[h] == 0",
    "square_bias": "score_mod(s, b, h, i, j) = s - float((i - j) * (i - j)) * 0.000000001",
    "wide_index": "param t: f32[H, 8]\n  score_mod(s, b, h, i, j) = s + t[h, (i * j) // 2000000000 // 2000000000 + i * j // 1000000000]",
}


@functools.lru_cache(maxsize=None)
def wide(name: str):
    return compile_mlir(source(name, WIDE[name]), f"{name}.attn", CompileOptions(arch="sm_80"))


def _indices(rng, n: int):
    """(i, j) pairs: near the largest size, small, and far apart."""
    big = rng.integers(2 ** 29, SIZE_MAX, size=(n, 2))
    small = rng.integers(0, 50_000, size=(n, 2))
    far = np.stack([rng.integers(46_000, 70_000, size=n), rng.integers(0, 100, size=n)], axis=1)
    return [tuple(int(x) for x in pair) for part in (big, small, far) for pair in part]


@pytest.mark.parametrize("name", sorted(WIDE))
def test_hook_code_is_exact_where_i32_would_wrap(name):
    result = wide(name)
    variant = result.variant
    op, hooks = _hooks(result)
    rng = np.random.default_rng(11)
    dims = {d: SIZE_MAX for d in variant.dims}
    dims.update({"H": 4, "HKV": 4, "B": 2})
    if "P" in dims:
        dims["P"] = 2 ** 30 + 12345
    params = {}
    for p in variant.params:
        shape = [dims[d] if isinstance(d, str) else d for d in p.shape]
        params[p.name] = (rng.integers(1, 9, size=shape).astype(np.int32) if p.dtype == "i32"
                          else rng.normal(size=shape).astype(np.float32))
    evaluator = reference_evaluator(dims, params)
    args = _arg_types(result, hooks)
    names = {**args, **HOOK_ARGS}

    def body(e, a):
        idx = (a["b"], a["h"], a["i"], a["j"])
        if hooks.keep:
            return [hooks.keep(e, *idx)]
        if hooks.score_bias:
            return [e.fadd(a["s"], hooks.score_bias(e, *idx))]
        s_in = e.fmul(a["s"], hooks.score_mod_in / float(variant.scale))
        return [e.fmul(hooks.score_mod(e, s_in, *idx), hooks.score_mod_out)]

    with result.module.context:
        run = host_function(names, body)
    values = {**_abi_values(variant, dims), **{k.split(":")[-1]: dims[k.split(":")[-1]]
                                               for k in args if k.startswith("dim:")}, **params}
    kept = set()
    for i, j in _indices(rng, 100):
        b, h, s = int(rng.integers(0, 2)), int(rng.integers(0, 4)), float(rng.normal())
        ix = tuple(np.asarray(x) for x in (b, h, i, j))
        (got,) = run(**values, s=s, b=b, h=h, i=i, j=j)
        if variant.mask_mod is not None:
            want = int(evaluator.hook(variant.mask_mod, ix))
            kept.add(want)
            assert got == want, (name, dict(b=b, h=h, i=i, j=j))
        else:
            want = float(evaluator.hook(variant.score_mod, (np.asarray(s),) + ix))
            assert got == pytest.approx(want, rel=1e-5, abs=1e-5), (name, dict(b=b, h=h, i=i, j=j, s=s))
    if variant.mask_mod is not None:
        assert kept == {0, 1}, f"{name}: the indices tried should keep some and drop some"


@pytest.mark.parametrize("name", sorted(WIDE))
def test_wide_values_are_found(name):
    result = wide(name)
    op = attention_ops(result.module)[0]
    region = MASK_MOD if result.variant.mask_mod is not None else SCORE_MOD
    assert IntPlan.of(region_block(op, region), size_dims(result.variant)).wide


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_examples_hooks_stay_in_i32(name):
    result = example(name)
    op = attention_ops(result.module)[0]
    from attnc.ir.kernel import hook_indices
    for region in (k for k in hook_indices(op) if k in (MASK_MOD, SCORE_MOD)):     # the hooks it has
        block = region_block(op, region)
        plan = IntPlan.of(block, size_dims(result.variant))
        assert not plan.wide, (name, region)


@pytest.mark.parametrize("mask, wide_values", [
    ("(i - j) % 4 == 0", False),                 # a % c stays in i32 (its residue is exact)
    ("i - j + 1024 > 0", False),                 # the range of i - j + 1024 leaves i32, but not by a read
    ("j <= i + N - M", False),                   # i < M <= 2^30 and N <= 2^30: i + N fits
    ("j <= i + N + M", True),                    # i + N + M may reach 3 * 2^30
    ("(i - j) * (i - j) < 100", True),
])
def test_what_is_wide(mask, wide_values):
    result = compile_mlir(source("m", f"mask_mod(b, h, i, j) = {mask}"), "m.attn", CompileOptions(arch="sm_80"))
    block = region_block(attention_ops(result.module)[0], MASK_MOD)
    assert bool(IntPlan.of(block, size_dims(result.variant)).wide) == wide_values


def test_tile_intervals_take_top_of_a_wide_value_as_unbounded():
    """w[b] * 4 leaves i32 for w[b] = 10^9 (TOP in the block map's intervals); the exact
    (w[b] * 4) // 4 is 10^9, above 9 * 10^8, so every tile keeps all. Bounded by TOP's
    ends, the quotient would be at most 2^29 and every tile skipped; taken as unbounded,
    the tile is undecided and walked."""
    from tests.backend.test_blockmap_intervals import tile_truth, variant

    source = variant("(w[b] * 4) // 4 > 900000000", "param w: i32[B]")
    run = tile_truth(source)
    box = dict(B=2, H=1, M=256, N=256, b=1, h=0, i_lo=0, i_hi=127, j_lo=0, j_hi=63)
    assert run(**box, w=np.array([10, 10 ** 9], dtype=np.int32)) == [1, 1]     # may keep (it keeps all)
    assert run(**box, w=np.array([10, 10], dtype=np.int32)) == [0, 1]          # keeps none


# Found by a review, each at the points that showed it. f32 rounding of a
# product (Note [Float rounding in ranges]): the sum stayed in i32 and wrapped. The smallest
# integer % -1 (hook_arith.floordiv): a hardware division overflowed (SIGFPE here, undefined on
# the GPU). A division by 41 (Note [Division] in hooks.py): 41 * f32(1/41) < 1.
POINTS = {
    "f32_product": ("mask_mod(b, h, i, j) = int(float(min(i, 999)) * 2149015.0) + 617661 > 0",
                    {}, [(999, 0), (998, 5), (0, 0)]),
    "smallest_mod_minus_one": ("param ip: i32[2]\n  mask_mod(b, h, i, j) = ip[0] % ip[1] == 0 and ip[0] // ip[1] < j",
                               {"ip": np.array([-2 ** 31, -1], np.int32)}, [(0, 0), (3, 2 ** 30 - 1)]),
    "over_41": ("mask_mod(b, h, i, j) = int(float(i) / 41.0) == int(float(j) / 41.0)",
                {}, [(40, 41), (41, 81), (82, 81), (0, 40), (41, 41)]),
    "over_a_tenth": ("score_mod(s, b, h, i, j) = s + float(int(float(j) / 0.3))", {}, [(0, 9), (0, 3), (0, 30)]),
}


@pytest.mark.parametrize("name", sorted(POINTS))
def test_review_cases_give_the_reference_answer(name):
    hook, params, points = POINTS[name]
    result = compile_mlir(source(name, hook), f"{name}.attn", CompileOptions(arch="sm_80"))
    variant = result.variant
    op, hooks = _hooks(result)
    dims = {d: SIZE_MAX for d in variant.dims}
    dims.update({"H": 4, "HKV": 4, "B": 2})
    evaluator = reference_evaluator(dims, params)
    args = _arg_types(result, hooks)

    def body(e, a):
        idx = (a["b"], a["h"], a["i"], a["j"])
        if hooks.keep:
            return [hooks.keep(e, *idx)]
        return [e.fadd(a["s"], hooks.score_bias(e, *idx))]

    with result.module.context:
        run = host_function({**args, **HOOK_ARGS}, body)
    values = {**_abi_values(variant, dims), **params}
    for i, j in points:
        ix = tuple(np.asarray(x) for x in (0, 0, i, j))
        (got,) = run(**values, s=0.0, b=0, h=0, i=i, j=j)
        if variant.mask_mod is not None:
            assert got == int(evaluator.hook(variant.mask_mod, ix)), (name, i, j)
        else:
            assert got == float(evaluator.hook(variant.score_mod, (np.asarray(0.0, np.float32),) + ix)), (name, i, j)
