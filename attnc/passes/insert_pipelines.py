"""`attn-insert-pipelines`: turn channels into synchronization (L5).

Targets: sm_80, sm_90a, sm_100a. Expects L4 (channels with their buffers). Writes
one `attn.barrier` per synchronization object, following the protocol of each
channel's transport (attnc/schedule/sync.py):

    cp.async  ->  "attn.barrier"() {name = "cp_async_kv", kind = "cp.async.group",
                                    stages = 2, arrive_count = 0, tx_bytes = [32768], ...}
    tma       ->  mbar_kv_full  {kind = "mbarrier", arrive_count = 1, tx_bytes = [<fill bytes>]}
                  mbar_kv_empty {kind = "mbarrier", arrive_count = <consumer warps>}
    tcgen05   ->  full (count 1: one tcgen05.commit) / empty (count: consumer warps)

`tx_bytes` holds the bytes of each fill in turn: one value, or for sm_100a's alternating
K, V ring one per tile (Note [Bytes per fill] in attnc/schedule/sync.py). Rings are
walked with an explicit (stage, phase) state; waits on `full` use the
phase, waits on `empty` its complement, so the first pass does not block.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.passes.registry import Pass


@dataclass(frozen=True)
class InsertPipelines(Pass):
    """Turn channels into cp.async groups or mbarrier rings with counts and tx bytes."""

    name: ClassVar[str] = "attn-insert-pipelines"

    def run(self, module) -> None:
        insert(module)


def insert(module) -> None:
    from attnc.ir import attention_ops, error_at
    from attnc.passes import plan_ir
    from attnc.schedule.alloc import Buffer
    from attnc.schedule.recipes import Channel
    from attnc.schedule.sync import Barrier, insert_pipelines

    for op in attention_ops(module):
        if plan_ir.read(op, Barrier):
            raise error_at(op, "attn-insert-pipelines ran twice on this op")
        recipe = plan_ir.recipe_of(op, InsertPipelines.name)
        buffers = {b.channel for b in plan_ir.read(op, Buffer)}
        unplaced = [c.name for c in plan_ir.read(op, Channel)
                    if c.space in ("smem", "tmem") and c.name not in buffers]
        if unplaced:
            raise error_at(op, f"attn-insert-pipelines: channel(s) {', '.join(unplaced)} have no "
                               f"buffer; run attn-alloc-smem (and attn-alloc-tmem) first")
        plan_ir.write(op, insert_pipelines(recipe, plan_ir.tile_of(op, InsertPipelines.name)))
