"""Hand edits of sm_90a's key range after attn-overlap-gemms that the lowering does not
build as they stand are refused, not silently built as the default: what it takes as
the kernel's own is checked (`check_key_range` in attnc/backend/wgmma_steps.py), the
data flow of the steps around the loops is checked, and so is what stands around them
-- its else branch, the ops between its loops (Note [Roles followed in full] in
attnc/ir/roles.py; a persistent CTA's walk: tests/passes/test_walk_edits.py)."""
import pytest
from mlir import ir
from mlir.dialects import arith

from attnc.errors import AttncError
from attnc.ir import attention_ops, to_text
from attnc.ir import roles as R
from attnc.passes.tile_program import KV_LOOP
from tests.passes.test_wgmma_steps import plan, ptx_of


def role_of(result, name: str) -> ir.Operation:
    return next(r for r in R.role_ops(attention_ops(result.module)[0]) if R.name_of(r) == name)


def key_range(result, name: str):
    """(the scf.if over the key range, its KV loops, the ops of its then branch) of role `name`."""
    loops = [op for op in R.ops_in(R.role_block(role_of(result, name)), ("scf.for",)) if KV_LOOP in op.attributes]
    scf_if = loops[0].operation.parent
    return scf_if, loops, [o.operation for o in scf_if.regions[0].blocks[0].operations]


def _named(ops, name: str) -> list[ir.Operation]:
    return [op for op in ops if op.name == name]


def edit_persistent_else(result):
    for name in ("consumer0", "consumer1"):
        scf_if, _, _ = key_range(result, name)
        _named([o.operation for o in scf_if.regions[1].blocks[0].operations], R.MBARRIER_ARRIVE)[0].erase()


def edit_between_loops(result):
    _, loops, _ = key_range(result, "producer")
    with loops[1].location, ir.InsertionPoint(loops[1]):
        R.create(R.CTA_BARRIER)


def edit_stages(result):
    _, loops, _ = key_range(result, "producer")
    advance = _named([o.operation for o in loops[0].regions[0].blocks[0].operations], R.RING_ADVANCE)[0]
    advance.attributes["stages"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 2)


def edit_completes(result):
    _, _, ops = key_range(result, "producer")
    _named(ops, R.SLOT_WRITE)[0].attributes["completes"] = ir.StringAttr.get("store")


def edit_persistent_first(result):
    for name in ("consumer0", "consumer1"):
        _, loops, ops = key_range(result, name)
        release = next(op for op in _named(ops, R.MBARRIER_ARRIVE))
        release.move_before(loops[0].operation)


def edit_step(result):
    for name in ("producer", "consumer0", "consumer1"):
        _, loops, _ = key_range(result, name)
        for loop in loops:
            with loop.location:
                two = arith.ConstantOp(ir.IntegerType.get_signless(32), 2, ip=ir.InsertionPoint(loop))
            loop.operands[2] = two.result


def edit_softmax_start(result):
    for name in ("consumer0", "consumer1"):
        _, _, ops = key_range(result, name)
        softmax = _named(ops, "attn.softmax_step")[0]
        m, l = softmax.operands[1], softmax.operands[2]
        softmax.operands[1], softmax.operands[2] = l, m


def edit_yield(result):
    for name in ("consumer0", "consumer1"):
        _, _, ops = key_range(result, name)
        terminator = ops[-1]
        m, l = terminator.operands[0], terminator.operands[1]
        terminator.operands[0], terminator.operands[1] = l, m


def edit_condition(result):
    for name in ("producer", "consumer0", "consumer1"):
        scf_if, _, _ = key_range(result, name)
        test = scf_if.operands[0].owner
        test.attributes["predicate"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 5)     # sge


def edit_release_q_test(result):
    for name in ("consumer0", "consumer1"):
        _, _, ops = key_range(result, name)
        guarded = next(op for op in ops if op.name == "scf.if")
        test = guarded.operands[0]
        with guarded.location:
            both = arith.AndIOp(test, test, ip=ir.InsertionPoint(guarded))
        guarded.operands[0] = both.result


def edit_bounds(result):
    for name in ("producer", "consumer0", "consumer1"):
        _, loops, _ = key_range(result, name)
        loops[-1].operands[1] = loops[-1].operands[0]   # the range's top blocks dropped, by every role


