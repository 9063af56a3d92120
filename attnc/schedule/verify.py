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

Note [One ring at a time]: a process is a role (its warps run one program in step: an
arrive per warp is their arrivals at once). The events of one channel -- its slot
writes and reads, its mbarriers' waits and arrivals -- and what belongs to no channel
-- the CTA barriers, the cp.async groups (a thread's, whichever channel's copies they
hold: a wait_group waits until every group but its `pending` youngest has landed, the
groups landing in any order), the named barriers of sm_90a's ping-pong (a bar.sync
waits until the barrier's thread count has arrived or synced) -- are explored together,
breadth first, so a violation comes with a shortest schedule; channels are explored one
after the other, as the rings of the recipes never wait on each other inside one role's
step.

Note [Key blocks the check runs]: every role reads the same key range, which the check
fixes at 2S + 2 blocks (S: the most stages of a channel): `attn.kv_range` gives lo = 0,
hi = 2S + 2 and its fully kept blocks [2S, 2S + 1) -- 2S mixed blocks, one full one, one
mixed one, so the first loop of the range wraps every ring twice; a range of two
segments, [0, S + 1) and [S + 1, 2S + 2) -- and the dim N that many key blocks. A loop
whose bounds the trace evaluates (those values through the arith ops, as the roles
compute them) runs those trips, and an scf.if the branch its condition takes; a loop
whose bounds it cannot evaluate runs 2S trips if it is the role's first, else one. So a
role that peels a step off its loops (the overlapped consumers of
attnc/schedule/overlap.py) still meets the producer's fills one for one. A role whose KV
loops run fewer than 2S trips in all (bounds edited away from the key range) is refused:
its loop bodies would go unchecked.

A violation is a deadlock (no role can move and one has not finished: named at the op
it waits at), a slot written while a reader has not read or released its previous fill,
a slot read before its fill landed or holding another fill, or an mbarrier that gets
more arrivals than its count or more bytes than it expects (named at that op).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from mlir import ir

from attnc.ir import roles as R
from attnc.passes.tile_program import KV_LOOP

MAX_STATES = 400_000
# Note [Copies seen by every thread]: a cp.async copy completed with a group is the
# issuing thread's until `cp.async.wait_group` has waited for it, and every thread's only
# after a CTA barrier that follows that wait: a slot's data goes EMPTY -> LANDED (its
# group completed) -> WAITED (a wait_group passed since) -> VISIBLE (a CTA barrier
# since), and is read only when VISIBLE. A copy that lands on an mbarrier (its
# transaction count or a thread's noinc arrival) is VISIBLE to whoever waits on it.
# (A wait takes every completed group's slots on, also those of groups younger than it
# waits for that happened to complete: the check does not tell those apart.)
EMPTY, LANDED, WAITED, VISIBLE = range(4)
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


class Unevaluated(Exception):
    def __init__(self, op, what):
        self.op, self.what = op, what


# --- the roles' programs as events -----------------------------------------------------
class _Trace:
    def __init__(self, warps: int, stages: int, bars: dict, block_n: int = 0):
        self.warps, self.trips, self.bars = warps, 2 * stages, bars
        # Note [Key blocks the check runs]: the key range every role reads
        self.blocks = 2 * stages + 2
        self.dims = {"N": self.blocks * block_n} if block_n else {}
        self.env: dict = {}
        self.events: list[Event] = []
        self.violations: list[Violation] = []
        self.in_flight: list = []       # Note [Asynchronous GEMMs]: (result, slots read), oldest first
        self.slots_of: dict = {}        # a slot read's value -> (channel, tile, stage)
        self.gemms = 0
        self.kv_trips = 0               # trips run by the role's KV loops (Note [Key blocks the check runs])
        self.first_kv_loop = None
        self.fills: dict = {}           # (channel, tile): fills written
        self.read: dict = {}            # (channel, tile): its ring's advances since the first read
        self.unadvanced: dict = {}      # stage value: the (channel, tile)s read at it, ring not advanced
        self.groups = 0
        self.loops = 0

    def block(self, block: ir.Block) -> None:
        for op in block.operations:
            self.op(op.operation)

    def get(self, op, v: ir.Value) -> int:
        if v not in self.env:
            raise Unevaluated(op, v)
        return self.env[v]

    def op(self, op: ir.Operation) -> None:
        name = op.name
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
        elif name == "attn.kv_range":
            for r, v in zip(op.results, _key_range(len(op.results), self.blocks)):
                self.env[r] = v
        elif name == "attn.dim" and ir.StringAttr(op.attributes["name"]).value in self.dims:
            self.env[op.result] = self.dims[ir.StringAttr(op.attributes["name"]).value]
        elif name == "scf.for":
            self.loop(op)
        elif name == "scf.if":
            self.branch(op)
        elif name == "attn.mma":
            self.mma(op)
        elif name == R.MMA_WAIT:
            self.mma_wait(op)
        elif name in _SYNC:
            if name == R.MBARRIER_ARRIVE:
                self.released(op)
            self.events.append(_SYNC[name](self, op))

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

    def released(self, op: ir.Operation) -> None:
        bar = self.bars.get(R.name_of(op.operands[0].owner))
        if bar is None:
            return
        channel, tile, stage = bar[0], bar[3], self.get(op, op.operands[1])
        for _, slots in self.in_flight:
            for read in slots:
                if read[0] == channel and read[2] == stage and tile in (None, read[1]):
                    self.violations.append(Violation(op, f"this arrive releases slot {stage} of {channel!r} "
                                                         f"({read[1]}) while an async attn.mma reading it is in "
                                                         f"flight: land it with attn.mma_wait first (Note "
                                                         f"[Asynchronous GEMMs] in attnc/schedule/verify.py)"))
                    return

    def mbar(self, op, kind: str, value: int) -> Event:
        bar = R.name_of(op.operands[0].owner)
        stage = self.get(op, op.operands[1])
        return Event(kind, self.bars[bar][0], op, bar, stage, value)


