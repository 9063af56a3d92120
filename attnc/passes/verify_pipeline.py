"""`attn-verify-pipeline`: prove the L5 synchronization of the role regions sound
(design.md section 6.2).

Targets: all. Expects L5 (after `attn-insert-pipelines`: mbarriers declared in
attn.warp_specialize, the roles' slot writes and reads with their waits, arrives,
expect_tx, cp.async arrivals, tcgen05 commits, cp.async groups and named barriers).
Changes nothing. Each role region is a process running its ops as they stand, loops
unrolled over enough iterations to wrap every ring twice, explored in every
interleaving of every ring at once (attnc/schedule/verify.py, Note [Every ring at
once]): no deadlock, no slot written before its
readers released its previous fill, no read before its fill landed (a cp.async copy
lands when its thread's cp.async.mbarrier.arrive does: Note [cp.async arrivals]), no
mbarrier with more arrivals than its count or more bytes than announced. The error
names the op at fault -- its `file:line:col`, the `.attn` line of an op a pass made or
the line of a hand-edited `.mlir` file:

    gemma2.attn:2:1: error: attn-verify-pipeline: channel 'kv' deadlocks: producer waits at
    attn.mbarrier_wait on mbar_k_empty[0] for parity 0 (its phase 0, 4 of 8 arrivals)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnc.errors import AttncError
from attnc.passes.registry import Pass
from attnc.schedule.verify import MAX_STATES


@dataclass(frozen=True)
class VerifyPipeline(Pass):
    """Check the roles' mbarrier / cp.async / named-barrier ops by exhaustive simulation."""

    name: ClassVar[str] = "attn-verify-pipeline"
    max_states: int = field(default=MAX_STATES, metadata={
        "doc": "states an exploration may visit before it gives up, unverified (an error): more K/V stages "
               "take more (sm_100a's docs_sink at 7 stages verifies within 3000000)"})

    def __post_init__(self):
        if self.max_states < 1:
            raise AttncError(f"max_states={self.max_states}: expected 1 or more")

    def run(self, module) -> None:
        from attnc.schedule import beside
        verify_pipeline(module, beside=beside.deferring(), max_states=self.max_states)


def verify_pipeline(module, beside: bool = False, max_states: int = MAX_STATES) -> None:
    """Check every attn.kernel of `module`; with `beside`, explore its interleavings beside
    the passes after this one (Note [The check beside the lowering] in
    attnc/schedule/beside.py), which the driver waits for when the pipeline ends."""
    from attnc.ir import attention_ops, error_at
    from attnc.ir.roles import PUT, GET, ops_in, role_block, role_ops, remember_verified
    from attnc.passes import plan_ir
    from attnc.schedule import beside as deferred
    from attnc.schedule.recipes import check_register_budget
    from attnc.schedule.verify import explore as explore_states, kernel_explorations

    def explore(*exploration):
        return explore_states(*exploration, max_states=max_states)

    for op in attention_ops(module):
        plan_ir.require_roles(op, VerifyPipeline.name)
        plan_ir.tile_of(op, VerifyPipeline.name)
        left = [o for role in role_ops(op) for o in ops_in(role_block(role), (PUT, GET))]
        if left:
            raise error_at(left[0], f"{VerifyPipeline.name} needs the synchronization attn-insert-pipelines "
                                    f"makes of {left[0].name}; run attn-insert-pipelines first")
        recipe = plan_ir.recipe_of(op, VerifyPipeline.name)      # its refusals name the pass and the op
        try:
            check_register_budget(recipe)
        except AttncError as e:
            raise error_at(op, f"{VerifyPipeline.name}: {e.message}") from None
        with op.context:
            violations, explorations = kernel_explorations(op)
        if violations:
            raise error_at(violations[0].op, f"{VerifyPipeline.name}: {violations[0].message}")
        explored = deferred.explore_beside(explorations, explore) if beside else None
        if explored is None:
            with op.context:
                _raise_first([v for v in (explore(*x) for x in explorations) if v is not None])
        else:
            deferred.defer(lambda explored=explored, context=op.context: _raise_first(explored(), context, True))
        remember_verified(op)       # Note [Verified as it stands]


def _raise_first(violations: list, context=None, remembered: bool = False) -> None:
    """Raise the first of `violations`; `remembered`: the kernel was remembered sound before
    its check ended (Note [Verified as it stands] in attnc/ir/roles.py), which is forgotten."""
    from attnc.ir import error_at
    from attnc.ir.roles import forget_verified

    if violations and remembered:
        forget_verified()
    if violations:
        with context or violations[0].op.context:
            raise error_at(violations[0].op, f"{VerifyPipeline.name}: {violations[0].message}")
