"""Persistent consumers issuing a block's first QK^T before the last block's epilogue,
written into the L5 IR (attn-overlap-gemms); the carry of a block's O, m and l to the next
round and its epilogue there (`carry_round`, `Epilogue`) serve sm_80's pair of blocks too
(walk_pairs.py).

Note [The next block's first QK^T in the IR]: without ping-pong, the persistent kernel's
consumer warpgroups store each query block's O while the tensor cores run the next
block's first QK^T (Note [The next block's first QK^T] in attnc/backend/sm90a_ws.py).
This writes that rotation of the walk (Note [The walk over query blocks] in walk.py):
a block's epilogue -- its attn.finalize and stores -- leaves the block's program; the walk
carries the block's round (-1 before the first), O, m and l to the next round instead,
whose program runs the epilogue of that round's block (`attn.walk_block` of the carried
round giving its (b, h, m_block)) right after its own first QK^T is issued -- or, without
a step, after it released Q's slot; the last block's epilogue follows the walk:

    walk over rounds r, carrying (rings, previous round p, O, m, l) from (.., -1, 0, -inf, 0):
      if round r has a block:
        wait for Q; ...
        if the range has a step:
          wait K; S = QK^T (async)
          if p >= 0: finalize and store block p's O (and LSE) from the carried O, m, l
          land S; ... the block's steps ...
        else: release Q; if p >= 0: block p's epilogue
        yield (rings, r, O, m, l of this block)
    if p >= 0: block p's epilogue

S stays in the branch that issued it, as the kernel wants it.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.ir.ops import with_iter_args
from attnc.schedule.overlap import PASS
from attnc.schedule.walk import inside, walk_block

EPILOGUE = ("attn.finalize", "attn.store")


def issue_first_qk_ahead(role: ir.Operation) -> None:
    """Note [The next block's first QK^T in the IR], on the persistent consumer role `role`
    whose steps attn-overlap-gemms has overlapped (L5)."""
    branch = R.walk_branch(role)
    loop = branch.parent
    item = branch.operands[0].owner
    body = branch.regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    some = next((op for op in ops if op.name == "scf.if" and R.ops_in(op.regions[0].blocks[0], (R.MMA_WAIT,))),
                None)
    if some is None:
        raise error_at(role, f"{PASS}: a persistent consumer's block has no overlapped steps to issue the next "
                             f"block's first QK^T from")
    epilogue = ops[ops.index(some) + 1:-1]
    odd = [op for op in epilogue if op.name not in EPILOGUE]
    if odd or not epilogue:
        raise error_at(odd[0] if odd else some, f"{PASS} moves a persistent consumer's epilogue (attn.finalize "
                                                f"and the stores after its steps) to the next block; this block "
                                                f"has {odd[0].name if odd else 'none'} there")
    m, l, o = list(some.results)[:3]
    finish = Epilogue(epilogue, item, (m, l, o), PASS, "a persistent consumer's")
    first_qk = next(op for op in some.regions[0].blocks[0].operations if op.name == "attn.mma")
    starts = list(list(some.regions[1].blocks[0].operations)[-1].operands)[:3]
    with R.pass_loc(PASS, role):
        carried = carry_round(loop, branch, starts, (m, l, o), PASS, "a persistent consumer's")
        prev, pm, pl, po = carried
        with ir.InsertionPoint(first_qk.operation.block.operations[_index(first_qk) + 1]):
            finish.build(prev, pm, pl, po)
        else_end = list(some.regions[1].blocks[0].operations)[-1]
        with ir.InsertionPoint(else_end):
            finish.build(prev, pm, pl, po)
        walk = R.walk_branch(role).parent
        after = list(walk.results)[-4:]
        with ir.InsertionPoint(walk.block.operations[_index(walk) + 1]):
            finish.build(*after)
    for op in reversed(epilogue):
        op.erase()


class Epilogue:
    """A block's epilogue ops, cloned for the block of a carried round; `pass_name` and
    `whose` (the role's, "a persistent consumer's") name them in errors."""

    def __init__(self, ops: list, item, results: tuple, pass_name: str, whose: str):
        self.ops, self.item, self.results = ops, item, results
        inside = {r for op in ops for r in op.results}
        for op in ops:
            for v in op.operands:
                if v not in inside and v not in results and v not in list(item.results)[1:] and \
                        not _above(v, item):
                    raise error_at(op, f"{pass_name} moves {whose} epilogue to the next block, and this op reads "
                                       f"a value of its block's program other than its O, m, l and (b, h, m_block)")

    def build(self, prev, m, l, o) -> None:
        """`if prev >= 0`: the epilogue of round prev's block, from its carried m, l, O."""
        zero = arith.ConstantOp(prev.type, 0).result
        branch = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.sge, prev, zero).result)
        with ir.InsertionPoint(branch.then_block):
            item = walk_block(prev, R.attrs_of(self.item)["order"])
            vmap = dict(zip(list(self.item.results)[1:], list(item.results)[1:]))
            vmap.update(zip(self.results, (m, l, o)))
            for op in self.ops:
                new = op.clone()
                for k, v in enumerate(new.operands):
                    if v in vmap:
                        new.operands[k] = vmap[v]
                vmap.update(zip(op.results, new.results))
            scf.YieldOp([])


