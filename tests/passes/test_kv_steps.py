"""Note [Steps op by op] (attnc/backend/kv_steps.py): sm_80's KV steps are built from the
ops of the IR's KV loops, in their order -- the plan's order gives the kernel it always
gave, another order another kernel, and a body the patterns cannot build is refused at
its op."""
from __future__ import annotations

import re

import pytest
from mlir import ir

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
    steps = kv_steps(_compute(result.module), attention_ops(result.module)[0])
    assert steps.in_default_order(stages)
    assert R.built_op_by_op(_compute(result.module))
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


def _loop_line(plan: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """(start, end) of the nth line of the plan's first KV loop holding `needle`."""
    start = plan.index("scf.for")
    end = plan.index("kv_blocks", start)
    at = start
    for _ in range(nth + 1):
        at = plan.index(needle, at + 1)
        assert at < end, needle
    return plan.rindex("\n", 0, at) + 1, plan.index("\n", at) + 1


def _replace_in_loop(plan: str, needle: str, old: str, new: str) -> str:
    start, end = _loop_line(plan, needle)
    line = plan[start:end]
    assert old in line, (old, line)
    return plan[:start] + line.replace(old, new, 1) + plan[end:]


@pytest.mark.parametrize("needle, old, new, message", [
    # a load's distance: the slot the lowering takes from it and the ring the verifier reads would part
    ('operand = "k"', "ahead = 2 : i64", "ahead = 3 : i64",
     "ahead = 3: with 2 K/V stages a step loads K 2 steps ahead"),
    ('operand = "v"', "ahead = 1 : i64", "ahead = 0 : i64",
     "ahead = 0: with 2 K/V stages a step loads V 1 steps ahead"),
    # V from K's tensor
    ('operand = "v"', '"attn.load"(%arg2,', '"attn.load"(%arg1,',
     "loads V from the kernel's v at the block of its own"),
    # a GEMM of an unknown kind, a load of Q
    ('kind = "qk"', 'kind = "qk"', 'kind = "xx"', "a KV step's attn.mma is of qk or pv, not 'xx'"),
])
def test_edits_the_lowering_cannot_follow_are_refused_at_the_op(needle, old, new, message):
    with pytest.raises(AttncError, match=re.escape(message)) as info:
        _lower(_replace_in_loop(_plan(), needle, old, new))
    assert info.value.span is not None


@pytest.mark.parametrize("old, new, message", [
    # the prologue: the first steps' K in turn, Q from the kernel's q, no op without a pattern
    ('{ahead = 1 : i64, lean = false, operand = "k"}',
     '{ahead = 2 : i64, lean = false, operand = "k"}',
     "before the KV loops the role loads K of the first steps in turn (ahead = 1 next)"),
    ('"attn.load"(%arg0, %arg3, %arg4, %arg5) {operand = "q"}', '"attn.load"(%arg1, %arg3, %arg4, %arg5) {operand = "q"}',
     "the role loads Q once, from the kernel's q"),
    ('          %5 = "attn.fill"', '          gpu.barrier\n          %5 = "attn.fill"',
     "has no pattern for gpu.barrier before the KV loops"),
    # the step: V from the stage the verifier finds, one rescale, O carried from P.V
    ('"attn.slot_read"(%2, %arg10) {tile = "v"}', '"attn.slot_read"(%2, %arg14) {tile = "v"}',
     "attn-verify-pipeline: compute reads fill 0 of 'kv' (v) from slot 1 while it holds fill 1"),
    ('            %33 = "attn.mma"', '            %again = "attn.rescale"(%arg9, %27#3) {lazy = true} : '
     '(!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">\n'
     '            %33 = "attn.mma"', "a KV step has one attn.rescale"),
    ("scf.yield %27#1, %27#2, %33,", "scf.yield %27#1, %27#2, %32,",
     "the KV loop carries m, l and O from the softmax step and P.V"),
    # the epilogue: a wait for every copy, the finalize of the last loop's O, m and l
    ('"attn.cp_async_wait"() {pending = 0 : i64}', '"attn.cp_async_wait"() {pending = 1 : i64}',
     "after its key range the role waits for every copy (pending = 0)"),
    ('"attn.finalize"(%19#2, %19#0, %19#1', '"attn.finalize"(%19#2, %19#1, %19#0',
     "the finalize takes O, m and l from the last KV loop"),
])
def test_the_role_as_the_kernel_builds_it_or_refused_at_the_op(old, new, message):
    """Note [The role op by op]: mha's sm_80 plan, edited where the kernel cannot follow."""
    plan = _plan()
    assert plan.count(old) >= 1, old
    with pytest.raises(AttncError, match=re.escape(message)) as info:
        _lower(plan.replace(old, new, 1))
    assert info.value.span is not None


def test_an_op_of_another_dialect_in_a_step_is_refused():
    plan = _plan()
    start, _ = _loop_line(plan, '"attn.rescale"')
    with pytest.raises(AttncError, match="has no pattern for gpu.barrier in a KV loop"):
        _lower(plan[:start] + "            gpu.barrier\n" + plan[start:])


def test_hooks_stand_where_the_analysis_put_them():
    """A mask taken out of a mixed loop, or put into a full one, would be built as before:
    refused. So is a copy of a hook region that differs from the first."""
    text = _compile("sliding_window", _pipeline(until=CHOICES_PASS)).text
    mask = re.search(r'\n( *)%(\d+) = "attn.mask"\((%\d+), .*?\n\1\}\) \{[^\n]*\n', text, re.S)
    assert mask is not None
    cut = text[:mask.start()] + "\n" + text[mask.end():].replace(f"%{mask.group(2)}", mask.group(3), 1)
    with pytest.raises(AttncError, match=r"this KV loop \(of mixed key blocks\) has no attn.mask op"):
        _lower(cut)
    copies = text.count("arith.constant {attn.level = \"cta\"} 1024 : i32")
    assert copies >= 2
    at = text.rindex("arith.constant {attn.level = \"cta\"} 1024 : i32")
    edited = text[:at] + text[at:].replace("1024 : i32", "512 : i32", 1)
    with pytest.raises(AttncError, match="differs from the first copy's: the kernel computes each hook once"):
        _lower(edited)


def test_the_carried_values_start_where_the_kernel_starts_them():
    plan = _plan()
    assert plan.count("attn.fill") == 3
    with pytest.raises(AttncError, match="a KV loop starts m from an attn.fill of -inf"):
        _lower(plan.replace("value = 0xFF800000 : f32", "value = 0.000000e+00 : f32", 1))


def _moved_q(plan: str, after: str) -> str:
    """The plan with Q's load, slot write, commit and ring advance moved below the first
    line holding `after` after them (Note [Q before the range])."""
    lines = plan.splitlines()
    first = next(i for i, line in enumerate(lines) if '{operand = "q"}' in line and '"attn.load"' in line)
    moved, rest = lines[first:first + 4], lines[:first] + lines[first + 4:]
    assert [m.split('"')[1] for m in moved] == ["attn.load", "attn.slot_write", "attn.cp_async_commit",
                                                "attn.ring_advance"]
    at = next(i for i, line in enumerate(rest) if i >= first and after in line) + 1
    return "\n".join(rest[:at] + moved + rest[at:])


def test_the_prologue_is_built_in_its_order():
    """Note [The role op by op]: Q's copies issued after the key range is read, not before
    (Note [Q before the range]), is another kernel; issued after the first K's, Q would be
    read before it landed: refused at the read by the verifier the lowering runs."""
    plan = _compile("gemma2", _pipeline(until=CHOICES_PASS)).text
    after_range = _moved_q(plan, '"attn.kv_range"')
    assert build(compile_result_of(_lower(after_range))).ptx != build(compile_result_of(_lower(plan))).ptx
    with pytest.raises(AttncError, match="attn-verify-pipeline: compute reads fill 0 of 'q' \\(q\\) from slot 0 "
                                         "before its data landed"):
        _lower(_q_after_the_first_loads(plan))


def _q_after_the_first_loads(plan: str) -> str:
    """Q's copies moved to just before the first KV loop, after the first steps' K and V."""
    lines = plan.splitlines()
    loop = next(i for i, line in enumerate(lines) if "scf.for" in line)
    return _moved_q(plan, lines[loop - 1].strip())


def test_sm90a_steps_keep_the_plans_order():
    """Of sm_90a's producer and consumers the steps of the key range are built op by op
    (Notes [Loads op by op] and [Overlapped steps op by op]): the first step's K released
    after its softmax in one consumer warpgroup is refused as the two differing; a
    consumer's wait for Q before the range is checked op by op too (Note [Roles followed
    in full]), and Q read above its wait is refused at the read."""
    result = compile_file("examples/mha.attn", CompileOptions(arch="sm_90a", pass_pipeline=_sm90a_until_sync()))
    roles = R.role_ops(attention_ops(result.module)[0])
    assert roles and not any(R.built_op_by_op(r) for r in roles)
    assert [R.trips_op_by_op(r) for r in roles] == [True, True, True]
    text = result.text
    land = text.index('"attn.mma_wait"')
    start = text.rindex("\n", 0, text.index('"attn.mbarrier_arrive"', land)) + 1
    line = text[start:text.index("\n", start) + 1]
    softmax = text.index("\n", text.index('"attn.softmax_step"', start)) + 1
    moved = text[:start] + text[start + len(line):softmax] + line + text[softmax:]
    lower = CompileOptions(arch="sm_90a", pass_pipeline=",".join([CHOICES_PASS, LOWERING["sm_90a"]]))
    with pytest.raises(AttncError, match="the KV steps of role 'consumer1' differ from those of 'consumer0'"):
        optimize_mlir(moved, "plan.mlir", lower)
    consumer = text.index('name = "producer"')
    wait = text.index('"attn.mbarrier_wait"', consumer)
    wait_line = text[text.rindex("\n", 0, wait) + 1:text.index("\n", wait) + 1]
    read = text.index('"attn.slot_read"', wait)
    read_line = text[text.rindex("\n", 0, read) + 1:text.index("\n", read) + 1]
    assert text.index(read_line) == text.index(wait_line) + len(wait_line)
    swapped = text.replace(wait_line + read_line, read_line + wait_line, 1)
    with pytest.raises(AttncError, match=re.escape("before its key range a consumer warpgroup waits for Q's full "
                                                   "barrier and reads Q's slot, both at stage 0 (phase 0), and does "
                                                   "nothing else")):
        optimize_mlir(swapped, "plan.mlir", lower)


def _sm90a_until_sync() -> str:
    specs = target_pipeline("sm_90a")
    names = [s.name for s in specs]
    return format_pipeline(specs[:names.index("attn-overlap-gemms") + 1])


def test_the_top_partial_steps_are_built_from_the_first_mixed_loop():
    """Note [Key blocks top down]: sliding_window's range runs its mixed blocks above the
    fully kept ones first; the kernel's partial steps at the top of the range are built
    from that loop, those at the bottom from the last mixed loop (a choice set on the
    first loop's softmax only shows in the top ones)."""
    result = _compile("sliding_window", _pipeline(until=CHOICES_PASS))
    role, kernel = _compute(result.module), attention_ops(result.module)[0]
    mixed = [op for op in R.ops_in(R.role_block(role), ("scf.for",))
             if R.attrs_of(op).get("kv_blocks") == "mixed"]
    assert len(mixed) == 2
    with kernel.context:
        kernel.attributes["kv_loops"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 3)  # Note [Key loops]
        for op in R.ops_in(mixed[0].regions[0].blocks[0], ("attn.softmax_step",)):
            op.attributes["exp2_fma"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 4)
    steps = kv_steps(role, kernel)

    def exp2_fma(top: bool) -> int:
        return next(op for op in steps.body("partial", top) if op.name == "softmax_step").choice("exp2_fma")
    assert (exp2_fma(True), exp2_fma(False)) == (4, 0)
