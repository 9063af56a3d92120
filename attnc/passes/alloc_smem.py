"""`attn-alloc-smem`: give every shared-memory channel its buffers (L4).

Targets: sm_80, sm_90a, sm_100a. Expects L3 (`attn.role`/`attn.channel` ops from
attn-warp-specialize, tile attributes from attn-tile). Writes one `attn.buffer`
per tile a channel carries: offset, size of all stages, 128-byte alignment, the
XOR swizzle of its rows, and `alias_of` where a buffer reuses another's bytes
(sm_80/sm_90a stage O in Q's buffer after the KV loop):

    "attn.buffer"() {name = "sK", channel = "kv", space = "smem", offset = 32768,
                     size = 32768, stages = 2, align = 128, swizzle = "xor128B"}

The total must fit the target's dynamic shared memory, else an error at the
variant's line names the knob to lower (stages or block_n).
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
    """Shared by attn-alloc-smem and attn-alloc-tmem: one buffer op per allocation."""
    from attnc.errors import AttncError
    from attnc.ir import attention_ops, error_at
    from attnc.passes import plan_ir
    from attnc.schedule.alloc import Buffer, alloc_smem, alloc_tmem

    pass_name = f"attn-alloc-{space}"
    for op in attention_ops(module):
        if any(b.space == space for b in plan_ir.read(op, Buffer)):
            raise error_at(op, f"{pass_name} ran twice on this op")
        recipe = plan_ir.recipe_of(op, pass_name)
        tile = plan_ir.tile_of(op, pass_name)
        try:
            buffers = (alloc_smem if space == "smem" else alloc_tmem)(recipe, tile)
        except AttncError as e:
            raise error_at(op, e.message) from None
        plan_ir.write(op, buffers)
