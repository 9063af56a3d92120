"""`attn-lower-sm100a`: the L5 plan -> the sm_100a kernel in upstream dialects (L6).

Targets: sm_100a. Expects L5 (roles, channels with their shared- and tensor-memory buffers,
mbarriers, the rings' (stage, phase) carried by the loops) on one attn.kernel, which
attn-verify-pipeline found sound (the pass runs it where it has not), with the four choices
attn-kernel-choices records for it (Note [Choices on sm_100a]; their defaults where an op
holds none, any other choice refused at its op). Leaves a `gpu.module`
holding the FlashAttention-4-style kernel, every op of every role lowered in the order it
stands (Note [The sm_100a kernel, op by op] in attnc/backend/sm100a.py): TMA loads into the
Q and K/V rings, tcgen05.mma S = Q K^T and O += P V with S, P and O in tensor memory and
commits to the mbarriers, the softmax warpgroups' rows through tcgen05.ld / st, the
correction warpgroup's rescale and final O through shared memory, the epilogue warp's TMA
stores; before it, for a mask that reads params, the block map's kernel (Note [Block map
on sm_100a]), and for document ids the tile table's before that (Note [Tile table on
sm_100a], with no map where the table's runs give the ranges). The launch ABI (tensor maps
of q, k, v and o: Note [Tensor maps] in attnc_runtime/params.py) is a JSON attribute on the
gpu.module, as attn-lower-sm80 leaves it.

    before:  "attn.kernel"(...) ({ "attn.warp_specialize"() ({ channels, mbarriers,
                 "attn.role"() ({...}) {name = "load"}, {name = "mma"}, {name = "softmax0"}, ... }) })
    after:   gpu.module @attnc_kernels attributes {attn.kernels = "[...]"} {
               gpu.func @attnc_mha_fwd(%tmap_q: !llvm.ptr, ...) kernel { ... } }

The last pass of the sm_100a pipeline, as attn-lower-sm80 and attn-lower-sm90a are of
theirs. It lowers every op the sm_100a plan passes make; an op without a pattern is refused
at the op, naming what it lacks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.passes.lower_kernel import LowerKernel


@dataclass(frozen=True)
class LowerSm100a(LowerKernel):
    """Generate the sm_100a kernel (gpu.module) from the plan of attn.kernel, op by op."""

    name: ClassVar[str] = "attn-lower-sm100a"
    target: ClassVar[str] = "sm_100a"
