"""The L5 protocol check (design.md section 6.2): the role regions of attn.warp_specialize
run as processes over their synchronization ops as they stand in the IR, in every
interleaving, over enough KV iterations to wrap every ring.

What is read from the IR, op by op (attnc/ir/roles.py names them): each role's program
with its loops unrolled and its branches taken as Note [Key blocks the check runs] says,
and its i32 stage and parity values evaluated (arith constants and integer ops,
`attn.ring_advance`, the loops' iter_args); the mbarriers' counts, stages and tiles
(`attn.mbarrier_init`); each role's warps (an arrive `per = "warp"` counts one per
warp, an expect_tx or tcgen05_commit one, a cp_async_mbarrier_arrive one per thread);
each slot write's bytes (its tile's type) and how it lands: on an mbarrier's transaction
count, with a cp.async group, with the role's next cp.async arrival on an mbarrier, or
at once.

Note [cp.async arrivals]: `cp.async.mbarrier.arrive.noinc` makes each thread's arrival
once every cp.async the thread issued before it has landed. A role's slot writes that
complete "arrive" are its open copies; its attn.cp_async_mbarrier_arrive takes them all
in flight with its threads' arrivals, and when that lands (at any later point of the
interleaving) the slots hold their data and the mbarrier gets the arrivals at once, so a
full barrier counting one thread too many never completes and one counting one too few
gets more arrivals than its count. A consumer's arrival on an empty mbarrier releases the
slots of its stage that the barrier guards (one tile's, where the barrier names one).

Note [Every ring at once]: a process is a role (its warps run one program in step: an
arrive per warp is their arrivals at once). Every role's events -- its slot writes and
reads, its mbarriers' waits and arrivals on every channel, the CTA barriers, the cp.async
groups (a thread's, whichever channel's copies they hold: a wait_group waits until every
group but its `pending` youngest has landed, the groups landing in any order), the named
barriers of sm_90a's ping-pong (a bar.sync waits until the barrier's thread count has
arrived or synced) -- are explored together, breadth first, so that a deadlock of rings
waiting on each other (consumers that wait for Q before they free a K/V slot, a producer
that waits for a slot before it writes Q) is found, which no ring shows alone. The
exploration leaves out the interleavings that differ only in the order of independent
events (Note [Roles that need not move] in explore.py): sm_100a's fifteen rings together
took 6.5 s an example without it, 0.4 s with it.

Note [Key blocks the check runs]: every role reads the same key range, which the check
fixes at 2S + 2 blocks (S: the most stages of a channel): `attn.kv_range` gives lo = 0,
hi = 2S + 2 and its fully kept blocks [1, 2) -- walked top down (Note [Key blocks top
down] in attnc/passes/tile_program.py), 2S mixed blocks, one full one, one mixed one, so
the first loop of the range wraps every ring twice; a range of two segments, [0, S + 1)
and [S + 1, 2S + 2) -- and the dim N that many key blocks. A guessed first block
(attn.first_block_guess, Note [The guessed first block in the IR] in first_guess.py) is
the range's top in one run of the check and the block below it in another, so that both
ways of its miss branch are explored; a report names the run ("compute (its first block
guessed wrong)"). A loop
whose bounds the trace evaluates (those values through the arith ops, as the roles
compute them) runs those trips, and an scf.if the branch its condition takes; a loop
whose bounds it cannot evaluate runs 2S trips if it is the role's first, else one. So a
role that peels a step off its loops (the overlapped consumers of
attnc/schedule/overlap.py) still meets the producer's fills one for one. A role whose KV
loops run fewer than 2S trips in all (bounds edited away from the key range) is refused:
its loop bodies would go unchecked. Not so with a fixed key length N (a constant in the
IR, not attn.dim): the loops' bounds are then the constants the kernel runs with, however
few trips they give (N = 333 in 128-key blocks: 3, of which an overlapped role peels
one). A persistent CTA's walk over query blocks (Note [The walk over query blocks] in
walk.py) runs three rounds, each with a block: the first over that key range; the second
over none, a block whose mask keeps no key, so that the branches without steps run (the
consumers must still release Q's slot there); the third over S + 1 blocks -- enough for
the producer to refill the slots where the first block left them, up to S steps ahead of
consumers still finishing it, and to wait for Q's slot with the phase two blocks on. A
longer last round would only repeat the first one's steps at twice the states. sm_80's
pair of query blocks runs two rounds, of 2S + 1 and S + 1 key blocks (Note [Rounds that
start over]).

A violation is a deadlock (no role can move and one has not finished: named at the op it
waits at), a slot written while a reader has not read or released its previous fill, a
slot rewritten (`rewrite`) after its fill was read or before its copies landed, a slot
read before its fill landed or holding another fill, or an mbarrier that gets more
arrivals than its count or more bytes than it expects (named at that op).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir

from attnc.ir import roles as R
from attnc.ir.tiles import tile_parts
from attnc.passes.tile_program import KV_LOOP
from attnc.schedule.walk import PAIRS, walk_order

MAX_STATES = 400_000
ROUNDS = 3          # of a persistent CTA's walk over query blocks (Note [Key blocks the check runs])
BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4}


@dataclass(frozen=True)
class Violation:
    op: ir.Operation
    message: str


@dataclass(frozen=True)
class Event:
    kind: str          # wait, arrive, expect, copies, write, read, commit, wait_group, cta, bar_arrive,
                       # bar_sync
    channel: str | None
    op: ir.Operation
    bar: str = ""
    stage: int = 0
    value: int = 0     # parity, arrivals, bytes, pending groups or threads
    tile: str = ""
    fill: int = 0
    lands: str = ""    # write: mbarrier, group or store
    tx: int = 0        # write: bytes the copy delivers
    groups: int = 0    # commit, wait_group: the role's cp.async groups committed before it
    rewrite: bool = False   # write: it replaces the slot's unread fill (Note [The guessed first block in the IR])


def _fixed_keys(kernel) -> bool:
    """Whether the kernel's key length N is fixed: k_shape's third dim an integer (Note [Key
    blocks the check runs])."""
    shape = R.attrs_of(kernel).get("k_shape") or ()
    return len(shape) > 2 and isinstance(shape[2], int)


class Unevaluated(Exception):
    def __init__(self, op, what):
        self.op, self.what = op, what


# --- the roles' programs as events -----------------------------------------------------
class _Trace:
    def __init__(self, warps: int, stages: int, bars: dict, block_n: int = 0, restarts: bool = False,
                 guess_hits: bool = False):
        self.warps, self.trips, self.bars = warps, 2 * stages, bars
        self.guess_hits, self.guessed = guess_hits, False
        # Note [Key blocks the check runs]: the key range every role reads
        self.blocks = 2 * stages + 2
        self.rounds = (self.blocks, 0, stages + 1)      # a persistent CTA's key blocks, round by round
        if restarts:                                    # Note [Rounds that start over]
            self.rounds = (2 * stages + 1, stages + 1)
        self.round = 0
        self.block_n = block_n          # the dim N: that many key blocks (0: N unknown)
        self.env: dict = {}
        self.events: list[Event] = []
        self.violations: list[Violation] = []
        self.in_flight: list = []       # Note [Asynchronous GEMMs]: (result, slots read), oldest first
        self.slots_of: dict = {}        # a slot read's value -> (channel, tile, stage)
        self.freed_by: dict = {}        # Note [Reads until their last use]: a view -> the op freeing its slot
        self.gemms = 0
        self.kv_trips = 0               # trips run by the role's KV loops (Note [Key blocks the check runs])
        self.first_kv_loop = None
        self.fills: dict = {}           # (channel, tile): fills written
        self.written: dict = {}         # (channel, tile, stage): the fill last written there
        self.read: dict = {}            # (channel, tile): its ring's advances since the first read
        self.unadvanced: dict = {}      # stage value: the (channel, tile)s read at it, ring not advanced
        self.groups = 0
        self.loops = 0
        # Note [Rounds that start over]: whether the walk's rounds do; the current round's
        # KV trips, the step the ops being traced belong to, and its copies of later steps
        # (event, step)
        self.restarts, self.round_trips, self.step, self.ahead = restarts, 0, 0, []

    def block(self, block: ir.Block) -> None:
        for op in block.operations:
            self.op(op.operation)

    def get(self, op, v: ir.Value) -> int:
        if v not in self.env:
            raise Unevaluated(op, v)
        return self.env[v]

    def op(self, op: ir.Operation) -> None:
        name = op.name
        if self.freed_by and not name.startswith("scf."):
            self.takes_views(op)
        if name == "arith.constant" and isinstance(op.attributes["value"], ir.IntegerAttr):
            self.env[op.result] = ir.IntegerAttr(op.attributes["value"]).value
        elif name in _ARITH and all(v in self.env for v in op.operands):
            self.env[op.result] = _ARITH[name](*(self.env[v] for v in op.operands))
        elif name == R.RING_ADVANCE:
            for key in self.unadvanced.pop(op.operands[0], ()):
                self.read[key] = self.read.get(key, 0) + 1
            stage, phase = self.get(op, op.operands[0]), self.get(op, op.operands[1])
            stages = ir.IntegerAttr(op.attributes["stages"]).value
            wrap = stage + 1 >= stages
            self.env[op.results[0]] = 0 if wrap else stage + 1
            self.env[op.results[1]] = phase ^ 1 if wrap else phase
        elif name == "arith.cmpi" and all(v in self.env for v in op.operands) and _predicate(op) in _CMPI:
            self.env[op.result] = int(_CMPI[_predicate(op)](*(self.env[v] for v in op.operands)))
        elif name == "arith.select" and all(v in self.env for v in op.operands):
            cond, a, b = (self.env[v] for v in op.operands)
            self.env[op.result] = a if cond else b
        elif name in ("attn.kv_range", "attn.block_map_range"):
            for r, v in zip(op.results, _key_range(len(op.results), self._blocks())):
                self.env[r] = v
        elif name == R.FIRST_BLOCK_GUESS:   # Note [Key blocks the check runs]: the range's top, or below it
            self.env[op.result] = self._blocks() - (1 if self.guess_hits else 2)
            self.guessed = True
        elif name == R.WALK_ROUNDS:         # Note [Key blocks the check runs]
            self.env[op.result] = len(self.rounds)
        elif name == R.WALK_BLOCK:
            rnd = self.get(op, op.operands[0])
            if any(use.owner.name == "scf.if" for use in op.results[0].uses):
                self.end_round()
                self.round = rnd        # the walk's block (not an earlier round's, for its epilogue)
            for r, v in zip(op.results, (1, 0, 0, rnd)):
                self.env[r] = v
        elif name == "attn.dim" and ir.StringAttr(op.attributes["name"]).value == "N" and self.block_n:
            self.env[op.result] = self._blocks() * self.block_n
        elif name == "scf.for":
            self.loop(op)
        elif name == "scf.if":
            self.branch(op)
        elif name == "attn.mma":
            self.mma(op)
        elif name == R.MMA_WAIT:
            self.mma_wait(op)
        elif name in _SYNC:
            if name in (R.MBARRIER_ARRIVE, R.TCGEN05_COMMIT):
                self.released(op, landed=name == R.MBARRIER_ARRIVE)
            self.events.append(_SYNC[name](self, op))
            load = op.operands[2].owner if name == R.SLOT_WRITE else None
            if self.restarts and getattr(load, "name", "") == "attn.load" and "ahead" in load.attributes:
                self.ahead.append((self.events[-1], self.step + _attr(load, "ahead")))

    def _blocks(self) -> int:
        """The key blocks of the current round's query block (Note [Key blocks the check runs])."""
        return self.rounds[min(self.round, len(self.rounds) - 1)]

    def loop(self, op: ir.Operation) -> None:
        body = op.regions[0].blocks[0]
        lo, hi, step = (self.env.get(v) for v in list(op.operands)[:3])
        if None in (lo, hi) or step != 1:
            lo, hi = 0, self.trips if self.loops == 0 else 1
        self.loops += 1
        if KV_LOOP in op.attributes:
            self.kv_trips += max(0, hi - lo)
            self.first_kv_loop = self.first_kv_loop or op
        values = [self.env.get(v) for v in list(op.operands)[3:]]
        args = list(body.arguments)
        terminator = list(body.operations)[-1]
        for n in range(lo, hi):
            self.env[args[0]] = n
            if KV_LOOP in op.attributes:
                self.step, self.round_trips = self.round_trips, self.round_trips + 1
            for a, v in zip(args[1:], values):
                if v is None:
                    self.env.pop(a, None)
                else:
                    self.env[a] = v
            for inner in list(body.operations)[:-1]:
                self.op(inner.operation)
            values = [self.env.get(v) for v in terminator.operands]
        for r, v in zip(op.results, values):
            if v is not None:
                self.env[r] = v

    # Note [Rounds that start over]: the rounds of sm_80's pair of query blocks (Note [Two
    # query blocks in the IR] in walk.py) start their rings over at stage 0, after a wait for
    # every copy and a CTA barrier. The check runs two rounds, of 2S + 1 and S + 1 key blocks
    # (S stages): both with steps, and the first ending on slot 0, which the second's first
    # copies fill again, so a thread still reading it (no CTA barrier since) is a
    # violation. A copy for a step past its block's last copies nothing -- an empty cp.async
    # group, as in the kernel (Note [cp.async group counting] in
    # attnc/backend/forward_loads.py) -- so its slot write is left out once the round's
    # trips are known, and so is its fill; and a round's reads count their fills from the
    # fills written before it (not from the ring advances of every round, Note [Re-reads]
    # in sync_ir.py: Q is read at every step without one).
    def end_round(self) -> None:
        if self.restarts:
            past = [e for e, step in self.ahead if step >= self.round_trips]
            for e in past:
                self.fills[(e.channel, e.tile)] -= 1
            dropped = {id(e) for e in past}
            self.events = [e for e in self.events if id(e) not in dropped]
            self.read.update(self.fills)
        self.round_trips, self.step, self.ahead = 0, 0, []

    def branch(self, op: ir.Operation) -> None:
        """An scf.if runs the branch its condition (a value the trace evaluates) takes."""
        taken = self.get(op, op.operands[0])
        if not taken and not op.regions[1].blocks:
            return
        block = op.regions[0 if taken else 1].blocks[0]
        ops = list(block.operations)
        for inner in ops[:-1]:
            self.op(inner.operation)
        for r, v in zip(op.results, ops[-1].operands):
            if v in self.env:
                self.env[r] = self.env[v]

    # Note [Asynchronous GEMMs]: an attn.mma with `async` (sm_90a's wgmma, issued and
    # committed as a group) reads its shared-memory operands until an attn.mma_wait lands
    # it: a wait of `pending` = n lands every async GEMM of the role but the n youngest.
    # A slot an async GEMM reads must not be released (an arrive on an mbarrier guarding
    # it) before that GEMM has landed, nor written by the role that issued the GEMM
    # (sm_90a's cooperative kernel refills its own slots), and a wait's operands, the
    # GEMMs whose results it gives, must not be among those it leaves in flight.
    def mma(self, op: ir.Operation) -> None:
        if "async" not in op.attributes:
            return
        slots = [self.slots_of[v] for v in op.operands if v in self.slots_of]
        self.gemms += 1
        token = ("gemm", self.gemms)        # carried through the loops like a stage value
        self.env[op.result] = token
        self.in_flight.append((token, slots))

    def mma_wait(self, op: ir.Operation) -> None:
        pending = _attr(op, "pending")
        landing = self.in_flight[:max(0, len(self.in_flight) - pending)]
        self.in_flight = self.in_flight[len(landing):]
        left = {token for token, _ in self.in_flight}
        for k, v in enumerate(op.operands):
            if self.env.get(v) in left:
                self.violations.append(Violation(op, f"{R.MMA_WAIT} (pending = {pending}): operand {k} is among "
                                                     f"the {pending} youngest GEMMs the wait leaves in flight"))
                return

    def released(self, op: ir.Operation, landed: bool) -> None:
        """An arrive (`landed`: the GEMMs reading its slots must have landed) or a tcgen05
        commit (it arrives once the MMAs before it have) on an mbarrier that may guard slots."""
        bar = self.bars.get(R.name_of(op.operands[0].owner))
        if bar is None:
            return
        channel, tile, stage = bar[0], bar[3], self.get(op, op.operands[1])
        guards = lambda read: read[0] == channel and read[2] == stage and tile in (None, read[1])  # noqa: E731
        for _, slots in self.in_flight if landed else ():
            for read in slots:
                if guards(read):
                    self.violations.append(Violation(op, f"this arrive releases slot {stage} of {channel!r} "
                                                         f"({read[1]}) while an async attn.mma reading it is in "
                                                         f"flight: land it with attn.mma_wait first (Note "
                                                         f"[Asynchronous GEMMs] in attnc/schedule/verify.py)"))
                    return
        self.freed(op, guards)

    # Note [Reads until their last use]: a slot read's value is a view of the slot, read by
    # the ops that take it (an attn.mma, sync or async). So the slot is read until the last
    # of them has run: an arrive that releases it, a tcgen05 commit, or the role's own write
    # to it, followed -- later in the role's program, or in a later trip of a loop -- by an op
    # that takes the view, frees or refills a slot that is still to be read. The trace runs
    # the role's ops in their order: a view whose slot is freed is marked, and an op taking a
    # marked view is the violation (the freeing op's); the slot read run again (a later
    # trip's) makes a new view.
    def freed(self, op: ir.Operation, guards) -> None:
        for view, slot in self.slots_of.items():
            if view not in self.freed_by and guards(slot):
                self.freed_by[view] = op

    def takes_views(self, op: ir.Operation) -> None:
        for v in op.operands:
            freed = self.freed_by.pop(v, None)
            if freed is None:
                continue
            channel, tile, stage = self.slots_of[v]
            verb = "overwrites" if freed.name == R.SLOT_WRITE else "releases"
            self.violations.append(Violation(freed, f"this {freed.name} {verb} slot {stage} of {channel!r} ({tile}) "
                                                    f"before the {op.name} that reads it (Note [Reads until their "
                                                    f"last use] in attnc/schedule/verify.py)"))
            return

    def mbar(self, op, kind: str, value: int) -> Event:
        bar = R.name_of(op.operands[0].owner)
        stage = self.get(op, op.operands[1])
        return Event(kind, self.bars[bar][0], op, bar, stage, value)


