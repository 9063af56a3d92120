"""sm_90a's producer warpgroup as the lowering reads it from the L5 IR (`load_steps`), to
build each trip of its KV loops op by op (sm90a_ws.py).

Note [Loads op by op]: a trip of the producer's KV loop, as attn-overlap-gemms writes it
(Note [K one step ahead] in attnc/schedule/load_ahead.py) -- the load of K(n) and the
load of V of the block before, each a wait for its empty slot, the slot's write and the
arrival on its full barrier -- is lowered from its ops in the order they stand, a
pattern per op (sm90a_ws.py's `LOAD_PATTERNS`): the wait (mbarrier.try_wait on the
empty phase), the write (the tile's cp.async copies, zero-filled past N or for a block
the block map skips) and the arrival (cp.async.mbarrier.arrive.noinc). So the order of
K's and V's loads in a trip, or of their ops, is the kernel's, once attn-verify-pipeline,
which the lowering runs first, found it sound. What stays the plan's: which ops a trip
has (one of each for K and for V; no op without a pattern), each load's wait before its
write before its arrival, which carried values are the K and V rings and the previous
block (the lowering takes a step's slot and block from its index, the verifier from the
rings, so the two must not part), and one trip for every loop. The kernel's loop runs
over the steps t of the key range with K(0) peeled, K(t + 1) where there is one and
V(t) -- the IR's trips one step on, with the last V folded in. So K's first load before
the loops is built from its ops likewise, and V's last after them is checked as a
trip's loads are (the same ops in the same order, then); `check_key_range`
(wgmma_steps.py) checks what the kernel takes as its own of the range. Q's load before
the range is built from its ops too: the wait for Q's empty slot (a persistent CTA's,
whose Q slot is reused every round, Q's ring of one stage carried through the walk),
the write, the arrival, in that order. Everything else -- the ops between the loops,
nothing after them, a persistent CTA's walk and the rings it carries -- is checked op by
op (role_shell.py, Notes [Roles followed in full] in attnc/ir/roles.py and [The walk
followed in full] in role_shell.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from attnc.backend.kv_steps import StepOp
from attnc.backend.role_shell import check_producer, check_shell
from attnc.backend.wgmma_steps import advances, bar_of, check_key_range, tile_of
from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.passes.tile_program import KV_LOOP, kv_block
from attnc.schedule.load_ahead import flips

NOTE = "Note [Loads op by op]"
# The carried values of a trip, as attn-overlap-gemms orders them (after the block index).
K_STAGE, K_PHASE, V_STAGE, V_PHASE, PREVIOUS = range(5)
_OPS = {R.MBARRIER_WAIT: ("wait", "empty"), R.SLOT_WRITE: ("write", None),
        R.CP_ASYNC_MBARRIER_ARRIVE: ("arrive", "full")}


@dataclass(frozen=True)
class LoadSteps:
    """The producer's loads in its KV loops' trip and around the loops: its ops in order."""

    trip: tuple[StepOp, ...]
    first: tuple[StepOp, ...] = ()      # K of the range's first block, before the loops
    last: tuple[StepOp, ...] = ()       # V of its last block, after them
    q: tuple[StepOp, ...] = ()          # Q's load, before the key range

    def runs(self) -> list[tuple[str, tuple[StepOp, ...]]]:
        """The trip as runs of consecutive ops of one tile: (tile, ops)."""
        out: list[tuple[str, list[StepOp]]] = []
        for op in self.trip:
            if out and out[-1][0] == op.what:
                out[-1][1].append(op)
            else:
                out.append((op.what, [op]))
        return [(tile, tuple(ops)) for tile, ops in out]


def load_steps(kernel) -> LoadSteps:
    """The producer role's loads of `kernel` (L5, K one step ahead), checked (Note [Loads
    op by op])."""
    bars = {R.name_of(b): R.attrs_of(b) for b in R.mbarrier_ops(kernel)}
    role = R.role_named(kernel, "producer")
    loops = [op for op in R.ops_in(R.role_block(role), ("scf.for",)) if KV_LOOP in op.attributes]
    if not loops:
        raise error_at(role, f"the producer has no KV loop ({NOTE})")
    trips = [_trip(loop, bars) for loop in loops]
    for trip, loop in zip(trips, loops):
        if trip != trips[0]:
            raise error_at(loop, f"the producer's KV loops have one trip: the kernel builds them from one ({NOTE})")
    # V's last load, folded into the kernel's loop, has the trip's V ops: each load's are
    # a wait, a write and an arrival, in that order.
    first, last = _around(loops, bars, kernel)
    return LoadSteps(trips[0], first, last, _q_load(role, loops[0], bars))


def _q_load(role, first_loop, bars: dict) -> tuple[StepOp, ...]:
    """Q's load: the ops of the role's program for one query block before the scf.if over
    the key range -- a wait for Q's empty slot where Q's channel has that barrier (a
    persistent CTA's), the slot's write, the arrival on its full barrier."""
    key_range = first_loop.operation.parent
    ops = [op.operation for op in R.body_block(role).operations]
    at = next((k for k, op in enumerate(ops) if op == key_range), None)
    if at is None:
        raise error_at(first_loop, f"the producer's scf.if over the key range stands in its program for one "
                                   f"query block, as attn-overlap-gemms makes it ({NOTE})")
    empty = any(a.get("channel") == "q" and a.get("side") == "empty" for a in bars.values())
    stage = next((op.operands[1] for op in ops[:at] if op.name in _OPS), None)
    ring = {"q": (stage, _q_phase(ops[:at], bars), None)}
    return _loads(ops[:at], bars, ring, key_range, "the block's", waits=empty)


def _q_phase(ops: list, bars: dict):
    """The phase of Q's ring, as the wait for its empty slot flips it (None without one)."""
    for op in ops:
        if op.name == R.MBARRIER_WAIT and _q_tile(op, bars, "empty") == "q":
            owner = op.operands[2].owner
            return owner.operands[0] if getattr(owner, "name", "") == "arith.xori" else None
    return None


def _q_tile(op, bars: dict, side: str | None) -> str:
    """"q" for Q's slot write or an op on Q's barrier of `side`, else the K/V tile (tile_of)."""
    a = bars.get(bar_of(op), {}) if op.name != R.SLOT_WRITE else {}
    if a.get("channel") == "q" and a.get("side") == side:
        return "q"
    return tile_of(op, bars, side)


def _trip(loop, bars: dict) -> tuple[StepOp, ...]:
    block = loop.regions[0].blocks[0]
    args = list(block.arguments)[1:]
    n = kv_block(loop)
    if len(args) != 5:
        raise error_at(loop, f"the producer's KV loop carries the K and V rings and the previous block, as "
                             f"attn-overlap-gemms makes it (run it after attn-insert-pipelines) ({NOTE})")
    rings = {"k": (args[K_STAGE], args[K_PHASE], n), "v": (args[V_STAGE], args[V_PHASE], args[PREVIOUS])}
    out = _loads(list(block.operations), bars, rings, loop, "this KV loop's")
    terminator = list(block.operations)[-1]
    yielded = list(terminator.operands)
    if not (advances(yielded[K_STAGE], args[K_STAGE], args[K_PHASE])
            and advances(yielded[V_STAGE], args[V_STAGE], args[V_PHASE]) and yielded[PREVIOUS] == n):
        raise error_at(terminator, f"the producer's KV step advances the K and V rings and carries its block on, "
                                   f"as attn-overlap-gemms makes it ({NOTE})")
    return out


def _around(loops: list, bars: dict, kernel) -> tuple[tuple[StepOp, ...], tuple[StepOp, ...]]:
    """The loads before the KV loops (K of the first block, into the stage from which the
    first loop's K ring was advanced) and after them (V of the last block the loops
    carry out, at their V ring), in the scf.if around them."""
    first_loop, last_loop = loops[0], loops[-1]
    block = first_loop.operation.parent.regions[0].blocks[0] if first_loop.operation.parent is not None else None
    ops = [op.operation for op in block.operations] if block is not None else []
    if last_loop.operation.parent != first_loop.operation.parent or first_loop.operation.parent.name != "scf.if":
        raise error_at(first_loop, f"the producer's KV loops stand in one scf.if over the key range, as "
                                   f"attn-overlap-gemms makes them ({NOTE})")
    check_key_range(first_loop.operation.parent, loops, kernel, NOTE)
    check_shell(first_loop.operation.parent, loops, starts=False)
    check_producer(first_loop.operation.parent)
    start = next(k for k, op in enumerate(ops) if op == first_loop.operation)
    end = next(k for k, op in enumerate(ops) if op == last_loop.operation)
    k_ring = first_loop.operands[3 + K_STAGE].owner
    if getattr(k_ring, "name", "") != R.RING_ADVANCE:
        raise error_at(first_loop, f"the producer's first KV loop starts K's ring a stage past the first block's "
                                   f"({NOTE})")
    before = {"k": (k_ring.operands[0], k_ring.operands[1], first_loop.operands[3 + PREVIOUS])}
    results = list(last_loop.results)
    after = {"v": (results[V_STAGE], results[V_PHASE], results[PREVIOUS])}
    return (_loads(ops[:start], bars, before, first_loop, "the first block's"),
            _loads(ops[end + 1:], bars, after, last_loop, "the last block's"))


def _loads(ops: list, bars: dict, rings: dict, where, what_loads: str, waits: bool = True) -> tuple[StepOp, ...]:
    """The step ops of the loads among `ops` of the tiles of `rings` (tile: its stage,
    phase and block; no block for Q's), checked: each a wait for its empty slot (none
    without `waits`), the slot's write and the arrival on its full barrier, in that order,
    at its ring."""
    out: list[StepOp] = []
    seen: dict[str, ir.Operation] = {}
    for op in ops:
        name = op.name
        if name in ("attn.load", "attn.dim", "attn.kv_range", "attn.block_map_range", R.RING_ADVANCE, "scf.yield") or \
                (name.startswith("arith.") and not op.regions):
            continue
        if name not in _OPS:
            raise error_at(op, f"the sm_90a lowering has no pattern for {name} in the producer's KV step ({NOTE})")
        what, side = _OPS[name]
        tile = _q_tile(op, bars, side)
        if tile not in rings:
            loads = "Q's load waits on Q's empty barrier" if "q" in rings else \
                "the producer's KV step waits on K's and V's empty barriers"
            raise error_at(op, f"{loads}, writes their slots and arrives on their full barriers ({NOTE})")
        key = f"{what} {tile}"
        if key in seen:
            raise error_at(op, f"a producer's KV step has one {key} ({NOTE})")
        stage, phase, block_index = rings[tile]
        ok = op.operands[1] == stage and (what != "wait" or flips(op.operands[2], phase)) and \
            (what != "write" or (_loads_block(op.operands[2], tile, block_index)
                                 and R.attrs_of(op).get("completes") == "arrive"))
        if not ok:
            loads = "Q's load takes Q's slot at its ring" if tile == "q" else \
                "the producer's step loads K(n) and V of the block before at the stages and phases of their " \
                "rings, carried by the loop"
            raise error_at(op, f"{loads}, each write completed by its thread's arrival ({NOTE})")
        seen[key] = op
        out.append(StepOp(what, tile))
    wanted = ["wait", "write", "arrive"] if waits else ["write", "arrive"]
    for tile in rings:
        order = [k for k in ("wait", "write", "arrive") if f"{k} {tile}" in seen]
        if order != wanted or [op for op in out if op.what == tile] != [StepOp(k, tile) for k in order]:
            waited = "a wait for its empty slot, then the slot's write" if waits else \
                "the slot's write (a CTA that loads it once has no empty barrier to wait on)"
            raise error_at(where, f"{what_loads} {tile.upper()} load has {waited}, then the arrival on its full "
                                  f"barrier ({NOTE})")
    return tuple(out)


def _loads_block(value, tile: str, block_index) -> bool:
    """Whether a slot write's tile is the attn.load of `tile`'s block `block_index`."""
    owner = value.owner
    return getattr(owner, "name", "") == "attn.load" and R.attrs_of(owner).get("operand") == tile \
        and (block_index is None or owner.operands[3] == block_index)


