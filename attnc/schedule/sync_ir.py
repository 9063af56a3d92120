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
                    from the MMA role, else arrive(full[stage]) once per warp; the MMA
                    role's wait stands before the attn.mma whose result it puts (Note
                    [MMAs into their slot])
    get             wait(full[stage], phase); slot_read; ... the reads' last use ...;
                    arrive(empty[stage]) once per warp (tcgen05_commit from the MMA role)
    put (cp.async)  slot_write(stage, value) in a group; cp_async_commit (where the loads
                    are not ahead of their steps, a cta_barrier first)
    get (cp.async)  cp_async_wait(pending); cta_barrier; slot_read -- one wait for the gets
                    of one point (sm_80's K and Q), `pending` the groups of the steps ahead
                    (cp_async_pending in sync.py); after the role's last KV loop,
                    cp_async_wait(pending = 0)

and, with ping-pong, each consumer role's turns at the GEMMs (Note [Ping-pong turns] in
sync.py): named_barrier_sync on its own turn's barrier before each P.V and before the KV
loops, named_barrier_arrive on the other's after each QK^T and after the loops.

Note [Ring state in the loops]: each role walks each ring it writes (and, apart, each
ring it reads) with an explicit (stage, phase) pair of i32 values: (0, 0) at the role's start, `attn.ring_advance` after the
last tile of each fill, and carried through every scf.for that puts or gets on the
ring as two more iter_args (and out of it as two more results), so the next loop of
the role starts where the last one stopped. A slot's fill is the channel's tiles
together (K and V of one KV block), or one tile for an alternating ring; sm_80's role,
which puts V and K of one block at different steps (Note [cp.async prefetch] in
prefetch.py), writes each tile's slots on a ring of its own.

Note [Re-reads]: a role that gets a one-role channel's tile inside a loop that does not
put it (sm_80's Q, read from its slot at every step) reads the same fill at every trip:
the get does not advance the ring, and attn-verify-pipeline takes a read's fill to be
the number of times its ring advanced before it.

Note [MMAs into their slot]: on sm_100a the MMA role's S = Q K^T lands in tensor memory,
the S channel's slot, while the MMA runs: there is no register copy for a later slot write
to store. So the MMA role's wait for that slot stands before the attn.mma (the slot write
after it publishes the result), and a tcgen05_commit after the attn.mma (the release of K's
slot) tracks that MMA: the lowering issues the MMA at the attn.mma, into the slot its result
is written to.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.ir.ops import with_iter_args
from attnc.schedule.alloc import Tile
from attnc.schedule.first_guess import guess_first
from attnc.schedule.recipes import CP_ASYNC_MBARRIER, Channel, Recipe
from attnc.schedule.sync import Barrier, cp_async_pending, insert_pipelines
from attnc.schedule.walk import PAIRS, walk_order
from attnc.schedule.walk_pairs import load_next_before_epilogue

PASS = "attn-insert-pipelines"


