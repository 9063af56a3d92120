"""`wait-v-early`: in sm_80's KV steps, wait for V and refill K's slot before the softmax.

A scheduling pass on the L5 IR (after attn-insert-pipelines, before attn-verify-pipeline):
inside every KV loop of the `compute` role it moves the step's second cp.async wait, with
the barrier, V's slot read and the load of K into the freed slot that follow it, above
the softmax. That is FlashAttention-2's one-stage order (Note [Where V is waited for] in
attnc/backend/sm80.py): K of a later step is issued sooner, V is waited for sooner.
The sm_80 lowering builds a step's ops in the order they stand (Note [Steps op by op]
in attnc/backend/kv_steps.py), and attn-verify-pipeline checks the moved waits:

    attnc compile examples/gemma2.attn -arch sm_80 --emit ptx \\
        --load-pass examples/passes/wait_v_early.py \\
        --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,wait-v-early,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm80"

One trip of a KV loop, before and after (two stages):

    wait; barrier; get K, Q; put V(t+1)          wait; barrier; get K, Q; put V(t+1)
    QK^T; score_mod; mask; softmax               QK^T; score_mod; mask
    wait; barrier; get V; put K(t+2)             wait; barrier; get V; put K(t+2)
    rescale; P.V                                 softmax; rescale; P.V
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.ir import attention_ops, error_at
from attnc.ir.roles import CP_ASYNC_WAIT, RING_ADVANCE, SLOT_WRITE, name_of, ops_in, role_block, role_ops
from attnc.passes import Pass, register
from attnc.passes.tile_program import KV_LOOP


@register
@dataclass(frozen=True)
class WaitVEarly(Pass):
    """Move each KV step's V wait and K refill above its softmax (sm_80, L5)."""

    name: ClassVar[str] = "wait-v-early"

    def run(self, module):
        for kernel in attention_ops(module):
            compute = [r for r in role_ops(kernel) if name_of(r) == "compute"]
            if not compute:
                raise error_at(kernel, "wait-v-early: the plan has no cooperative role 'compute' (sm_80, after "
                                       "attn-insert-pipelines)")
            loops = [op for op in ops_in(role_block(compute[0]), ("scf.for",)) if KV_LOOP in op.attributes]
            for loop in loops:
                body = [op.operation for op in loop.regions[0].blocks[0].operations]
                waits = [k for k, op in enumerate(body) if op.name == CP_ASYNC_WAIT]
                softmax = [op for op in body if op.name == "attn.softmax_step"]
                if len(waits) != 2 or len(softmax) != 1:
                    raise error_at(loop, "wait-v-early: expected a KV loop with two cp.async waits and a softmax "
                                         "step (sm_80, after attn-insert-pipelines)")
                softmax = softmax[0]
                if waits[1] < body.index(softmax):
                    continue            # one stage: V is waited for before the softmax already
                # The V wait, through the ring advance after K's put into the freed slot.
                write = next(k for k in range(waits[1], len(body)) if body[k].name == SLOT_WRITE)
                end = next(k for k in range(write, len(body)) if body[k].name == RING_ADVANCE)
                for op in body[waits[1]:end + 1]:
                    op.move_before(softmax)