def edit_total(result):
    for name in ("producer", "consumer0", "consumer1"):
        scf_if, _, _ = key_range(result, name)
        test = scf_if.operands[0].owner
        with scf_if.location:
            more = arith.AddIOp(test.operands[0], test.operands[0], ip=ir.InsertionPoint(test))
        test.operands[0] = more.result                  # 2 total > 0: the same test, written otherwise


def _block_ops(result) -> list[tuple[ir.Operation, ir.Operation]]:
    """Every KV loop of every role and its first op: its step's key block."""
    return [(loop, next(iter(loop.regions[0].blocks[0].operations)).operation)
            for name in ("producer", "consumer0", "consumer1") for loop in key_range(result, name)[1]]


def edit_block_top(result):
    """Every trip one block lower: %n = (top - 1) - t."""
    for loop, block in _block_ops(result):
        with loop.location:
            one = arith.ConstantOp(ir.IntegerType.get_signless(32), 1, ip=ir.InsertionPoint(loop))
            lower = arith.SubIOp(block.operands[0], one.result, ip=ir.InsertionPoint(loop))
        block.operands[0] = lower.result


def edit_block_up(result):
    """The blocks walked bottom up in the producer: %n = top + t."""
    _, block = _block_ops(result)[0]
    with block.location:
        up = arith.AddIOp(block.operands[0], block.operands[1], ip=ir.InsertionPoint(block))
    block.result.replace_all_uses_with(up.result)
    up.move_after(block)
    block.erase()


@pytest.mark.parametrize("edit,example,options,message", [
    (edit_bounds, "gemma2", "", "the bounds of the KV loops and the tests of the branches of role 'producer'"),
    (edit_total, "mha", "", "the bounds of the KV loops and the tests of the branches of role 'producer'"),
    # Note [Key blocks top down]: each trip's block is the range's as made
    (edit_block_top, "gemma2", "", "the bounds of the KV loops and the tests of the branches of role 'producer'"),
    (edit_block_up, "mha", "", "a KV loop's body starts with the key block of its step"),
    # (the verifier's block without keys: Note [Key blocks the check runs] in verify.py)
    (edit_persistent_else, "mha", "persistent=true", "attn-verify-pipeline: channel 'q' deadlocks"),
    (edit_between_loops, "gemma2", "", "the kernel runs the KV loops one after the other, with nothing but index "
                                       "arithmetic between them, not attn.cta_barrier"),
    (edit_stages, "mha", "", "attn-verify-pipeline: channel 'kv' deadlocks"),
    (edit_completes, "mha", "", "each write completed by its thread's arrival"),
    (edit_persistent_first, "mha", "persistent=true", "persistent CTAs without ping-pong issue a block's first "
                                                      "QK^T before the previous block's epilogue"),
    (edit_step, "mha", "", "the kernel steps its KV loops one key block at a time"),
    (edit_softmax_start, "mha", "", "the data flow of a consumer's first step"),
    (edit_yield, "mha", "", "the data flow of a consumer's last P.V"),
    (edit_condition, "mha", "", "this scf.if tests total > 0"),
    (edit_release_q_test, "mha", "persistent=true pingpong=true", "has no pattern for scf.if in a consumer's "
                                                                  "first step"),
])
def test_an_edit_the_lowering_does_not_build_is_refused(edit, example, options, message):
    result = plan(example, options)
    with attention_ops(result.module)[0].context:
        edit(result)
    with pytest.raises(AttncError) as err:
        ptx_of(to_text(result.module))
    assert message in str(err.value)


def test_the_default_plans_build():
    """The checks pass on what the passes make, persistent and ping-pong included."""
    for example, options in (("gemma2", ""), ("mha", "persistent=true"), ("mha", "persistent=true pingpong=true")):
        assert "gpu.module" in ptx_of(to_text(plan(example, options).module))


def test_the_lowering_reads_the_rings_stages():
    """Behind the verifier, which runs first: the lowering takes the rings' stages from
    the channel and refuses a ring advanced over others."""
    from attnc.backend.load_steps import load_steps

    result = plan()
    kernel = attention_ops(result.module)[0]
    with kernel.context:
        edit_stages(result)
    with pytest.raises(AttncError) as err:
        load_steps(kernel)
    assert "the K and V rings run over the K/V channel's 3 stages" in str(err.value)
