"""sm_80's compute role as attn-lower-sm80 reads it from the L5 plan (Notes [Steps op by
op] and [The role op by op] in attnc/backend/kv_steps.py and role_prologue.py), edited by hand where the
kernel cannot follow and refused at the op that differs: a role without a KV loop, an op
between the KV loops, the key range read twice, a load of another tensor before the
loops, Q or a K/V step's load missing there, a step without P.V, V read at another
stage value than K, S reaching the softmax past the score_mod or the mask, and a slot
written with another tile before the loops. Each edit is one attn-verify-pipeline (run
by the lowering first) finds sound, so that it is the reader that refuses it; the edited
op has its `loc` dropped, so the error names its line of the plan."""
from __future__ import annotations

import functools
import re

import pytest

from attnc.errors import AttncError
from attnc.passes.pipelines import CHOICES_PASS
from tests.passes.test_kv_steps import _compile, _lower, _pipeline


@functools.lru_cache(maxsize=None)
def _plan(example: str) -> str:
    """`example`'s sm_80 plan after attn-kernel-choices, as a dump holds it."""
    return _compile(example, _pipeline(until=CHOICES_PASS)).text


def _replace(text: str, old: str, new: str) -> str:
    """`text` with the first `old` replaced by `new`."""
    assert old in text, old
    return text.replace(old, new, 1)


def _line_of(text: str, needle: str) -> int:
    """The index of the first line of `text` that holds `needle`."""
    return next(k for k, line in enumerate(text.split("\n")) if needle in line)


def _unlocated(text: str, at: str | int) -> tuple[str, int]:
    """`text` with the location of the op whose first line is the first holding `at` (or
    the line of index `at`) dropped -- on the line that closes its regions, where it has
    some; an op written without one has none to drop -- so that the op is located at that
    line of plan.mlir; and that line's number (1-based)."""
    lines = text.split("\n")
    first = at if isinstance(at, int) else _line_of(text, at)
    last = first
    if lines[first].rstrip().endswith("{"):
        indent = " " * (len(lines[first]) - len(lines[first].lstrip()))
        last = next(k for k in range(first + 1, len(lines)) if lines[k].startswith(indent + "}"))
    lines[last] = re.sub(r" loc\(.*\)$", "", lines[last])
    return "\n".join(lines), first + 1


def _refused_at(text: str, at: str | int, message: str) -> None:
    """The lowering of `text` refuses it with `message`, located at the op whose first
    line is the first holding `at` (or the line of index `at`)."""
    text, line = _unlocated(text, at)
    with pytest.raises(AttncError, match=re.escape(message)) as info:
        _lower(text)
    rendered = str(info.value)
    assert re.match(rf"plan\.mlir:{line}:\d+: error: ", rendered), rendered


def test_a_role_without_a_kv_loop_is_refused():
    """mha's KV loop without its kv_blocks attribute: the role has no KV loop to build."""
    edited = _replace(_plan("mha"), ' {kv_blocks = "all"}', "")
    _refused_at(edited, '"attn.role"() ({', "role 'compute' has no KV loop (scf.for with kv_blocks)")


@pytest.mark.parametrize("op", [
    '"attn.cta_barrier"() : () -> ()',
    '%between = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128], f32, "reg">',
])
def test_an_op_between_the_kv_loops_is_refused(op):
    """gemma2's first two KV loops with a CTA barrier or a fill between them: the kernel
    builds its loops one after the other, with index arithmetic only between them."""
    plan = _plan("gemma2")
    at = plan.index("          %c1_i32_2 = arith.constant 1 : i32")
    edited = plan[:at] + f"          {op}\n" + plan[at:]
    name = op.split('"')[1]
    _refused_at(edited, plan.count("\n", 0, at), "the sm_80 lowering builds the KV loops one after the other, "
                                                  f"with nothing but index arithmetic between them, not {name}")


def test_the_key_range_read_twice_is_refused():
    """gemma2's attn.kv_range repeated before the KV loops (its copy's results unused)."""
    plan = _plan("gemma2")
    line = re.search(r' *%13:4 = "attn.kv_range".*\n', plan).group(0)
    edited = _replace(plan, line, line + line.replace("%13:4", "%again:4"))
    _refused_at(edited, "%again:4", "the role reads its key range once (Note [The role op by op])")


