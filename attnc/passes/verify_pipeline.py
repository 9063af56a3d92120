"""`attn-verify-pipeline`: prove the L5 synchronization protocol sound (design.md section 6).

Targets: all. Expects L5 (after `attn-insert-pipelines`: `attn.role`, `attn.buffer` and
`attn.barrier` ops after each `attn.kernel`). Changes nothing; an `AttncError` at the
attention op lists every violation. The plan is run as an abstract machine
(attnc/schedule/verify.py): each mbarrier ring over two wraps, in every interleaving of
its writers and readers (warps that run the same program counted once), must not
deadlock, must not overwrite a slot before all its readers released it, and must not
let a reader in before the slot's data landed (a `tx_bytes` other than a fill's bytes,
an arrive count above or below the arrivals the lowering makes). Named barriers must
count every thread that takes part. This is what stands in for a GPU on sm_100a, and a
check of a plan edited by hand in a dumped .mlir file (`attnc opt`).

    error: attn-verify-pipeline: ring 'kv': slot 0 is overwritten by fill 2 before all 8
           readers of fill 0 released it (4 did): mbar_kv_empty counts 4
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.passes.registry import Pass


@dataclass(frozen=True)
class VerifyPipeline(Pass):
    """Check the mbarrier / named-barrier protocol of the plan by exhaustive simulation."""

    name: ClassVar[str] = "attn-verify-pipeline"

    def run(self, module) -> None:
        verify_pipeline(module)


def verify_pipeline(module) -> None:
    from attnc.ir import attention_ops, error_at
    from attnc.passes import plan_ir
    from attnc.schedule.alloc import Buffer
    from attnc.schedule.sync import Barrier
    from attnc.schedule.verify import verify

    for op in attention_ops(module):
        barriers = plan_ir.require(op, Barrier, VerifyPipeline.name, "attn-insert-pipelines")
        recipe = plan_ir.recipe_of(op, VerifyPipeline.name)
        tile = plan_ir.tile_of(op, VerifyPipeline.name)
        violations = verify(recipe, barriers, plan_ir.read(op, Buffer), tile)
        if violations:
            raise error_at(op, f"{VerifyPipeline.name}: " + "; ".join(v.message for v in violations))
