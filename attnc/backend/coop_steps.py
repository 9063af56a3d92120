"""sm_90a's cooperative KV trips as the lowering reads them from the L5 IR (`coop_steps`),
to build each trip of the cooperative kernel's KV loops op by op (sm90a.py).

Note [Cooperative steps op by op]: a trip of the cooperative role's KV loop, as
attn-overlap-gemms writes it (Note [Overlapped cooperative steps in the IR] in
attnc/schedule/overlap_coop.py), is lowered from its ops in the order they stand, a
pattern per op (sm90a.py's `TRIP_PATTERNS`): the landing of the P.V in flight and the
rescale of O (the consumer warpgroups' patterns, Note [Overlapped steps op by op] in
wgmma_steps.py), the cp.async wait with its `pending` and the CTA barrier, the loads of
K and V of later blocks (each copied into the slot its `ahead` names, where the key range
has that block, and zero-filled where the mask skips it) and the commits of their
groups, the two async GEMMs, the landing of S, the scores and the softmax. So moving an
op -- the loads after the GEMMs are issued, a wait with another `pending` -- is another
kernel, once attn-verify-pipeline, which the lowering runs first, found it sound. What
stays the plan's: which ops a trip has (one of each but the commits, the hooks where the
analysis put them, no op without a pattern), that the loops of one kind have one trip
over a key range of several segments (`check_trips_by_kind` in kv_steps.py), how values
flow between them, the async GEMMs, each load's `ahead` (V's S - 2, K's
S - 1: the lowering takes a load's slot from it, the verifier from the rings, so the two
must not part) and which carried values are the rings. The first step before the loops
(the wait for all but the 2S - 2 youngest groups, the CTA barrier, QK^T alone, S landed,
the scores and softmax) and the last P.V after them (O landed and scaled, the wait for
every group, P.V, O landed) are built from their ops likewise, and checked the same
way; so are the role's loads before the key range, as sm_80's (Note [The role op by op]
in role_prologue.py). The loops around the trips are the kernel's (`check_key_range` checks
what it takes as its own), and what stands around them -- the ops between the loops, the
else branch, the epilogue -- is checked op by op (role_shell.py, Note [Roles followed in
full] in attnc/ir/roles.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from attnc.backend.kv_steps import StepOp, body_of, check_hooks, check_trips_by_kind, step_op
from attnc.backend.role_prologue import prologue_steps
from attnc.backend.role_shell import check_compute
from attnc.backend.wgmma_steps import Around, advances, around_ops, require
from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.passes.tile_program import KV_LOOP, first_kv_block, kv_block

NOTE = "Note [Cooperative steps op by op]"
# The carried values of a trip, as attn-overlap-gemms orders them (after the block index):
# m, l, O in flight, P, the factor, K's read ring, V's read ring, K's and V's write rings.
M, L, O, P, FACTOR, RK, RK_PHASE, RV, RV_PHASE, WK, WK_PHASE, WV, WV_PHASE = range(13)
_RING = {("read", "k"): RK, ("read", "v"): RV, ("slot_write", "k"): WK, ("slot_write", "v"): WV}


@dataclass(frozen=True)
class CoopSteps:
    """The trips of the cooperative role's KV loops in program order, (kv_blocks, ops)."""

    loops: tuple[tuple[str, tuple[StepOp, ...]], ...]
    first: tuple[StepOp, ...] = ()
    last: tuple[StepOp, ...] = ()
    prologue: tuple[StepOp, ...] = ()       # the ops before the key range (Note [The role op by op])
    epilogue: tuple[StepOp, ...] = ()       # the finalize and the stores after it

    def body(self, mode: str, top: bool = True) -> tuple[StepOp, ...]:
        return body_of(self.loops, mode, top)


