"""Split an L2 tile program into role regions joined by channels (attn-warp-specialize).

Each tile op goes to the roles of the recipe whose `ops` name its kind (Role.ops:
load_q, load_kv, mma_qk, score_mod, mask, softmax, mma_pv, rescale, finalize, store_o);
the rescale goes with the softmax and the LSE's store with the finalize where no role
names them. Every other op (arith, attn.dim, attn.kv_range, attn.fill, block-map and
tile-table reads, the KV loops) is pure scalar or index work: each role gets its own
copy of what it uses. A KV loop is copied into every role that has a tile op in it,
carrying only the values that role computes.

Note [Where values cross]: a tile made in role A and used in role B goes through a
channel: `attn.put` in A right after the value is made (for a loop's carried value: at
the top of the loop body; for a loop's result: after the loop) and `attn.get` in B at
the same point of the program. The channel is the recipe's that carries that tile from
A to B (a channel whose consumer is `consumer0` serves every consumer warpgroup, as
sync.py's protocol has it); where the recipe has none (sm_100a's row statistics and O
accumulator between the softmax, MMA and correction roles) an implied one-slot channel
is declared, through TMEM when the MMA role is one end, else through shared memory.
Loaded Q, K and V always go through their channel, even inside one role (sm_80's
cp.async queue): the channel is the shared-memory staging of the load. sm_80's role then
loads K and V ahead of the steps that read them (Note [cp.async prefetch] in prefetch.py).

Note [Consumer rows]: each of sm_90a's consumer warpgroups runs 64 of the query block's
rows (wgmma's M), with its own S, P, running max, sum and O: its role carries `rows =
[first, end)` and its copies of the tiles indexed by query row have that many rows -- Q
as it reads it from the shared slot, S, P, m, l, O and the LSE (`!attn.tile<[64, 64],
f32, "reg">` where the program's block has 128 rows) -- while K and V stay whole. The
channels record the tiles as the producer writes them. The hooks still see the block's
coordinates: the rows a tile stands for are the role's.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import scf

from attnc.errors import AttncError
from attnc.ir import roles as R
from attnc.ir.tiles import Q_TILE, tile_parts, tile_type
from attnc.passes.tile_program import KV_LOOP, kv_block_op
from attnc.schedule.prefetch import prefetch
from attnc.schedule.recipes import Channel, Recipe
from attnc.schedule.walk import walk_blocks

PASS = "attn-warp-specialize"
_TILE_OPS = ("attn.load", "attn.mma", "attn.score_mod", "attn.mask", "attn.softmax_step", "attn.rescale",
             "attn.finalize", "attn.store")
_FALLBACK = {"rescale": "softmax", "store_lse": "finalize"}


def kind_of(op: ir.Operation) -> str | None:
    """The recipe's name for what a tile op does (None: not a tile op)."""
    name = op.name
    if name not in _TILE_OPS:
        return None
    if name == "attn.load":
        return "load_q" if _str(op, "operand") == "q" else "load_kv"
    if name == "attn.mma":
        return "mma_" + _str(op, "kind")
    if name == "attn.store":
        return "store_o" if _str(op, "operand") == "o" else "store_lse"
    return {"attn.score_mod": "score_mod", "attn.mask": "mask", "attn.softmax_step": "softmax",
            "attn.rescale": "rescale", "attn.finalize": "finalize"}[name]


def tile_name(v: ir.Value) -> str:
    """What a crossing tile is, as channels name it (q, k, v, s, p, o, m, l, alpha, lse)."""
    if _is_arg(v):
        arg = ir.BlockArgument(v)
        return tile_name(_yielded(arg.owner.owner, arg.arg_number - 1))
    result = ir.OpResult(v)
    op, index = result.owner, result.result_number
    if op.name == "scf.for":
        return tile_name(_yielded(op, index))
    if op.name == "attn.load":
        return _str(op, "operand")
    if op.name == "attn.mma":
        return "s" if _str(op, "kind") == "qk" else "o"
    if op.name == "attn.softmax_step":
        return ("p", "m", "l", "alpha")[index]
    if op.name == "attn.finalize":
        return ("o", "lse")[index]
    return "o"


