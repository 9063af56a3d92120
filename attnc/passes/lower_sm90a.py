"""`attn-lower-sm90a`: the L5 plan -> the sm_90a kernel in upstream dialects (L6).

Targets: sm_90a. Expects and leaves what attn-lower-sm80 does (lower_sm80.py), with
the kernel of attnc/backend/sm90.py: the sm_80 kernel's cp.async loads, masks, online
softmax and epilogue around wgmma GEMMs (Q and K, V from the swizzled shared-memory
tiles through descriptors, P from registers), in warpgroups of 64 query rows.

What the plan says and this kernel does not do yet: the TMA producer warpgroup, the
mbarrier ring and the consumers' ping-pong and register budgets (attn-warp-specialize,
attn-insert-pipelines for sm_90a). The kernel runs the plan's tiles and K/V stages with
block_m/16 warps, all of them loading and computing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.passes.lower_sm80 import LowerSm80


@dataclass(frozen=True)
class LowerSm90a(LowerSm80):
    """Generate the sm_90a kernel (gpu.module) from the plan of attn.attention."""

    name: ClassVar[str] = "attn-lower-sm90a"
    target: ClassVar[str] = "sm_90a"
