"""The sm_90a kernel with a producer warpgroup (sm90a_ws.py, Note [Producer warpgroup])
without a GPU, built from `.attn` sources through the pipeline: when it is the default,
what its PTX synchronizes with, that ptxas keeps its register split (Note [Whole-program
assembly] in cubin.py), and the options. Its numerics run on a GPU (tests/gpu with
--archs sm_90a bundles: every head-dim-128 example and property variant takes it)."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from mlir import ir

from attnc.backend import cubin
from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir.roles import PERSISTENT, attrs_of, name_of, role_ops, warp_specialize_of
from attnc.passes.pipelines import pipeline_with_options
from attnc.schedule.recipes import consumer_registers, producer_registers
from attnc.testing import build_with, variant_source
from tests.backend.test_sm90 import assembled, built

TILE = dict(block_m=128, block_n=128, stages=3)     # the default tile of head dim 128


def source(d: int = 128, d_v: int | None = None, mask: str = "j <= i", lse: bool = False) -> str:
    """A bf16 variant with KV heads of their own (HKV), so that every dim is a parameter of its own."""
    d_v = d_v or d
    return (f"attention ws {{\n  q: bf16[B, H, M, {d}]\n  k: bf16[B, HKV, N, {d}]\n  v: bf16[B, HKV, N, {d_v}]\n"
            f"  mask_mod(b, h, i, j) = {mask}\n  out o: bf16[B, H, M, {d_v}]\n"
            + ("  out lse: f32[B, H, M]\n" if lse else "") + "}\n")


@functools.lru_cache(maxsize=None)
def planned(text: str, arch: str = "sm_90a", **options):
    """The attn.kernel of `arch`'s pipeline with `options` (no PTX), and its CompileResult."""
    compile_options = CompileOptions(arch=arch, pass_pipeline=pipeline_with_options(arch, options))
    result = compile_mlir(text, "ws.attn", compile_options)
    return attention_ops(result.module)[0], result


def roles(kernel) -> dict[str, int]:
    """{role: its warps} of the kernel's plan."""
    return {name_of(r): len(ir.ArrayAttr(r.attributes["warps"])) for r in role_ops(kernel)}


def persistent(kernel) -> bool:
    return bool(attrs_of(warp_specialize_of(kernel)).get(PERSISTENT, False))


