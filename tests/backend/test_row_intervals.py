"""Note [Row intervals] and the integer arithmetic of the hooks the sm_80 kernel inlines
(hooks.py), without a GPU: each mask's row interval against a brute-force walk of the
mask, the bounds' integer widths, let-bound values walked once, every interval test
keeping exactly the masked keys, and int() and runtime division as the kernel computes
them (the hooks run on the CPU: host_jit.py). The rest of the hooks: test_hooks.py."""
from __future__ import annotations

import functools

import numpy as np

import pytest

from attnc.driver import CompileOptions, compile_mlir
from attnc.testing import let_chain
from tests.backend.host_jit import host_function
from tests.backend.test_blockmap import emit_i1_function
from tests.backend.test_hooks import (HOOK_ARGS, ROOT, _abi_values, _arg_types, _hooks, reference_evaluator,
                                      source)

ROW_MASKS = {       # mask_mod -> (whether Note [Row intervals] applies, with a residual)
    "j <= i and i - j < 24": (True, False),
    "j == i - 3": (True, False),
    "j <= i + 2": (True, False),
    "i - j < off[b]": (True, False),
    "not (j > i + 5) and j >= i - h - 3": (True, False),
    "i < 10 and j <= i": (True, False),
    "j <= i + N - M and not (i - j >= 7)": (True, False),
    "j <= i + off[b] and 2 - j <= 0": (True, False),
    "j > off[b] and j <= i": (True, False),
    "j - i < off[b]": (True, False),
    "j <= off[b]": (True, False),
    "j < 16 or j <= i": (False, False),
    "j != i": (False, False),
    "2 * j <= i": (False, False),
    "off[j] <= i": (False, False),
    "j // 7 == i // 7": (False, False),
    # Note [Residual conjuncts]: the interval bounds the keys, the rest is tested per score
    "off[j % 3] <= off[i % 3] and j <= i": (True, True),
    "j // 7 == i // 7 and j <= i": (True, True),
    "j != i and i - j < 9 and not (j % 2 == 1)": (True, True),
    "(j < 4 or j > i - 3) and j <= i + 1": (True, True),
    "not (j // 5 == 2 and i > 3) and j >= 2": (True, True),
}


# Offsets at the ends of i32 where the mask compares off[b] with an index expression
# itself: the bounds solved from them (x - y, its negation, the +-1 of a strict bound)
# leave i32 and must still be exact, and clamped on both sides.
EXTREME_OFF = {
    "i - j < off[b]": [2**31 - 1, -2**31, 200],        # a window of 2^31 - 1 keys: no window
    "j > off[b] and j <= i": [2**31 - 1, -2**31, 3],   # 2^31 - 1: the row sees nothing
    "j - i < off[b]": [2**31 - 1, -2**31, 5],
    "j <= off[b]": [-2**31, 2**31 - 1, 300],
}


@functools.lru_cache(maxsize=None)
def _row_mask(mask: str):
    text = source("rows", f"param off: i32[B]\n  mask_mod(b, h, i, j) = {mask}")
    return compile_mlir(text, "rows.attn", CompileOptions(arch="sm_80"))


