"""The exploration of attn-verify-pipeline (verify.py): the roles as processes over their
events on every channel (Note [Every ring at once] in verify.py), in every interleaving
up to the order of independent events, breadth first, with the state of the channels'
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


# Note [Roles that need not move]: a partial-order reduction (persistent sets). In a
# state, the exploration takes the moves of a set T of the roles that have not finished
# (with the copies in flight and the pending cp.async groups as one more process), not
# of every role: T is closed under adding, for each member's next event, every role
# whose remaining events -- or the copies those will send -- touch what that event
# touches, one of the two writing it (an mbarrier or named barrier; a slot's data,
# readers and holders; a role's committed groups; a CTA barrier or wait_group moves
# every slot's data on), and is the smallest such closure, over each role as its start,
# that leaves a role out and has a move (else every move is taken). A role outside T
# touches nothing T's next events touch before one of T moves, so its events commute
# with theirs and stay as enabled, with the same outcome: every deadlock and every
# violating event of the full exploration is reached (in a schedule equal to one of its
# schedules up to independent events), and no move is put off for ever, as no move
# leads back to a state (each advances a role, enters a named barrier or lands a copy).
# Off for roles alike (Note [Roles alike]), whose merging of states it is not shown to
# combine with; there the exploration takes every move.


class Explorer:
    """The roles as processes over the events of `channels` (Note [Every ring at once]).
    A state is (program counters, mbarriers as (arrivals, phases, pending bytes), slots
    (each channel's, by stage and tile) as (fill, how far its data landed: Note [Copies
    seen by every thread], readers), what is in flight to an mbarrier (slots, mbarrier,
    bytes, arrivals, the role and event that sent it), each role's committed cp.async
    groups, its open copies, the slots read and not yet released, the named-barrier
    generation each role waits on); each event knows its mbarrier's and its slot's index
    in them beforehand, and an arrival the slots it releases."""

    def __init__(self, channels: tuple[str, ...], programs: dict, bars: dict, threads: dict, reduce: bool = False,
                 max_states: int | None = None):
        self.channels = channels
        self.max_states = verify.MAX_STATES if max_states is None else max_states
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
        self.reduce = reduce and not self.alike     # Note [Roles that need not move]
        self._resources()
        self._needed_of: dict = {}

    def _alike(self) -> list[tuple[int, ...]]:
        """Note [Roles alike]: the classes of two or more roles whose programs and threads
        are the same."""
        classes: dict = {}
        for k, events in enumerate(self.events):
            key = (self.threads[k], tuple((e.kind, e.channel, e.bar, e.stage, e.value, e.tile, e.fill, e.lands, e.tx,
                                           e.groups, e.rewrite, b, s, released) for e, b, s, released in events))
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

    # --- Note [Roles that need not move] ---------------------------------------------
    def _resources(self) -> None:
        """Each event's shared resources as bit masks (reads, writes): bit b an mbarrier or
        named barrier, bit B + s a slot (its data, readers and holders), bit B + S + k role
        k's committed cp.async groups; and each role's suffixes' union, with the writes
        of the copies its events send (a landing's mbarrier and slots)."""
        nb, ns = len(self.bar_keys), len(self.slot_keys)
        every_slot = ((1 << ns) - 1) << nb
        self.slot_bit = [1 << (nb + s) for s in range(ns)]
        self.group_bit = [1 << (nb + ns + k) for k in range(len(self.events))]
        self.direct, self.suffix = [], []
        for k, events in enumerate(self.events):
            grouped = 0             # the slots this role's copies land in through groups or arrivals
            for e, b, s, _ in events:
                if e.kind == "write" and e.lands in ("group", "arrive"):
                    grouped |= self.slot_bit[s]
            own = self.group_bit[k]
            direct, sent = [], []
            for e, b, s, releases in events:
                bar = 1 << b if b >= 0 else 0
                slot = self.slot_bit[s] if s >= 0 else 0
                kind = e.kind
                if kind == "wait":
                    rw, later = (bar, 0), 0
                elif kind in ("arrive", "expect"):
                    rw, later = (0, bar | sum(self.slot_bit[r] for r in releases)), 0
                elif kind == "copies":
                    rw, later = (0, 0), bar | grouped
                elif kind == "write":
                    landing = 1 << self.bar_index[(e.bar, e.stage)] if e.lands == "mbarrier" else 0
                    rw, later = (0, slot), landing
                elif kind == "read":
                    rw, later = (0, slot), 0
                elif kind == "commit":
                    rw, later = (0, own), grouped
                elif kind == "wait_group":
                    rw, later = (own, every_slot), 0
                elif kind == "cta":
                    rw, later = (0, every_slot), 0
                else:                       # bar_arrive, bar_sync
                    rw, later = (0, bar), 0
                direct.append(rw)
                sent.append(later)
            suffix = [(0, 0)] * (len(events) + 1)
            for p in range(len(events) - 1, -1, -1):
                r, w = suffix[p + 1]
                suffix[p] = (r | direct[p][0], w | direct[p][1] | sent[p])
            self.direct.append(direct)
            self.suffix.append(suffix)
        # the (next event, rest) pairs as small numbers, -1 past a role's last event
        ids: dict = {}
        self.touch_id = [[ids.setdefault((d, r), len(ids)) for d, r in zip(direct, suffix)] + [-1]
                         for direct, suffix in zip(self.direct, self.suffix)]

    def _needed(self, state) -> tuple[tuple[int, ...], bool] | None:
        """Note [Roles that need not move]: the roles (and whether the copies in flight and
        the cp.async groups) whose moves the exploration takes from `state`, or None for
        every move. It depends on the state only through what each role's next event and
        the rest of its events touch (`touch_id`: a role's counter at an event of a loop
        repeats it) and what the copies and groups write, so it is made once for each of
        those."""
        pcs, _, _, flight, groups = state[:5]
        env_w = 0                           # the copies in flight and the groups, as one process (writing only)
        for landing, b, _, _, _, _ in flight:
            env_w |= 1 << b
            for s in landing:
                env_w |= self.slot_bit[s]
        for k, pending in enumerate(groups):
            for _, group in pending:
                env_w |= self.group_bit[k]
                for s in group:
                    env_w |= self.slot_bit[s]
        key = (tuple(self.touch_id[k][pc] for k, pc in enumerate(pcs)), env_w)
        if key not in self._needed_of:
            self._needed_of[key] = self._closure(pcs, env_w)
        return self._needed_of[key]

    def _closure(self, pcs: tuple[int, ...], env_w: int) -> tuple[tuple[int, ...], bool] | None:
        """_needed's smallest closed set: node i < len(live) the live role live[i], node
        len(live) the copies and groups; an edge from a node whose next event (the
        environment: its writes) touches what the other's rest touches."""
        live = [k for k in range(len(pcs)) if pcs[k] < self.lengths[k]]
        if len(live) < 2:
            return None
        env = len(live)
        nexts = [self.direct[k][pcs[k]] for k in live] + [(0, env_w)]
        rests = [self.suffix[k][pcs[k]] for k in live]
        edges = []
        for r, w in nexts:
            out = 0
            for i, (sr, sw) in enumerate(rests):
                if w & (sr | sw) or r & sw:
                    out |= 1 << i
            if (w | r) & env_w:
                out |= 1 << env
            edges.append(out)
        every = (1 << env) - 1
        best = None
        for start in range(env):
            chosen = work = 1 << start
            while work:
                j = work.bit_length() - 1
                work &= ~(1 << j)
                fresh = edges[j] & ~chosen
                chosen |= fresh
                work |= fresh
            roles = chosen & every
            if roles == every:
                continue
            if best is None or roles.bit_count() < best[0].bit_count():
                best = (roles, bool(chosen >> env & 1))
        if best is None:
            return None
        return tuple(live[i] for i in range(env) if best[0] >> i & 1), best[1]

    def _count(self, bar: str) -> int:
        return self.bars[bar][1] if bar in self.bars else 0

    def run(self) -> Violation | None:
        n = len(self.programs)
        start = ((0,) * n, ((0, 0, 0),) * len(self.bar_keys),
                 ((-1, EMPTY, frozenset()),) * len(self.slot_keys), (), ((),) * n, ((),) * n,
                 frozenset(), (-1,) * n)
        seen = {start}
        queue = deque([start])
        lengths, canonical, limit = self.lengths, self._canonical if self.alike else None, self.max_states
        while queue:
            state = queue.popleft()
            moved = False
            moves = self._moves(state)
            needed = self._needed(state) if self.reduce else None
            if needed is not None:
                some = list(self._moves(state, *needed))
                if some:                    # else every move: a role outside may still move
                    moves = some
            for nxt in moves:
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
                                                                 f"{limit} states, not verified (fewer K/V stages "
                                                                 f"explore fewer; attn-verify-pipeline{{max_states="
                                                                 f"N}} explores up to N)")
                    queue.append(nxt)
            if not moved and any(pc < length for pc, length in zip(state[0], lengths)):
                return self._deadlock(state)
        return None

    def _deadlock(self, state) -> Violation:
        """The deadlock of `state`, named at the wait most likely its cause: one on an
        mbarrier that got part of its arrivals or bytes (a count or a size off), then one
        that no role will arrive on any more (an arrive gone), before the roles that wait
        for what the stuck roles would do next."""
        pcs, bars, flight = state[0], state[1], state[3]
        stuck = [(k, self.programs[k][pc]) for k, pc in enumerate(pcs) if pc < len(self.programs[k])]
        landing = {b for _, b, _, _, _, _ in flight}
        live = [k for k, _ in stuck]

        def rank(item) -> tuple[bool, bool]:
            k, e = item
            if e.kind != "wait":
                return True, True
            b = self.bar_index[(e.bar, e.stage)]
            arrivals, _, pending = bars[b]
            owed = b in landing or any(self.suffix[j][pcs[j]][1] >> b & 1 for j in live if j != k)
            return not (arrivals > 0 or pending > 0), owed
        stuck.sort(key=rank)                # (stable: in role order otherwise)
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

    def _moves(self, state, roles=None, copies: bool = True):
        """The successors of `state`, each role's step first, then each copy landing, then
        each cp.async group completing; a Violation ends them. `roles`, `copies`: those
        roles' steps only, and the copies' and groups' moves or none."""
        pcs, bars, slots, flight, groups, open_groups, holds, entered = state
        lengths, events = self.lengths, self.events
        for k in roles if roles is not None else range(len(pcs)):
            pc = pcs[k]
            if pc < lengths[k]:
                nxt = self._step(k, events[k][pc], state)
                if nxt is not None:
                    yield nxt
        if not copies:
            return
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
        fill, landed, readers = slots[s]
        holders = {h[0] for h in holds if h[1] == s}
        if e.rewrite:                   # Note [The guessed first block in the IR] in first_guess.py
            if fill != e.fill or readers or holders:
                held = "no fill" if fill < 0 else f"fill {fill}" + (" already read" if fill == e.fill else "")
                return Violation(e.op, f"{self.roles[k]} rewrites slot {e.stage} of {e.channel!r} ({e.tile}), "
                                       f"which holds {held}: a rewrite replaces fill {e.fill} before any thread "
                                       f"reads it")
            if landed not in (WAITED, VISIBLE):
                return Violation(e.op, f"{self.roles[k]} rewrites slot {e.stage} of {e.channel!r} ({e.tile}) "
                                       f"before the copies of fill {fill} landed: wait for them first "
                                       f"(attn.cp_async_wait)")
        elif fill >= 0 and (not self.readers[s] <= readers or holders):
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
