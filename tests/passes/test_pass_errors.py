"""The errors of the passes (attnc/passes/*.py and the scheduling code they call,
attnc/schedule/*.py) that no other test triggered, each triggered here as a user would
trigger it -- an edited dump run through `attnc opt` (`optimize_mlir`), an example
compiled with `--pass-pipeline` and pass options, or a `--load-pass` file -- and checked
by its message and, where the error is located, by its location.

The dumps are mha's, made once per stage (`_plan`); each edit asserts that the text it
changes is there, so an edit that no longer applies fails instead of passing quietly.
"""
from __future__ import annotations

import functools
import re
import textwrap

import pytest

from attnc.driver import CompileOptions, compile_file, optimize_mlir
from attnc.errors import AttncError
from attnc.passes.pipelines import PassSpec, format_pipeline, target_pipeline

SM90A_ONE_CONSUMER = {"attn-tile": {"block_m": 64}, "attn-warp-specialize": {"consumers": 1, "producer": 1}}


# --- helpers ----------------------------------------------------------------------------
def _pipeline(arch: str, until: str, options: dict | None = None) -> str:
    """The target's pipeline up to and including `until`, with `options` per pass name."""
    specs = target_pipeline(arch)
    specs = specs[:[s.name for s in specs].index(until) + 1]
    options = options or {}
    return format_pipeline([PassSpec(s.name, {k: str(v) for k, v in options.get(s.name, {}).items()})
                            for s in specs])


@functools.lru_cache(maxsize=None)
def _plan_text(arch: str, until: str, options: tuple) -> str:
    pipeline = _pipeline(arch, until, {name: dict(opts) for name, opts in options})
    return compile_file("examples/mha.attn", CompileOptions(arch=arch, pass_pipeline=pipeline)).text


def _plan(arch: str, until: str, options: dict | None = None) -> str:
    """mha's IR after `until` of `arch`'s pipeline (with pass `options`), as a dump holds it."""
    frozen = tuple(sorted((name, tuple(sorted(opts.items()))) for name, opts in (options or {}).items()))
    return _plan_text(arch, until, frozen)


def _refused(text: str, arch: str, pipeline: str) -> AttncError:
    """The error of `attnc opt` running `pipeline` on the IR `text`."""
    with pytest.raises(AttncError) as info:
        optimize_mlir(text, "plan.mlir", CompileOptions(arch=arch, pass_pipeline=pipeline))
    return info.value


def _replaced(text: str, old: str, new: str) -> str:
    assert old in text, f"the edit's text is not in the IR: {old!r}"
    return text.replace(old, new)


def _sub(text: str, pattern: str, new: str, count: int = 0) -> str:
    edited, n = re.subn(pattern, new, text, count=count)
    assert n, f"the edit's pattern is not in the IR: {pattern!r}"
    return edited


def _in_role(text: str, name: str, edit) -> str:
    """`text` with `edit` applied to the region of role `name` only."""
    end = text.index(f'}}) {{name = "{name}"')
    start = text.rindex('"attn.role"() ({', 0, end)
    return text[:start] + edit(text[start:end]) + text[end:]


def _loop_line(role: str, pattern: str) -> re.Match:
    """The first line inside the role's KV loop that matches `pattern`."""
    found = re.compile(r"\n(\s*)(" + pattern + r")[^\n]*").search(role, role.index("scf.for"))
    assert found, f"no {pattern!r} in the KV loop"
    return found


# --- edits of one consumer warpgroup's KV step (sm_90a, before attn-overlap-gemms) --------
def _cta_barrier_first(role: str) -> str:
    at = _loop_line(role, r'"attn.mbarrier_wait"')
    return role[:at.start()] + f'\n{at.group(1)}"attn.cta_barrier"() : () -> ()' + role[at.start():]


def _rescale_twice(role: str) -> str:
    at = _loop_line(role, r'%\w+ = "attn.rescale"')
    return role[:at.end()] + "\n" + at.group(1) + re.sub(r"^%\w+", "%again", at.group(0).strip()) + role[at.end():]


