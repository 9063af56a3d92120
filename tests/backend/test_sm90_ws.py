"""The sm_90a kernel with a producer warpgroup (sm90a_ws.py, Note [Producer warpgroup])
without a GPU: when it is the default, what its PTX synchronizes with, that ptxas keeps
its register split (Note [Whole-program assembly] in cubin.py), and the options. Its
numerics run on a GPU (tests/gpu with --archs sm_90a bundles: every head-dim-128
example and property variant takes it)."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from mlir import ir

from attnc.backend import cubin, ptx
from attnc.backend.kernel_abi import kernel_abi
from attnc.backend.kernel_module import build_kernel_module
from attnc.backend.kernel_spec import ForwardSpec
from attnc.backend.spec_checks import SpecError
from attnc.schedule.recipes import consumer_registers, producer_registers
from attnc.testing import build_with, variant_source

SYMBOL = "attnc_ws_test"


def spec(d=128, block_m=128, block_n=128, **kw) -> ForwardSpec:
    return ForwardSpec(dtype="bf16", head_dim_qk=d, head_dim_v=kw.pop("d_v", d), block_m=block_m,
                          block_n=block_n, num_warps=block_m // 16, stages=kw.pop("stages", 3),
                          target=kw.pop("target", "sm_90a"), symbol=SYMBOL, mask=kw.pop("mask", "causal"),
                          **kw)


@functools.lru_cache(maxsize=None)
def compiled(s: ForwardSpec) -> tuple[str, str]:
    with ir.Context():
        module, _ = build_kernel_module(s.check())
        text = ptx.to_ptx(module, "sm_90a")
    return text, cubin.ptx_to_cubin(text, "sm_90a", verbose=True).info_log


@pytest.mark.parametrize("kw, expected", [
    (dict(), True),                                   # two consumer warpgroups, head dim 128
    (dict(d=128, d_v=64), True),                      # the larger head dim is 128
    (dict(stages=2), True),
    (dict(d=64, block_m=64), False),                  # one warpgroup: several CTAs per SM instead
    (dict(d=128, block_m=64, block_n=64), False),     # documents, windows at head dim 128
    (dict(d=64), False),                              # 128-row tiles at head dim 64: measured slower
    (dict(d=96), False),                              # not measured
    (dict(producer_warpgroup=False), False),          # the option, both ways
    (dict(d=64, block_m=64, producer_warpgroup=True), True),
])
def test_when_the_producer_warpgroup_is_the_default(kw, expected):
    s = spec(**kw)
    assert s.warp_specialized is expected
    assert s.threads == 32 * s.num_warps + (128 if expected else 0)
    assert spec(**{**kw, "target": "sm_80", "producer_warpgroup": None}).warp_specialized is False


def test_ptx_synchronizes_through_mbarriers_only():
    """Producer and consumers meet at mbarriers: Q's, and per slot K's and V's full
    (128 producer arrivals, by their cp.async) and empty (one per consumer warp)
    barriers. No cp.async group waits, and one CTA barrier: after the barriers' init."""
    s = spec()
    text, _ = compiled(s)
    assert ".maxntid 384, 1, 1" in text and ".minnctapersm 1" in text
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", text)
    assert sorted(inits) == sorted(["128"] * (1 + 2 * s.stages) + ["8"] * (2 * s.stages))
    assert "cp.async.mbarrier.arrive.noinc.shared::cta.b64" in text
    assert "mbarrier.try_wait.parity.shared::cta.b64" in text
    assert "mbarrier.arrive.shared::cta.b64" in text
    # No group waits in the steps: only the producer's last wait for all its copies.
    assert len(re.findall(r"cp\.async\.wait_(?:all|group\s+0);", text)) == 1
    assert "cp.async.commit_group" not in text
    assert len(re.findall(r"\bbar\.sync\s+0;", text)) == 1 and "bar.arrive" not in text
    # The register split: the producer gives registers up, the consumers take them.
    assert "setmaxnreg.dec.sync.aligned.u32 24;" in text
    assert "setmaxnreg.inc.sync.aligned.u32 240;" in text
    # The consumers read what cp.async wrote through wgmma (the async proxy).
    assert "fence.proxy.async.shared::cta;" in text


