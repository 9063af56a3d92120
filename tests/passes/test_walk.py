"""Note [The walk over query blocks] (attnc/schedule/walk.py): persistent CTAs' loop over
query blocks stands in every role's IR from attn-warp-specialize on, carries the rings
from block to block, and attn-verify-pipeline checks what crosses from one block to the
next -- Q's slot refilled, the K/V ring going on -- which a plan that runs one block per
CTA never exercises."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlir import ir

from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir import roles as R
from attnc.schedule.verify import verify_kernel

ROOT = Path(__file__).resolve().parents[2]
L3 = "attn-tile,attn-analyze-masks,attn-warp-specialize{persistent=1}"
L5 = L3 + ",attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines"
OVERLAPPED = L5 + ",attn-overlap-gemms"
LOWERED = OVERLAPPED + ",attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a"
_KEPT = []


def compiled(example: str, pipeline: str):
    result = compile_mlir((ROOT / f"examples/{example}.attn").read_text(), f"{example}.attn",
                          CompileOptions(arch="sm_90a", pass_pipeline=pipeline))
    _KEPT.append(result)
    return result


def kernel(example: str, pipeline: str):
    return attention_ops(compiled(example, pipeline).module)[0]


def role(op, name: str) -> ir.Operation:
    return next(r for r in R.role_ops(op) if R.name_of(r) == name)


def messages(op) -> str:
    with op.context:
        return " | ".join(v.message for v in verify_kernel(op))


def bar_of(o) -> str:
    return R.name_of(o.operands[0].owner)


@pytest.mark.parametrize("example", ["mha", "sliding_window"])
def test_every_role_walks_the_query_blocks(example):
    """Each role's program stands in the walk's branch, on the walk's (b, h, m_block)."""
    op = kernel(example, L3)
    args = list(op.regions[0].blocks[0].arguments)
    for r in R.role_ops(op):
        top = [o.operation.name for o in R.role_block(r).operations]
        assert R.WALK_ROUNDS in top and top.count("scf.for") == 1, R.name_of(r)
        branch = R.walk_branch(r)
        assert branch is not None and R.body_block(r) == branch.regions[0].blocks[0]
        loads = R.ops_in(R.body_block(r), ("attn.load", "attn.store", "attn.kv_range"))
        assert loads and all(v not in args for o in loads for v in o.operands)


def test_a_plan_of_one_block_per_cta_has_no_walk():
    op = kernel("mha", L3.replace("persistent=1", "persistent=0"))
    for r in R.role_ops(op):
        assert R.walk_branch(r) is None and not R.ops_in(R.role_block(r), (R.WALK_ROUNDS, R.WALK_BLOCK))


def test_the_rings_run_on_from_block_to_block():
    """The walk's loop carries each ring the role uses (Q's, and K/V's), and the round
    without a block yields them as they came."""
    op = kernel("mha", L5)
    for name, rings in (("producer", 2), ("consumer0", 2), ("consumer1", 2)):
        loop = next(o.operation for o in R.role_block(role(op, name)).operations if o.operation.name == "scf.for")
        assert len(loop.results) == 2 * rings, name
        branch = R.walk_branch(role(op, name))
        assert len(branch.results) == 2 * rings
        passed = list(branch.regions[1].blocks[0].operations)[-1]
        assert list(passed.operands) == list(loop.regions[0].blocks[0].arguments)[1:]


@pytest.mark.parametrize("example, tile, options", [("mha", "", ""), ("sliding_window", "", ""),
                                                    ("gemma2", "", " pingpong=1"), ("mha", "{stages=2}", "")])
def test_persistent_kernels_are_sound(example, tile, options):
    pipeline = OVERLAPPED.replace("attn-tile,", f"attn-tile{tile},").replace("persistent=1", "persistent=1" + options)
    assert messages(kernel(example, pipeline)) == ""


def test_q_held_past_its_block_deadlocks_the_next_round():
    """Without the consumers' release of Q's slot, the producer waits for it in the second
    round: the first round alone (a fresh empty barrier) never showed it."""
    op = kernel("mha", OVERLAPPED)
    for name in ("consumer0", "consumer1"):
        for o in R.ops_in(R.role_block(role(op, name)), (R.MBARRIER_ARRIVE,)):
            if bar_of(o) == "mbar_q_empty":
                o.erase()
    found = messages(op)
    assert found.startswith("channel 'q' deadlocks: ")
    assert "producer waits at attn.mbarrier_wait on mbar_q_empty[0] for parity 0 (its phase 0, 0 of 8" in found


