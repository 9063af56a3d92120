"""`last-v-early`: in sm_90a's overlapped consumers, wait for the last step's V before
landing the P.V still in flight.

A scheduling pass on the L5 IR (after attn-overlap-gemms, before attn-verify-pipeline):
after the KV loops of every consumer role, where the last P.V stands (Note [Overlapped
steps in the IR] in attnc/schedule/overlap.py), it moves the wait for V's full slot and
V's read above the attn.mma_wait that lands the P.V of the step before. The lowering
builds those ops in the order they stand (Note [Overlapped steps op by op] in
attnc/backend/wgmma_steps.py), so the warpgroup waits for V's copies while that P.V
still runs:

    attnc compile examples/mha.attn -arch sm_90a --emit ptx \\
        --load-pass examples/passes/last_v_early.py \\
        --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,last-v-early,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a"

The last P.V, before and after:

    O = land(O in flight); O *= factor            wait V; read V
    wait V; read V; O += P V (async); land O      O = land(O in flight); O *= factor; O += P V ...
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.ir import attention_ops
from attnc.ir.roles import name_of, ops_in, role_block, role_ops
from attnc.passes import Pass, register
from attnc.passes.tile_program import KV_LOOP


@register
@dataclass(frozen=True)
class LastVEarly(Pass):
    """Wait for and read the last step's V before landing the P.V in flight."""

    name: ClassVar[str] = "last-v-early"

    def run(self, module) -> None:
        for kernel in attention_ops(module):
            for role in role_ops(kernel):
                loops = [op for op in ops_in(role_block(role), ("scf.for",)) if KV_LOOP in op.attributes]
                if not name_of(role).startswith("consumer") or not loops:
                    continue
                ops = [op.operation for op in loops[-1].operation.parent.regions[0].blocks[0].operations]
                after = ops[next(k for k, op in enumerate(ops) if op == loops[-1].operation) + 1:]
                land = next(op for op in after if op.name == "attn.mma_wait")
                for op in [op for op in after if op.name in ("attn.mbarrier_wait", "attn.slot_read")]:
                    op.move_before(land)