def _wait(t: _Trace, op) -> Event:
    e = t.mbar(op, "wait", 0)
    return Event("wait", e.channel, op, e.bar, e.stage, t.get(op, op.operands[2]) & 1)


def _slot(t: _Trace, op, kind: str) -> Event:
    """A slot write (fill: the writes of the tile before it) or read (fill: the times its
    ring advanced before it, Note [Re-reads] in sync_ir.py: the ring_advance of the stage
    value it reads at)."""
    chan = R.name_of(op.operands[0].owner)
    tile = ir.StringAttr(op.attributes["tile"]).value
    stage = t.get(op, op.operands[1])
    if kind == "read":
        t.unadvanced.setdefault(op.operands[1], set()).add((chan, tile))
        t.slots_of[op.result] = (chan, tile, stage)
        return Event("read", chan, op, stage=stage, tile=tile, fill=t.read.get((chan, tile), 0))
    fill = t.fills.get((chan, tile), 0)
    t.fills[(chan, tile)] = fill + 1
    if any(read == (chan, tile, stage) for _, slots in t.in_flight for read in slots):
        t.violations.append(Violation(op, f"this write overwrites slot {stage} of {chan!r} ({tile}) while an async "
                                          f"attn.mma reading it is in flight: land it with attn.mma_wait first "
                                          f"(Note [Asynchronous GEMMs] in attnc/schedule/verify.py)"))
    lands = ir.StringAttr(op.attributes["completes"]).value
    bar = R.name_of(op.operands[3].owner) if len(op.operands) > 3 else ""
    return Event("write", chan, op, bar, stage, tile=tile, fill=fill, lands=lands, tx=_tile_bytes(op.operands[2].type))


def _attr(op, key) -> int:
    return ir.IntegerAttr(op.attributes[key]).value


def _channel_attr(op) -> str | None:
    return ir.StringAttr(op.attributes["channel"]).value if "channel" in op.attributes else None


_ARITH = {"arith.maxsi": max, "arith.minsi": min, "arith.divsi": lambda a, b: int(a / b) if b else 0,
          "arith.xori": lambda a, b: a ^ b, "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
          "arith.andi": lambda a, b: a & b, "arith.ori": lambda a, b: a | b, "arith.muli": lambda a, b: a * b}