def test_a_load_of_another_tensor_before_the_kv_loops_is_refused():
    """A load of the output O beside Q's, before mha's KV loop."""
    plan = _plan("mha")
    line = re.search(r' *%3 = "attn.load"\(%arg0, %arg3, %arg4, %arg5\) \{operand = "q"\}.*\n', plan).group(0)
    extra = line.replace("%3 =", "%o_tile =").replace('operand = "q"', 'operand = "o"')
    _refused_at(_replace(plan, line, line + extra), "%o_tile =",
                "no load of 'o' before the KV loops (Note [The role op by op])")


def test_q_loaded_between_the_kv_loops_is_refused():
    """Q's copies moved out of the prologue are read before they land (the verifier's
    refusal), but for this: gemma2's first KV loop running no trips, Q's load, slot
    write and commit in a loop between it and the second, which starts at the first's
    first step, and every wait for every copy. Sound, but the kernel loads Q before its
    KV loops: refused at the first of them."""
    lines = _plan("gemma2").split("\n")
    at = next(k for k, line in enumerate(lines) if '{operand = "q"}' in line)
    q_ops = lines[at:at + 3]
    assert [op.split('"')[1] for op in q_ops] == ["attn.load", "attn.slot_write", "attn.cp_async_commit"]
    text = "\n".join(lines[:at] + lines[at + 3:])
    text = _replace(text, "scf.for %arg6 = %c0_i32_0 to %19 step", "scf.for %arg6 = %c0_i32_0 to %c0_i32_0 step")
    text = _replace(text, "scf.for %arg6 = %19 to %20 step", "scf.for %arg6 = %c0_i32_0 to %20 step")
    text = text.replace("pending = 2 : i64", "pending = 0 : i64")
    between = text.index("          %c1_i32_2 = arith.constant 1 : i32")
    q_loop = "\n".join(["          scf.for %q_trip = %c0_i32 to %c1_i32 step %c1_i32 : i32 {",
                        *("  " + op for op in q_ops), "          }", ""])
    edited = re.sub(r' \{ranges = \{compute = "[0-9a-f]+"\}\}', "", text[:between] + q_loop + text[between:])
    _refused_at(edited, "%28:11 = scf.for", "before its KV loops the role loads Q (Note [The role op by op])")


def _without_prologue_load(plan: str, first: str, ring: str, start: str) -> str:
    """mha's plan without the prologue's load whose line starts with `first` (with its
    slot write, commit and ring advance), the KV loop's ring of that tile carried from
    `start` instead of `ring`, and every wait for every copy."""
    lines = plan.split("\n")
    at = next(k for k, line in enumerate(lines) if line.startswith(first))
    text = "\n".join(lines[:at] + lines[at + 4:])
    return _replace(text, ring, start).replace("pending = 2 : i64", "pending = 0 : i64")


@pytest.mark.parametrize("first, ring, start", [
    # K of the second step (ahead = 1): the K ring starts where K of the first left it
    ('          %17 = "attn.load"', "%arg12 = %18#0, %arg13 = %18#1", "%arg12 = %14#0, %arg13 = %14#1"),
    # V of the first step (ahead = 0): the V ring starts at stage 0
    ('          %15 = "attn.load"', "%arg14 = %16#0, %arg15 = %16#1", "%arg14 = %c0_i32, %arg15 = %c0_i32"),
])
def test_a_step_load_missing_before_the_kv_loops_is_refused(first, ring, start):
    """One of the first steps' K and V loads taken out of mha's prologue, its ring started
    where the load left out would have left it: sound with every copy waited for, but the
    kernel loads K of the first S steps and V of the first S - 1 before its loops."""
    edited = _without_prologue_load(_plan("mha"), first, ring, start)
    _refused_at(edited, "scf.for", "before the KV loops the role loads K of the first 2 steps and V of the first 1, "
                                   "one per slot ahead (Note [The role op by op])")


def test_a_kv_loop_without_pv_is_refused():
    """mha's P.V erased, the loop carrying the rescaled O on instead."""
    plan = _plan("mha")
    pv = re.search(r' *%33 = "attn.mma".*\n', plan).group(0)
    edited = _replace(_replace(plan, pv, ""), "scf.yield %27#1, %27#2, %33,", "scf.yield %27#1, %27#2, %32,")
    _refused_at(edited, "scf.for", "this KV loop has no attn.mma pv, which the lowering's step needs (Note [Steps "
                                   "op by op])")


