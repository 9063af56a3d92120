"""The DSL hooks compiled into the sm_80 kernel (hooks.py, variant_hooks.py), without a GPU:

* every example builds a bundle whose kernel assembles with zero spills and holds the
  instructions its hooks call for;
* the hook code the kernel inlines, run on the CPU (host_jit.py), gives what
  attnc.reference_eval gives for the DSL expression (scores within f32 rounding,
  masks and ints exactly), out-of-range param indices included;
* the tile answers from attn-analyze-masks, as the kernel inlines them, are sound
  against a brute-force walk of the mask (SKIP keeps nothing, FULL keeps everything,
  every kept key lies in a visited segment).
Row intervals and the hooks' integer arithmetic: test_row_intervals.py.
(Numerics of whole kernels run on a GPU: tests/gpu.)
"""
from __future__ import annotations

import functools
import math
import struct
from pathlib import Path

import numpy as np

import pytest

from attnc.backend import cubin
from attnc.backend.hooks import RegionCode
from attnc.backend.lowering import build, mask_mode
from attnc.backend.variant_hooks import AnalysedTiles, variant_hooks
from attnc.driver import CompileOptions, compile_file, compile_mlir
from attnc.ir import attention_ops, get_int
from attnc.passes import kernel_choices
from attnc.passes.pipelines import pipeline_with_options
from attnc.reference_eval import Evaluator
from attnc.testing import cubin_resources, kernel_ptx, variant_source
from tests.backend.host_jit import host_function

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.attn"))


@functools.lru_cache(maxsize=None)
def example(name: str):
    return compile_file(ROOT / "examples" / f"{name}.attn", CompileOptions(arch="sm_80"))


def source(name: str, decls: str, hd: int = 64) -> str:
    return (f"attention {name} {{\n  q: f16[B, H, M, {hd}]\n  k: f16[B, H, N, {hd}]\n"
            f"  v: f16[B, H, N, {hd}]\n  {decls}\n  out o: f16[B, H, M, {hd}]\n}}\n")


# ------------------------------------------------------------------ the examples' kernels

EXPECT = {      # instructions an example's hooks must produce
    "softcap": ["tanh.approx.f32"], "gemma2": ["tanh.approx.f32"],
    "alibi": ["ld.global.nc.b32"], "relative_bias": ["ld.global.nc.b32", "lg2.approx"],
    "docs_sink": ["ld.global.nc.b32"],
}


@functools.lru_cache(maxsize=None)
def artifacts(name: str):
    return build(example(name))


def attention_ptx(name: str) -> str:
    """The PTX of an example's attention kernel alone (not its small grids' build)."""
    return attention_kernel_ptx(artifacts(name))


def attention_kernel_ptx(art) -> str:
    return kernel_ptx(art.ptx, art.manifest["kernels"][-1]["symbol"])


def f32_operand(x: float) -> str:
    """`x` rounded to f32 as PTX writes an immediate operand."""
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", x))[0]


# Spills measured faster with them than without, bytes at most: relative_bias's, those of
# its near tiles at 128 keys (the tile table's comment on block_n_params in
# attnc/passes/tile_table.py; results/sm80_h200.md, "T5 at 128 keys"). Its cubin, with the
# lanes sharing the diagonals, is ptxas's, which spills 16 (Note [The assembly that spills
# less] in attnc/backend/cubin.py).
MEASURED_SPILLS = {"relative_bias": 44}


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_assembles_without_spills(name):
    art = artifacts(name)
    usage = cubin_resources(art, "sm_80")
    assert usage, "no kernel in the PTX"
    for symbol, u in usage.items():
        if name in MEASURED_SPILLS:
            assert u.spill_stores <= MEASURED_SPILLS[name], f"{symbol}: {u}"
        else:
            assert not u.spills and u.stack_frame == 0, f"{symbol}: {u}"
    for needle in EXPECT.get(name, []):
        assert needle in art.ptx, needle
    assert "__nv_" not in art.ptx


def test_hook_parameters_reach_the_manifest():
    """Params become pointers, dims no ABI slot carries become ints, after the ABI's own."""
    params = lambda name: [p for k in artifacts(name).manifest["kernels"] for p in k["params"]]  # noqa: E731
    assert params("alibi")[-1] == {"kind": "ptr", "tensor": "slopes"}
    assert params("relative_bias")[-1] == {"kind": "ptr", "tensor": "bias"}
    assert params("prefix_lm")[-1] == {"kind": "dim", "name": "P", "type": "i32"}
    docs = params("docs_sink")
    assert {"kind": "ptr", "tensor": "doc"} in docs and {"kind": "ptr", "tensor": "sinks"} in docs


