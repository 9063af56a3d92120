"""sm_90a's producer warpgroup loading K one step ahead of V, written into the L5 IR
(attn-overlap-gemms, with the consumers' rotation of overlap.py).

Note [K one step ahead]: the overlapped consumers (Note [Overlapped steps in the IR] in
overlap.py) wait, in the trip of block n, for K(n) and then V(n - 1). attn-insert-pipelines
leaves the producer's KV step loading K(n) and V(n); this rotates it by half a step so
that the producer loads them in the order the consumers read them. Over the key range
[lo, hi) of the producer's KV loops:

    if lo < hi:
      step lo       load K(lo)                            (wait empty; write; arrive full)
      loops over n in [lo + 1, hi), carrying the K and V rings and the previous block:
                    load K(n); load V(previous)          (in the order the body had them)
      last step     load V(hi - 1)

K(n) and V(n) thus stand on rings of their own, V's a step behind. Each trip keeps the
order of the two loads of the body it came from: K first gives K0, K1, V0, K2, V1, ...
(K up to S steps ahead of the consumers with S stages, V S - 1); a body with V first --
a user pass's edit before attn-insert-pipelines, such as examples/passes/v_before_k.py --
gives K0, V0, K1, V1, ... Each load's ops (the attn.load, the phase arithmetic, the wait
for the empty slot, the slot write, the arrival on the full barrier) move as one, with
their block index and ring rebound: the load's block, stage and phase must be the loop's
block (Note [Key blocks top down] in attnc/passes/tile_program.py; `lo` and `hi` above
count steps) and ring, and no op of one load may read a value of the other's.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import scf

from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.ir.ops import int_constant
from attnc.passes.tile_program import KV_LOOP, kv_block
from attnc.schedule.overlap import PASS, KeyRange, chained_loops, ring_advance

TILES = ("k", "v")


def load_ahead(role: ir.Operation, kernel: ir.Operation) -> None:
    """Note [K one step ahead], on the producer role `role` of `kernel` (L5)."""
    bars = {R.name_of(b): R.attrs_of(b) for b in R.mbarrier_ops(kernel)}
    block = R.body_block(role)
    ops = [op.operation for op in block.operations]
    at = [k for k, op in enumerate(ops) if op.name == "scf.for" and KV_LOOP in op.attributes]
    if not at:
        nested = [op for op in R.ops_in(block, ("scf.for",)) if KV_LOOP in op.attributes]
        raise error_at(role, f"{PASS} ran twice on role 'producer'" if nested else
                             f"{PASS}: role 'producer' has no KV loop (scf.for with {KV_LOOP})")
    loops = [ops[k] for k in at]
    bodies = [_Loads(loop, bars) for loop in loops]
    chained_loops(ops, at, "its ring", 2)
    # the ring after the key range, where the next query block goes on with it (Note [The
    # walk over query blocks] in walk.py): K's, advanced once per step like V's
    ring = list(loops[-1].results)
    carried_on = any(list(r.uses) for r in ring)
    with ir.InsertionPoint(loops[0]), R.pass_loc(PASS, loops[0]):
        keys = KeyRange(loops)
        some = keys.some([r.type for r in ring] if carried_on else [])
        with ir.InsertionPoint(some.then_block):
            k_ring = _rotate(keys, bodies, loops[0])
            scf.YieldOp(k_ring if carried_on else [])
        if carried_on:
            with ir.InsertionPoint(some.else_block):
                scf.YieldOp(list(loops[0].operands)[3:5])
    for old, new in zip(ring, some.results if carried_on else ()):
        old.replace_all_uses_with(new)
    for loop in reversed(loops):
        loop.erase()


def _rotate(keys: KeyRange, bodies: list["_Loads"], first_loop) -> list:
    """The rotated loads at the insertion point; returns K's ring after them."""
    stage0, phase0 = list(first_loop.operands)[3:5]
    first, past = keys.first()
    body = bodies[0]
    body.clone("k", first, stage0, phase0)
    k_next = body.advance(stage0, phase0)
    of = {b.loop: b for b in bodies}

    def trip(loop, old, n) -> list:
        b = of[old]
        k_stage, k_phase, v_stage, v_phase, previous = loop.inner_iter_args
        for tile in b.order:
            b.clone(tile, n if tile == "k" else previous, *((k_stage, k_phase) if tile == "k" else (v_stage, v_phase)))
        return [*b.advance(k_stage, k_phase), *b.advance(v_stage, v_phase), n]

    k_stage, k_phase, v_stage, v_phase, previous = keys.rotated(past, [*k_next, stage0, phase0, first], trip)
    body.clone("v", previous, v_stage, v_phase)
    return [k_stage, k_phase]


