"""What stands around sm_90a's KV loops, edited by hand in the L5 plan, is refused by
attn-lower-sm90a at the op with the error of the check it fails (Notes [Roles followed in
full] in attnc/ir/roles.py and [The walk followed in full] in attnc/backend/role_shell.py):
the scf.if over the key range out of the role's program, Q's wait and read before it, what
follows it, Q's ring, a persistent CTA's walk over query blocks -- its loop, what it
carries, the previous round's epilogue, what stands before and after it -- and ping-pong's
turns around the walk. Each edit is one attn-verify-pipeline finds sound (or touches no
synchronization), so that the lowering's own check refuses it; the record of the key range
(Note [The key range as made]) is taken of the plan as edited."""
from __future__ import annotations

import functools
import re

import pytest
from mlir import ir
from mlir.dialects import arith, scf

from attnc.errors import AttncError
from attnc.ir import attention_ops, make_context, parse_module, to_text
from attnc.ir import roles as R
from tests.passes.test_wgmma_steps import plan, ptx_of

ONE = ""                                    # one query block per CTA
WALK = "persistent=true"                    # a walk over query blocks, without ping-pong
PINGPONG = "persistent=true pingpong=true"
CONSUMERS = ("consumer0", "consumer1")
EVERY_ROLE = ("producer",) + CONSUMERS
ROLES_NOTE = "(Note [Roles followed in full] in attnc/ir/roles.py)"
WALK_NOTE = "(Note [The walk followed in full] in attnc/backend/role_shell.py)"
LOCATED = re.compile(r"\S+\.attn:\d+:\d+: error: ")


@functools.lru_cache(maxsize=None)
def _context() -> ir.Context:
    return make_context()


@functools.lru_cache(maxsize=None)
def _plan_text(options: str) -> str:
    """mha's L5 plan for sm_90a (after attn-overlap-gemms), compiled once per options."""
    return to_text(plan("mha", options).module)


def fresh(options: str) -> ir.Module:
    return parse_module(_plan_text(options), _context())


def kernel_of(module) -> ir.Operation:
    return attention_ops(module)[0]


def role_of(module, name: str) -> ir.Operation:
    return next(r for r in R.role_ops(kernel_of(module)) if R.name_of(r) == name)


def ops_of(block) -> list[ir.Operation]:
    return [op.operation for op in block.operations]


def top_ops(module, name: str) -> list[ir.Operation]:
    return ops_of(R.role_block(role_of(module, name)))


def range_if(module, name: str) -> ir.Operation:
    """Role `name`'s scf.if over the key range (around its KV loops)."""
    loop = next(op for op in R.ops_in(R.role_block(role_of(module, name)), ("scf.for",))
                if "kv_blocks" in op.attributes)
    return loop.parent


def walk(module, name: str) -> ir.Operation:
    """Role `name`'s branch of the walk over query blocks."""
    return R.walk_branch(role_of(module, name))


def walk_ops(module, name: str) -> list[ir.Operation]:
    """The ops of role `name`'s program for one query block: the walk's then region."""
    return ops_of(walk(module, name).regions[0].blocks[0])


def i32(value: int, before: ir.Operation) -> ir.Value:
    with before.location:
        return arith.ConstantOp(ir.IntegerType.get_signless(32), value, ip=ir.InsertionPoint(before)).result


def stray_load(module, name: str, before: ir.Operation) -> None:
    """A load of Q at the kernel's block in role `name`, before `before`."""
    q = next(op for op in R.ops_in(R.role_block(role_of(module, "producer")), ("attn.load",))
             if R.attrs_of(op)["operand"] == "q")
    clone = q.clone(ir.InsertionPoint(before))
    for k, arg in enumerate(kernel_of(module).regions[0].blocks[0].arguments):
        clone.operands[1 + k] = arg


def cta_barrier(before: ir.Operation) -> None:
    with ir.InsertionPoint(before), before.location:
        R.create(R.CTA_BARRIER)


def _yield_one_more(terminator: ir.Operation, value: ir.Value) -> None:
    with terminator.location:
        scf.YieldOp([*terminator.operands, value], ip=ir.InsertionPoint(terminator))
    terminator.erase()


# -- the scf.if over the key range, out of the role's program --------------------------

def edit_range_in_another_if(module):
    """Where the CTA runs one query block: the consumers' scf.if over the key range in
    another scf.if, on the same test, which yields the range's starting values."""
    for name in CONSUMERS:
        inner = range_if(module, name)
        starts = list(ops_of(inner.regions[1].blocks[0])[-1].operands)
        with inner.location:
            outer = scf.IfOp(inner.operands[0], [r.type for r in inner.results], has_else=True,
                             ip=ir.InsertionPoint(inner))
            for old, new in zip(inner.results, outer.results):
                old.replace_all_uses_with(new)
            scf.YieldOp(starts, ip=ir.InsertionPoint(outer.regions[1].blocks[0]))
            inner.move_before(scf.YieldOp(list(inner.results), ip=ir.InsertionPoint(outer.regions[0].blocks[0])))