def _no_k_release(role: str) -> str:
    at = _loop_line(role, r'"attn.mbarrier_arrive"')
    return role[:at.start()] + role[at.end():]


def _landed_before(role: str) -> str:
    """An attn.mma_wait (what attn-overlap-gemms writes) on Q's slot read."""
    q = re.search(r'\n(\s*)(%\w+) = "attn.slot_read"\([^)]*\) \{tile = "q"\} : \([^)]*\) -> (!attn.tile<[^>]*>)', role)
    assert q, "no read of Q's slot"
    wait = f'%landed = "attn.mma_wait"({q.group(2)}) {{pending = 0 : i64}} : ({q.group(3)}) -> {q.group(3)}'
    return role[:q.end()] + f"\n{q.group(1)}{wait}" + role[q.end():]


@pytest.mark.parametrize("edit, message", [
    pytest.param(_landed_before, "attn-overlap-gemms ran twice on role 'consumer0'", id="consumer-twice"),
    pytest.param(lambda r: _replaced(r, '} {kv_blocks = "all"}', "}"),
                 "attn-overlap-gemms: role 'consumer0' has no KV loop (scf.for with kv_blocks)", id="no-kv-loop"),
    pytest.param(_cta_barrier_first, "attn-overlap-gemms rotates the KV step attn-insert-pipelines makes for a "
                                     "consumer warpgroup, which has no attn.cta_barrier here", id="unknown-op"),
    pytest.param(_rescale_twice, "attn-overlap-gemms: a consumer's KV step has one attn.rescale of this kind",
                 id="op-twice"),
    pytest.param(_no_k_release, "attn-overlap-gemms: this KV loop has no k release op, which a consumer's step has",
                 id="op-missing"),
])
def test_overlap_gemms_refuses_a_consumer_step_it_cannot_rotate(edit, message):
    plan = _in_role(_plan("sm_90a", "attn-insert-pipelines"), "consumer0", edit)
    error = _refused(plan, "sm_90a", "attn-overlap-gemms")
    assert message in error.message
    assert error.span is not None


# --- edits of the plan (L3-L5) that a pass reads back ----------------------------------
def _sm80_l2_k_load_before_the_loop(text: str) -> str:
    """K's load moved above the KV loop, of the loop's first block."""
    lines = text.split("\n")
    load = next(k for k, line in enumerate(lines) if '{operand = "k"}' in line)
    loop = next(k for k, line in enumerate(lines) if "scf.for" in line)
    lo = re.search(r"scf.for %\w+ = (%\w+) to", lines[loop]).group(1)
    moved = _sub(lines.pop(load), r"(%\w+)\) \{operand", lo + ") {operand", count=1)
    lines.insert(loop, moved)
    return "\n".join(lines)


def _sm80_l2_v_loaded_twice(text: str) -> str:
    line = re.search(r'\n(\s*)%\w+ = ("attn.load"[^\n]*\{operand = "v"\}[^\n]*)', text)
    assert line, "no load of V"
    return text[:line.end()] + f"\n{line.group(1)}%again = {line.group(2)}" + text[line.end():]