@pytest.mark.parametrize("mask", sorted(ROW_MASKS))
def test_row_intervals_match_the_mask(mask):
    """Note [Row intervals]: the interval is offered exactly for conjunctions with a
    comparison linear in j with coefficient +-1, and then holds every key the mask keeps,
    and only those when there is no residual (Note [Residual conjuncts])."""
    result = _row_mask(mask)
    op, hooks = _hooks(result)
    interval, residual = ROW_MASKS[mask]
    assert (hooks.row_interval is not None) == interval
    assert (hooks.row_residual is not None) == residual
    if hooks.row_interval is None:
        return
    args = {**_arg_types(result, hooks), "b": "i32", "h": "i32", "i": "i32", "j": "i32"}

    def bounds(e, a):
        lo, hi = hooks.row_interval(e, a["b"], a["h"], a["i"])
        rest = hooks.row_residual(e, a["b"], a["h"], a["i"], a["j"]) if residual else e.true()
        return [e.c32(-(1 << 30)) if lo is None else lo, hi, rest]      # no lower bound: any j

    with result.module.context:
        run = host_function(args, bounds)
    jj = np.arange(-8, 70)
    for off in (None, EXTREME_OFF.get(mask)):
        if off is None and mask in EXTREME_OFF:
            continue
        values, evaluator = _row_mask_inputs(result, args, np.random.default_rng(11), off=off)
        for b in range(3):
            for h in range(4):
                for i in range(-2, 45, 1 if not residual else 3):
                    out = np.array([run(**values, b=b, h=h, i=i, j=j) for j in (jj if residual else jj[:1])])
                    lo, hi, rest = out[0, 0], out[0, 1], out[:, 2].astype(bool)
                    keep = evaluator.hook(result.variant.mask_mod, tuple(np.asarray(x) for x in (b, h, i, jj)))
                    keep, inside = np.broadcast_to(keep, jj.shape).astype(bool), (lo <= jj) & (jj <= hi)
                    assert np.array_equal(keep, inside & rest), (mask, off, b, h, i, lo, hi)
                    assert -(1 << 30) <= min(lo, hi) and max(lo, hi) <= 1 << 30, (mask, off, lo, hi)   # clamped


@pytest.mark.parametrize("mask, wide", [
    ("j <= i and i - j < 24", False),            # i and constants: i32
    ("j <= i + N - M and not (i - j >= 7)", True),    # i + N may leave i32
    ("i - j < off[b]", True),                    # a param: any i32, so i64
    ("j > off[b] and j <= i", True),
])
def test_bounds_leave_i32_only_where_the_ranges_say(mask, wide):
    """Note [Exact bounds]: a term is solved in i64 only when its sides' ranges could
    take x - y or its +-1 out of i32."""
    result = _row_mask(mask)
    _, hooks = _hooks(result)
    abi = ("M", "N", "H", "HKV")          # the template's dims of those roles keep their names
    names = {d: d if d in abi else f"dim:{d}" for d in result.variant.dims}

    def body(e, b, h, i, j):
        lo, hi = hooks.row_interval(e, b, h, i)
        return e.le(lo, hi)

    text = emit_i1_function(result, [names[d] for d in result.variant.dims], body)
    assert ("i64" in text) == wide, text
    # An i64 term is clamped on both sides; an i32 one where its range needs it (a
    # causal hi = i >= 0 needs no max): both clamps are checked at the ends of i32 by
    # the two tests below.
    assert text.count("arith.minsi") >= 1 and (text.count("arith.maxsi") >= 1 or not wide)


SHARED_WALKS = {    # hook code that walks a region: (hook, first, step, last)
    "row bounds": ("mask_mod", "i", "{p} + {p}", "j - i < {p} and j <= i"),
    "conjuncts": ("mask_mod", "j <= i", "{p} and {p}", "{p}"),
    "bias linear in j": ("score_mod", "j - i", "{p} + {p}", "s + float({p})"),
    "score bounds": ("score_mod", "tanh(s)", "{p} + {p}", "{p}"),
}


@pytest.mark.parametrize("walk", sorted(SHARED_WALKS))
def test_hooks_walk_a_value_that_lets_reuse_once(walk, monkeypatch):
    """`_int_range`, `MaskConjuncts`, `_j_coefficient` and `_interval` visit each value of
    a region once, however often `let`s reuse it (`_once_per_value`): their work grows
    with the number of lets, not with the 2^n paths (each walk was exponential once)."""
    from attnc.backend import hook_walks as hooks_module
    hook, first, step, last = SHARED_WALKS[walk]
    args = "s, b, h, i, j" if hook == "score_mod" else "b, h, i, j"
    calls = {}
    for n in (4, 10):
        text = source("shared", f"{hook}({args}) = {let_chain(first, step, n, last)}")
        result = compile_mlir(text, "shared.attn", CompileOptions(arch="sm_80"))
        seen = []
        walk_op = hooks_module.defining_op
        monkeypatch.setattr(hooks_module, "defining_op", lambda v: seen.append(v) or walk_op(v))
        _, hooks = _hooks(result)
        if hooks.score_mod is not None:
            hooks.score_mod.bounds()
        monkeypatch.undo()
        calls[n] = len(seen)
    assert calls[10] <= calls[4] + 6 * 8, calls


