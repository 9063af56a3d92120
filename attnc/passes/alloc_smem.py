"""`attn-alloc-smem`: place every shared-memory channel's buffers (L4).

Targets: sm_80, sm_90a, sm_100a. Expects L3 (the role regions and `attn.channel` ops of
attn-warp-specialize; tile attributes from attn-tile). Leaves the IR as it is but for a
`buffers` attribute on each shared-memory channel: one dictionary per tile it carries
(attnc/schedule/alloc.py): offset, size of all stages, alignment (128 bytes; 1024 on
sm_90a), the XOR swizzle of its rows, `stride` where its stages are not contiguous (K
and V of a stage side by side: Note [K/V slots] in attnc/schedule/alloc.py), and
`alias_of` where a buffer reuses another's bytes (sm_80/sm_90a stage O in Q's buffer
after the KV loop):

    before:  %kv = "attn.channel"() {name = "kv", space = "smem", stages = 2, tile = ["k", "v"], ...}
    after:   %kv = "attn.channel"() {buffers = [{align = 128, name = "sK", offset = 32768,
                     size = 32768, space = "smem", stages = 2, stride = 32768, swizzle = "xor128B"},
                     {... "sV", offset = 49152, ...}], ...}

The total must fit the target's dynamic shared memory, else an error at the variant's
line names the knob to lower (stages or block_n). The lowerings place every tile where
its buffer says: an offset edited by hand or by a user pass moves it (Note [Buffers as
placed] in attnc/backend/smem_layout.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnc.passes.registry import Pass


@dataclass(frozen=True)
class AllocSmem(Pass):
    """Place Q, K, V (and O) tiles in shared memory with swizzle, alignment and a budget check."""

    name: ClassVar[str] = "attn-alloc-smem"
    kv_layout: str = field(default="interleaved", metadata={
        "doc": "sm_80, sm_90a: the K/V ring's stages as slots of K and V side by side (interleaved: one slot "
               "offset serves both tiles) or as a ring per tile, all K stages then all V stages (separate) "
               "(Note [K/V slots] in attnc/schedule/alloc.py; default: interleaved, 0-2 % faster: "
               "results/sm90a_h200.md and sm80_h200.md, \"K/V slots\"; sm_100a's K and V take one ring's slots in "
               "turn, and `separate` is refused there)"})

    def run(self, module) -> None:
        from attnc.errors import AttncError
        from attnc.schedule.alloc import KV_LAYOUTS

        if self.kv_layout not in KV_LAYOUTS:
            raise AttncError(f"kv_layout={self.kv_layout}: expected {' or '.join(KV_LAYOUTS)} (Note [K/V slots] "
                             f"in attnc/schedule/alloc.py)")
        allocate(module, "smem", self.kv_layout)


def allocate(module, space: str, kv_layout: str = "interleaved") -> None:
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
            placed = alloc_smem(recipe, tile, kv_layout) if space == "smem" else alloc_tmem(recipe, tile)
        except AttncError as e:
            raise error_at(op, e.message) from None
        with op.context:
            for chan in channel_ops(op):
                ch = plan_ir.channel(chan)
                accumulator = ch.space == "tmem" and "o" in ch.tile
                mine = [b for b in placed if b.channel == ch.name or (accumulator and b.name.startswith("tO"))]
                if mine:
                    plan_ir.set_buffers(chan, mine)
