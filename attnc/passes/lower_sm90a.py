"""`attn-lower-sm90a`: the L5 plan -> the sm_90a kernel in upstream dialects (L6).

Targets: sm_90a. Expects and leaves what attn-lower-sm80 does (lower_sm80.py,
lower_kernel.py), with the kernel of attnc/backend/sm90a.py: forward.py's cp.async
loads, masks, online softmax and epilogue, which the sm_80 kernel has too, around
wgmma GEMMs (Q and K, V from the swizzled shared-memory tiles through descriptors, P
from registers), in warpgroups of 64 query rows.

Two kernels, as the plan's roles say (Note [The plan the lowerings follow] in
lower_kernel.py): a cooperative role of block_m/16 warps that all load and compute
(sm90a.py); or a producer warpgroup that loads into an mbarrier ring that one or two
consumer warpgroups read, with the roles' setmaxnreg budgets (sm90a_ws.py, Note
[Producer warpgroup]) and, where attn.warp_specialize says `pingpong`, the consumers
taking turns at the GEMMs, and where it says `persistent`, CTAs that stay on their SM
looping over the query blocks (Note [Persistent CTAs]; attn-warp-specialize plans them
for a band, a sliding window). The plan's channels say `cp.async.mbarrier`: the
producer's threads copy with cp.async and report each tile on its full mbarrier (Note
[Barriers per tile] in attnc/schedule/sync.py); TMA is not used.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.passes.lower_kernel import LowerKernel


@dataclass(frozen=True)
class LowerSm90a(LowerKernel):
    """Generate the sm_90a kernel (gpu.module) from the plan of attn.kernel."""

    name: ClassVar[str] = "attn-lower-sm90a"
    target: ClassVar[str] = "sm_90a"
