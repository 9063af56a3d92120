"""Note [Key loops] (sm80.py): the key range's loops merged, one that masks its mixed
blocks in a branch. The option, what it does to the PTX (a copy of the step per loop),
its defaults and errors, and the kernels in the PTX emulator against attnc.reference
with blocks of all three kinds (mixed near the diagonal, full, mixed at the window's
far edge)."""
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
def test_each_loop_builds_a_copy_of_the_step(dead_rows):
    """A window has a loop of each kind: three copies of the step (four with the dead
    rows' first step); two loops leave two (three), one loop one (two)."""
    def count(**options):
        built = build_with(WINDOW, "sliding_window.attn", "sm_80", cubin=False, dead_rows=dead_rows, **options)
        return mma_count(built.ptx, "attnc_sliding_window_fwd")
    per_step = 256          # QK^T and P.V of a 128x64 block at d = 128, a warp's share
    copies = 2 if dead_rows == "true" else 1
    assert [count(kv_loops=str(n)) for n in (3, 2, 1)] == [per_step * (copies + n - 1) for n in (3, 2, 1)]


@pytest.mark.parametrize("example, arch, loops", [
    ("sliding_window", "sm_80", 1), ("gemma2", "sm_80", 1),          # a window: mixed blocks at both ends
    ("sliding_window", "sm_90a", 3), ("gemma2", "sm_90a", 3),        # merged, sm_90a's windows ran slower
    ("mqa", "sm_80", 3), ("prefix_lm", "sm_80", 3),                  # the range starts with its full blocks
    ("docs_sink", "sm_80", 3),                                       # a block map
    ("mqa", "sm_90a", 3)])
def test_defaults(example, arch, loops):
    assert f"kv_loops = {loops} : i64" in _plan(example, arch)


def test_sm_90a_builds_a_step_per_loop():
    """sm_90a's window (the producer and two consumer warpgroups at d = 128): a consumer's
    three loops of overlapped trips (64 wgmma, with the first QK^T and the last P.V),
    two, one."""
    def count(**options):
        built = build_with(WINDOW, "sliding_window.attn", "sm_90a", cubin=False, **options)
        return len(re.findall(r"\bwgmma\.mma_async\b", kernel_ptx(built.ptx, "attnc_sliding_window_fwd")))
    assert [count(kv_loops=str(n)) for n in (3, 2, 1)] == [64, 48, 32]


def test_refused_on_sm_100a():
    with pytest.raises(AttncError, match="kv_loops=1: no choice of attn-lower-sm100a"):
        build_with(WINDOW, "sliding_window.attn", "sm_100a", cubin=False, kv_loops="1")


@pytest.mark.parametrize("edit", ["kv_loops = 0 : i64", "kv_loops = 4 : i64"])
def test_an_edited_count_out_of_range_is_refused(edit):
    plan = _plan("sliding_window", "sm_80")
    with pytest.raises(AttncError, match=re.escape(f"kv_loops={edit.split()[2]}: expected 1 (every step")):
        _lower(plan.replace("kv_loops = 1 : i64", edit), "sm_80")


@pytest.mark.parametrize("loops, message", [
    (1, "kv_loops=1 builds every step of the key range from the first mixed KV loop's trip, and this full loop"),
    (2, "kv_loops=2 builds the full and far edge's steps from the last mixed KV loop's trip, and this full loop")])
def test_refused_where_the_loops_hold_other_choices(loops, message):
    """A merged loop is built from one loop's trip: a full loop whose exponentials take
    another path (an edit of the L5 IR) is refused at that loop, and built with the loops
    apart. Two loops leave the near edge's loop its own."""
    plan = _plan("sliding_window", "sm_80", {"kv_loops": loops})
    zero = "exp2_fma = 0 : i64"
    edited = _edit_nth(plan, zero, "exp2_fma = 4 : i64", {1})     # the full loop's softmax step
    with pytest.raises(AttncError, match=re.escape(message)):
        _lower(edited, "sm_80")
    _lower(edited.replace(f"kv_loops = {loops} : i64", "kv_loops = 3 : i64"), "sm_80")
    if loops == 2:                                                  # the near edge's loop
        _lower(_edit_nth(plan, zero, "exp2_fma = 4 : i64", {0}), "sm_80")


WINDOW128 = "j <= i and i - j < 128"
GLOBAL = "j < 16 or (j <= i and i - j < 150)"         # no interval of keys a row: no dead rows


@pytest.mark.parametrize("loops", [1, 2])
@pytest.mark.parametrize("mask, arch, options", [
    (WINDOW128, "sm_80", {"dead_rows": "true"}), (WINDOW128, "sm_80", {"dead_rows": "false"}),
    (WINDOW128, "sm_90a", {}), (WINDOW128, "sm_90a", {"producer": "false"}),
    (GLOBAL, "sm_80", {}), (GLOBAL, "sm_90a", {}), (GLOBAL, "sm_90a", {"producer": "false"})])
def test_merged_loops_compute_the_reference(tmp_path, mask, arch, options, loops):
    """A 128-key window at M = N = 320: query blocks whose range has mixed blocks at both
    ends and full ones between; and global tokens beside a window, a range of two segments;
    on sm_90a in the consumer warpgroups and the cooperative kernel."""
    path = tmp_path / "window128.attn"
    path.write_text(variant_source("window128", 128, mask=mask, lse=True))
    pipeline = pipeline_with_options(arch, {"kv_loops": loops, **options})
    bundle = ptx_bundle(path, arch, pass_pipeline=pipeline)
    assert bundle.manifest.specialization["kv_loops"] == loops
    check_against_reference(bundle, path, 320, 320)
