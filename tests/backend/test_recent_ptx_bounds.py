"""Note [Recent PTX] in attnc/backend/ptx.py, for a trial whose kernel spilled: the module
built again without the register bound gets the trial's PTX less its `.minnctapersm`
line -- the PTX that lowering it afresh gives, byte for byte -- and LLVM runs once; any
other change of bounds is lowered afresh."""
from __future__ import annotations

from mlir import ir

from attnc.backend import ptx
from tests.backend.test_recent_ptx import counting_lowerings

KERNEL = """
module attributes {gpu.container_module} { gpu.module @m { gpu.func @k(%p: !llvm.ptr<1>, %x: f32) kernel BOUND {
  %a = math.exp %x : f32
  %b = arith.mulf %a, %x : f32
  llvm.store %b, %p : f32, !llvm.ptr<1>
  gpu.return } } }
"""


def module(bound: int | None) -> ir.Module:
    attrs = "" if bound is None else f"attributes {{nvvm.minctasm = {bound} : i32}}"
    return ir.Module.parse(KERNEL.replace("BOUND", attrs))


def test_the_unbounded_kernel_gets_the_trials_ptx_less_its_bound(monkeypatch):
    with ir.Context():
        fresh = ptx.to_ptx(module(None), "sm_90a")
        calls = counting_lowerings(monkeypatch)
        trial = ptx.to_ptx(module(3), "sm_90a", keep=True)
        assert ".minnctapersm 3\n" in trial and ".minnctapersm" not in fresh
        assert ptx.to_ptx(module(None), "sm_90a", in_place=True) == fresh
    assert calls == ["sm_90a"]


def test_another_bound_is_lowered_afresh(monkeypatch):
    with ir.Context():
        calls = counting_lowerings(monkeypatch)
        ptx.to_ptx(module(3), "sm_90a", keep=True)
        assert ".minnctapersm 2\n" in ptx.to_ptx(module(2), "sm_90a")
        assert len(calls) == 2
        calls = counting_lowerings(monkeypatch)
        ptx.to_ptx(module(None), "sm_90a", keep=True)
        assert ".minnctapersm 3\n" in ptx.to_ptx(module(3), "sm_90a")
        assert len(calls) == 2


def test_the_digest_leaves_the_module_as_it_was(monkeypatch):
    counting_lowerings(monkeypatch)
    with ir.Context():
        bounded = module(3)
        before = str(bounded)
        ptx.to_ptx(bounded, "sm_90a", keep=True)
        assert str(bounded) == before


def bounded_and_unbounded_ptx() -> tuple[str, str]:
    with ir.Context():
        return ptx.to_ptx(module(3), "sm_90a"), ptx.to_ptx(module(None), "sm_90a")


def counting_assemblies(monkeypatch, cores: int, ready: int = 1) -> list:
    """Note [Assembled beside the trial] in attnc/backend/cubin.py, on `cores` cores with
    `ready` tasks ready to run (this one among them)."""
    from attnc.backend import cubin
    calls = []
    assemble = cubin._assemble
    monkeypatch.setattr(cubin, "_assemble", lambda ptx, *rest: calls.append(ptx) or assemble(ptx, *rest))
    monkeypatch.setattr(cubin, "_beside", {})
    monkeypatch.setattr(cubin.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(cubin, "_ready_tasks", lambda: ready)
    return calls


def test_the_unbounded_kernel_is_assembled_beside_the_trials(monkeypatch):
    from attnc.backend import cubin
    bounded, unbounded = bounded_and_unbounded_ptx()
    assert ptx.without_bounds(bounded) == unbounded
    calls = counting_assemblies(monkeypatch, cores=2)
    cubin.resource_usage(bounded, "sm_90a")
    got = cubin.ptx_to_cubin(unbounded, "sm_90a")
    assert calls == [bounded]                                   # the unbounded one came from the other thread
    assert got.cubin == cubin._nvjitlink(unbounded, "sm_90a", True, ("-O3",)).cubin


def test_one_core_a_busy_machine_or_no_bound_assembles_nothing_beside(monkeypatch):
    from attnc.backend import cubin
    bounded, unbounded = bounded_and_unbounded_ptx()
    counting_assemblies(monkeypatch, cores=1)
    cubin.resource_usage(bounded, "sm_90a")
    assert cubin._beside == {}
    counting_assemblies(monkeypatch, cores=2, ready=2)
    cubin.resource_usage(bounded, "sm_90a")
    assert cubin._beside == {}
    counting_assemblies(monkeypatch, cores=2)
    cubin.resource_usage(unbounded, "sm_90a")
    assert cubin._beside == {}
