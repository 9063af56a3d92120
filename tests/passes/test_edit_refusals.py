"""Errors of the passes (attnc/passes/*.py) and of the scheduling code they call
(attnc/schedule/*.py), each triggered here by an edit a user could make -- a hand-edited
dump run through `attnc opt` (`optimize_mlir`), or an edit of a compiled plan in Python --
and checked by its message and, where the error names an op, by its location. The plans
and edits are the other tests' (their helpers are imported).

Not tested, as no input reaches it: attn-overlap-gemms' "a persistent consumer's block has
no overlapped steps" (attnc/schedule/walk_ahead.py). issue_first_qk_ahead runs on a role
right after overlap_role rotated it, and overlap_role always leaves in the block of the
walk's branch (R.body_block) the scf.if over "the range has a step" whose then-block holds
the first step's attn.mma_wait (_Chain.build, _land); a role it cannot rotate is refused
by overlap_role first.
"""
from __future__ import annotations

import re

import pytest
from mlir import ir

from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir import roles as R
from attnc.passes.overlap_gemms import overlap
from attnc.passes.pipelines import LOWERING
from tests.passes.l1_text import module_text
from tests.passes.test_analyze_masks import error_of
from tests.passes.test_error_coverage import _located
from tests.passes.test_first_guess import _l4
from tests.passes.test_load_steps import _l5, producer, trip
from tests.passes.test_pass_errors import _in_role, _loop_line, _plan, _refused, _replaced
from tests.passes.test_walk import OVERLAPPED, compiled, lower
from tests.passes.test_walk_pairs import _dump, _refusal


def _line_of(rendered: str, lines: list[str]) -> str:
    """The line of the edited dump `lines` that the rendered error `rendered` points at."""
    at = re.match(r"pairs\.mlir:(\d+):\d+: error: ", rendered)
    assert at, rendered
    return lines[int(at.group(1)) - 1]


# --- attn-analyze-masks ---------------------------------------------------------------------
def test_a_key_bound_past_64_bits_is_refused():
    """A dump hand-edited to q_tiles = 2^56 (query blocks of 2^62 rows): for j >= 2i the
    first key of a block is 2^63 m_block, a constant the emitted kv_range cannot hold."""
    body = "    %i2 = arith.addi %i, %i : i32\n    %keep = arith.cmpi sge, %j, %i2 : i32"
    text = module_text("wide", body, block_n=1)
    err = error_of(_replaced(text, "block_m = 64 : i64,", f"block_m = 64 : i64, q_tiles = {1 << 56} : i64,"))
    assert err.message == ("the mask's integer arithmetic reaches beyond 64 bits (the mask analysis needs the "
                           "constant 9223372036854775808, beyond 64 bits): integers are exact up to 64 bits; "
                           "rewrite it with smaller values")
    assert (err.filename, err.span.line, err.span.col) == ("wide.attn", 2, 1)


# --- attn-overlap-gemms: the producer's step (load_ahead.py) ---------------------------------
def test_overlap_gemms_refuses_a_producer_step_loading_another_tile():
    """A Q load copied by hand into the producer's KV loop (sm_90a, before attn-overlap-gemms)."""
    result = _l5("mha")
    kernel = attention_ops(result.module)[0]
    block = R.role_block(producer(result))
    loop = next(op for op in R.ops_in(block, ("scf.for",)))
    q = next(op for op in R.ops_in(block, ("attn.load",)) if R.attrs_of(op)["operand"] == "q")
    with kernel.context:
        q.clone(ir.InsertionPoint(trip(loop)[1]))
    with pytest.raises(AttncError) as err:
        overlap(result.module)
    assert err.value.message == (
        "attn-overlap-gemms rotates the producer's KV step attn-insert-pipelines makes (K's and V's loads, each "
        "waiting for its empty slot and arriving on its full barrier), which has no attn.load like this one")
    assert err.value.span is not None


# --- attn-insert-pipelines: early_first (first_guess.py) -------------------------------------
def test_early_first_refuses_a_first_block_copy_written_to_no_slot():
    """docs_sink's L4 plan (sm_80) with a second load of K's first block (ahead = 0) that
    nothing writes into a slot."""
    plan = _l4()
    k = re.search(r'^(\s*)%\d+ = ("attn.load"\(%arg1, [^\n]*\{ahead = 0 : i64, operand = "k"\}[^\n]*)$', plan, re.M)
    assert k, "no load of K's first block"
    plan = plan[:k.end()] + f"\n{k.group(1)}%again = {k.group(2)}" + plan[k.end():]
    assert _located(plan, "sm_80", "attn-insert-pipelines").message == (
        "attn-insert-pipelines: early_first moves the first block's copies, each an attn.load written into its slot "
        "as a cp.async group and committed (Note [The guessed first block in the IR] in "
        "attnc/schedule/first_guess.py)")


