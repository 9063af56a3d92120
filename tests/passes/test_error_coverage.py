"""Errors of the passes (attnc/passes/*.py, attnc/schedule/*.py) and branches of their
messages that the other tests leave untriggered, each triggered as a user would: a dump
edited by hand and run through `attnc opt` (`optimize_mlir`), or an example compiled
with a `--pass-pipeline`. Each test checks the message and, where the error names an
op, that it is located.

The dumps are mha's (sliding_window's for a mask's choice), made once per stage by the
helpers of test_pass_errors.py; each edit asserts that the text it changes is there.
"""
from __future__ import annotations

import functools
import re

import pytest

from attnc.driver import CompileOptions, compile_file
from attnc.errors import AttncError
from attnc.passes.pipelines import PassSpec, format_pipeline, target_pipeline
from tests.passes.test_pass_errors import (_compile_refused, _in_role, _loop_line, _pipeline, _plan, _refused,
                                           _replaced, _sub)

PERSISTENT = {"attn-warp-specialize": {"persistent": 1}}
STEP_DIFFERS = ("attn-overlap-gemms rotates the KV step attn-insert-pipelines makes (m, l, O and one ring "
                "carried; QK^T, scores, softmax, rescale and P.V in their data flow, K and V waited for, read "
                "and released at the ring's stage); this ")


@functools.cache
def _example_plan(example: str, arch: str, until: str) -> str:
    return compile_file(f"examples/{example}.attn",
                        CompileOptions(arch=arch, pass_pipeline=_pipeline(arch, until))).text


def _located(text: str, arch: str, run: str):
    error = _refused(text, arch, run)
    assert error.span is not None, error.message
    return error


# --- kernel choices (attn-kernel-choices) read back by the lowering ------------------------
@pytest.mark.parametrize("old, new, message", [
    pytest.param("heads_first = false", "heads_first = 0 : i64",
                 "heads_first on attn.kernel must be true or false, got 0 : i64", id="bool-on-kernel"),
    pytest.param("staged = true", 'staged = "yes"',
                 'staged on attn.store must be true or false, got "yes"', id="bool-on-store"),
    pytest.param("{exp2_fma = 0 : i64}", "{exp2_fma = true}",
                 "exp2_fma on attn.softmax_step must be an integer, got true", id="int-given-bool"),
    pytest.param("unroll = 0 : i64", 'unroll = "none"',
                 'unroll on attn.mma must be an integer, got "none"', id="int-given-string"),
])
def test_a_choice_of_the_wrong_type_is_refused(old, new, message):
    plan = _replaced(_plan("sm_80", "attn-kernel-choices"), old, new)
    assert _located(plan, "sm_80", "attn-lower-sm80").message == message


def test_a_mask_test_that_is_no_string_is_refused():
    plan = _example_plan("sliding_window", "sm_80", "attn-kernel-choices")
    plan = _replaced(plan, 'interval_test = "bits"', "interval_test = 1 : i64")
    assert _located(plan, "sm_80", "attn-lower-sm80").message == \
        "interval_test on attn.mask must be a string, got 1 : i64"


# --- the plan the lowerings follow (plan_ir.py) ----------------------------------------------
def test_a_tile_of_rows_no_warpgroups_run_is_refused():
    # attn-tile gives sm_90a 64, 128 or 192 rows; a tile program edited whole to 256 is refused too.
    plan = _example_plan("alibi", "sm_90a", "attn-tile")
    assert "block_m = 64 : i64" in plan
    plan = plan.replace("block_m = 64 : i64", "block_m = 256 : i64").replace("<[64, ", "<[256, ")
    error = _located(plan.replace("<[64]", "<[256]"), "sm_90a", _rest("sm_90a", "attn-tile"))
    assert error.message == ("block_m=256: sm_90a's consumer warpgroups run 64 query rows each, 1, 2 or 3 of them: "
                             "block_m 64, 128 or 192 (attn-tile)")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_the_kernels_warps_and_stages_are_its_roles_and_channels_from_l3_on(arch):
    # Note [Sizes the plan states]: no second number to edit, which nothing would read.
    def kernel_attributes(text):
        return text[text.rindex("}) {block_m"):].split("\n")[0]
    tiled = kernel_attributes(_plan(arch, "attn-tile"))
    assert "num_warps = " in tiled and "stages = " in tiled
    planned = kernel_attributes(_plan(arch, "attn-warp-specialize"))
    assert "num_warps" not in planned and "stages" not in planned