@pytest.mark.parametrize("name,kind", [("alibi", "bias"), ("relative_bias", "bias"),
                                       ("softcap", "mod"), ("gemma2", "mod"), ("mha", "none")])
def test_affine_score_mods_keep_the_folded_scale(name, kind):
    """s + f(b, h, i, j) is compiled as a bias (one FMA onto the raw score); tanh is not."""
    assert artifacts(name).manifest["specialization"]["score_mod"] == kind


def test_softcap_scalings_fold_into_the_kernels_multiplies():
    """Note [Score scalings]: 30 * tanh(s / 30) takes the raw score times scale / 30 and
    hands 30 to the softmax's exp2 factor: one FMUL and a tanh.approx per score."""
    scale = artifacts("softcap").manifest["specialization"]["softmax_scale"]
    ptx, mha = (attention_ptx(name) for name in ("softcap", "mha"))
    assert ptx.count("tanh.approx.f32") == 128           # 64 scores a thread holds, 2 loops
    assert ptx.count("mul.rn.f32") >= ptx.count(f32_operand(scale / 30.0)) == 128
    assert f32_operand(30.0 * math.log2(math.e)) in ptx          # the exp2 factor, in natural units
    # Note [Bounded score_mod]: tanh's range gives the running max (bf16): no max per
    # score, no rescale of O (the rescale's exp2 per row is gone too).
    assert "max.f32" not in ptx and "max.f32" in mha
    assert ptx.count("mul.rn.f32") < mha.count("mul.rn.f32")
    assert ptx.count("ex2.approx") == 128 < mha.count("ex2.approx")


@pytest.mark.parametrize("name,mode", [("mha", "none"), ("mqa", "causal"), ("alibi", "causal_bottom_right"),
                                       ("sliding_window", "mask_mod"), ("prefix_lm", "mask_mod"),
                                       ("docs_sink", "mask_mod"), ("gemma2", "mask_mod")])
def test_built_in_masks_keep_their_fast_path(name, mode):
    assert artifacts(name).manifest["specialization"]["mask"] == mode


# ------------------------------------------------------------------ hooks on the CPU

def _hooks(result):
    op = attention_ops(result.module)[0]
    hooks = variant_hooks(op, result.variant, mask_mode(op, result.variant), module=result.module)
    rows = getattr(hooks.row_interval, "__self__", None)          # the RowInterval of the bounds
    for h in (hooks.keep, hooks.score_mod, hooks.score_bias, hooks.sink, rows):
        if isinstance(h, RegionCode):
            h.gpu_arith = False
    return op, hooks


# A hook's own arguments, as host_function types them.
HOOK_ARGS = {"s": "f32", "b": "i32", "h": "i32", "i": "i32", "j": "i32"}


def reference_evaluator(dims, params) -> Evaluator:
    """attnc.reference_eval's evaluator of `params` held as the reference holds them (f64, i64)."""
    return Evaluator(dims, {k: v.astype(np.float64 if v.dtype.kind == "f" else np.int64) for k, v in params.items()})


def _arg_types(result, hooks) -> dict[str, str]:
    args = {d: "i32" for d in ("M", "N", "H", "HKV")}
    for x in hooks.extra_params:
        args[x.key] = "i32" if x.kind == "dim" else "ptr"
    return args


def _inputs(variant, rng, dims):
    params = {}
    for p in variant.params:
        shape = [dims[d] if isinstance(d, str) else d for d in p.shape]
        if p.dtype == "i32":
            params[p.name] = np.sort(rng.integers(0, 4, size=shape), axis=-1).astype(np.int32)
        else:
            params[p.name] = rng.normal(size=shape).astype(np.float32)
    return params


def _abi_values(variant, dims):
    role = lambda r: dims[getattr(variant, r)] if isinstance(getattr(variant, r), str) else getattr(variant, r)  # noqa: E731
    return {"M": role("seq_q"), "N": role("seq_k"), "H": role("heads"), "HKV": role("heads_kv")}