def _wait(t: _Trace, op) -> Event:
    e = t.mbar(op, "wait", 0)
    return Event("wait", e.channel, op, e.bar, e.stage, t.get(op, op.operands[2]) & 1)


def _slot(t: _Trace, op, kind: str) -> Event:
    """A slot write (fill: the writes of the tile before it; a rewrite's, the fill its slot
    was last written with) or read (fill: the times its ring advanced before it, Note
    [Re-reads] in sync_ir.py: the ring_advance of the stage value it reads at)."""
    chan = R.name_of(op.operands[0].owner)
    tile = ir.StringAttr(op.attributes["tile"]).value
    stage = t.get(op, op.operands[1])
    if kind == "read":
        t.unadvanced.setdefault(op.operands[1], set()).add((chan, tile))
        t.slots_of[op.result] = (chan, tile, stage)
        t.freed_by.pop(op.result, None)        # a new view (Note [Reads until their last use])
        return Event("read", chan, op, stage=stage, tile=tile, fill=t.read.get((chan, tile), 0))
    rewrite = "rewrite" in op.attributes
    if rewrite:                     # Note [The guessed first block in the IR] in first_guess.py
        fill = t.written.get((chan, tile, stage))
        if fill is None:
            t.violations.append(Violation(op, f"this rewrite of slot {stage} of {chan!r} ({tile}) replaces no fill: "
                                              f"the slot was never written"))
            fill = -1
    else:
        fill = t.fills.get((chan, tile), 0)
        t.fills[(chan, tile)] = fill + 1
        t.written[(chan, tile, stage)] = fill
    t.freed(op, lambda read: read == (chan, tile, stage))
    if any(read == (chan, tile, stage) for _, slots in t.in_flight for read in slots):
        t.violations.append(Violation(op, f"this write overwrites slot {stage} of {chan!r} ({tile}) while an async "
                                          f"attn.mma reading it is in flight: land it with attn.mma_wait first "
                                          f"(Note [Asynchronous GEMMs] in attnc/schedule/verify.py)"))
    lands = R.attrs_of(op).get("completes")
    bar = R.name_of(op.operands[3].owner) if len(op.operands) > 3 else ""
    if lands not in LANDINGS or (lands == "mbarrier") != bool(bar):
        t.violations.append(Violation(op, f"this slot write completes = {lands!r} with "
                                          f"{'an mbarrier' if bar else 'no mbarrier'} operand: a write lands on "
                                          f"the mbarrier it names (\"mbarrier\", a TMA copy) or, naming none, "
                                          f"with a cp.async group, a cp.async arrival or at once (\"group\", "
                                          f"\"arrive\", \"store\")"))
        lands = "store"
    return Event("write", chan, op, bar, stage, tile=tile, fill=fill, lands=lands, tx=_tile_bytes(op.operands[2].type),
                 rewrite=rewrite)


