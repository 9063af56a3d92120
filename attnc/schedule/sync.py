"""Channels -> synchronization: cp.async groups, or mbarrier rings with counts.

For each channel with `stages` slots this decides the protocol the code follows:

* `cp.async` (one role is both producer and consumer): commit one group per tile
  copied, wait until at most `cp_async_pending` groups are in flight before reading,
  and a CTA barrier so every thread sees every other thread's copies.
* `cp.async.mbarrier` (sm_90a's producer warpgroup): a `full` and an `empty` mbarrier
  per slot for each tile of the channel (Note [Barriers per tile]).
* `tma`: a `full` mbarrier per slot (arrive count 1: the producer's
  arrive.expect_tx, plus the transaction bytes of the fill) and an `empty`
  mbarrier per slot (arrive count = consumer warps that release it).
* `tcgen05`: the MMA warp's `tcgen05.commit` arrives once on `full`; the consumer
  warpgroup arrives on `empty` (count = its warps).

With `pingpong` (Recipe.pingpong) the two consumer warpgroups also take turns at the
GEMMs through two named barriers (Note [Ping-pong turns]).

Each ring is walked with an explicit (stage, phase) state: stage advances per
slot, phase flips when stage wraps. Waits on `full` use `phase`, waits on `empty`
use `phase ^ 1` so the first pass through the ring does not block.

Note [Bytes per fill]: a `full` mbarrier completes its phase when its arrivals are in
and the transaction bytes the producer announced (arrive.expect_tx) have landed, so the
announced bytes must be exactly what that fill's copies deliver. A ring whose slots hold
one tile at a time (`Channel.alternating`: sm_100a's K, V, K, ... ring, FlashAttention-4's)
delivers K's bytes on even fills and V's on odd ones, which differ when the QK and V
head dims do (diff_head_dims.attn: 32 KiB and 16 KiB at 128-key tiles). So `tx_bytes` is
a sequence, fill t of the ring announcing `tx_bytes[t % len(tx_bytes)]` (the ring's fill
count, not the slot's: with an odd number of stages a slot holds K and V in turn); one
value where every fill is alike. One value of the larger tile, as the plan had before,
would leave every V fill's phase waiting for bytes that never come: the MMA warp would
hang. (The slots are all as large as the larger tile; FlashAttention-4's uneven ring,
which packs them tighter, is not planned.)

Note [Barriers per tile]: sm_90a's producer warpgroup copies each tile with cp.async, and
each of its threads then arrives on the tile's full mbarrier with `cp.async.mbarrier.arrive
.noinc`, an arrival made once that thread's copies have landed (Note [Producer warpgroup]
in attnc/backend/sm90a_ws.py). So a full mbarrier counts the producer's threads (128), no
bytes, and a slot's K and V each have their own (`mbar_k_full`, `mbar_v_full`): the
consumers wait for K before QK^T and for V only before P.V, so QK^T does not wait for
V's copies. Each tile's slot is released on its own empty mbarrier (`mbar_k_empty`
after QK^T, `mbar_v_empty` after P.V), one arrival per consumer warp. Q's slot has a full
mbarrier and, only where CTAs are persistent (`Recipe.persistent`), an empty one: the
next query block's Q waits for the consumers to be done with the last; a CTA of one query
block fills it once.

Note [Ping-pong turns]: sm_90a's two consumer warpgroups take turns at issuing their GEMMs
(Note [Producer warpgroup] in attnc/backend/sm90a_ws.py): consumer0 waits for its turn at
named barrier 1 and ends it by arriving at named barrier 2, consumer1 the other way round,
each barrier counting both warpgroups' 256 threads. A turn holds a step's QK^T and the
previous step's P.V (Note [wgmma overlap] in sm90a.py): it begins before one step's P.V and
ends after the next step's QK^T, so in the L5 loops, which run each step's GEMMs in one
trip, the turn is taken (named_barrier_sync) before the P.V and handed over
(named_barrier_arrive) after the QK^T -- the first before the KV loops (step 0's QK^T),
the last after them (the last step's P.V). consumer1 arrives once at the start so that
consumer0 goes first, and consumer0 syncs once more at the end, which balances both
barriers. (The kernel waits for the next step's K before it takes the turn; the loops,
whose trip ends with the P.V, wait for it inside the turn.) Persistent CTAs do that first
arrive and last sync once, around the walk over query blocks (Note [The walk over query
blocks] in walk.py), the turns running on from block to block: taken per block,
consumer1 could hand over its last turn of one block and arrive again for the next before
consumer0 synced for the last one, and named barrier 1 would count consumer1's 128
threads twice in one phase, leave consumer0 behind, and deadlock both.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from attnc.schedule.alloc import DTYPE_BYTES, Tile, _tile_rows_cols
from attnc.schedule.recipes import CP_ASYNC_MBARRIER, Channel, Recipe


@dataclass(frozen=True)
class Barrier:
    name: str                   # 'mbar_kv_full', 'mbar_k_empty', 'cp_async_kv', 'bar_turn0', ...
    channel: str
    kind: str                   # 'mbarrier', 'cp.async.group', 'named'
    stages: int
    arrive_count: int
    tx_bytes: tuple[int, ...]   # bytes fill t of a slot delivers: tx_bytes[t % len] (mbarrier
                                # expect_tx; Note [Bytes per fill])
    arrivers: str               # role(s) that arrive / commit
    waiters: str                # role(s) that wait
    tile: str | None = None     # the one tile whose slots it guards (Note [Barriers per tile])
    ident: int = 0              # a named barrier's id (bar.sync / bar.arrive)


def insert_pipelines(recipe: Recipe, tile: Tile) -> tuple[Barrier, ...]:
    out: list[Barrier] = []
    for ch in recipe.channels:
        out.extend(_protocol(recipe, ch, tile))
    return tuple(out) + turns(recipe)


def turns(recipe: Recipe) -> tuple[Barrier, ...]:
    """Note [Ping-pong turns]: bar_turn{c} is consumer{c}'s turn, the barrier it syncs on
    and the other consumer arrives at (ids from 1: barrier 0 is the CTA's bar.sync)."""
    if not (recipe.pingpong and {"consumer0", "consumer1"} <= _names(recipe)):
        return ()
    threads = recipe.role("consumer0").threads + recipe.role("consumer1").threads
    return tuple(Barrier(f"bar_turn{c}", "", "named", 1, threads, (0,), f"consumer{1 - c}", f"consumer{c}",
                         ident=1 + c) for c in (0, 1))


def cp_async_pending(recipe: Recipe) -> int:
    """The cp.async groups a cooperative role's wait before a step's reads leaves in
    flight: with its loads ahead (Note [cp.async prefetch] in prefetch.py) those of the
    S - 1 steps ahead, K and V a group each, which every step commits even where it
    copies nothing (Note [cp.async group counting] in attnc/backend/forward_loads.py);
    else none, each read right after its copies."""
    kv = [c.stages for c in recipe.channels if c.name == "kv" and c.transport == "cp.async"]
    return 2 * kv[0] - 2 if recipe.loads_ahead and kv else 0


def fill_tiles(ch: Channel) -> tuple[tuple[str, ...], ...]:
    """The tiles each fill of one of `ch`'s slots delivers, in fill order and repeating
    (Note [Bytes per fill]): every tile of the slot at once, or for an alternating ring one
    tile after the other (K, V, K, ...). Tensor memory (S, P) is no copy's."""
    tiles = tuple(t for t in ch.tile if t not in ("s", "p"))
    return tuple((t,) for t in tiles) if ch.alternating and tiles else (tiles,)


def fill_bytes(ch: Channel, tile: Tile) -> tuple[int, ...]:
    """The bytes of each of `fill_tiles(ch)`."""
    elem = DTYPE_BYTES[tile.dtype]
    return tuple(sum(math.prod(_tile_rows_cols(tile, t)) * elem for t in fill) for fill in fill_tiles(ch))


def _protocol(recipe: Recipe, ch: Channel, tile: Tile) -> list[Barrier]:
    if ch.transport == "cp.async":
        return [Barrier(f"cp_async_{ch.name}", ch.name, "cp.async.group", ch.stages,
                        0, fill_bytes(ch, tile), ch.producer, ch.consumer)]
    consumers = _consumers_of(recipe, ch)
    if ch.transport == CP_ASYNC_MBARRIER:
        return _per_tile(recipe, ch, consumers)
    tx = fill_bytes(ch, tile) if ch.transport == "tma" else (0,)
    full = _arrivals(recipe, [ch.producer], ch.transport)
    empty = _arrivals(recipe, consumers, "release")
    return [
        Barrier(f"mbar_{ch.name}_full", ch.name, "mbarrier", ch.stages, full, tx,
                ch.producer, ",".join(consumers)),
        Barrier(f"mbar_{ch.name}_empty", ch.name, "mbarrier", ch.stages, empty, (0,),
                ",".join(consumers), ch.producer),
    ]


def _per_tile(recipe: Recipe, ch: Channel, consumers: list[str]) -> list[Barrier]:
    """Note [Barriers per tile]: the full barriers of the channel's tiles, then their
    empty ones (the order the kernels place them in: Note [Mbarriers as planned] in
    attnc/backend/smem_layout.py)."""
    waiters = ",".join(consumers)
    threads = recipe.role(ch.producer).threads
    full = [Barrier(f"mbar_{t}_full", ch.name, "mbarrier", ch.stages, threads, (0,), ch.producer, waiters, t)
            for t in ch.tile]
    if "q" in ch.tile and not recipe.persistent:
        return full
    warps = _arrivals(recipe, consumers, "release")
    return full + [Barrier(f"mbar_{t}_empty", ch.name, "mbarrier", ch.stages, warps, (0,), waiters, ch.producer, t)
                   for t in ch.tile]


def _arrivals(recipe: Recipe, roles: list[str], how: str) -> int:
    """How many arrivals complete one phase of a barrier these roles signal.

    A TMA slot is signalled once (one elected thread's arrive.expect_tx); the MMA
    warp signals through one `tcgen05.commit`; any other role has one elected lane
    per warp arrive, so the count is its warp count.
    """
    if how == "tma":
        return 1
    return sum(1 if r == "mma" else len(recipe.role(r).warps) for r in roles)


def _names(recipe: Recipe) -> set[str]:
    return {r.name for r in recipe.roles}


def _consumers_of(recipe: Recipe, ch: Channel) -> list[str]:
    """On sm_90a both consumer warpgroups read every K/V slot and both release it."""
    if ch.consumer.startswith("consumer"):
        return [r.name for r in recipe.roles if r.name.startswith("consumer")]
    return [ch.consumer]