@pytest.mark.parametrize("old, new, message", [
    pytest.param('tile = ["q"], transport = "cp.async"', 'tile = ["q"], transport = "tma"',
                 "channel 'q' has transport = tma; the sm_80 kernel's is cp.async", id="transport"),
    pytest.param('stages = 1 : i64, tile = ["q"]', 'stages = 2 : i64, tile = ["q"]',
                 "channel 'q' has stages = 2; the sm_80 kernel's is 1", id="stages"),
    pytest.param('tile = ["q"], transport', 'tile = ["q", "o"], transport',
                 "channel 'q' has tile = ['q', 'o']; the sm_80 kernel's is ['q']", id="tile"),
])
def test_a_channel_unlike_the_kernels_is_refused(old, new, message):
    error = _located(_replaced(_plan("sm_80", "attn-kernel-choices"), old, new), "sm_80", "attn-lower-sm80")
    assert error.message.startswith(f"attn-lower-sm80: {message}")
    assert error.message.endswith(", as attn-warp-specialize writes it (Note [The plan the lowerings follow])")


@pytest.mark.parametrize("arch, stage, old, role", [
    pytest.param("sm_80", "attn-kernel-choices", 'name = "compute", regs = 0 : i64,', "compute", id="sm_80-compute"),
    pytest.param("sm_90a", "attn-overlap-gemms", 'name = "producer", regs = 24 : i64,', "producer",
                 id="sm_90a-producer"),
])
def test_rows_on_a_role_of_every_row_are_refused(arch, stage, old, role):
    plan = _replaced(_plan(arch, stage), old, old + " rows = [0, 64],")
    lowering = f"attn-lower-{arch.replace('_', '')}"
    assert _located(plan, arch, lowering).message == (
        f"{lowering}: role '{role}' has rows = [0, 64]; the {arch} kernel runs it on every row of the block "
        f"(no rows attribute)")


def test_a_plan_for_a_target_without_a_lowering_is_refused():
    plan = _replaced(_plan("sm_80", "attn-kernel-choices"), 'target = "sm_80"', 'target = "sm_75"')
    assert _located(plan, "sm_80", "attn-lower-sm80").message == \
        "attn-lower-sm80 lowers sm_80 plans; this one is for sm_75: it has no lowering yet"


def test_smem_over_budget_with_two_q_tiles_names_q_tiles():
    plan = _replaced(_plan("sm_100a", "attn-warp-specialize"), 'name = "kv", producer = "load", space = "smem", '
                     'stages = 3 : i64', 'name = "kv", producer = "load", space = "smem", stages = 8 : i64')
    message = _located(plan, "sm_100a", "attn-alloc-smem").message
    assert message.startswith("shared memory plan needs ")
    assert message.endswith("but sm_100a allows 232448; lower 'stages' or 'block_n' or q_tiles (attn-tile)")


# --- attn-verify-pipeline ---------------------------------------------------------------------
def _stage_from_shli(role: str) -> str:
    """The Q ring's first advance, from a stage made by arith.shli (no op the check evaluates)."""
    role = _sub(role, r"(\n(\s*)%c0_i32 = arith.constant 0 : i32[^\n]*)",
                r"\1\n\2%odd = arith.shli %c0_i32, %c0_i32 : i32", count=1)
    return _replaced(role, '"attn.ring_advance"(%c0_i32, %c0_i32) {stages = 1 : i64}',
                     '"attn.ring_advance"(%odd, %c0_i32) {stages = 1 : i64}')