@pytest.mark.parametrize("block_n", [32, 128])
@pytest.mark.parametrize("form", ["range", "pair", "bits"])
@pytest.mark.parametrize("mask", sorted(m for m, (rows, _) in ROW_MASKS.items() if rows))
def test_every_interval_test_keeps_exactly_the_masked_keys(mask, form, block_n):
    """Note [One compare per score] (score_masks.py): each per-score test of a row
    interval (and its residual, Note [Residual conjuncts]) keeps a score exactly when the
    mask keeps it and j < N, in rows whose interval is empty, far below or above the
    tile as well as across it."""
    from attnc.backend.score_masks import ElementCoords, ScoreMasker
    result = _row_mask(mask)
    op, hooks = _hooks(result)
    columns = block_n // 4             # block_n / 8 n8 atoms: columns 2t, 2t+1 of each
    args = {**_arg_types(result, hooks), "b": "i32", "h": "i32", "i": "i32", "col0": "i32", "n_block": "i32"}

    def body(e, a):
        coords = ElementCoords(e, a["i"], a["col0"], block_n)
        masker = ScoreMasker(e, coords, a["b"], a["h"], 1.0, None, hooks.keep, row_interval=hooks.row_interval,
                             row_residual=hooks.row_residual)
        return masker.mask([[e.cf(1.0)] * columns], a["n_block"], test=form)[0]

    with result.module.context:
        run = host_function(args, body)
    rng = np.random.default_rng(5)
    dims = {"B": 3, "H": 4, "M": 600, "N": 600}          # whole 128-key tiles kept, and far ones
    # Bounds at the ends of i32 must not overflow (Note [One compare per score]).
    values, evaluator = _row_mask_inputs(result, args, rng, dims, EXTREME_OFF.get(mask))
    check_masked_row(run, values, evaluator, result, rng, 600, block_n, dims, (mask, form))


