"""The DSL hooks compiled into the sm_80 kernel (hooks.py, variant_hooks.py), without a GPU:

* every example builds a bundle whose kernel assembles with zero spills and holds the
  instructions its hooks call for;
* the hook code the kernel inlines, run on the CPU (host_jit.py), gives what
  attnc.reference_eval gives for the DSL expression (scores within f32 rounding,
  masks and ints exactly), out-of-range param indices included;
* the tile answers from attn-analyze-masks, as the kernel inlines them, are sound
  against a brute-force walk of the mask (SKIP keeps nothing, FULL keeps everything,
  every kept key lies in a visited segment).
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
from attnc.testing import kernel_ptx, let_chain, variant_source
from tests.backend.host_jit import host_function
from tests.backend.test_blockmap import emit_i1_function

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
# attnc/passes/tile_table.py; results/sm80_h200.md, "T5 at 128 keys").
MEASURED_SPILLS = {"relative_bias": 44}


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_assembles_without_spills(name):
    art = artifacts(name)
    usage = cubin.resource_usage(art.ptx, "sm_80")
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
            h.gpu_division = False
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
    """The softcap's tanh on a lane's 64 scores in each of the three loops' steps, and on
    each 16-row tile's 32 in the peeled first step (Note [Dead rows]): the window's kernel
    holds the score_mod wherever it computes scores."""
    assert artifacts("gemma2").manifest["specialization"]["dead_rows"]
    assert attention_ptx("gemma2").count("tanh.approx.f32") == 3 * 64 + 2 * 32


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


# ------------------------------------------------------------------ row intervals

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
    offsets = np.array([8 * (c // 2) + c % 2 for c in range(columns)])
    for b, h, i, col0, n_block in zip(rng.integers(0, 3, 600), rng.integers(0, 4, 600), rng.integers(-2, 620, 600),
                                      2 * rng.integers(0, 4, 600), rng.integers(0, 600 // block_n + 1, 600)):
        out = np.array(run(**values, b=b, h=h, i=i, col0=col0, n_block=n_block))
        jj = n_block * block_n + col0 + offsets
        keep = evaluator.hook(result.variant.mask_mod, tuple(np.asarray(x) for x in (b, h, i, jj)))
        keep = np.broadcast_to(keep, jj.shape).astype(bool) & (jj < dims["N"])
        assert np.array_equal(out == 1.0, keep) and np.all(out[~keep] == -np.inf), (mask, form, b, h, i, col0, n_block)


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
    """Note [One cvt for int()] (ptx.py): relative_bias's int(), once a diagonal of the
    scores a thread holds (Note [Values of a diagonal] in hooks.py: 22 of them on sm_80, 34
    on sm_90a), is one cvt.rzi.s32.f32 in the PTX, not LLVM's expansion of fptosi.sat (a NaN
    test and the bounds' compares and selects around it); sm_100a's:
    tests/backend/test_sm100a.py."""
    import attnc
    ptx = attnc.compile(ROOT / "examples/relative_bias.attn", arch=arch).bundle.code["ptx"].decode()
    assert ptx.count("cvt.rzi.s32.f32") >= {"sm_80": 22, "sm_90a": 34}[arch] and "setp.nan.f32" not in ptx


def test_a_runtime_division_goes_through_the_rounded_divide(monkeypatch):
    """Note [Division]: x / y of a runtime y is hook_arith.divide's nearest quotient from an
    approximate reciprocal, not x * rcp(y). On the CPU rcp.approx cannot run (hence
    gpu_division = False elsewhere here), so it is stood in for by 1/y made 2 ulps wrong:
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
    hooks.score_mod.gpu_division = True
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
