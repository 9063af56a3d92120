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
The dynamic shared memory the kernel asks for runs to the end of the last buffer, and a
producer warpgroup's mbarriers follow it (the kernel's check of its shared memory names
a total past the target's).
After the KV loop a staged O is written from the first byte of the buffers on (every
tile is dead then); a kernel stages O only where it fits below their end.
"""
from __future__ import annotations

from dataclasses import dataclass

from attnc.schedule.alloc import Buffer, smem_align


@dataclass(frozen=True)
class SmemLayout:
    """Byte offsets in dynamic shared memory: the Q tile, the K and V tiles of stage 0,
    the stride of the K/V stages, where a staged O starts, and the end of the tiles."""
    q: int
    k: int
    v: int
    slot: int
    o: int
    end: int

    @staticmethod
    def interleaved(q_bytes: int, k_bytes: int, v_bytes: int, stages: int) -> "SmemLayout":
        """Q, then `stages` slots of K and V side by side: attn-alloc-smem's default."""
        slot = k_bytes + v_bytes
        return SmemLayout(0, q_bytes, q_bytes + k_bytes, slot, 0, q_bytes + stages * slot)


class LayoutError(Exception):
    """A placement the kernels cannot take: `buffer` names the buffer it concerns."""

    def __init__(self, buffer: str, message: str):
        super().__init__(message)
        self.buffer = buffer
        self.message = message


def layout_of(placed: list[Buffer], wanted: list[Buffer], target: str, stages: int) -> SmemLayout:
    """The layout of `placed` (the kernel's shared-memory buffers), checked as Note
    [Buffers as placed] says against `wanted` (the plan passes' buffers for the same
    channels and tile, wherever they lie); raises LayoutError."""
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
    return SmemLayout(by_name["sQ"].offset, k.offset, v.offset, k.stage_stride, start, end)


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
