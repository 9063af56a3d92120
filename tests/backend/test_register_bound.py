"""Note [The bound the assembler decides] in attnc/backend/register_bound.py: sm_90a's
default register bound is tried by the bundle's build, not by the lowering; LLVM lowers
the kernel once, and a kernel that spills under the bound gets the same PTX less its
`.minnctapersm` line (Note [A bound dropped] in ptx.py), assembled beside the trial."""
from __future__ import annotations

import json
from concurrent.futures import Future
from pathlib import Path

import pytest
from mlir import ir

from attnc.backend import cubin, ptx
from attnc.driver import CompileOptions, compile_file, compile_mlir
from attnc.ir import attention_ops
from attnc.passes import kernel_choices
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import SM90A_ONE_WARPGROUP

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"

KERNEL = """
module attributes {gpu.container_module} { gpu.module @m { gpu.func @k(%p: !llvm.ptr<1>, %x: f32) kernel BOUND {
  %a = math.exp %x : f32
  %b = arith.mulf %a, %x : f32
  llvm.store %b, %p : f32, !llvm.ptr<1>
  gpu.return } } }
"""

# Head dim 64 on sm_90a: a default register bound (four CTAs an SM), which this kernel keeps.
BANDED = """attention banded {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  mask_mod(b, h, i, j) = i - j == 0 or i - j == 1 or i - j == 5
  out o: bf16[B, H, M, 64]
}"""


def module(bound: int | None) -> ir.Module:
    attrs = "" if bound is None else f"attributes {{nvvm.minctasm = {bound} : i32}}"
    return ir.Module.parse(KERNEL.replace("BOUND", attrs))


def bounded_and_unbounded_ptx() -> tuple[str, str]:
    with ir.Context():
        return ptx.to_ptx(module(3), "sm_90a"), ptx.to_ptx(module(None), "sm_90a")


def test_a_bound_dropped_is_the_ptx_lowered_without_it():
    bounded, unbounded = bounded_and_unbounded_ptx()
    assert ".minnctapersm 3\n" in bounded and ".minnctapersm" not in unbounded
    assert ptx.without_bound(bounded, "k") == unbounded
    assert ptx.without_bound(unbounded, "k") is None
    assert ptx.without_bound(bounded, "other") is None


def counting_lowerings(monkeypatch) -> list:
    calls = []
    lower = ptx._lower

    def counted(work, options, **how):
        calls.append(options.target)
        return lower(work, options, **how)
    monkeypatch.setattr(ptx, "_lower", counted)
    return calls