@pytest.mark.parametrize("d, d_v, options, expected", [
    (128, None, TILE, True),                                    # two consumer warpgroups, head dim 128
    (128, 64, TILE, True),                                      # the larger head dim is 128
    (128, None, dict(TILE, stages=2), True),
    (64, None, dict(TILE, block_m=64), False),                  # one warpgroup: several CTAs per SM instead
    (128, None, dict(TILE, block_m=64, block_n=64), False),     # documents, windows at head dim 128
    (64, None, TILE, False),                                    # 128-row tiles at head dim 64: measured slower
    (96, None, TILE, False),                                    # not measured
    (128, None, dict(TILE, producer="false"), False),           # the option, both ways
    (64, None, dict(TILE, block_m=64, producer="true"), True),
])
def test_when_the_producer_warpgroup_is_the_default(d, d_v, options, expected):
    text = source(d, d_v)
    kernel, _ = planned(text, **options)
    warps = roles(kernel)
    assert ("producer" in warps) is expected
    assert 32 * sum(warps.values()) == 128 * (options["block_m"] // 64) + (128 if expected else 0)
    assert "producer" not in roles(planned(text, "sm_80")[0])


def test_ptx_synchronizes_through_mbarriers_only():
    """Producer and consumers meet at mbarriers: Q's, and per slot K's and V's full
    (128 producer arrivals, by their cp.async) and empty (one per consumer warp)
    barriers. No cp.async group waits, and one CTA barrier: after the barriers' init."""
    stages = TILE["stages"]
    text, _ = assembled(source(), **TILE)
    assert ".maxntid 384, 1, 1" in text and ".minnctapersm 1" in text
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", text)
    assert sorted(inits) == sorted(["128"] * (1 + 2 * stages) + ["8"] * (2 * stages))
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
    art = built(source(lse=True), **TILE)
    log = cubin.ptx_to_cubin(art.ptx, "sm_90a", verbose=True).info_log
    usage = cubin.parse_resource_usage(log)[art.manifest["kernels"][-1]["symbol"]]
    assert usage.registers == 168 and not usage.spills, usage
    assert "C7504" not in log and "serialized" not in log, log
    linked = cubin._assemble(art.ptx, "sm_90a", True, ("-O3",)).info_log
    assert "'setmaxnreg' ignored" in linked


def test_pingpong_takes_turns_on_two_named_barriers():
    """Warpgroup 1 arrives on warpgroup 0's barrier once at the start; every GEMM issue
    is between a sync on the warpgroup's own barrier and an arrival on the other's."""
    text, log = assembled(source(), **TILE, pingpong="true")
    for index in (1, 2):
        assert f"bar.sync {index}, 256;" in text and f"bar.arrive {index}, 256;" in text
    assert "serialized" not in log


@pytest.mark.parametrize("arch, d, options, message", [
    ("sm_80", 128, dict(producer="true"), ("producer=1: only sm_90a has a producer",)),
    ("sm_90a", 64, dict(block_m=64, pingpong="true"),
     ("pingpong=1: the consumers take turns when there are two", "consumers=1, producer=0")),
    ("sm_90a", 128, dict(producer="false", pingpong="true"),
     ("pingpong=1: the consumers take turns when there are two fed by the producer", "consumers=2, producer=0")),
    # Two query blocks per CTA are sm_80's cooperative kernel's (Note [Two query blocks in
    # the IR] in attnc/schedule/walk.py), with a producer or without.
    ("sm_90a", 128, dict(q_blocks_per_cta=2, producer="true"), ("two query blocks per CTA are sm_80's",)),
    ("sm_90a", 128, dict(q_blocks_per_cta=2, producer="false"), ("two query blocks per CTA are sm_80's",
                                                                 "sm_90a's CTAs run one")),
    ("sm_90a", 128, dict(stages=1, producer="true"), ("stages=1 is not possible on sm_90a",)),
])
def test_producer_options_are_checked(arch, d, options, message):
    with pytest.raises(AttncError) as refused:
        planned(source(d), arch, **options)
    for words in message:
        assert words in str(refused.value)


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
    text, _ = assembled(source(), **TILE)
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


@pytest.mark.parametrize("text, options, expected", [
    (WINDOW, {}, True),                                 # a band in the producer warpgroup's kernel
    (source(), TILE, False),                            # causal: measured slower
    (WINDOW, dict(producer="false"), False),            # the cooperative kernel has no loop
    (WINDOW, dict(persistent="false"), False),          # the option, both ways
    (source(), dict(TILE, persistent="true"), True),
])
def test_when_ctas_are_persistent(text, options, expected):
    assert persistent(planned(text, **options)[0]) is expected


def test_persistent_needs_the_producer_warpgroup():
    with pytest.raises(AttncError, match="persistent CTAs are the producer warpgroup's kernel"):
        planned(source(), **TILE, persistent="true", producer="false")


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
    stages = TILE["stages"]
    art = built(source(), **TILE, persistent="true")
    text, log = assembled(source(), **TILE, persistent="true")
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", text)
    assert sorted(inits) == sorted(["128"] * (1 + 2 * stages) + ["8"] * (1 + 2 * stages))
    assert len(re.findall(r"\bbar\.sync\s+0;", text)) == 1 and "cp.async.commit_group" not in text
    assert "setmaxnreg.dec.sync.aligned.u32 24;" in text and "setmaxnreg.inc.sync.aligned.u32 240;" in text
    assert "serialized" not in log
    kernel = art.manifest["kernels"][-1]
    assert kernel["grid"] == [[["min_sms", ["cdiv", "M", 128], "H", "B"]], [1], [1]]
    assert [p["name"] for p in kernel["params"] if p["kind"] == "dim"] == ["M", "N", "H", "HKV", "B"]


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
