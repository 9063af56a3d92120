"""Where the sm_80 and sm_90a kernels keep their tiles in shared memory: read from the
buffers attn-alloc-smem placed on the channels (L4), checked against what the kernels
need.

Note [Buffers as placed]: the kernels put Q, K and V where the `buffers` of the q and kv
channels say -- each buffer's offset, and for K and V the stride from one stage to the
next (Note [K/V slots] in attnc/schedule/alloc.py) -- so an edited placement gives
another kernel. What they need of it, each refused at the channel with the rule it
breaks:
* every offset and stride a multiple of the target's alignment (`smem_align`: 128 bytes;
  on sm_90a 1024, the swizzle pattern wgmma reads from);
* K and V stepping by one stride: a step's slot offset, stage x stride, serves both tiles;
* no two buffers sharing a byte, stage by stage, but where one is declared `alias_of` the
  other;
* the buffers the plan passes make for the channels (sQ, sK, sV), each with its channel's
  stages, its tile's bytes a stage and the swizzle the kernel's tiles have.
The dynamic shared memory the kernel asks for runs to the end of the last buffer and of
the mbarriers after it (Note [Mbarriers as planned]; the kernel's check of its shared
memory names a total past the target's).

Note [Mbarriers as planned]: the mbarriers are the attn.mbarrier_init ops, in their
order, 8 bytes a stage, from the end of the buffers on (rounded up to 8 bytes), each
initialized with its op's `count`; a run of ring barriers of one stage count is
initialized stage by stage (stage 0 of each, then stage 1, ...). Every target's kernel
places them so. A kernel refers to them by tile and side (`k` `full`), and one whose
plan lacks one, repeats one, has one it does not use, or gives one other stages than its
channel is refused at the op. What their counts must be is attn-verify-pipeline's to
check: the arrivals it models are the kernel's (a thread's arrival on its copies, a
warp's `per = "warp"`).
After the KV loop a staged O is written from the first byte of the buffers on (every
tile is dead then); a kernel stages O only where it fits below their end.
"""
from __future__ import annotations

from dataclasses import dataclass

from attnc.schedule.alloc import MBARRIER_BYTES, Buffer, smem_align


@dataclass(frozen=True)
class Mbarrier:
    """One attn.mbarrier_init as placed (Note [Mbarriers as planned]): stage k's barrier
    at offset + 8 k."""
    name: str
    tile: str
    side: str               # "full" or "empty"
    count: int
    stages: int
    offset: int = 0

    @property
    def key(self) -> str:
        return f"{self.tile}_{self.side}"

    @staticmethod
    def of(attrs: dict) -> "Mbarrier":
        """From an attn.mbarrier_init's attributes (roles.attrs_of), not yet placed."""
        return Mbarrier(attrs["name"], attrs.get("tile", ""), attrs.get("side", ""), attrs["count"], attrs["stages"])


@dataclass(frozen=True)
class SmemLayout:
    """Byte offsets in dynamic shared memory: the Q tile, the K and V tiles of stage 0,
    the stride of the K/V stages, where a staged O starts, the end of the tiles, and the
    mbarriers after them."""
    q: int
    k: int
    v: int
    slot: int
    o: int
    end: int
    barriers: tuple[Mbarrier, ...] = ()

    @property
    def bytes(self) -> int:
        """The dynamic shared memory the kernel asks for."""
        return barriers_end(self.end, self.barriers)

    def barrier(self, key: str) -> Mbarrier:
        return next(b for b in self.barriers if b.key == key)

    @staticmethod
    def interleaved(q_bytes: int, k_bytes: int, v_bytes: int, stages: int,
                    barriers: list[Mbarrier] = ()) -> "SmemLayout":
        """Q, then `stages` slots of K and V side by side: attn-alloc-smem's default."""
        slot = k_bytes + v_bytes
        end = q_bytes + stages * slot
        return SmemLayout(0, q_bytes, q_bytes + k_bytes, slot, 0, end, place_mbarriers(end, barriers))