HOOKED = {
    "alibi": None, "relative_bias": None, "softcap": None, "gemma2": None, "docs_sink": None,
    "prefix_lm": None, "sliding_window": None,
    "floors": source("floors", "param t: f32[H, 7]\n  dim W\n"
                     "  score_mod(s, b, h, i, j) = s * t[h, (j - i) // 3 + W] + float((i - j) % 5)\n"
                     "  mask_mod(b, h, i, j) = (i - j) % 4 == 0 or j // 7 == i // 7"),
    "globalwin": source("globalwin", "mask_mod(b, h, i, j) = j < 16 or (j <= i and i - j < 300)"),
    # a temperature: s's only use is both the scaling of the input and of the result
    "temperature": source("temperature", "score_mod(s, b, h, i, j) = s * 2.0"),
    "temperature_left": source("temperature_left", "score_mod(s, b, h, i, j) = 0.5 * s"),
    # runtime divisors -1, 0, 1 and 2: `//` and `%` by 0 give 0 (Note [Total arithmetic])
    "divisors": source("divisors", "param p: i32[H, 4]\n"
                       "  mask_mod(b, h, i, j) = let d = p[h, j % 4] - 1 in "
                       "(i - j) % d == j % 3 or (j - i) // d > 1"),
    "mathy": source("mathy", "param w: f32[N]\n"
                    "  score_mod(s, b, h, i, j) = let x = s / (1.0 + abs(w[j])) in "
                    "sigmoid(x) * exp2(min(x, 3.0)) + rsqrt(2.0 + w[j] * w[j]) - floor(x) + sqrt(4.0)\n"
                    "  sink(h) = log(3.0 + float(h))"),
}


@functools.lru_cache(maxsize=None)
def hooked(name):
    text = HOOKED[name]
    if text is None:
        return example(name)
    return compile_mlir(text, f"{name}.attn", CompileOptions(arch="sm_80"))


@pytest.mark.parametrize("name", sorted(HOOKED))
def test_hook_code_matches_the_reference_evaluator(name):
    result = hooked(name)
    variant = result.variant
    op, hooks = _hooks(result)
    rng = np.random.default_rng(7)
    dims = {d: int(rng.integers(3, 40)) for d in variant.dims}
    dims.update({d: 4 for d in ("H", "HKV") if d in dims})
    params = _inputs(variant, rng, dims)
    evaluator = reference_evaluator(dims, params)
    scale = 1.0 / float(variant.scale)
    args = _arg_types(result, hooks)
    names = {**args, **HOOK_ARGS}

    def body(e, a):
        out = []
        idx = (a["b"], a["h"], a["i"], a["j"])
        if hooks.score_mod:       # Note [Score scalings]: in and out factors split off
            s_in = e.fmul(a["s"], hooks.score_mod_in / float(variant.scale))
            out.append(e.fmul(hooks.score_mod(e, s_in, *idx), hooks.score_mod_out))
        if hooks.score_bias:
            out.append(e.fadd(a["s"], hooks.score_bias(e, *idx)))
        if hooks.keep:
            out.append(hooks.keep(e, *idx))
        if hooks.sink:
            out.append(hooks.sink(e, a["h"]))
        return out

    with result.module.context:
        run = host_function(names, body)
    values = {**_abi_values(variant, dims), **{k.split(":")[-1]: dims[k.split(":")[-1]]
                                               for k in args if k.startswith("dim:")}, **params}
    checked = 0
    for _ in range(300):
        # indices a little outside the tensors too: every param read must clamp
        b, h = int(rng.integers(0, dims.get("B", 2))), int(rng.integers(0, 4))
        i, j = int(rng.integers(-3, 45)), int(rng.integers(-3, 45))
        s = float(rng.normal() * 4 * scale)
        got = run(**values, s=s, b=b, h=h, i=i, j=j)
        want = []
        ix = tuple(np.asarray(x) for x in (b, h, i, j))
        if variant.score_mod:
            want.append(float(evaluator.hook(variant.score_mod, (np.asarray(s),) + ix)))
        if hooks.keep:
            want.append(int(evaluator.hook(variant.mask_mod, ix)))
        if variant.sink:
            want.append(float(evaluator.hook(variant.sink, (np.asarray(h),))))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g == pytest.approx(w, rel=2e-5, abs=2e-5), (name, dict(b=b, h=h, i=i, j=j, s=s), got, want)
        checked += 1
    assert checked == 300


