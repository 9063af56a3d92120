"""Note [The assembly that spills less] (attnc/backend/cubin.py): an sm_80 kernel whose
lanes share the diagonals (the build expects nvJitLink to spill it) takes the cubin of
nvJitLink and the ptxas binary, assembling the PTX as a whole program, that spills fewer
bytes, nvJitLink's at a tie: the same cubin whether ptxas ran beside nvJitLink or after
it; nvJitLink's where there is no ptxas, and for every other kernel."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from attnc.backend import cubin
from attnc.testing import build_with

pytestmark = pytest.mark.skipif(cubin.whole_program_ptxas() is None, reason="no ptxas binary")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = """.version 7.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [p];
  st.global.u32 [%rd1], 7;
  ret;
}
"""


@functools.lru_cache(maxsize=None)
def relative_bias_ptx() -> str:
    """T5's bias on sm_80, its lanes sharing the diagonals (the target's default): nvJitLink
    spills 1,720 bytes on it, ptxas as a whole program 16."""
    text = (EXAMPLES / "relative_bias.attn").read_text()
    return build_with(text, "relative_bias.attn", "sm_80", cubin=False).ptx


def assembled(ptx: str, monkeypatch, *, beside: bool, expected: bool = True) -> cubin.CubinResult:
    """The cubin of `ptx` for sm_80, its spills `expected`, ptxas run `beside` nvJitLink
    (a second core idle) or after it."""
    cubin._fewer_spills.cache_clear()
    monkeypatch.setattr(cubin, "idle_core", lambda: beside)
    try:
        return cubin.ptx_to_cubin(ptx, "sm_80", spills_expected=expected)
    finally:
        cubin._fewer_spills.cache_clear()


def test_a_kernel_that_nvjitlink_spills_takes_the_whole_programs_cubin(monkeypatch):
    ptx = relative_bias_ptx()
    linked = cubin._nvjitlink(ptx, "sm_80", True, cubin.default_options(ptx))
    assert cubin.spilled_bytes(linked) > 1000
    beside = assembled(ptx, monkeypatch, beside=True)
    after = assembled(ptx, monkeypatch, beside=False)
    assert cubin.spilled_bytes(beside) < 100 and beside.cubin != linked.cubin
    assert after.cubin == beside.cubin
    # the report is the cubin's own
    usage = cubin.resource_usage(ptx, "sm_80", spills_expected=True).values()
    assert not any(u.spill_stores > 100 for u in usage)
    # not expected to spill: nvJitLink's alone
    assert assembled(ptx, monkeypatch, beside=True, expected=False).cubin == linked.cubin


@pytest.mark.parametrize("beside", [True, False])
def test_a_kernel_that_nvjitlink_assembles_without_spills_keeps_its_cubin(monkeypatch, beside):
    linked = cubin._nvjitlink(SMALL, "sm_80", True, cubin.default_options(SMALL))
    assert cubin.spilled_bytes(linked) == 0
    assert assembled(SMALL, monkeypatch, beside=beside).cubin == linked.cubin


def test_without_ptxas_the_cubin_is_nvjitlinks(monkeypatch):
    ptx = relative_bias_ptx()
    monkeypatch.setattr(cubin, "whole_program_ptxas", lambda: None)
    linked = cubin._nvjitlink(ptx, "sm_80", True, cubin.default_options(ptx))
    assert assembled(ptx, monkeypatch, beside=True).cubin == linked.cubin


def test_the_lesser_of_two_is_nvjitlinks_at_a_tie():
    def result(name: str, stores: int, loads: int) -> cubin.CubinResult:
        log = (f"ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
               f"    8 bytes stack frame, {stores} bytes spill stores, {loads} bytes spill loads\n"
               f"ptxas info    : Used 255 registers\n")
        return cubin.CubinResult(name.encode(), log)

    assert cubin._lesser(result("linked", 8, 8), result("whole", 8, 8)).cubin == b"linked"
    assert cubin._lesser(result("linked", 8, 8), result("whole", 4, 8)).cubin == b"whole"
    assert cubin._lesser(result("linked", 4, 4), result("whole", 16, 0)).cubin == b"linked"


def test_the_build_runs_ptxas_beside_nvjitlink_where_the_lanes_share_the_diagonals(monkeypatch):
    asked = []
    real = cubin.ptx_to_cubin
    monkeypatch.setattr(cubin, "ptx_to_cubin", lambda ptx, arch, **kw: asked.append(kw) or real(ptx, arch, **kw))
    text = (EXAMPLES / "relative_bias.attn").read_text()
    for lanes in (True, False):
        build_with(text, "relative_bias.attn", "sm_80", lanes=lanes)
    # without attn-hoist the lowering shares the lanes as its default would (lane_values)
    from attnc.backend.lowering import build
    from attnc.driver import CompileOptions, compile_mlir
    from attnc.passes.pipelines import format_pipeline, target_pipeline

    unhoisted = format_pipeline([p for p in target_pipeline("sm_80") if p.name != "attn-hoist"])
    art = build(compile_mlir(text, "relative_bias.attn", CompileOptions(arch="sm_80", pass_pipeline=unhoisted)))
    assert "shfl.sync.idx" in art.ptx
    assert [kw.get("spills_expected") for kw in asked] == [True, False, True]
