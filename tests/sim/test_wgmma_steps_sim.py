"""sm_90a kernels whose overlapped consumer trips were edited at L5 and built op by op
(Note [Overlapped steps op by op] in attnc/backend/wgmma_steps.py), run in the PTX
emulator against attnc.reference at a small ragged shape, as tests/sim/test_steps_sim.py
runs sm_80's: P.V issued before QK^T with S landed at pending 0
(examples/passes/pv_before_qk.py), with and without ping-pong; the producer's trips
waiting for both slots before writing either (waits_first.py); the last P.V waiting for
V before it lands the P.V in flight (last_v_early.py); the cooperative kernel's trips
issuing their copies after their GEMMs (loads_after_gemms.py), and its first loads and
last P.V reordered (a pass written here); the consumers' bottom mixed loop alone with V's
wait before K's (a pass written here); v_before_k.py, waits_first.py and pv_before_qk.py
in the walk of persistent CTAs. Zero race or protocol reports are allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from attnc.passes.pipelines import format_pipeline, target_pipeline
from attnc.testing import ptx_bundle, user_pass_source
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
    bundle = ptx_bundle(path, arch="sm_90a", pass_pipeline=_pipeline(True, options),
                        load_passes=(PV_BEFORE_QK,))
    plain = ptx_bundle(path, arch="sm_90a", pass_pipeline=_pipeline(False, options))
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
    bundle = ptx_bundle(path, arch="sm_90a", pass_pipeline=",".join(names),
                        load_passes=(str(ROOT / "examples" / "passes" / f"{edit}.py"),))
    plain = ptx_bundle(path, arch="sm_90a", pass_pipeline=_pipeline(False, options))
    assert _ptx(bundle) != _ptx(plain)
    check_against_reference(bundle, path, 70, 300)


@pytest.mark.parametrize("edit", ["v_before_k", "waits_first", "pv_before_qk"])
def test_the_example_passes_edit_the_persistent_walk(edit):
    """sliding_window's default plan has persistent CTAs: the roles' KV loops stand in the
    walk over query blocks, where the example passes find them too (each another kernel)."""
    path = ROOT / "examples" / "sliding_window.attn"
    names = _pipeline(False, "").split(",")
    after = "attn-warp-specialize" if edit == "v_before_k" else "attn-overlap-gemms"
    names.insert(names.index(after) + 1, edit.replace("_", "-"))
    bundle = ptx_bundle(path, arch="sm_90a", pass_pipeline=",".join(names),
                        load_passes=(str(ROOT / "examples" / "passes" / f"{edit}.py"),))
    plain = ptx_bundle(path, arch="sm_90a", pass_pipeline=_pipeline(False, ""))
    assert "MinSms" in str(plain.manifest.kernels[-1].grid) and _ptx(bundle) != _ptx(plain)
    check_against_reference(bundle, path, 200, 300)


def test_the_cooperative_trips_loads_after_their_gemms_compute_the_reference():
    """examples/passes/loads_after_gemms.py (sm_90a's cooperative kernel: Note [Cooperative
    steps op by op] in attnc/backend/coop_steps.py), another kernel."""
    path = ROOT / "examples" / "gemma2.attn"
    names = _pipeline(False, "producer=false").split(",")
    names.insert(names.index("attn-overlap-gemms") + 1, "loads-after-gemms")
    bundle = ptx_bundle(path, arch="sm_90a", pass_pipeline=",".join(names),
                        load_passes=(str(ROOT / "examples" / "passes" / "loads_after_gemms.py"),))
    plain = ptx_bundle(path, arch="sm_90a", pass_pipeline=_pipeline(False, "producer=false"))
    assert _ptx(bundle) != _ptx(plain)
    check_against_reference(bundle, path, 70, 300)


COOP_AROUND = '''
from dataclasses import dataclass
from typing import ClassVar

from attnc.ir import attention_ops
from attnc.ir.roles import name_of, role_block, role_ops
from attnc.passes import Pass, register


@register
@dataclass(frozen=True)
class CoopAround(Pass):
    """In the cooperative role: V0's copy (load, slot write, commit, ring advance) after
    K1's; the last P.V's wait for every copy, and its CTA barrier, above the landing of
    the P.V in flight."""

    name: ClassVar[str] = "coop-around"

    def run(self, module):
        for kernel in attention_ops(module):
            role = next(r for r in role_ops(kernel) if name_of(r) == "compute")
            ops = [op.operation for op in role_block(role).operations]
            loads = [op for op in ops if op.name == "attn.load" and str(op.attributes["operand"]) != '"q"']
            v0, k1 = loads[1], loads[2]
            end = ops[ops.index(k1) + 3]
            for op in reversed(ops[ops.index(v0):ops.index(k1)]):
                op.move_after(end)
            steps = next(op for op in ops if op.name == "scf.if")
            inner = [op.operation for op in steps.regions[0].blocks[0].operations]
            last_loop = max(i for i, op in enumerate(inner) if op.name == "scf.for")
            after = inner[last_loop + 1:]
            land = next(op for op in after if op.name == "attn.mma_wait")
            for op in [op for op in after if op.name in ("attn.cp_async_wait", "attn.cta_barrier")]:
                op.move_before(land)
'''


def test_the_cooperative_prologue_and_last_pv_edited_compute_the_reference(tmp_path):
    """The cooperative kernel's loads before the key range and its last P.V, built op by
    op (Note [Cooperative steps op by op]), edited by a pass written here: another kernel."""
    pass_file = tmp_path / "coop_around.py"
    pass_file.write_text(COOP_AROUND)
    path = ROOT / "examples" / "gemma2.attn"
    names = _pipeline(False, "producer=false").split(",")
    names.insert(names.index("attn-overlap-gemms") + 1, "coop-around")
    bundle = ptx_bundle(path, arch="sm_90a", pass_pipeline=",".join(names), load_passes=(str(pass_file),))
    plain = ptx_bundle(path, arch="sm_90a", pass_pipeline=_pipeline(False, "producer=false"))
    assert _ptx(bundle) != _ptx(plain)
    check_against_reference(bundle, path, 70, 300)


# V's wait (and read) before K's in the consumers' last mixed KV loop only
BOTTOM_WAITS = user_pass_source("bottom-waits", """\
for role in role_ops(op):
    if name_of(role).startswith("consumer"):
        loops = [l for l in ops_in(role_block(role), ("scf.for",)) if "kv_blocks" in l.attributes]
        body = [o.operation for o in loops[-1].regions[0].blocks[0].operations]
        waits = [o for o in body if o.name == MBARRIER_WAIT]
        reads = [o for o in body if o.name == SLOT_READ]
        waits[1].move_before(waits[0])
        reads[1].move_after(waits[1])""", imports="from attnc.ir.roles import MBARRIER_WAIT, SLOT_READ, name_of, "
                                           "ops_in, role_block, role_ops")


def test_a_bottom_mixed_loop_of_its_own_computes_the_reference(tmp_path):
    """sliding_window over one segment, its last mixed loop (the window's lower edge,
    walked last) edited alone: the kernel builds those steps from it and the top ones
    from the first (Note [Key blocks top down] in attnc/passes/tile_program.py); at
    M = N = 1300 the last query blocks run both."""
    path = ROOT / "examples" / "sliding_window.attn"
    pass_file = tmp_path / "bottom_waits.py"
    pass_file.write_text(BOTTOM_WAITS)
    names = _pipeline(False, "").split(",")
    names.insert(names.index("attn-overlap-gemms") + 1, "bottom-waits")
    bundle = ptx_bundle(path, arch="sm_90a", pass_pipeline=",".join(names), load_passes=(str(pass_file),))
    assert _ptx(bundle) != _ptx(ptx_bundle(path, arch="sm_90a", pass_pipeline=_pipeline(False, "")))
    check_against_reference(bundle, path, 1300, 1300)