def place_mbarriers(end: int, barriers: list[Mbarrier]) -> tuple[Mbarrier, ...]:
    """`barriers` in their order from byte `end` on (Note [Mbarriers as planned])."""
    from dataclasses import replace

    offset, placed = -(-end // MBARRIER_BYTES) * MBARRIER_BYTES, []
    for b in barriers:
        placed.append(replace(b, offset=offset))
        offset += MBARRIER_BYTES * b.stages
    return tuple(placed)


def barriers_end(end: int, placed: tuple[Mbarrier, ...]) -> int:
    """The end of `placed` (place_mbarriers' from `end`), or `end` without barriers."""
    return placed[-1].offset + MBARRIER_BYTES * placed[-1].stages if placed else end


def init_order(barriers: tuple[Mbarrier, ...]) -> list[tuple[Mbarrier, int]]:
    """(barrier, stage) in the order the kernel initializes them (Note [Mbarriers as
    planned]): each run of barriers with one stage count above 1 stage by stage."""
    order, k = [], 0
    while k < len(barriers):
        run = [barriers[k]]
        while barriers[k].stages > 1 and k + len(run) < len(barriers) \
                and barriers[k + len(run)].stages == barriers[k].stages:
            run.append(barriers[k + len(run)])
        order += [(b, stage) for stage in range(run[0].stages) for b in run]
        k += len(run)
    return order


class LayoutError(Exception):
    """A placement the kernels cannot take: `buffer` names the buffer it concerns."""

    def __init__(self, buffer: str, message: str):
        super().__init__(message)
        self.buffer = buffer
        self.message = message


def layout_of(placed: list[Buffer], wanted: list[Buffer], target: str, stages: int,
              barriers: list[Mbarrier] = (), needed: tuple[str, ...] = (),
              channel_stages: dict[str, int] | None = None) -> SmemLayout:
    """The layout of `placed` (the kernel's shared-memory buffers), checked as Note
    [Buffers as placed] says against `wanted` (the plan passes' buffers for the same
    channels and tile, wherever they lie), with `barriers` after them, which must be
    the `needed` ones (Mbarrier.key), each with the stages of its tile's channel (stages
    by tile); raises LayoutError (MbarrierError)."""
    _check_barriers(list(barriers), needed, channel_stages or {}, target)
    smem = [b for b in placed if b.space == "smem"]
    by_name = {b.name: b for b in smem}
    _check_contents(by_name, [w for w in wanted if w.space == "smem"], target)
    align = smem_align(target)
    for b in smem:
        for what, value in (("offset", b.offset), ("stride", b.stage_stride if b.stages > 1 else 0)):
            if value % align or value < 0:
                raise LayoutError(b.name, f"buffer {b.name} has {what} {value}; the {target} kernel places "
                                          f"tiles and their stages at multiples of {align} bytes")
        if b.stages > 1 and b.stage_stride < b.stage_bytes:
            raise LayoutError(b.name, f"buffer {b.name} has stride {b.stage_stride}, less than a stage's "
                                      f"{b.stage_bytes} bytes: its stages overlap")
    k, v = by_name["sK"], by_name["sV"]
    if stages > 1 and k.stage_stride != v.stage_stride:
        raise LayoutError("sV", f"the {target} kernel steps K and V by one slot offset (stage x stride), and "
                                f"sK's stride is {k.stage_stride}, sV's {v.stage_stride}: give both one stride "
                                f"(attn-alloc-smem{{kv_layout=interleaved}} does)")
    _check_disjoint(smem)
    start = min(b.offset for b in smem)
    end = max(b.end for b in smem)
    return SmemLayout(by_name["sQ"].offset, k.offset, v.offset, k.stage_stride, start, end,
                      place_mbarriers(end, list(barriers)))


class MbarrierError(LayoutError):
    """`buffer` names the attn.mbarrier_init (or, for one missing, the tile's)."""


def _check_barriers(barriers: list[Mbarrier], needed: tuple[str, ...], stages: dict[str, int], target: str) -> None:
    seen = set()
    for b in barriers:
        if b.key not in needed:
            uses = f"uses {', '.join(needed)}" if needed else "has none"
            raise MbarrierError(b.name, f"mbarrier {b.name} ({b.tile}, {b.side}) is none the {target} kernel "
                                        f"waits on or arrives at: it {uses} (Note [Mbarriers as planned])")
        if b.key in seen:
            raise MbarrierError(b.name, f"mbarrier {b.name} is the second for {b.tile}'s {b.side} side; the "
                                        f"{target} kernel has one (Note [Mbarriers as planned])")
        seen.add(b.key)
        if b.tile in stages and b.stages != stages[b.tile]:
            raise MbarrierError(b.name, f"mbarrier {b.name} has {b.stages} stages and the channel of tile "
                                        f"'{b.tile}' {stages[b.tile]}: one barrier a slot")
    missing = [key for key in needed if key not in seen]
    if missing:
        raise MbarrierError(missing[0].split("_")[0], f"the {target} kernel waits on or arrives at mbarrier "
                                                      f"'{missing[0]}', which the plan has no attn.mbarrier_init "
                                                      f"for: run attn-insert-pipelines")


def _check_contents(by_name: dict[str, Buffer], wanted: list[Buffer], target: str) -> None:
    """Each buffer of `wanted` there, with its stages, bytes, swizzle and alias; no other."""
    for w in wanted:
        b = by_name.get(w.name)
        if b is None:
            raise LayoutError(w.name, f"the {target} kernel needs buffer {w.name} (channel '{w.channel}'), and "
                                      f"the plan has none: run attn-alloc-smem")
        if b.stages != w.stages:
            raise LayoutError(w.name, f"buffer {w.name} has {b.stages} stages and its channel '{w.channel}' "
                                      f"{w.stages}: run attn-alloc-smem again after editing the channel")
        if b.size != w.size:
            raise LayoutError(w.name, f"buffer {w.name} holds {b.size} bytes; its tile takes {w.stage_bytes} "
                                      f"a stage, {w.size} for its {w.stages}")
        if b.swizzle != w.swizzle or b.alias_of != w.alias_of:
            what = "swizzle" if b.swizzle != w.swizzle else "alias_of"
            raise LayoutError(w.name, f"buffer {w.name} has {what} {getattr(b, what)}; the {target} kernel's "
                                      f"is {getattr(w, what)}")
    extra = sorted(set(by_name) - {w.name for w in wanted})
    if extra:
        raise LayoutError(extra[0], f"buffer {extra[0]} is none of the {target} kernel's "
                                    f"({', '.join(w.name for w in wanted)})")


def _check_disjoint(smem: list[Buffer]) -> None:
    """No byte in two buffers' stages, but an alias's within the buffer it aliases."""
    spans = []
    by_name = {b.name: b for b in smem}
    for b in smem:
        if b.alias_of is not None:
            home = by_name.get(b.alias_of)
            if home is None or not (home.offset <= b.offset and b.offset + b.size <= home.offset + home.size):
                raise LayoutError(b.name, f"buffer {b.name} aliases {b.alias_of} and must lie within its bytes")
            continue
        spans += [(b.stage_offset(k), b.stage_offset(k) + b.stage_bytes, b.name, k) for k in range(b.stages)]
    spans.sort()
    for (lo, hi, name, k), (lo2, _, name2, k2) in zip(spans, spans[1:]):
        if lo2 < hi:
            raise LayoutError(name2, f"stage {k2} of buffer {name2} (from byte {lo2}) overlaps stage {k} of "
                                     f"{name} (bytes {lo} to {hi})")
