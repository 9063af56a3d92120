"""`kv-first`: place the K/V ring at the start of shared memory and Q after it.

A placement pass on the L4 IR (after attn-alloc-smem): it lays the shared-memory channels
out again in reverse order, each channel's buffers keeping their places relative to one
another (the K/V slots, an alias within the buffer it aliases), every channel aligned as
its buffers say. The sm_80 and sm_90a lowerings put each tile where its buffer says (Note
[Buffers as placed] in attnc/backend/smem_layout.py), so the kernel's Q and K/V addresses
change:

    attnc compile examples/mha.attn -arch sm_80 --emit ptx \\
        --load-pass examples/passes/kv_first.py \\
        --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-hoist,attn-warp-specialize,attn-alloc-smem,kv-first,attn-alloc-tmem,attn-insert-pipelines,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm80"
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.ir import attention_ops
from attnc.ir.roles import attr, channel_ops, value_of
from attnc.passes import Pass, register


@register
@dataclass(frozen=True)
class KvFirst(Pass):
    """Lay the shared-memory channels out in reverse order: the K/V ring first, Q last."""

    name: ClassVar[str] = "kv-first"

    def run(self, module) -> None:
        for kernel in attention_ops(module):
            placed = [(op, value_of(op.attributes["buffers"])) for op in channel_ops(kernel)
                      if "buffers" in op.attributes]
            placed = [(op, bufs) for op, bufs in placed if bufs and bufs[0]["space"] == "smem"]
            offset = 0
            for op, bufs in reversed(placed):
                start = min(b["offset"] for b in bufs)
                end = max(b["offset"] + b.get("stride", b["size"] // b["stages"]) * (b["stages"] - 1)
                          + b["size"] // b["stages"] for b in bufs)
                align = max(b["align"] for b in bufs)
                offset = (offset + align - 1) // align * align
                with kernel.context:
                    op.attributes["buffers"] = attr([{**b, "offset": b["offset"] - start + offset} for b in bufs])
                offset += end - start