def counting_assemblies(monkeypatch, cores: int, ready: int = 1) -> list:
    """Note [Assembled beside the trial] in attnc/backend/cubin.py, on `cores` cores with
    `ready` tasks ready to run (this one among them)."""
    calls = []
    assemble = cubin._assemble
    monkeypatch.setattr(cubin, "_assemble", lambda ptx, *rest: calls.append(ptx) or assemble(ptx, *rest))
    monkeypatch.setattr(cubin, "_beside", {})
    monkeypatch.setattr(cubin.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(cubin, "_ready_tasks", lambda: ready)
    return calls


def test_the_unbounded_kernel_is_assembled_beside_the_trials(monkeypatch):
    bounded, unbounded = bounded_and_unbounded_ptx()
    calls = counting_assemblies(monkeypatch, cores=2)
    cubin.resource_usage(bounded, "sm_90a", unbounded=unbounded)
    got = cubin.ptx_to_cubin(unbounded, "sm_90a")
    assert calls == [bounded]                                   # the unbounded one came from the other thread
    assert got.cubin == cubin._nvjitlink(unbounded, "sm_90a", True, ("-O3",)).cubin


def test_one_core_a_busy_machine_or_no_unbounded_ptx_assembles_nothing_beside(monkeypatch):
    bounded, unbounded = bounded_and_unbounded_ptx()
    counting_assemblies(monkeypatch, cores=1)
    cubin.resource_usage(bounded, "sm_90a", unbounded=unbounded)
    assert cubin._beside == {}
    counting_assemblies(monkeypatch, cores=2, ready=2)
    cubin.resource_usage(bounded, "sm_90a", unbounded=unbounded)
    assert cubin._beside == {}
    counting_assemblies(monkeypatch, cores=2)
    cubin.resource_usage(bounded, "sm_90a")
    assert cubin._beside == {}


def test_the_lowering_runs_no_assembler(monkeypatch):
    """The IR after attn-lower-sm90a (what --emit mlir prints) says the bound and that it
    is kept only without spills; nothing is assembled to make it."""
    from attnc.passes.lower_kernel import SPECIALIZATION_ATTR, lowered_gpu_module

    def refused(*args, **kwargs):
        raise AssertionError("the lowering assembled a kernel")
    monkeypatch.setattr(cubin, "_nvjitlink", refused)
    monkeypatch.setattr(cubin, "_run_ptxas", refused)
    result = compile_mlir(BANDED, "banded.attn", CompileOptions(arch="sm_90a"))
    gpu_module = lowered_gpu_module(result.module)
    specialization = json.loads(ir.StringAttr(gpu_module.attributes[SPECIALIZATION_ATTR]).value)
    bound = specialization["min_ctas_per_sm"]
    assert bound >= 2 and specialization["min_ctas_unless_spills"] is True
    assert f"nvvm.minctasm = {bound} : i32" in str(gpu_module)


@pytest.mark.parametrize("example, kept", [(None, True), ("alibi", False)])
def test_the_bundle_lowers_its_kernel_once_and_says_which_bound_it_kept(monkeypatch, example, kept):
    """The banded kernel keeps its bound, ALiBi's (bottom-right causal, f16) spills under it
    and drops it: either way LLVM runs once, and the PTX is what lowering the lowered
    gpu.module afresh gives, less the bound where it was dropped."""
    from attnc.backend.lowering import build
    from attnc.passes.lower_kernel import lowered_gpu_module

    cubin._assemble.cache_clear()
    if example is None:
        result = compile_mlir(BANDED, "banded.attn", CompileOptions(arch="sm_90a"))
    else:
        result = compile_file(EXAMPLES_DIR / f"{example}.attn", CompileOptions(arch="sm_90a"))
    calls = counting_lowerings(monkeypatch)
    art = build(result)
    assert calls == ["sm_90a"]
    asked = kernel_choices.read(attention_ops(result.module)[0])["min_ctas_per_sm"]
    assert asked >= 2
    assert (f".minnctapersm {asked}\n" in art.ptx) == kept and (".minnctapersm" in art.ptx) == kept
    assert art.manifest["specialization"]["min_ctas_per_sm"] == (asked if kept else 0)
    assert art.manifest["specialization"]["min_ctas_unless_spills"] is True
    gpu_module = lowered_gpu_module(result.module)
    fresh = ptx.to_ptx(ir.Module.parse(f"module attributes {{gpu.container_module}} {{\n{gpu_module}\n}}",
                                       result.module.context), "sm_90a")
    symbol = art.manifest["kernels"][-1]["symbol"]
    assert art.ptx == (fresh if kept else ptx.without_bound(fresh, symbol))



def test_a_trial_lowered_again_where_the_diagnostics_are_kept(monkeypatch):
    """The lowering without the GIL answers only whether it failed: where it does, the
    trial lowers its module again, whole, on the thread it runs on -- a pool thread, from
    which a kernel sent to another would wait for it -- and gives the same PTX, or raises
    the diagnostics. docs_sink's module holds three kernels (the block map's, the tile table's)."""
    from attnc.backend.register_bound import _lowered_trial
    from attnc.passes.lower_kernel import KERNELS_ATTR, lowered_gpu_module

    result = compile_file(EXAMPLES_DIR / "docs_sink.attn", CompileOptions(arch="sm_90a"))
    gpu_module = lowered_gpu_module(result.module)
    symbol = json.loads(ir.StringAttr(gpu_module.attributes[KERNELS_ATTR]).value)[-1]["symbol"]
    module = ir.Module.parse(f"module attributes {{gpu.container_module}} {{\n{gpu_module}\n}}",
                             result.module.context)
    ptx.rewrite_for_nvptx(module)
    data = ptx.bytecode(module)
    expected = ptx.ptx_of_bytecode(data, "sm_90a")
    assert expected.count(".entry ") >= 2
    monkeypatch.setattr(ptx, "_lower_unlocked", lambda payload, options: None)
    lowered = Future()
    assert ptx._threads().submit(_lowered_trial, data, "sm_90a", symbol, lowered).result(timeout=300)[0] == expected
    assert lowered.result(timeout=0) == expected

    def failing(work, options, **how):
        raise ptx.PtxError("lowering to PTX for sm_90a failed:\nerror: what MLIR said")
    monkeypatch.setattr(ptx, "_lower", failing)
    lowered = Future()
    with pytest.raises(ptx.PtxError, match="what MLIR said"):
        ptx._threads().submit(_lowered_trial, data, "sm_90a", symbol, lowered).result(timeout=300)
    with pytest.raises(ptx.PtxError, match="what MLIR said"):     # not waited for forever
        lowered.result(timeout=0)


@pytest.mark.parametrize("far_spills", [True, False])
def test_where_the_far_sides_spill_the_kernel_without_its_bound_is_assembled_beside_the_trial(
        monkeypatch, far_spills):
    """Note [Spills of the near tiles]: where the copy of relative_bias's kernel (one
    consumer warpgroup, 64x128) held on its far sides spills (made to here), this thread
    assembles the trial's PTX less its bound while the trial's own assembly runs on the
    other, and the bundle takes that cubin; where it does not, only the trial's PTX is
    assembled."""
    import threading
    import time

    from attnc.backend import register_bound
    from attnc.backend.lowering import build

    pipeline = pipeline_with_options("sm_90a", SM90A_ONE_WARPGROUP)
    result = compile_file(EXAMPLES_DIR / "relative_bias.attn", CompileOptions(arch="sm_90a", pass_pipeline=pipeline))
    cubin._assemble.cache_clear()
    counting_assemblies(monkeypatch, cores=2)
    assembled = {}              # with the bound or not: (on this thread, start, end) of its assembly
    nvjitlink = cubin._nvjitlink

    def timed(text, *rest):
        start = time.perf_counter()
        out = nvjitlink(text, *rest)
        assembled[".minnctapersm" in text] = (threading.current_thread() is threading.main_thread(), start,
                                              time.perf_counter())
        return out
    monkeypatch.setattr(cubin, "_nvjitlink", timed)
    monkeypatch.setattr(register_bound, "_far_sides_spill", lambda *args: far_spills)
    art = build(result)
    assert not assembled[True][0]                               # the trial's, on its own thread
    if far_spills:
        assert ".minnctapersm" not in art.ptx and art.manifest["specialization"]["min_ctas_per_sm"] == 0
        assert assembled[False][0] and assembled[False][1] < assembled[True][2]     # here, meanwhile
        assert art.cubin == nvjitlink(art.ptx, "sm_90a", True, ("-O3",)).cubin
    else:
        assert ".minnctapersm 3" in art.ptx and list(assembled) == [True]


def test_the_far_sides_copy_drops_the_warps_vote_with_the_near_side():
    """With attn-hoist{lanes=true} the near tiles' far test passes through vote.sync.all
    (Note [Diagonals across the warp] in warp_diagonals.py), which LLVM keeps where nothing reads
    it: holding the branches on their far sides erases those votes, and the copy is the
    kernel with no near side."""
    from attnc.backend.lowering import kernel_module_for
    from attnc.backend.register_bound import hold_far_sides
    from attnc.backend.score_masks import NEAR_TILES

    options = CompileOptions(arch="sm_90a", pass_pipeline=pipeline_with_options("sm_90a", {"lanes": True, **SM90A_ONE_WARPGROUP}))
    module = kernel_module_for(compile_file(EXAMPLES_DIR / "relative_bias.attn", options))[0]
    near: list = []
    ptx.rewrite_for_nvptx(module, marked=(NEAR_TILES, near))
    votes = str(module).count("nvvm.vote.sync")
    assert len(near) == 3 and votes == len(near)
    hold_far_sides(module, near)
    module.operation.verify()
    assert "nvvm.vote.sync" not in str(module)