def test_q_held_by_a_block_without_keys_deadlocks_the_next_round():
    """A query block whose mask keeps no key runs no step, and its consumers release Q's
    slot in the branch without steps: without that release the producer waits for Q's
    slot in the round after it (the check's second round has no key)."""
    op = kernel("mha", OVERLAPPED)
    for name in ("consumer0", "consumer1"):
        branch = R.walk_branch(role(op, name))
        steps = next(o.operation for o in branch.regions[0].blocks[0].operations
                     if o.operation.name == "scf.if" and R.ops_in(o.operation.regions[0].blocks[0], (R.MMA_WAIT,)))
        empty = [o.operation for o in steps.regions[1].blocks[0].operations if o.operation.name == R.MBARRIER_ARRIVE]
        assert [bar_of(o) for o in empty] == ["mbar_q_empty"]
        empty[0].erase()
    found = messages(op)
    assert found.startswith("channel 'q' deadlocks: ")
    assert "producer waits at attn.mbarrier_wait on mbar_q_empty[0] for parity 1" in found


def test_the_last_v_slot_held_past_its_block_deadlocks_the_next_round():
    """The consumers release the last V slot of a block for the next block's loads."""
    op = kernel("mha", OVERLAPPED)
    for name in ("consumer0", "consumer1"):
        branch = R.walk_branch(role(op, name))
        steps = next(o.operation for o in branch.regions[0].blocks[0].operations
                     if o.operation.name == "scf.if" and R.ops_in(o.operation.regions[0].blocks[0], (R.MMA_WAIT,)))
        last = [o.operation for o in steps.regions[0].blocks[0].operations
                if o.operation.name == R.MBARRIER_ARRIVE and bar_of(o.operation) == "mbar_v_empty"][-1]
        last.erase()
    found = messages(op)
    assert found.startswith("channel 'kv' deadlocks: ")
    assert "producer waits at attn.mbarrier_wait on mbar_v_empty[1] for parity 0 (its phase 2, 0 of 8" in found


@pytest.mark.parametrize("edit, expect", [
    ("order", "walks the query blocks in one of the orders snake, linear"),
    ("mixed", "every role of a CTA walks the query blocks in one order, and this attn.walk_block takes them "
              "'linear', another 'snake'"),
    ("removed", "persistent = true on attn.warp_specialize, and role 'producer' has no walk"),
    ("flag", "role 'producer' walks query blocks in the order 'snake', and attn.warp_specialize is not persistent = true"),
])
def test_an_edited_walk_is_refused_by_the_lowering(edit, expect):
    """The lowering builds the walk as the kernel's own: a walk edited by hand (the blocks
    taken in another order, or the walk taken out of a role) is refused at the op, not
    built as the kernel's."""
    result = compiled("mha", OVERLAPPED)
    op = attention_ops(result.module)[0]
    producer = role(op, "producer")
    with op.context:
        if edit in ("order", "mixed"):
            order = "rows" if edit == "order" else "linear"
            R.ops_in(R.role_block(role(op, "consumer1")), (R.WALK_BLOCK,))[0].attributes["order"] = \
                ir.StringAttr.get(order)
        elif edit == "flag":
            del R.warp_specialize_of(op).attributes[R.PERSISTENT]
        else:
            branch = R.walk_branch(producer)
            loop = branch.parent
            walk = [o for o in R.role_block(producer).operations if o.operation.name == R.WALK_ROUNDS][0]
            for o in list(R.role_block(producer).operations):
                if o.operation == loop:
                    o.operation.erase()
            walk.operation.erase()
    with pytest.raises(AttncError, match=expect):
        lower(result.module)


def lower(module):
    from attnc.passes.lower_kernel import lower_kernel
    with module.context:
        lower_kernel(module, "sm_90a")


def test_the_walk_compiles_to_the_persistent_kernel():
    """The lowering takes the plan with its walk (the kernel's PTX walks the grid's rounds)."""
    result = compiled("mha", LOWERED)
    assert "nctaid" in str(result.module)


def test_a_blocks_epilogue_runs_after_the_next_blocks_first_qk():
    """Note [The next block's first QK^T in the IR] (attnc/schedule/walk_ahead.py): without
    ping-pong, a persistent consumer's block finalizes and stores the last block's O right
    after issuing its own first QK^T, and the last block's after the walk."""
    op = kernel("sliding_window", OVERLAPPED)
    for name in ("consumer0", "consumer1"):
        r = role(op, name)
        loop = R.walk_branch(r).parent
        assert len(list(loop.regions[0].blocks[0].arguments)) == 1 + 4 + 4       # rings, round, m, l, O
        steps = next(o.operation for o in R.body_block(r).operations
                     if o.operation.name == "scf.if" and R.ops_in(o.operation.regions[0].blocks[0], (R.MMA_WAIT,)))
        first = [o.operation.name for o in steps.regions[0].blocks[0].operations]
        at = first.index("attn.mma")
        assert first[at + 1:at + 4] == ["arith.constant", "arith.cmpi", "scf.if"] and first[at + 4] == R.MMA_WAIT
        assert not [o for o in R.body_block(r).operations if o.operation.name in ("attn.finalize", "attn.store")]
        assert [o.operation.name for o in R.role_block(r).operations][-2] == "scf.if"       # the last epilogue
        assert len(R.ops_in(R.role_block(r), ("attn.finalize",))) == 3