LANDINGS = ("mbarrier", "group", "arrive", "store")     # a slot write's `completes`


def _attr(op, key) -> int:
    return ir.IntegerAttr(op.attributes[key]).value


def _channel_attr(op) -> str | None:
    return ir.StringAttr(op.attributes["channel"]).value if "channel" in op.attributes else None


_ARITH = {"arith.maxsi": max, "arith.minsi": min, "arith.divsi": lambda a, b: int(a / b) if b else 0,
          "arith.xori": lambda a, b: a ^ b, "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
          "arith.andi": lambda a, b: a & b, "arith.ori": lambda a, b: a | b, "arith.muli": lambda a, b: a * b}


def _key_range(results: int, blocks: int) -> list[int]:
    """attn.kv_range's values (Note [Key blocks the check runs]): its segments' (lo, hi),
    [0, blocks) cut in as many runs, then the fully kept blocks [1, 2)."""
    segments = max(1, (results - 2) // 2)
    if blocks == 0:
        return [0] * (2 * segments + 2)
    cuts = [blocks * k // segments for k in range(segments + 1)]
    out = [v for k in range(segments) for v in (cuts[k], cuts[k + 1])]
    return out + [1, 2]


_CMPI = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "slt": lambda a, b: a < b,
         "sle": lambda a, b: a <= b, "sgt": lambda a, b: a > b, "sge": lambda a, b: a >= b}


def _predicate(op) -> str:
    from attnc.ir.ops import cmpi_predicate
    return cmpi_predicate(op)


_SYNC = {
    R.MBARRIER_WAIT: _wait,
    R.MBARRIER_ARRIVE: lambda t, op: t.mbar(op, "arrive", t.warps if _per_warp(op) else 1),
    R.MBARRIER_EXPECT_TX: lambda t, op: t.mbar(op, "expect", _attr(op, "bytes")),
    R.TCGEN05_COMMIT: lambda t, op: t.mbar(op, "arrive", 1),
    R.CP_ASYNC_MBARRIER_ARRIVE: lambda t, op: t.mbar(op, "copies", 32 * t.warps),
    R.SLOT_WRITE: lambda t, op: _slot(t, op, "write"),
    R.SLOT_READ: lambda t, op: _slot(t, op, "read"),
    R.CP_ASYNC_COMMIT: lambda t, op: _commit(t, op),
    R.CP_ASYNC_WAIT: lambda t, op: Event("wait_group", None, op, value=_attr(op, "pending"), groups=t.groups),
    R.CTA_BARRIER: lambda t, op: Event("cta", None, op),
    R.NAMED_BARRIER_ARRIVE: lambda t, op: Event("bar_arrive", _channel_attr(op), op, f"bar{_attr(op, 'id')}",
                                                value=_attr(op, "threads")),
    R.NAMED_BARRIER_SYNC: lambda t, op: Event("bar_sync", _channel_attr(op), op, f"bar{_attr(op, 'id')}",
                                              value=_attr(op, "threads")),
}


def _commit(t: _Trace, op) -> Event:
    t.groups += 1
    return Event("commit", None, op, groups=t.groups - 1)


def _per_warp(op) -> bool:
    return "per" not in op.attributes or ir.StringAttr(op.attributes["per"]).value == "warp"


def _tile_bytes(t: ir.Type) -> int:
    shape, element, _ = tile_parts(t)
    return math.prod(shape) * BYTES.get(element, 4)


# --- the check -------------------------------------------------------------------------
def verify_kernel(kernel: ir.Operation) -> list[Violation]:
    """Every violation of the L5 protocol of `kernel` (empty: sound), its rings explored
    all at once (Note [Every ring at once])."""
    found, explorations = kernel_explorations(kernel)
    return found or [v for v in (explore(*x) for x in explorations) if v is not None]


def kernel_explorations(kernel: ir.Operation) -> tuple[list[Violation], list[tuple]]:
    """(the violations found reading the IR, the exploration still to run as the arguments
    of `explore`: none where no role synchronizes): the roles' programs are read from the
    IR here, and the exploration needs it no more (but for its violations' ops)."""
    inits = R.mbarrier_ops(kernel)
    bars = {}
    out = []
    for op in inits:
        a = R.attrs_of(op)
        if a.get("count", 0) < 1 or a.get("stages", 0) < 1:
            out.append(Violation(op, f"mbarrier {a['name']!r} has count {a.get('count')} and "
                                     f"{a.get('stages')} stages: both must be at least 1"))
        bars[a["name"]] = (a.get("channel"), a.get("count", 1), a.get("stages", 1), a.get("tile"))
    if out:
        return out, []
    stages = max([c.get("stages", 1) for c in map(R.attrs_of, R.channel_ops(kernel))] or [1])
    channels = tuple(R.name_of(op) for op in R.channel_ops(kernel))
    explorations = []
    for hits in (False, True):      # a guessed first block below the range's top, then at it
        violations, programs, threads, guessed = _programs(kernel, bars, stages, hits)
        if violations:
            return violations, []
        # Note [Every ring at once]
        used = {r: events for r, events in programs.items() if any(e.channel is not None for e in events)}
        explorations += [(channels, used, bars, threads)] if used else []
        if not guessed:             # no role guesses: the second run would be the first
            break
    return [], explorations


def _programs(kernel: ir.Operation, bars: dict, stages: int, guess_hits: bool) -> tuple[list, dict, dict, bool]:
    """(violations, each role's events, each role's threads, whether a role guessed its first
    block) as the roles' programs run over the check's key range (Note [Key blocks the check
    runs]), a guessed first block at the range's top (`guess_hits`) or below it."""
    programs: dict[str, list[Event]] = {}
    threads: dict[str, int] = {}
    guessed = False
    fixed_keys = _fixed_keys(kernel)
    for role in R.role_ops(kernel):
        a = R.attrs_of(role)
        trace = _Trace(len(a["warps"]), stages, bars, R.attrs_of(kernel).get("block_n", 0),
                       walk_order(role) == PAIRS, guess_hits)
        try:
            trace.block(R.role_block(role))
            trace.end_round()
            if trace.violations:
                return trace.violations[:1], {}, {}, False
        except Unevaluated as e:
            what = "the condition" if e.op.name == "scf.if" else "the stage or parity"
            return [Violation(e.op, f"role {a['name']!r}: {what} of {e.op.name} is not a value the loops "
                                    f"and arith ops make (an iter_arg, a constant, attn.ring_advance, "
                                    f"attn.kv_range, attn.first_block_guess, attn.dim, integer arith)")], {}, {}, False
        if trace.first_kv_loop is not None and trace.kv_trips < 2 * stages and not fixed_keys:
            return [Violation(trace.first_kv_loop,
                              f"role {a['name']!r}: its KV loops run {trace.kv_trips} trips over the "
                              f"{trace.blocks} key blocks the check gives every role, fewer than the "
                              f"{2 * stages} that wrap each ring twice: their bounds are not the key "
                              f"range's (Note [Key blocks the check runs])")], {}, {}, False
        guessed = guessed or trace.guessed
        name = a["name"] + (_GUESSED[guess_hits] if trace.guessed else "")
        programs[name] = trace.events
        threads[name] = 32 * len(a["warps"])
    return [], programs, threads, guessed


# A guessing role's name in the check's reports: which run found it.
_GUESSED = {True: " (its first block guessed right)", False: " (its first block guessed wrong)"}


def explore(channels: tuple[str, ...], programs: dict, bars: dict, threads: dict,
            max_states: int = MAX_STATES) -> Violation | None:
    from attnc.schedule.explore import Explorer     # (it imports this module)
    return Explorer(channels, programs, bars, threads, reduce=True, max_states=max_states).run()
