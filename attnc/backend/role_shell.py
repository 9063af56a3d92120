"""What stands around the KV loops of sm_90a's roles, checked op by op (Note [Roles
followed in full] in attnc/ir/roles.py): the ops of the scf.if over the key range between
its loops and in its else branch, a consumer warpgroup's wait for Q and its epilogue,
the cooperative role's epilogue, the producer's nothing after its loads, ping-pong's
turns outside the range, and a persistent CTA's walk over query blocks with what it
carries from round to round (Note [The walk followed in full]).

The KV loops' trips and the steps before and after them in the range are the target's
patterns' (wgmma_steps.py, load_steps.py, coop_steps.py); what is checked here are the
ops the kernel builds as its own, each edit refused at the op.
"""
from __future__ import annotations

import math

from attnc.backend.kv_steps import block_of, check_epilogue, is_fill
from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.ir.ops import cmpi_predicate, defining_op, int_constant
from attnc.passes.tile_program import KV_LOOP

NOTE = "Note [Roles followed in full] in attnc/ir/roles.py"
WALK = "Note [The walk followed in full] in attnc/backend/role_shell.py"
TURNS = (R.NAMED_BARRIER_SYNC, R.NAMED_BARRIER_ARRIVE)
# values the kernel computes itself: Q's ring (read once), fills, dims, the key range
# (Note [The key range as made]) and index arithmetic
_QUIET = (R.RING_ADVANCE, "attn.fill", "attn.dim", "attn.kv_range", "attn.block_map_range", R.WALK_ROUNDS, R.YIELD,
          "scf.yield")
M, L, O = range(3)          # the key range's results, as attn-overlap-gemms orders them


def quiet(op) -> bool:
    return op.name in _QUIET or (op.name.startswith("arith.") and not op.regions)


def around_range(range_if):
    """(role, the ops of its program for one query block before the scf.if over the key
    range, those after it, the walk's branch the program stands in or None): the role's
    region where the CTA runs one query block, with persistent CTAs the branch of the walk
    over query blocks (Note [The walk over query blocks] in attnc/schedule/walk.py)."""
    parent = range_if.parent
    walk = parent if parent is not None and R.is_walk_branch(parent) else None
    loop = walk.parent if walk is not None else None
    role = loop.parent if loop is not None and loop.name == "scf.for" else parent if walk is None else None
    if role is None or role.name != R.ROLE:
        raise error_at(range_if, f"the scf.if over the key range stands in the role's program for one query block: "
                                 f"its region, or with persistent CTAs the branch of the walk over query blocks "
                                 f"({NOTE})")
    block = walk.regions[0].blocks[0] if walk is not None else R.role_block(role)
    ops = [op.operation for op in block.operations]
    at = next((k for k, op in enumerate(ops) if op == range_if), None)
    if at is None:
        raise error_at(range_if, f"the scf.if over the key range stands where the walk has a block, in its "
                                 f"branch's then region ({NOTE})")
    return role, ops[:at], ops[at + 1:], walk


def check_shell(range_if, loops: list, starts: bool = True) -> None:
    """Between the KV loops nothing but index arithmetic, and in the else branch (a range
    without a step) nothing but the yield of the starting values where the CTA runs one
    query block (a persistent CTA's: `_Walk.check_range_else`), which with `starts` (a
    computing role's range, not the producer's) are fills of -inf, 0 and 0 (where the
    first step starts from them: Around)."""
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
    for op in ops if around_range(range_if)[3] is None else ():
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
        why = ("the plan's consumers take turns at their GEMMs (pingpong on attn.warp_specialize), so "
               if wanted and not have else "")
        raise error_at(found[0] if found else role, f"{why}role '{R.name_of(role)}' takes {text(wanted)} {where} "
                                                    f"in the kernel, and {text(have)} in this plan (Note [Ping-pong "
                                                    f"turns] in attnc/schedule/sync.py; {NOTE})")
    return found[k:]


