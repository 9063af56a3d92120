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
    assert plan.count("{block_m = 128 : i64") == 1         # the tile's (not the analysis' mask_block_m)
    with pytest.raises(AttncError) as info:
        optimize_mlir(plan.replace("{block_m = 128 : i64", f"{{block_m = {value} : i64"), "plan.mlir",
                      CompileOptions(arch="sm_80", pass_pipeline=pass_name))
    assert info.value.render().startswith(
        f"examples/mha.attn:2:1: error: {pass_name}: the tile has block_m = {value}; it must be at least 1")


@pytest.mark.parametrize("edit", [("scale = 0.0883883461 : f32", "scale = 5.000000e-01 : f32"),
                                  ('dtype = "bf16"', 'dtype = "f16"')])
def test_an_edited_frontend_attribute_is_refused(tmp_path, edit):
    """Found by a review (session 27): the backend builds scale, dtypes, head dims and
    shapes from the recorded .attn source, so an edit of them in a dump compiled as if
    it had not been made. It is refused now, naming the attribute."""
    specs = target_pipeline("sm_80")
    dump = tmp_path / "dump"
    compile_file("examples/gemma2.attn", CompileOptions(arch="sm_80", pass_pipeline=format_pipeline(specs[:-1]),
                                                        dump_dir=str(dump)))
    plan = sorted(dump.glob("*.mlir"))[-1].read_text()
    old, new = edit
    assert plan.count(old) == 1
    with pytest.raises(AttncError) as info:
        optimize_mlir(plan.replace(old, new), "plan.mlir", CompileOptions(arch="sm_80", pass_pipeline="attn-lower-sm80"))
    key = old.split(" =")[0]
    assert info.value.message.startswith(f"attn-lower-sm80: the attribute {key} = ")
    assert "edit the .attn file instead" in info.value.message


def test_an_option_past_64_bits_is_an_error_not_a_crash():
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=format_pipeline(
            target_pipeline("sm_80")[:-1]) + ",attn-lower-sm80{min_ctas_per_sm=9223372036854775808}"))
    assert info.value.message == "option min_ctas_per_sm = 9223372036854775808 is out of range"