PLAN_EDITS = [
    # (dump arch, dump stage, edit, pass run, message)
    pytest.param("sm_90a", "attn-overlap-gemms", lambda t: t, "attn-lower-sm80",
                 "attn-lower-sm80 lowers sm_80 plans; this one is for sm_90a: use attn-lower-sm90a",
                 id="lowering-of-another-target"),
    pytest.param("sm_80", "attn-alloc-smem", lambda t: _replaced(t, 'name = "sQ", offset = 0 : i64, ', 'name = "sQ", '),
                 "attn-insert-pipelines", "a buffer of channel 'q' has no offset", id="buffer-without-offset"),
    pytest.param("sm_80", "attn-insert-pipelines", lambda t: _replaced(t, 'name = "kv", producer', 'name = "kv2", producer'),
                 "attn-lower-sm80", "attn-lower-sm80: the plan has no K/V channel ('kv')", id="no-kv-channel"),
    pytest.param("sm_90a", "attn-overlap-gemms",
                 lambda t: _replaced(t, 'name = "consumer1", regs', 'name = "helper", regs'), "attn-lower-sm90a",
                 "attn-lower-sm90a: a producer plan has the roles producer, consumer0, ...; this one has producer, "
                 "consumer0, helper", id="producer-plan-roles"),
    pytest.param("sm_80", "attn-insert-pipelines", lambda t: _replaced(t, 'name = "compute", regs', 'name = "worker", regs'),
                 "attn-lower-sm80", "attn-lower-sm80: sm_80 builds a cooperative role 'compute' or (sm_90a) a producer "
                 "and consumer warpgroups; this plan has the roles worker", id="cooperative-role-name"),
    pytest.param("sm_100a", "attn-warp-specialize",
                 lambda t: _replaced(t, "block_m = 128 : i64, block_n = 128 : i64", "block_m = 128 : i64, block_n = 256 : i64"),
                 "attn-alloc-tmem", "tensor memory plan needs 768 columns (q_tiles x (block_n + V's head dim)) but sm_100a has 512",
                 id="tmem-over-budget"),
    pytest.param("sm_80", "attn-hoist", _sm80_l2_k_load_before_the_loop, "attn-warp-specialize",
                 "attn-warp-specialize: the cooperative role has no KV loop getting K, or no put and get of Q",
                 id="prefetch-no-k-in-loop"),
    pytest.param("sm_80", "attn-hoist", _sm80_l2_v_loaded_twice, "attn-warp-specialize",
                 "attn-warp-specialize: a KV loop of the cooperative role loads, puts and gets V once each, in that "
                 "order", id="prefetch-v-twice"),
    pytest.param("sm_90a", "attn-hoist",
                 lambda t: t.replace('!attn.tile<[128], f32, "reg">', '!attn.tile<[96], f32, "reg">'),
                 "attn-warp-specialize", "attn-warp-specialize: a tile of the query block has 96 rows, and attn-tile's "
                 "block_m is 128", id="consumer-rows-of-another-block"),
    pytest.param("sm_90a", "attn-insert-pipelines", lambda t: _replaced(t, "regs = 240 : i64", "regs = 100 : i64"),
                 "attn-verify-pipeline", "attn-verify-pipeline: role 'consumer0': register budget 100 must be a "
                 "multiple of 8 in [24, 256] (setmaxnreg)", id="verify-regs-not-setmaxnreg"),
    pytest.param("sm_90a", "attn-insert-pipelines",
                 lambda t: _replaced(_replaced(t, "regs = 240 : i64", "regs = 256 : i64"), "regs = 24 : i64", "regs = 256 : i64"),
                 "attn-verify-pipeline", "attn-verify-pipeline: register budgets of the warpgroups sum to 98304 "
                 "registers, more than the 65536 of the register file (setmaxnreg sets the four warps of a warpgroup "
                 "alike, to the largest budget of its roles: warpgroup 0: 256 (producer); warpgroup 1: 256 "
                 "(consumer0); warpgroup 2: 256 (consumer1)); lower a role's 'regs'", id="verify-regs-over-the-file"),
    # The MMA warp's 56 fit a sum by role (64,768 registers), but its warpgroup's four warps
    # (MMA, load, epilogue and the empty one) all take 56: a sum by warpgroup is over the file.
    pytest.param("sm_100a", "attn-insert-pipelines",
                 lambda t: _replaced(t, 'name = "mma", regs = 48 : i64', 'name = "mma", regs = 56 : i64'),
                 "attn-verify-pipeline", "attn-verify-pipeline: register budgets of the warpgroups sum to 66560 "
                 "registers, more than the 65536 of the register file (setmaxnreg sets the four warps of a warpgroup "
                 "alike, to the largest budget of its roles: warpgroup 0: 200 (softmax0); warpgroup 1: 200 "
                 "(softmax1); warpgroup 2: 64 (correction); warpgroup 3: 56 (mma, load, epilogue, empty)); lower a "
                 "role's 'regs'", id="verify-regs-of-a-shared-warpgroup"),
    pytest.param("sm_90a", "attn-insert-pipelines", lambda t: _replaced(t, "regs = 24 : i64", "regs = 100 : i64"),
                 "attn-kernel-choices", "the producer role's register budget 100 must be a multiple of 8 in [24, 256] "
                 "(setmaxnreg)", id="choices-producer-regs"),
]