def test_the_verifier_refuses_a_stage_it_cannot_evaluate():
    plan = _in_role(_plan("sm_80", "attn-insert-pipelines"), "compute", _stage_from_shli)
    assert _located(plan, "sm_80", "attn-verify-pipeline").message == (
        "attn-verify-pipeline: role 'compute': the stage or parity of attn.ring_advance is not a value the loops "
        "and arith ops make (an iter_arg, a constant, attn.ring_advance, attn.kv_range, attn.first_block_guess, "
        "attn.dim, integer arith)")


def _walk_branch_on_trunci(role: str) -> str:
    """The branch over the walk's block taken on arith.trunci of the round (not evaluated)."""
    walk = re.search(r'\n(\s*)(%\w+):4 = "attn.walk_block"\((%\w+)\)[^\n]*', role)
    assert walk, "no attn.walk_block"
    indent, block, round_ = walk.groups()
    role = role[:walk.end()] + f"\n{indent}%cond = arith.trunci {round_} : i32 to i1" + role[walk.end():]
    return _replaced(role, f"scf.if {block}#0 ->", "scf.if %cond ->")


def test_the_verifier_refuses_a_condition_it_cannot_evaluate():
    plan = _in_role(_plan("sm_90a", "attn-insert-pipelines", PERSISTENT), "consumer0", _walk_branch_on_trunci)
    assert _located(plan, "sm_90a", "attn-verify-pipeline").message == (
        "attn-verify-pipeline: role 'consumer0': the condition of scf.if is not a value the loops and arith ops "
        "make (an iter_arg, a constant, attn.ring_advance, attn.kv_range, attn.first_block_guess, attn.dim, "
        "integer arith)")


def _no_first_cta_barrier(role: str) -> str:
    at = _loop_line(role, r'"attn.cta_barrier"')
    return role[:at.start()] + role[at.end():]


def test_a_cp_async_read_without_its_cta_barrier_is_refused():
    plan = _in_role(_plan("sm_80", "attn-insert-pipelines"), "compute", _no_first_cta_barrier)
    assert _located(plan, "sm_80", "attn-verify-pipeline").message == (
        "attn-verify-pipeline: compute reads fill 0 of 'kv' (k) from slot 0 before a cp.async wait and then a "
        "CTA barrier made every thread's copies of it visible (Note [Copies seen by every thread])")


def test_a_wait_for_bytes_that_never_land_deadlocks():
    """Q's first expect_tx announces 16 bytes more than its TMA load brings."""
    plan = _plan("sm_100a", "attn-insert-pipelines")
    bar = re.search(r'(%\w+) = "attn.mbarrier_init"\(\) \{channel = "q", count = 1 : i64, name = "mbar_q_full"', plan)
    assert bar, "no mbar_q_full"
    expect = re.search(rf'"attn.mbarrier_expect_tx"\({bar.group(1)}, %\w+\) {{bytes = (\d+) : i64}}', plan)
    assert expect, "no expect_tx on mbar_q_full"
    plan = plan[:expect.start(1)] + str(int(expect.group(1)) + 16) + plan[expect.end(1):]
    message = _located(plan, "sm_100a", "attn-verify-pipeline").message
    assert message.startswith("attn-verify-pipeline: channels ") and " deadlock: " in message
    assert "mma waits at attn.mbarrier_wait on mbar_q_full[0] for parity 0 (its phase 0, 1 of 1 arrivals, " \
           "16 bytes due)" in message


# --- attn-overlap-gemms (attnc/schedule/overlap.py, walk_ahead.py) ------------------------------
def _softmax_m_l_swapped(role: str) -> str:
    return _sub(role, r'"attn.softmax_step"\((%\w+), (%\w+), (%\w+)\)', r'"attn.softmax_step"(\1, \3, \2)', count=1)


def _pv_on_o_unrescaled(role: str) -> str:
    rescale = re.search(r'"attn.rescale"\((%\w+), ', role)
    assert rescale, "no attn.rescale"
    return _sub(role, r'("attn.mma"\(%\w+#0, %\w+, )%\w+(\) \{kind = "pv"\})', rf"\g<1>{rescale.group(1)}\2", count=1)


