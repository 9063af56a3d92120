"""The cooperative role's pair of query blocks, the next block's first loads issued before
the last block's epilogue, written into the L5 IR (attn-insert-pipelines).

Note [The next block's loads in the IR]: the sm_80 kernel of two query blocks per CTA
(Note [Two query blocks in the IR] in walk.py) issues the second block's first loads --
Q, and K and V of its first steps -- before it finalizes and stores the first block's O,
which hides their latency behind the epilogue (Note [Two query blocks per CTA] in
attnc/backend/forward.py). This writes that rotation of the walk. Each round starts its
rings over at stage 0 and ends, after its steps, with a wait for every cp.async group and
a CTA barrier: no thread reads Q or a K/V slot any more, so the next round may fill them.
A block's epilogue -- its attn.finalize and stores -- leaves the round; the walk carries
the round (-1 before the first), O, m and l to the next round, whose program runs the
epilogue of the carried round's block (`attn.walk_block` of that round giving its (b, h,
m_block)) after its first loads; the last block's epilogue follows the walk:

    walk over rounds r, carrying (previous round p, m, l, O) from (-1, -inf, 0, 0):
      if round r has a block:
        load Q; the key range; load K and V of the first steps (a cp.async group each)
        if p >= 0: finalize and store block p's O (and LSE) from the carried O, m, l
        the KV loops
        wait for every group; CTA barrier
        yield (r, m, l, O of this block)
    if p >= 0: block p's epilogue

attn-verify-pipeline runs the walk's rounds one after the other: a slot the next round
fills while a thread may still read it is a violation there.
"""
from __future__ import annotations

from mlir import ir

from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.passes.tile_program import KV_LOOP
from attnc.schedule.walk_ahead import EPILOGUE, Epilogue, carry_round

PASS = "attn-insert-pipelines"
WHOSE = "the cooperative role's"


def load_next_before_epilogue(role: ir.Operation) -> None:
    """Note [The next block's loads in the IR], on the cooperative role `role` whose
    program stands in the pair's walk, its puts and gets replaced and the wait for every
    group after its KV loops (attn-insert-pipelines' drain)."""
    branch = R.walk_branch(role)
    loop = branch.parent
    item = branch.operands[0].owner
    ops = [op.operation for op in branch.regions[0].blocks[0].operations]
    at = [k for k, op in enumerate(ops) if op.name == "scf.for" and KV_LOOP in op.attributes]
    if not at:
        raise error_at(role, f"{PASS}: {WHOSE} block has no KV loop (scf.for with {KV_LOOP})")
    first, last = ops[at[0]], ops[at[-1]]
    drain, epilogue = ops[at[-1] + 1], ops[at[-1] + 2:-1]
    odd = [op for op in epilogue if op.name not in EPILOGUE]
    if drain.name != R.CP_ASYNC_WAIT or odd or not epilogue:
        raise error_at(odd[0] if odd else drain, f"{PASS} moves {WHOSE} epilogue (attn.finalize and the stores "
                                                 f"after its KV loops) to the next block; this block has "
                                                 f"{odd[0].name if odd else drain.name} there")
    finalize = epilogue[0]
    o, m, l = list(finalize.operands)[:3]
    if any(getattr(v.owner, "name", "") != "scf.for" or v.owner != last for v in (o, m, l)):
        raise error_at(finalize, f"{PASS}: {WHOSE} finalize takes O, m and l from the last KV loop")
    # the values the first KV loop starts m, l and O from: its inits at the places the last
    # one gives them back
    starts = [list(first.operands)[3 + v.result_number] for v in (m, l, o)]
    finish = Epilogue(epilogue, item, (m, l, o), PASS, WHOSE)
    with R.pass_loc(PASS, role):
        with ir.InsertionPoint(epilogue[0]):
            R.create(R.CTA_BARRIER)     # every thread is past its reads of Q and the K/V slots
        prev, pm, pl, po = carry_round(loop, branch, starts, (m, l, o), PASS, WHOSE)
        with ir.InsertionPoint(first):
            finish.build(prev, pm, pl, po)
        walk = R.walk_branch(role).parent
        with ir.InsertionPoint.after(walk):
            finish.build(*list(walk.results)[-4:])
    for op in reversed(epilogue):
        op.erase()

