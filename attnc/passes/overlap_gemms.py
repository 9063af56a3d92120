"""`attn-overlap-gemms`: rotate sm_90a's consumer warpgroups' KV steps so that each
step's QK^T is issued with the previous step's P.V, both asynchronous, and the
producer's so that it loads K one step ahead of V (L5).

Targets: sm_90a. Expects L5 (after attn-insert-pipelines). In a plan with a producer
warpgroup, every consumer role's KV loops become the overlapped steps of Note
[Overlapped steps in the IR] (attnc/schedule/overlap.py): step lo peeled, loops over the
rest carrying the previous step's P and factor and the P.V in flight, the last P.V after
them; the GEMMs are `async` attn.mma ops landed by attn.mma_wait, which
attn-verify-pipeline checks with the slots they read (Note [Asynchronous GEMMs]). The
producer's KV loops load K(n) and V(n - 1) in each trip, in the order its step had them,
with K's first load before them and V's last after (Note [K one step ahead] in
attnc/schedule/load_ahead.py). The cooperative kernel's role (no producer warpgroup) is
rotated likewise, its trips loading V and K of later blocks into their slots behind one
cp.async wait (Note [Overlapped cooperative steps in the IR] in
attnc/schedule/overlap_coop.py). Persistent consumers without ping-pong then issue each
block's first QK^T before the last block's epilogue, which the walk over query blocks
carries to the next block (Note [The next block's first QK^T in the IR] in
attnc/schedule/walk_ahead.py). One consumer trip, before and after:

    wait K; QK^T; release K; scores; softmax      O = land(O in flight); O *= factor
    O *= factor; wait V; P.V; release V           release V(n - 2); wait K(n); wait V(n - 1)
                                                  S = QK^T (async); O += P V (async)
                                                  S = land(S) {pending = 1}; release K
                                                  scores; softmax
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.passes.registry import Pass


@dataclass(frozen=True)
class OverlapGemms(Pass):
    """Issue each step's QK^T with the previous step's P.V, and the producer's K a step ahead of V (sm_90a, L5)."""

    name: ClassVar[str] = "attn-overlap-gemms"

    def run(self, module) -> None:
        overlap(module)


def overlap(module) -> None:
    from attnc.ir import attention_ops, error_at, get_str
    from attnc.ir import roles as R
    from attnc.passes import plan_ir
    from attnc.schedule.load_ahead import load_ahead
    from attnc.schedule.overlap import overlap_role
    from attnc.schedule.overlap_coop import overlap_cooperative
    from attnc.schedule.walk import check_walk
    from attnc.schedule.walk_ahead import issue_first_qk_ahead

    def overlap_ahead(role, kernel) -> None:
        overlap_role(role, kernel)
        issue_first_qk_ahead(role)

    for op in attention_ops(module):
        ws = plan_ir.require_roles(op, OverlapGemms.name)
        target = get_str(op, "target")
        if target != "sm_90a":
            raise error_at(op, f"{OverlapGemms.name} overlaps the GEMMs of sm_90a's consumer warpgroups "
                               f"(wgmma); this plan is for {target}")
        if any(R.ops_in(R.role_block(role), (R.PUT, R.GET)) for role in R.role_ops(op)):
            raise error_at(op, f"{OverlapGemms.name} needs the synchronization attn-insert-pipelines makes; "
                               f"run attn-insert-pipelines first")
        roles = R.role_ops(op)
        check_walk(op, OverlapGemms.name)       # the walk the rotations below move work within
        # Note [The next block's first QK^T in the IR]: persistent consumers without ping-pong
        flags = R.attrs_of(ws)
        ahead = bool(flags.get(R.PERSISTENT, False)) and not flags.get(R.PINGPONG, False)
        with op.context:
            for role in roles:
                name = R.name_of(role)
                rotate = {"producer": load_ahead, "compute": overlap_cooperative}.get(
                    name, (overlap_ahead if ahead else overlap_role) if name.startswith("consumer") else None)
                if rotate is not None:
                    R.rewrite_range(role, lambda: rotate(role, op))
