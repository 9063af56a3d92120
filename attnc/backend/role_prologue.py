"""sm_80's cooperative role before its KV loops, as its lowering reads it from the L5 IR
(`prologue_steps`; sm_90a's cooperative role's loads before its key range too).

Note [The role op by op]: what sm_80's role does before its KV loops is lowered op by op
too, in the order the ops stand (`ForwardLoads.prologue` in forward_loads.py, which
sm_90a's cooperative role's loads before its key range take as well: Note [Cooperative
steps op by op] in coop_steps.py): Q's load and its group, the key range (read where its
op stands, or without one -- no mask -- before the first K or V load), and the K and V
loads of the first steps, each `ahead` i filling slot i (so each tile's loads stand in
the order of their `ahead`, as the ring fills its slots). The ops after the KV loops are
the epilogue the kernel builds: a wait for every copy, the finalize, O's store and the
LSE's at the CTA's block, checked to be those. With the KV loops (Note [Steps op by op])
the whole role is followed or refused at an op (Note [Roles followed in full] in
attnc/ir/roles.py). With a guessed first block (Note [The guessed first block in the IR]
in attnc/schedule/first_guess.py) the guess's K and V stand before the key range, at
attn.first_block_guess, and its miss branch after it.
"""
from __future__ import annotations

from mlir import ir

from attnc.backend.kv_steps import ARITH, COUNTS, StepOp, check_flow, pattern_op, step_op
from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.ir.ops import cmpi_predicate, defining_op

_PROLOGUE = ("attn.load", R.SLOT_WRITE, R.CP_ASYNC_COMMIT, "attn.kv_range", "attn.block_map_range")
_QUIET = (R.RING_ADVANCE, "attn.fill", "attn.dim")      # their values the kernel computes itself
_MISSED = (R.CP_ASYNC_WAIT, "attn.load", R.SLOT_WRITE, R.CP_ASYNC_COMMIT)   # a guess's miss branch


def prologue_steps(ops: list, first_block, where, kernel, stages: int) -> tuple[StepOp, ...]:
    """The cooperative role's ops `ops` before its KV loops, checked (Note [The role op by
    op]): the first steps' loads are of `first_block`, the first KV loop's first block, but
    for a guessed first block's copies before the key range and their miss branch after it
    (Note [The guessed first block in the IR] in attnc/schedule/first_guess.py); `where`
    locates what is missing."""
    out: list[StepOp] = []
    made: dict = {}
    next_ahead = {"k": 0, "v": 0}
    kv_range = guess = missed = None
    for op in ops:
        if op.name == R.FIRST_BLOCK_GUESS:
            guess = _check_guess(op, kernel, kv_range, next_ahead)
            out.append(step_op(op, "first_block_guess"))
            continue
        if op.name == "scf.if" and guess is not None and missed is None:
            missed = op
            after_range = bool(out) and out[-1].name == "kv_range"
            out.append(_missed_steps(op, first_block, kernel, kv_range if after_range else None, guess, next_ahead))
            continue
        found = pattern_op(op, lambda n: n in _QUIET or n.startswith(ARITH), _PROLOGUE, "before the KV loops",
                            "The role op by op")
        if found is None:
            continue
        (attrs, what), name = found, op.name
        if name in ("attn.kv_range", "attn.block_map_range"):
            if kv_range is not None:
                raise error_at(op, "the role reads its key range once (Note [The role op by op])")
            if guess is not None and (name != "attn.block_map_range"
                                      or list(op.operands) != list(guess.owner.operands)):
                raise error_at(guess.owner, f"the guess is of the query block whose key range the role reads from "
                                            f"its block map, (m_block, b, h) as attn.block_map_range takes them "
                                            f"({_GUESS_NOTE})")
            kv_range = op
        elif name == "attn.load":
            if what == "q":
                if op.operands[0] != kernel.operands[0] or ("attn.load", "q", 0) in made.values():
                    raise error_at(op, "the role loads Q once, from the kernel's q (Note [The role op by op])")
            elif what in next_ahead:
                ahead = int(attrs.get("ahead", -1))
                block = guess if guess is not None and kv_range is None else first_block
                if (op.operands[0] != kernel.operands[1 if what == "k" else 2] or op.operands[3] != block
                        or ahead != next_ahead[what]):
                    whose = "the guessed first block" if block is guess else "the first KV loop's first block"
                    raise error_at(op, f"before the KV loops the role loads {what.upper()} of the first steps in turn "
                                       f"(ahead = {next_ahead[what]} next), from the kernel's {what}, at {whose} "
                                       f"(Note [The role op by op])")
                next_ahead[what] += 1
            else:
                raise error_at(op, f"no load of {what!r} before the KV loops (Note [The role op by op])")
        elif name == R.SLOT_WRITE:
            check_flow(op, what, made)
            if "rewrite" in op.attributes:
                raise error_at(op, f"a rewrite of a slot is a guessed first block's miss ({_GUESS_NOTE})")
        for k, result in enumerate(op.results):
            made[result] = (name, what, k)
        if name == "attn.block_map_range":         # the range read here, from the map's row
            name, what = "attn.kv_range", "map"
        out.append(step_op(op, name.removeprefix("attn."), what, int(attrs.get(COUNTS.get(name, ""), 0))))
    if ("attn.load", "q", 0) not in made.values():
        raise error_at(where, "before its KV loops the role loads Q (Note [The role op by op])")
    if next_ahead != {"k": stages, "v": stages - 1}:
        raise error_at(where, f"before the KV loops the role loads K of the first {stages} steps and V of the "
                             f"first {stages - 1}, one per slot ahead (Note [The role op by op])")
    if guess is not None and missed is None:
        raise error_at(guess.owner, f"the guessed first block's copies are loaded again in an scf.if after the key "
                                    f"range ({_GUESS_NOTE})")
    return tuple(out)