@pytest.mark.parametrize("arch, stage, edit, run, message", PLAN_EDITS)
def test_an_edited_plan_is_refused_at_its_op(arch, stage, edit, run, message):
    error = _refused(edit(_plan(arch, stage)), arch, run)
    assert message in error.message
    assert error.span is not None


def test_setmaxnreg_budgets_need_two_consumer_warpgroups():
    plan = _plan("sm_90a", "attn-overlap-gemms", SM90A_ONE_CONSUMER)
    plan = _replaced(plan, 'name = "producer", regs = 0 : i64', 'name = "producer", regs = 24 : i64')
    plan = _replaced(plan, 'name = "consumer0", regs = 0 : i64', 'name = "consumer0", regs = 240 : i64')
    error = _refused(plan, "sm_90a", "attn-kernel-choices")
    assert "setmaxnreg budgets (regs = 24, 240) need two consumer warpgroups" in error.message
    assert error.span is not None


def test_a_consumer_of_two_warpgroups_is_refused_at_its_role():
    """consumer1 edited to 8 warps (12 consumer warps), with regs 0 and empty barriers
    counting its warps, so that the verifier the lowering runs first passes: each consumer
    role is one warpgroup of the kernel, refused at the role (plan_ir.followed_plan)."""
    plan = _replaced(_plan("sm_90a", "attn-overlap-gemms"), "warps = [8, 9, 10, 11]",
                     "warps = [8, 9, 10, 11, 12, 13, 14, 15]")
    plan = _sub(plan, r"regs = \d+ : i64", "regs = 0 : i64")
    plan = _sub(plan, r'count = 8( : i64, name = "mbar_[kv]_empty")', r"count = 12\1")
    error = _refused(plan, "sm_90a", "attn-lower-sm90a")
    assert error.message == ("attn-lower-sm90a: role 'consumer1' has warps [8, 9, 10, 11, 12, 13, 14, 15]; the "
                             "sm_90a kernel runs it on warps [8, 9, 10, 11] (the producer warpgroup first, then "
                             "each consumer warpgroup in order)")
    assert error.span is not None


def test_persistent_ctas_without_sm90a_are_refused_by_the_recipe():
    """sm_90a's producer plan retargeted to sm_80 with `persistent` (and without the
    range digests, which are not compared when absent): the lowering's plan for it
    refuses persistent CTAs outside sm_90a's producer plan."""
    plan = _replaced(_plan("sm_90a", "attn-overlap-gemms"), 'target = "sm_90a"', 'target = "sm_80"')
    plan = _sub(plan, r"\}\) \{ranges = \{[^}]*\}\}",
                "}) {persistent = true}", count=1)
    error = _refused(plan, "sm_80", "attn-lower-sm80")
    assert "persistent CTAs are sm_90a's producer warpgroup's kernel and sm_100a's: a plan with a producer role" \
        in error.message


@pytest.mark.parametrize("run", ["attn-lower-sm80", "attn-kernel-choices"])
def test_a_module_without_a_kernel_is_refused(run):
    error = _refused("module {\n}\n", "sm_80", run)
    assert error.message == f"{run} builds one attn.kernel per module, found 0"


def test_a_tile_op_no_role_runs_is_refused():
    plan = _replaced(_plan("sm_80", "attn-hoist"), '{kind = "pv"}', '{kind = "xv"}')
    error = _refused(plan, "sm_80", "attn-warp-specialize")
    assert "attn-warp-specialize: no role of the sm_80 recipe runs mma_xv" in error.message
    assert error.span is not None