def carry_round(loop, branch, starts: list, block_results: tuple, pass_name: str, whose: str) -> list:
    """The walk `loop` again, carrying (round, m, l, O) of the last block: from (-1, the
    fills `starts` the steps start from) into the loop; out of the walk's `branch` the
    round's own (`block_results`), or as they came in. Returns the new loop's carried
    values (in its body)."""
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(loop):
        fills = [_above_clone(v, pass_name, whose) for v in starts]
        minus_one = arith.ConstantOp(i32, -1).result
    n = len(loop.results)
    new = with_iter_args(loop, [minus_one, *fills])
    carried = list(new.body.arguments)[1 + n:]
    # the branch over the round's block, with the four values more
    types = [*(r.type for r in branch.results), i32, *(v.type for v in block_results)]
    with ir.InsertionPoint(branch), branch.location:
        fresh = scf.IfOp(branch.operands[0], types, has_else=True)
    then_old = branch.regions[0].blocks[0]
    else_old = branch.regions[1].blocks[0] if branch.regions[1].blocks else None
    for old_block, block, extra in ((then_old, fresh.then_block, [new.induction_variable, *block_results]),
                                    (else_old, fresh.else_block, carried)):
        if old_block is None:           # a walk's branch without an else: it passes them on
            with ir.InsertionPoint(block), branch.location:
                scf.YieldOp(extra)
            continue
        for op in list(old_block.operations):
            block.append(op.operation)
        end = list(block.operations)[-1]
        with ir.InsertionPoint(end), end.location:
            scf.YieldOp([*end.operands, *extra])
        end.erase()
    for old, value in zip(branch.results, fresh.results):
        old.replace_all_uses_with(value)
    branch.erase()
    end = list(new.body.operations)[-1]
    with ir.InsertionPoint(end), end.location:
        scf.YieldOp([*end.operands, *list(fresh.results)[len(types) - 4:]])
    end.erase()
    return carried


def _above_clone(value, pass_name: str, whose: str) -> ir.Value:
    """A clone, at the insertion point, of the op making `value` (an attn.fill)."""
    owner = value.owner
    if getattr(owner, "name", "") != "attn.fill":
        raise error_at(owner if not isinstance(owner, ir.Block) else None,
                       f"{pass_name}: {whose} steps start from attn.fill values, as attn-tile makes them")
    return owner.clone().result


def _above(value, item) -> bool:
    """Whether `value` is defined outside the walk (above the loop over rounds)."""
    owner = value.owner
    return not inside(owner.owner if isinstance(owner, ir.Block) else owner, item.parent)


def _index(op) -> int:
    op = getattr(op, "operation", op)
    return next(i for i, o in enumerate(op.block.operations) if o.operation == op)