def test_whole_program_assembly_keeps_the_register_split():
    """Note [Whole-program assembly]: ptxas keeps setmaxnreg, so the consumers neither
    spill nor have their wgmma serialized; nvJitLink alone drops it (C7504), which is why
    the kernel is not assembled by nvJitLink. If a later nvJitLink keeps it, the second
    half fails: then the ptxas detour can go."""
    if cubin.whole_program_ptxas() is None:
        pytest.skip("no ptxas binary (the nvidia-cuda-nvcc wheel is a dependency)")
    text, log = compiled(spec(mask="causal", with_lse=True))
    usage = cubin.parse_resource_usage(log)[SYMBOL]
    assert usage.registers == 168 and not usage.spills, usage
    assert "C7504" not in log and "serialized" not in log, log
    linked = cubin._assemble(text, "sm_90a", True, ("-O3",)).info_log
    assert "'setmaxnreg' ignored" in linked


def test_pingpong_takes_turns_on_two_named_barriers():
    """Warpgroup 1 arrives on warpgroup 0's barrier once at the start; every GEMM issue
    is between a sync on the warpgroup's own barrier and an arrival on the other's."""
    text, log = compiled(spec(pingpong=True))
    for index in (1, 2):
        assert f"bar.sync {index}, 256;" in text and f"bar.arrive {index}, 256;" in text
    assert "serialized" not in log


@pytest.mark.parametrize("kw, message", [
    (dict(target="sm_80", producer_warpgroup=True), "not sm_80's"),
    (dict(d=64, block_m=64, pingpong=True), "two consumer warpgroups"),
    (dict(producer_warpgroup=False, pingpong=True), "needs the producer warpgroup"),
    (dict(q_blocks_per_cta=2, producer_warpgroup=True), "one query block"),
    (dict(stages=1, producer_warpgroup=True), "at least two K/V stages"),
])
def test_producer_specs_are_checked(kw, message):
    """(Where the default would break one of these rules, it is off: q_blocks_per_cta=2
    builds the cooperative kernel.)"""
    with pytest.raises(SpecError, match=re.escape(message)):
        spec(**kw).check()


SOURCE = variant_source("ws", 128, score_mod="30.0 * tanh(s / 30.0)")


@pytest.mark.parametrize("options, producer, pingpong", [
    ({}, True, False),
    ({"producer": "false"}, False, False),
    ({"pingpong": "true"}, True, True),
])
def test_plan_options_reach_the_manifest(options, producer, pingpong):
    """attn-warp-specialize's producer and pingpong: the plan's roles, which the lowering follows."""
    art = build_with(SOURCE, "ws.attn", "sm_90a", **options)
    sp = art.manifest["specialization"]
    assert (sp["producer_warpgroup"], sp["pingpong"]) == (producer, pingpong)
    assert art.manifest["kernels"][0]["block"] == [384 if producer else 256, 1, 1]
    assert ("setmaxnreg" in art.ptx) is producer


def test_without_a_ptxas_binary_the_kernel_still_assembles_and_says_why(monkeypatch):
    """Note [Whole-program assembly]: with no ptxas to be found, nvJitLink assembles the
    PTX (setmaxnreg dropped: correct, but it spills) and a RuntimeWarning says so."""
    text, _ = compiled(spec())
    monkeypatch.setattr(cubin, "whole_program_ptxas", lambda: None)
    cubin._assemble_whole_program.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="setmaxnreg"):
            result = cubin.ptx_to_cubin(text, "sm_90a")
    finally:
        cubin._assemble_whole_program.cache_clear()
    assert result.cubin and "'setmaxnreg' ignored" in result.info_log


# ------------------------------------------------------------ Note [Persistent CTAs]

WINDOW = (Path(__file__).resolve().parents[2] / "examples" / "sliding_window.attn").read_text()


def built_with(source: str, **options):
    return build_with(source, "p.attn", "sm_90a", **options)


@pytest.mark.parametrize("kw, expected", [
    (dict(banded=True), True),                              # a band in the producer warpgroup's kernel
    (dict(), False),                                        # causal: measured slower
    (dict(banded=True, producer_warpgroup=False), False),   # the cooperative kernel has no loop
    (dict(banded=True, persistent=False), False),           # the option, both ways
    (dict(persistent=True), True),
])
def test_when_ctas_are_persistent(kw, expected):
    assert spec(**kw).check().persistent_ctas is expected


