"""The sm_80 forward kernel without a GPU, built from `.attn` sources through the
pipeline: it lowers to PTX and assembles for sm_80 with nvJitLink with zero spills for
every head dim and dtype, holds the instructions the FA2 recipe calls for, launches as
its manifest says, and a tile option it cannot take is refused by name. (Numerics run
on a GPU: tests/gpu and tests/backend/sm80_gpu_check.py.)"""
from __future__ import annotations

import functools
import re

import pytest

from attnc.backend import cubin
from attnc.backend.cache import cache_key
from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.passes import kernel_choices
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import build_with
from tests.backend.sm80_gpu_check import window_softcap_source

HEAD_DIMS = (64, 96, 128, 256)


def source(dtype: str = "f16", d: int = 64, d_v: int | None = None, mask: str | None = None,
           lse: bool = False, out: str | None = None, decls: str = "") -> str:
    """A variant with KV heads of their own (HKV), so that every dim is a parameter of its own."""
    d_v = d_v or d
    hook = f"  mask_mod(b, h, i, j) = {mask}\n" if mask else ""
    return (f"attention t {{\n  q: {dtype}[B, H, M, {d}]\n  k: {dtype}[B, HKV, N, {d}]\n"
            f"  v: {dtype}[B, HKV, N, {d_v}]\n{decls}{hook}  out o: {out or dtype}[B, H, M, {d_v}]\n"
            + ("  out lse: f32[B, H, M]\n" if lse else "") + "}\n")


@functools.lru_cache(maxsize=None)
def built(text: str, **options):
    return build_with(text, "t.attn", "sm_80", **options)


def usage(art) -> dict[str, cubin.ResourceUsage]:
    """ptxas's resources of every kernel of the bundle's PTX (the small grid's too)."""
    found = cubin.resource_usage(art.ptx, "sm_80")
    assert found, "no kernel in the PTX"
    return found


def the_kernel(art) -> dict:
    """The attention kernel's manifest entry (the last: a tile table or a map comes first)."""
    return art.manifest["kernels"][-1]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_default_kernels_assemble_without_spills(dtype, head_dim):
    art = built(source(dtype, head_dim, mask="j <= i" if head_dim == 96 else None, lse=head_dim == 128))
    for symbol, u in usage(art).items():
        assert not u.spills, f"{symbol}: {u}"
        assert u.stack_frame == 0 and u.registers <= 255, f"{symbol}: {u}"


def test_different_qk_and_v_head_dims_with_f32_output():
    art = built(source("bf16", 64, 128, mask="j <= i + (N - M)", lse=True, out="f32"))
    sp = art.manifest["specialization"]
    assert (sp["head_dim_qk"], sp["head_dim_v"], sp["out_dtype"]) == (64, 128, "f32")
    assert not any(u.spills for u in usage(art).values()), usage(art)


def test_instruction_mix():
    text = built(source("f16", 128, mask="j <= i", lse=True)).ptx
    for needle in ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                   "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                   "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                   "cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group",
                   "ex2.approx.ftz.f32", "lg2.approx.ftz.f32", "shfl.sync.bfly.b32",
                   "cvt.rn.f16x2.f32", "bar.sync"):
        assert needle in text, needle
    assert "__nv_" not in text                       # no libdevice
    assert ".local" not in text                      # no stack arrays in the PTX
    # The quad reductions are xor 1 and xor 2 only.
    offsets = set(re.findall(r"shfl\.sync\.bfly\.b32\s+%r\d+, %r\d+, (\d+),", text))
    assert offsets == {"1", "2"}


def test_bf16_uses_bf16_mma():
    text = built(source("bf16", 64)).ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in text
    assert "cvt.rn.bf16x2.f32" in text


def test_abi_order_grid_and_smem():
    """The manifest's launch of the head-dim-128 kernel (128x64 tiles, two K/V stages,
    four warps): pointers, dims, i64 strides; one CTA per query block and head and batch;
    Q's tile and the K/V ring in dynamic shared memory."""
    art = built(source("f16", 128, lse=True))
    sp, kernel = art.manifest["specialization"], the_kernel(art)
    assert (sp["block_m"], sp["block_n"], sp["stages"], sp["num_warps"]) == (128, 64, 2, 4)
    kinds = [(p["kind"], p.get("tensor") or p.get("name")) for p in kernel["params"]]
    assert kinds[:5] == [("ptr", "q"), ("ptr", "k"), ("ptr", "v"), ("ptr", "o"), ("ptr", "lse")]
    assert kinds[5:9] == [("dim", "M"), ("dim", "N"), ("dim", "H"), ("dim", "HKV")]
    strides = [(p["tensor"], p["axis"]) for p in kernel["params"] if p["kind"] == "stride"]
    assert strides == [(t, a) for t in "qkvo" for a in range(3)] + [("lse", 0), ("lse", 1)]
    assert all(p["type"] == "i64" for p in kernel["params"] if p["kind"] == "stride")
    assert kernel["grid"] == [[["cdiv", "M", 128]], ["H"], ["B"]]
    assert kernel["block"] == [128, 1, 1]
    assert kernel["dynamic_smem_bytes"] == 128 * 128 * 2 + 2 * 2 * 64 * 128 * 2
    assert f".entry {kernel['symbol']}(" in art.ptx


