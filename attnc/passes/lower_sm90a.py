"""`attn-lower-sm90a`: the L5 plan -> the sm_90a kernel in upstream dialects (L6).

Targets: sm_90a. Expects and leaves what attn-lower-sm80 does (lower_sm80.py), with
the kernel of attnc/backend/sm90.py: the sm_80 kernel's cp.async loads, masks, online
softmax and epilogue around wgmma GEMMs (Q and K, V from the swizzled shared-memory
tiles through descriptors, P from registers), in warpgroups of 64 query rows.

Two kernels: with 64-row Q tiles (one warpgroup, several CTAs per SM) block_m/16 warps
all load and compute (sm90.py); with two warpgroups of 64 rows at head dim 128, a
producer warpgroup loads into an mbarrier ring that the consumer warpgroups read, and
setmaxnreg moves registers from it to them (sm90_ws.py, Note [Producer warpgroup]), the
plan attn-warp-specialize and attn-insert-pipelines make by default (another plan is
refused: Note [The lowerings build the default plan] in lower_sm80.py); for a band (a sliding
window) its CTAs are persistent, one per SM looping over the query blocks (Note
[Persistent CTAs], option `persistent`). Not yet: TMA (the
producer's copies are cp.async) and, by default, the consumers' ping-pong (the option
`pingpong` builds it; at head dim 128 it measured slower than without).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnc.passes.lower_sm80 import LowerKernel


@dataclass(frozen=True)
class LowerSm90a(LowerKernel):
    """Generate the sm_90a kernel (gpu.module) from the plan of attn.kernel."""

    name: ClassVar[str] = "attn-lower-sm90a"
    target: ClassVar[str] = "sm_90a"
    producer_warpgroup: bool | None = field(default=None, metadata={
        "doc": "a warpgroup that only loads (cp.async into an mbarrier ring) besides the computing ones, "
               "which set their registers with setmaxnreg (Note [Producer warpgroup]; default: on for two "
               "consumer warpgroups at head dim 128, Sm80KernelSpec.warp_specialized)"})
    pingpong: bool | None = field(default=None, metadata={
        "doc": "with producer_warpgroup and block_m=128: the two consumer warpgroups take turns at "
               "the GEMMs (default: off)"})
    persistent: bool | None = field(default=None, metadata={
        "doc": "with producer_warpgroup: one CTA per SM loops over the query blocks, loading the next "
               "block's tiles during the last one's epilogue (Note [Persistent CTAs] in sm90_ws.py; "
               "default: on for a band, a sliding window)"})