# ------------------------------------------------------------------ tile answers, brute force

MASKS = ["sliding_window", "prefix_lm", "gemma2", "docs_sink", "floors", "globalwin"]
EXACT = ("sliding_window", "prefix_lm", "gemma2", "globalwin")


@pytest.mark.parametrize("name", MASKS)
def test_inlined_tile_answers_are_sound(name):
    result = hooked(name)
    variant = result.variant
    op, hooks = _hooks(result)
    tiles: AnalysedTiles = hooks.kv_range.__self__
    bm, bn = get_int(op, "block_m"), get_int(op, "block_n")
    rng = np.random.default_rng(3)
    args = {**_arg_types(result, hooks), "m_block": "i32", "n_block": "i32", "b": "i32", "h": "i32"}

    def body(e, a):
        from attnc.backend.mask_hooks import KvCtx
        c = KvCtx(a["m_block"], a["b"], a["h"], a["M"], a["N"], bm, bn)
        r = tiles.kv_range(e, c)
        segs = r.segments or ((r.lo, r.hi),)
        flat = [x for pair in segs for x in pair]
        return flat + [r.full_lo, r.full_hi, tiles.tile_class(e, c, a["n_block"]), hooks.keep(e, a["b"], a["h"], a["i"], a["j"])]

    with result.module.context:
        run = host_function({**args, "i": "i32", "j": "i32"}, body)
    for trial in range(3):
        dims = {d: int(rng.integers(1, 5)) for d in variant.dims}
        # Small and large enough for the window edges (1024, 4096 keys) to cut tiles.
        longest = 3 * bm if trial == 0 else 2600 if trial == 1 else 5000
        dims[variant.seq_q] = int(rng.integers(1, longest))
        dims[variant.seq_k] = dims[variant.seq_q] if name == "docs_sink" else int(rng.integers(1, longest))
        if "P" in dims:
            dims["P"] = int(rng.integers(0, dims[variant.seq_k] + 10))
        if "W" in dims:
            dims["W"] = 2
        params = _inputs(variant, rng, dims)
        values = {**_abi_values(variant, dims), **{d: dims[d] for d in dims}, **params}
        evaluator = reference_evaluator(dims, params)
        M, N = dims[variant.seq_q], dims[variant.seq_k]
        ii, jj = np.meshgrid(np.arange(M), np.arange(N), indexing="ij")
        b = int(rng.integers(0, dims.get("B", 1)))
        keep = np.broadcast_to(evaluator.hook(variant.mask_mod, (np.asarray(b), np.asarray(0), ii, jj)), (M, N))
        for m_block in range(-(-M // bm)):
            if name in EXACT:       # affine masks: the kernel visits exactly the non-SKIP tiles
                out = run(**values, m_block=m_block, n_block=0, b=b, h=0, i=0, j=0)
                segs = [out[2 * s:2 * s + 2] for s in range(len(out) // 2 - 2)]
                visited = {n for lo, hi in segs for n in range(max(lo, 0), min(hi, -(-N // bn)))}
                rows = keep[m_block * bm:(m_block + 1) * bm]
                kept = {n for n in range(-(-N // bn)) if rows[:, n * bn:(n + 1) * bn].any()}
                assert visited == kept, (name, dims, m_block, segs)
            for n_block in range(-(-N // bn)):
                out = run(**values, m_block=m_block, n_block=n_block, b=b, h=0, i=0, j=0)
                segs = [out[2 * s:2 * s + 2] for s in range(len(out) // 2 - 2)]
                full_lo, full_hi, tile_class = out[-4], out[-3], out[-2]
                tile = keep[m_block * bm:(m_block + 1) * bm, n_block * bn:(n_block + 1) * bn]
                inside = any(lo <= n_block < hi for lo, hi in segs)
                where = (name, dims, m_block, n_block, segs, (full_lo, full_hi), tile_class)
                if tile.any():
                    assert inside and tile_class != 0, where
                if full_lo <= n_block < full_hi:
                    assert tile.all() and tile_class == 2, where
                if tile_class == 2:
                    assert tile.all(), where
                if tile_class == 0:
                    assert not tile.any(), where


@pytest.mark.parametrize("name", ["floors", "mathy", "globalwin"])
def test_hook_corners_compile_to_ptx(name):
    """Floor division, clamped 2-D reads, abs, min, sigmoid's division, a sink: all reach
    PTX without libdevice (the division rounded to nearest from rcp.approx, Note
    [Division] in hooks.py: no div.full, no div.rn and its called slow path)."""
    art = build(hooked(name))
    assert "__nv_" not in art.ptx
    if name == "mathy":
        assert "rcp.approx" in art.ptx and "fma.rn.f32" in art.ptx and "ex2.approx" in art.ptx
        assert "div.full" not in art.ptx and "div.rn" not in art.ptx


def test_global_tokens_and_a_window_walk_two_segments():
    art = build(hooked("globalwin"))
    assert art.manifest["specialization"]["mask"] == "mask_mod"
    assert not any(u.spills for u in cubin.resource_usage(art.ptx, "sm_80").values())


# ------------------------------------------------------------------ the KV schedule

def test_segmented_schedule_walks_the_union_downwards():
    """kv_schedule: step t visits the t-th block of the union of the (normalised) segments,
    counting down; steps_above(x) counts the visited blocks >= x."""
    from attnc.backend.kv_schedule import normalise
    from attnc.ir import make_context

    names = {f"{a}{k}": "i32" for k in range(3) for a in "se"}
    names.update({"t": "i32", "x": "i32", "n": "i32", "flo": "i32", "fhi": "i32"})

    def body(e, a):
        segs = [(a[f"s{k}"], a[f"e{k}"]) for k in range(3)]
        kv = normalise(e, segs, a["flo"], a["fhi"], a["n"])
        return [kv.block(e, a["t"]), kv.steps_above(e, a["x"]), kv.total(e), kv.full_lo, kv.full_hi]

    with make_context():
        run = host_function(names, body)
    rng = np.random.default_rng(11)
    for _ in range(400):
        n = int(rng.integers(0, 12))
        raw = sorted(int(v) for v in rng.integers(-2, 14, size=6))
        if rng.random() < 0.3:              # degenerate: an empty segment written backwards
            raw[2], raw[3] = raw[3], raw[2]
        segs = [(raw[2 * k], raw[2 * k + 1]) for k in range(3)]
        flo, fhi = (int(v) for v in sorted(rng.integers(-1, 14, size=2)))
        visited, prev = [], 0
        for lo, hi in segs:                 # Note [Segment normalisation]
            lo = min(max(lo, prev), n)
            hi = min(max(hi, lo), n)
            visited += range(lo, hi)
            prev = hi
        visited = sorted(set(visited), reverse=True)
        args = {f"{a}{k}": v for k, pair in enumerate(segs) for a, v in zip("se", pair)}
        for t in range(len(visited)):
            x = int(rng.integers(-1, 14))
            block, above, total, _, _ = run(**args, t=t, x=x, n=n, flo=flo, fhi=fhi)
            assert block == visited[t], (segs, n, t)
            assert above == sum(v >= x for v in visited) and total == len(visited), (segs, n, x)


def test_gemma2s_softcap_is_in_every_step():
    """The softcap's tanh on a lane's 64 scores in the one loop's step (Note [Key
    loops]), and on each 16-row tile's 32 in the peeled first step (Note [Dead rows]): the
    window's kernel holds the score_mod wherever it computes scores."""
    spec = artifacts("gemma2").manifest["specialization"]
    assert spec["dead_rows"] and spec["kv_loops"] == 1
    assert attention_ptx("gemma2").count("tanh.approx.f32") == 64 + 2 * 32


def test_alibi_bias_is_computed_per_row():
    """Note [Bias linear in j]: slopes[h] * (j - i) converts L once per accumulator row
    and KV loop body (an I2F), never per score or per column (measured faster than a
    per-column form, hooks.py)."""
    spec = artifacts("alibi").manifest["specialization"]
    assert spec["score_mod"] == "bias"
    rows = 2 * spec["block_m"] // spec["num_warps"] // 16        # two per 16-row MMA tile of a warp
    cvts = attention_ptx("alibi").count("cvt.rn.f32.s32")
    assert cvts % rows == 0 and rows <= cvts <= 3 * rows, (cvts, rows)


@pytest.mark.parametrize("mod", ["s + slopes[h] * (j - i)", "s - 0.5 * slopes[h] * (i - j)",
                                 "s + slopes[h] * float(i) * 0.001 * float(j - i)",
                                 "s + slopes[h] * float(i - 2 * j)", "s + slopes[h] * float(j - pos[i])"])
def test_biases_linear_in_j_are_found(mod):
    """Note [Bias linear in j]: a slope free of j times an integer linear in j, whatever
    it does with i (found on the bias hook the lowering inlines; the kernel's conversions
    per row: test_alibi_bias_is_computed_per_row)."""
    text = source("biased", f"param slopes: f32[H]\n  param pos: i32[M]\n  score_mod(s, b, h, i, j) = {mod}")
    _, hooks = _hooks(compile_mlir(text, "biased.attn", CompileOptions(arch="sm_80")))
    assert hooks.score_bias.j_linear is not None


def test_softcap_bounds():
    """Note [Bounded score_mod]: 30 * tanh(s / 30) lies in 30 * [-1, 1]; the kernel's
    constant max is the upper bound (its exp2 offset: -1 times the factor 30 log2(e))."""
    _, hooks = _hooks(example("softcap"))
    assert hooks.score_mod.bounds() == (-1.0, 1.0)
    assert f32_operand(-30.0 * math.log2(math.e)) in attention_ptx("softcap")


def _softcap_causal(dtype: str, hd: int, cap: float = 30.0, pipeline: str | None = None):
    text = source("capped", f"score_mod(s, b, h, i, j) = {cap} * tanh(s / {cap})\n  mask_mod(b, h, i, j) = j <= i",
                  hd).replace("f16", dtype)
    return compile_mlir(text, "capped.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline))


@functools.lru_cache(maxsize=None)
def _softcap_causal_artifacts(dtype: str, hd: int, cap: float):
    return build(_softcap_causal(dtype, hd, cap))


@pytest.mark.parametrize("dtype, hd, cap, blocks", [("bf16", 64, 30.0, 2), ("bf16", 128, 30.0, 1),
                                                    ("f16", 64, 30.0, 1), ("bf16", 64, 50.0, 1)])
def test_two_query_blocks_per_cta_for_a_constant_max_at_128_key_tiles(dtype, hd, cap, blocks):
    """q_blocks_per_cta's default: two blocks per CTA where the softmax max is the
    constant cap (bf16, spread 2 * cap <= 64: no row max in the kernel, Note [Bounded
    score_mod]) and tiles are 128 keys wide (head dim 64)."""
    art = _softcap_causal_artifacts(dtype, hd, cap)
    assert ("max.f32" not in attention_kernel_ptx(art)) == (dtype == "bf16" and cap == 30.0)
    spec = art.manifest["specialization"]
    assert spec["q_blocks_per_cta"] == blocks and (spec["block_n"] == 128) == (hd == 64)
    assert art.manifest["kernels"][-1]["grid"][0] == [["cdiv", "M", spec["block_m"] * blocks]]


@pytest.mark.parametrize("hd, options, tiles, form", [
    (64, {}, (128, 128), "bits"), (128, {}, (128, 64), "bits"),
    (64, {"block_m": 64, "block_n": 256}, (64, 256), "range"), (128, {"interval_test": "pair"}, (128, 64), "pair")])
def test_interval_test_defaults_by_tile_width(hd, options, tiles, form):
    """interval_test's default: the kept-bits test while a lane's row holds at most 32
    scores (key blocks of up to 128 keys)."""
    text = variant_source("band", hd, mask="j <= i and i - j < 100")
    result = compile_mlir(text, "band.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline_with_options(
        "sm_80", options)))
    op = attention_ops(result.module)[0]
    assert (get_int(op, "block_m"), get_int(op, "block_n")) == tiles
    assert kernel_choices.read(op)["interval_test"] == form


@pytest.mark.parametrize("ws, choices, message", [
    ("{q_blocks_per_cta=3}", "", "q_blocks_per_cta=3: expected 1 or 2"),
    ("", "{interval_test=both}", "interval_test='both': expected one of")])
def test_kernel_choices_are_checked(ws, choices, message):
    from attnc.errors import AttncError
    pipeline = (f"attn-tile,attn-analyze-masks,attn-warp-specialize{ws},attn-alloc-smem,attn-alloc-tmem,"
                f"attn-insert-pipelines,attn-kernel-choices{choices},attn-lower-sm80")
    with pytest.raises(AttncError, match=message):
        _softcap_causal("bf16", 64, pipeline=pipeline)
