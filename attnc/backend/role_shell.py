"""What stands around the KV loops of sm_90a's roles, checked op by op where a role runs
one query block (Note [Roles followed in full] in attnc/ir/roles.py): the ops of the
scf.if over the key range between its loops and in its else branch, a consumer
warpgroup's wait for Q and its epilogue, the cooperative role's epilogue, the
producer's nothing after its loads, and ping-pong's turns outside the range.

The KV loops' trips and the steps before and after them in the range are the target's
patterns' (wgmma_steps.py, load_steps.py, coop_steps.py); what is checked here are the
ops the kernel builds as its own, each edit refused at the op.
"""
from __future__ import annotations

import math

from attnc.backend.kv_steps import check_epilogue, is_fill
from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.ir.ops import int_constant
from attnc.passes.tile_program import KV_LOOP

NOTE = "Note [Roles followed in full] in attnc/ir/roles.py"
TURNS = (R.NAMED_BARRIER_SYNC, R.NAMED_BARRIER_ARRIVE)
# values the kernel computes itself: Q's ring (read once), fills, dims, the key range
# (Note [The key range as made]) and index arithmetic
_QUIET = (R.RING_ADVANCE, "attn.fill", "attn.dim", "attn.kv_range", R.YIELD, "scf.yield")
M, L, O = range(3)          # the key range's results, as attn-overlap-gemms orders them


def quiet(op) -> bool:
    return op.name in _QUIET or (op.name.startswith("arith.") and not op.regions)


def around_range(range_if):
    """(role, its ops before the scf.if over the key range, those after it), or None where
    the scf.if stands in a persistent CTA's walk rather than in the role's region."""
    role = range_if.parent
    if role is None or role.name != R.ROLE:
        return None
    ops = [op.operation for op in R.role_block(role).operations]
    at = next(k for k, op in enumerate(ops) if op == range_if)
    return role, ops[:at], ops[at + 1:]


def check_shell(range_if, loops: list, starts: bool = True) -> None:
    """Between the KV loops nothing but index arithmetic, and in the else branch (a range
    without a step) nothing but the yield of the starting values (where the CTA runs one
    query block), which with `starts` (a computing role's range, not the producer's) are
    fills of -inf, 0 and 0 (where the first step starts from them: Around)."""
    ops = [op.operation for op in range_if.regions[0].blocks[0].operations]
    first = next(k for k, op in enumerate(ops) if op == loops[0].operation)
    last = next(k for k, op in enumerate(ops) if op == loops[-1].operation)
    for op in ops[first:last]:
        if not (op.name == "scf.for" and KV_LOOP in op.attributes) and not quiet(op):
            raise error_at(op, f"the kernel runs the KV loops one after the other, with nothing but index "
                               f"arithmetic between them, not {op.name} ({NOTE})")
    if len(range_if.regions) < 2 or not range_if.regions[1].blocks:
        return
    ops = [op.operation for op in range_if.regions[1].blocks[0].operations]
    for op in ops if around_range(range_if) is not None else ():    # (a persistent CTA's: its digests)
        if not quiet(op) or op.name == R.RING_ADVANCE:
            raise error_at(op, f"where the key range has no step the kernel yields the values it starts from "
                               f"and does nothing else, not {op.name} ({NOTE})")
    start = list(ops[-1].operands)
    for k, value in ((M, -math.inf), (L, 0.0), (O, 0.0)) if starts else ():
        if len(start) <= k or not is_fill(start[k], value):
            raise error_at(ops[-1], f"the kernel starts m, l and O from -inf, 0 and 0: the key range yields "
                                    f"them from attn.fill ops of those values where it has no step ({NOTE})")


def _turns(ops: list, wanted: tuple[str, ...], role, where: str) -> list:
    """`ops` past the turns they begin with, which must be `wanted` (named barrier ops)."""
    found = [op for op in ops if not quiet(op)]
    k = 0
    while k < len(found) and found[k].name in TURNS:
        k += 1
    have = tuple(op.name for op in found[:k])
    if have != wanted:
        def text(names):
            return ", ".join(n.removeprefix("attn.") for n in names) or "no turn"
        raise error_at(found[0] if found else role, f"role '{R.name_of(role)}' takes {text(wanted)} {where} in "
                                                    f"the kernel, and {text(have)} in this plan (Note [Ping-pong "
                                                    f"turns] in attnc/schedule/sync.py; {NOTE})")
    return found[k:]


def check_consumer(range_if, bars: dict, pingpong: bool) -> None:
    """A consumer warpgroup of one query block: before the key range (past consumer1's
    first hand-over with ping-pong) its wait for Q's full barrier and its read of Q's
    slot, both at stage 0, phase 0; after it (past consumer0's last turn) the epilogue."""
    found = around_range(range_if)
    if found is None:
        return
    role, before, after = found
    name = R.name_of(role)
    first = (R.NAMED_BARRIER_ARRIVE,) if pingpong and name == "consumer1" else ()
    last = (R.NAMED_BARRIER_SYNC,) if pingpong and name == "consumer0" else ()
    before = _turns(before, first, role, "before its wait for Q")
    wanted = (f"before its key range a consumer warpgroup waits for Q's full barrier and reads Q's slot, both at "
              f"stage 0 (phase 0), and does nothing else ({NOTE})")
    if [op.name for op in before] != [R.MBARRIER_WAIT, R.SLOT_READ]:
        raise error_at(before[0] if before else range_if, wanted)
    wait, read = before
    q_full = [b for b, a in bars.items() if a.get("channel") == "q" and a.get("side") == "full"]
    if (R.name_of(wait.operands[0].owner) not in q_full or R.attrs_of(read).get("tile") != "q"
            or {int_constant(v) for v in (*list(wait.operands)[1:], read.operands[1])} != {0}):
        raise error_at(wait if R.name_of(wait.operands[0].owner) not in q_full else read, wanted)
    _epilogue(range_if, _turns(after, last, role, "after its key range"), role, False)


def check_compute(range_if) -> None:
    """The cooperative role's epilogue, where it runs one query block."""
    found = around_range(range_if)
    if found is not None:
        role, _, after = found
        _epilogue(range_if, _turns(after, (), role, "after its key range"), role, True)


def check_producer(range_if) -> None:
    """After its loads of one query block the producer does nothing."""
    found = around_range(range_if)
    if found is not None:
        for op in found[2]:
            if not quiet(op) or op.name == R.RING_ADVANCE:
                raise error_at(op, f"after the key range the producer has loaded every tile and does nothing "
                                   f"else, not {op.name} ({NOTE})")


def _epilogue(range_if, ops: list, role, wait: bool) -> None:
    results = list(range_if.results)
    check_epilogue(ops, [results[O], results[M], results[L]], role, wait, NOTE, "the scf.if over the key range")
