"""sm_90a kernels whose overlapped consumer trips were edited at L5 and built op by op
(Note [Overlapped steps op by op] in attnc/backend/wgmma_steps.py), run in the PTX
emulator against attnc.reference at a small ragged shape, as tests/sim/test_steps_sim.py
runs sm_80's: P.V issued before QK^T with S landed at pending 0
(examples/passes/pv_before_qk.py), with and without ping-pong; the producer's trips
waiting for both slots before writing either; the last P.V waiting for V before it
lands the P.V in flight. Zero race or protocol reports are allowed."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

import attnc
from attnc.ir import attention_ops
from attnc.ir import roles as R
from attnc.passes import Pass, register
from attnc.passes.pipelines import format_pipeline, target_pipeline
from attnc.passes.tile_program import KV_LOOP
from tests.sim.test_steps_sim import _ptx, check_against_reference

ROOT = Path(__file__).resolve().parents[2]
PV_BEFORE_QK = str(ROOT / "examples" / "passes" / "pv_before_qk.py")


def _pipeline(edited: bool, options: str) -> str:
    names = format_pipeline(target_pipeline("sm_90a")).split(",")
    if options:
        names[names.index("attn-warp-specialize")] = f"attn-warp-specialize{{{options}}}"
    if edited:
        names.insert(names.index("attn-overlap-gemms") + 1, "pv-before-qk")
    return ",".join(names)


@pytest.mark.parametrize("example, options", [("gemma2", ""), ("mha", "pingpong=true")])
def test_an_edited_trip_computes_the_reference(example, options):
    path = ROOT / "examples" / f"{example}.attn"
    bundle = attnc.compile(path, arch="sm_90a", pass_pipeline=_pipeline(True, options),
                           load_passes=(PV_BEFORE_QK,)).bundle
    plain = attnc.compile(path, arch="sm_90a", pass_pipeline=_pipeline(False, options)).bundle
    assert _ptx(bundle) != _ptx(plain)          # the edit is another kernel
    check_against_reference(bundle, path, 70, 300)


# Two L5 edits of what the lowering now builds op by op around the consumers' trips and in
# the producer's (Note [Loads op by op] in attnc/backend/load_steps.py), as passes of this
# module: each is another kernel, and must still compute the reference.
@register
@dataclass(frozen=True)
class _WaitsTogether(Pass):
    """The producer's trips wait for both empty slots before writing either."""

    name: ClassVar[str] = "test-producer-waits-together"

    def run(self, module):
        for loop in _kv_loops(module, "producer"):
            ops = [o.operation for o in loop.regions[0].blocks[0].operations]
            k_write = next(op for op in ops if op.name == R.SLOT_WRITE)
            v_load = next(op for op in ops if op.name == "attn.load" and R.attrs_of(op)["operand"] == "v")
            v_wait = [op for op in ops if op.name == R.MBARRIER_WAIT][1]
            for op in ops[ops.index(v_load):ops.index(v_wait) + 1]:
                op.move_before(k_write)


@register
@dataclass(frozen=True)
class _LastVFirst(Pass):
    """The consumers' last P.V waits for V before it lands the P.V in flight."""

    name: ClassVar[str] = "test-last-v-first"

    def run(self, module):
        for role in ("consumer0", "consumer1"):
            loops = _kv_loops(module, role)
            if not loops:
                continue
            block = loops[0].operation.parent.regions[0].blocks[0]
            after = [o.operation for o in block.operations]
            after = after[next(k for k, op in enumerate(after) if op == loops[-1].operation) + 1:]
            land = next(op for op in after if op.name == R.MMA_WAIT)
            for op in [op for op in after if op.name in (R.MBARRIER_WAIT, R.SLOT_READ)]:
                op.move_before(land)


def _kv_loops(module, role: str) -> list:
    kernel = attention_ops(module)[0]
    found = [r for r in R.role_ops(kernel) if R.name_of(r) == role]
    if not found:
        return []
    return [op for op in R.ops_in(R.role_block(found[0]), ("scf.for",)) if KV_LOOP in op.attributes]


@pytest.mark.parametrize("example, options, edit", [("gemma2", "", "test-producer-waits-together"),
                                                     ("mha", "pingpong=true", "test-last-v-first")])
def test_edits_around_and_in_the_producers_trips_compute_the_reference(example, options, edit):
    path = ROOT / "examples" / f"{example}.attn"
    names = _pipeline(False, options).split(",")
    names.insert(names.index("attn-overlap-gemms") + 1, edit)
    bundle = attnc.compile(path, arch="sm_90a", pass_pipeline=",".join(names)).bundle
    plain = attnc.compile(path, arch="sm_90a", pass_pipeline=_pipeline(False, options)).bundle
    assert _ptx(bundle) != _ptx(plain)
    check_against_reference(bundle, path, 70, 300)
