"""The guessed first block in the L5 IR (Note [The guessed first block in the IR] in
attnc/schedule/first_guess.py), edited by hand as a user would: attn-verify-pipeline runs
the role with the guess at the range's top and below it, so an edit unsound either way is
refused at its op; the sm_80 lowering builds the guess, its copies and its miss branch as
they stand, and refuses an edit it would otherwise build as something else."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from attnc.driver import CompileOptions, compile_file, optimize_mlir
from attnc.errors import AttncError
from tests.passes.test_pass_errors import _pipeline

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _plan(until: str) -> str:
    """docs_sink's sm_80 IR after `until` (the role reads the block map's range)."""
    options = CompileOptions(arch="sm_80", pass_pipeline=_pipeline("sm_80", until))
    return compile_file("examples/docs_sink.attn", options).text


def _refused(text: str, pipeline: str) -> AttncError:
    with pytest.raises(AttncError) as info:
        optimize_mlir(text, "plan.mlir", CompileOptions(arch="sm_80", pass_pipeline=pipeline))
    return info.value


def _edit(text: str, pattern: str, new: str) -> str:
    edited, n = re.subn(pattern, new, text, count=1, flags=re.M)
    assert n, pattern
    return edited


GUESS = r'%(\d+) = "attn.first_block_guess"'
MISS_WAIT = r'^\s*"attn.cp_async_wait"\(\) \{pending = 0 : i64\}.*\n(?=\s*%\d+ = "attn.load"\(%arg1)'


def test_the_plan_is_sound_and_builds():
    """The default plan passes the check both ways and lowers to the kernel (the PTX of the
    guess is tests/backend/test_first_before_map.py's)."""
    optimize_mlir(_plan("attn-insert-pipelines"), "plan.mlir",
                  CompileOptions(arch="sm_80", pass_pipeline="attn-verify-pipeline"))


def test_a_miss_that_rewrites_before_the_guess_landed_is_refused():
    """Without the branch's wait for every copy, the guessed K may still be landing in slot
    0 when the miss writes it again."""
    plan = _edit(_plan("attn-insert-pipelines"), MISS_WAIT, "")
    error = _refused(plan, "attn-verify-pipeline")
    assert error.message == ("attn-verify-pipeline: compute (its first block guessed wrong) rewrites slot 0 of 'kv' "
                             "(k) before the copies of fill 0 landed: wait for them first (attn.cp_async_wait)")
    assert error.span is not None


def test_a_guess_unsound_only_where_it_hits_is_refused():
    """The guessed K and V in one cp.async group (K's commit removed): a miss waits for
    every copy and is sound, but where the guess is the range's top the first step's wait
    leaves that group in flight -- the run with the guess at the top refuses the read."""
    plan = _plan("attn-insert-pipelines")
    guess_k = re.search(GUESS + r'.*\n.*\n.*\n(\s*"attn.cp_async_commit".*\n)', plan)
    edited = plan[:guess_k.start(2)] + plan[guess_k.end(2):]
    error = _refused(edited, "attn-verify-pipeline")
    assert error.message == ("attn-verify-pipeline: compute (its first block guessed right) reads fill 0 of 'kv' (k) "
                             "from slot 0 before its data landed")


def test_a_rewrite_of_a_slot_that_holds_no_unread_fill_is_refused():
    plan = _edit(_plan("attn-insert-pipelines"), r'(\{completes = "group", )(tile = "k"\}.*\n(?:.*\n){2}\s*.*scf.for)',
                 r"\1rewrite, \2")
    error = _refused(plan, "attn-verify-pipeline")
    assert error.message == ("attn-verify-pipeline: this rewrite of slot 1 of 'kv' (k) replaces no fill: the slot "
                             "was never written")


@pytest.mark.parametrize("edit, message", [
    pytest.param(lambda p: _edit(p, r'(%\d+ = "attn.load"\(%arg1, %arg5, %arg6, )%(\d+)(\) \{ahead = 0 : i64, lean)',
                                 r"\1%arg7\3"),
                 "before the KV loops the role loads K of the first steps in turn (ahead = 0 next), from the "
                 "kernel's k, at the guessed first block (Note [The role op by op])", id="guessed-k-elsewhere"),
    pytest.param(lambda p: _edit(p, r'(scf.if %\d+ \{\n(?:.*\n){4}\s*%\d+ = "attn.load"\(%arg2, %arg5, %arg6, )%\d+',
                                 r"\1%" + re.search(GUESS, p).group(1)),
                 "right after the key range, where the range has a block and its top is not the guess (lo < hi "
                 "and top != guess, as attn-insert-pipelines writes it), the role waits for every copy "
                 "(pending = 0) and loads K and V again at the first KV loop's first block (ahead = 0), each a "
                 "rewrite of its slot and a cp.async group, with no else branch (Note [The guessed first block "
                 "in the IR] in attnc/schedule/first_guess.py)", id="miss-reloads-v-at-the-guess"),
])
def test_the_lowering_refuses_a_guess_it_would_build_otherwise(edit, message):
    plan = edit(_plan("attn-kernel-choices"))
    error = _refused(plan, "attn-lower-sm80")
    assert error.message.endswith(message), error.message
    assert error.span is not None


def test_an_edited_miss_test_is_refused():
    """The branch's test is the key range as made (Note [The key range as made]): taking
    the miss where the guess hits would be another kernel's."""
    plan = _edit(_plan("attn-kernel-choices"), r"arith.cmpi ne, (%\d+), (%\d+)", r"arith.cmpi eq, \1, \2")
    error = _refused(plan, "attn-lower-sm80")
    assert "the tests of the branches of role 'compute' as the key range" in error.message, error.message


def _unrecorded(plan: str) -> str:
    """`plan` without the role's key range as made (`ranges`, Note [The key range as made]):
    a hand-written plan, whose branches the lowering does not compare with the plan's."""
    return _edit(plan, r"\{ranges = \{compute = \"\w+\"\}\}", "")


def _guess_again(plan: str) -> str:
    """A second guess after the guessed copies, before the key range."""
    found = re.search(r'^(\s*)%\d+ = ("attn.first_block_guess"\(.*)$', plan, re.M)
    at = plan.index('"attn.block_map_range"', found.end())
    at = plan.rindex("\n", 0, at) + 1
    return plan[:at] + found.group(1) + "%again = " + found.group(2) + "\n" + plan[at:]


MISS_TEST = ("right after the key range, where the range has a block and its top is not the guess (lo < hi and "
             "top != guess, as attn-insert-pipelines writes it)")


def _never_missing(plan: str, after_k1: bool, never: bool = True) -> str:
    """The miss branch taken on `guess != guess` (never, with `never`), and with `after_k1`
    moved after the copy of K's second block: the verifier runs the branch as written, so
    the kernel must be built from the branch as written or refused (built from its own
    test, the moved branch's rewrite of K would be among the groups the first step leaves
    in flight)."""
    found = re.search(r'^(\s*)scf.if (%\d+) \{\n(?:.*\n)*?\s*\} loc.*\n', plan, re.M)
    guess = "%" + re.search(GUESS, plan).group(1)
    branch = found.group(0)
    if never:
        branch = branch.replace(f"scf.if {found.group(2)} ", "scf.if %never ", 1)
        branch = f"{found.group(1)}%never = arith.cmpi ne, {guess}, {guess} : i32\n" + branch
    plan = plan[:found.start()] + plan[found.end():]
    at = found.start()
    if after_k1:
        at = re.search(r'"attn.load"\(%arg1, .*\{ahead = 1 .*\n.*\n.*cp_async_commit.*\n', plan).end()
    return plan[:at] + branch + plan[at:]


def _without_miss(plan: str) -> str:
    found = re.search(r'^\s*scf.if %\d+ \{\n(?:.*\n)*?\s*\} loc.*\n', plan, re.M)
    return plan[:found.start()] + plan[found.end():]


@pytest.mark.parametrize("edit, message", [
    pytest.param(_guess_again, "the role guesses its first block once, before it reads its key range or copies K and "
                               "V", id="guessed-twice"),
    pytest.param(lambda p: _edit(p, r'("attn.first_block_guess"\()%arg7, %arg5', r"\1%arg5, %arg7"),
                 "the guess is of the query block whose key range the role reads from its block map, "
                 "(m_block, b, h) as "
                 "attn.block_map_range takes them", id="another-block"),
    pytest.param(_without_miss, "the guessed first block's copies are loaded again in an scf.if after the key range",
                 id="no-miss-branch"),
    pytest.param(lambda p: _never_missing(p, after_k1=False), MISS_TEST, id="miss-test-edited"),
    pytest.param(lambda p: _never_missing(p, after_k1=True), MISS_TEST, id="never-missing-after-later-copies"),
])
def test_a_hand_written_guess_is_checked_op_by_op(edit, message):
    """Without the recorded key range (a plan written by hand), the branch is not compared
    with the plan's; the prologue's patterns still refuse a guess they would build as
    another."""
    error = _refused(edit(_unrecorded(_plan("attn-kernel-choices"))), "attn-lower-sm80")
    assert message in error.message, error.message
    assert error.span is not None


@functools.cache
def _l4() -> str:
    """docs_sink's sm_80 L4 plan, tests/passes/first_guess.mlir's input."""
    text = (ROOT / "tests/passes/first_guess.mlir").read_text()
    return "\n".join(line for line in text.splitlines() if not line.startswith("//"))


FIRST_K = r'(%\d+ = "attn.load"\(%arg1, )%arg5(, %arg6, %\d+\) \{)ahead = 0 : i64, (operand = "k"\})'
FIRST_V = r'(%\d+ = "attn.load"\(%arg2, %arg5, %arg6, %\d+\) \{)ahead = 0 : i64, (operand = "v"\})'


def _range_twice(plan: str) -> str:
    found = re.search(r'^(\s*)%\d+:4 = ("attn.block_map_range".*)$', plan, re.M)
    return plan[:found.end()] + "\n" + found.group(1) + "%again:4 = " + found.group(2) + plan[found.end():]


def _k_at_the_range(plan: str) -> str:
    """The first K copy's batch index taken from the key range (a value the guess cannot take)."""
    lo = re.search(r'(%\d+):4 = "attn.block_map_range"', plan).group(1)
    return _edit(plan, FIRST_K, r"\1" + lo + r"#0\2ahead = 0 : i64, \3")


@pytest.mark.parametrize("edit, message", [
    pytest.param(_range_twice, "early_first needs a role that reads its key range once from a block map "
                               "(attn.block_map_range) before its KV loops", id="range-read-twice"),
    pytest.param(lambda p: _edit(_edit(p, FIRST_K, r"\1%arg5\2\3"), FIRST_V, r"\1\2"),
                 "early_first found no copy of the first block (attn.load with ahead = 0) after the key range",
                 id="no-first-copy"),
    pytest.param(_k_at_the_range, "early_first issues the first block's copies before the key range is read, and "
                                  "this value they take is made after it", id="copy-of-a-later-value"),
])
def test_the_pass_refuses_a_role_it_cannot_guess_for(edit, message):
    error = _refused(edit(_l4()), "attn-insert-pipelines")
    assert message in error.message, error.message
    assert error.span is not None


def test_a_guess_as_a_choice_on_the_first_load_is_refused():
    """The guessed first block is the role's ops, not an attribute of the K load."""
    plan = _plan("attn-kernel-choices")
    plan = _edit(plan, r'(%\d+ = "attn.load"\(%arg1, %arg5, %arg6, %\d+\) \{ahead = 1 : i64, )',
                 r"\1early_first = true, ")
    error = _refused(plan, "attn-lower-sm80")
    assert error.message.startswith("early_first on attn.load: no lowering reads it here; the guessed first block is "
                                    "the role's ops (attn.first_block_guess, its copies and its miss branch), which "
                                    "attn-insert-pipelines{early_first} writes"), error.message
    assert error.span is not None


def test_a_miss_after_later_copies_is_refused():
    """The miss branch moved after the copy of K's second block: a miss's rewrite of K is
    then among the groups the first step's wait leaves in flight."""
    plan = _never_missing(_unrecorded(_plan("attn-kernel-choices")), after_k1=True, never=False)
    error = _refused(plan, "attn-lower-sm80")
    assert error.message == ("attn-verify-pipeline: compute (its first block guessed wrong) reads fill 0 of 'kv' (k) "
                             "from slot 0 before its data landed")
