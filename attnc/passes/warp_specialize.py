"""`attn-warp-specialize`: split the CTA's tile program into role regions joined by
channels (L3).

Targets: sm_80, sm_90a, sm_100a. Expects L2 (an attn.kernel with its program, after
attn-tile and attn-analyze-masks: `target`, `num_warps`, `stages`, `q_tiles`). Leaves
the kernel's region as one `attn.warp_specialize` holding the channel declarations and
one `attn.role` region per role of the target's recipe (attnc/schedule/recipes.py), with
its warps and register budget; a tile made in one role and used in another goes through
`attn.put` / `attn.get` on a channel (attnc/schedule/partition.py, Note [Where values
cross]). sm_80: one cooperative role `compute` whose Q and K/V go through cp.async
channels; sm_90a: a `producer` role (the loads, O's store) and `consumers` consumer
warpgroups (the GEMMs, hooks, softmax, epilogue) on TMA channels; sm_100a: the FA4
roles (load, mma, softmax0/1, correction, epilogue, empty) with S and P through TMEM.
The K/V channel's `stages` is attn-tile's `stages`. Register budgets are checked here.

    before:  "attn.kernel"(...) ({ %q = attn.load ...; scf.for { %k = attn.load ...; attn.mma ... } })
    after:   "attn.kernel"(...) ({ "attn.warp_specialize"() ({
               %kv = "attn.channel"() {name = "kv", producer = "producer", consumer = "consumer0",
                                       stages = 2, tile = ["k", "v"], transport = "tma", ...}
               "attn.role"() ({ scf.for { %k = attn.load ...; "attn.put"(%kv, %k) {tile = "k"} ... } })
                             {name = "producer", regs = 24, warps = [0, 1, 2, 3]}
               "attn.role"() ({ scf.for { %k = "attn.get"(%kv) {tile = "k"}; attn.mma ... } })
                             {name = "consumer0", regs = 240, warps = [4, 5, 6, 7]} ... }) })
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnc.passes.registry import Pass


@dataclass(frozen=True)
class WarpSpecialize(Pass):
    """Split the tile program into role regions with put/get on channels (attn.role, attn.channel)."""

    name: ClassVar[str] = "attn-warp-specialize"
    consumers: int | None = field(default=None, metadata={
        "doc": "consumer warpgroups on sm_90a, 1 or 2 (default 2; no other target has them)"})

    def run(self, module) -> None:
        warp_specialize(module, self.consumers)


def warp_specialize(module, consumers: int | None) -> None:
    from attnc.errors import AttncError
    from attnc.ir import attention_ops, error_at, get_int
    from attnc.ir.roles import warp_specialize_of
    from attnc.passes import plan_ir
    from attnc.schedule.partition import Partition
    from attnc.schedule.recipes import check_register_budget, recipe

    for op in attention_ops(module):
        if warp_specialize_of(op) is not None:
            raise error_at(op, "attn-warp-specialize ran twice on this op")
        target = plan_ir.required_attr(op, "target", WarpSpecialize.name)
        tile = plan_ir.tile_of(op, WarpSpecialize.name)
        if op.name != "attn.kernel":
            raise error_at(op, "attn-warp-specialize needs the tile program of attn.kernel; run attn-tile first")
        if consumers is not None and target != "sm_90a":
            raise error_at(op, f"consumers={consumers}: only sm_90a has consumer warpgroups to count; "
                               f"{target}'s roles are fixed by its recipe")
        try:
            r = recipe(target, num_warps=get_int(op, "num_warps"), kv_stages=get_int(op, "stages"),
                       q_tiles=tile.q_tiles, consumers=2 if consumers is None else consumers)
            check_register_budget(r)
            with op.context:
                Partition(r, op).run()
        except AttncError as e:
            raise error_at(op, e.message) from None
