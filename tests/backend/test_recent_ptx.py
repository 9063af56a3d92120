"""Note [Recent PTX] in attnc/backend/ptx.py: the PTX of sm_90a's register-bound trial is
the bundle's, with LLVM run once, and only a module that differs from the trial's in its
gpu.module's `attn.*` attributes (or its locations) gets it."""
from __future__ import annotations

from mlir import ir

from attnc.backend import ptx

KERNEL = """
module attributes {gpu.container_module} { gpu.module @m ATTRS { gpu.func @k(%p: !llvm.ptr<1>, %x: f32) kernel {
  %a = math.exp %x : f32
  %b = arith.mulf %a, %x : f32
  llvm.store %b, %p : f32, !llvm.ptr<1>
  gpu.return } } }
"""


def counting_lowerings(monkeypatch) -> list:
    calls = []
    lower = ptx._lower

    def counted(work, options, **how):
        calls.append(options.target)
        return lower(work, options, **how)
    monkeypatch.setattr(ptx, "_lower", counted)
    monkeypatch.setattr(ptx, "_recent", type(ptx._recent)())
    return calls


def module(attrs: str = "") -> ir.Module:
    return ir.Module.parse(KERNEL.replace("ATTRS", attrs))


def test_a_kept_module_is_lowered_once_whatever_its_attn_attributes(monkeypatch):
    calls = counting_lowerings(monkeypatch)
    with ir.Context():
        first = ptx.to_ptx(module(), "sm_90a", in_place=True, keep=True)
        again = ptx.to_ptx(module('attributes {attn.kernels = "[]"}'), "sm_90a", in_place=True)
        assert again == first and calls == ["sm_90a"]
        assert ptx.to_ptx(module(), "sm_90a") == first and calls == ["sm_90a"] * 2    # used once


def test_another_module_target_or_attribute_is_lowered_again(monkeypatch):
    calls = counting_lowerings(monkeypatch)
    with ir.Context():
        kept = ptx.to_ptx(module(), "sm_90a", keep=True)
        assert ptx.to_ptx(module(), "sm_80") != kept                         # another target
        assert ptx.to_ptx(module('attributes {other = 1 : i32}'), "sm_90a") == kept
        assert ptx.to_ptx(module(), "sm_90a", opt_level=2) == kept
        changed = KERNEL.replace("ATTRS", "").replace("arith.mulf", "arith.addf")
        assert ptx.to_ptx(ir.Module.parse(changed), "sm_90a") != kept         # another kernel
    assert len(calls) == 5


def test_the_sm90_bundle_of_a_kernel_that_keeps_its_bound_is_lowered_once(monkeypatch):
    """Head dim 64 on sm_90a: the register-bound trial runs (Note [CTAs per SM]) and keeps
    the bound; the bundle's PTX is the trial's, and the same as lowering the bundle's
    gpu.module afresh."""
    from attnc.backend.lowering import build
    from attnc.driver import CompileOptions, compile_mlir
    from attnc.passes.lower_kernel import lowered_gpu_module

    calls = counting_lowerings(monkeypatch)
    source = """attention banded {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  mask_mod(b, h, i, j) = i - j == 0 or i - j == 1 or i - j == 5
  out o: bf16[B, H, M, 64]
}"""
    result = compile_mlir(source, "banded.attn", CompileOptions(arch="sm_90a"))
    art = build(result)
    assert calls == ["sm_90a"]
    assert ".minnctapersm" in art.ptx                                        # the bound kept
    gpu_module = lowered_gpu_module(result.module)
    fresh = ir.Module.parse(f"module attributes {{gpu.container_module}} {{\n{gpu_module}\n}}",
                            result.module.context)
    assert ptx.to_ptx(fresh, "sm_90a") == art.ptx and calls == ["sm_90a"] * 2
