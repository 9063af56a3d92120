"""PTX lowering (math to approximate instructions, loop annotations, targets) and the
nvJitLink/ptxas assembly and resource report, on small hand-written kernels."""
from __future__ import annotations

import pytest
from mlir import ir

from attnc.backend import cubin, ptx

MATH_KERNEL = """
module attributes {gpu.container_module} { gpu.module @m { gpu.func @k(%p: !llvm.ptr<1>, %x: f32, %h: bf16) kernel {
  %a = math.exp %x : f32
  %b = math.tanh %a : f32
  %c = math.log %b : f32
  %d = math.exp2 %h : bf16
  %e = arith.extf %d : bf16 to f32
  %f = arith.addf %c, %e : f32
  %g = math.rsqrt %f : f32
  %s = math.sqrt %g : f32
  %t = math.floor %s : f32
  llvm.store %t, %p : f32, !llvm.ptr<1>
  gpu.return } } }
"""

LOOP_KERNEL = """
module attributes {gpu.container_module} { gpu.module @m { gpu.func @k(%p: !llvm.ptr<1>, %x: f32) kernel {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c8 = arith.constant 8 : i32
  %r = scf.for %i = %c0 to %c8 step %c1 iter_args(%a = %x) -> (f32) : i32 {
    %b = arith.mulf %a, %a : f32
    scf.yield %b : f32
  } {llvm.loop_annotation = #llvm.loop_annotation<unroll = #llvm.loop_unroll<disable = true>>}
  llvm.store %r, %p : f32, !llvm.ptr<1>
  gpu.return } } }
"""


def lower(src: str, target: str = "sm_80") -> str:
    with ir.Context():
        return ptx.to_ptx(ir.Module.parse(src), target)


def test_transcendentals_become_approximate_instructions():
    text = lower(MATH_KERNEL)
    for needle in ("ex2.approx.ftz.f32", "tanh.approx.f32", "lg2.approx.ftz.f32",
                   "rsqrt.approx.ftz.f32", "sqrt.rn.f32", "cvt.rmi.f32.f32"):
        assert needle in text, needle
    assert "__nv_" not in text


def test_rewrite_counts_and_leaves_no_math_op():
    with ir.Context():
        module = ir.Module.parse(MATH_KERNEL)
        assert ptx.lower_math_to_approx(module) == 7
        assert "math.exp" not in str(module) and "math.tanh" not in str(module)


@pytest.mark.parametrize("target,version", [("sm_80", ".version 7.0"), ("sm_90a", ".version 8.0"),
                                            ("sm_100a", ".version 8.6")])
def test_targets(target, version):
    text = lower(MATH_KERNEL, target)
    assert f".target {target}" in text and version in text
    assert cubin.ptx_to_cubin(text, target).cubin[:4] == b"\x7fELF"


def test_unknown_target_is_refused():
    with pytest.raises(ptx.PtxError, match="unknown target 'sm_75'"):
        lower(MATH_KERNEL, "sm_75")


def test_loop_annotation_reaches_ptx():
    text = lower(LOOP_KERNEL)
    assert '.pragma "nounroll";' in text
    assert text.count("mul.rn.f32") == 1            # kept rolled, not unrolled 8 times


def test_resource_report_from_nvjitlink():
    text = lower(MATH_KERNEL)
    usage = cubin.resource_usage(text, "sm_80")["k"]
    assert 0 < usage.registers <= 255 and not usage.spills and usage.stack_frame == 0


@pytest.mark.skipif(cubin.ptxas_path() is None, reason="no ptxas on PATH")
def test_resource_report_from_ptxas():
    usage = cubin.resource_usage(lower(MATH_KERNEL), "sm_80", prefer_ptxas=True)["k"]
    assert 0 < usage.registers <= 255 and not usage.spills


def test_parse_resource_usage_reads_spills():
    log = """ptxas info    : Compiling entry function 'fwd' for 'sm_80'
ptxas info    : Function properties for fwd
    56 bytes stack frame, 100 bytes spill stores, 104 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 56 bytes cumulative stack size, 472 bytes cmem[0]
"""
    usage = cubin.parse_resource_usage(log)["fwd"]
    assert (usage.registers, usage.spill_stores, usage.spill_loads, usage.stack_frame) == (255, 100, 104, 56)
    assert usage.spills


def test_bad_ptx_and_bad_arch_raise():
    with pytest.raises(cubin.CubinError, match="nvJitLink failed for sm_80"):
        cubin.ptx_to_cubin(".version 7.0\n.target sm_80\n.address_size 64\nbogus;", "sm_80")
    with pytest.raises(cubin.CubinError, match="bad arch"):
        cubin.ptx_to_cubin("", "compute80")