class Partition:
    """One split of one kernel body (module docstring)."""

    def __init__(self, recipe: Recipe, kernel: ir.Operation, walk: str | None = None):
        self.recipe = recipe
        # the order of the walk over the CTA's query blocks, None for one block (Notes [The
        # walk over query blocks] and [Two query blocks in the IR] in walk.py)
        self.walk = walk
        self.kernel = kernel
        self.body = kernel.regions[0].blocks[0]
        self.block_m = ir.IntegerAttr(kernel.attributes["block_m"]).value
        self.q_tiles = ir.IntegerAttr(kernel.attributes["q_tiles"]).value if "q_tiles" in kernel.attributes else 1
        self.names = [r.name for r in recipe.roles]
        self._roles_of_kind: dict[str, tuple[str, ...]] = {}
        self._owners: dict = {}

    # --- which role runs what -----------------------------------------------------
    def roles_of(self, op: ir.Operation) -> tuple[str, ...]:
        kind = kind_of(op)
        if kind is None:
            return ()
        if kind not in self._roles_of_kind:
            found = tuple(r.name for r in self.recipe.roles if kind in r.ops)
            if not found and kind in _FALLBACK:
                found = tuple(r.name for r in self.recipe.roles if _FALLBACK[kind] in r.ops)
            if not found:
                raise AttncError(f"{PASS}: no role of the {self.recipe.target} recipe runs {kind}")
            self._roles_of_kind[kind] = found
        # Note [Q tiles of a CTA]: a role of one Q tile (softmax1) runs that tile's ops only
        t = q_tile_of(op)
        if t is not None and not 0 <= t < self.q_tiles:
            raise AttncError(f"{PASS}: an op of Q tile {t}, and the CTA has q_tiles = {self.q_tiles} (tiles 0 to "
                             f"{self.q_tiles - 1})")
        return tuple(r for r in self._roles_of_kind[kind] if t is None or _serves(r, t))

    def owners(self, v: ir.Value) -> tuple[str, ...]:
        """The roles that compute `v` (empty: every role may compute it itself)."""
        if v not in self._owners:
            self._owners[v] = ()            # a loop-carried value yielding itself
            if _is_arg(v):
                arg = ir.BlockArgument(v)
                owner = arg.owner.owner
                found = self.owners(_yielded(owner, arg.arg_number - 1)) \
                    if owner is not None and owner.name == "scf.for" and arg.arg_number > 0 else ()
            elif ir.OpResult(v).owner.name == "scf.for":
                found = self.owners(_yielded(ir.OpResult(v).owner, ir.OpResult(v).result_number))
            else:
                found = self.roles_of(ir.OpResult(v).owner)
            self._owners[v] = found
        return self._owners[v]

    def users(self, v: ir.Value) -> set[str]:
        """The roles that read `v`: its tile ops' roles and, for a loop's initial value,
        the roles that carry it."""
        found: set[str] = set()
        for use in v.uses:
            user = use.owner
            if user.name == "scf.for" and use.operand_number >= 3:
                found.update(self.owners(user.results[use.operand_number - 3]))
            elif user.name != "scf.yield":
                found.update(self.roles_of(user))
        return found

    def roles_in(self, op: ir.Operation) -> set[str]:
        inner: list[ir.Operation] = []

        def visit(found):
            inner.append(found.operation)
            return ir.WalkResult.ADVANCE

        # (roles_of's errors are raised outside the walk: the bindings turn an exception
        # raised inside its callback into a RuntimeError)
        op.walk(visit, ir.WalkOrder.PRE_ORDER)
        return {role for found in inner for role in self.roles_of(found)}

    # --- the split ------------------------------------------------------------------
    def run(self) -> ir.Operation:
        originals = [op.operation for op in self.body.operations][:-1]
        active = [r for r in self.names if any(self.roles_in(op) & {r} for op in originals)]
        with ir.InsertionPoint(originals[0] if originals else self.body.operations[0]), \
                R.pass_loc(PASS, self.kernel):
            self.ws, ws_block = R.region_op(R.WARP_SPECIALIZE)
        self.decls = ir.InsertionPoint(ws_block.operations[0])
        self.channels: dict[str, ir.Operation] = {}
        with R.pass_loc(PASS, self.kernel):
            for ch in self.recipe.channels:
                self._declare(ch)
            self.role_block, first = {}, None
            for role in self.recipe.roles:
                with self.decls:
                    op, block = R.region_op(R.ROLE, {"name": role.name, "warps": role.warps,
                                                      "regs": role.regs or 0,
                                                      **({"rows": list(role.rows)} if role.rows else {})})
                self.role_block[role.name] = block
                first = first or op
        self.decls = ir.InsertionPoint(first)      # implied channels: before every role
        self.ip = {r: ir.InsertionPoint(self.role_block[r].operations[0]) for r in self.names}
        self.env: dict[str, dict] = {r: {} for r in self.names}
        self.shared: dict[str, list] = {r: [] for r in self.names}
        self.types: dict[str, dict] = {}
        self._walk(originals, active)
        for op in reversed(originals):
            op.erase()
        for r in self.names:
            _erase_unused(self.shared[r])
        if self.recipe.loads_ahead:          # Note [cp.async prefetch]
            prefetch(R.role_ops(self.kernel)[0], next(c.stages for c in self.recipe.channels if c.name == "kv"))
        if self.walk is not None:            # Note [The walk over query blocks]
            for role in R.role_ops(self.kernel):
                walk_blocks(role, self.kernel, self.walk)
        self._write_types()
        self.ws.attributes[R.RANGES] = ir.DictAttr.get(      # Note [The key range as made]
            {R.name_of(role): ir.StringAttr.get(R.range_digest(role)) for role in R.role_ops(self.kernel)})
        return self.ws

    def _declare(self, ch: Channel, types=()) -> ir.Operation:
        with self.decls:
            op = R.create(R.CHANNEL, [R.chan_type()], attributes={
                "name": ch.name, "producer": ch.producer, "consumer": ch.consumer,
                "transport": ch.transport, "space": ch.space, "stages": ch.stages, "tile": ch.tile,
                "types": ir.ArrayAttr.get([ir.TypeAttr.get(t) for t in types]),
                **({"alternating": True} if ch.alternating else {})})
        self.channels[ch.name] = op
        return op

    def _map(self, role: str, v: ir.Value) -> ir.Value:
        return self.env[role].get(v, v)

    def _rows_type(self, role: str, t: ir.Type) -> ir.Type:
        """`t` as role's copy holds it: a tile of the query block's rows with the role's
        rows only (Note [Consumer rows])."""
        rows = self.recipe.role(role).rows
        parts = tile_parts(t)
        if rows is None or parts is None:
            return t
        shape, element, space = parts
        if shape[0] != self.block_m:
            raise AttncError(f"{PASS}: a tile of the query block has {shape[0]} rows, and attn-tile's "
                             f"block_m is {self.block_m}")
        return tile_type([rows[1] - rows[0], *shape[1:]], element, space)

    def _clone(self, op: ir.Operation, role: str) -> ir.Operation:
        with self.ip[role]:
            new = op.clone()
        for i, v in enumerate(op.operands):
            mapped = self._map(role, v)
            if mapped != v:
                new.operands[i] = mapped
        for old, res in zip(op.results, new.results):
            res.set_type(self._rows_type(role, res.type))
            self.env[role][old] = res
        return new

    def _walk(self, ops: list[ir.Operation], active: list[str]) -> None:
        for op in ops:
            if op.name == "scf.for":
                self._loop(op, active)
                continue
            roles = self.roles_of(op)
            if not roles:
                for r in active:
                    self.shared[r].append(self._clone(op, r))
                continue
            for r in roles:
                self._clone(op, r)
            for v in op.results:
                self._cross(v, at=op)

    def _loop(self, loop: ir.Operation, active: list[str]) -> None:
        inside = [r for r in active if r in self.roles_in(loop)]
        body = loop.regions[0].blocks[0]
        carried = list(body.arguments)[1:]
        kept = {r: [i for i, a in enumerate(carried) if r in self.owners(a)] for r in inside}
        new_loops, after = {}, {}
        for r in inside:
            lb, ub, step = (self._map(r, loop.operands[i]) for i in range(3))
            inits = [self._map(r, loop.operands[3 + i]) for i in kept[r]]
            with self.ip[r], loop.location:
                new = scf.ForOp(lb, ub, step, inits)
            for name in (KV_LOOP,):
                if name in loop.attributes:
                    new.operation.attributes[name] = loop.attributes[name]
            new_loops[r] = new
            env = self.env[r]
            env[body.arguments[0]] = new.induction_variable
            for j, i in enumerate(kept[r]):
                env[carried[i]] = new.inner_iter_args[j]
            with ir.InsertionPoint(new.body), loop.location:
                yield_op = R.create("scf.yield")
            after[r] = self.ip[r]
            self.ip[r] = ir.InsertionPoint(yield_op)
        ops = [op.operation for op in body.operations]
        if KV_LOOP in loop.attributes:      # each role's copy starts with its block (Note [Key blocks top down])
            for r in inside:
                self._clone(kv_block_op(loop), r)
            ops = ops[1:]
        for a in carried:
            self._cross(a, at=loop)
        self._walk(ops[:-1], inside)
        terminator = ops[-1]
        for r in inside:
            values = [self._map(r, terminator.operands[i]) for i in kept[r]]
            placeholder = self.ip[r].ref_operation
            with ir.InsertionPoint(placeholder), loop.location:
                scf.YieldOp(values)
            placeholder.erase()
            new = new_loops[r]
            self.ip[r] = after[r]
            for j, i in enumerate(kept[r]):
                self.env[r][loop.results[i]] = new.results[j]
        for v in loop.results:
            self._cross(v, at=loop)

    def _cross(self, v: ir.Value, at: ir.Operation) -> None:
        """Note [Where values cross]."""
        owners = self.owners(v)
        if not owners:
            return
        loaded = not _is_arg(v) and ir.OpResult(v).owner.name == "attn.load"
        users = sorted(u for u in self.users(v) if loaded or u not in owners)
        if not users:
            return
        tile = tile_name(v)
        sent: set[str] = set()
        for user in users:
            for chan in self._channels_for(tile, owners, user, v):
                name = R.name_of(chan)
                producer = ir.StringAttr(chan.attributes["producer"]).value
                loc = R.pass_loc(PASS, at)
                if name not in sent:
                    sent.add(name)
                    with self.ip[producer], loc:
                        R.create(R.PUT, operands=[chan.result, self._map(producer, v)], attributes={"tile": tile})
                whole = tile in ("k", "v")          # Note [Consumer rows]
                with self.ip[user], loc:
                    got = R.create(R.GET, [v.type if whole else self._rows_type(user, v.type)], [chan.result],
                                   {"tile": tile}).result
                self.env[user].setdefault(v, got)
                self._record_type(chan, tile, v.type)

    def _channels_for(self, tile: str, owners, user: str, v: ir.Value) -> list[ir.Operation]:
        found = []
        t = q_tile_of_value(v)
        for chan in self.channels.values():
            a = R.attrs_of(chan)
            serves = a["consumer"] == user or (a["consumer"] == "consumer0" and user.startswith("consumer"))
            if tile in a["tile"] and a["producer"] in owners and serves and (t is None or _serves(a["name"], t)):
                found.append(chan)
        if found:
            return found
        return [self._implied(tile, owner, user, v) for owner in owners]

    def _implied(self, tile: str, producer: str, consumer: str, v: ir.Value) -> ir.Operation:
        name = f"{tile}_{producer}_{consumer}"
        if name in self.channels:
            return self.channels[name]
        tmem = "mma" in (producer, consumer) and self.recipe.tmem_columns > 0
        ch = Channel(name, producer, consumer, "tcgen05" if tmem else "st.shared", "tmem" if tmem else "smem",
                     1, (tile,))
        with R.pass_loc(PASS, self.kernel):
            return self._declare(ch)

    def _record_type(self, chan: ir.Operation, tile: str, t: ir.Type) -> None:
        self.types.setdefault(R.name_of(chan), {})[tile] = ir.TypeAttr.get(t)

    def _write_types(self) -> None:
        for name, chan in self.channels.items():
            known = self.types.get(name, {})
            tiles = R.attrs_of(chan)["tile"]
            chan.attributes["types"] = ir.ArrayAttr.get([known[t] for t in tiles if t in known])


