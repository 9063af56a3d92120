"""`attn-alloc-tmem`: tensor-memory columns for S, P and O (L4, sm_100a).

Targets: sm_100a (on targets without tensor memory it adds nothing). Expects L3.
Adds to the `buffers` of the tensor-memory channels one dictionary with space "tmem"
per accumulator (attnc/schedule/alloc.py): S and O per Q tile (fp32, one column per
element of a row) and P aliased inside S (two 16-bit values per column), checked
against the 512 columns of one SM; O's columns go on every TMEM channel carrying O:

    %s0 = "attn.channel"() {buffers = [{name = "tS0", offset = 0, size = 128, space = "tmem", ...}], ...}
    %p0 = "attn.channel"() {buffers = [{alias_of = "tS0", name = "tP0", offset = 64, size = 64, ...}], ...}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.passes.alloc_smem import allocate
from attnc.passes.registry import Pass


@dataclass(frozen=True)
class AllocTmem(Pass):
    """Place S, P and O accumulators in tensor memory columns (sm_100a)."""

    name: ClassVar[str] = "attn-alloc-tmem"

    def run(self, module) -> None:
        allocate(module, "tmem")
