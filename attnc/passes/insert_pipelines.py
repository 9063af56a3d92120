"""`attn-insert-pipelines`: replace each put/get by its channel's synchronization, inside
the roles (L5).

Targets: sm_80, sm_90a, sm_100a. Expects L4 (role regions with put/get, every shared- or
tensor-memory channel with its `buffers`). Leaves no put/get: the mbarriers are declared
beside the channels (`attn.mbarrier_init`: count, stages), and in the roles each put/get
is a slot write/read with the waits, arrives, expect_tx, cp.async arrivals, tcgen05
commits or cp.async groups of its channel's protocol (attnc/schedule/sync.py for the
counts and bytes, attnc/schedule/sync_ir.py for the ops), each ring walked with an
explicit (stage, phase) carried by the roles' loops (Note [Ring state in the loops]);
where attn.warp_specialize says `pingpong`, the consumer roles' turns at the GEMMs are
named barriers (Note [Ping-pong turns] in sync.py); sm_80's cooperative role waits for
its cp.async groups with its kernel's counts (cp_async_pending in sync.py) and, where it
reads its key range from a block map, guesses its first block (option early_first: Note
[The guessed first block in the IR] in attnc/schedule/first_guess.py). sm_90a's
producer, whose threads copy K with cp.async and report it on K's own full mbarrier
(Note [Barriers per tile] in sync.py):

    before:  scf.for %t = ... {  %n = ...; %k = attn.load ...; "attn.put"(%kv, %k) {tile = "k"} ... }
    after:   %k_full = "attn.mbarrier_init"() {count = 128, name = "mbar_k_full", stages = 2, tile = "k", ...}
             %r:2 = scf.for %t = ... iter_args(%stage = %c0, %phase = %c0) {
               %n = ...; %k = attn.load ...; %flip = arith.xori %phase, %c1
               "attn.mbarrier_wait"(%k_empty, %stage, %flip)
               "attn.slot_write"(%kv, %stage, %k) {completes = "arrive", tile = "k"}
               "attn.cp_async_mbarrier_arrive"(%k_full, %stage)
               ... %next:2 = "attn.ring_advance"(%stage, %phase) {stages = 2}
               scf.yield %next#0, %next#1 }
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnc.passes.registry import Pass


@dataclass(frozen=True)
class InsertPipelines(Pass):
    """Replace put/get by mbarrier, cp.async and named-barrier ops with (stage, phase) state; a guessed first block."""

    name: ClassVar[str] = "attn-insert-pipelines"

    early_first: bool | None = field(default=None, metadata={
        "doc": "sm_80 (and sm_90a's cooperative role): where the role reads its key range from a block map "
               "(attn.block_map_range), issue the first block's K and V at a guess (attn.first_block_guess: "
               "the static analysis' top block, or a table tile's diagonal) before the map is read, and again "
               "in an scf.if where the range's top is another block (Notes [The guessed first block in the IR] "
               "in first_guess.py and [First block before the map] in forward_loads.py; default: on sm_80 "
               "wherever the role reads a block map, results/sm80_h200.md, \"First block before the map\"; "
               "off on sm_90a, measured slower there: results/sm90a_h200.md, \"The first block before the "
               "map\")"})

    def run(self, module) -> None:
        insert(module, self.early_first)


def insert(module, early_first: bool | None = None) -> None:
    from attnc.ir import attention_ops, error_at
    from attnc.ir.roles import mbarrier_ops
    from attnc.passes import plan_ir
    from attnc.schedule.sync_ir import Pipelines

    for op in attention_ops(module):
        plan_ir.require_roles(op, InsertPipelines.name)
        if mbarrier_ops(op) or _synchronized(op):
            raise error_at(op, "attn-insert-pipelines ran twice on this op")
        recipe = plan_ir.recipe_of(op, InsertPipelines.name)
        buffers = plan_ir.buffers(op)
        placed = {b.channel for b in buffers}
        unplaced = [c.name for c in recipe.channels if c.space in ("smem", "tmem") and c.name not in placed]
        if unplaced:
            raise error_at(op, f"attn-insert-pipelines: channel(s) {', '.join(unplaced)} have no "
                               f"buffer; run attn-alloc-smem (and attn-alloc-tmem) first")
        stages_of = {c.name: c.stages for c in recipe.channels}
        for b in buffers:
            stages = stages_of[b.channel]
            if b.stages != stages:
                raise error_at(plan_ir.buffer_channels(op)[b.name],
                               f"attn-insert-pipelines: channel '{b.channel}' has stages = {stages} and its buffer "
                               f"{b.name} holds {b.stages}: they must agree (the alloc passes place a slot a stage: "
                               f"edit stages before they run, or set them with attn-tile{{stages=N}})")
        with op.context:
            Pipelines(recipe, plan_ir.tile_of(op, InsertPipelines.name), op,
                      _early_first(op, recipe.target, early_first)).run()


def _early_first(op, target: str, asked: bool | None) -> bool:
    """Whether the cooperative role guesses its first key block: the option, else where
    it was measured faster (sm_80's role reading a block map). sm_90a's cooperative role
    (no producer warpgroup) takes it as an option; its default is off, measured 1-2.3 % slower
    (results/sm90a_h200.md, "The first block before the map")."""
    from attnc.ir import error_at
    from attnc.ir.roles import body_block, role_ops
    from attnc.schedule.first_guess import reads_block_map

    roles = role_ops(op)
    reads = any(reads_block_map(body_block(role)) for role in roles)
    cooperative = target == "sm_80" or (target == "sm_90a" and len(roles) == 1)
    if asked and not cooperative:
        raise error_at(op, f"early_first=true: the guessed first block is a cooperative role's, whose copies are "
                           f"cp.async groups (sm_80's, or sm_90a's without a producer warpgroup); this kernel is "
                           f"{target}'s with {len(roles)} roles")
    if asked and not reads:
        raise error_at(op, "early_first=true needs a role that reads its key range from a block map "
                           "(attn.block_map_range: a mask that reads params); this kernel's reads none")
    return bool(asked) if asked is not None else target == "sm_80" and reads


def _synchronized(kernel) -> bool:
    """No put or get is left (the sm_80 plan has no mbarrier to tell)."""
    from attnc.ir import roles as R
    return not any(R.ops_in(R.role_block(role), (R.PUT, R.GET)) for role in R.role_ops(kernel))