def test_with_pingpong_each_block_stores_its_own_o():
    op = kernel("mha", OVERLAPPED.replace("persistent=1", "persistent=1 pingpong=1"))
    for name in ("consumer0", "consumer1"):
        assert [o.operation.name for o in R.body_block(role(op, name)).operations][-3:-1] == \
            ["attn.finalize", "attn.store"]


@pytest.mark.parametrize("edit, expect", [
    ("barrier", "moves a persistent consumer's epilogue (attn.finalize and the stores after its steps) to the "
                "next block; this block has attn.cta_barrier there"),
    ("operand", "this op reads a value of its block's program other than its O, m, l and (b, h, m_block)"),
])
def test_an_epilogue_the_walk_cannot_move_is_refused(edit, expect):
    result = compiled("mha", L5)
    op = attention_ops(result.module)[0]
    with op.context:
        for name in ("consumer0", "consumer1"):
            store = R.ops_in(R.body_block(role(op, name)), ("attn.store",))[0]
            if edit == "barrier":
                with ir.InsertionPoint(store), store.location:
                    R.create(R.CTA_BARRIER)
            else:
                store.operands[1] = R.walk_branch(role(op, name)).parent.regions[0].blocks[0].arguments[1]
    with pytest.raises(AttncError, match=re.escape(expect)):
        from attnc.passes.overlap_gemms import overlap
        overlap(result.module)


def test_an_epilogue_in_a_first_step_with_pingpong_is_refused():
    """Only the persistent kernel without ping-pong finishes the last block in a block's
    first step: with ping-pong an epilogue moved there by hand is refused at the lowering."""
    from mlir.dialects import arith, scf

    from attnc.backend.wgmma_steps import wgmma_steps
    from attnc.schedule.walk import walk_block

    op = kernel("mha", OVERLAPPED.replace("persistent=1", "persistent=1 pingpong=1"))
    with op.context:
        for name in ("consumer0", "consumer1"):
            qk = next(o for o in R.ops_in(R.body_block(role(op, name)), ("attn.mma",))
                      if "async" in o.attributes)
            after = list(qk.block.operations)[[o.operation for o in qk.block.operations].index(qk) + 1]
            with ir.InsertionPoint(after), qk.location:
                zero = arith.ConstantOp(ir.IntegerType.get_signless(32), 0).result
                branch = scf.IfOp(arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result)
                with ir.InsertionPoint(branch.then_block):
                    walk_block(zero, "snake")
                    scf.YieldOp([])
        with pytest.raises(AttncError, match="only persistent CTAs without ping-pong run the previous block's "
                                             "epilogue in a block's first step"):
            wgmma_steps(op)


@pytest.mark.parametrize("order", ["snake", "linear"])
def test_the_walk_order_is_a_pass_option(order):
    """attn-warp-specialize{walk_order}: every role's attn.walk_block has it, and the
    kernels of the two orders differ."""
    from attnc.backend.lowering import build

    op = kernel("mha", L3.replace("persistent=1", f"persistent=1 walk_order={order}"))
    assert {R.attrs_of(w)["order"] for w in R.ops_in(op.regions[0].blocks[0], (R.WALK_BLOCK,))} == {order}
    ptx = {o: build(compiled("mha", LOWERED.replace("persistent=1", f"persistent=1 walk_order={o}"))).ptx
           for o in ("snake", "linear")}
    assert ptx["snake"] != ptx["linear"]


@pytest.mark.parametrize("options, expect", [
    ("walk_order=linear", "walk_order=linear: the order of persistent CTAs' query blocks, and this plan's CTAs are "
                          "not persistent"),
    ("persistent=1 walk_order=zigzag", "walk_order=zigzag: persistent CTAs take the query blocks in one of the "
                                       "orders snake, linear"),
])
def test_a_walk_order_the_plan_cannot_take_is_refused(options, expect):
    with pytest.raises(AttncError, match=re.escape(expect)):
        compiled("mha", L3.replace("persistent=1", options))