def test_persistent_needs_the_producer_warpgroup():
    with pytest.raises(SpecError, match="persistent CTAs are the producer warpgroup's kernel"):
        spec(persistent=True, producer_warpgroup=False).check()


def test_the_consumers_ask_for_no_more_registers_than_the_producer_frees():
    """setmaxnreg.inc waits until the CTA's pool holds the registers: the consumers'
    share is what the producer gives back of the launch's (ptxas's count at launch, 168
    for 384 threads), else the kernel hangs."""
    for groups in (1, 2, 3):
        threads = 128 * (1 + groups)
        at_launch = 65536 // threads // 8 * 8
        wanted, kept = consumer_registers(groups), producer_registers(groups)
        assert wanted % 8 == 0 and kept % 8 == 0 and 24 <= kept < at_launch
        assert kept * 128 + wanted * 128 * groups <= at_launch * threads
    assert (consumer_registers(2), producer_registers(2)) == (240, 24)
    assert (consumer_registers(3), producer_registers(3)) == (160, 32)


def test_persistent_kernel_loops_over_blocks_on_the_same_barriers():
    """One more mbarrier (q_empty, one arrival per consumer warp); still one CTA barrier,
    after the init; the grid is at most one CTA per SM, and the kernel takes B to count
    the blocks. ptxas keeps the register split without spills."""
    s = spec(mask="causal", persistent=True)
    text, log = compiled(s)
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", text)
    assert sorted(inits) == sorted(["128"] * (1 + 2 * s.stages) + ["8"] * (1 + 2 * s.stages))
    assert len(re.findall(r"\bbar\.sync\s+0;", text)) == 1 and "cp.async.commit_group" not in text
    assert "setmaxnreg.dec.sync.aligned.u32 24;" in text and "setmaxnreg.inc.sync.aligned.u32 240;" in text
    assert "serialized" not in log
    abi = kernel_abi(s)
    assert abi.grid == ((["min_sms", ["cdiv", "M", 128], "H", "B"],), (1,), (1,))
    assert [p["name"] for p in abi.params if p["kind"] == "dim"] == ["M", "N", "H", "HKV", "B"]


def test_a_window_at_head_dim_128_is_persistent_by_default():
    """The sliding-window example: 128x128 tiles, the producer warpgroup, persistent CTAs
    (the manifest's grid and specialization), no spills; the option turns it off."""
    art = built_with(WINDOW)
    sp, kernel = art.manifest["specialization"], art.manifest["kernels"][0]
    assert (sp["block_m"], sp["block_n"], sp["producer_warpgroup"], sp["persistent"]) == (128, 128, True, True)
    assert kernel["grid"][0][0][0] == "min_sms" and kernel["grid"][1:] == [[1], [1]]
    if cubin.whole_program_ptxas() is not None:
        usage = cubin.parse_resource_usage(cubin.ptx_to_cubin(art.ptx, "sm_90a", verbose=True).info_log)
        assert not any(u.spills for u in usage.values()), usage
    off = built_with(WINDOW, persistent="false").manifest
    assert off["specialization"]["persistent"] is False and off["kernels"][0]["grid"][1] == ["H"]


def _stores_under_a_gemm(ptx: str) -> int:
    """wgmma groups (commit .. next wait) with global stores issued while they run."""
    groups = [g.split("wgmma.wait_group")[0] for g in ptx.split("wgmma.commit_group")[1:]]
    return sum("st.global" in g for g in groups)


def test_persistent_consumers_store_o_under_the_next_blocks_first_qk():
    """Note [The next block's first QK^T]: the persistent window kernel stores a block's
    O between issuing the next block's first QK^T and waiting for it; the kernel without
    persistent CTAs has no store under a GEMM. The rotation keeps ptxas's register split
    (the window test above: no spills), and ptxas serializes no wgmma."""
    assert _stores_under_a_gemm(built_with(WINDOW).ptx) == 1
    assert _stores_under_a_gemm(built_with(WINDOW, persistent="false").ptx) == 0
    if cubin.whole_program_ptxas() is not None:
        log = cubin.ptx_to_cubin(built_with(WINDOW).ptx, "sm_90a", verbose=True).info_log
        assert "serialized" not in log, log