def edit_program_in_walks_else(module):
    """Every role's program for one query block in the walk's else branch, the round
    without a block carrying its values on in the then branch."""
    for name in EVERY_ROLE:
        branch = walk(module, name)
        then, other = branch.regions[0].blocks[0], branch.regions[1].blocks[0]
        carried_on = ops_of(other)[-1]
        for op in ops_of(then):
            op.move_before(carried_on)
        then.append(carried_on)


# -- a consumer's wait for Q and what follows the key range -----------------------------

def edit_q_read_at_another_zero(module):
    """Where the CTA runs one query block: the consumers read Q's slot at a constant 0
    other than the one their wait for Q takes."""
    for name in CONSUMERS:
        before = ops_of(R.role_block(role_of(module, name)))
        read = next(op for op in before if op.name == R.SLOT_READ)
        read.operands[1] = i32(0, read)


def edit_cta_barrier_after_range(module):
    """Without ping-pong: the consumers take a CTA barrier after the key range, in the
    walk's branch."""
    for name in CONSUMERS:
        cta_barrier(walk_ops(module, name)[-1])


# -- Q's ring ------------------------------------------------------------------------------

def edit_q_wait_in_a_branch(module):
    """The producer's wait for Q's empty phase in an scf.if on the walk's test (taken
    wherever the branch runs), not among the ops before its key range."""
    wait = next(op for op in walk_ops(module, "producer") if op.name == R.MBARRIER_WAIT)
    with wait.location:
        inner = scf.IfOp(walk(module, "producer").operands[0], [], ip=ir.InsertionPoint(wait))
        wait.move_before(scf.YieldOp([], ip=ir.InsertionPoint(inner.regions[0].blocks[0])))


def edit_q_ring_advanced_twice(module):
    """The consumers advance Q's ring twice a block (the second advance unused)."""
    for name in CONSUMERS:
        advance = next(op for op in walk_ops(module, name) if op.name == R.RING_ADVANCE)
        advance.clone(ir.InsertionPoint(advance))


def edit_q_wait_phase_recomputed(module):
    """The consumers wait for Q at its phase or-ed with 0: the value the ring carries, not
    the one Q's ring advance takes."""
    for name in CONSUMERS:
        wait = next(op for op in walk_ops(module, name) if op.name == R.MBARRIER_WAIT)
        with wait.location:
            same = arith.OrIOp(wait.operands[2], i32(0, wait), ip=ir.InsertionPoint(wait))
        wait.operands[2] = same.result


def edit_q_empty_phase_not_flipped(module):
    """The producer waits for Q's empty barrier at its flipped phase or-ed with 0, not at
    the flip (arith.xori) of the phase its ring carries."""
    wait = next(op for op in walk_ops(module, "producer") if op.name == R.MBARRIER_WAIT)
    with wait.location:
        same = arith.OrIOp(wait.operands[2], i32(0, wait), ip=ir.InsertionPoint(wait))
    wait.operands[2] = same.result


# -- the walk's loop and what it carries -------------------------------------------------

def edit_walk_by_two(module):
    """Every role walks the rounds two at a time."""
    for name in EVERY_ROLE:
        loop = walk(module, name).parent
        loop.operands[2] = i32(2, loop)


def _carry_one_more(module, name: str) -> None:
    """Role `name`'s walk carries one more i32 (started as its first value, passed on
    unchanged in both branches)."""
    branch = walk(module, name)
    loop = branch.parent
    with loop.location:
        bounds = list(loop.operands)
        wider = scf.ForOp(bounds[0], bounds[1], bounds[2], [*bounds[3:], bounds[3]], ip=ir.InsertionPoint(loop))
        body = loop.regions[0].blocks[0]
        for op in ops_of(body):
            wider.body.append(op)
        for old, new in zip(body.arguments, wider.body.arguments):
            old.replace_all_uses_with(new)
        for old, new in zip(loop.results, wider.results):
            old.replace_all_uses_with(new)
        loop.erase()
        types = [r.type for r in branch.results] + [ir.IntegerType.get_signless(32)]
        wider_branch = scf.IfOp(branch.operands[0], types, has_else=True, ip=ir.InsertionPoint(branch))
        for k in range(2):
            for op in ops_of(branch.regions[k].blocks[0]):
                wider_branch.regions[k].blocks[0].append(op)
        for old, new in zip(branch.results, wider_branch.results):
            old.replace_all_uses_with(new)
        branch.erase()
        extra = list(wider.body.arguments)[-1]
        for k in range(2):
            _yield_one_more(ops_of(wider_branch.regions[k].blocks[0])[-1], extra)
        _yield_one_more(ops_of(wider.body)[-1], list(wider_branch.results)[-1])


