"""A cooperative role's first key block guessed before the block map is read, written into
the L5 IR (attn-insert-pipelines, option early_first: by default on sm_80; sm_90a's
cooperative role takes it where asked).

Note [The guessed first block in the IR]: where the cooperative role reads its key range
from a block map (attn.block_map_range), the kernel issues the first block's K and V
before the map's row is read, at a guess, and loads them again only where the range
starts elsewhere (Note [First block before the map] in attnc/backend/forward_loads.py).
This writes that schedule into the role:

    before:  %r:4 = attn.block_map_range(%m, %b, %h)
             ... %top = arith.subi %r#1, %c1 ...
             %k = attn.load(.., %top) {ahead = 0}; attn.slot_write(%kv, %s, %k) {tile = "k"}
             attn.cp_async_commit; ... (the same for V)
    after:   %g = attn.first_block_guess(%m, %b, %h)
             %k' = attn.load(.., %g) {ahead = 0}; attn.slot_write(%kv, %s, %k'); attn.cp_async_commit
             ... (V at %g)
             %r:4 = attn.block_map_range(%m, %b, %h)
             ... %top ...
             %miss = arith.andi (lo < hi), (%top != %g)
             scf.if %miss {
               attn.cp_async_wait {pending = 0}
               %k = attn.load(.., %top) {ahead = 0}; attn.slot_write(..) {rewrite}; attn.cp_async_commit
               ... (V at %top)
             }

The guess is one op, not arithmetic, as attn.block_map_range is: both read the query
tiles' form, grid blocks (the guess: the top block of the mask analysis' static hull) or
a tile table's (`aligned_tiles`; the guess: the tile's diagonal block), which
attn-kernel-choices decides after this pass; the lowering computes it (`_first_guess` in
attnc/backend/forward_loads.py). Any block is a sound guess: a miss only loads again.

A miss waits for every copy before it writes the slots again (`rewrite`: the slot's
unread fill replaced once its copies landed), so the groups after the branch count the
same either way (Note [cp.async group counting]). attn-verify-pipeline runs the role both
ways: the guess at the range's top and elsewhere (Note [Key blocks the check runs]).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.ir.tiles import BLOCK_MAP_RANGE
from attnc.passes.tile_program import KV_LOOP

PASS = "attn-insert-pipelines"
NOTE = "Note [The guessed first block in the IR] in attnc/schedule/first_guess.py"


def reads_block_map(block: ir.Block) -> bool:
    """Whether the role program `block` reads its key range from a block map."""
    return any(op.operation.name == BLOCK_MAP_RANGE for op in block.operations)


def guess_first(role: ir.Operation, block: ir.Block) -> None:
    """Issue the first block's K and V of the role program `block` at a guess before its
    attn.block_map_range, and again after it where the range's top is another block."""
    ops = [op.operation for op in block.operations]
    loop = next((k for k, op in enumerate(ops) if op.name == "scf.for" and KV_LOOP in op.attributes), None)
    reads = [k for k, op in enumerate(ops[:loop]) if op.name == BLOCK_MAP_RANGE]
    if loop is None or len(reads) != 1:
        raise error_at(role, f"{PASS}: early_first needs a role that reads its key range once from a block map "
                             f"(attn.block_map_range) before its KV loops ({NOTE})")
    range_op = ops[reads[0]]
    firsts = [_first_copy(ops, k, loop) for k in range(reads[0] + 1, loop)
              if ops[k].name == "attn.load" and _ahead(ops[k]) == 0]
    if not firsts:
        raise error_at(range_op, f"{PASS}: early_first found no copy of the first block (attn.load with "
                                 f"ahead = 0) after the key range ({NOTE})")
    top = firsts[0][0].operands[3]
    later = ops[reads[0]:]
    loc = R.pass_loc(PASS, range_op)
    with ir.InsertionPoint(range_op), loc:
        guess = R.create(R.FIRST_BLOCK_GUESS, [top.type], list(range_op.operands)).result
        for copy in firsts:
            for op in copy:
                clone = op.clone()
                if op.name == "attn.load":
                    clone.operands[3] = guess
                    loaded = clone.result
                elif op.name == R.SLOT_WRITE:
                    clone.operands[2] = loaded
                _check_before(clone, later)
    lo, hi = range_op.results[0], range_op.results[1]
    with ir.InsertionPoint(firsts[0][0]), loc:
        some = arith.CmpIOp(arith.CmpIPredicate.slt, lo, hi).result
        other = arith.CmpIOp(arith.CmpIPredicate.ne, top, guess).result
        branch = scf.IfOp(arith.AndIOp(some, other).result)
    with ir.InsertionPoint(branch.then_block), loc:
        R.create(R.CP_ASYNC_WAIT, attributes={"pending": 0})
        end = scf.YieldOp([])
    for load, write, commit in firsts:
        for op in (load, write, commit):
            op.move_before(end)
        write.attributes["rewrite"] = ir.UnitAttr.get()


def _check_before(op: ir.Operation, later: list) -> None:
    """The guess's copy `op` takes no value made at or after the key range (`later`)."""
    for value in op.operands:
        owner = value.owner
        if not isinstance(owner, ir.Block) and owner.operation in later:
            raise error_at(owner, f"{PASS}: early_first issues the first block's copies before the key range is "
                                  f"read, and this value they take is made after it ({NOTE})")


def _ahead(op: ir.Operation) -> int:
    return R.attrs_of(op).get("ahead", -1)


def _first_copy(ops: list, k: int, end: int) -> tuple[ir.Operation, ir.Operation, ir.Operation]:
    """The load at ops[k], its slot write and the commit that closes its group."""
    load = ops[k]
    uses = [use.owner for use in load.result.uses]
    after = ops[k + 1:end]
    write = next((op for op in after if op.name == R.SLOT_WRITE and op in uses), None)
    commit = next((op for op in after[after.index(write) + 1:] if op.name == R.CP_ASYNC_COMMIT), None) \
        if write is not None else None
    if write is None or commit is None or len(uses) != 1 or R.attrs_of(write).get("completes") != "group":
        raise error_at(load, f"{PASS}: early_first moves the first block's copies, each an attn.load written "
                             f"into its slot as a cp.async group and committed ({NOTE})")
    return load, write, commit
