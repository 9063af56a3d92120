"""The sm_80 forward kernel without a GPU: it builds, verifies, lowers to PTX, assembles
for sm_80 with nvJitLink with zero spills for every head dim and dtype, and holds the
instructions the FA2 recipe calls for. (Numerics run on a GPU: tests/gpu.)"""
from __future__ import annotations

import functools
import re

import pytest
from mlir import ir

from attnc.backend import cubin, ptx
from attnc.backend.kernel_abi import kernel_abi
from attnc.backend.kernel_module import build_kernel_module
from attnc.backend.kernel_spec import ForwardSpec, default_forward_spec
from attnc.backend.mask_hooks import KvRange
from attnc.backend.spec_checks import HEAD_DIMS, SpecError
from tests.backend.sm80_gpu_check import window_softcap_hooks


@functools.lru_cache(maxsize=None)
def compiled(spec: ForwardSpec) -> tuple[str, cubin.ResourceUsage]:
    with ir.Context():
        module, _ = build_kernel_module(spec)
        text = ptx.to_ptx(module, "sm_80")
    return text, cubin.resource_usage(text, "sm_80")[spec.symbol]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_default_specs_assemble_without_spills(dtype, head_dim):
    spec = default_forward_spec(dtype, head_dim, mask="causal" if head_dim == 96 else "none",
                             with_lse=head_dim == 128)
    _, usage = compiled(spec)
    assert not usage.spills, f"{spec}: {usage}"
    assert usage.stack_frame == 0
    assert usage.registers <= 255


def test_different_qk_and_v_head_dims_with_f32_output():
    spec = default_forward_spec("bf16", 64, 128, out_dtype="f32", with_lse=True, mask="causal_bottom_right")
    _, usage = compiled(spec)
    assert not usage.spills, usage


def test_instruction_mix():
    text, _ = compiled(default_forward_spec("f16", 128, mask="causal", with_lse=True))
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
    text, _ = compiled(default_forward_spec("bf16", 64))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in text
    assert "cvt.rn.bf16x2.f32" in text


def test_abi_order_grid_and_smem():
    spec = default_forward_spec("f16", 128, with_lse=True)
    abi = kernel_abi(spec)
    kinds = [(p["kind"], p.get("tensor") or p.get("name")) for p in abi.params]
    assert kinds[:5] == [("ptr", "q"), ("ptr", "k"), ("ptr", "v"), ("ptr", "o"), ("ptr", "lse")]
    assert kinds[5:9] == [("dim", "M"), ("dim", "N"), ("dim", "H"), ("dim", "HKV")]
    strides = [(p["tensor"], p["axis"]) for p in abi.params if p["kind"] == "stride"]
    assert strides == [(t, a) for t in "qkvo" for a in range(3)] + [("lse", 0), ("lse", 1)]
    assert all(p["type"] == "i64" for p in abi.params if p["kind"] == "stride")
    assert abi.grid == ((["cdiv", "M", spec.block_m],), ("H",), ("B",))
    assert abi.block == (spec.threads, 1, 1)
    assert abi.dynamic_smem_bytes == spec.smem_bytes == 128 * 128 * 2 + 2 * 2 * 64 * 128 * 2
    kernel = abi.manifest_kernel()
    assert kernel["symbol"] == spec.symbol and kernel["grid"][0] == [["cdiv", "M", 128]]


def test_kernel_signature_matches_abi():
    spec = default_forward_spec("f16", 64)
    with ir.Context():
        module, abi = build_kernel_module(spec)
        text = str(module)
    assert f"gpu.func @{spec.symbol}(" in text and "kernel" in text
    header = text[text.index(f"@{spec.symbol}("):].split(")")[0]
    assert header.count("!llvm.ptr<1>") == 4
    assert header.count(": i64") == 12 and header.count(": i32") == 4


def test_hooks_score_mod_window_and_tile_partial_compile():
    """Note [Mask hooks]: a sliding window with a softcap, its partial blocks at both ends
    of the range, and the same asked per block through tile_partial."""
    peeled, asked = window_softcap_hooks()
    for hooks, extra in ((peeled, dict(with_lse=True)), (asked, {})):
        spec = ForwardSpec("f16", 64, 64, block_m=64, block_n=32, **hooks, **extra)
        text, usage = compiled(spec)
        assert "tanh.approx.f32" in text and not usage.spills


@pytest.mark.parametrize("change,knob", [
    (dict(head_dim_qk=80), "head_dim_qk"),
    (dict(block_m=96), "block_m"),
    (dict(block_n=40), "block_n"),
    (dict(block_m=256, block_n=128), "lower block_n or block_m"),
    (dict(stages=5), "stages"),
    (dict(mask="sliding"), "mask"),
    (dict(dtype="f32"), "dtype"),
    (dict(head_dim_qk=256, head_dim_v=256, block_m=128, block_n=128, num_warps=8), "shared memory"),
])
def test_spec_check_names_the_knob(change, knob):
    base = dict(dtype="f16", head_dim_qk=128, head_dim_v=128, block_m=128, block_n=64)
    with pytest.raises(SpecError, match=re.escape(knob)):
        ForwardSpec(**{**base, **change}).check()


def test_cache_key_covers_every_field():
    """Each field in turn set to a value of its own changes the key (found by a review:
    the test changed two fields only, and a key of those two passed)."""
    import copy
    import dataclasses
    a = default_forward_spec("f16", 128)
    assert a.cache_key() == default_forward_spec("f16", 128).cache_key()
    assert a.cache_key() != default_forward_spec("f16", 128, with_lse=True).cache_key()
    for f in dataclasses.fields(a):
        b = copy.copy(a)
        object.__setattr__(b, f.name, f"<another {f.name}>")
        assert b.cache_key() != a.cache_key(), f"the cache key ignores {f.name}"


def test_extra_params_reach_the_abi_and_the_hooks():
    """A runtime dim a hook reads (prefix-LM: keep j < P or j <= i) is a kernel parameter."""
    from attnc.backend.mask_hooks import ExtraParam

    def keep(e, b, h, i, j):
        return e.or_(e.lt(j, e.arg("P")), e.le(j, i))

    def kv_range(e, c):          # every block may be kept; none is known to be full
        return KvRange(0, 0, 0, e.cdiv(c.N, c.block_n))

    spec = ForwardSpec("f16", 64, 64, block_m=64, block_n=64, keep=keep, kv_range=kv_range,
                          extra_params=(ExtraParam("dim", "P"),))
    assert kernel_abi(spec).params[-1] == {"kind": "dim", "name": "P", "type": "i32"}
    text, usage = compiled(spec)
    assert f"[{spec.symbol}_param_{len(kernel_abi(spec).params) - 1}]" in text      # loaded
    assert not usage.spills