def check_consumer(range_if, bars: dict, pingpong: bool) -> None:
    """A consumer warpgroup: before the key range (past consumer1's first hand-over with
    ping-pong and one query block) its wait for Q's full barrier and its read of Q's slot,
    both at stage 0, phase 0 or, with persistent CTAs, at Q's ring; after it (past
    consumer0's last turn) the epilogue -- a persistent CTA's without ping-pong in the
    next round (`_Walk`)."""
    role, before, after, walk = around_range(range_if)
    name = R.name_of(role)
    first = (R.NAMED_BARRIER_ARRIVE,) if pingpong and name == "consumer1" else ()
    last = (R.NAMED_BARRIER_SYNC,) if pingpong and name == "consumer0" else ()
    ring = "at Q's ring" if walk is not None else "at stage 0 (phase 0)"
    wanted = (f"before its key range a consumer warpgroup waits for Q's full barrier and reads Q's slot, both {ring}, "
              f"and does nothing else ({NOTE})")
    found = _turns(before, first if walk is None else (), role, "before its wait for Q")
    if [op.name for op in found] != [R.MBARRIER_WAIT, R.SLOT_READ]:
        raise error_at(found[0] if found else range_if, wanted)
    wait, read = found
    q_full = [b for b, a in bars.items() if a.get("channel") == "q" and a.get("side") == "full"]
    at_zero = {int_constant(v) for v in (*list(wait.operands)[1:], read.operands[1])} == {0}
    if R.name_of(wait.operands[0].owner) not in q_full or R.attrs_of(read).get("tile") != "q" \
            or read.operands[1] != wait.operands[1] or (walk is None and not at_zero):
        raise error_at(wait if R.name_of(wait.operands[0].owner) not in q_full else read, wanted)
    if walk is None:
        _epilogue(range_if, _turns(after, last, role, "after its key range"), role, False)
        return
    shell = _Walk(role, walk, range_if)
    q_ring = shell.q_ring(before, list(wait.operands)[1:], wanted)
    q_empty = [b for b, a in bars.items() if a.get("channel") == "q" and a.get("side") == "empty"]
    if pingpong:
        _epilogue(range_if, [op for op in after if not quiet(op)], role, False, shell.item.results)
        shell.check_range_else(q_empty, q_ring)
        shell.check_carried(q_ring)
        _nothing_after(shell.check_role(first, last), "a consumer with ping-pong")
        return
    if [op for op in after if not quiet(op)]:
        raise error_at(next(op for op in after if not quiet(op)),
                       f"without ping-pong a persistent CTA's consumer stores a block's O in the next round (Note "
                       f"[The next block's first QK^T in the IR] in attnc/schedule/walk_ahead.py), and does nothing "
                       f"after the key range ({NOTE})")
    finish = shell.check_range_else(q_empty, q_ring, rotated=True)
    previous, state = shell.previous(finish)
    shell.check_carried(q_ring, previous, state)
    shell.check_finish(finish, shell.args[previous], [shell.args[p] for p in state], "where the key range has no step")
    for op in R.ops_in(range_if.regions[0].blocks[0], ("scf.if",)):
        if finishes_previous(op):
            shell.check_finish(op, shell.args[previous], [shell.args[p] for p in state], "in a block's first step")
    rest = shell.check_role(first, last)
    if len(rest) != 1:
        raise error_at(rest[1] if rest else shell.loop, f"after its walk a persistent CTA's consumer stores the "
                                                        f"last round's block, and does nothing else ({WALK})")
    loop = list(shell.loop.results)
    shell.check_finish(rest[0], loop[previous], [loop[p] for p in state], "after the walk")


def check_compute(range_if) -> tuple:
    """The cooperative role's epilogue, where it runs one query block: its finalize and
    stores, as step ops (`check_epilogue`)."""
    role, _, after, walk = around_range(range_if)
    if walk is not None:
        return ()
    return _epilogue(range_if, _turns(after, (), role, "after its key range"), role, True)


def check_producer(range_if) -> None:
    """After its loads of a query block the producer does nothing; with persistent CTAs
    its walk carries Q's ring and the K/V ring from round to round."""
    role, before, after, walk = around_range(range_if)
    for op in after:
        if not quiet(op) or op.name == R.RING_ADVANCE:
            raise error_at(op, f"after the key range the producer has loaded every tile and does nothing "
                               f"else, not {op.name} ({NOTE})")
    if walk is None:
        return
    shell = _Walk(role, walk, range_if)
    wait = next((op for op in before if op.name == R.MBARRIER_WAIT), None)
    wanted = f"Q's load takes Q's slot at its ring: a persistent CTA's producer waits for its empty phase's flip " \
             f"before it loads Q ({NOTE})"
    if wait is None:
        raise error_at(range_if, wanted)
    flip = defining_op(wait.operands[2])
    phase = flip.operands[0] if getattr(flip, "name", "") == "arith.xori" else None
    q_ring = shell.q_ring(before, [wait.operands[1], phase], wanted)
    shell.check_range_else([], q_ring)
    shell.check_carried(q_ring)
    _nothing_after(shell.check_role((), ()), "the producer")


def _nothing_after(ops: list, whose: str) -> None:
    if ops:
        raise error_at(ops[0], f"after its walk {whose} of a persistent CTA does nothing else, not {ops[0].name} "
                               f"({WALK})")