def _k_wait_stage_and_phase_swapped(role: str) -> str:
    at = _loop_line(role, r'"attn.mbarrier_wait"\((%\w+), (%\w+), (%\w+)\)')
    line = re.sub(r'\((%\w+), (%\w+), (%\w+)\)', r"(\1, \3, \2)", at.group(0), count=1)
    return role[:at.start()] + line + role[at.end():]


@pytest.mark.parametrize("edit, op", [
    pytest.param(_softmax_m_l_swapped, "attn.softmax_step", id="softmax-l-for-m"),
    pytest.param(_pv_on_o_unrescaled, "attn.mma", id="pv-on-o-before-rescale"),
    pytest.param(_k_wait_stage_and_phase_swapped, "attn.mbarrier_wait", id="k-wait-phase-for-stage"),
])
def test_overlap_refuses_a_step_out_of_its_data_flow(edit, op):
    plan = _in_role(_plan("sm_90a", "attn-insert-pipelines"), "consumer0", edit)
    assert _located(plan, "sm_90a", "attn-overlap-gemms").message == f"{STEP_DIFFERS}{op} differs"


def _o_from_a_rescale(role: str) -> str:
    """The KV loop's O starting from a rescale of the fill rather than the fill."""
    m = re.search(r'\n\s*(%\w+) = "attn.fill"\(\) \{value = 0xFF800000 : f32\} : \(\) -> '
                  r'(!attn.tile<\[64\], f32, "reg">)', role)
    o = re.search(r'\n(\s*)(%\w+) = "attn.fill"\(\) \{value = 0.000000e\+00 : f32\} : \(\) -> '
                  r'(!attn.tile<\[64, 128\], f32, "reg">)[^\n]*', role)
    assert m and o, "no fills of m and O"
    indent, fill, tile = o.groups()
    rescale = f'\n{indent}%scaled = "attn.rescale"({fill}, {m.group(1)}) : ({tile}, {m.group(2)}) -> {tile}'
    role = role[:o.end()] + rescale + role[o.end():]
    return _sub(role, rf"(scf.for [^\n]*iter_args\([^\n]*= ){fill},", r"\1%scaled,", count=1)


def test_persistent_steps_not_starting_from_fills_are_refused():
    plan = _in_role(_plan("sm_90a", "attn-insert-pipelines", PERSISTENT), "consumer0", _o_from_a_rescale)
    assert _located(plan, "sm_90a", "attn-overlap-gemms").message == (
        "attn-overlap-gemms: a persistent consumer's steps start from attn.fill values, as attn-tile makes them")


def _no_epilogue(role: str) -> str:
    role = _sub(role, r'(?s)\n\s*%\w+:2 = "attn.finalize"\(.*?\n\s*\}\) :[^\n]*', "", count=1)
    return _sub(role, r'\n\s*"attn.store"\([^\n]*', "", count=1)


def test_a_persistent_block_without_an_epilogue_is_refused():
    plan = _in_role(_plan("sm_90a", "attn-insert-pipelines", PERSISTENT), "consumer0", _no_epilogue)
    assert _located(plan, "sm_90a", "attn-overlap-gemms").message == (
        "attn-overlap-gemms moves a persistent consumer's epilogue (attn.finalize and the stores after its steps) "
        "to the next block; this block has none there")


# --- pass options -------------------------------------------------------------------------------
@pytest.mark.parametrize("pipeline, message", [
    pytest.param("attn-tile,attn-hoist{block_m=64}",
                 "pass 'attn-hoist' has no option 'block_m' (its options: hoist, flat, lanes); attn-tile has it", id="block_m"),
    pytest.param("attn-tile,attn-analyze-masks,attn-warp-specialize{kv_layout=separate}",
                 "pass 'attn-warp-specialize' has no option 'kv_layout' (its options: consumers, producer, "
                 "pingpong, persistent, walk_order, q_blocks_per_cta); attn-alloc-smem has it", id="kv_layout"),
])
def test_an_option_of_another_pass_names_its_pass(pipeline, message):
    error = _compile_refused(pipeline)
    assert error.message == message
    option = message.split("'")[3]          # at the option in --pass-pipeline
    assert (error.span.line, error.span.col) == (1, pipeline.index(option + "=") + 1)


