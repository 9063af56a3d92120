"""`exp2-fma-unmasked{k=4}`: in the KV loops without a mask, k of every 8 exponentials
of the softmax on the FMA pipe; the loops with one keep the SFU.

A pass on the L5 IR after attn-kernel-choices. `exp2_fma` is a choice each
`attn.softmax_step` holds its own of (Note [Choices op by op] in
attnc/passes/kernel_choices.py), so the lowering builds every KV loop's softmax as its
own op says. This pass sets it to k in the loops whose blocks the mask keeps whole (no
`attn.mask` op: the steady state of a long key range, where the exponentials are the
bulk of the SFU's work) and leaves the other loops, the first step and the last P.V as
attn-kernel-choices chose them. Where the kernel would merge the key range's loops (Note
[Key loops] in attnc/backend/sm80.py: a window's), it asks for the loops apart:

    attnc compile examples/gemma2.attn -arch sm_80 --emit ptx \\
        --load-pass examples/passes/exp2_fma_unmasked.py \\
        --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-verify-pipeline,attn-kernel-choices,exp2-fma-unmasked{k=4},attn-lower-sm80"

On sm_100a it runs after attn-kernel-choices too (a run of that pass chooses every
choice afresh, this one's edit included), and attn-lower-sm100a reads what it set (LLVM
packs those exponentials' FMAs into f32x2 pairs there).

One softmax step of a loop of full blocks, before and after:

    %p:4 = "attn.softmax_step"(%s, %m, %l) {exp2_fma = 0 : i64}
    %p:4 = "attn.softmax_step"(%s, %m, %l) {exp2_fma = 4 : i64}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mlir import ir

from attnc.ir import attention_ops, error_at
from attnc.ir.roles import ops_in, role_block, role_ops
from attnc.passes import Pass, register


@register
@dataclass(frozen=True)
class Exp2FmaUnmasked(Pass):
    """Set exp2_fma = k on the softmax steps of the KV loops that have no mask op."""

    name: ClassVar[str] = "exp2-fma-unmasked"
    k: int = 4

    def run(self, module):
        for kernel in attention_ops(module):
            if not 0 <= self.k <= 8:
                raise error_at(kernel, f"exp2-fma-unmasked: k = {self.k}, expected 0 to 8 of every 8 scores")
            loops = [op for role in role_ops(kernel) for op in ops_in(role_block(role), ("scf.for",))
                     if "kv_blocks" in op.attributes]
            if not loops:
                raise error_at(kernel, "exp2-fma-unmasked: no KV loop in the roles (run it on the L5 IR, "
                                       "after attn-kernel-choices)")
            with kernel.context:
                k = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), self.k)
                if "kv_loops" in kernel.attributes:         # the loops' steps built apart
                    kernel.attributes["kv_loops"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 3)
            for loop in loops:
                body = [op.operation for op in loop.regions[0].blocks[0].operations]
                if any(op.name == "attn.mask" for op in body):
                    continue
                for op in body:
                    if op.name == "attn.softmax_step":
                        op.attributes["exp2_fma"] = k
