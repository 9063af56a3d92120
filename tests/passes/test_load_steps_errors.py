"""sm_90a's producer warpgroup as attn-lower-sm90a reads it from the L5 plan (Note [Loads
op by op] in attnc/backend/load_steps.py), edited by hand where the kernel cannot follow
and refused at the op that differs: a producer without a KV loop, its KV loops outside
the scf.if over the key range, and its first KV loop starting K's ring from a constant
rather than from the advance past the first block's K. Each edit is one
attn-verify-pipeline (run by the lowering first) finds sound, so that it is the reader
that refuses it; the refused op has its `loc` dropped, so the error names its line of
the plan."""
from __future__ import annotations

import functools
import re

import pytest
from mlir import ir
from mlir.dialects import arith

from attnc.errors import AttncError
from attnc.ir import attention_ops, to_text
from attnc.ir import roles as R
from attnc.ir.context import parse_module
from attnc.passes.tile_program import KV_LOOP
from tests.passes.test_kv_steps_errors import _unlocated
from tests.passes.test_wgmma_steps import plan, ptx_of

EXAMPLES = ["mha", "gemma2"]


@functools.lru_cache(maxsize=None)
def _plan(example: str) -> str:
    """`example`'s sm_90a plan after attn-overlap-gemms, as a dump holds it."""
    return plan(example).text


def _producer_loops(kernel) -> list:
    role = next(r for r in R.role_ops(kernel) if R.name_of(r) == "producer")
    return [op for op in R.ops_in(R.role_block(role), ("scf.for",)) if KV_LOOP in op.attributes]


def _edited(example: str, edit) -> str:
    """`example`'s plan with `edit` applied to its attn.kernel, as text."""
    module = parse_module(_plan(example))
    kernel = attention_ops(module)[0]
    with kernel.context:
        edit(kernel)
    return to_text(module)


def _producer_lines(text: str) -> tuple[int, int]:
    """The indices of the first and last lines of the producer role's op in `text`."""
    lines = text.split("\n")
    last = next(k for k, line in enumerate(lines) if 'name = "producer"' in line and line.lstrip().startswith("})"))
    indent = lines[last][:len(lines[last]) - len(lines[last].lstrip())]
    first = next(k for k in range(last, -1, -1) if lines[k] == indent + '"attn.role"() ({')
    return first, last


def _first_loop_line(text: str) -> int:
    """The index of the first line of the producer's first loop in `text`."""
    first, last = _producer_lines(text)
    return next(k for k in range(first, last) if " scf.for " in text.split("\n")[k])


def _refused_at(text: str, at: int, message: str) -> None:
    """The lowering of `text` refuses it with `message`, located at the op whose first
    line has index `at`."""
    text, line = _unlocated(text, at)
    with pytest.raises(AttncError, match=re.escape(message)) as info:
        ptx_of(text)
    rendered = str(info.value)
    assert re.match(rf"plan\.mlir:{line}:\d+: error: ", rendered), rendered


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_producer_without_a_kv_loop_is_refused(example):
    """The producer's KV loops without their kv_blocks attribute."""
    def edit(kernel):
        loops = _producer_loops(kernel)
        assert loops
        for loop in loops:
            del loop.attributes[KV_LOOP]
    text = _edited(example, edit)
    _refused_at(text, _producer_lines(text)[0], "the producer has no KV loop (Note [Loads op by op])")


@pytest.mark.parametrize("example", EXAMPLES)
def test_producer_loops_outside_the_range_branch_are_refused(example):
    """The scf.if over the key range around the producer's KV loops taken away, its ops
    standing in the producer's program: the kernel builds the loads of the first and
    last blocks around its loops in that branch."""
    def edit(kernel):
        branch = _producer_loops(kernel)[0].operation.parent
        assert branch.name == "scf.if"
        for op in list(branch.regions[0].blocks[0].operations)[:-1]:     # all but its yield
            op.operation.move_before(branch)
        branch.erase()
    text = _edited(example, edit)
    _refused_at(text, _first_loop_line(text), "the producer's KV loops stand in one scf.if over the key range, as "
                                              "attn-overlap-gemms makes them (Note [Loads op by op])")


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_first_loop_starting_k_from_a_constant_stage_is_refused(example):
    """The first loop's K stage started from a constant 1, the stage the ring advance past
    the first block's K gives (so the verifier finds it sound), not from that advance."""
    def edit(kernel):
        loop = _producer_loops(kernel)[0]
        advance = loop.operands[3].owner
        assert advance.name == R.RING_ADVANCE
        with ir.InsertionPoint(loop), loop.location:
            one = arith.ConstantOp(ir.IntegerType.get_signless(32), 1)
        loop.operands[3] = one.result
    text = _edited(example, edit)
    _refused_at(text, _first_loop_line(text), "the producer's first KV loop starts K's ring a stage past the first "
                                              "block's (Note [Loads op by op])")