# --- attn-warp-specialize: consumer rows (partition.py) ---------------------------------------
def test_a_tile_of_other_rows_than_the_query_blocks_is_refused():
    """An attn.fill of 64 rows added to mha's L3 program of 128-row blocks, split over two
    consumer warpgroups of 64 rows each (sm_90a, producer=1)."""
    plan = _plan("sm_90a", "attn-hoist")
    first = '      %2 = "attn.fill"() {value = 0xFF800000 : f32}'
    plan = _replaced(plan, first, '      %rows64 = "attn.fill"() {value = 0.0 : f32} : () -> '
                                  '!attn.tile<[64], f32, "reg">\n' + first)
    assert _refused(plan, "sm_90a", "attn-warp-specialize{producer=1}").message == \
        "attn-warp-specialize: a tile of the query block has 64 rows, and attn-tile's block_m is 128"


# --- the walk over query blocks (walk.py, walk_pairs.py) -------------------------------------
def test_a_pair_of_query_blocks_in_a_plan_of_several_roles_is_refused():
    """mha's persistent sm_90a plan with persistent taken off and every walk's order set to
    "pairs" (sm_80's two query blocks per CTA, which only a cooperative role runs)."""
    result = compiled("mha", OVERLAPPED)
    kernel = attention_ops(result.module)[0]
    with kernel.context:
        del R.warp_specialize_of(kernel).attributes[R.PERSISTENT]
        for walk in R.ops_in(kernel.regions[0].blocks[0], (R.WALK_BLOCK,)):
            walk.attributes["order"] = ir.StringAttr.get("pairs")
    with pytest.raises(AttncError) as err:
        lower(result.module)
    assert err.value.message == (
        "attn-lower-sm90a: two query blocks per CTA are the cooperative role's (Note [Two query blocks in the IR] in "
        "attnc/schedule/walk.py), and this plan has 3 roles")
    assert err.value.span is not None


def test_a_pair_whose_branch_tests_another_value_is_refused():
    """sm_80's pair of query blocks with the round's branch testing an arith.andi of the
    walk's flag instead of attn.walk_block's flag itself."""
    lines = _dump("attn-kernel-choices")
    at = next(k for k, line in enumerate(lines) if '"attn.walk_block"' in line)
    has = re.match(r"\s*(%\w+):4 = ", lines[at]).group(1)
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
    assert f"scf.if {has}#0 " in lines[at + 1]
    lines = lines[:at + 1] + [f"{indent}%both = arith.andi {has}#0, {has}#0 : i1",
                              lines[at + 1].replace(f"scf.if {has}#0 ", "scf.if %both ")] + lines[at + 2:]
    rendered = _refusal(lines, LOWERING["sm_80"])
    assert "error: attn-lower-sm80: the pair of query blocks is walked by an scf.for over attn.walk_rounds holding " \
           "attn.walk_block and the scf.if over its block (Note [The walk over query blocks] in " \
           "attnc/schedule/walk.py)" in rendered, rendered
    assert '"attn.walk_block"' in _line_of(rendered, lines)


def test_a_pair_without_kv_loops_is_refused():
    """sm_80's pair of query blocks (L4) with the kv_blocks marks taken off its KV loops."""
    lines = [re.sub(r' \{kv_blocks = "\w+"\}', "", line) for line in _dump("attn-alloc-tmem")]
    rendered = _refusal(lines, "attn-insert-pipelines")
    assert "error: attn-insert-pipelines: the cooperative role's block has no KV loop (scf.for with kv_blocks)" \
           in rendered, rendered
    assert '"attn.role"' in _line_of(rendered, lines)


def test_a_pair_finalizing_another_loops_values_is_refused():
    """sm_80's pair of query blocks (L4) whose finalize takes O, m and l from the
    next-to-last KV loop instead of the last."""
    lines = _dump("attn-alloc-tmem")
    loops = [re.match(r"\s*(%\w+):3 = scf.for ", line) for line in lines]
    before_last, last = [m.group(1) for m in loops if m][-2:]
    at = next(k for k, line in enumerate(lines) if '"attn.finalize"' in line)
    old = f'"attn.finalize"({last}#2, {last}#0, {last}#1,'
    assert old in lines[at]
    lines[at] = lines[at].replace(old, f'"attn.finalize"({before_last}#2, {before_last}#0, {before_last}#1,')
    rendered = _refusal(lines, "attn-insert-pipelines")
    assert "error: attn-insert-pipelines: the cooperative role's finalize takes O, m and l from the last KV loop" \
           in rendered, rendered
    assert '"attn.finalize"' in _line_of(rendered, lines)


# --- attn-verify-pipeline (explore.py) ---------------------------------------------------------
def _k_write_in_the_loop_as_a_rewrite(role: str) -> str:
    at = _loop_line(role, r'"attn.slot_write"\([^)]*\) \{completes = "group", tile = "k"\}')
    return role[:at.start()] + at.group(0).replace("{completes", "{rewrite, completes", 1) + role[at.end():]


def test_a_rewrite_of_a_fill_already_read_is_refused():
    """mha's sm_80 plan with the KV loop's write of K marked `rewrite` (as early_first's
    miss branch writes): the slot it writes holds fill 0, which the first step read."""
    plan = _in_role(_plan("sm_80", "attn-insert-pipelines"), "compute", _k_write_in_the_loop_as_a_rewrite)
    assert _located(plan, "sm_80", "attn-verify-pipeline").message == (
        "attn-verify-pipeline: compute rewrites slot 0 of 'kv' (k), which holds fill 0 already read: a rewrite "
        "replaces fill 0 before any thread reads it")