def check_masked_row(run, values, evaluator, result, rng, count: int, block_n: int, dims: dict, label) -> None:
    """`run`, a thread's masked row of block_n / 4 scores (1.0 where kept, -inf where not)
    at `count` random (b, h, i, first column, key block), against the mask as `evaluator`
    computes it, and j < N."""
    offsets = np.array([8 * (c // 2) + c % 2 for c in range(block_n // 4)])
    for b, h, i, col0, n_block in zip(rng.integers(0, 3, count), rng.integers(0, 4, count),
                                      rng.integers(-2, 620, count), 2 * rng.integers(0, 4, count),
                                      rng.integers(0, 600 // block_n + 1, count)):
        out = np.array(run(**values, b=b, h=h, i=i, col0=col0, n_block=n_block))
        jj = n_block * block_n + col0 + offsets
        keep = evaluator.hook(result.variant.mask_mod, tuple(np.asarray(x) for x in (b, h, i, jj)))
        keep = np.broadcast_to(keep, jj.shape).astype(bool) & (jj < dims["N"])
        assert np.array_equal(out == 1.0, keep) and np.all(out[~keep] == -np.inf), (label, b, h, i, col0, n_block)


ROW_DIMS = {"B": 3, "H": 4, "M": 40, "N": 52}


def _row_mask_inputs(result, args, rng, dims=ROW_DIMS, off=None):
    """(the host function's dim and param values, the reference evaluator) for a mask of
    `_row_mask` at `dims`, with the offsets `off` (default: random small ones)."""
    params = {"off": np.array(off if off is not None else rng.integers(-4, 9, size=3), dtype=np.int32)}
    evaluator = reference_evaluator(dims, params)
    values = {**_abi_values(result.variant, dims), **params}
    values.update({k.split(":")[-1]: dims[k.split(":")[-1]] for k in args if k.startswith("dim:")})
    return values, evaluator


def test_int_of_a_float_is_the_saturating_conversion_in_the_kernel():
    """Note [Saturating int]: the kernel converts with LLVM's fptosi.sat, which saturates at
    the i32 bounds as int() is defined, not with its fptosi, which is poison there (the GPU
    test of the values: tests/gpu/test_gpu_exact_ints.py, int_saturates, int_of_nan)."""
    from attnc.driver import CompileOptions, compile_mlir
    source = ("attention intsat {\n  q: f16[B, H, M, 64]\n  k: f16[B, H, N, 64]\n  v: f16[B, H, N, 64]\n"
              "  mask_mod(b, h, i, j) = int(float(j) * 100000.0) == 2147483647 or j - i < 3\n"
              "  out o: f16[B, H, M, 64]\n}\n")
    text = compile_mlir(source, "intsat.attn", CompileOptions(arch="sm_80")).text
    kernels = text[text.index("gpu.module"):]
    assert '"llvm.fptosi.sat.i32.f32"' in kernels and "arith.fptosi" not in kernels
    assert "llvm.fptosi " not in kernels


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_int_is_one_conversion_in_the_ptx(arch):
    """Note [One cvt for int()] (ptx.py): relative_bias's int(), once for each of the
    diagonals a lane computes for its warp (Note [Diagonals across the warp]: 3 on sm_80,
    5 on sm_90a) in each loop's near tiles (2 on sm_80, 3 on sm_90a), is one
    cvt.rzi.s32.f32 in the PTX, not LLVM's expansion of fptosi.sat (a NaN test and the
    bounds' compares and selects around it); sm_100a's: tests/backend/test_sm100a.py."""
    import attnc
    ptx = attnc.compile(ROOT / "examples/relative_bias.attn", arch=arch).bundle.code["ptx"].decode()
    assert ptx.count("cvt.rzi.s32.f32") >= {"sm_80": 6, "sm_90a": 15}[arch] and "setp.nan.f32" not in ptx


def test_a_runtime_division_goes_through_the_rounded_divide(monkeypatch):
    """Note [Division]: x / y of a runtime y is hook_arith.divide's nearest quotient from an
    approximate reciprocal, not x * rcp(y). On the CPU rcp.approx cannot run (hence
    gpu_arith = False elsewhere here), so it is stood in for by 1/y made 2 ulps wrong:
    the quotients must still be numpy's f32 ones to the bit (found by a review: with the
    hooks computing x * rcp(y), every CPU test still passed)."""
    from mlir.dialects import arith

    def off_rcp(self, y):
        f32 = ir.F32Type.get()
        exact = arith.divf(arith.constant(f32, 1.0), y)
        return arith.mulf(exact, arith.constant(f32, 1.0 + 2.0 ** -22))

    from mlir import ir
    from attnc.backend import nvgpu_builders
    monkeypatch.setattr(nvgpu_builders.Approx, "rcp", off_rcp)
    result = compile_mlir(source("quot", "score_mod(s, b, h, i, j) = float(i * 7 + 3) / float(j + 1)"),
                          "quot.attn", CompileOptions(arch="sm_80"))
    op, hooks = _hooks(result)
    hooks.score_mod.gpu_arith = True
    args = _arg_types(result, hooks)
    with result.module.context:
        run = host_function({**args, **HOOK_ARGS},
                            lambda e, a: [hooks.score_mod(e, a["s"], a["b"], a["h"], a["i"], a["j"])])
    values = _abi_values(result.variant, {"B": 1, "H": 1, "M": 64, "N": 64})
    wrong = 0
    for i in range(0, 4000, 37):
        for j in range(1, 60):
            want = np.float32(i * 7 + 3) / np.float32(j + 1)
            got = np.float32(run(**values, s=0.0, b=0, h=0, i=i, j=j)[0])
            assert got == want, (i, j, got, want)
            wrong += np.float32(i * 7 + 3) * (np.float32(1) / np.float32(j + 1) * np.float32(1 + 2 ** -22)) != want
    assert wrong > 100          # the stand-in reciprocal alone would have missed these