@pytest.mark.parametrize("example, arch, options, message", [
    pytest.param("mha", "sm_90a", {"attn-kernel-choices": {"split_mask": 1}},
                 "split_mask=true: it sits on attn.mask, and this kernel has none", id="choice-of-no-op"),
    pytest.param("mqa", "sm_80", {"attn-kernel-choices": {"interval_test": "pair"}},
                 "interval_test=pair: interval_test chooses how a row interval's scores are tested, and this "
                 "kernel's mask has none", id="interval-test-of-no-interval"),
    pytest.param("gemma2", "sm_90a", {"attn-kernel-choices": {"staged_o": 1}},
                 "staged_o=true: the sm_90a kernel cannot be built: staged_o needs a kernel with one query block "
                 "per CTA, no producer warpgroup", id="choice-the-kernel-cannot-take"),
    pytest.param("mha", "sm_80", {"attn-mask-kernels": {"holds": 1}},
                 "holds=1: an option of the block map's kernel, and no kernel here has one", id="map-of-no-mask"),
])
def test_an_option_nothing_would_read_is_refused_at_it(example, arch, options, message):
    # Options a kernel would silently ignore, or whose refusal was located at the source.
    pipeline = format_pipeline([PassSpec(s.name, {k: str(v) for k, v in options.get(s.name, {}).items()})
                                for s in target_pipeline(arch)])
    with pytest.raises(AttncError) as info:
        compile_file(f"examples/{example}.attn", CompileOptions(arch=arch, pass_pipeline=pipeline))
    name = next(iter(next(iter(options.values()))))
    assert info.value.message.split(": ", 1)[1].startswith(message), info.value.message
    assert (info.value.span.line, info.value.span.col) == (1, pipeline.index(name + "=") + 1)


def test_interval_test_is_recorded_only_where_a_row_interval_reads_it():
    assert "interval_test" not in _example_plan("mqa", "sm_80", "attn-kernel-choices")
    assert 'interval_test = "bits"' in _example_plan("sliding_window", "sm_80", "attn-kernel-choices")


def test_persistent_ctas_without_their_walk_are_refused_before_the_rotation():
    """persistent = true written on attn.warp_specialize of a plan whose roles have no
    walk over query blocks: attn-overlap-gemms refuses it at the role, before it looks
    for the walk's branch to move the epilogue into."""
    plan = _sub(_plan("sm_90a", "attn-insert-pipelines"), r"\}\) \{ranges = ", "}) {persistent = true, ranges = ",
                count=1)
    error = _located(plan, "sm_90a", "attn-overlap-gemms")
    assert "persistent = true on attn.warp_specialize, and role 'producer' has no walk over query blocks" \
        in error.message


# --- attributes and ops edited where a pass reads them (each was an internal error) ----------
def _rest(arch: str, after: str) -> str:
    """The passes of `arch`'s pipeline after `after`, as `attnc opt` runs them on its dump."""
    names = _pipeline(arch, target_pipeline(arch)[-1].name).split(",")
    return ",".join(names[[n.split("{")[0] for n in names].index(after) + 1:])