def test_the_verifier_refuses_a_plan_past_its_state_bound():
    """attn-verify-pipeline does not pass a plan it could not explore (the bound lowered
    so that mha's plan passes it), and says how to go on."""
    error = _refused(_plan("sm_80", "attn-insert-pipelines"), "sm_80", "attn-verify-pipeline{max_states=10}")
    assert error.message == ("attn-verify-pipeline: channels 'q' and 'kv': more than 10 states, not verified (fewer "
                             "K/V stages explore fewer; attn-verify-pipeline{max_states=N} explores up to N)")
    assert error.span is not None


# --- user pass files and pass options ----------------------------------------------------
def _pass_file(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _compile_refused(pipeline: str, passes=(), arch: str = "sm_80") -> AttncError:
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(arch=arch, pass_pipeline=pipeline, load_passes=tuple(passes)))
    return info.value


OPTION_PASS = """
    from dataclasses import dataclass
    from typing import ClassVar
    from attnc.passes import Pass, register

    @register
    @dataclass(frozen=True)
    class WithOption(Pass):
        name: ClassVar[str] = "{name}"
        value: {type} = {default}

        def run(self, module):
            pass
"""


@pytest.mark.parametrize("name, type_, default, given, message", [
    ("errors-float-option", "float", "1.0", "big", "option 'value' of errors-float-option expects a finite number, "
                                                   "got 'big'"),
    ("errors-float-option", "float", "1.0", "inf", "option 'value' of errors-float-option expects a finite number, "
                                                   "got 'inf'"),
    ("errors-tuple-option", "tuple", "()", "1", "option 'value' of errors-tuple-option is declared tuple, which a "
                                              "pipeline cannot give: options are str, int, float or bool"),
])
def test_a_user_pass_option_a_pipeline_cannot_give(tmp_path, name, type_, default, given, message):
    path = _pass_file(tmp_path, f"{name.replace('-', '_')}.py", OPTION_PASS.format(name=name, type=type_, default=default))
    error = _compile_refused(f"attn-tile,{name}{{value={given}}}", [path])
    assert error.message == message
    assert error.span is not None           # at the pass in --pass-pipeline


def test_a_boolean_option_takes_true_or_false():
    error = _compile_refused("attn-tile,attn-hoist{hoist=maybe}")
    assert error.message == "option 'hoist' of attn-hoist expects true or false, got 'maybe'"
    assert error.span is not None


@pytest.mark.parametrize("file, body, message", [
    ("passes.txt", "x = 1\n", "': not a Python file"),
    ("listed_function.py", "def tag(module):\n    pass\n\nPASSES = [tag]\n", "tag is not a pass class"),
])
def test_a_pass_file_without_a_pass_class_is_refused(tmp_path, file, body, message):
    error = _compile_refused("attn-tile", [_pass_file(tmp_path, file, body)])
    assert message in error.message


def test_a_user_pass_can_give_the_plan_a_target_no_recipe_has(tmp_path):
    """attn-tile checks its target; a pass after it that sets another one is refused by
    the recipe attn-warp-specialize asks for."""
    body = """
        from dataclasses import dataclass
        from typing import ClassVar
        from attnc.ir import attention_ops, set_str
        from attnc.passes import Pass, register

        @register
        @dataclass(frozen=True)
        class Retarget(Pass):
            name: ClassVar[str] = "errors-retarget"

            def run(self, module):
                for op in attention_ops(module):
                    set_str(op, "target", "sm_75")
    """
    pipeline = "attn-tile,attn-analyze-masks,errors-retarget,attn-warp-specialize"
    error = _compile_refused(pipeline, [_pass_file(tmp_path, "retarget.py", body)])
    assert error.message == "unknown target 'sm_75'; targets are sm_80, sm_90a, sm_100a"
    assert error.span is not None