def coop_steps(kernel) -> CoopSteps:
    """The trips of the cooperative role of `kernel` (sm_90a, L5, overlapped), checked
    (Note [Cooperative steps op by op])."""
    role = R.role_named(kernel, "compute")
    stages = int(R.attrs_of(R.channel_named(kernel, "kv"))["stages"])
    hooks = {"score_mod": R.attrs_of(kernel).get("has_score_mod", False),
             "mask": R.attrs_of(kernel).get("has_mask_mod", False)}
    loops = [op for op in R.ops_in(R.role_block(role), ("scf.for",)) if KV_LOOP in op.attributes]
    trips = tuple((R.value_of(loop.attributes[KV_LOOP]), _trip(loop, kernel, stages, hooks)) for loop in loops)
    check_trips_by_kind(trips, loops, NOTE, kernel)
    first, last, epilogue = _around(loops, kernel, hooks)
    return CoopSteps(trips, first, last, _prologue(role, loops, kernel, stages), epilogue)


def _prologue(role, loops: list, kernel, stages: int) -> tuple[StepOp, ...]:
    """The role's ops before the scf.if over the key range, as sm_80's (Note [The role op
    by op] in kv_steps.py); the first steps' loads are of the key range's first block,
    the block of step 0 (`first_kv_block`), the first rotated loop starting past its first
    step (`arith.maxsi(step, ...)`)."""
    scf_if = loops[0].operation.parent
    ops = [op.operation for op in R.role_block(role).operations]
    at = next((k for k, op in enumerate(ops) if op == scf_if), None)
    bound = loops[0].operands[0].owner
    if at is None or getattr(bound, "name", "") != "arith.maxsi":
        raise error_at(loops[0], f"the cooperative role's overlapped KV loops start past the key range's first "
                                 f"block, in an scf.if of the role, as attn-overlap-gemms makes them ({NOTE})")
    return prologue_steps(ops[:at], first_kv_block(loops[0]), scf_if, kernel, stages)


def _trip(loop, kernel, stages: int, hooks: dict) -> tuple[StepOp, ...]:
    block = loop.regions[0].blocks[0]
    args = list(block.arguments)[1:]
    if len(args) != 13:
        raise error_at(loop, f"the cooperative role's overlapped KV loop carries m, l, O, P, the factor and the "
                             f"rings K and V are read and written on, as attn-overlap-gemms makes it ({NOTE})")
    out: list[StepOp] = []
    seen: dict[str, ir.Operation] = {}
    for op in block.operations:
        op = op.operation
        step = _step_op(op, args, kernel, block, stages)
        if step is None:
            continue
        key = f"{step.name} {step.what}".strip()
        if key in seen and step.name != "cp_async_commit":
            raise error_at(op, f"a cooperative KV step has one {key} ({NOTE})")
        seen[key] = op
        out.append(step)
    for needed in ("land_o", "rescale", "read k", "read q", "read v", "load k", "load v", "slot_write k",
                   "slot_write v", "mma qk", "mma pv", "land_s", "softmax_step"):
        if needed not in seen:
            raise error_at(loop, f"this KV loop has no {needed} op, which a cooperative overlapped step has ({NOTE})")
    kind = R.value_of(loop.attributes[KV_LOOP])
    check_hooks(seen, hooks, kind, loop, "this KV loop", NOTE)
    _check_flow(seen, args, list(block.operations)[-1])
    return tuple(out)