class _Loads:
    """One producer KV loop's body as attn-insert-pipelines makes it: for K and V, the
    ops of its load in their order, and the ring's advance."""

    def __init__(self, loop: ir.Operation, bars: dict):
        self.loop = loop
        block = loop.regions[0].blocks[0]
        args = list(block.arguments)
        if len(args) != 3:
            raise error_at(loop, f"{PASS}: a producer's KV loop carries its ring (stage, phase), as "
                                 f"attn-insert-pipelines makes it; this one carries {len(args) - 1} values")
        _, self.stage, self.phase = args
        self.n = kv_block(loop)         # rebuilt in each rotated trip (KeyRange.rotated)
        self.ops: dict[str, list[ir.Operation]] = {t: [] for t in TILES}
        self.order: list[str] = []
        found: dict[str, ir.Operation] = {}
        pending: list[ir.Operation] = []
        advance = None
        for op in list(block.operations)[1:]:
            op = op.operation
            if op.name == "scf.yield":
                break
            if op.name.startswith("arith.") and not op.regions:
                pending.append(op)
                continue
            if op.name == R.RING_ADVANCE and advance is None:
                advance = op
                continue
            tile, key = self._key(op, bars)
            if key in found:
                raise error_at(op, f"{PASS}: a producer's KV step loads each of K and V once, with one {key}")
            found[key] = op
            self.ops[tile] += pending + [op]
            pending = []
            if tile not in self.order:
                self.order.append(tile)
        terminator = list(block.operations)[-1]
        missing = [f"{t} {k}" for t in TILES for k in ("attn.load", R.MBARRIER_WAIT, R.SLOT_WRITE,
                                                        R.CP_ASYNC_MBARRIER_ARRIVE) if f"{t} {k}" not in found]
        if missing or advance is None or pending:
            what = missing[0] if missing else ("index arithmetic after the loads" if pending else R.RING_ADVANCE)
            raise error_at(loop, f"{PASS} rotates the producer's KV step attn-insert-pipelines makes, which has "
                                 f"no {what} here")
        if list(advance.operands) != [self.stage, self.phase] or list(terminator.operands) != list(advance.results):
            raise error_at(advance, f"{PASS}: a producer's KV step advances its ring once and carries it on")
        self.stages = advance.attributes["stages"]
        self._check_operands(found)

    @staticmethod
    def _key(op: ir.Operation, bars: dict) -> tuple[str, str]:
        name = op.name
        if name == "attn.load":
            tile = R.attrs_of(op).get("operand")
        elif name == R.SLOT_WRITE:
            tile = R.attrs_of(op).get("tile")
        elif name in (R.MBARRIER_WAIT, R.CP_ASYNC_MBARRIER_ARRIVE):
            a = bars.get(R.name_of(op.operands[0].owner), {})
            side = "empty" if name == R.MBARRIER_WAIT else "full"
            tile = a.get("tile") if a.get("channel") == "kv" and a.get("side") == side else None
        else:
            tile = None
        if tile not in TILES:
            raise error_at(op, f"{PASS} rotates the producer's KV step attn-insert-pipelines makes (K's and V's "
                               f"loads, each waiting for its empty slot and arriving on its full barrier), "
                               f"which has no {name} like this one")
        return tile, f"{tile} {name}"

    def _check_operands(self, found: dict) -> None:
        """A load reads the block index and the ring only where its ops name them --
        the load's block, the wait's, write's and arrival's stage, the wait's phase --
        and no value of the other load."""
        for tile in TILES:
            load, wait = found[f"{tile} attn.load"], found[f"{tile} {R.MBARRIER_WAIT}"]
            write, arrive = found[f"{tile} {R.SLOT_WRITE}"], found[f"{tile} {R.CP_ASYNC_MBARRIER_ARRIVE}"]
            ok = (load.operands[3] == self.n and wait.operands[1] == self.stage and write.operands[1] == self.stage
                  and arrive.operands[1] == self.stage and write.operands[2] == load.result
                  and flips(wait.operands[2], self.phase))
            if not ok:
                raise error_at(load, f"{PASS}: the {tile.upper()} load of a producer's KV step loads the loop's "
                                     f"block into the stage of its ring, waiting on its phase's flip")
            own = set()
            for op in self.ops[tile]:
                for value in op.operands:
                    owner = value.owner
                    inside = not isinstance(owner, ir.Block) and owner.operation.parent == self.loop.operation
                    if inside and value not in (self.n, self.stage, self.phase) and value not in own:
                        raise error_at(op, f"{PASS}: an op of the {tile.upper()} load of a producer's KV step "
                                           f"reads a value of the other load's")
                own.update(op.results)

    def clone(self, tile: str, n, stage, phase) -> None:
        """`tile`'s load of block n into (stage, phase) of its ring, at the insertion point."""
        vmap = {self.n: n, self.stage: stage, self.phase: phase}
        for op in self.ops[tile]:
            new = op.clone()
            for k, v in enumerate(new.operands):
                if v in vmap:
                    new.operands[k] = vmap[v]
            vmap.update(zip(op.results, new.results))

    def advance(self, stage, phase) -> list:
        return ring_advance(stage, phase, self.stages)


def flips(value, phase) -> bool:
    """Whether a wait's parity operand is the phase's flip, as the empty side's waits have it."""
    owner = value.owner
    return getattr(owner, "name", "") == "arith.xori" and list(owner.operands)[0] == phase \
        and int_constant(owner.operands[1]) == 1
