"""`pv-before-qk`: in sm_90a's overlapped consumer steps, issue P.V(n - 1) before QK^T(n)
and land S with nothing left in flight -- the steps without the intra-warpgroup overlap.

A scheduling pass on the L5 IR (after attn-overlap-gemms, before attn-verify-pipeline):
inside every KV loop of the consumer roles it moves the P.V `attn.mma` above the QK^T one
and sets the `pending` of the wait that lands S to 0. wgmma groups complete in order, so
with P.V issued first S can only be landed with it; the softmax of step n then no longer
runs under P.V(n - 1) (FlashAttention-3's ablation of its overlap). The sm_90a lowering
builds each trip's ops in the order they stand (Note [Overlapped steps op by op] in
attnc/backend/wgmma_steps.py); keeping `pending = 1` would be refused by the verifier,
as landing a GEMM the wait leaves in flight:

    attnc compile examples/mha.attn -arch sm_90a --emit ptx \\
        --load-pass examples/passes/pv_before_qk.py \\
        --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,pv-before-qk,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a"

One trip, before and after:

    S = QK^T(n) (async); O += P V (async)           O += P V (async); S = QK^T(n) (async)
    S = land(S) {pending = 1}                       S = land(S) {pending = 0}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.ir import attention_ops, set_int
from attnc.ir.roles import name_of, ops_in, role_block, role_ops
from attnc.passes import Pass, register
from attnc.passes.tile_program import KV_LOOP


@register
@dataclass(frozen=True)
class PvBeforeQk(Pass):
    """Issue each overlapped trip's P.V before its QK^T; land S with both."""

    name: ClassVar[str] = "pv-before-qk"

    def run(self, module) -> None:
        for kernel in attention_ops(module):
            for role in role_ops(kernel):
                if not name_of(role).startswith("consumer"):
                    continue
                for loop in [op for op in ops_in(role_block(role), ("scf.for",)) if KV_LOOP in op.attributes]:
                    ops = [op.operation for op in loop.regions[0].blocks[0].operations]
                    gemms = {str(op.attributes["kind"]).strip('"'): op for op in ops if op.name == "attn.mma"}
                    gemms["pv"].move_before(gemms["qk"])
                    landing = next(op for op in ops if op.name == "attn.mma_wait"
                                   and op.operands[0] == gemms["qk"].result)
                    set_int(landing, "pending", 0)