def _step_op(op, args: list, kernel, block, stages: int) -> StepOp | None:
    """The step op of `op`; None for one that lowers to nothing; refused where none."""
    name = op.name
    if name in (R.RING_ADVANCE, "scf.yield") or (name.startswith("arith.") and not op.regions):
        return None
    attrs = R.attrs_of(op)
    if name == R.MMA_WAIT:
        return StepOp("land_o" if list(op.operands) == [args[O]] else "land_s", count=int(attrs["pending"]))
    if name == "attn.mma":
        if attrs.get("kind") not in ("qk", "pv") or "async" not in op.attributes:
            raise error_at(op, f"an overlapped step's GEMMs are QK^T and P.V, async (wgmma groups landed by "
                               f"{R.MMA_WAIT}) ({NOTE})")
        return step_op(op, "mma", attrs["kind"])
    if name == R.CP_ASYNC_COMMIT:
        return StepOp("cp_async_commit")
    if (plain := _plain(op)) is not None:
        return plain
    if name == "attn.load":
        tile, ahead = str(attrs.get("operand")), int(attrs.get("ahead", -1))
        planned = {"v": stages - 2, "k": stages - 1}
        if tile not in planned or op.operands[0] != kernel.operands[1 if tile == "k" else 2] \
                or op.operands[3] != kv_block(block.owner) or ahead != planned[tile]:
            raise error_at(op, f"a cooperative trip loads V {stages - 2} and K {stages - 1} blocks past its own "
                               f"(`ahead`), from the kernel's v and k: the lowering takes the slot from `ahead`, "
                               f"the verifier from the rings ({NOTE})")
        return StepOp("load", tile, ahead)
    if name in (R.SLOT_READ, R.SLOT_WRITE):
        tile = str(attrs["tile"])
        kind = "read" if name == R.SLOT_READ else "slot_write"
        ring = _RING.get((kind, tile))
        if (ring is None and (kind, tile) != ("read", "q")) or (ring is not None and op.operands[1] != args[ring]):
            raise error_at(op, f"a cooperative trip reads K and V and writes them at the stages of their rings, "
                               f"carried by the loop ({NOTE})")
        return StepOp(kind, tile)
    raise error_at(op, f"the sm_90a lowering has no pattern for {name} in a cooperative overlapped KV step "
                       f"({NOTE})")


def _plain(op) -> StepOp | None:
    """The step op of a cp.async wait, a CTA barrier, the rescale, the softmax and the
    score ops, which take nothing but their order from the IR (and a wait its `pending`);
    None for another op."""
    name = op.name
    if name == R.CP_ASYNC_WAIT:
        return StepOp("cp_async_wait", count=int(R.attrs_of(op)["pending"]))
    if name in (R.CTA_BARRIER, "attn.rescale", "attn.softmax_step", "attn.score_mod", "attn.mask",
                "attn.block_map_read"):
        return step_op(op, name.removeprefix("attn."))
    return None


def _check_flow(seen: dict, args: list, terminator) -> None:
    """The data flow attn-overlap-gemms makes: S from QK^T on the reads of Q and K,
    landed, through the score_mod and mask into the softmax with the carried m and l; O
    landed, rescaled by the carried factor, into P.V with the carried P and the read of
    V; each slot write of its tile's load; the softmax's m, l, P and factor and P.V's O
    carried on, each ring advanced once."""
    qk, pv, softmax, rescale = seen["mma qk"], seen["mma pv"], seen["softmax_step"], seen["rescale"]
    chain = [seen["land_s"]] + [seen[k] for k in ("score_mod", "mask") if k in seen]
    yielded = list(terminator.operands)
    flows = [
        (list(qk.operands) == [seen["read q"].result, seen["read k"].result], qk),
        (list(seen["land_s"].operands) == [qk.result], seen["land_s"]),
        (all(op.operands[0] == before.results[0] for before, op in zip(chain, chain[1:] + [softmax])), softmax),
        (list(softmax.operands)[1:] == [args[M], args[L]], softmax),
        (list(rescale.operands) == [seen["land_o"].result, args[FACTOR]], rescale),
        (list(pv.operands) == [args[P], seen["read v"].result, rescale.result], pv),
        (all(seen[f"slot_write {t}"].operands[2] == seen[f"load {t}"].result for t in "kv"), seen["slot_write k"]),
        (yielded[:5] == [softmax.results[1], softmax.results[2], pv.result, softmax.results[0], softmax.results[3]]
         and all(advances(yielded[ring], args[ring], args[ring + 1]) for ring in (RK, RV, WK, WV)), terminator),
    ]
    for ok, op in flows:
        if not ok:
            raise error_at(op, f"the sm_90a lowering builds a cooperative overlapped step's data flow as "
                               f"attn-overlap-gemms makes it, and this {op.name} differs ({NOTE})")