def _key_range(results: int, blocks: int) -> list[int]:
    """attn.kv_range's values (Note [Key blocks the check runs]): its segments' (lo, hi),
    [0, blocks) cut in as many runs, then the fully kept blocks [blocks - 2, blocks - 1)."""
    segments = max(1, (results - 2) // 2)
    cuts = [blocks * k // segments for k in range(segments + 1)]
    out = [v for k in range(segments) for v in (cuts[k], cuts[k + 1])]
    return out + [blocks - 2, blocks - 1]


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
    text = str(t)                       # !attn.tile<[128, 64], bf16, "smem">
    shape = text[text.index("[") + 1:text.index("]")]
    element = text[text.index("]") + 1:].split(",")[1].strip()
    return math.prod(int(x) for x in shape.split(",") if x.strip()) * BYTES.get(element, 4)


# --- the check -------------------------------------------------------------------------
def verify_kernel(kernel: ir.Operation) -> list[Violation]:
    """Every violation of the L5 protocol of `kernel` (empty: sound)."""
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
        return out
    stages = max([c.get("stages", 1) for c in map(R.attrs_of, R.channel_ops(kernel))] or [1])
    programs: dict[str, list[Event]] = {}
    threads: dict[str, int] = {}
    for role in R.role_ops(kernel):
        a = R.attrs_of(role)
        trace = _Trace(len(a["warps"]), stages, bars, R.attrs_of(kernel).get("block_n", 0))
        try:
            trace.block(R.role_block(role))
            if trace.violations:
                return trace.violations[:1]
        except Unevaluated as e:
            what = "the condition" if e.op.name == "scf.if" else "the stage or parity"
            return [Violation(e.op, f"role {a['name']!r}: {what} of {e.op.name} is not a value the loops "
                                    f"and arith ops make (an iter_arg, a constant, attn.ring_advance, "
                                    f"attn.kv_range, attn.dim, integer arith)")]
        if trace.first_kv_loop is not None and trace.kv_trips < 2 * stages:
            return [Violation(trace.first_kv_loop,
                              f"role {a['name']!r}: its KV loops run {trace.kv_trips} trips over the "
                              f"{trace.blocks} key blocks the check gives every role, fewer than the "
                              f"{2 * stages} that wrap each ring twice: their bounds are not the key "
                              f"range's (Note [Key blocks the check runs])")]
        programs[a["name"]] = trace.events
        threads[a["name"]] = 32 * len(a["warps"])
    for chan in [R.name_of(op) for op in R.channel_ops(kernel)]:
        projected = {r: [e for e in events if e.channel in (chan, None)] for r, events in programs.items()}
        projected = {r: ev for r, ev in projected.items() if any(e.channel == chan for e in ev)}
        if projected:
            found = _Explorer(chan, projected, bars, threads).run()
            if found:
                out.append(found)
    return out


class _Explorer:
    """One channel's processes (Note [One ring at a time]). A state is (program counters,
    mbarriers as (arrivals, phases, pending bytes), slots as (fill, how far its data
    landed: Note [Copies seen by every thread], readers), what is in flight to an
    mbarrier (slots, mbarrier, bytes, arrivals, the role and event that sent it), each
    role's committed cp.async groups, its open copies, the slots read and
    not yet released, the named-barrier generation each role waits on); each event knows
    its mbarrier's and its slot's index in them beforehand, and an arrival the slots it
    releases."""

    def __init__(self, chan: str, programs: dict, bars: dict, threads: dict):
        self.chan = chan
        self.roles = sorted(programs)
        self.programs = [programs[r] for r in self.roles]
        self.threads = [threads[r] for r in self.roles]
        self.bar_keys = sorted({(e.bar, e.stage) for p in self.programs for e in p if e.bar})
        self.bars = bars
        self.slot_keys = sorted({(e.stage, e.tile) for p in self.programs for e in p if e.kind in ("write", "read")})
        self.readers = frozenset(k for k, p in enumerate(self.programs) if any(e.kind == "read" for e in p))
        self.bar_index = {key: b for b, key in enumerate(self.bar_keys)}
        slot_index = {key: s for s, key in enumerate(self.slot_keys)}
        self.counts = [self._count(bar) for bar, _ in self.bar_keys]
        self.lengths = [len(p) for p in self.programs]
        self.events = [[(e, self.bar_index.get((e.bar, e.stage), -1), slot_index.get((e.stage, e.tile), -1),
                         self._released(e, slot_index)) for e in p] for p in self.programs]

    def _released(self, e: Event, slot_index: dict) -> frozenset:
        """The slots an arrival on an mbarrier hands back (Note [cp.async arrivals])."""
        if e.kind != "arrive":
            return frozenset()
        tile = self.bars[e.bar][3] if e.bar in self.bars else None
        return frozenset(s for (stage, t), s in slot_index.items() if stage == e.stage and tile in (None, t))

    def _count(self, bar: str) -> int:
        return self.bars[bar][1] if bar in self.bars else 0

    def run(self) -> Violation | None:
        n = len(self.programs)
        start = ((0,) * n, ((0, 0, 0),) * len(self.bar_keys),
                 ((-1, EMPTY, frozenset()),) * len(self.slot_keys), (), ((),) * n, ((),) * n,
                 frozenset(), (-1,) * n)
        seen = {start}
        queue = deque([start])
        lengths = self.lengths
        while queue:
            state = queue.popleft()
            moved = False
            for nxt in self._moves(state):
                moved = True
                if isinstance(nxt, Violation):
                    return nxt
                if nxt not in seen:
                    if len(seen) >= MAX_STATES:
                        return Violation(self.programs[0][0].op, f"channel {self.chan!r}: more than "
                                                                 f"{MAX_STATES} states, not verified")
                    seen.add(nxt)
                    queue.append(nxt)
            if not moved and any(pc < length for pc, length in zip(state[0], lengths)):
                return self._deadlock(state)
        return None

    def _deadlock(self, state) -> Violation:
        pcs, bars = state[0], state[1]
        stuck = [(k, self.programs[k][pc]) for k, pc in enumerate(pcs) if pc < len(self.programs[k])]
        parts = []
        for k, e in stuck:
            where = f"{self.roles[k]} waits at {e.op.name}"
            if e.kind == "wait":
                arrivals, phases, pending = bars[self.bar_index[(e.bar, e.stage)]]
                where += (f" on {e.bar}[{e.stage}] for parity {e.value} (its phase {phases}, {arrivals} "
                          f"of {self._count(e.bar)} arrivals{f', {pending} bytes due' if pending else ''})")
            elif e.kind == "bar_sync":
                arrived = bars[self.bar_index[(e.bar, e.stage)]][0]
                where += f" on named barrier {e.bar[3:]} ({arrived} of its {e.value} threads there)"
            parts.append(where)
        named = all(e.kind == "bar_sync" for _, e in stuck)
        what = "the named barriers deadlock" if named else f"channel {self.chan!r} deadlocks"
        return Violation(stuck[0][1].op, f"{what}: " + "; ".join(parts))

    def _moves(self, state):
        """The successors of `state`, each role's step first, then each copy landing, then
        each cp.async group completing; a Violation ends them."""
        pcs, bars, slots, flight, groups, open_groups, holds, entered = state
        lengths, events = self.lengths, self.events
        for k, pc in enumerate(pcs):
            if pc < lengths[k]:
                nxt = self._step(k, events[k][pc], state)
                if nxt is not None:
                    yield nxt
        for i, (landing, b, tx, count, k, pc) in enumerate(flight):
            rest = flight[:i] + flight[i + 1:]
            arrivals, phases, pending = bars[b]
            pending -= tx
            arrivals += count
            bar, stage = self.bar_keys[b]
            if pending < 0:
                yield Violation(self.programs[k][pc].op, f"{bar}[{stage}] receives more bytes than its "
                                                         f"expect_tx announced")
                return
            if arrivals > self.counts[b]:
                yield Violation(self.programs[k][pc].op, f"{bar}[{stage}] gets {arrivals} arrivals in one phase, "
                                                         f"more than its count {self.counts[b]}")
                return
            new_bars = _set(bars, b, self._settle(b, arrivals, phases, pending))
            new_slots = slots
            for slot in landing:
                fill, _, readers = new_slots[slot]
                new_slots = _set(new_slots, slot, (fill, VISIBLE, readers))
            yield (pcs, new_bars, new_slots, rest, groups, open_groups, holds, entered)
        for k, pending in enumerate(groups):
            for g, (_, group) in enumerate(pending):
                new_slots = slots
                for slot in group:
                    fill, _, readers = new_slots[slot]
                    new_slots = _set(new_slots, slot, (fill, LANDED, readers))
                yield (pcs, bars, new_slots, flight, _set(groups, k, pending[:g] + pending[g + 1:]),
                       open_groups, holds, entered)

    def _settle(self, b: int, arrivals: int, phases: int, pending: int):
        if arrivals == self.counts[b] and pending == 0:
            return (0, phases + 1, 0)
        return (arrivals, phases, pending)

    def _step(self, k: int, event: tuple, state):
        """Role k's next event `(event, its mbarrier's index, its slot's index, the slots
        it releases)`: the successor, a Violation, or None where the role waits."""
        e, b, s, releases = event
        pcs, bars, slots, flight, groups, open_groups, holds, entered = state
        kind = e.kind
        nxt = pcs[:k] + (pcs[k] + 1,) + pcs[k + 1:]
        if kind == "wait":
            return (nxt, *state[1:]) if (bars[b][1] & 1) != e.value else None
        if kind in ("arrive", "expect"):
            arrivals, phases, pending = bars[b]
            arrivals += 1 if kind == "expect" else e.value
            pending += e.value if kind == "expect" else 0
            if arrivals > self.counts[b]:
                return Violation(e.op, f"{e.bar}[{e.stage}] gets {arrivals} arrivals in one phase, more than "
                                       f"its count {self.counts[b]}")
            released = frozenset(h for h in holds if h[0] != k or h[1] not in releases)
            return (nxt, _set(bars, b, self._settle(b, arrivals, phases, pending)), slots, flight, groups,
                    open_groups, released, entered)
        if kind == "copies":            # Note [cp.async arrivals]
            sent = (open_groups[k], b, 0, e.value, k, pcs[k])
            return (nxt, bars, slots, tuple(sorted(flight + (sent,))), groups, _set(open_groups, k, ()), holds,
                    entered)
        if kind == "write":
            return self._write(k, e, s, state, nxt)
        if kind == "read":
            fill, landed, readers = slots[s]
            if fill != e.fill or landed != VISIBLE:
                what = ("before a cp.async wait and then a CTA barrier made every thread's copies of it visible "
                        "(Note [Copies seen by every thread])" if fill == e.fill and landed in (LANDED, WAITED) else
                        "before its data landed" if fill == e.fill else
                        "before any fill was written to it" if fill < 0 else f"while it holds fill {fill}")
                return Violation(e.op, f"{self.roles[k]} reads fill {e.fill} of {self.chan!r} ({e.tile}) "
                                       f"from slot {e.stage} {what}")
            return (nxt, bars, _set(slots, s, (fill, landed, readers | {k})), flight, groups, open_groups,
                    holds | {(k, s)}, entered)
        if kind == "commit":
            return (nxt, bars, slots, flight, _set(groups, k, groups[k] + ((e.groups, open_groups[k]),)),
                    _set(open_groups, k, ()), holds, entered)
        if kind == "wait_group":            # every group but the `value` youngest has landed
            landed = all(seq >= e.groups - e.value for seq, _ in groups[k])
            return (nxt, bars, _promote(slots, LANDED, WAITED), *state[3:]) if landed else None
        if kind == "cta":
            return (nxt, bars, _promote(slots, WAITED, VISIBLE), flight, groups, open_groups,
                    frozenset(h for h in holds if h[0] != k), entered)
        return self._named(k, e, b, state, nxt)

    def _write(self, k: int, e: Event, s: int, state, nxt):
        pcs, bars, slots, flight, groups, open_groups, holds, entered = state
        fill, _, readers = slots[s]
        holders = {h[0] for h in holds if h[1] == s}
        if fill >= 0 and (not self.readers <= readers or holders):
            late = sorted(self.roles[r] for r in (self.readers - readers) | holders)
            return Violation(e.op, f"{self.roles[k]} overwrites slot {e.stage} of {self.chan!r} ({e.tile}) with "
                                   f"fill {e.fill} before {', '.join(late)} released fill {fill}")
        if e.lands == "mbarrier":
            sent = ((s,), self.bar_index[(e.bar, e.stage)], e.tx, 0, k, pcs[k])
            return (nxt, bars, _set(slots, s, (e.fill, EMPTY, frozenset())),
                    tuple(sorted(flight + (sent,))), groups, open_groups, holds, entered)
        if e.lands in ("group", "arrive"):
            return (nxt, bars, _set(slots, s, (e.fill, EMPTY, frozenset())), flight, groups,
                    _set(open_groups, k, open_groups[k] + (s,)), holds, entered)
        return (nxt, bars, _set(slots, s, (e.fill, VISIBLE, frozenset())), flight, groups, open_groups, holds,
                entered)

    def _named(self, k: int, e: Event, b: int, state, nxt):
        """bar.arrive adds the role's threads; bar.sync adds them once and waits for the
        barrier's generation to move on (entered[k]: the generation it joined)."""
        pcs, bars, slots, flight, groups, open_groups, holds, entered = state
        arrived, generation, _ = bars[b]
        if e.kind == "bar_sync" and entered[k] >= 0:
            if generation > entered[k]:
                return (nxt, bars, slots, flight, groups, open_groups, holds, _set(entered, k, -1))
            return None
        arrived += self.threads[k]
        if arrived > e.value:
            return Violation(e.op, f"named barrier {e.bar[3:]} counts {e.value} threads but gets {arrived}")
        done = arrived == e.value
        bar = (0, generation + 1, 0) if done else (arrived, generation, 0)
        if e.kind == "bar_arrive":
            return (nxt, _set(bars, b, bar), slots, flight, groups, open_groups, holds, entered)
        return (pcs, _set(bars, b, bar), slots, flight, groups, open_groups, holds, _set(entered, k, generation))


def _promote(slots: tuple, before: int, after: int) -> tuple:
    """The slots whose data is at stage `before` of Note [Copies seen by every thread]
    moved on to `after`."""
    if not any(landed == before for _, landed, _ in slots):
        return slots
    return tuple((fill, after, readers) if landed == before else (fill, landed, readers)
                 for fill, landed, readers in slots)


def _set(values: tuple, k: int, value) -> tuple:
    return values[:k] + (value,) + values[k + 1:]
