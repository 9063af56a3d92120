"""Scheduling research through the plan passes (Note [The plan the lowerings follow] in
attnc/passes/lower_kernel.py): each plan of the GPU suite `schedules` (build_gpu_bundles'
SCHEDULES: K/V ring depths, one or two consumer warpgroups, ping-pong, a producer putting V
before K) is in the IR the lowering reads, and gives its own kernel."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools")]

import build_gpu_bundles as builder        # noqa: E402

pytest.importorskip("mlir")


def _compiled(arch: str, options: dict, user_passes: tuple[str, ...] = ()):
    from attnc.backend.lowering import build
    from attnc.driver import CompileOptions, compile_mlir

    source = builder.rewrite_example((ROOT / "examples" / "mha.attn").read_text(), "bf16", 128, 128)
    result = compile_mlir(source, "mha.attn", CompileOptions(
        arch=arch, pass_pipeline=builder.schedule_pipeline(arch, options, user_passes),
        load_passes=tuple(str(ROOT / p) for p in user_passes)))
    return str(result.module), build(result)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_plan_of_the_suite_has_its_own_kernel(arch):
    kernels = {}
    for target, tag, options, user_passes in builder.SCHEDULES:
        if target == arch:
            ir_text, art = _compiled(arch, options, user_passes)
            kernels[tag] = (ir_text, art)
    ptx = {tag: art.ptx for tag, (_, art) in kernels.items()}
    # each choice against its counterpart (nopingpong and consumers2 are the default plan)
    pairs = [("stages2", "stages3"), ("stages3", "stages4"), ("consumers1", "consumers2"),
             ("pingpong", "nopingpong"), ("v_before_k", "nopingpong"), ("pv_before_qk", "nopingpong"),
             ("pv_before_qk_turns", "pingpong"), ("waits_first", "nopingpong"), ("last_v_early", "pingpong"),
             ("coop", "nopingpong"), ("loads_after_gemms", "coop"), ("persistent", "nopingpong"),
             ("persistent_pingpong", "persistent"), ("persistent_pingpong", "pingpong"),
             ("persistent_linear", "persistent")]
    for a, b in pairs:
        if a in ptx and b in ptx:
            assert ptx[a] != ptx[b], f"{a} and {b} gave the same kernel"
    for tag, (ir_text, art) in kernels.items():
        spec = art.spec
        if tag.startswith("stages"):
            assert spec.stages == int(tag[-1])
            assert re.search(rf'name = "kv", producer = "\w+", space = "smem", stages = {tag[-1]} : i64', ir_text)
        if tag.startswith("persistent"):       # Note [The walk over query blocks]
            assert spec.persistent_ctas and ir_text.count('"attn.walk_rounds"') == 3
        if tag.startswith("consumers"):
            consumers = int(tag[-1])
            assert ir_text.count('"attn.role"()') == 1 + consumers
            assert spec.warp_specialized and spec.consumer_warpgroups == consumers
        if tag.endswith("pingpong"):
            assert spec.pingpong is (tag != "nopingpong")
            assert ("pingpong = true" in ir_text) is spec.pingpong
        if tag.startswith("pv_before_qk"):    # S landed with the P.V issued before it
            assert "wgmma.wait_group.sync.aligned 1;" not in art.ptx and spec.pingpong is tag.endswith("turns")
        if tag == "v_before_k":
            assert spec.load_steps.trip[0].what == "v"
        if tag == "waits_first":        # both empty slots waited for before either write
            assert [(op.name, op.what) for op in spec.load_steps.trip[:2]] == [("wait", "k"), ("wait", "v")]
        if tag == "last_v_early":       # V waited for before the P.V in flight lands
            assert [op.name for op in spec.wgmma_steps.last[:3]] == ["wait", "read", "land_o"]
        if tag in ("coop", "loads_after_gemms"):        # the loads before the GEMMs, or after them
            assert not spec.warp_specialized and ir_text.count('"attn.role"()') == 1
            names = [op.name for op in spec.coop_steps.loops[0][1]]
            assert (names.index("load") > names.index("mma")) is (tag == "loads_after_gemms")