def edit_producer_carries_one_more(module):
    _carry_one_more(module, "producer")


def edit_consumers_carry_one_more(module):
    for name in CONSUMERS:
        _carry_one_more(module, name)


# -- the previous round's epilogue ------------------------------------------------------

def _range_else_finish(module, name: str) -> ir.Operation:
    """Role `name`'s previous round's epilogue where the key range has no step."""
    return next(op for op in ops_of(range_if(module, name).regions[1].blocks[0]) if op.name == "scf.if")


def _first_step_finish(module, name: str) -> ir.Operation:
    """Role `name`'s previous round's epilogue in a block's first step."""
    return next(op for op in ops_of(range_if(module, name).regions[0].blocks[0]) if op.name == "scf.if"
                and ops_of(op.regions[0].blocks[0])[0].name == R.WALK_BLOCK)


def _after_walk_finish(module, name: str) -> ir.Operation:
    return next(op for op in top_ops(module, name) if op.name == "scf.if")


def _at_current_round(module, name: str, finish: ir.Operation) -> None:
    """The epilogue `finish` takes the block of the walk's round, not the previous one."""
    item = ops_of(finish.regions[0].blocks[0])[0]
    item.operands[0] = walk(module, name).parent.regions[0].blocks[0].arguments[0]


def edit_finalize_o_from_fill(module):
    """Where the key range has no step, the previous round's finalize takes O from a fill
    of the role rather than the O the walk carries."""
    for name in CONSUMERS:
        finalize = next(op for op in ops_of(_range_else_finish(module, name).regions[0].blocks[0])
                        if op.name == "attn.finalize")
        fill = next(op for op in top_ops(module, name) if op.name == "attn.fill"
                    and op.results[0].type == finalize.operands[0].type)
        finalize.operands[0] = fill.results[0]


def edit_previous_round_test_sgt(module):
    """Where the key range has no step, the previous round's block stored where its
    round is > 0 (round 0's block never stored)."""
    for name in CONSUMERS:
        test = _range_else_finish(module, name).operands[0].owner
        test.attributes["predicate"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 4)   # sgt


def edit_range_else_block_of_round(module):
    for name in CONSUMERS:
        _at_current_round(module, name, _range_else_finish(module, name))


def edit_first_step_block_of_round(module):
    for name in CONSUMERS:
        _at_current_round(module, name, _first_step_finish(module, name))


def edit_after_walk_block_of_other_value(module):
    """After the walk the last block's epilogue takes the block of the walk's first carried
    value (K's stage), not of its last round."""
    for name in CONSUMERS:
        loop = walk(module, name).parent
        item = ops_of(_after_walk_finish(module, name).regions[0].blocks[0])[0]
        item.operands[0] = loop.results[0]


# -- before and after the walk ------------------------------------------------------------

def _walk_loop(ops: list) -> ir.Operation:
    return next(op for op in ops if op.name == "scf.for")


def edit_load_before_producer_walk(module):
    stray_load(module, "producer", _walk_loop(top_ops(module, "producer")))


def edit_cta_barrier_before_consumer_walk(module):
    for name in CONSUMERS:
        cta_barrier(_walk_loop(top_ops(module, name)))


def edit_load_after_pingpong_walk(module):
    """With ping-pong: a load after each consumer's walk (past consumer0's last turn)."""
    for name in CONSUMERS:
        stray_load(module, name, top_ops(module, name)[-1])


def edit_load_before_first_hand_over(module):
    """With ping-pong: consumer1 loads before its first hand-over, which begins its region."""
    stray_load(module, "consumer1", top_ops(module, "consumer1")[0])


def edit_load_before_last_turn(module):
    """With ping-pong: consumer0 loads between its walk and its last turn."""
    ops = top_ops(module, "consumer0")
    stray_load(module, "consumer0", next(op for op in ops if op.name == R.NAMED_BARRIER_SYNC))


def record_key_range(module) -> None:
    """Note [The key range as made]: each role's record taken of the plan as it stands."""
    ws = R.warp_specialize_of(kernel_of(module))
    ws.attributes[R.RANGES] = ir.DictAttr.get({R.name_of(r): ir.StringAttr.get(R.range_digest(r))
                                               for r in R.role_ops(kernel_of(module))})