def q_tile_of(op: ir.Operation) -> int | None:
    """The Q tile an op works on (Note [Q tiles of a CTA] in attnc/passes/tile_program.py), or None."""
    return ir.IntegerAttr(op.attributes[Q_TILE]).value if Q_TILE in op.attributes else None


def q_tile_of_value(v: ir.Value) -> int | None:
    """The Q tile of the op that makes `v` (of the value a loop carries or yields)."""
    if _is_arg(v):
        arg = ir.BlockArgument(v)
        owner = arg.owner.owner
        if owner is None or owner.name != "scf.for" or arg.arg_number == 0:
            return None
        return q_tile_of_value(_yielded(owner, arg.arg_number - 1))
    op = ir.OpResult(v).owner
    if op.name == "scf.for":
        return q_tile_of_value(_yielded(op, ir.OpResult(v).result_number))
    return q_tile_of(op)


def _serves(name: str, t: int) -> bool:
    """Whether the role or channel `name` serves Q tile t: one named for a tile (softmax1,
    s0, o1_acc) that tile only, any other every tile."""
    digits = [ch for ch in name if ch.isdigit()]
    return not digits or int(digits[0]) == t


def _yielded(loop: ir.Operation, index: int) -> ir.Value:
    body = loop.regions[0].blocks[0]
    terminator = list(body.operations)[-1]
    return terminator.operands[index]


def _is_arg(v: ir.Value) -> bool:
    return isinstance(v.owner, ir.Block)


def _str(op: ir.Operation, key: str) -> str:
    return ir.StringAttr(op.attributes[key]).value


def _erase_unused(clones: list[ir.Operation]) -> None:
    """Erase the copies of shared ops their role does not use (last first, so a chain goes)."""
    for op in reversed(clones):
        if all(not list(r.uses) for r in op.results):
            op.erase()