@pytest.mark.parametrize("example, arch, stage, old, new, message", [
    pytest.param("mha", "sm_80", "attn-warp-specialize", 'name = "kv", producer = "compute", space = "smem", '
                 'stages = 2 : i64', 'name = "kv", producer = "compute", space = "smem", stages = 3 : i64',
                 "attn-insert-pipelines: this step loads V 1 step ahead, and channel 'kv' has 3 stages",
                 id="ring-deeper-than-the-loads-ahead"),
    pytest.param("sliding_window", "sm_90a", "attn-hoist", 'tile_class_fn = @sliding_window_tile_class, ', "",
                 "attn.kernel has mask_kind = \"static\" and no function 'tile_class_fn' names", id="no-tile-class"),
    pytest.param("gemma2", "sm_80", "attn-hoist", 'mask_kind = "static"', 'mask_kind = "none"',
                 "attn.kernel has mask_kind = \"none\" and a kv_range function", id="no-mask-with-its-functions"),
    pytest.param("gemma2", "sm_90a", "attn-hoist", "kv_segments = 1 : i64", "kv_segments = 4 : i64",
                 "attn.kernel has kv_segments = 4, and its kv_range function @gemma2_kv_range returns 4 bounds",
                 id="segments-past-the-range"),
    pytest.param("mha", "sm_80", "attn-hoist", "param_shapes = [], ", "",
                 "attribute 'param_shapes' of attn.kernel must be an array, got none", id="no-param-shapes"),
    pytest.param("mha", "sm_80", "attn-hoist", 'dtype = "bf16"', 'dtype = ""',
                 "attn-warp-specialize: attribute dtype = \"\" but q is a tensor of bf16", id="dtype-of-no-type"),
    pytest.param("mha", "sm_90a", "attn-warp-specialize", 'consumer = "consumer0", name = "kv"',
                 'consumer = "softmax1", name = "kv"',
                 "attn-alloc-smem: channel 'kv' has consumer = \"softmax1\", which is no role of this plan",
                 id="channel-of-no-role"),
    pytest.param("mha", "sm_90a", "attn-alloc-tmem", '"attn.get"(%2) {tile = "v"}', '"attn.get"(%2) {tile = "alpha"}',
                 "attn-insert-pipelines: this attn.get has tile = 'alpha', and channel 'kv' carries k, v",
                 id="get-of-a-tile-its-channel-lacks"),
    pytest.param("mha", "sm_90a", "attn-insert-pipelines", '{completes = "arrive", tile = "k"}',
                 '{completes = "mbarrier", tile = "k"}',
                 "attn-verify-pipeline: this slot write completes = 'mbarrier' with no mbarrier operand",
                 id="write-on-no-mbarrier"),
    pytest.param("docs_sink", "sm_100a", "attn-hoist", "{kind = \"qk\", q_tile = 0 : i64}",
                 "{kind = \"qk\", q_tile = -1 : i64}",
                 "attn-warp-specialize: an op of Q tile -1, and the CTA has q_tiles = 2", id="q-tile-past-the-cta"),
    pytest.param("mha", "sm_100a", "attn-warp-specialize", 'name = "p0", producer = "softmax0", space = "tmem"',
                 'name = "p0", producer = "softmax0", space = "smem"',
                 "a channel holds tile 'p' in shared memory, where the kernels keep only q, k, v, o",
                 id="p-in-shared-memory"),
    pytest.param("mha", "sm_80", "attn-insert-pipelines", 'name = "kv", producer = "compute", space = "smem", '
                 'stages = 2 : i64', 'name = "kv", producer = "compute", space = "smem", stages = 32 : i64',
                 "attn-kernel-choices: shared memory plan needs 1081344 bytes", id="stages-past-the-budget"),
    pytest.param("mha", "sm_100a", "attn-alloc-tmem", 'name = "s1", producer = "mma", space = "tmem", stages = 1 : i64',
                 'name = "s1", producer = "mma", space = "tmem", stages = 1048576 : i64',
                 "attn-insert-pipelines: channel 's1' has stages = 1048576 and its buffer tS1 holds 1",
                 id="stages-apart-from-the-buffers"),
    pytest.param("gemma2", "sm_90a", "attn-tile", 'dtype = "bf16"', 'dtype = "f8"',
                 'attribute dtype = "f8": q, k and v are "bf16" or "f16"', id="dtype-of-no-element"),
    pytest.param("gemma2", "sm_90a", "attn-tile", "block_m = 128 : i64", "block_m = 64 : i64",
                 "the kernel's attributes (block_m, head_dim_qk, dtype) make Q's tile !attn.tile<[64, 128], bf16, "
                 "\"smem\">, but the program loads !attn.tile<[128, 128], bf16, \"smem\">", id="block-m-apart-from-q"),
    pytest.param("gemma2", "sm_90a", "attn-tile", "num_warps = 12 : i64", "num_warps = 7 : i64",
                 "attribute num_warps = 7: sm_90a's kernel layout uses 8, 12 or 16 warps", id="warps-of-no-layout"),
    pytest.param("mha", "sm_80", "attn-kernel-choices", 'variant = "mha"', 'variant = ""',
                 'attribute variant = "": a variant\'s name is an identifier', id="variant-of-no-name"),
])
def test_an_edit_a_pass_reads_is_refused_not_a_crash(example, arch, stage, old, new, message):
    plan = _replaced(_example_plan(example, arch, stage), old, new)
    error = _located(plan, arch, _rest(arch, stage))
    assert message in error.message


