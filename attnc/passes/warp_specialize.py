"""`attn-warp-specialize`: split the CTA's tile program into role regions joined by
channels (L3).

Targets: sm_80, sm_90a, sm_100a. Expects L2 (an attn.kernel with its program, after
attn-tile and attn-analyze-masks: `target`, `num_warps`, `stages`, `q_tiles`). Leaves
the kernel's region as one `attn.warp_specialize` holding the channel declarations and
one `attn.role` region per role of the target's recipe (attnc/schedule/recipes.py), with
its warps and register budget; a tile made in one role and used in another goes through
`attn.put` / `attn.get` on a channel (attnc/schedule/partition.py, Note [Where values
cross]). sm_80: one cooperative role `compute` whose Q and K/V go through cp.async
channels, K and V loaded stages - 1 steps ahead as its kernel loads them (Note [cp.async
prefetch] in attnc/schedule/prefetch.py); sm_90a: `consumers` warpgroups of 64 query rows and, with `producer`, a
`producer` role (the loads) feeding the consumer roles (the GEMMs, hooks, softmax and
the stores of their rows' O and LSE) through mbarrier rings it fills with cp.async, with
their setmaxnreg budgets as `regs` and their rows of the block as `rows`, their tiles of
those rows only (Note [Consumer rows] in attnc/schedule/partition.py) (`pingpong` recorded on attn.warp_specialize, and
`persistent` where the CTAs are: by default for a band, a mask that keeps a narrow band
of keys per row; then every role's program stands in the walk over query blocks, Note
[The walk over query blocks] in attnc/schedule/walk.py); without it one cooperative role
as on sm_80; sm_100a: the FA4 roles
(load, mma, softmax0/1, correction, epilogue, empty) with S and P through TMEM, their
programs in the walk over query blocks with `persistent` (off by default). The K/V channel's
`stages` is attn-tile's `stages`. Register budgets are checked here. What the lowering
builds follows these choices (Note [The plan the lowerings follow] in lower_kernel.py).

Note [Sizes the plan states]: attn-tile's `num_warps` and `stages` on attn.kernel are
requests, which this pass turns into the roles' warps (a producer warpgroup or persistent
CTAs add one to attn-tile's count) and the K/V channels' stages; it then drops them from
attn.kernel, so that each size is stated once, where the passes after it and the lowerings
read it (plan_ir.launched_warps, plan_ir.kv_stages). An edit of the plan's warps or
stages is an edit of a role or a channel (and its buffers), never of an attribute that
nothing reads.

    before:  "attn.kernel"(...) ({ %q = attn.load ...; scf.for { %k = attn.load ...; attn.mma ... } })
    after:   "attn.kernel"(...) ({ "attn.warp_specialize"() ({
               %kv = "attn.channel"() {name = "kv", producer = "producer", consumer = "consumer0",
                                       stages = 2, tile = ["k", "v"], transport = "cp.async.mbarrier", ...}
               "attn.role"() ({ scf.for { %k = attn.load ...; "attn.put"(%kv, %k) {tile = "k"} ... } })
                             {name = "producer", regs = 24, warps = [0, 1, 2, 3]}
               "attn.role"() ({ scf.for { %k = "attn.get"(%kv) {tile = "k"}; attn.mma ... } })
                             {name = "consumer0", regs = 240, warps = [4, 5, 6, 7]} ... }) })
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnc.passes.registry import Pass


@dataclass(frozen=True)
class WarpSpecialize(Pass):
    """Split the tile program into role regions with put/get on channels (attn.role, attn.channel)."""

    name: ClassVar[str] = "attn-warp-specialize"
    consumers: int | None = field(default=None, metadata={
        "doc": "consumer warpgroups on sm_90a, 64 query rows each: 1, 2 or 3, block_m / 64 (default: that; "
               "no other target has them)"})
    producer: bool | None = field(default=None, metadata={
        "doc": "sm_90a: a producer warpgroup that only loads, into an mbarrier ring the consumers read, "
               "with setmaxnreg budgets where there are two or three consumers (Note [Producer warpgroup] in "
               "sm90a_ws.py; default: on for two consumer warpgroups, two or more K/V stages and head dim "
               "128, and for three; results/sm90a_h200.md, \"Producer warpgroup\")"})
    pingpong: bool | None = field(default=None, metadata={
        "doc": "sm_90a, with the producer and two consumer warpgroups: they take turns at the GEMMs, "
               "recorded as `pingpong` on attn.warp_specialize (default: off, measured slower: "
               "results/sm90a_h200.md, \"Ping-pong\")"})
    persistent: bool | None = field(default=None, metadata={
        "doc": "sm_90a with the producer, and sm_100a: one CTA per SM loops over the query blocks, loading "
               "the next block's tiles during the last one's epilogue, recorded as `persistent` on "
               "attn.warp_specialize, every role's program in the walk over query blocks (Notes [Persistent "
               "CTAs] in sm90a_ws.py, [Persistent CTAs on sm_100a] in sm100a.py and [The walk over query "
               "blocks] in walk.py; default: on for sm_90a's band, a sliding window, results/sm90a_h200.md, "
               "\"Persistent CTAs\"; off on sm_100a, never timed)"})
    walk_order: str | None = field(default=None, metadata={
        "doc": "with persistent CTAs (sm_90a, sm_100a): the order in which they take the query blocks, round by "
               "round: snake (rG + c in even rounds, rG + G - 1 - c in odd ones, G CTAs, c = ctaid.x) or "
               "linear (rG + c), recorded as `order` on attn.walk_block (default: snake; "
               "results/sm90a_h200.md, \"Walk order\")"})

    q_blocks_per_cta: int | None = field(default=None, metadata={
        "doc": "sm_80: query blocks each CTA runs in turn, 1 or 2; with 2 the role's program stands in the "
               "walk over the CTA's pair of blocks (order \"pairs\" on attn.walk_block: Note [Two query "
               "blocks in the IR] in walk.py) (default: 2 where the softmax max is a constant -- a bf16 "
               "score_mod bounded within 64 -- at 128-key tiles, else 1; results/sm80_h200.md, \"Two query "
               "blocks per CTA\")"})

    def run(self, module) -> None:
        warp_specialize(module, self.consumers, self.producer, self.pingpong, self.persistent, self.walk_order,
                        self.q_blocks_per_cta)


def sm90a_roles(op, tile, consumers: int | None, producer: bool | None, pingpong: bool | None):
    """(consumers, producer, pingpong) of an sm_90a kernel: the options, else the defaults."""
    from attnc.ir import error_at
    from attnc.passes import plan_ir
    from attnc.errors import spelled
    from attnc.schedule.recipes import SM90A_BLOCK_M, SM90A_CONSUMERS, default_producer

    block_m = tile.block_m
    if consumers is None:           # (one given is one of SM90A_CONSUMERS: warp_specialize checked)
        if block_m not in SM90A_BLOCK_M:
            raise error_at(op, f"block_m={block_m}: sm_90a's consumer warpgroups run 64 query rows each, "
                               f"{spelled(SM90A_CONSUMERS)} of them: block_m {spelled(SM90A_BLOCK_M)} "
                               f"(attn-tile)")
        consumers = block_m // 64
    elif consumers * 64 != block_m:
        raise error_at(op, f"consumers={consumers} runs {64 * consumers} query rows "
                           f"(64 a warpgroup), and the tile has block_m={block_m}: set attn-tile{{block_m="
                           f"{64 * consumers}}}")
    stages = plan_ir.required_attr(op, "stages", WarpSpecialize.name, integer=True)
    if producer is None:
        producer = default_producer(consumers, stages, (tile.head_dim_qk, tile.head_dim_v))
    if pingpong and not (producer and consumers == 2):
        raise error_at(op, f"pingpong=1: the consumers take turns when there are two fed by the producer; "
                           f"this plan has consumers={consumers}, producer={int(producer)}")
    return consumers, producer, bool(pingpong)


def warp_specialize(module, consumers: int | None, producer: bool | None = None,
                    pingpong: bool | None = None, persistent: bool | None = None,
                    walk_order: str | None = None, q_blocks_per_cta: int | None = None) -> None:
    from mlir import ir

    from attnc.errors import AttncError, spelled
    from attnc.ir import attention_ops, error_at, get_str
    from attnc.ir import roles as R
    from attnc.ir.roles import warp_specialize_of
    from attnc.schedule.recipes import default_persistent
    from attnc.passes import plan_ir
    from attnc.schedule.partition import Partition
    from attnc.schedule.recipes import SM90A_CONSUMERS, check_register_budget, recipe
    from attnc.schedule.walk import ORDER, ORDERS, PAIRS
    from attnc.passes.tile_table import TARGET_LIMITS

    for op in attention_ops(module):
        if warp_specialize_of(op) is not None:
            raise error_at(op, "attn-warp-specialize ran twice on this op")
        target = plan_ir.required_attr(op, "target", WarpSpecialize.name)
        tile = plan_ir.tile_of(op, WarpSpecialize.name)
        if op.name != "attn.kernel":
            raise error_at(op, "attn-warp-specialize needs the tile program of attn.kernel; run attn-tile first")
        if R.KEY_RANGE in op.attributes and get_str(op, R.KEY_RANGE) != R.key_range_digest(op):
            raise error_at(op, "the bounds of the program's KV loops or the tests of its branches were edited "
                               "since attn-tile and attn-analyze-masks made them; the kernels build the key range "
                               "the mask analysis gives: edit the mask (or its kv_range function) instead (Note "
                               "[The key range as made] in attnc/ir/roles.py)")
        warps = plan_ir.required_attr(op, "num_warps", WarpSpecialize.name, integer=True)
        limits = TARGET_LIMITS.get(target)
        if limits is not None and warps not in limits.num_warps:
            raise error_at(op, f"attribute num_warps = {warps}: {target}'s kernel layout uses "
                               f"{spelled(limits.num_warps)} warps (attn-tile)")
        if target != "sm_90a":
            # producer=0 and pingpong=0 ask for what the target does anyway
            for name, value, asks in (("consumers", consumers, consumers is not None),
                                      ("producer", producer, bool(producer)), ("pingpong", pingpong, bool(pingpong))):
                if asks:
                    raise error_at(op, f"{name}={int(value)}: only sm_90a has a producer and consumer "
                                       f"warpgroups; {target}'s roles are fixed by its recipe")
        if target == "sm_80" and persistent:
            raise error_at(op, f"persistent={int(persistent)}: persistent CTAs are sm_90a's producer kernel's "
                               f"and sm_100a's; sm_80's CTAs run one query block, or two "
                               f"(q_blocks_per_cta=2)")
        try:
            if target == "sm_90a" and consumers not in (None, *SM90A_CONSUMERS):
                raise AttncError(f"consumers={consumers}: sm_90a has {spelled(SM90A_CONSUMERS)} consumer "
                                 f"warpgroups")
            if target == "sm_90a":
                n, has_producer, turns = sm90a_roles(op, tile, consumers, producer, pingpong)
            else:
                n, has_producer, turns = 2, True, False
            if persistent and not has_producer:
                given = "producer=0" if producer is not None else "by default here"
                raise AttncError(f"persistent=1: persistent CTAs are the producer warpgroup's kernel; this plan "
                                 f"has none ({given}; producer=1 asks for one)")
            stays = persistent if persistent is not None else default_persistent(target, has_producer, banded(op))
            if walk_order is not None and walk_order not in ORDERS:
                raise AttncError(f"walk_order={walk_order}: persistent CTAs take the query blocks in one of the "
                                 f"orders {', '.join(ORDERS)}")
            if walk_order is not None and not stays:
                raise AttncError(f"walk_order={walk_order}: the order of persistent CTAs' query blocks, and this "
                                 f"plan's CTAs are not persistent (persistent=1)")
            pairs = two_blocks(op, tile, target, q_blocks_per_cta)
            walk = (walk_order or ORDER) if stays else PAIRS if pairs else None
            stages = plan_ir.required_attr(op, "stages", WarpSpecialize.name, integer=True)
            r = recipe(target, num_warps=warps, kv_stages=stages, q_tiles=tile.q_tiles, consumers=n,
                       producer=has_producer, persistent=stays, pingpong=turns)
            check_register_budget(r)
            with op.context:
                ws = Partition(r, op, walk).run()
                # Note [Sizes the plan states]
                for name in ("num_warps", "stages"):
                    del op.attributes[name]
                for name, chosen in ((R.PINGPONG, turns), (R.PERSISTENT, stays)):
                    if chosen:
                        ws.attributes[name] = ir.BoolAttr.get(True)
        except AttncError as e:
            raise error_at(op, e.message) from None


def two_blocks(op, tile, target: str, q_blocks_per_cta: int | None) -> bool:
    """Whether the CTA runs two query blocks (Note [Two query blocks in the IR] in
    attnc/schedule/walk.py): the option, else two on sm_80 where the softmax max is a
    constant (Note [Bounded score_mod] in attnc/backend/softmax.py) and key blocks have 128
    keys -- softcap + causal ran 5 % faster at head dim 64 (128x128 tiles), hardly at 128
    (128x64 tiles, where the dense softcap example spilled 108 bytes); causal, ALiBi and the
    window ran 1-8 % slower with two (results/sm80_h200.md, "Two query blocks per CTA")."""
    from attnc.backend.score_forms import region_static_max
    from attnc.errors import AttncError
    from attnc.ir import SCORE_MOD, get_bool, get_str, region_block

    if q_blocks_per_cta not in (None, 1, 2):
        raise AttncError(f"q_blocks_per_cta={q_blocks_per_cta}: expected 1 or 2")
    if q_blocks_per_cta == 2 and target != "sm_80":
        raise AttncError(f"q_blocks_per_cta=2: two query blocks per CTA are sm_80's cooperative kernel's; "
                         f"{target}'s CTAs run one (persistent CTAs, attn-warp-specialize{{persistent=1}}, walk "
                         f"several)")
    if q_blocks_per_cta is not None:
        return q_blocks_per_cta == 2
    if target != "sm_80" or tile.block_n < 128 or not get_bool(op, "has_score_mod"):
        return False
    return region_static_max(region_block(op, SCORE_MOD), get_str(op, "dtype")) is not None


def banded(op) -> bool:
    """Whether mask_mod keeps a band of keys per row, as the lowering finds it (a mask
    that reads params never is: its key ranges are the block map's)."""
    from attnc.ir import get_bool, get_str
    from attnc.passes.tile import banded_mask

    if not get_bool(op, "has_mask_mod"):
        return False
    if "mask_kind" in op.attributes and get_str(op, "mask_kind") == "runtime":
        return False
    return banded_mask(op)
