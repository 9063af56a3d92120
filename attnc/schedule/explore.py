"""The exploration of attn-verify-pipeline (verify.py): the roles as processes over their
events of the channels explored together (two, or all: Note [Rings two at a time] in
verify.py), in every interleaving, breadth first, with the state of the channels'
mbarriers and slots, the copies in flight, the cp.async groups and the named barriers.
"""
from __future__ import annotations

from collections import deque

from attnc.schedule import verify
from attnc.schedule.verify import Event, Violation

# Note [Copies seen by every thread]: a cp.async copy completed with a group is the
# issuing thread's until `cp.async.wait_group` has waited for it, and every thread's only
# after a CTA barrier that follows that wait: a slot's data goes EMPTY -> LANDED (its
# group completed) -> WAITED (a wait_group passed since) -> VISIBLE (a CTA barrier
# since), and is read only when VISIBLE. A copy that lands on an mbarrier (its
# transaction count or a thread's noinc arrival) is VISIBLE to whoever waits on it.
# (A wait takes every completed group's slots on, also those of groups younger than it
# waits for that happened to complete: the check does not tell those apart.)
EMPTY, LANDED, WAITED, VISIBLE = range(4)


# Note [Roles alike]: sm_90a's consumer warpgroups without ping-pong run one program each
# (the same events, the same threads), so a state and the one with two of them swapped
# have the same futures, up to which of the two does what: the exploration takes each
# state with the roles of a class ordered by their program counters (the rest of each
# role's state -- its cp.async groups, named-barrier generation, the slots it read and
# holds, its copies in flight -- going with it), which merges most such pairs (roles at one
# counter are left as they stand: fewer merged, none lost) and loses no violation: a
# violation of one state is, with the two roles' names swapped, one of the other's.


