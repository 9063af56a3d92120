"""`loads-after-gemms`: in sm_90a's cooperative role, issue each step's copies of later
K and V blocks after its two GEMMs, not before them.

A scheduling pass on the L5 IR (after attn-overlap-gemms, before attn-verify-pipeline):
in every trip of the cooperative role's KV loops (Note [Overlapped cooperative steps in
the IR] in attnc/schedule/overlap_coop.py) it moves the loads of V and K -- each load,
its slot write, its group's commit and its ring's advance -- below the P.V, so that the
tensor cores start on QK^T(n) and P.V(n - 1) before the threads issue their cp.async
copies. The copies go into the slots of the GEMMs landed before, which the verifier
checks, and the lowering builds each trip's ops in the order they stand (Note
[Cooperative steps op by op] in attnc/backend/coop_steps.py):

    attnc compile examples/mha.attn -arch sm_90a --emit ptx \\
        --load-pass examples/passes/loads_after_gemms.py \\
        --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-hoist,attn-warp-specialize{producer=false},attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,loads-after-gemms,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a"

One trip, before and after:

    wait (2S - 4 groups); CTA barrier             wait (2S - 4 groups); CTA barrier
    load V, K (a group each)                      S = QK^T (async); O += P V (async)
    S = QK^T (async); O += P V (async)            load V, K (a group each)
    land S (pending = 1); scores; softmax         land S (pending = 1); scores; softmax
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.ir import attention_ops, error_at
from attnc.ir.roles import name_of, role_block, role_ops
from attnc.passes import Pass, register

_LOADS = ("attn.load", "attn.slot_write", "attn.cp_async_commit", "attn.ring_advance")


@register
@dataclass(frozen=True)
class LoadsAfterGemms(Pass):
    """Issue the cooperative trips' loads of later blocks after their GEMMs."""

    name: ClassVar[str] = "loads-after-gemms"

    def run(self, module) -> None:
        for kernel in attention_ops(module):
            roles = [r for r in role_ops(kernel) if name_of(r) == "compute"]
            if not roles:
                raise error_at(kernel, "loads-after-gemms: the plan has no cooperative role")
            for loop in _kv_loops(role_block(roles[0])):
                ops = [op.operation for op in loop.regions[0].blocks[0].operations]
                pv = next(op for op in ops if op.name == "attn.mma" and "pv" in str(op.attributes["kind"]))
                first = next(k for k, op in enumerate(ops) if op.name == "attn.load")
                last = max(k for k, op in enumerate(ops[:ops.index(pv)]) if op.name == "attn.cp_async_commit")
                after = pv
                for op in ops[first:last + 2]:      # through the K ring's advance
                    if op.name in _LOADS:
                        op.move_after(after)
                        after = op


def _kv_loops(block):
    for op in block.operations:
        op = op.operation
        if op.name == "scf.for" and "kv_blocks" in op.attributes:
            yield op
        for region in op.regions:
            for inner in region.blocks:
                yield from _kv_loops(inner)