class Pipelines:
    def __init__(self, recipe: Recipe, tile: Tile, kernel: ir.Operation, early_first: bool = False):
        self.recipe = recipe
        self.early_first = early_first      # Note [The guessed first block in the IR]
        self.kernel = kernel
        self.barriers = insert_pipelines(recipe, tile)
        self.channels = {c.name: c for c in recipe.channels}
        self.mbar: dict[str, ir.Value] = {}
        self.pending = cp_async_pending(recipe)

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
            pairs = walk_order(role) == PAIRS   # Note [Two query blocks in the IR]: rings start over
            self._block(R.body_block(role) if pairs else block, {})
            body = R.body_block(role)       # Note [The walk over query blocks]
            self._drain(body)
            self._take_turns(block, body)
            if self.early_first:
                R.rewrite_range(role, lambda: guess_first(role, body))
            if pairs:
                R.rewrite_range(role, lambda: load_next_before_epilogue(role))
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

    def _take_turns(self, role_block: ir.Block, block: ir.Block) -> None:
        """Note [Ping-pong turns] in sync.py, for the role being rewritten (`block`: its
        program for one query block, where the turns are; the first arrive and the last
        sync are the role's)."""
        named = [b for b in self.barriers if b.kind == "named"]
        own = next((b for b in named if b.waiters == self.role), None)
        if own is None:
            return
        other = next(b for b in named if b.arrivers == self.role)
        loops = [op.operation for op in block.operations
                 if op.operation.name == "scf.for" and R.ops_in(op.operation.regions[0].blocks[0], ("attn.mma",))]
        if self.role == "consumer1":    # it hands consumer0 the first turn
            with ir.InsertionPoint.at_block_begin(role_block), R.pass_loc(PASS, role_block.owner):
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
        if self.role == "consumer0":        # its last sync balances consumer1's first arrive
            if block == role_block:
                at, near = block.operations[_index(loops[-1]) + 2], loops[-1]
            else:                           # once, after the walk over query blocks
                at, near = list(role_block.operations)[-1], role_block.owner
            with ir.InsertionPoint(at), R.pass_loc(PASS, near):
                _named(R.NAMED_BARRIER_SYNC, own)

    def _drain(self, block: ir.Block) -> None:
        """Every copy lands after the last KV loop of a role whose loads run ahead (the
        kernel's wait before its epilogue)."""
        if not self.recipe.loads_ahead:
            return
        loops = [op.operation for op in block.operations
                 if op.operation.name == "scf.for" and R.ops_in(op.operation.regions[0].blocks[0], (R.SLOT_READ,))]
        if loops:
            with ir.InsertionPoint(block.operations[_index(loops[-1]) + 1]), R.pass_loc(PASS, loops[-1]):
                R.create(R.CP_ASYNC_WAIT, attributes={"pending": 0})

    # --- the roles' blocks ------------------------------------------------------------
    def _block(self, block: ir.Block, state: dict) -> None:
        fills: dict = {}
        done: dict = {}         # per ring: tiles of its current slot already put or got
        for op in list(block.operations):
            op = op.operation
            if op.name == "scf.for":
                self._loop(op, state)
            elif op.name == "scf.if":
                self._branch(op, state)
            elif op.name in (R.PUT, R.GET):
                self._exchange(op, state, fills, done)

    def _loop(self, loop: ir.Operation, state: dict) -> None:
        body = loop.regions[0].blocks[0]
        used = sorted({self._ring(op) for op in R.ops_in(body, (R.PUT, R.GET))})
        if not used:
            return
        n = len(loop.results)
        new = with_iter_args(loop, [v for c in used for v in self._state(state, c)])
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

    def _branch(self, branch: ir.Operation, state: dict) -> None:
        """An scf.if that puts or gets: each ring it uses goes out of both branches as two
        more results (a branch without the exchange yields it as it came in), as through
        the walk's branch (Note [The walk over query blocks] in walk.py)."""
        regions = [r.blocks[0] for r in branch.regions if r.blocks]
        used = sorted({self._ring(op) for block in regions for op in R.ops_in(block, (R.PUT, R.GET))})
        if not used:
            return
        n = len(branch.results)
        i32 = self.zero.type
        with ir.InsertionPoint(branch), branch.location:
            new = scf.IfOp(branch.operands[0], [*(r.type for r in branch.results), *[i32] * (2 * len(used))],
                           has_else=True)
        for region, fresh in zip(branch.regions, (new.then_block, new.else_block)):
            inner = dict(state)
            if region.blocks:
                for op in list(region.blocks[0].operations):
                    fresh.append(op.operation)
                self._block(fresh, inner)
                terminator = list(fresh.operations)[-1]
                with ir.InsertionPoint(terminator), new.operation.location:
                    scf.YieldOp([*terminator.operands, *[v for c in used for v in self._state(inner, c)]])
                terminator.erase()
            else:
                with ir.InsertionPoint(fresh), new.operation.location:
                    scf.YieldOp([v for c in used for v in self._state(inner, c)])
        for old, fresh in zip(branch.results, new.results):
            old.replace_all_uses_with(fresh)
        branch.erase()
        results = list(new.results)[n:]
        for k, c in enumerate(used):
            state[c] = (results[2 * k], results[2 * k + 1])

    def _state(self, state: dict, channel: str):
        return state.get(channel, (self.zero, self.zero))

    def _ring(self, op: ir.Operation) -> tuple:
        """A role's ring state: one per channel and side (sm_80's role both writes and
        reads), and per tile where the role's puts of one fill are steps apart."""
        ring = (_channel_name(op), op.name)
        if op.name == R.PUT and self.recipe.loads_ahead:
            return (*ring, ir.StringAttr(op.attributes["tile"]).value)
        return ring

    def _exchange(self, op: ir.Operation, state: dict, fills: dict, done: dict) -> None:
        if _channel_name(op) not in self.channels:
            raise error_at(op, f"{PASS}: this {op.name} is on channel '{_channel_name(op)}', which is not among the "
                               f"channels attn.warp_specialize declares ({', '.join(self.channels)})")
        ch = self.channels[_channel_name(op)]
        tile = R.attrs_of(op).get("tile")
        if tile not in ch.tile:
            raise error_at(op, f"{PASS}: this {op.name} has tile = {tile!r}, and channel '{ch.name}' carries "
                               f"{', '.join(ch.tile)}")
        ring = self._ring(op)
        # A slot's tiles in the order the role exchanges them (a pass may have put V
        # before K): the first waits for the slot, the last advances the ring; with
        # barriers per tile, each tile waits and signals on its own.
        one_tile = ch.alternating or len(ring) > 2      # a fill is one tile (a ring per tile)
        count = done.get(ring, 0)
        first = one_tile or count == 0
        last = one_tile or count + 1 == len(ch.tile)
        done[ring] = 0 if last else count + 1
        own = ch.transport == CP_ASYNC_MBARRIER
        stage, phase = self._state(state, ring)
        with ir.InsertionPoint(op), R.pass_loc(PASS, op):
            if op.name == R.PUT:
                self._put(op, ch, tile, stage, phase, first or own, last or own)
            else:
                read = self._get(op, ch, tile, stage, phase, first or own)
                if not own:
                    fills.setdefault(ch.name, []).append(read)
            if last and not (op.name == R.GET and _rereads(op, ch)):
                advance = R.create(R.RING_ADVANCE, [stage.type, stage.type], [stage, phase],
                                   {"stages": ch.stages})
                state[ring] = (advance.results[0], advance.results[1])
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
            if not self.recipe.loads_ahead:
                R.create(R.CTA_BARRIER)
            else:
                _check_ahead(value.owner, ch, tile)
            R.create(R.SLOT_WRITE, operands=[chan, stage, value], attributes={"tile": tile, "completes": "group"})
            R.create(R.CP_ASYNC_COMMIT, attributes={"channel": ch.name})
            return
        full, empty = self._barrier(ch, "full", tile), self._barrier(ch, "empty", tile)
        if first and empty is not None:
            # Note [MMAs into their slot]: tcgen05.mma writes its result into the channel's
            # tensor memory as it runs, so the MMA role waits for the slot before the MMA.
            gemm = value.owner if ch.transport == "tcgen05" and self.role == "mma" else None
            early = getattr(gemm, "name", "") == "attn.mma" and gemm.operation.parent == op.parent
            with ir.InsertionPoint(gemm if early else op), R.pass_loc(PASS, op):
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
        if ch.transport == "cp.async":
            if not _after_read(op):
                R.create(R.CP_ASYNC_WAIT, attributes={"pending": self.pending})
                R.create(R.CTA_BARRIER)
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


