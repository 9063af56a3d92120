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
        assert ptx.rewrite_for_nvptx(module) == (7, 0)
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


# Two warpgroups give registers back (56 a thread), two take them (200): a pool of 512 x 128.
SETMAXNREG_KERNEL = """.version 8.7
.target sm_100a
.address_size 64
.visible .entry k(.param .u64 p)
.maxntid 512, 1, 1
{CTAS}
{
  .reg .b32 %r<2>;
  .reg .pred %q;
  mov.u32 %r1, %tid.x;
  setp.lt.u32 %q, %r1, 256;
  @%q bra up;
  setmaxnreg.dec.sync.aligned.u32 56;
  bra done;
up:
  setmaxnreg.inc.sync.aligned.u32 200;
done:
  ret;
}
"""


@pytest.mark.skipif(cubin.whole_program_ptxas() is None, reason="no ptxas to assemble setmaxnreg with")
def test_a_kernel_setting_its_registers_needs_the_register_files_share():
    """Note [The pool setmaxnreg moves]: with .minnctapersm 1 ptxas gives each of the 512
    threads the register file's share, 128, which the budgets move between warpgroups;
    without it ptxas gives the kernel the few registers its code needs, and the
    setmaxnreg.inc would wait for ever on a GPU: refused."""
    usage = cubin.parse_resource_usage(
        cubin.ptx_to_cubin(SETMAXNREG_KERNEL.replace("{CTAS}", ".minnctapersm 1"), "sm_100a").info_log)
    assert usage["k"].registers == 128
    cubin._assemble_whole_program.cache_clear()
    with pytest.raises(cubin.CubinError, match=r"ptxas gave k \d+ registers a thread, fewer than the 128 of the "
                                               r"register file's share of its 512 threads"):
        cubin.ptx_to_cubin(SETMAXNREG_KERNEL.replace("{CTAS}", ""), "sm_100a")


def test_the_register_pool_is_checked_only_where_setmaxnreg_is():
    """A kernel without setmaxnreg keeps what ptxas gives it; one with it, named by its
    entry, must have the share of the threads of its .maxntid (384: 168, a multiple of 8)."""
    log = "ptxas info    : Compiling entry function 'k' for 'sm_90a'\nptxas info    : Used {} registers\n"
    plain = SETMAXNREG_KERNEL.replace("{CTAS}", "").replace("setmaxnreg.dec.sync.aligned.u32 56;", "") \
                             .replace("setmaxnreg.inc.sync.aligned.u32 200;", "")
    cubin.check_register_pool(plain, log.format(4))
    three = SETMAXNREG_KERNEL.replace(".maxntid 512, 1, 1", ".maxntid 128, 3, 1")
    cubin.check_register_pool(three, log.format(168))
    with pytest.raises(cubin.CubinError, match="fewer than the 168 of the register file's share of its 384 threads"):
        cubin.check_register_pool(three, log.format(160))