def _epilogue(range_if, ops: list, role, wait: bool, item=None) -> tuple:
    """The epilogue of the key range's O, m and l, stored at the CTA's block: the
    kernel's (b, h, m_block), a persistent CTA's at the walk's `item` (its results)."""
    results = list(range_if.results)
    at = list(item)[1:4] if item is not None else block_of(role)
    return check_epilogue(ops, [results[O], results[M], results[L]], role, wait, NOTE,
                          "the scf.if over the key range", at)


def finishes_previous(op) -> bool:
    """Whether scf.if `op` is the previous block's epilogue (Note [The next block's first
    QK^T in the IR] in attnc/schedule/walk_ahead.py): a walk's block, its finalize and stores."""
    inner = [o.operation.name for o in op.regions[0].blocks[0].operations][:-1]
    return bool(inner) and inner[0] == R.WALK_BLOCK and set(inner[1:]) <= {"attn.finalize", "attn.store"}


# Note [The walk followed in full]: a persistent CTA's role (Note [The walk over query
# blocks] in attnc/schedule/walk.py) is followed op by op around its program for one
# query block too: one scf.for from 0 to attn.walk_rounds by 1, whose body takes the
# round's block and runs the program in the branch where there is one; a round without
# a block carries every value on unchanged; what the walk carries is Q's ring (advanced
# once a block), the K/V ring (on from the key range's), and without ping-pong the
# previous round and its O, m and l, whose epilogue (that round's block, finalize and
# stores) stands in the next block's first step, in the else branch of a key range
# without a step and after the walk. In the else branch a consumer also releases Q, which
# it then never reads. With ping-pong consumer1's first hand-over comes before the walk
# and consumer0's last turn after it. Each value carried starts where the kernel starts
# it: the rings at stage 0, phase 0, the previous round at -1, m, l and O at fills of
# -inf, 0 and 0.
class _Walk:
    """A persistent CTA's role around its program for one query block (Note [The walk
    followed in full])."""

    def __init__(self, role, walk, range_if):
        self.role, self.walk, self.range_if = role, walk, range_if
        self.loop = loop = walk.parent
        rounds = defining_op(loop.operands[1])
        if loop.parent != role or getattr(rounds, "name", "") != R.WALK_ROUNDS or \
                int_constant(loop.operands[0]) != 0 or int_constant(loop.operands[2]) != 1:
            raise error_at(loop, f"a persistent CTA's role runs its program once a round, in one scf.for from 0 "
                                 f"to attn.walk_rounds by 1 in its region ({WALK})")
        body = loop.regions[0].blocks[0]
        self.index, *self.args = list(body.arguments)
        self.item = defining_op(walk.operands[0])
        ops = [op.operation for op in body.operations]
        if [op for op in ops if not quiet(op)] != [self.item, walk] or list(self.item.operands) != [self.index] \
                or list(ops[-1].operands) != list(walk.results):
            raise error_at(loop, f"a round of the walk takes its block (attn.walk_block of the round), runs the "
                                 f"program where there is one and carries what it yields on, and does nothing "
                                 f"else ({WALK})")
        other = [op.operation for op in walk.regions[1].blocks[0].operations]
        if [op for op in other if not quiet(op)] or list(other[-1].operands) != self.args:
            raise error_at(other[-1], f"a round without a block carries every value on unchanged ({WALK})")
        self.yielded = list(walk.regions[0].blocks[0].operations)[-1].operation
        self.range_else = [op.operation for op in range_if.regions[1].blocks[0].operations] \
            if range_if.regions[1].blocks else []

    def q_ring(self, before: list, where: list, wanted: str):
        """The advance of Q's ring among `before` (the ops before the key range), which
        must advance the ring the Q ops took (`where`: its stage and phase) by one stage."""
        advances = [op for op in before if op.name == R.RING_ADVANCE]
        if len(advances) != 1 or any(w is None for w in where) or list(advances[0].operands) != where \
                or R.attrs_of(advances[0]).get("stages") != 1:
            raise error_at(advances[-1] if advances else self.range_if, wanted + " Q's ring, of one stage, "
                                                                                 "advanced once a block")
        return advances[0]

    def check_range_else(self, q_empty: list, q_ring, rotated: bool = False):
        """The key range's else branch: a consumer's release of Q (on `q_empty`, at Q's
        ring), without ping-pong then the previous round's epilogue (returned), a
        producer's nothing."""
        found = [op for op in self.range_else if not quiet(op) or op.name == R.RING_ADVANCE]
        wanted = [R.MBARRIER_ARRIVE] if q_empty else []
        wanted += ["scf.if"] if rotated else []
        release = found[0] if q_empty and found else None
        if [op.name for op in found] != wanted or (release is not None and (
                R.name_of(release.operands[0].owner) not in q_empty or release.operands[1] != q_ring.operands[0])):
            what = ("releases Q's slot, at Q's ring, " if q_empty else "") + \
                ("then stores the previous round's block, " if rotated else "")
            raise error_at(found[0] if found else self.range_if,
                           f"where the key range has no step a persistent CTA's role {what}yields the values it "
                           f"starts from and does nothing else ({WALK})")
        return found[-1] if rotated else None

    def previous(self, finish):
        """(the position of the previous round, those of its O, m and l) among the walk's
        carried values, as the previous block's epilogue `finish` takes them."""
        test = defining_op(finish.operands[0])
        inner = [op.operation for op in finish.regions[0].blocks[0].operations]
        finalize = next((op for op in inner if op.name == "attn.finalize"), None)
        values = [test.operands[0] if getattr(test, "name", "") == "arith.cmpi" else None,
                  *(list(finalize.operands)[:3] if finalize is not None else [None] * 3)]
        at = [next((p for p, a in enumerate(self.args) if v is not None and a == v), None) for v in values]
        if None in at:
            raise error_at(finish, f"the previous round's epilogue takes the round, O, m and l the walk carries "
                                   f"({WALK})")
        return at[0], at[1:]

    def check_carried(self, q_ring, previous: int | None = None, state: list | None = None) -> None:
        """What the walk carries from round to round, value by value, and where it starts."""
        results = list(self.range_if.results)
        wanted: dict[int, tuple] = {}
        for k, value in enumerate(list(self.range_else[-1].operands) if self.range_else else []):
            at = next((p for p, a in enumerate(self.args) if a == value), None)
            if at is not None:
                wanted[at] = (results[k], 0, "the K/V ring")
        for k in range(2):
            at = next((p for p, a in enumerate(self.args) if a == q_ring.operands[k]), None)
            if at is not None:
                wanted[at] = (q_ring.results[k], 0, "Q's ring")
        if previous is not None:
            wanted[previous] = (self.index, -1, "the previous round")
            for at, k, start in zip(state, (O, M, L), (0.0, -math.inf, 0.0)):
                wanted[at] = (results[k], start, "the previous round's O, m and l")
        inits = list(self.loop.operands)[3:]
        for at in range(len(self.args)):
            if at not in wanted:
                raise error_at(self.loop, f"the walk carries the rings (and without ping-pong the previous round, "
                                          f"its O, m and l) from round to round, and nothing else: its value {at} "
                                          f"is none of those ({WALK})")
            value, start, what = wanted[at]
            if list(self.yielded.operands)[at] != value:
                raise error_at(self.yielded, f"the walk carries {what} on from round to round: the round's branch "
                                             f"yields it as its program leaves it ({WALK})")
            starts = int_constant(inits[at]) == start if isinstance(start, int) else is_fill(inits[at], start)
            if not starts:
                raise error_at(self.loop, f"the walk starts {what} from {start} ({WALK})")

    def check_finish(self, op, previous, state: list, where: str) -> None:
        """scf.if `op` is the previous round's epilogue: where that round (`previous`) is
        one (>= 0), its block (attn.walk_block of it), the finalize of `state` (its O, m
        and l), O's store and the LSE's at that block."""
        test = defining_op(op.operands[0]) if op.name == "scf.if" else None
        inner = [o.operation for o in op.regions[0].blocks[0].operations] if test is not None else []
        item = inner[0] if inner else None
        ok = getattr(test, "name", "") == "arith.cmpi" and cmpi_predicate(test) == "sge" and \
            test.operands[0] == previous and int_constant(test.operands[1]) == 0 and not op.regions[1].blocks and \
            item.name == R.WALK_BLOCK and list(item.operands) == [previous]
        if not ok:
            raise error_at(op, f"{where} a persistent CTA's consumer stores the previous round's block where there "
                               f"is one (its round >= 0): attn.walk_block of that round, then its epilogue ({WALK})")
        check_epilogue(inner[1:-1], state, self.role, False, NOTE, "the walk's carried values",
                       list(item.results)[1:4])

    def check_role(self, first: tuple, last: tuple) -> list:
        """The role's region: before the walk nothing but its `first` turns, after it its
        `last`; returns what follows those."""
        ops = [op.operation for op in R.role_block(self.role).operations]
        at = next(k for k, op in enumerate(ops) if op == self.loop)
        extra = _turns(ops[:at], first, self.role, "before its walk over query blocks")
        if extra:
            raise error_at(extra[0], f"before its walk a persistent CTA's role does nothing but index arithmetic, "
                                     f"fills and, with ping-pong, consumer1's first hand-over ({WALK})")
        return _turns(ops[at + 1:], last, self.role, "after its walk over query blocks")