def _check_ahead(load, ch: Channel, tile: str) -> None:
    """A KV step's load (sm_80's cooperative role) is as far ahead as the channel's ring is
    deep: K `stages` steps, V `stages - 1` (Note [cp.async prefetch] in prefetch.py), which
    an edit of the channel's stages alone leaves behind."""
    from attnc.passes.tile_program import KV_LOOP
    if getattr(load, "name", "") != "attn.load" or tile not in ("k", "v") or "ahead" not in load.attributes:
        return
    parent = load.parent
    if not (parent.name == "scf.for" and KV_LOOP in parent.attributes):
        return
    wanted = ch.stages if tile == "k" else ch.stages - 1
    ahead = R.attrs_of(load)["ahead"]
    if ahead != wanted:
        steps = "1 step" if ahead == 1 else f"{ahead} steps"
        raise error_at(load, f"{PASS}: this step loads {tile.upper()} {steps} ahead, and channel '{ch.name}' "
                             f"has {ch.stages} stages: the role loads K stages steps ahead and V stages - 1 "
                             f"(Note [cp.async prefetch] in attnc/schedule/prefetch.py); edit the loads' ahead "
                             f"(and the first steps' loads before the KV loops) with the channel's stages, or set "
                             f"attn-tile{{stages=N}}")


def _channel_name(op: ir.Operation) -> str:
    return R.name_of(op.operands[0].owner)


def _rereads(get: ir.Operation, ch: Channel) -> bool:
    """Note [Re-reads]: a one-role channel got inside a loop that does not put it."""
    loop = get.block.owner
    loop = getattr(loop, "operation", loop)
    if ch.producer != ch.consumer or loop is None or loop.name != "scf.for":
        return False
    chan = get.operands[0]
    return not any(op.operands[0] == chan for op in R.ops_in(get.block, (R.PUT, R.SLOT_WRITE)))


def _after_read(get: ir.Operation) -> bool:
    """Whether `get` follows a read of a cp.async slot, whose wait it shares."""
    ops = [o.operation for o in get.block.operations]
    at = ops.index(get)
    return at > 0 and ops[at - 1].name == R.SLOT_READ


def _ancestor_in(op, block: ir.Block):
    """`op` or the op holding it that sits in `block` (None: not under it)."""
    op = getattr(op, "operation", op)
    while op is not None:
        if op.block == block:
            return op
        op = op.parent
        op = getattr(op, "operation", op) if op is not None else None
    return None
