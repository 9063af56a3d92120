"""sm_90a kernels whose overlapped consumer trips were edited at L5 and built op by op
(Note [Overlapped steps op by op] in attnc/backend/wgmma_steps.py), run in the PTX
emulator against attnc.reference at a small ragged shape, as tests/sim/test_steps_sim.py
runs sm_80's: P.V issued before QK^T with S landed at pending 0
(examples/passes/pv_before_qk.py), with and without ping-pong; the producer's trips
waiting for both slots before writing either (waits_first.py); the last P.V waiting for
V before it lands the P.V in flight (last_v_early.py); the cooperative kernel's trips
issuing their copies after their GEMMs (loads_after_gemms.py). Zero race or protocol
reports are allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

import attnc
from attnc.passes.pipelines import format_pipeline, target_pipeline
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


@pytest.mark.parametrize("example, options, edit", [("gemma2", "", "waits_first"),
                                                     ("mha", "pingpong=true", "last_v_early")])
def test_edits_around_and_in_the_producers_trips_compute_the_reference(example, options, edit):
    """examples/passes/waits_first.py (the producer's trips) and last_v_early.py (the
    consumers' last P.V), each another kernel."""
    path = ROOT / "examples" / f"{example}.attn"
    names = _pipeline(False, options).split(",")
    names.insert(names.index("attn-overlap-gemms") + 1, edit.replace("_", "-"))
    bundle = attnc.compile(path, arch="sm_90a", pass_pipeline=",".join(names),
                           load_passes=(str(ROOT / "examples" / "passes" / f"{edit}.py"),)).bundle
    plain = attnc.compile(path, arch="sm_90a", pass_pipeline=_pipeline(False, options)).bundle
    assert _ptx(bundle) != _ptx(plain)
    check_against_reference(bundle, path, 70, 300)


def test_the_cooperative_trips_loads_after_their_gemms_compute_the_reference():
    """examples/passes/loads_after_gemms.py (sm_90a's cooperative kernel: Note [Cooperative
    steps op by op] in attnc/backend/coop_steps.py), another kernel."""
    path = ROOT / "examples" / "gemma2.attn"
    names = _pipeline(False, "producer=false").split(",")
    names.insert(names.index("attn-overlap-gemms") + 1, "loads-after-gemms")
    bundle = attnc.compile(path, arch="sm_90a", pass_pipeline=",".join(names),
                           load_passes=(str(ROOT / "examples" / "passes" / "loads_after_gemms.py"),)).bundle
    plain = attnc.compile(path, arch="sm_90a", pass_pipeline=_pipeline(False, "producer=false")).bundle
    assert _ptx(bundle) != _ptx(plain)
    check_against_reference(bundle, path, 70, 300)
