"""The L5 protocol as an abstract machine (design.md section 6): every mbarrier ring of a
plan is run over enough fills to wrap it twice, in every interleaving of its processes,
and must neither deadlock nor let a slot be overwritten before all its readers released
it, nor read before its data landed.

What the machine takes from the plan (the IR's `attn.role`, `attn.buffer`,
`attn.barrier` ops, as a researcher may have edited them) and what from the lowering:

* the plan: each barrier's `arrive_count`, `tx_bytes`, `stages` and its `arrivers` /
  `waiters` roles; each role's warps; each channel's buffers (their bytes per slot);
* the lowering's conduct, the facts this checks the plan against: fill t of a TMA ring is
  one elected thread's `arrive.expect_tx(tx_bytes[t % len(tx_bytes)])` and then the
  copies' complete_tx of the tiles' real bytes (every tile of the channel at once, or for
  an alternating ring tile t % 2 alone: Note [Bytes per fill] in sync.py), which the
  slot, the channel's buffers' size / stages, must hold; the `mma` role signals with one `tcgen05.commit`; any
  other role arrives once per warp; a producer waits on `empty` with the phase's
  complement (the first pass does not block), a consumer on `full` with the phase.

Note [State space]: the processes of a ring are the producer side (one process, or one
per warp) and the consumer side (likewise, over all the consumer roles); warps that run
the same program are interchangeable, so a state keeps their program counters sorted
(symmetry reduction). The explored states are the reachable ones, breadth first, so a
reported deadlock or race comes with a shortest schedule that reaches it.

`named` barriers (bar.sync) and cp.async groups have no ring: a named barrier's count
must be the threads of every role that takes part, a cp.async ring must stay inside one
role.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from attnc.schedule.alloc import DTYPE_BYTES, Buffer, Tile
from attnc.errors import AttncError
from attnc.schedule.recipes import Recipe, Role, check_register_budget
from attnc.schedule.sync import Barrier, fill_bytes, fill_tiles

MAX_STATES = 2_000_000
TILE_NAMES = ("q", "k", "v", "o", "s", "p")     # what a channel's slot may carry


@dataclass(frozen=True)
class Violation:
    barrier: str                    # the ring's `full` barrier (or the barrier at fault)
    message: str


@dataclass(frozen=True)
class _Side:
    roles: tuple[str, ...]
    processes: int                  # interchangeable processes on this side
    arrivals: int                   # arrivals each process makes per phase it signals


def verify(recipe: Recipe, barriers: list[Barrier], buffers: list[Buffer], tile: Tile) -> list[Violation]:
    """Every violation of the plan's protocol (empty: it is sound); `tile` gives the bytes
    each fill's copies deliver."""
    out = _impossible(recipe, barriers, buffers, tile)
    if out:
        return out          # the machine below would divide by them, or walk nothing
    by_role = {r.name: r for r in recipe.roles}
    channels = {c.name: c for c in recipe.channels}
    rings: dict[str, dict[str, Barrier]] = {}
    for b in barriers:
        if b.kind == "mbarrier":
            rings.setdefault(b.channel, {})["full" if b.name.endswith("_full") else "empty"] = b
        elif b.kind == "named":
            threads = 32 * sum(len(by_role[r].warps) for r in _roles(b.arrivers) + _roles(b.waiters))
            if b.arrive_count != threads:
                outcome = "hang" if b.arrive_count > threads else "release early"
                out.append(Violation(b.name, f"named barrier counts {b.arrive_count} threads but "
                                             f"{b.arrivers} and {b.waiters} bring {threads}: "
                                             f"bar.sync would {outcome}"))
        elif b.kind == "cp.async.group" and b.arrivers != b.waiters:
            out.append(Violation(b.name, f"cp.async groups are waited for by the thread that committed "
                                         f"them, not by another role ({b.arrivers} -> {b.waiters})"))
    for channel, ring in rings.items():
        if set(ring) != {"full", "empty"}:
            missing = ({"full", "empty"} - set(ring)).pop()
            out.append(Violation(next(iter(ring.values())).name,
                                 f"channel {channel!r} has no {missing} mbarrier: its ring cannot be walked"))
            continue
        full, empty = ring["full"], ring["empty"]
        if (_roles(empty.arrivers), _roles(empty.waiters)) != (_roles(full.waiters), _roles(full.arrivers)):
            out.append(Violation(empty.name, f"{empty.name} is signalled by {empty.arrivers} for "
                                             f"{empty.waiters}, but {full.name}'s readers are {full.waiters} "
                                             f"and its writer {full.arrivers}: the readers release the slot "
                                             f"to the writer"))
            continue
        ch = channels.get(channel)
        tma = ch is not None and ch.transport == "tma"
        fills = fill_bytes(ch, tile) if tma else (0,)
        slot = _slot_bytes(channel, buffers, ch.alternating) if tma else 0
        if slot < max(fills):
            out.append(Violation(full.name, f"a slot of channel {channel!r} holds {slot} bytes but a fill "
                                            f"delivers {max(fills)}: the copy would overrun the slot"))
            continue
        names = tuple("+".join(f).upper() for f in fill_tiles(ch)) if ch else ("",)
        out.extend(_Ring(full, empty, by_role, fills, names, tma).run())
    return out


