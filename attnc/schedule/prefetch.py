"""The cooperative role's loads issued ahead of their steps (attn-warp-specialize).

Note [cp.async prefetch]: the cooperative kernels (sm_80's, attnc/backend/sm80.py, and
sm_90a's without a producer warpgroup, sm90a.py; `_prologue` in forward_loads.py) copy K
and V of later key blocks while they compute the current one.
With S = stages slots, a query block's steps are

    prologue    Q, then K and V of steps 0 .. S - 2 and K of step S - 1, a cp.async group each
    step t      wait for K(t); get K(t) and Q; put V(t + S - 1); QK^T (score_mod, mask);
                softmax; wait for V(t); get V(t); put K(t + S); rescale; P.V

(with one slot, V(t) is put at step t itself and waited for right after QK^T, before the
softmax, and K(t + 1) put then: Note [Where V is waited for] in sm80.py). Q is read from
its slot at every step, so its get stands in every KV loop (Note [Re-reads] in
sync_ir.py). The tile program loads each block in its own step; this moves the role's
loads there: the prologue's before the first KV loop, each step's into the loop, and
each `attn.load` of K or V that a step issues for a later one says how many steps later
with `ahead` (its block operand is the block of its own step, or before the loops the
range's top: the block of step 0, Note [Key blocks top down] in tile_program.py). The
steps count through every KV loop of the role in order; a load past the last step copies
nothing (an empty cp.async group, as in the kernel: Note [cp.async group counting] in
forward_loads.py).
attn-insert-pipelines then writes the waits with the kernel's counts and, where the role
reads a block map, moves the first block's copies before the map is read, at a guess
(Note [The guessed first block in the IR] in first_guess.py); two query blocks per CTA
are a walk around the role's program (Note [Two query blocks in the IR] in walk.py). On
sm_90a attn-overlap-gemms then rotates the steps so that the GEMMs overlap, which moves
each step's loads and waits to where that kernel has them (Note [Overlapped cooperative
steps in the IR] in overlap_coop.py).
"""
from __future__ import annotations

from mlir import ir

from attnc.errors import AttncError
from attnc.ir import roles as R
from attnc.passes.tile_program import first_kv_block, kv_block, kv_block_op

PASS = "attn-warp-specialize"


def prefetch(role: ir.Operation, stages: int) -> None:
    """Note [cp.async prefetch], on the cooperative role `role` as the split leaves it."""
    block = R.role_block(role)
    top = [op.operation for op in block.operations]
    loops = [op for op in top if op.name == "scf.for" and _exchanges(op.regions[0].blocks[0], "k")]
    q_put = next((op for op in top if op.name == R.PUT and _tile(op) == "q"), None)
    q_get = next((op for op in top if op.name == R.GET and _tile(op) == "q"), None)
    if not loops or q_put is None or q_get is None:
        raise AttncError(f"{PASS}: the cooperative role has no KV loop getting K, or no put and get of Q")
    steps = [_Step(loop) for loop in loops]
    first = steps[0]
    with ir.InsertionPoint(loops[0]):
        for i in range(stages):
            _issue(first.loads["k"], first.puts["k"], first_kv_block(loops[0]), i)
            if i < stages - 1:
                _issue(first.loads["v"], first.puts["v"], first_kv_block(loops[0]), i)
    q_value = q_put.operands[1]
    for step in steps:
        step.reorder(stages, q_get, q_value)
    if not list(q_get.result.uses):
        q_get.erase()


class _Step:
    """One KV loop's body: its K and V loads, puts and gets (one of each per tile)."""

    def __init__(self, loop: ir.Operation):
        self.loop = loop
        self.body = loop.regions[0].blocks[0]
        self.iv = kv_block(loop)
        self.loads, self.puts, self.gets = {}, {}, {}
        for tile in ("k", "v"):
            found = _exchanges(self.body, tile)
            if [op.name for op in found] != ["attn.load", R.PUT, R.GET]:
                raise AttncError(f"{PASS}: a KV loop of the cooperative role loads, puts and gets {tile.upper()} "
                                 f"once each, in that order (Note [cp.async prefetch]); this one does "
                                 f"{', '.join(op.name for op in found)}")
            self.loads[tile], self.puts[tile], self.gets[tile] = found

    def reorder(self, stages: int, q_get: ir.Operation, q_value: ir.Value) -> None:
        k_get, v_get = self.gets["k"], self.gets["v"]
        for tile in ("k", "v"):         # the GEMMs read the slots the gets read
            self.loads[tile].result.replace_all_uses_with(self.gets[tile].result)
        k_get.move_before(_after(kv_block_op(self.loop)))
        with ir.InsertionPoint(_after(k_get)):
            q = q_get.clone().operation
        _replace_in(self.body, q_value, q.result)
        _replace_in(self.body, q_get.result, q.result)
        with ir.InsertionPoint(_after(q)):
            _issue(self.loads["v"], self.puts["v"], self.iv, stages - 1)
        # Note [Where V is waited for]: one slot waits for V before the softmax, more after it.
        v_get.move_before(self._first("attn.softmax_step" if stages == 1 else "attn.rescale"))
        with ir.InsertionPoint(_after(v_get)):
            _issue(self.loads["k"], self.puts["k"], self.iv, stages)
        for tile in ("k", "v"):
            self.puts[tile].erase()
            self.loads[tile].erase()

    def _first(self, name: str) -> ir.Operation:
        return next(op.operation for op in self.body.operations if op.operation.name == name)


def _issue(load: ir.Operation, put: ir.Operation, block, ahead: int) -> None:
    """A copy of `load` of the block `ahead` steps after the one of `block`'s step, and its put."""
    new = load.clone().operation
    new.operands[len(new.operands) - 1] = block
    new.attributes["ahead"] = R.i64(ahead)
    put.clone().operation.operands[1] = new.result


def _exchanges(block: ir.Block, tile: str) -> list[ir.Operation]:
    """The loads, puts and gets of `tile` at the top of `block`, in order."""
    return [op.operation for op in block.operations
            if op.operation.name in ("attn.load", R.PUT, R.GET) and _tile(op.operation) == tile]


def _tile(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["operand" if op.name == "attn.load" else "tile"]).value


def _after(op: ir.Operation) -> ir.Operation:
    """The op after `op` in its block."""
    ops = [o.operation for o in op.block.operations]
    return ops[ops.index(op) + 1]


def _replace_in(block: ir.Block, old: ir.Value, new: ir.Value) -> None:
    """Uses of `old` by ops in `block` (and the regions under them) now use `new`."""
    def visit(op):
        for i, v in enumerate(op.operands):
            if v == old:
                op.operands[i] = new
        return ir.WalkResult.ADVANCE

    for op in block.operations:
        op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
