"""Note [One key loop] (sm80.py): the key range's steps as one loop that masks its mixed
blocks in a branch. The option, what it does to the PTX (one copy of the step where
there were one per kind of loop), its errors, and the kernel in the PTX emulator against
attnc.reference with blocks of all three kinds (mixed near the diagonal, full, mixed at
the window's far edge)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnc.errors import AttncError
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import build_with, kernel_ptx, ptx_bundle, variant_source
from tests.passes.test_kernel_choices import _edit_nth, _lower, _plan
from tests.sim.test_steps_sim import check_against_reference

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WINDOW = (EXAMPLES / "sliding_window.attn").read_text()     # 128x64 tiles on sm_80 at d = 128


def mma_count(ptx: str, kernel: str) -> int:
    return len(re.findall(r"\bmma\.sync\.aligned\b", kernel_ptx(ptx, kernel)))


@pytest.mark.parametrize("dead_rows", ["true", "false"])
def test_one_loop_builds_the_step_once(dead_rows):
    """A window has a loop of each kind: three copies of the step (four with the dead
    rows' first step); one loop leaves one (two)."""
    def count(**options):
        built = build_with(WINDOW, "sliding_window.attn", "sm_80", cubin=False, dead_rows=dead_rows, **options)
        return mma_count(built.ptx, "attnc_sliding_window_fwd")
    per_step = 256          # QK^T and P.V of a 128x64 block at d = 128, a warp's share
    copies = 2 if dead_rows == "true" else 1
    assert count(one_kv_loop="false") == per_step * (copies + 2)
    assert count(one_kv_loop="true") == per_step * copies


@pytest.mark.parametrize("example, arch, on", [
    ("sliding_window", "sm_80", True), ("gemma2", "sm_80", True),     # a window: mixed blocks at both ends
    ("mqa", "sm_80", False), ("prefix_lm", "sm_80", False),          # the range starts with its full blocks
    ("docs_sink", "sm_80", False),                                   # a block map
    ("sliding_window", "sm_90a", False)])
def test_on_by_default_for_a_window_on_sm_80(example, arch, on):
    assert f"one_kv_loop = {'true' if on else 'false'}" in _plan(example, arch)


def test_sm_90a_builds_the_step_once():
    """sm_90a's window (the producer and two consumer warpgroups at d = 128): a consumer's
    three loops of overlapped trips become one, half the wgmma of the kernel."""
    def count(**options):
        built = build_with(WINDOW, "sliding_window.attn", "sm_90a", cubin=False, **options)
        return len(re.findall(r"\bwgmma\.mma_async\b", kernel_ptx(built.ptx, "attnc_sliding_window_fwd")))
    assert (count(), count(one_kv_loop="true")) == (64, 32)


def test_refused_on_sm_100a():
    with pytest.raises(AttncError, match="one_kv_loop=true: no choice of attn-lower-sm100a"):
        build_with(WINDOW, "sliding_window.attn", "sm_100a", cubin=False, one_kv_loop="true")


def test_refused_where_the_loops_hold_other_choices():
    """The one loop is built from the first mixed loop's trip: a full loop whose
    exponentials take another path (an edit of the L5 IR) is refused at that loop, and
    built with the loops apart."""
    plan = _plan("sliding_window", "sm_80")
    assert "one_kv_loop = true" in plan
    zero = "exp2_fma = 0 : i64"
    edited = _edit_nth(plan, zero, "exp2_fma = 4 : i64", {1})     # the full loop's softmax step
    with pytest.raises(AttncError, match="one_kv_loop builds every step of the key range from the first mixed"):
        _lower(edited, "sm_80")
    _lower(edited.replace("one_kv_loop = true", "one_kv_loop = false"), "sm_80")


@pytest.mark.parametrize("arch, options", [("sm_80", {"dead_rows": "true"}), ("sm_80", {"dead_rows": "false"}),
                                           ("sm_90a", {}), ("sm_90a", {"producer": "false"})])
def test_one_loop_computes_the_reference(tmp_path, arch, options):
    """A 128-key window at M = N = 320: query blocks whose range has mixed blocks at both
    ends and full ones between; on sm_90a in the consumer warpgroups and the cooperative
    kernel."""
    path = tmp_path / "window128.attn"
    path.write_text(variant_source("window128", 128, mask="j <= i and i - j < 128", lse=True))
    pipeline = pipeline_with_options(arch, {"one_kv_loop": "true", **options})
    bundle = ptx_bundle(path, arch, pass_pipeline=pipeline)
    assert bundle.manifest.specialization["one_kv_loop"] is True
    check_against_reference(bundle, path, 320, 320)