def test_v_read_at_another_stage_value_than_k_is_refused():
    """V read at a value equal to K's stage but another one (K's stage plus 0, with its
    own ring advance, so that the verifier sees V's ring advance each trip): the kernel
    reads K and V of one step at one ring stage."""
    plan = _plan("mha")
    edited = _replace(plan, '%28 = "attn.slot_read"(%2, %arg10) {tile = "v"}',
                      '%v_stage = arith.addi %arg10, %c0_i32 : i32\n'
                      '            %28 = "attn.slot_read"(%2, %v_stage) {tile = "v"}')
    advance = '%29:2 = "attn.ring_advance"(%arg10, %arg11) {stages = 2 : i64} : (i32, i32) -> (i32, i32)'
    edited = _replace(edited, advance, advance + '\n            %v_ring:2 = "attn.ring_advance"(%v_stage, %arg11) '
                                                 '{stages = 2 : i64} : (i32, i32) -> (i32, i32)')
    _refused_at(edited, '%28 = "attn.slot_read"', "the step reads K and V from the slot of its own step: one ring "
                                                   "stage (Note [Steps op by op])")


@pytest.mark.parametrize("old, new, at, op", [
    # the softmax on the score_mod's S, past the mask
    ('"attn.softmax_step"(%39, %arg7', '"attn.softmax_step"(%38, %arg7', '%40:4 = "attn.softmax_step"',
     "attn.softmax_step"),
    # the softmax on QK^T's S, past both hooks
    ('"attn.softmax_step"(%39, %arg7', '"attn.softmax_step"(%37, %arg7', '%40:4 = "attn.softmax_step"',
     "attn.softmax_step"),
    # the mask on QK^T's S, past the score_mod
    ('"attn.mask"(%38, %arg3', '"attn.mask"(%37, %arg3', '%39 = "attn.mask"', "attn.mask"),
])
def test_scores_past_a_hook_are_refused(old, new, at, op):
    """gemma2's first KV loop with S taken past its score_mod or its mask: the kernel
    applies the hooks to S in turn, then the softmax."""
    edited = _replace(_plan("gemma2"), old, new)
    _refused_at(edited, at, f"the sm_80 lowering builds a KV step's data flow as attn-tile makes it, and operand 0 "
                            f"of this {op} is not what it reads there (Note [Steps op by op])")


def test_a_slot_written_with_another_tile_before_the_kv_loops_is_refused():
    """The second step's K slot written with the first step's V tile, before mha's loop."""
    old = '"attn.slot_write"(%2, %14#0, %17)'
    edited = _replace(_plan("mha"), old, '"attn.slot_write"(%2, %14#0, %15)')
    _refused_at(edited, '"attn.slot_write"(%2, %14#0, %15)',
                "the sm_80 lowering builds a KV step's data flow as attn-tile makes it, and operand 2 of this "
                "attn.slot_write is not what it reads there (Note [Steps op by op])")


@pytest.mark.parametrize("old, new", [
    # a trip's block counted from another top than the range's (Note [Key blocks top down])
    ("%32 = arith.subi %18, %arg6 : i32", "%32 = arith.subi %17, %arg6 : i32"),
    # the blocks walked bottom up
    ("%32 = arith.subi %18, %arg6 : i32", "%32 = arith.addi %18, %arg6 : i32"),
])
def test_a_trip_at_another_block_is_refused(old, new):
    """gemma2's first KV loop visiting other blocks than its steps' (top - t): the kernel
    walks the key range as attn-analyze-masks made it, so the edit is refused."""
    edited = _replace(_plan("gemma2"), old, new)
    _refused_at(edited, '"attn.role"() ({', "attn-lower-sm80 builds the bounds of the KV loops and the tests of "
                                           "the branches of role 'compute' as the key range attn-analyze-masks gives")


def test_a_map_range_without_a_block_map_is_refused():
    """mha's role reading a block map's range: its mask reads no params, so the kernel has
    no map, and walks the range it has."""
    read = '          %map:4 = "attn.block_map_range"(%arg5, %arg3, %arg4) : (i32, i32, i32) -> (i32, i32, i32, i32)\n'
    plan = _plan("mha")
    at = plan.index('          %3 = "attn.load"(%arg0')
    _refused_at(plan[:at] + read + plan[at:], "%map:4", "attn.block_map_range: this kernel has no block map (its "
                                                        "mask reads no params)")