_GUESS_NOTE = "Note [The guessed first block in the IR] in attnc/schedule/first_guess.py"


def _check_guess(op, kernel, kv_range, next_ahead: dict) -> ir.Value:
    """The guess of the first block: a cooperative role's, before the key range and the K/V
    copies."""
    target = R.attrs_of(kernel).get("target")
    if target not in ("sm_80", "sm_90a"):
        raise error_at(op, f"{R.FIRST_BLOCK_GUESS}: the guessed first block is a cooperative role's (sm_80's, "
                           f"sm_90a's); the {target} lowering has no pattern for it ({_GUESS_NOTE})")
    if kv_range is not None or any(next_ahead.values()):
        raise error_at(op, f"the role guesses its first block once, before it reads its key range or copies K and "
                           f"V ({_GUESS_NOTE})")
    return op.result


def _missed_steps(branch, first_block, kernel, kv_range, guess, next_ahead: dict) -> StepOp:
    """The miss of a guessed first block: an scf.if right after the key range (`kv_range`,
    None where the branch stands elsewhere), taken where the range has a block and its top
    is not the guess, whose branch waits for every copy and loads the guessed tiles again,
    at the first block, into their slots (`rewrite`), a cp.async group each; its StepOp
    holds them as its `body`."""
    ops = [op.operation for op in branch.regions[0].blocks[0].operations][:-1]      # but the yield
    found = [pattern_op(op, lambda n: False, _MISSED, "in a guess's miss branch", "The role op by op") for op in ops]
    guessed = [t for t in ("k", "v") if next_ahead[t]]
    names = [(op.name, what) for op, (_, what) in zip(ops, found)]
    wanted = [(R.CP_ASYNC_WAIT, "")] + [x for t in guessed
                                        for x in (("attn.load", t), (R.SLOT_WRITE, t), (R.CP_ASYNC_COMMIT, ""))]
    loads = [op for op in ops if op.name == "attn.load"]
    writes = [op for op in ops if op.name == R.SLOT_WRITE]
    if (kv_range is None or not _is_miss_test(branch.operands[0], kv_range, first_block, guess)
            or branch.regions[1].blocks or names != wanted or found[0][0].get("pending") != 0
            or any(op.operands[3] != first_block or R.attrs_of(op).get("ahead") != 0
                   or op.operands[0] != kernel.operands[1 if t == "k" else 2] for op, t in zip(loads, guessed))
            or any("rewrite" not in op.attributes or op.operands[2] != load.result
                   for op, load in zip(writes, loads))):
        raise error_at(branch, f"right after the key range, where the range has a block and its top is not the "
                               f"guess (lo < hi and top != guess, as attn-insert-pipelines writes it), the role "
                               f"waits for every copy (pending = 0) and loads "
                               f"{' and '.join(t.upper() for t in guessed)} "
                               f"again at the first KV loop's first block (ahead = 0), each a rewrite of its "
                               f"slot and a cp.async group, with no else branch ({_GUESS_NOTE})")
    body = tuple(step_op(op, op.name.removeprefix("attn."), what, int(attrs.get(COUNTS.get(op.name, ""), 0)))
                 for op, (attrs, what) in zip(ops, found))
    return StepOp("guess_missed", body=body)


def _is_miss_test(cond, kv_range, top, guess) -> bool:
    """Whether `cond` is (lo < hi) and (top != guess) of the range `kv_range`."""
    both = defining_op(cond)
    if both is None or both.name != "arith.andi":
        return False
    some, other = (defining_op(v) for v in both.operands)
    return (some is not None and other is not None and some.name == other.name == "arith.cmpi"
            and cmpi_predicate(some) == "slt" and list(some.operands) == list(kv_range.results[:2])
            and cmpi_predicate(other) == "ne" and list(other.operands) == [top, guess])