def _impossible(recipe: Recipe, barriers: list[Barrier], buffers: list[Buffer], tile: Tile) -> list[Violation]:
    """Values no plan can hold (a plan edited by hand): counts below 1, negative sizes,
    tiles and dtypes no channel carries, register budgets setmaxnreg cannot set or the
    register file cannot hold."""
    out = []
    if tile.dtype not in DTYPE_BYTES:
        out.append(Violation("tile", f"the tile's dtype {tile.dtype!r} is none of {', '.join(DTYPE_BYTES)}"))
    for c in recipe.channels:
        if c.stages < 1:
            out.append(Violation(c.name, f"channel {c.name!r} has {c.stages} stages: at least 1"))
        unknown = [t for t in c.tile if t not in TILE_NAMES]
        if unknown or not c.tile:
            out.append(Violation(c.name, f"channel {c.name!r} carries tiles {list(c.tile)}: one or more of "
                                         f"{', '.join(TILE_NAMES)}"))
    for b in buffers:
        if b.stages < 1 or b.size <= 0 or b.offset < 0:
            out.append(Violation(b.name, f"buffer {b.name!r} has offset {b.offset}, size {b.size}, "
                                         f"{b.stages} stages: the offset must be at least 0, the size and "
                                         f"the stages at least 1"))
    for b in barriers:
        counts = isinstance(b.tx_bytes, tuple) and all(type(x) is int for x in b.tx_bytes)
        if b.stages < 1 or b.arrive_count < 0 or not counts or not b.tx_bytes or min(b.tx_bytes) < 0:
            out.append(Violation(b.name, f"barrier {b.name!r} has {b.stages} stages, arrive count "
                                         f"{b.arrive_count}, tx_bytes {b.tx_bytes}: the stages must be at "
                                         f"least 1, the others at least 0 (tx_bytes: a list of one or more integers)"))
    try:
        check_register_budget(recipe)       # what attn-warp-specialize checks of its own budgets
    except AttncError as e:
        out.append(Violation("registers", e.message))
    return out


def _roles(text: str) -> list[str]:
    return [r for r in text.split(",") if r]


def _side(roles: list[str], by_role: dict[str, Role], tma: bool) -> _Side:
    """The lowering's conduct: TMA and tcgen05.commit arrive once, other roles once a warp."""
    if tma or roles == ["mma"]:
        return _Side(tuple(roles), 1, 1)
    return _Side(tuple(roles), sum(len(by_role[r].warps) for r in roles), 1)


def _slot_bytes(channel: str, buffers: list[Buffer], alternating: bool) -> int:
    sizes = [b.size // b.stages for b in buffers
             if b.channel == channel and b.space == "smem" and not b.alias_of]
    if not sizes:
        return 0
    return max(sizes) if alternating else sum(sizes)


