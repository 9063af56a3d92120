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
    (('name = "sK", offset = 32768', 'name = "sK", offset = 0'), "buffer \"sK\" has offset = 0, the default "
                                                                  "plan 32768"),
    (("stages = 2 : i64, tile = [\"k\", \"v\"]", "stages = 3 : i64, tile = [\"k\", \"v\"]"),
     "attn.channel \"kv\" has stages = 3, the default plan 2"),
    (("warps = [0, 1, 2, 3]", "warps = [0, 1, 2]"),
     "attn.role \"compute\" has warps = [0, 1, 2], the default plan [0, 1, 2, 3]"),
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


def _gemma2_plan(tmp_path) -> str:
    """gemma2's IR after every sm_80 pass but the lowering, as --dump-dir writes it."""
    dump = tmp_path / "dump"
    compile_file("examples/gemma2.attn", CompileOptions(
        arch="sm_80", pass_pipeline=format_pipeline(target_pipeline("sm_80")[:-1]), dump_dir=str(dump)))
    return sorted(dump.glob("*.mlir"))[-1].read_text()


def test_an_edited_scale_is_compiled_as_edited(tmp_path):
    """The backend builds the kernel from the op's attributes (Note [The variant from the
    IR] in attnc/ir/kernel.py), not from the .attn source the module carries: a scale
    edited in a dump is the kernel's scale."""
    from attnc.backend.sm80_lower import spec_from_ir
    from attnc.passes.lower_sm80 import compile_result_of

    plan = _gemma2_plan(tmp_path)
    old, new = "scale = 0.0883883461 : f32", "scale = 5.000000e-01 : f32"
    assert plan.count(old) == 1
    given = optimize_mlir(plan, "plan.mlir", CompileOptions(arch="sm_80", pass_pipeline="attn-verify-pipeline"))
    edited = optimize_mlir(plan.replace(old, new), "plan.mlir",
                           CompileOptions(arch="sm_80", pass_pipeline="attn-verify-pipeline"))
    assert spec_from_ir(compile_result_of(given)).softmax_scale == pytest.approx(0.0883883461)
    assert spec_from_ir(compile_result_of(edited)).softmax_scale == 0.5


@pytest.mark.parametrize("edit, message", [
    (('dtype = "bf16"', 'dtype = "f16"'), 'attribute dtype = "f16" but q is a tensor of bf16: they must agree'),
    (("head_dim_v = 128 : i64", "head_dim_v = 64 : i64"),
     "attribute head_dim_v = 64 but v_shape ends in 128: they must agree")])
def test_an_attribute_that_disagrees_with_the_types_is_refused(tmp_path, edit, message):
    """An attribute the kernel is built from, edited so that it contradicts the operands'
    types, is refused at the op, naming both."""
    plan = _gemma2_plan(tmp_path)
    old, new = edit
    assert plan.count(old) == 1
    with pytest.raises(AttncError) as info:
        optimize_mlir(plan.replace(old, new), "plan.mlir", CompileOptions(arch="sm_80", pass_pipeline="attn-lower-sm80"))
    assert info.value.message == message
    assert info.value.render().startswith("examples/gemma2.attn:2:1: error: ")


def test_an_option_past_64_bits_is_an_error_not_a_crash():
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=format_pipeline(
            target_pipeline("sm_80")[:-1]) + ",attn-lower-sm80{min_ctas_per_sm=9223372036854775808}"))
    assert info.value.message == "option min_ctas_per_sm = 9223372036854775808 is out of range"