def test_kernel_signature_matches_abi():
    art = built(source("f16", 64))
    symbol = the_kernel(art)["symbol"]
    text = str(art.result.module)
    assert f"gpu.func @{symbol}(" in text
    header = text[text.index(f"@{symbol}("):].split("\n")[0]
    assert " kernel " in header
    params = header.split(")")[0]
    assert params.count("!llvm.ptr<1>") == 4
    assert params.count(": i64") == 12 and params.count(": i32") == 4


def test_window_and_softcap_compile():
    """Note [Mask hooks]: a causal window of 100 keys (partial key blocks at both ends of
    a row's range) with a softcap, at 64x32 tiles."""
    art = built(window_softcap_source("f16", 64), block_m=64, block_n=32)
    sp = art.manifest["specialization"]
    assert (sp["block_m"], sp["block_n"], sp["mask"], sp["score_mod"]) == (64, 32, "mask_mod", "mod")
    assert "tanh.approx.f32" in art.ptx
    assert not any(u.spills for u in usage(art).values()), usage(art)


def compiled(text: str, **options):
    """The CompileResult of the sm_80 pipeline with `options` (no PTX)."""
    return compile_mlir(text, "t.attn", CompileOptions(arch="sm_80",
                                                        pass_pipeline=pipeline_with_options("sm_80", options)))


@pytest.mark.parametrize("text, options, message", [
    (source("f16", 80), {}, "head dim 80 is not supported"),
    (source("f32", 128), {}, "'q' has dtype f32"),
    (source("f16", 128), dict(block_m=96), "block_m=96"),
    (source("f16", 128), dict(block_n=40), "block_n=40"),
    (source("f16", 128), dict(block_m=256, block_n=128), "lower block_m or block_n"),
    (source("f16", 128), dict(stages=5), "stages=5"),
    (source("f16", 256), dict(block_m=128, block_n=128, num_warps=8), "shared memory"),
])
def test_what_the_kernel_cannot_take_is_refused_by_name(text, options, message):
    with pytest.raises(AttncError, match=re.escape(message)):
        compiled(text, **options)


def test_the_cache_key_of_the_final_ir_covers_every_kernel_choice():
    """A pipeline of one's own is cached under its final IR (attnc.compile): each choice
    of attn-kernel-choices in turn set to another value changes the key, so that no
    kernel of one choice is served for another."""
    result = compiled(source("f16", 128, mask="j <= i and i - j < 256"))     # a row interval: its test too
    kernel = attention_ops(result.module)[0]
    chosen = kernel_choices.read(kernel)
    assert set(chosen) == set(kernel_choices.BY_OPTION)
    key = cache_key(result.text, {"backend": "forward"}, "sm_80")
    for name, value in chosen.items():
        other = (not value) if isinstance(value, bool) else f"{value}x" if isinstance(value, str) else value + 1
        kernel_choices.write(kernel, {name: other})
        try:
            assert cache_key(result.text, {"backend": "forward"}, "sm_80") != key, \
                f"the cache key ignores {name}"
        finally:
            kernel_choices.write(kernel, {name: value})
    assert cache_key(result.text, {"backend": "forward"}, "sm_80") == key


def test_a_dim_of_the_variant_reaches_the_abi_and_the_mask():
    """A runtime dim the mask reads (prefix-LM: keep j < P or j <= i) is a kernel parameter,
    and the kernel loads it."""
    art = built(source("f16", 64, decls="  dim P\n", mask="j < P or j <= i"), block_m=64, block_n=64)
    kernel = the_kernel(art)
    assert kernel["params"][-1] == {"kind": "dim", "name": "P", "type": "i32"}
    assert f"[{kernel['symbol']}_param_{len(kernel['params']) - 1}]" in art.ptx      # loaded
    assert not any(u.spills for u in usage(art).values()), usage(art)