CONSUMER_Q = ("before its key range a consumer warpgroup waits for Q's full barrier and reads Q's slot, both "
              "{}, and does nothing else " + ROLES_NOTE)
PRODUCER_Q = ("Q's load takes Q's slot at its ring: a persistent CTA's producer waits for its empty phase's flip "
              "before it loads Q " + ROLES_NOTE)
Q_RING = " Q's ring, of one stage, advanced once a block"
PREVIOUS = ("{} a persistent CTA's consumer stores the previous round's block where there is one (its round >= 0): "
            "attn.walk_block of that round, then its epilogue " + WALK_NOTE)
CARRIED = ("the walk carries the rings (and without ping-pong the previous round, its O, m and l) from round to "
           "round, and nothing else: its value {} is none of those " + WALK_NOTE)
TURNS = ("the plan's consumers take turns at their GEMMs (pingpong on attn.warp_specialize), so "
         "role '{}' takes {} {} its walk over query blocks in the kernel, and no turn in this plan (Note "
         "[Ping-pong turns] in attnc/schedule/sync.py; " + ROLES_NOTE[1:])


CASES = [
    (ONE, edit_range_in_another_if,
     "the scf.if over the key range stands in the role's program for one query block: its region, or with "
     "persistent CTAs the branch of the walk over query blocks " + ROLES_NOTE),
    (WALK, edit_program_in_walks_else,
     "the scf.if over the key range stands where the walk has a block, in its branch's then region " + ROLES_NOTE),
    (ONE, edit_q_read_at_another_zero, CONSUMER_Q.format("at stage 0 (phase 0)")),
    (WALK, edit_cta_barrier_after_range,
     "without ping-pong a persistent CTA's consumer stores a block's O in the next round (Note [The next block's "
     "first QK^T in the IR] in attnc/schedule/walk_ahead.py), and does nothing after the key range " + ROLES_NOTE),
    (WALK, edit_q_wait_in_a_branch, PRODUCER_Q),
    (WALK, edit_q_ring_advanced_twice, CONSUMER_Q.format("at Q's ring") + Q_RING),
    (WALK, edit_q_wait_phase_recomputed, CONSUMER_Q.format("at Q's ring") + Q_RING),
    (WALK, edit_q_empty_phase_not_flipped, PRODUCER_Q + Q_RING),
    (WALK, edit_walk_by_two,
     "a persistent CTA's role runs its program once a round, in one scf.for from 0 to attn.walk_rounds by 1 in "
     "its region " + WALK_NOTE),
    (WALK, edit_finalize_o_from_fill,
     "the previous round's epilogue takes the round, O, m and l the walk carries " + WALK_NOTE),
    (WALK, edit_producer_carries_one_more, CARRIED.format(4)),
    (WALK, edit_consumers_carry_one_more, CARRIED.format(8)),
    (WALK, edit_previous_round_test_sgt, PREVIOUS.format("where the key range has no step")),
    (WALK, edit_range_else_block_of_round, PREVIOUS.format("where the key range has no step")),
    (WALK, edit_first_step_block_of_round, PREVIOUS.format("in a block's first step")),
    (WALK, edit_after_walk_block_of_other_value, PREVIOUS.format("after the walk")),
    (WALK, edit_load_before_producer_walk,
     "before its walk a persistent CTA's role does nothing but index arithmetic, fills and, with ping-pong, "
     "consumer1's first hand-over " + WALK_NOTE),
    (WALK, edit_cta_barrier_before_consumer_walk,
     "before its walk a persistent CTA's role does nothing but index arithmetic, fills and, with ping-pong, "
     "consumer1's first hand-over " + WALK_NOTE),
    (PINGPONG, edit_load_after_pingpong_walk,
     "after its walk a consumer with ping-pong of a persistent CTA does nothing else, not attn.load " + WALK_NOTE),
    (PINGPONG, edit_load_before_first_hand_over, TURNS.format("consumer1", "named_barrier_arrive", "before")),
    (PINGPONG, edit_load_before_last_turn, TURNS.format("consumer0", "named_barrier_sync", "after")),
]


@pytest.mark.parametrize("options,edit,message", CASES,
                         ids=[edit.__name__.removeprefix("edit_") for _, edit, _ in CASES])
def test_what_stands_around_the_kv_loops_is_refused_at_the_op(options, edit, message):
    module = fresh(options)
    with module.context:
        edit(module)
        record_key_range(module)
    with pytest.raises(AttncError) as err:
        ptx_of(to_text(module))
    # the whole message: a fragment of it would let another check's longer one pass
    assert err.value.message == message
    assert LOCATED.match(err.value.render()), err.value.render()
