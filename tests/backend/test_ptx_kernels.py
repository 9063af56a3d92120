"""Note [Kernels apart] in attnc/backend/ptx_kernels.py: a module's kernels lowered apart,
one or two at a time, on one thread or two, give the PTX of the module lowered whole,
byte for byte -- also where only some kernels use a global."""
from __future__ import annotations

import pytest
from mlir import ir

from attnc.backend import ptx
from attnc.backend.ptx_kernels import Kernels, joined_head, split_ptx
from tests.backend.test_register_bound import counting_lowerings

GLOBAL = "llvm.mlir.global external @NAME() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>"


def kernel(name: str, smem: str | None = None) -> str:
    """A kernel with a loop (its labels number the kernel's position); it stores to the
    shared-memory global `smem` where one is named."""
    store = (f"%s = llvm.mlir.addressof @{smem} : !llvm.ptr<3>\n llvm.store %r, %s : f32, !llvm.ptr<3>"
             if smem else "")
    return f"""gpu.func @{name}(%p: !llvm.ptr<1>, %x: f32, %n: i32) kernel {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %nn = arith.index_cast %n : i32 to index
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %x) -> (f32) {{
    %e = math.exp %acc : f32
    scf.yield %e : f32
  }}
  llvm.store %r, %p : f32, !llvm.ptr<1>
  {store}
  gpu.return }}"""


def module(*kernels: str, globals_: tuple[str, ...] = ("smem",)) -> ir.Module:
    body = "\n".join([GLOBAL.replace("NAME", g) for g in globals_] + list(kernels))
    return ir.Module.parse(f"module attributes {{gpu.container_module}} {{ gpu.module @m {{ {body} }} }}")


THREE = (kernel("a"), kernel("b", smem="smem"), kernel("c"))


def whole(*kernels: str, **kw) -> str:
    """The module lowered as one, as LLVM prints it."""
    work = module(*kernels, **kw)
    ptx.rewrite_for_nvptx(work)
    return ptx._lower(work, ptx.PtxOptions("sm_80"))


def on_cores(monkeypatch, cores: int) -> None:
    monkeypatch.setattr(ptx.os, "sched_getaffinity", lambda pid: set(range(cores)))


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_kernels_lowered_apart_give_the_whole_modules_ptx(monkeypatch, cores):
    with ir.Context():
        expected = whole(*THREE)
        on_cores(monkeypatch, cores)
        calls = counting_lowerings(monkeypatch)
        assert ptx.to_ptx(module(*THREE), "sm_80") == expected
        assert len(calls) == min(cores, 3)


def test_the_head_is_the_one_declaring_every_global_a_kernel_uses():
    with ir.Context():
        expected = whole(*THREE)
        rewritten = module(*THREE)
        ptx.rewrite_for_nvptx(rewritten)
        kernels = Kernels.of(rewritten)
        heads = []
        for group in ([0, 2], [1]):
            head, entries = split_ptx(ptx._lower(kernels.part(group), ptx.PtxOptions("sm_80")),
                                      kernels.names[:group[-1] + 1])
            heads.append(head)
            assert all(entries[k] in expected for k in group)
        assert ".extern .shared" in heads[1] and ".extern .shared" not in heads[0]
        assert joined_head(heads) == heads[1] and expected.startswith(heads[1])


def test_parts_whose_heads_hold_no_whole_one_are_lowered_as_a_whole(monkeypatch):
    """Two globals, each used by one kernel: neither part's head declares both."""
    two = (kernel("a", smem="g1"), kernel("b", smem="g2"))
    with ir.Context():
        expected = whole(*two, globals_=("g1", "g2"))
        on_cores(monkeypatch, 2)
        calls = counting_lowerings(monkeypatch)
        assert ptx.to_ptx(module(*two, globals_=("g1", "g2")), "sm_80") == expected
        assert len(calls) == 3                      # two parts, then the whole module


def test_a_module_that_does_not_lower_fails_as_it_would_whole(monkeypatch):
    bad = kernel("b").replace("math.exp %acc : f32", "math.exp %acc : f32\n %d = math.tanh %x : f32")
    bad = bad.replace("%n: i32) kernel {", "%n: i32, %w: f64) kernel {\n %t = math.tanh %w : f64")
    with ir.Context():
        with pytest.raises(ptx.PtxError) as whole_error:
            whole(THREE[0], bad)
        on_cores(monkeypatch, 2)
        with pytest.raises(ptx.PtxError) as apart_error:
            ptx.to_ptx(module(THREE[0], bad), "sm_80")
    assert str(apart_error.value) == str(whole_error.value)


def test_split_ptx_refuses_ptx_of_other_kernels():
    with ir.Context():
        text = whole(*THREE)
    head, entries = split_ptx(text, ["a", "b", "c"])
    assert head + "".join(entries) == text and entries[1].startswith("\t// .globl\tb\n")
    assert split_ptx(text, ["a", "b"]) is None and split_ptx(text, ["b", "a", "c"]) is None