class _Ring:
    """One channel's full/empty ring (Note [State space]). Producer program per fill t:
    wait empty[t % S] (parity phase ^ 1), write, arrive full (with expect_tx for TMA);
    consumer program: wait full[t % S] (parity phase), read, arrive empty."""

    def __init__(self, full: Barrier, empty: Barrier, by_role: dict[str, Role],
                 delivered: tuple[int, ...], names: tuple[str, ...], tma: bool):
        self.full, self.empty = full, empty
        self.stages = full.stages
        # every slot used with both parities: one period of the (slot, phase, tile) of a
        # fill, as an alternating ring's two tiles repeat every 2 fills (Note [Bytes per fill])
        self.fills = 2 * self.stages
        self.tma = tma                  # the channel's transport, whatever tx_bytes says
        self.prod = _side(_roles(full.arrivers), by_role, self.tma)
        self.cons = _side(_roles(full.waiters), by_role, False)
        self.delivered = delivered
        self.names = names

    def _expected(self, t: int) -> int:
        return self.full.tx_bytes[t % len(self.full.tx_bytes)]

    def _landing(self, t: int) -> int:
        return self.delivered[t % len(self.delivered)]

    def run(self) -> list[Violation]:
        static = self._static()
        if static:
            return static
        S = self.stages
        # state: (producer pcs, consumer pcs, per stage (arrivals, phases, pending tx) of
        #         full and of empty, per stage (fill, writes done, releases), copies in flight)
        start = ((0,) * self.prod.processes, (0,) * self.cons.processes,
                 ((0, 0, 0),) * S, ((0, 0, 0),) * S, ((-1, 0, self.cons.processes),) * S, ())
        seen = {start: None}
        queue = deque([start])
        while queue:
            state = queue.popleft()
            moves = list(self._moves(state))
            if not moves and not self._done(state):
                return [Violation(self.full.name, f"ring {self.full.channel!r} deadlocks: "
                                                  f"{self._describe(state)}")]
            for label, nxt in moves:
                if isinstance(nxt, str):
                    return [Violation(self.full.name, f"ring {self.full.channel!r}: {nxt} "
                                                      f"(after {label})")]
                if nxt not in seen:
                    if len(seen) >= MAX_STATES:
                        return [Violation(self.full.name, f"ring {self.full.channel!r}: more than "
                                                          f"{MAX_STATES} states, not verified")]
                    seen[nxt] = state
                    queue.append(nxt)
        return []

    def _static(self) -> list[Violation]:
        out = []
        if self.full.stages != self.empty.stages:
            out.append(Violation(self.full.name, f"{self.full.name} has {self.full.stages} stages, "
                                                 f"{self.empty.name} {self.empty.stages}"))
        if not self.tma:
            return out
        for t in range(math.lcm(len(self.full.tx_bytes), len(self.delivered))):
            expected, landing = self._expected(t), self._landing(t)
            if expected != landing:
                outcome = "never complete" if expected > landing else "complete before the data lands"
                what = self.names[t % len(self.names)]
                out.append(Violation(self.full.name, f"{self.full.name} expects {expected} bytes on fill "
                                                     f"{t} but that fill of channel {self.full.channel!r}"
                                                     f"{f' ({what})' if what else ''} delivers {landing}: "
                                                     f"the phase would {outcome}"))
                break
        return out

    def _done(self, state) -> bool:
        prod, cons, flying = state[0], state[1], state[5]
        return not flying and all(pc == 2 * self.fills for pc in prod + cons)

    @staticmethod
    def _phase_open(bar, parity: int) -> bool:
        """try_wait.parity(p) passes once the phase of parity p has completed, i.e. while
        the current phase's parity differs from p."""
        return (bar[1] & 1) != parity

    def _arrive(self, bar, count: int, tx: int = 0):
        arrivals, phases, pending = bar
        arrivals += 1
        pending += tx
        if arrivals > count:
            return None
        if arrivals == count and pending == 0:
            return (0, phases + 1, 0)
        return (arrivals, phases, pending)

    def _moves(self, state):
        prod, cons, full, empty, slots, flying = state
        S = self.stages
        for k, pc in enumerate(prod):
            if pc == 2 * self.fills or (k and prod[k - 1] == pc):
                continue                            # finished, or a twin already moved
            t, step = divmod(pc, 2)
            s, phase = t % S, (t // S) & 1
            if step == 0:                           # wait empty, then write the slot
                if not self._phase_open(empty[s], phase ^ 1):
                    continue
                fill, writes, released = slots[s]
                if fill != t and released < self.cons.processes:
                    yield f"fill {t}", (f"slot {s} is overwritten by fill {t} before all "
                                        f"{self.cons.processes} readers of fill {fill} released it "
                                        f"({released} did): {self.empty.name} counts "
                                        f"{self.empty.arrive_count}")
                    return
                written = (t, 0 if self.tma else 1, 0) if fill != t else (t, writes + 1, released)
                yield f"fill {t}", (_step(prod, k), cons, full, empty, _set(slots, s, written), flying)
            else:                                   # arrive on full
                tx = self._expected(t) if self.tma else 0
                bar = self._arrive(full[s], self.full.arrive_count, tx)
                if bar is None:
                    yield f"fill {t}", f"{self.full.name} gets more arrivals than its count " \
                                       f"{self.full.arrive_count}"
                    return
                new_flying = tuple(sorted(flying + (s,))) if self.tma else flying
                yield f"arrive {t}", (_step(prod, k), cons, _set(full, s, bar), empty, slots, new_flying)
        for s in sorted(set(flying)):               # a TMA copy lands: complete_tx
            arrivals, phases, pending = full[s]
            pending -= self._landing(slots[s][0])
            if pending < 0:
                yield "a copy landed", f"{self.full.name} received more bytes than it expected"
                return
            complete = arrivals == self.full.arrive_count and pending == 0
            bar = (0, phases + 1, 0) if complete else (arrivals, phases, pending)
            fill, writes, released = slots[s]
            rest = list(flying)
            rest.remove(s)
            yield f"copy {fill} landed", (prod, cons, _set(full, s, bar), empty,
                                          _set(slots, s, (fill, writes + 1, released)), tuple(rest))
        for k, pc in enumerate(cons):
            if pc == 2 * self.fills or (k and cons[k - 1] == pc):
                continue
            t, step = divmod(pc, 2)
            s, phase = t % S, (t // S) & 1
            if step == 0:                           # wait full, then read the slot
                if not self._phase_open(full[s], phase):
                    continue
                fill, writes, _ = slots[s]
                if fill != t or writes < (1 if self.tma else self.prod.processes):
                    yield f"read {t}", (f"fill {t} is read from slot {s} before its data landed: "
                                        f"{self.full.name} counts {self.full.arrive_count}")
                    return
                yield f"read {t}", (prod, _step(cons, k), full, empty, slots, flying)
            else:                                   # arrive on empty: release
                bar = self._arrive(empty[s], self.empty.arrive_count)
                if bar is None:
                    yield f"release {t}", f"{self.empty.name} gets more arrivals than its count " \
                                          f"{self.empty.arrive_count}"
                    return
                fill, writes, released = slots[s]
                yield f"release {t}", (prod, _step(cons, k), full, _set(empty, s, bar),
                                       _set(slots, s, (fill, writes, released + 1)), flying)

    def _describe(self, state) -> str:
        prod, cons, full, empty = state[:4]
        def where(pcs, what) -> str:
            return ", ".join(sorted({f"{what[pc % 2]} {pc // 2}" if pc < 2 * self.fills else "done"
                                     for pc in pcs}))
        producer = where(prod, ("wait empty for fill", "arrive full for fill"))
        consumers = where(cons, ("wait full for fill", "release fill"))
        return (f"the producer ({'/'.join(self.prod.roles)}) is at [{producer}], the consumers "
                f"({'/'.join(self.cons.roles)}) at [{consumers}]; {self.full.name} counts "
                f"{self.full.arrive_count}, {self.empty.name} {self.empty.arrive_count} "
                f"({self.cons.processes} releasing processes)")


def _step(pcs: tuple, k: int) -> tuple:
    return tuple(sorted(pcs[:k] + (pcs[k] + 1,) + pcs[k + 1:]))


def _set(values: tuple, k: int, value) -> tuple:
    return values[:k] + (value,) + values[k + 1:]
