"""`attn-alloc-smem`: place every shared-memory channel's buffers (L4).

Targets: sm_80, sm_90a, sm_100a. Expects L3 (the role regions and `attn.channel` ops of
attn-warp-specialize; tile attributes from attn-tile). Leaves the IR as it is but for a
`buffers` attribute on each shared-memory channel: one dictionary per tile it carries
(attnc/schedule/alloc.py): offset, size of all stages, 128-byte alignment, the XOR
swizzle of its rows, and `alias_of` where a buffer reuses another's bytes (sm_80/sm_90a
stage O in Q's buffer after the KV loop):

    before:  %kv = "attn.channel"() {name = "kv", space = "smem", stages = 2, tile = ["k", "v"], ...}
    after:   %kv = "attn.channel"() {buffers = [{align = 128, name = "sK", offset = 32768,
                     size = 32768, space = "smem", stages = 2, swizzle = "xor128B"}, {... "sV" ...}], ...}

The total must fit the target's dynamic shared memory, else an error at the variant's
line names the knob to lower (stages or block_n).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.passes.registry import Pass


@dataclass(frozen=True)
class AllocSmem(Pass):
    """Place Q, K, V (and O) tiles in shared memory with swizzle, alignment and a budget check."""

    name: ClassVar[str] = "attn-alloc-smem"

    def run(self, module) -> None:
        allocate(module, "smem")


def allocate(module, space: str) -> None:
    """Shared by attn-alloc-smem and attn-alloc-tmem: the buffers of `space` on the channels."""
    from attnc.errors import AttncError
    from attnc.ir import attention_ops, error_at
    from attnc.ir.roles import channel_ops
    from attnc.passes import plan_ir
    from attnc.schedule.alloc import alloc_smem, alloc_tmem

    pass_name = f"attn-alloc-{space}"
    for op in attention_ops(module):
        plan_ir.require_roles(op, pass_name)
        if any(b.space == space for b in plan_ir.buffers(op)):
            raise error_at(op, f"{pass_name} ran twice on this op")
        recipe = plan_ir.recipe_of(op, pass_name)
        tile = plan_ir.tile_of(op, pass_name)
        try:
            placed = (alloc_smem if space == "smem" else alloc_tmem)(recipe, tile)
        except AttncError as e:
            raise error_at(op, e.message) from None
        with op.context:
            for chan in channel_ops(op):
                ch = plan_ir.channel(chan)
                accumulator = ch.space == "tmem" and "o" in ch.tile
                mine = [b for b in placed if b.channel == ch.name or (accumulator and b.name.startswith("tO"))]
                if mine:
                    plan_ir.set_buffers(chan, mine)
