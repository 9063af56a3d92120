"""Note [Steps op by op] (attnc/backend/kv_steps.py): sm_80's KV steps are built from the
ops of the IR's KV loops, in their order -- the plan's order gives the kernel it always
gave, another order another kernel, and a body the patterns cannot build is refused at
its op."""
from __future__ import annotations

import re

import pytest

from attnc.backend.kv_steps import KvSteps, kv_steps
from attnc.backend.lowering import build
from attnc.driver import CompileOptions, compile_file, optimize_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir import roles as R
from attnc.passes.lower_kernel import compile_result_of
from attnc.passes.pipelines import CHOICES_PASS, LOWERING, format_pipeline, target_pipeline

PASS_FILE = "examples/passes/wait_v_early.py"
EXAMPLES = ["mha", "gemma2", "alibi", "docs_sink", "prefix_lm", "relative_bias", "sliding_window", "softcap"]


def _pipeline(stages: int | None = None, after_sync: str | None = None, until: str | None = None) -> str:
    """sm_80's pipeline, with attn-tile's stages, a pass right after attn-insert-pipelines,
    and stopped after `until`."""
    specs = target_pipeline("sm_80")
    names = [s.name for s in specs]
    text = format_pipeline(specs).split(",")
    if stages is not None:
        text[0] = f"attn-tile{{stages={stages}}}"
    if after_sync:
        text.insert(names.index("attn-insert-pipelines") + 1, after_sync)
    if until:
        text = text[:text.index(until) + 1] if until in text else text
    return ",".join(text)


def _compile(example: str, pipeline: str, passes=()):
    options = CompileOptions(arch="sm_80", pass_pipeline=pipeline, load_passes=tuple(passes))
    return compile_file(f"examples/{example}.attn", options)


def _compute(module):
    kernel = attention_ops(module)[0]
    return next(r for r in R.role_ops(kernel) if R.name_of(r) == "compute")


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize("stages", [1, 2, 3])
def test_the_plan_makes_the_default_steps(example, stages):
    """What attn-insert-pipelines makes is KvSteps.default (the order the kernel of a
    spec without IR is built in), the hooks' ops where the variant has them."""
    try:
        result = _compile(example, _pipeline(stages, until="attn-insert-pipelines"))
    except AttncError as e:
        pytest.skip(f"no {stages}-stage plan: {e.message}")
    steps = kv_steps(_compute(result.module))
    assert steps.in_default_order(stages)
    assert R.follows_step_order(_compute(result.module))
    default = KvSteps.default(stages).loops[0][1]
    for _, body in steps.loops:
        assert [op for op in default if op in body or op.name not in ("score_mod", "mask")] == \
            [op for op in body if op.name != "block_map_read"]


def _ptx(example: str, pipeline: str, passes=()) -> str:
    return build(compile_result_of(_compile(example, pipeline, passes).module)).ptx


@pytest.mark.parametrize("example", ["mha", "gemma2"])
def test_a_reordered_step_is_another_kernel(example):
    """examples/passes/wait_v_early.py moves the V wait above the softmax: the verifier
    takes it, and the kernel is another one -- the stage-1 order's, where the V wait
    already stands there."""
    options = dict(after_sync="wait-v-early")
    assert _ptx(example, _pipeline(**options), [PASS_FILE]) != _ptx(example, _pipeline())
    # One stage: V is waited for before the softmax already, and the pass changes nothing.
    assert _ptx(example, _pipeline(1, **options), [PASS_FILE]) == _ptx(example, _pipeline(1))


def test_dead_rows_default_off_for_a_reordered_step_and_refused_on():
    """Note [Dead rows]' first step is built in the plan's order: the choice defaults to
    off where the steps are reordered, and asked for, it is refused."""
    plan = _compile("gemma2", _pipeline(after_sync="wait-v-early", until=CHOICES_PASS), [PASS_FILE]).text
    assert "dead_rows = false" in plan
    assert "dead_rows = true" in _compile("gemma2", _pipeline(until=CHOICES_PASS)).text
    with pytest.raises(AttncError, match="dead_rows needs .* the KV steps' ops in the order the plan passes make"):
        optimize_mlir(plan.replace("dead_rows = false", "dead_rows = true"), "plan.mlir",
                      CompileOptions(arch="sm_80", pass_pipeline=LOWERING["sm_80"]))


def _lower(plan: str):
    return optimize_mlir(plan, "plan.mlir", CompileOptions(arch="sm_80", pass_pipeline=LOWERING["sm_80"]))


def _plan() -> str:
    """mha's sm_80 plan after attn-kernel-choices, as a dump holds it."""
    return _compile("mha", _pipeline(until=CHOICES_PASS)).text


def test_a_step_op_without_a_pattern_is_refused_at_it():
    plan = _plan()
    end = plan.index("scf.yield")
    fill = '%filled = "attn.fill"() {value = 0.0 : f32} : () -> !attn.tile<[128], f32, "reg">\n            '
    with pytest.raises(AttncError, match="has no pattern for attn.fill in a KV loop") as info:
        _lower(plan[:end] + fill + plan[end:])
    assert info.value.span is not None and info.value.filename == "plan.mlir"


def test_data_flow_edits_are_refused_at_the_op():
    """P.V reading the carried O instead of the rescaled one: refused at the P.V."""
    plan = _plan()
    pv = re.search(r'"attn.mma"\((%\d+#0), (%\d+), (%\d+)\) \{kind = "pv"', plan)
    carried = re.search(r'"attn.rescale"\((%arg\d+), ', plan).group(1)
    edited = plan.replace(pv.group(0), pv.group(0).replace(f", {pv.group(3)})", f", {carried})"))
    with pytest.raises(AttncError, match="operand 2 of this attn.mma is not what it reads there"):
        _lower(edited)


def test_sm90a_steps_keep_the_plans_order():
    """sm_90a's steps are not built op by op: a reordered consumer is refused at its role."""
    result = compile_file("examples/mha.attn", CompileOptions(arch="sm_90a", pass_pipeline=_sm90a_until_sync()))
    roles = R.role_ops(attention_ops(result.module)[0])
    assert roles and not any(R.follows_step_order(r) for r in roles)
    text = result.text
    softmax = text.rindex("\n", 0, text.index('"attn.softmax_step"')) + 1
    wait = text.rindex("\n", 0, text.index('"attn.mbarrier_wait"', softmax)) + 1
    line = text[wait:text.index("\n", wait) + 1]
    moved = text[:softmax] + line + text[softmax:wait] + text[wait + len(line):]
    with pytest.raises(AttncError, match="this role's synchronization was edited since"):
        optimize_mlir(moved, "plan.mlir", CompileOptions(arch="sm_90a", pass_pipeline=",".join(
            [CHOICES_PASS, LOWERING["sm_90a"]])))


def _sm90a_until_sync() -> str:
    specs = target_pipeline("sm_90a")
    names = [s.name for s in specs]
    return format_pipeline(specs[:names.index("attn-insert-pipelines") + 1])
