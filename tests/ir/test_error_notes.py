"""`error_at`'s note (attnc/ir/locations.py): an error at an op whose line is its
attention's -- every op a pass makes from the attention has it -- says which op it is and
the pass that made it (an op without an identifying attribute, by what its first operand
is); an error at an op with a line of its own (a hook's expression) or at the attention
itself says nothing more."""
from __future__ import annotations

import functools

from attnc.driver import CompileOptions, compile_file
from attnc.ir import attention_ops, error_at, hook_blocks
from attnc.ir import roles as R


@functools.cache
def _plan():
    """gemma2's sm_90a plan after attn-insert-pipelines."""
    pipeline = ("attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,"
                "attn-insert-pipelines")
    return compile_file("examples/gemma2.attn", CompileOptions(arch="sm_90a", pass_pipeline=pipeline))


def _kernel():
    return attention_ops(_plan().module)[0]


def test_an_op_a_pass_made_is_named_with_its_pass():
    kernel = _kernel()
    role = R.role_ops(kernel)[0]
    barrier = R.mbarrier_ops(kernel)[0]
    assert error_at(role, "bad").note == 'at attn.role (name = "producer"), made by attn-warp-specialize'
    assert error_at(barrier, "bad").note == \
        'at attn.mbarrier_init (name = "mbar_q_full"), made by attn-insert-pipelines'
    # an op without an identifying attribute is named by what its first operand is
    wait = R.ops_in(R.role_block(R.role_ops(kernel)[1]), (R.MBARRIER_WAIT,))[0]
    assert error_at(wait, "bad").note == "at attn.mbarrier_wait (on mbar_q_full), made by attn-insert-pipelines"
    error = error_at(role, "bad").located("examples/gemma2.attn", _plan().variant.source)
    assert error.render().endswith('\nexamples/gemma2.attn:2:1: note: at attn.role (name = "producer"), made by '
                                   'attn-warp-specialize'), error.render()


def test_a_kv_loop_is_named_by_the_blocks_it_runs():
    kernel = _kernel()
    loops = [op for role in R.role_ops(kernel) for op in R.ops_in(R.role_block(role), ("scf.for",))
             if "kv_blocks" in op.attributes]
    notes = {error_at(loop, "bad").note for loop in loops}
    assert notes == {'at scf.for (kv_blocks = "mixed")', 'at scf.for (kv_blocks = "full")'}, notes


def test_an_op_with_a_line_of_its_own_and_the_attention_have_no_note():
    kernel = _kernel()
    hook_op = next(op for block in hook_blocks(kernel) for op in block.operations if op.name == "math.tanh")
    error = error_at(hook_op, "bad")
    assert error.note is None and (error.span.line, error.span.col) != (2, 1)
    assert error_at(kernel, "bad").note is None
    assert error_at(kernel, "bad", note="given").note == "given"
