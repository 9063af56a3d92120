"""`attn-warp-specialize`: split the CTA program into warp roles joined by channels (L3).

Targets: sm_80, sm_90a, sm_100a. Expects L2 (`target`, `num_warps`, `stages`,
`q_tiles` on attn.kernel, from attn-tile). Leaves the op unchanged and writes,
after it, one `attn.role` per role and one `attn.channel` per value crossing
roles, as the target's recipe (attnc/schedule/recipes.py) lays them out:

    before:  %o = "attn.kernel"(...) ({...}) {target = "sm_80", num_warps = 4, stages = 2, ...}
    after:   %o = "attn.kernel"(...) ({...}) {...}
             "attn.role"() {name = "compute", warps = [0, 1, 2, 3], regs = 0, ops = [...]}
             "attn.channel"() {name = "kv", producer = "compute", consumer = "compute",
                               transport = "cp.async", space = "smem", stages = 2, tile = ["k", "v"]}

On sm_80 there is one cooperative role and the K/V channel is a cp.async queue;
sm_90a has a producer warpgroup and `consumers` consumer warpgroups on TMA rings;
sm_100a has FlashAttention-4's seven roles. Register budgets are checked here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnc.passes.registry import Pass


@dataclass(frozen=True)
class WarpSpecialize(Pass):
    """Lay out warp roles and the channels between them (attn.role, attn.channel)."""

    name: ClassVar[str] = "attn-warp-specialize"
    consumers: int | None = field(default=None, metadata={
        "doc": "consumer warpgroups on sm_90a, 1 or 2 (default 2; no other target has them)"})

    def run(self, module) -> None:
        warp_specialize(module, self.consumers)


def warp_specialize(module, consumers: int | None) -> None:
    from attnc.errors import AttncError
    from attnc.ir import attention_ops, error_at, get_int
    from attnc.passes import plan_ir
    from attnc.schedule.recipes import Role, check_register_budget, recipe

    for op in attention_ops(module):
        if plan_ir.read(op, Role):
            raise error_at(op, "attn-warp-specialize ran twice on this op")
        target = plan_ir.required_attr(op, "target", WarpSpecialize.name)
        tile = plan_ir.tile_of(op, WarpSpecialize.name)
        if consumers is not None and target != "sm_90a":
            raise error_at(op, f"consumers={consumers}: only sm_90a has consumer warpgroups to count; "
                               f"{target}'s roles are fixed by its recipe")
        try:
            r = recipe(target, num_warps=get_int(op, "num_warps"), kv_stages=get_int(op, "stages"),
                       q_tiles=tile.q_tiles, consumers=2 if consumers is None else consumers)
            check_register_budget(r)
        except AttncError as e:
            raise error_at(op, e.message) from None
        plan_ir.write(op, [*r.roles, *r.channels])
