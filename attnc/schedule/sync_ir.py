"""put/get -> synchronization ops inside the roles (attn-insert-pipelines).

Each channel's protocol is sync.py's (`insert_pipelines`: its barriers, counts and bytes
per fill); this writes it as ops. The mbarriers are declared beside the channels
(`attn.mbarrier_init`: name, count, stages, channel, side, and the tile of a barrier per
tile), and in each role:

    put (cp.async.mbarrier)  per tile, with that tile's barriers (Note [Barriers per tile]):
                    wait(empty[stage], phase ^ 1) (none for Q's slot without one);
                    slot_write(stage, value) -- the threads' cp.async copies;
                    cp_async_mbarrier_arrive(full[stage]) -- each thread's arrive.noinc
    get (cp.async.mbarrier)  per tile: wait(full[stage], phase); slot_read; ... the read's
                    last use ...; arrive(empty[stage]) once per warp
    put (tma)       wait(empty[stage], phase ^ 1); expect_tx(full[stage], bytes);
                    slot_write(stage, value, full)  -- the copy lands on full's tx count
    put (tcgen05 / st.shared)
                    wait(empty[stage], phase ^ 1); slot_write; tcgen05_commit(full[stage])
                    from the MMA role, else arrive(full[stage]) once per warp
    get             wait(full[stage], phase); slot_read; ... the reads' last use ...;
                    arrive(empty[stage]) once per warp (tcgen05_commit from the MMA role)
    put (cp.async)  cta_barrier; slot_write(stage, value) in a group; cp_async_commit
    get (cp.async)  cp_async_wait(pending = 0); cta_barrier; slot_read

and, with ping-pong, each consumer role's turns at the GEMMs (Note [Ping-pong turns] in
sync.py): named_barrier_sync on its own turn's barrier before each P.V and before the KV
loops, named_barrier_arrive on the other's after each QK^T and after the loops.

Note [Ring state in the loops]: each role walks each ring it writes (and, apart, each
ring it reads) with an explicit (stage, phase) pair of i32 values: (0, 0) at the role's start, `attn.ring_advance` after the
last tile of each fill, and carried through every scf.for that puts or gets on the
ring as two more iter_args (and out of it as two more results), so the next loop of
the role starts where the last one stopped. A slot's fill is the channel's tiles
together (K and V of one KV block), or one tile for an alternating ring.

Note [No prefetch at L5]: the tile program reads each slot right after its own role
wrote it (sm_80's cooperative role), so the cp.async wait before a read allows no
group in flight; the lowering's prefetch distance (stages - 1 groups) is its own
schedule of the same ring.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from attnc.ir import roles as R
from attnc.schedule.alloc import Tile
from attnc.schedule.recipes import CP_ASYNC_MBARRIER, Channel, Recipe
from attnc.schedule.sync import Barrier, insert_pipelines

PASS = "attn-insert-pipelines"


class Pipelines:
    def __init__(self, recipe: Recipe, tile: Tile, kernel: ir.Operation):
        self.recipe = recipe
        self.kernel = kernel
        self.barriers = insert_pipelines(recipe, tile)
        self.channels = {c.name: c for c in recipe.channels}
        self.mbar: dict[str, ir.Value] = {}

    def run(self) -> None:
        roles = R.role_ops(self.kernel)
        with ir.InsertionPoint(roles[0]), R.pass_loc(PASS, self.kernel):
            for b in self.barriers:
                self._declare(b)
        for role in roles:
            self.role = R.name_of(role)
            block = R.role_block(role)
            with ir.InsertionPoint.at_block_begin(block), R.pass_loc(PASS, role):
                self.zero = arith.ConstantOp(ir.IntegerType.get_signless(32), 0).result
                self.one = arith.ConstantOp(ir.IntegerType.get_signless(32), 1).result
            self._block(block, {})
            self._take_turns(block)
            if not list(self.zero.uses):
                self.zero.owner.erase()
            if not list(self.one.uses):
                self.one.owner.erase()

    def _declare(self, b: Barrier) -> None:
        if b.kind == "mbarrier":
            side = "full" if b.name.endswith("_full") else "empty"
            op = R.create(R.MBARRIER_INIT, [R.mbar_type()], attributes={
                "name": b.name, "count": b.arrive_count, "stages": b.stages, "channel": b.channel, "side": side,
                **({"tile": b.tile} if b.tile else {})})
            self.mbar[b.name] = op.result

    def _take_turns(self, block: ir.Block) -> None:
        """Note [Ping-pong turns] in sync.py, for the role being rewritten."""
        named = [b for b in self.barriers if b.kind == "named"]
        own = next((b for b in named if b.waiters == self.role), None)
        if own is None:
            return
        other = next(b for b in named if b.arrivers == self.role)
        loops = [op.operation for op in block.operations
                 if op.operation.name == "scf.for" and R.ops_in(op.operation.regions[0].blocks[0], ("attn.mma",))]
        if self.role == "consumer1":    # it hands consumer0 the first turn
            with ir.InsertionPoint.at_block_begin(block), R.pass_loc(PASS, block.owner):
                _named(R.NAMED_BARRIER_ARRIVE, other)
        for loop in loops:
            for mma in R.ops_in(loop.regions[0].blocks[0], ("attn.mma",)):
                if R.attrs_of(mma)["kind"] == "qk":
                    with ir.InsertionPoint(mma.block.operations[_index(mma) + 1]), R.pass_loc(PASS, mma):
                        _named(R.NAMED_BARRIER_ARRIVE, other)
                else:
                    with ir.InsertionPoint(mma), R.pass_loc(PASS, mma):
                        _named(R.NAMED_BARRIER_SYNC, own)
        if not loops:
            return
        with ir.InsertionPoint(loops[0]), R.pass_loc(PASS, loops[0]):
            _named(R.NAMED_BARRIER_SYNC, own)
        with ir.InsertionPoint(block.operations[_index(loops[-1]) + 1]), R.pass_loc(PASS, loops[-1]):
            _named(R.NAMED_BARRIER_ARRIVE, other)
            if self.role == "consumer0":    # its last sync balances consumer1's first arrive
                _named(R.NAMED_BARRIER_SYNC, own)

    # --- the roles' blocks ------------------------------------------------------------
    def _block(self, block: ir.Block, state: dict) -> None:
        fills: dict = {}
        done: dict = {}         # per ring: tiles of its current slot already put or got
        for op in list(block.operations):
            op = op.operation
            if op.name == "scf.for":
                self._loop(op, state)
            elif op.name in (R.PUT, R.GET):
                self._exchange(op, state, fills, done)

    def _loop(self, loop: ir.Operation, state: dict) -> None:
        body = loop.regions[0].blocks[0]
        used = sorted({_ring(op) for op in R.ops_in(body, (R.PUT, R.GET))})
        if not used:
            return
        extra = [v for c in used for v in self._state(state, c)]
        n = len(loop.results)
        with ir.InsertionPoint(loop), loop.location:
            new = scf.ForOp(loop.operands[0], loop.operands[1], loop.operands[2],
                            [*loop.operands[3:], *extra])
        for name in loop.attributes:
            new.operation.attributes[name] = loop.attributes[name]
        for op in list(body.operations):
            new.body.append(op.operation)
        for old, fresh in zip(body.arguments, new.body.arguments):
            old.replace_all_uses_with(fresh)
        for old, fresh in zip(loop.results, new.results):
            old.replace_all_uses_with(fresh)
        loop.erase()
        args = list(new.body.arguments)[1 + n:]
        inner = dict(state)
        for k, c in enumerate(used):
            inner[c] = (args[2 * k], args[2 * k + 1])
        self._block(new.body, inner)
        terminator = list(new.body.operations)[-1]
        # the loop's location: a yield of no values is not printed, so a dump would lose its own
        with ir.InsertionPoint(terminator), new.operation.location:
            scf.YieldOp([*terminator.operands, *[v for c in used for v in inner[c]]])
        terminator.erase()
        results = list(new.results)[n:]
        for k, c in enumerate(used):
            state[c] = (results[2 * k], results[2 * k + 1])

    def _state(self, state: dict, channel: str):
        return state.get(channel, (self.zero, self.zero))

    def _exchange(self, op: ir.Operation, state: dict, fills: dict, done: dict) -> None:
        ch = self.channels[_channel_name(op)]
        tile = ir.StringAttr(op.attributes["tile"]).value
        # A slot's tiles in the order the role exchanges them (a pass may have put V
        # before K): the first waits for the slot, the last advances the ring; with
        # barriers per tile, each tile waits and signals on its own.
        count = done.get(_ring(op), 0)
        first = ch.alternating or count == 0
        last = ch.alternating or count + 1 == len(ch.tile)
        done[_ring(op)] = 0 if last else count + 1
        own = ch.transport == CP_ASYNC_MBARRIER
        stage, phase = self._state(state, _ring(op))
        with ir.InsertionPoint(op), R.pass_loc(PASS, op):
            if op.name == R.PUT:
                self._put(op, ch, tile, stage, phase, first or own, last or own)
            else:
                read = self._get(op, ch, tile, stage, phase, first or own)
                if not own:
                    fills.setdefault(ch.name, []).append(read)
            if last:
                advance = R.create(R.RING_ADVANCE, [stage.type, stage.type], [stage, phase],
                                   {"stages": ch.stages})
                state[_ring(op)] = (advance.results[0], advance.results[1])
        if op.name == R.GET:
            op.result.replace_all_uses_with(read)
            if own:
                self._release(ch, tile, stage, [read], op)
            elif last and ch.transport != "cp.async":
                self._release(ch, None, stage, fills.pop(ch.name), op)
        op.erase()

    def _put(self, op, ch: Channel, tile: str, stage, phase, first: bool, last: bool) -> None:
        chan, value = op.operands[0], op.operands[1]
        if ch.transport == "cp.async":
            R.create(R.CTA_BARRIER, attributes={"channel": ch.name})
            R.create(R.SLOT_WRITE, operands=[chan, stage, value], attributes={"tile": tile, "completes": "group"})
            R.create(R.CP_ASYNC_COMMIT, attributes={"channel": ch.name})
            return
        full, empty = self._barrier(ch, "full", tile), self._barrier(ch, "empty", tile)
        if first and empty is not None:
            flipped = arith.XOrIOp(phase, self.one).result
            R.create(R.MBARRIER_WAIT, operands=[empty, stage, flipped])
        if ch.transport == CP_ASYNC_MBARRIER:
            R.create(R.SLOT_WRITE, operands=[chan, stage, value], attributes={"tile": tile, "completes": "arrive"})
            R.create(R.CP_ASYNC_MBARRIER_ARRIVE, operands=[full, stage])
            return
        if ch.transport == "tma":
            if first:
                R.create(R.MBARRIER_EXPECT_TX, operands=[full, stage], attributes={"bytes": self._bytes(ch, tile)})
            R.create(R.SLOT_WRITE, operands=[chan, stage, value, full],
                     attributes={"tile": tile, "completes": "mbarrier"})
            return
        R.create(R.SLOT_WRITE, operands=[chan, stage, value], attributes={"tile": tile, "completes": "store"})
        if last:
            self._signal(full, stage)

    def _get(self, op, ch: Channel, tile: str, stage, phase, first: bool) -> ir.Value:
        chan = op.operands[0]
        if ch.transport == "cp.async":        # every tile is a group of its own
            R.create(R.CP_ASYNC_WAIT, attributes={"pending": 0, "channel": ch.name})
            R.create(R.CTA_BARRIER, attributes={"channel": ch.name})
        elif first:
            R.create(R.MBARRIER_WAIT, operands=[self._barrier(ch, "full", tile), stage, phase])
        return R.create(R.SLOT_READ, [op.result.type], [chan, stage], {"tile": tile}).result

    def _barrier(self, ch: Channel, side: str, tile: str) -> ir.Value | None:
        """The mbarriers of `side` that guard `tile` of `ch`'s slots: the tile's own (Note
        [Barriers per tile]) or the channel's; None where the plan has none (Q's empty
        slot without persistent CTAs)."""
        owner = tile if ch.transport == CP_ASYNC_MBARRIER else ch.name
        return self.mbar.get(f"mbar_{owner}_{side}")

    def _release(self, ch: Channel, tile: str | None, stage, reads: list, near: ir.Operation) -> None:
        """arrive(empty[stage]) after the last use of the fill's reads in their block
        (`tile`: the one tile the reads are, where it has its own barriers)."""
        empty = self._barrier(ch, "empty", tile)
        if empty is None:
            return
        block = near.block
        order = {op.operation: i for i, op in enumerate(block.operations)}
        last = max((order[_ancestor_in(use.owner, block)] for v in reads for use in v.uses
                    if _ancestor_in(use.owner, block) is not None),
                   default=max(order[v.owner] for v in reads))
        after = list(block.operations)[last]
        following = list(block.operations)[last + 1]
        with ir.InsertionPoint(following), R.pass_loc(PASS, after):
            self._signal(empty, stage)

    def _signal(self, bar, stage) -> None:
        """The MMA role signals through tcgen05.commit, any other role once per warp."""
        if self.role == "mma":
            R.create(R.TCGEN05_COMMIT, operands=[bar, stage])
        else:
            R.create(R.MBARRIER_ARRIVE, operands=[bar, stage], attributes={"per": "warp"})

    def _bytes(self, ch: Channel, tile: str) -> int:
        tx = next(b.tx_bytes for b in self.barriers if b.name == f"mbar_{ch.name}_full")
        return tx[ch.tile.index(tile) % len(tx)] if ch.alternating else tx[0]


def _named(kind: str, b: Barrier) -> None:
    R.create(kind, attributes={"id": b.ident, "threads": b.arrive_count})


def _index(op: ir.Operation) -> int:
    """`op`'s position in its block."""
    return next(i for i, o in enumerate(op.block.operations) if o.operation == op)


def _channel_name(op: ir.Operation) -> str:
    return R.name_of(op.operands[0].owner)


def _ring(op: ir.Operation) -> tuple[str, str]:
    """A role's ring state: one per channel and side (sm_80's role both writes and reads)."""
    return (_channel_name(op), op.name)


def _ancestor_in(op, block: ir.Block):
    """`op` or the op holding it that sits in `block` (None: not under it)."""
    op = getattr(op, "operation", op)
    while op is not None:
        if op.block == block:
            return op
        op = op.parent
        op = getattr(op, "operation", op) if op is not None else None
    return None
