"""`v-before-k`: in sm_90a's producer role, load each key block's V before its K.

A scheduling pass on the L3 IR (after attn-warp-specialize, before attn-insert-pipelines):
inside every KV loop of the `producer` role it moves V's load and its `attn.put` above
K's. attn-overlap-gemms then keeps that order in the producer's trips, which load V of
the block before and then K of the next (K0, V0, K1, V1, ... where the default issues K0,
K1, V0, K2, V1, ...: Note [K one step ahead] in attnc/schedule/load_ahead.py), and the
lowering builds those trips op by op (Note [Loads op by op] in
attnc/backend/load_steps.py), so the kernel changes with the IR:

    attnc compile examples/mha.attn -arch sm_90a --emit ptx \\
        --load-pass examples/passes/v_before_k.py \\
        --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-hoist,attn-warp-specialize,v-before-k,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a"

Before and after, one trip of a producer loop:

    %k = "attn.load"(%arg1, ...) {operand = "k"}      %v = "attn.load"(%arg2, ...) {operand = "v"}
    "attn.put"(%kv, %k) {tile = "k"}                   "attn.put"(%kv, %v) {tile = "v"}
    %v = "attn.load"(%arg2, ...) {operand = "v"}      %k = "attn.load"(%arg1, ...) {operand = "k"}
    "attn.put"(%kv, %v) {tile = "v"}                   "attn.put"(%kv, %k) {tile = "k"}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mlir import ir

from attnc.ir import attention_ops, error_at
from attnc.ir.roles import name_of, ops_in, role_block, role_ops
from attnc.passes import Pass, register
from attnc.passes.tile_program import KV_LOOP


def _tile(op) -> str | None:
    key = {"attn.load": "operand", "attn.put": "tile"}.get(op.name)
    return ir.StringAttr(op.attributes[key]).value if key else None


@register
@dataclass(frozen=True)
class VBeforeK(Pass):
    """Move V's load and put above K's in the producer's KV loops."""

    name: ClassVar[str] = "v-before-k"

    def run(self, module):
        for kernel in attention_ops(module):
            producer = [r for r in role_ops(kernel) if name_of(r) == "producer"]
            if not producer:
                raise error_at(kernel, "v-before-k: the plan has no producer role (sm_90a, after "
                                       "attn-warp-specialize with a producer warpgroup)")
            for loop in ops_in(role_block(producer[0]), ("scf.for",)):
                if KV_LOOP not in loop.attributes:      # the walk over query blocks, with persistent CTAs
                    continue
                body = list(loop.regions[0].blocks[0].operations)
                first_k = next(op for op in body if _tile(op) == "k")
                for op in [op for op in body if _tile(op) == "v"]:
                    op.move_before(first_k)

