"""`softcap-scores{cap=30.0}`: soft-cap the scores after a variant's score_mod,
s -> cap * tanh(s / cap) (the capping of Gemma 2 and Grok), by adding ops to the
score_mod region of the L1 IR. A complete user pass, to copy and change:

    attnc compile examples/alibi.attn -arch sm_80 --emit ptx \\
        --load-pass examples/passes/softcap_scores.py \\
        --pass-pipeline "softcap-scores{cap=30.0},attn-tile,attn-analyze-masks,attn-mask-kernels,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm80"

What a pass is given: `run(module)` receives the `builtin.module` operation (an
`mlir.ir.Operation`) holding one `attn.attention` op per variant; the hooks are that
op's regions, in `arith`/`math` ops ending in `gpu.yield` (`attnc compile --emit mlir
--pass-pipeline ""` prints them). To build ops a pass needs the module's context
(`module.context`), a location and an insertion point, all three made current by one
`with` statement. The location here is the pass's name around the `.attn` location of
the score it caps, so that an error a later pass finds in these ops names the source
line and this pass.

Before (examples/alibi.attn's score_mod) and after:

    %5 = arith.addf %arg4, %4 : f32            %5 = arith.addf %arg4, %4 : f32
    gpu.yield %5 : f32                         %cst = arith.constant 3.000000e+01 : f32
                                               %6 = arith.divf %5, %cst : f32
                                               %7 = math.tanh %6 : f32
                                               %8 = arith.mulf %cst, %7 : f32
                                               gpu.yield %8 : f32

The kernel computes what the IR says, not the source the bundle records: check it
against the reference of a source that writes the cap (`50.0 * tanh(... / 50.0)`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import math as mlir_math

from attnc.ir import SCORE_MOD, attention_ops, error_at, get_bool, region_block
from attnc.passes import Pass, register


@register
@dataclass(frozen=True)
class SoftcapScores(Pass):
    """Soft-cap the scores after score_mod: s -> cap * tanh(s / cap)."""

    name: ClassVar[str] = "softcap-scores"
    cap: float = 30.0

    def run(self, module):
        if not self.cap > 0:
            raise error_at(module, f"cap={self.cap}: expected a positive number")
        for attention in attention_ops(module):
            if not get_bool(attention, "has_score_mod"):
                # the kernel skips the region of a variant without a score_mod
                raise error_at(attention, "softcap-scores: this variant has no score_mod to cap; "
                                          "declare one, e.g. `score_mod(s, b, h, i, j) = s`")
            block = region_block(attention, SCORE_MOD)
            terminator = list(block.operations)[-1]             # gpu.yield %score
            location = ir.Location.name(self.name, childLoc=terminator.location, context=module.context)
            with module.context, location, ir.InsertionPoint(terminator):
                capped = soft_cap(terminator.operands[0], self.cap)
            terminator.operands[0] = capped


def soft_cap(score: ir.Value, cap: float) -> ir.Value:
    """cap * tanh(score / cap), built at the current insertion point and location."""
    c = arith.constant(score.type, cap)
    return arith.mulf(c, mlir_math.tanh(arith.divf(score, c)))
