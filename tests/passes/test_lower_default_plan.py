"""Note [The lowerings build the default plan] (lower_sm80.py): a plan the lowering would
not follow is refused, not silently built as the default (found by a review)."""
from __future__ import annotations

import pytest

from attnc.driver import CompileOptions, compile_file, optimize_mlir
from attnc.errors import AttncError
from attnc.passes.pipelines import format_pipeline, pipeline_with, target_pipeline


def test_another_plan_pass_option_is_refused():
    pipeline = pipeline_with("sm_90a", {"attn-warp-specialize": {"consumers": 1}})
    with pytest.raises(AttncError, match="attn-lower-sm90a builds the plan that attn-warp-specialize, "
                                         "attn-alloc-smem, attn-alloc-tmem, attn-insert-pipelines make with "
                                         "their default options for this tile, and this plan is another: it "
                                         "has 2 attn.role ops, the default plan 3"):
        compile_file("examples/mha.attn", CompileOptions(arch="sm_90a", pass_pipeline=pipeline))


@pytest.mark.parametrize("edit, difference", [
    (('name = "sK", offset = 32768', 'name = "sK", offset = 0'), "attn.buffer \"sK\" has offset = 0 : i64, the "
                                                                  "default plan 32768 : i64"),
    (("stages = 2 : i64, tile = [\"k\", \"v\"]", "stages = 3 : i64, tile = [\"k\", \"v\"]"),
     "attn.channel \"kv\" has stages = 3 : i64, the default plan 2 : i64"),
])
def test_a_plan_edited_by_hand_is_refused(tmp_path, edit, difference):
    specs = target_pipeline("sm_80")
    dump = tmp_path / "dump"
    compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=format_pipeline(specs[:-1]),
                                                     dump_dir=str(dump)))
    plan = sorted(dump.glob("*.mlir"))[-1].read_text()
    assert plan.count(edit[0]) == 1
    with pytest.raises(AttncError, match=difference.replace("[", r"\[")):
        optimize_mlir(plan.replace(*edit), "plan.mlir", CompileOptions(arch="sm_80", pass_pipeline="attn-lower-sm80"))


def test_the_default_plan_lowers():
    specs = target_pipeline("sm_80")
    module = compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=format_pipeline(specs))).module
    assert "gpu.module" in str(module)


@pytest.mark.parametrize("pass_name", ["attn-verify-pipeline", "attn-lower-sm80"])
@pytest.mark.parametrize("value", [0, -64])
def test_a_tile_edited_to_no_rows_is_named(tmp_path, pass_name, value):
    """`block_m = 0` in a dump was reported as a barrier expecting bytes a fill does not
    deliver (found by a review); the lowering's error came from its copy of the module,
    at no source location."""
    specs = target_pipeline("sm_80")
    dump = tmp_path / "dump"
    compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=format_pipeline(specs[:-1]),
                                                     dump_dir=str(dump)))
    plan = sorted(dump.glob("*.mlir"))[-1].read_text()
    assert plan.count("block_m = 128 : i64") == 1
    with pytest.raises(AttncError) as info:
        optimize_mlir(plan.replace("block_m = 128 : i64", f"block_m = {value} : i64"), "plan.mlir",
                      CompileOptions(arch="sm_80", pass_pipeline=pass_name))
    assert info.value.render().startswith(
        f"examples/mha.attn:2:1: error: {pass_name}: the tile has block_m = {value}; it must be at least 1")