def test_a_channel_of_no_role_is_named_once_at_its_op():
    plan = _replaced(_example_plan("mha", "sm_90a", "attn-insert-pipelines"), 'consumer = "consumer0", name = "q"',
                     'consumer = "ghost", name = "q"')
    error = _located(plan, "sm_90a", "attn-verify-pipeline")
    assert error.message == ("attn-verify-pipeline: channel 'q' has consumer = \"ghost\", which is no role of this "
                             "plan (consumer0, consumer1, producer)")
    assert error.note == 'at attn.channel (name = "q"), made by attn-warp-specialize'


@pytest.mark.parametrize("example, arch, old, new", [
    pytest.param("sliding_window", "sm_90a", 'tile_class_fn = @sliding_window_tile_class, ', "", id="no-tile-class"),
    pytest.param("gemma2", "sm_80", 'mask_kind = "static"', 'mask_kind = "none"', id="no-mask-with-its-functions"),
    pytest.param("gemma2", "sm_90a", "kv_segments = 1 : i64", "kv_segments = 4 : i64", id="segments-past-the-range"),
])
def test_attn_analyze_masks_makes_an_edited_analysis_afresh(example, arch, old, new):
    """The first three refusals above say to run attn-analyze-masks again: it replaces an
    analysis that fails their checks with the one it makes of the mask."""
    from attnc.driver import optimize_mlir
    from attnc.ir import attention_ops

    def analysis(text: str) -> dict:
        module = optimize_mlir(text, "plan.mlir", CompileOptions(arch=arch, pass_pipeline="attn-analyze-masks"))
        op = attention_ops(module)[0]
        keys = ("mask_kind", "tile_class_fn", "kv_range_fn", "kv_segments")
        # a function the edit no longer names stays, and the new one takes a suffix
        return {k: re.sub(r"_\d+$", "", str(op.attributes[k])) for k in keys if k in op.attributes}

    plan = _example_plan(example, arch, "attn-hoist")
    made = analysis(plan)
    assert made["mask_kind"] == '"static"' and len(made) == 4
    assert analysis(_replaced(plan, old, new)) == made


def test_a_cooperative_load_without_its_ahead_is_refused():
    plan = _plan("sm_90a", "attn-insert-pipelines", {"attn-tile": {"block_m": 64}})
    plan = _replaced(plan, '{ahead = 3 : i64, operand = "k"}', '{operand = "k"}')     # the KV loop's
    error = _located(plan, "sm_90a", "attn-overlap-gemms")
    assert "attn-overlap-gemms: this K load of the cooperative KV step has no `ahead`" in error.message


def test_a_put_on_a_channel_outside_the_roles_declarations_is_refused():
    """Q's channel moved above attn.warp_specialize, out of the channels it declares: the
    put on it is refused at the put."""
    lines = _example_plan("mha", "sm_80", "attn-alloc-tmem").split("\n")
    at = next(k for k, line in enumerate(lines) if '"attn.warp_specialize"() ({' in line)
    assert 'name = "q"' in lines[at + 1]
    lines[at], lines[at + 1] = lines[at + 1], lines[at]
    error = _located("\n".join(lines), "sm_80", _rest("sm_80", "attn-alloc-tmem"))
    assert "attn-insert-pipelines: this attn.put is on channel 'q', which is not among the channels " \
           "attn.warp_specialize declares (kv)" in error.message