class Explorer:
    """The roles as processes over the events of `channels` (Note [Rings two at a time]).
    A state is (program counters, mbarriers as (arrivals, phases, pending bytes), slots
    (each channel's, by stage and tile) as (fill, how far its data landed: Note [Copies
    seen by every thread], readers), what is in flight to an mbarrier (slots, mbarrier,
    bytes, arrivals, the role and event that sent it), each role's committed cp.async
    groups, its open copies, the slots read and not yet released, the named-barrier
    generation each role waits on); each event knows its mbarrier's and its slot's index
    in them beforehand, and an arrival the slots it releases."""

    def __init__(self, channels: tuple[str, ...], programs: dict, bars: dict, threads: dict):
        self.channels = channels
        self.roles = sorted(programs)
        self.programs = [programs[r] for r in self.roles]
        self.threads = [threads[r] for r in self.roles]
        self.bar_keys = sorted({(e.bar, e.stage) for p in self.programs for e in p if e.bar})
        self.bars = bars
        # a slot: (its channel, stage, tile)
        self.slot_keys = sorted({(e.channel, e.stage, e.tile) for p in self.programs for e in p
                                 if e.kind in ("write", "read")})
        self.bar_index = {key: b for b, key in enumerate(self.bar_keys)}
        slot_index = {key: s for s, key in enumerate(self.slot_keys)}
        # each slot's readers: the roles that read its channel
        self.readers = [frozenset(k for k, p in enumerate(self.programs)
                                  if any(e.kind == "read" and e.channel == channel for e in p))
                        for channel, _, _ in self.slot_keys]
        self.counts = [self._count(bar) for bar, _ in self.bar_keys]
        self.lengths = [len(p) for p in self.programs]
        self.events = [[(e, self.bar_index.get((e.bar, e.stage), -1), slot_index.get((e.channel, e.stage, e.tile), -1),
                         self._released(e, slot_index)) for e in p] for p in self.programs]
        self.alike = self._alike()

    def _alike(self) -> list[tuple[int, ...]]:
        """Note [Roles alike]: the classes of two or more roles whose programs and threads
        are the same."""
        classes: dict = {}
        for k, events in enumerate(self.events):
            key = (self.threads[k], tuple((e.kind, e.channel, e.bar, e.stage, e.value, e.tile, e.fill, e.lands, e.tx,
                                           e.groups, b, s, released) for e, b, s, released in events))
            classes.setdefault(key, []).append(k)
        return [tuple(ks) for ks in classes.values() if len(ks) > 1]

    def _canonical(self, state):
        """Note [Roles alike]: the state with the roles of each class in the order of their
        program counters."""
        pcs = state[0]
        perm = None
        for cls in self.alike:
            if len(cls) == 2:       # (the usual class: two consumer warpgroups)
                if pcs[cls[0]] <= pcs[cls[1]]:
                    continue
                order = [cls[1], cls[0]]
            else:
                order = sorted(cls, key=pcs.__getitem__)    # stable: roles at one counter stay
            if order != list(cls):
                perm = perm or list(range(len(pcs)))
                for new, old in zip(cls, order):
                    perm[old] = new
        return state if perm is None else _permuted(state, perm)

    def _released(self, e: Event, slot_index: dict) -> frozenset:
        """The slots an arrival on an mbarrier hands back (Note [cp.async arrivals])."""
        if e.kind != "arrive":
            return frozenset()
        tile = self.bars[e.bar][3] if e.bar in self.bars else None
        channel = self.bars[e.bar][0] if e.bar in self.bars else None
        return frozenset(s for (c, stage, t), s in slot_index.items()
                         if stage == e.stage and tile in (None, t) and channel in (None, c))

    def _count(self, bar: str) -> int:
        return self.bars[bar][1] if bar in self.bars else 0

    def run(self) -> Violation | None:
        n = len(self.programs)
        start = ((0,) * n, ((0, 0, 0),) * len(self.bar_keys),
                 ((-1, EMPTY, frozenset()),) * len(self.slot_keys), (), ((),) * n, ((),) * n,
                 frozenset(), (-1,) * n)
        seen = {start}
        queue = deque([start])
        lengths, canonical, limit = self.lengths, self._canonical if self.alike else None, verify.MAX_STATES
        while queue:
            state = queue.popleft()
            moved = False
            for nxt in self._moves(state):
                moved = True
                if type(nxt) is Violation:
                    return nxt
                if canonical is not None:
                    nxt = canonical(nxt)
                known = len(seen)
                seen.add(nxt)                   # (one hash of the state, not two)
                if len(seen) > known:
                    if known >= limit:
                        return Violation(self.programs[0][0].op, f"{_channels(self.channels)}: more than "
                                                                 f"{limit} states, not verified")
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
        waited = sorted({self.bars[e.bar][0] for _, e in stuck if e.kind == "wait" and e.bar in self.bars} - {None})
        named = any(e.kind == "bar_sync" for _, e in stuck)
        subjects = (["the named barriers"] if named else []) + ([_channels(waited)] if waited else []) or ["the roles"]
        one = len(waited) == 1 and not named
        what = f"{' and '.join(subjects)} deadlock{'s' if one else ''}"
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
                return Violation(e.op, f"{self.roles[k]} reads fill {e.fill} of {e.channel!r} ({e.tile}) "
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
        if fill >= 0 and (not self.readers[s] <= readers or holders):
            late = sorted(self.roles[r] for r in (self.readers[s] - readers) | holders)
            return Violation(e.op, f"{self.roles[k]} overwrites slot {e.stage} of {e.channel!r} ({e.tile}) with "
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


def _channels(names) -> str:
    """'channel 'kv'' or 'channels 'kv' and 'q'' (the channels of a message)."""
    quoted = [repr(n) for n in names]
    if len(quoted) == 1:
        return f"channel {quoted[0]}"
    return f"channels {', '.join(quoted[:-1])} and {quoted[-1]}"


def _permuted(state, perm: list[int]):
    """`state` with role k renamed perm[k]."""
    pcs, bars, slots, flight, groups, open_groups, holds, entered = state
    n = len(pcs)
    inverse = [0] * n
    for old, new in enumerate(perm):
        inverse[new] = old
    return (tuple(pcs[inverse[k]] for k in range(n)), bars,
            tuple((fill, landed, frozenset(perm[r] for r in readers)) for fill, landed, readers in slots),
            tuple(sorted(f[:4] + (perm[f[4]],) + f[5:] for f in flight)),
            tuple(groups[inverse[k]] for k in range(n)), tuple(open_groups[inverse[k]] for k in range(n)),
            frozenset((perm[h], s) for h, s in holds), tuple(entered[inverse[k]] for k in range(n)))


def _promote(slots: tuple, before: int, after: int) -> tuple:
    """The slots whose data is at stage `before` of Note [Copies seen by every thread]
    moved on to `after`."""
    if not any(landed == before for _, landed, _ in slots):
        return slots
    return tuple((fill, after, readers) if landed == before else (fill, landed, readers)
                 for fill, landed, readers in slots)


def _set(values: tuple, k: int, value) -> tuple:
    return values[:k] + (value,) + values[k + 1:]
