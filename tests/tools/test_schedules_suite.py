"""Scheduling research through the plan passes (Note [The plan the lowerings follow] in
attnc/passes/lower_kernel.py): each plan of the GPU suite `schedules` (build_gpu_bundles'
SCHEDULES: K/V ring depths, one to three consumer warpgroups, ping-pong, a producer putting V
before K, the unmasked loops' own exp2_fma) is in the IR the lowering reads, and gives its
own kernel."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools")]

import build_gpu_bundles as builder        # noqa: E402

pytest.importorskip("mlir")

from attnc.ir import attention_ops                  # noqa: E402
from attnc.ir import roles as R                     # noqa: E402
from attnc.passes.tile_program import KV_LOOP       # noqa: E402

_SYNC = {R.MBARRIER_WAIT: "wait", R.MBARRIER_ARRIVE: "arrive", R.CP_ASYNC_MBARRIER_ARRIVE: "arrive"}


def _compiled(arch: str, options: dict, user_passes: tuple[str, ...] = ()):
    from attnc.backend.lowering import build
    from attnc.driver import CompileOptions, compile_mlir

    source = builder.rewrite_example((ROOT / "examples" / "mha.attn").read_text(), "bf16", 128, 128)
    result = compile_mlir(source, "mha.attn", CompileOptions(
        arch=arch, pass_pipeline=builder.schedule_pipeline(arch, options, user_passes),
        load_passes=tuple(str(ROOT / p) for p in user_passes)))
    return str(result.module), build(result, cubin=False)


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
             ("consumers2", "consumers3"), ("pingpong", "nopingpong"), ("v_before_k", "nopingpong"), ("pv_before_qk", "nopingpong"),
             ("pv_before_qk_turns", "pingpong"), ("waits_first", "nopingpong"), ("last_v_early", "pingpong"),
             ("coop", "nopingpong"), ("loads_after_gemms", "coop"), ("persistent", "nopingpong"),
             ("persistent_pingpong", "persistent"), ("persistent_pingpong", "pingpong"),
             ("persistent_linear", "persistent")]
    for a, b in pairs:
        if a in ptx and b in ptx:
            assert ptx[a] != ptx[b], f"{a} and {b} gave the same kernel"
    for tag, (ir_text, art) in kernels.items():
        chosen = art.manifest["specialization"]
        kernel = attention_ops(art.result.module)[0]
        if tag.startswith("stages"):
            assert chosen["stages"] == int(tag[-1])
            assert re.search(rf'name = "kv", producer = "\w+", space = "smem", stages = {tag[-1]} : i64', ir_text)
        if tag.startswith("persistent"):       # Note [The walk over query blocks]
            assert chosen["persistent"] and ir_text.count('"attn.walk_rounds"') == 3
        if tag.startswith("consumers"):
            consumers = int(tag[-1])
            assert ir_text.count('"attn.role"()') == 1 + consumers
            assert chosen["producer_warpgroup"]
            assert art.manifest["kernels"][-1]["block"] == [128 * (1 + consumers), 1, 1]
            if consumers == 3:          # the producer's 32 registers leave the consumers 160
                assert "setmaxnreg.dec.sync.aligned.u32 32;" in art.ptx
                assert "setmaxnreg.inc.sync.aligned.u32 160;" in art.ptx
        if tag.endswith("pingpong"):
            assert chosen["pingpong"] is (tag != "nopingpong")
            assert ("pingpong = true" in ir_text) is chosen["pingpong"]
        if tag.startswith("pv_before_qk"):    # S landed with the P.V issued before it
            assert "wgmma.wait_group.sync.aligned 1;" not in art.ptx and chosen["pingpong"] is tag.endswith("turns")
        if tag in ("v_before_k", "waits_first"):
            puts = [step for step in _steps(kernel, "producer")[0] if not step.startswith("load")]
            if tag == "v_before_k":
                assert puts[:3] == ["wait v", "write v", "arrive v"]
            else:                       # both empty slots waited for before either write
                assert puts[:2] == ["wait k", "wait v"]
        if tag == "last_v_early":       # V waited for before the P.V in flight lands
            assert _steps(kernel, "consumer0")[1][:3] == ["wait v", "read v", "land o"]
        if tag in ("coop", "loads_after_gemms"):        # the loads before the GEMMs, or after them
            assert not chosen["producer_warpgroup"] and ir_text.count('"attn.role"()') == 1
            names = [step.split()[0] for step in _steps(kernel, "compute")[0]]
            assert (names.index("load") > names.index("mma")) is (tag == "loads_after_gemms")
        if tag == "exp2_fma_unmasked":  # mha has no mask op: every loop's softmax takes k = 4; sm_90a's
            # first step, before the loops, keeps the default 0
            assert chosen["exp2_fma"] == (4 if arch == "sm_80" else [0, 4]) and "exp2_fma = 4 : i64" in ir_text


def _steps(kernel, role: str) -> tuple[list[str], list[str]]:
    """The synchronization, loads and GEMMs of `role`, each with its tile: in a trip of
    its first KV loop, and after its last one. `land o` is a wait for the loop's O."""
    block = R.role_block(next(r for r in R.role_ops(kernel) if R.name_of(r) == role))
    loops = [op for op in R.ops_in(block, ("scf.for",)) if KV_LOOP in op.attributes]
    after = list(loops[-1].block.operations)
    after = after[[op.operation for op in after].index(loops[-1]) + 1:]
    return _named(loops[0].regions[0].blocks[0].operations), _named(after)


def _named(ops) -> list[str]:
    out = []
    for op in ops:
        op = op.operation
        attrs = R.attrs_of(op)
        if op.name in _SYNC:
            out.append(f"{_SYNC[op.name]} {R.attrs_of(op.operands[0].owner)['tile']}")
        elif op.name in (R.SLOT_WRITE, R.SLOT_READ):
            out.append(f"{op.name.removeprefix('attn.slot_')} {attrs['tile']}")
        elif op.name == R.MMA_WAIT:
            out.append("land o" if getattr(op.operands[0].owner, "name", "") == "scf.for" else "land")
        elif op.name in ("attn.load", "attn.mma"):
            out.append(f"{op.name.removeprefix('attn.')} {attrs.get('operand', attrs.get('kind'))}")
    return out
