"""Hand edits of a persistent CTA's walk over query blocks, and of the epilogue's block,
that the verifier does not see (they touch no synchronization) are refused at the op
rather than built as the default (Note [The walk followed in full] in
attnc/backend/role_shell.py)."""
import pytest
from mlir import ir
from mlir.dialects import arith

from attnc.errors import AttncError
from attnc.ir import attention_ops, to_text
from attnc.ir import roles as R
from attnc.ir.ops import int_constant
from tests.passes.test_wgmma_steps import plan, ptx_of


def role_of(result, name: str) -> ir.Operation:
    return next(r for r in R.role_ops(attention_ops(result.module)[0]) if R.name_of(r) == name)


def walk_loop(result, name: str) -> ir.Operation:
    return R.walk_branch(role_of(result, name)).parent


def top_ops(result, name: str) -> list[ir.Operation]:
    return [op.operation for op in R.role_block(role_of(result, name)).operations]


def _store_at_m_block_h_b(finish) -> None:
    """O's store in the previous block's epilogue `finish` takes (m_block, h, b)."""
    store = next(op.operation for op in finish.regions[0].blocks[0].operations if op.operation.name == "attn.store")
    b, m_block = store.operands[1], store.operands[3]
    store.operands[1], store.operands[3] = m_block, b


def edit_last_store_block(result):
    """The last round's O stored at (m_block, h, b) rather than (b, h, m_block)."""
    for name in ("consumer0", "consumer1"):
        _store_at_m_block_h_b([op for op in top_ops(result, name) if op.name == "scf.if"][-1])


def edit_previous_start(result):
    """The walk starts the previous round at 0 rather than -1: round 0's block would be
    stored before it ran."""
    for name in ("consumer0", "consumer1"):
        loop = walk_loop(result, name)
        at = next(k for k, v in enumerate(list(loop.operands)[3:]) if int_constant(v) == -1)
        with loop.location:
            zero = arith.ConstantOp(ir.IntegerType.get_signless(32), 0, ip=ir.InsertionPoint(loop))
        loop.operands[3 + at] = zero.result


def edit_carried_state(result):
    """The walk carries the previous block's m and l swapped."""
    for name in ("consumer0", "consumer1"):
        branch = R.walk_branch(role_of(result, name))
        yielded = list(branch.regions[0].blocks[0].operations)[-1].operation
        m, l = yielded.operands[5], yielded.operands[6]
        yielded.operands[5], yielded.operands[6] = l, m


def edit_after_producer_walk(result):
    """A second load of Q after the producer's walk, outside any round."""
    loop = walk_loop(result, "producer")
    q = next(op for op in R.ops_in(R.walk_branch(role_of(result, "producer")).regions[0].blocks[0], ("attn.load",))
             if R.attrs_of(op)["operand"] == "q")
    clone = q.clone(ir.InsertionPoint(list(R.role_block(role_of(result, "producer")).operations)[-1]))
    for k, arg in enumerate(attention_ops(result.module)[0].regions[0].blocks[0].arguments):
        clone.operands[1 + k] = arg             # the kernel's block, outside the walk
    assert clone.operation.parent != loop


def edit_pingpong_head(result):
    """With ping-pong the finalize takes the sink of batch b rather than head h."""
    for name in ("consumer0", "consumer1"):
        finalize = R.ops_in(R.walk_branch(role_of(result, name)).regions[0].blocks[0], ("attn.finalize",))[-1]
        b = finalize.operands[3].owner.results[1]
        finalize.operands[3] = b


def edit_one_block_store(result):
    """Where the CTA runs one query block: O stored at (h, b, m_block)."""
    for name in ("consumer0", "consumer1"):
        store = R.ops_in(R.role_block(role_of(result, name)), ("attn.store",))[0]
        b, h = store.operands[1], store.operands[2]
        store.operands[1], store.operands[2] = h, b


def edit_round_without_block(result):
    """A round without a block yields the producer's K/V ring's stage and phase swapped."""
    other = list(R.walk_branch(role_of(result, "producer")).regions[1].blocks[0].operations)[-1].operation
    stage, phase = other.operands[0], other.operands[1]
    other.operands[0], other.operands[1] = phase, stage


def edit_second_walk_block(result):
    """A second attn.walk_block of the round in the walk's body."""
    item = R.walk_branch(role_of(result, "producer")).operands[0].owner
    item.operation.clone(ir.InsertionPoint(item.operation))


def _finish(block) -> ir.Operation:
    """The previous block's epilogue in `block`: the scf.if that begins with attn.walk_block."""
    return next(op.operation for op in block.operations if op.operation.name == "scf.if"
                and op.operation.regions[0].blocks[0].operations[0].operation.name == R.WALK_BLOCK)


def _range_else_finish(result, name: str) -> ir.Operation:
    """Role `name`'s previous block's epilogue where the key range has no step."""
    scf_if = next(op for op in R.walk_branch(role_of(result, name)).regions[0].blocks[0].operations
                  if op.operation.name == "scf.if").operation
    return _finish(scf_if.regions[1].blocks[0])


def edit_range_else_twice(result):
    """The previous block stored twice where the key range has no step."""
    for name in ("consumer0", "consumer1"):
        finish = _range_else_finish(result, name)
        finish.clone(ir.InsertionPoint(finish))


def edit_range_else_store_block(result):
    """Where the key range has no step, the previous block stored at (m_block, h, b)."""
    for name in ("consumer0", "consumer1"):
        _store_at_m_block_h_b(_range_else_finish(result, name))


def edit_after_walk_twice(result):
    """The last block stored twice after the walk."""
    for name in ("consumer0", "consumer1"):
        finish = _finish(R.role_block(role_of(result, name)))
        finish.clone(ir.InsertionPoint(finish))


STORES = "the stores take O and the LSE from the finalize, at the block's (b, h, m_block)"


@pytest.mark.parametrize("edit,options,message", [
    (edit_last_store_block, "persistent=true", STORES),
    (edit_previous_start, "persistent=true", "the walk starts the previous round from -1"),
    (edit_carried_state, "persistent=true", "the walk carries the previous round's O, m and l on from round to "
                                            "round"),
    (edit_after_producer_walk, "persistent=true", "after its walk the producer of a persistent CTA does nothing "
                                                  "else, not attn.load"),
    (edit_pingpong_head, "persistent=true pingpong=true", "the finalize takes O, m and l from the scf.if over the "
                                                          "key range, and the block's head"),
    (edit_one_block_store, "", STORES),
    (edit_round_without_block, "persistent=true", "a round without a block carries every value on unchanged"),
    (edit_second_walk_block, "persistent=true", "a round of the walk takes its block (attn.walk_block of the "
                                                "round), runs the program where there is one"),
    (edit_range_else_twice, "persistent=true", "where the key range has no step a persistent CTA's role releases "
                                               "Q's slot, at Q's ring, then stores the previous round's block"),
    (edit_range_else_store_block, "persistent=true", STORES),
    (edit_after_walk_twice, "persistent=true", "after its walk a persistent CTA's consumer stores the last round's "
                                               "block, and does nothing else"),
])
def test_an_edit_of_the_walk_is_refused(edit, options, message):
    result = plan("mha", options)
    with attention_ops(result.module)[0].context:
        edit(result)
    with pytest.raises(AttncError) as err:
        ptx_of(to_text(result.module))
    assert message in str(err.value)
    assert "mha.attn:" in err.value.render()           # located at the op