def _around(loops: list, kernel, hooks: dict) -> tuple[tuple, tuple, tuple]:
    """The first step before the KV loops and the last P.V after them, in the scf.if over
    the key range, checked for their ops, rings and data flow (Note [Cooperative steps op
    by op]), and the epilogue after it."""
    around = Around(loops, kernel, NOTE, "the cooperative role's", RK)
    epilogue = check_compute(around.range_if)
    first_loop, last_loop, init, results = loops[0], loops[-1], around.init, around.results
    start_values, kind = around.start_values, around.kind
    stage0 = around.k_ring.operands[0]
    seen: dict[str, ir.Operation] = {}
    first = _ops(around.before, seen, "first step", {("read", "k"): stage0}, ("cp_async_wait", "cta_barrier",
                 "read k", "read q", "mma qk", "land_s", "softmax_step"), first_loop)
    check_hooks(seen, hooks, kind, first_loop, "the first step", NOTE)
    qk, softmax = seen["mma qk"], seen["softmax_step"]
    chain = [seen["land_s"]] + [seen[k] for k in ("score_mod", "mask") if k in seen]
    _flows([
        (list(qk.operands) == [seen["read q"].result, seen["read k"].result], qk),
        (list(seen["land_s"].operands) == [qk.result], seen["land_s"]),
        (all(op.operands[0] == before.results[0] for before, op in zip(chain, chain[1:] + [softmax])), softmax),
        (list(softmax.operands)[1:] == start_values[M:O], softmax),
        ([init[M], init[L], init[P], init[FACTOR]] == [softmax.results[k] for k in (1, 2, 0, 3)]
         and init[RV] == stage0, softmax),
    ], "first step")
    seen = {}
    last = _ops(around.after, seen, "last P.V", {("read", "v"): results[RV]}, ("land_o", "rescale",
                "cp_async_wait", "cta_barrier", "read v", "mma pv", "land_pv"), last_loop, results[O])
    pv, rescale, landed, terminator = seen["mma pv"], seen["rescale"], seen["land_pv"], around.after[-1]
    _flows([
        (list(rescale.operands) == [seen["land_o"].result, results[FACTOR]], rescale),
        (list(pv.operands) == [results[P], seen["read v"].result, rescale.result], pv),
        (list(landed.operands) == [pv.result], landed),
        (list(terminator.operands) == [results[M], results[L], landed.result], terminator),
    ], "last P.V")
    return first, last, epilogue


def _ops(ops: list, seen: dict, where: str, stages: dict, needed: tuple, loop, o_in_flight=None):
    """The step ops of the first step or the last P.V: one of each (reads of K and V at
    the stages `stages` gives), those `needed` there."""
    def step_of(op) -> StepOp | None:
        name, attrs = op.name, R.attrs_of(op)
        if name == R.MMA_WAIT:
            kind = "land_o" if o_in_flight is not None and list(op.operands) == [o_in_flight] else \
                "land_pv" if where == "last P.V" else "land_s"
            return StepOp(kind, count=int(attrs["pending"]))
        if name == "attn.mma" and "async" in op.attributes and attrs.get("kind") in ("qk", "pv"):
            return step_op(op, "mma", attrs["kind"])
        if name == R.SLOT_READ and _read_at(op, str(attrs["tile"]), stages):
            return StepOp("read", str(attrs["tile"]))
        return _plain(op)

    whose = "the cooperative role's"
    out = around_ops(ops, seen, where, step_of, whose, NOTE)
    require(seen, needed, loop, where, whose, NOTE)
    return out


def _read_at(op, tile: str, stages: dict) -> bool:
    """A read of Q, or of the tile `stages` names, at the stage it gives."""
    stage = stages.get(("read", tile))
    return tile == "q" or (stage is not None and op.operands[1] == stage)


def _flows(flows: list, what: str) -> None:
    for ok, op in flows:
        if not ok:
            raise error_at(op, f"the sm_90a lowering builds the data flow of the cooperative role's {what} as "
                               f"attn-overlap-gemms makes it, and this {op.name} differs ({NOTE})")
