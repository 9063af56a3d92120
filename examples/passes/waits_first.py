"""`waits-first`: in sm_90a's producer role, wait for both empty slots of a step before
writing either.

A scheduling pass on the L5 IR (after attn-overlap-gemms, before attn-verify-pipeline):
in every trip of the producer's KV loops, which load K(n) and then V of the block before
(Note [K one step ahead] in attnc/schedule/load_ahead.py), it moves V's load and its wait
for V's empty slot above K's slot write. The lowering builds each trip's ops in the
order they stand (Note [Loads op by op] in attnc/backend/load_steps.py), so the
producer's threads issue no copy of K(n) until V's slot is free as well:

    attnc compile examples/gemma2.attn -arch sm_90a --emit ptx \\
        --load-pass examples/passes/waits_first.py \\
        --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,waits-first,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a"

One trip, before and after:

    wait K empty; write K; arrive K full          wait K empty; wait V empty
    wait V empty; write V; arrive V full          write K; arrive K full; write V; arrive V full
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.ir import attention_ops
from attnc.ir.roles import attrs_of, name_of, ops_in, role_block, role_ops
from attnc.passes import Pass, register
from attnc.passes.tile_program import KV_LOOP


@register
@dataclass(frozen=True)
class WaitsFirst(Pass):
    """Wait for K's and V's empty slots before writing either, in the producer's trips."""

    name: ClassVar[str] = "waits-first"

    def run(self, module) -> None:
        for kernel in attention_ops(module):
            for role in role_ops(kernel):
                if name_of(role) != "producer":
                    continue
                for loop in [op for op in ops_in(role_block(role), ("scf.for",)) if KV_LOOP in op.attributes]:
                    ops = [op.operation for op in loop.regions[0].blocks[0].operations]
                    k_write = next(op for op in ops if op.name == "attn.slot_write")
                    v_load = next(op for op in ops if op.name == "attn.load" and attrs_of(op)["operand"] == "v")
                    v_wait = next(op for op in ops[ops.index(v_load):] if op.name == "attn.mbarrier_wait")
                    for op in ops[ops.index(v_load):ops.index(v_wait) + 1]:
                        op.move_before(k_write)
