"""sm_90a's overlapped consumer steps as the lowering reads them from the L5 IR
(`wgmma_steps`), to build each trip of their KV loops op by op (sm90a_ws.py).

Note [Overlapped steps op by op]: a trip of a consumer warpgroup's KV loop, as
attn-overlap-gemms writes it (Note [Overlapped steps in the IR] in
attnc/schedule/overlap.py), is lowered from its ops in the order they stand, a pattern
per op (sm90a_ws.py's `TRIP_PATTERNS`): the landing of the P.V in flight (wgmma.wait_group
with its `pending`, P and the probabilities passed through it), the rescale of O (and P
packed as P.V's A operand), the late release of V, the waits for K and V on their full
mbarriers, ping-pong's turns, the two async GEMMs (each one wgmma group; wgmma.fence,
with the step's slots and tile_skip answer, before the first of them), the landing of S,
the releases of K (and with persistent CTAs Q), the scores and the softmax. So moving an
op -- the wait for V above the wait for K, P.V issued before QK^T with S landed at
`pending = 0` -- is another kernel, once attn-verify-pipeline, which the lowering runs
first, found it sound. What stays the plan's: which ops a trip has (one of each, the
hooks where the analysis put them, the releases the verifier checks and, with persistent
CTAs, Q's, which it cannot see; no op without a pattern), that the loops of one kind have
one trip over a key range of several segments (over one, the top and the bottom mixed
loops each have their own: `check_trips_by_kind` in kv_steps.py), how values flow between them, the async GEMMs, and which carried
values are the K and V rings (the lowering takes a step's slots from its index, the
verifier from the rings, so the two must not part). The two consumer warpgroups run one
program: their trips must be the same ops in the same order. The first step before the
loops (K's wait, QK^T alone, S landed, K released, the scores and softmax) and the last
P.V after them (O landed and scaled, V's wait, P.V, O landed, with persistent CTAs the
last two V slots released) are built from their ops likewise, with the trips' patterns
where the op is a trip's, and checked the same way; but a persistent kernel without
ping-pong issues its first QK^T before the previous block's epilogue (Note [The next
block's first QK^T] in sm90a_ws.py; in the IR, Note [The next block's first QK^T in
the IR] in attnc/schedule/walk_ahead.py), builds its first step as that note says and
refuses one whose ops differ from attn-overlap-gemms' (but for the hooks). The
loops around the trips are the kernel's, and `check_key_range` checks what it takes as
its own (the range's test, one block a step, the rings' stages); everything else --
before the key range (Q's wait), in the range's else branch, between its loops and
after it (the epilogue), a persistent CTA's walk -- is checked op by op (role_shell.py,
Notes [Roles followed in full] in attnc/ir/roles.py and [The walk followed in full] in
role_shell.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir

from attnc.backend.kv_steps import StepOp, as_written, body_of, check_hooks, check_trips_by_kind, step_op
from attnc.backend.role_shell import check_consumer, check_shell, finishes_previous
from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.ir.ops import cmpi_predicate, int_constant
from attnc.passes.tile_program import KV_LOOP

NOTE = "Note [Overlapped steps op by op]"
# The carried values of a trip, as attn-overlap-gemms orders them (after the block index).
M, L, O, P, FACTOR, K_STAGE, K_PHASE, V_STAGE, V_PHASE, V_PREVIOUS, STEP = range(11)


@dataclass(frozen=True)
class WgmmaSteps:
    """The trips of a consumer role's KV loops in program order, (kv_blocks, ops), and
    the ops of the first step before them and of the last P.V after them."""

    loops: tuple[tuple[str, tuple[StepOp, ...]], ...]
    first: tuple[StepOp, ...] = ()
    last: tuple[StepOp, ...] = ()
    # With ping-pong: (id, threads) of consumer0's turn barrier and of consumer1's (Note
    # [Turns as planned])
    turns: tuple[tuple[int, int], ...] = ()

    def body(self, mode: str, top: bool = True) -> tuple[StepOp, ...]:
        return body_of(self.loops, mode, top)

    @staticmethod
    def default(pingpong: bool = False, persistent: bool = False) -> "WgmmaSteps":
        """What attn-overlap-gemms writes, with a score_mod and a mask."""
        turn = (StepOp("turn_sync"),) if pingpong else ()
        end = (StepOp("turn_arrive"),) if pingpong else ()
        scores = (*((StepOp("release_q"),) if persistent else ()), StepOp("score_mod"), StepOp("mask"),
                  StepOp("softmax_step"))
        ops = (StepOp("land_o"), StepOp("rescale"), StepOp("release_v_late"), StepOp("wait", "k"),
               StepOp("read", "k"), StepOp("wait", "v"), StepOp("read", "v"), *turn, StepOp("mma", "qk"),
               StepOp("mma", "pv"), *end, StepOp("land_s", count=1), StepOp("release_k"), *scores)
        # Note [The next block's first QK^T in the IR] (attnc/schedule/walk_ahead.py)
        ahead = (StepOp("finish_previous"),) if persistent and not pingpong else ()
        first = (StepOp("wait", "k"), StepOp("read", "k"), *turn, StepOp("mma", "qk"), *end, *ahead,
                 StepOp("land_s"), StepOp("release_k"), *scores)
        last = (StepOp("land_o"), StepOp("rescale"), StepOp("wait", "v"), StepOp("read", "v"), *turn,
                StepOp("mma", "pv"), *end, StepOp("land_pv"),
                *((StepOp("release_v_before"), StepOp("release_v")) if persistent else ()))
        return WgmmaSteps((("all", ops),), first, last, ((1, 256), (2, 256)) if pingpong else ())


def wgmma_steps(kernel) -> WgmmaSteps:
    """The trips of the consumer roles of `kernel` (L5, overlapped), checked (Note
    [Overlapped steps op by op])."""
    bars = {R.name_of(b): R.attrs_of(b) for b in R.mbarrier_ops(kernel)}
    persistent = R.is_persistent(kernel)
    hooks = {"score_mod": R.attrs_of(kernel).get("has_score_mod", False),
             "mask": R.attrs_of(kernel).get("has_mask_mod", False)}
    found = []
    for role in R.role_ops(kernel):
        if not R.name_of(role).startswith("consumer"):
            continue
        loops = [op for op in R.ops_in(R.role_block(role), ("scf.for",)) if KV_LOOP in op.attributes]
        trips = tuple((R.value_of(loop.attributes[KV_LOOP]), _trip(loop, bars, persistent, hooks)) for loop in loops)
        check_trips_by_kind(trips, loops, NOTE, kernel)
        steps = WgmmaSteps(trips, *_around(loops, bars, persistent, hooks, kernel))
        if found and as_written(steps) != as_written(found[0][1]):
            raise error_at(role, f"the consumer warpgroups run one program, and the KV steps of role "
                                 f"'{R.name_of(role)}' differ from those of '{found[0][0]}' ({NOTE})")
        found.append((R.name_of(role), steps))
    steps = found[0][1]
    pingpong = bool(R.attrs_of(R.warp_specialize_of(kernel)).get(R.PINGPONG, False))
    hooks_ops = ("score_mod", "mask", "block_map_read")
    if not (persistent and not pingpong) and any(op.name == "finish_previous" for op in steps.first):
        raise error_at(R.role_ops(kernel)[1], f"only persistent CTAs without ping-pong run the previous block's "
                                              f"epilogue in a block's first step (Note [The next block's first "
                                              f"QK^T in the IR] in attnc/schedule/walk_ahead.py) ({NOTE})")
    if persistent and not pingpong and [op for op in steps.first if op.name not in hooks_ops] != \
            [op for op in WgmmaSteps.default(False, True).first if op.name not in hooks_ops]:
        # Note [The next block's first QK^T] (sm90a_ws.py): that first step is the kernel's.
        raise error_at(R.role_ops(kernel)[1], f"persistent CTAs without ping-pong issue a block's first QK^T "
                                              f"before the previous block's epilogue, and build its first step as "
                                              f"attn-overlap-gemms writes it; this one's ops differ ({NOTE})")
    return replace(steps, turns=turns_of(kernel, pingpong))


# Note [Turns as planned]: with ping-pong the two consumer warpgroups take turns on two
# named barriers (Note [Ping-pong turns] in attnc/schedule/sync.py), each syncing on its
# own and arriving on the other's; the kernel uses the ids and thread counts of the
# attn.named_barrier ops, which attn-verify-pipeline checks against the threads that
# reach them. A plan that uses named barriers otherwise, or `pingpong` without them, is
# refused at the op.
def turns_of(kernel, pingpong: bool) -> tuple[tuple[int, int], ...]:
    """(id, threads) of consumer0's turn barrier and of consumer1's, () without ping-pong."""
    named = {R.name_of(role): R.ops_in(R.role_block(role), (R.NAMED_BARRIER_SYNC, R.NAMED_BARRIER_ARRIVE))
             for role in R.role_ops(kernel)}
    if not pingpong:
        for ops in named.values():
            if ops:
                raise error_at(ops[0], "only ping-pong's consumer warpgroups take turns on named barriers, and "
                                       "attn.warp_specialize has no `pingpong` (Note [Turns as planned])")
        return ()
    for name, ops in named.items():
        if name not in ("consumer0", "consumer1") and ops:
            raise error_at(ops[0], f"role '{name}' takes turns on a named barrier; only the two consumer "
                                   f"warpgroups of ping-pong do (Note [Turns as planned])")
    own, other, threads = {}, {}, {}
    for name in ("consumer0", "consumer1"):
        ops = named.get(name, [])
        role = next((r for r in R.role_ops(kernel) if R.name_of(r) == name), kernel)
        syncs = {R.attrs_of(o)["id"] for o in ops if o.name == R.NAMED_BARRIER_SYNC}
        arrives = {R.attrs_of(o)["id"] for o in ops if o.name == R.NAMED_BARRIER_ARRIVE}
        if len(syncs) != 1 or len(arrives) != 1 or syncs == arrives:
            raise error_at(ops[0] if ops else role,
                           f"with `pingpong` role '{name}' syncs on its own named barrier and arrives on the other "
                           f"warpgroup's; it syncs on {sorted(syncs)} and arrives on {sorted(arrives)} (Note "
                           f"[Turns as planned])")
        own[name], other[name] = syncs.pop(), arrives.pop()
        for o in ops:
            a = R.attrs_of(o)
            if not 1 <= a["id"] <= 15:
                raise error_at(o, f"named barrier {a['id']}: the kernel's turns take ids 1 to 15 (0 is the CTA's)")
            if threads.setdefault(a["id"], a["threads"]) != a["threads"]:
                raise error_at(o, f"named barrier {a['id']} counts {a['threads']} threads here and "
                                  f"{threads[a['id']]} elsewhere: a barrier has one count")
    if own["consumer0"] != other["consumer1"] or own["consumer1"] != other["consumer0"]:
        raise error_at(named["consumer1"][0], f"role 'consumer1' arrives on {other['consumer1']} and syncs on "
                                              f"{own['consumer1']}; consumer0 syncs on {own['consumer0']} and "
                                              f"arrives on {other['consumer0']}: each arrives on the other's "
                                              f"(Note [Turns as planned])")
    return tuple((own[name], threads[own[name]]) for name in ("consumer0", "consumer1"))


def _trip(loop, bars: dict, persistent: bool, hooks: dict) -> tuple[StepOp, ...]:
    block = loop.regions[0].blocks[0]
    args = list(block.arguments)[1:]
    if len(args) != 11:
        raise error_at(loop, f"a consumer's overlapped KV loop carries m, l, O, P, the factor, the K and V "
                             f"rings, V's previous stage and the step count, as attn-overlap-gemms makes it "
                             f"({NOTE})")
    out: list[StepOp] = []
    seen: dict[str, ir.Operation] = {}
    for op in block.operations:
        op = op.operation
        step = _step_op(op, bars, args)
        if step is None:
            continue
        key = f"{step.name} {step.what}".strip()
        if key in seen:
            raise error_at(op, f"a KV step has one {key} ({NOTE})")
        seen[key] = op
        out.append(step)
    # Q's slot released after the block's last QK^T: the verifier runs one query block and
    # cannot see a persistent CTA's next block wait for it.
    for needed in ("land_o", "rescale", "wait k", "wait v", "read k", "read v", "mma qk", "mma pv", "land_s",
                   "softmax_step", *(("release_q",) if persistent else ())):
        if needed not in seen:
            raise error_at(loop, f"this KV loop has no {needed} op, which an overlapped step has ({NOTE})")
    kind = R.value_of(loop.attributes[KV_LOOP])
    check_hooks(seen, hooks, kind, loop, "this KV loop", NOTE)
    _check_flow(seen, args, list(block.operations)[-1], loop)
    return tuple(out)


def _step_op(op, bars: dict, args: list) -> StepOp | None:
    """The step op of `op`; None for one that lowers to nothing; refused where none."""
    name = op.name
    if name in (R.RING_ADVANCE, "scf.yield") or (name.startswith("arith.") and not op.regions):
        return None
    if name == R.MMA_WAIT:
        pending = int(R.attrs_of(op)["pending"])
        return StepOp("land_o" if list(op.operands) == [args[O]] else "land_s", count=pending)
    if name == "attn.mma":
        kind = R.attrs_of(op).get("kind")
        if kind not in ("qk", "pv"):
            raise error_at(op, f"an overlapped step's GEMMs are QK^T and P.V, not {kind!r} ({NOTE})")
        if "async" not in op.attributes:
            raise error_at(op, f"the overlapped steps' GEMMs are async (wgmma groups landed by {R.MMA_WAIT}) "
                               f"({NOTE})")
        return step_op(op, "mma", kind)
    if name in (R.MBARRIER_WAIT, R.SLOT_READ):
        tile = tile_of(op, bars, "full")
        stage = args[K_STAGE if tile == "k" else V_STAGE]
        if tile not in ("k", "v") or op.operands[1] != stage or (name == R.MBARRIER_WAIT and op.operands[2] !=
                                                                  args[K_PHASE if tile == "k" else V_PHASE]):
            raise error_at(op, f"a step waits for and reads K and V at the stages of their rings, carried by the "
                               f"loop ({NOTE})")
        return StepOp("wait" if name == R.MBARRIER_WAIT else "read", tile)
    if name == R.MBARRIER_ARRIVE and tile_of(op, bars, "empty") == "k" and op.operands[1] == args[K_STAGE]:
        return StepOp("release_k")
    if name == "scf.if":
        arrive, test = _only_arrive(op), op.operands[0].owner
        counted = getattr(test, "name", "") == "arith.cmpi" and test.operands[0] == args[STEP]
        if arrive is not None and counted:
            predicate = cmpi_predicate(test)
            if (tile_of(arrive, bars, "empty") == "v" and arrive.operands[1] == args[V_PREVIOUS]
                    and predicate == "sge" and int_constant(test.operands[1]) == 2):
                return StepOp("release_v_late")
            if bars[bar_of(arrive)].get("channel") == "q" and bars[bar_of(arrive)].get("side") == "empty" \
                    and predicate == "eq":
                return StepOp("release_q")
    if name in (R.NAMED_BARRIER_SYNC, R.NAMED_BARRIER_ARRIVE):
        return StepOp("turn_sync" if name == R.NAMED_BARRIER_SYNC else "turn_arrive")
    if name in ("attn.rescale", "attn.softmax_step", "attn.score_mod", "attn.mask", "attn.block_map_read"):
        return step_op(op, name.removeprefix("attn."))
    raise error_at(op, f"the sm_90a lowering has no pattern for {name} in an overlapped KV step ({NOTE})")


def _around(loops: list, bars: dict, persistent: bool, hooks: dict, kernel) -> tuple[tuple, tuple]:
    """The first step before the KV loops and the last P.V after them, in the scf.if over
    the key range, checked for their ops, rings and data flow (Note [Overlapped steps op
    by op])."""
    around = Around(loops, kernel, NOTE, "a consumer's", K_STAGE)
    check_consumer(around.range_if, bars, bool(R.attrs_of(R.warp_specialize_of(kernel)).get(R.PINGPONG, False)))
    first = _first(around.before, bars, list(around.k_ring.operands), around.init, around.start_values, persistent,
                   hooks, around.kind, loops[0])
    last = _last(around.after, bars, around.results, persistent, loops[-1])
    return first, last


class Around:
    """The scf.if over the key range that sm_90a's overlapped KV loops `loops` stand in,
    as attn-overlap-gemms makes it (checked with `check_key_range`): its ops before the
    first loop and after the last, the loops' first carried values and last results, m,
    l and O as the range yields them without a step (its else branch), the K ring the
    first loop starts from (advanced past the first step's: the carried value at `k_ring`),
    and the first step's kind of block."""

    def __init__(self, loops: list, kernel, note: str, whose: str, k_ring: int):
        first_loop, last_loop = loops[0], loops[-1]
        parent = first_loop.operation.parent
        if parent is None or parent.name != "scf.if" or last_loop.operation.parent != parent:
            raise error_at(first_loop, f"{whose} overlapped KV loops stand in one scf.if over the key range, as "
                                       f"attn-overlap-gemms makes them ({note})")
        check_key_range(parent, loops, kernel, note)
        ops = [op.operation for op in parent.regions[0].blocks[0].operations]
        start = next(k for k, op in enumerate(ops) if op == first_loop.operation)
        end = next(k for k, op in enumerate(ops) if op == last_loop.operation)
        self.before, self.after = ops[:start], ops[end + 1:]
        self.init, self.results = list(first_loop.operands)[3:], list(last_loop.results)
        else_ops = list(parent.regions[1].blocks[0].operations) if parent.regions[1].blocks else []
        self.start_values = list(else_ops[-1].operands) if else_ops else []
        if len(self.start_values) not in (3, 5) or self.init[O] != self.start_values[O]:
            raise error_at(parent, f"the overlapped steps start O as the range yields it without a step ({note})")
        self.k_ring = self.init[k_ring].owner
        if getattr(self.k_ring, "name", "") != R.RING_ADVANCE:
            raise error_at(first_loop, f"{whose} first overlapped KV loop starts K's ring a stage past the first "
                                       f"step's ({note})")
        kinds = [R.value_of(loop.attributes[KV_LOOP]) for loop in loops]
        self.kind = "mixed" if "mixed" in kinds else kinds[0]        # the first step's block may be any
        self.range_if = parent
        check_shell(parent, loops)


def _first(ops: list, bars: dict, ring: list, init: list, start_values: list, persistent: bool, hooks: dict,
           kind: str, where):
    seen: dict[str, ir.Operation] = {}
    out = around_ops(ops, seen, "first step", lambda op: _first_op(op, bars, ring))
    needed = ("wait k", "read k", "mma qk", "land_s", "release_k", "softmax_step", *(("release_q",) if persistent
                                                                                      else ()))
    require(seen, needed, where, "first step")
    check_hooks(seen, hooks, kind, where, "the first step", NOTE)
    qk, softmax = seen["mma qk"], seen["softmax_step"]
    chain = [seen["land_s"]] + [seen[k] for k in ("score_mod", "mask") if k in seen]
    flows = [
        (qk.operands[1] == seen["read k"].result and _reads_q(qk.operands[0]), qk),
        (list(seen["land_s"].operands) == [qk.result], seen["land_s"]),
        (all(op.operands[0] == before.results[0] for before, op in zip(chain, chain[1:] + [softmax])), softmax),
        (list(softmax.operands)[1:] == start_values[M:O], softmax),
        ([init[M], init[L], init[P], init[FACTOR]] == [softmax.results[k] for k in (1, 2, 0, 3)], softmax),
    ]
    _flows(flows, "first step")
    return out


def _first_op(op, bars: dict, ring: list) -> StepOp | None:
    name = op.name
    if name == R.MMA_WAIT:
        return StepOp("land_s", count=int(R.attrs_of(op)["pending"]))
    if name in (R.MBARRIER_WAIT, R.SLOT_READ) and tile_of(op, bars, "full") == "k":
        if op.operands[1] != ring[0] or (name == R.MBARRIER_WAIT and op.operands[2] != ring[1]):
            raise error_at(op, f"the first step waits for and reads K at the stage its ring starts from ({NOTE})")
        return StepOp("wait" if name == R.MBARRIER_WAIT else "read", "k")
    if name == R.MBARRIER_ARRIVE and tile_of(op, bars, "empty") == "k" and op.operands[1] == ring[0]:
        return StepOp("release_k")
    if name == "scf.if" and finishes_previous(op):
        return StepOp("finish_previous")
    if name == "scf.if":
        arrive = _only_arrive(op)
        test = op.operands[0].owner
        if arrive is not None and bars[bar_of(arrive)].get("channel") == "q" and \
                bars[bar_of(arrive)].get("side") == "empty" and getattr(test, "name", "") == "arith.cmpi" \
                and cmpi_predicate(test) == "eq" and int_constant(test.operands[1]) == 1:
            return StepOp("release_q")
    return _common_op(op, "qk")


def _last(ops: list, bars: dict, results: list, persistent: bool, where):
    seen: dict[str, ir.Operation] = {}
    out = around_ops(ops, seen, "last P.V", lambda op: _last_op(op, bars, results))
    needed = ("land_o", "rescale", "wait v", "read v", "mma pv", "land_pv",
              *(("release_v_before", "release_v") if persistent else ()))
    require(seen, needed, where, "last P.V")
    pv, rescale, landed = seen["mma pv"], seen["rescale"], seen["land_pv"]
    terminator = ops[-1]
    flows = [
        (list(rescale.operands) == [seen["land_o"].result, results[FACTOR]], rescale),
        (list(pv.operands) == [results[P], seen["read v"].result, rescale.result], pv),
        (list(landed.operands) == [pv.result], landed),
        (terminator.name == "scf.yield" and list(terminator.operands)[:3] == [results[M], results[L], landed.result]
         and _ring_on(list(terminator.operands)[3:], results), terminator),
    ]
    _flows(flows, "last P.V")
    return out


def _ring_on(ring: list, results: list) -> bool:
    """What the last P.V carries on of the ring: nothing, or (persistent CTAs: Note [The
    walk over query blocks] in attnc/schedule/walk.py) V's ring past it."""
    return not ring or (len(ring) == 2 and advances(ring[0], results[V_STAGE], results[V_PHASE])
                        and ring[1] == ring[0].owner.results[1])


def _last_op(op, bars: dict, results: list) -> StepOp | None:
    name = op.name
    if name == R.MMA_WAIT:
        kind = "land_o" if list(op.operands) == [results[O]] else "land_pv"
        return StepOp(kind, count=int(R.attrs_of(op)["pending"]))
    if name in (R.MBARRIER_WAIT, R.SLOT_READ) and tile_of(op, bars, "full") == "v":
        if op.operands[1] != results[V_STAGE] or (name == R.MBARRIER_WAIT and op.operands[2] != results[V_PHASE]):
            raise error_at(op, f"the last P.V waits for and reads V at the stage of its ring the loops carry out "
                               f"({NOTE})")
        return StepOp("wait" if name == R.MBARRIER_WAIT else "read", "v")
    if name == R.MBARRIER_ARRIVE and tile_of(op, bars, "empty") == "v" and op.operands[1] == results[V_STAGE]:
        return StepOp("release_v")
    if name == "scf.if":
        arrive = _only_arrive(op)
        test = op.operands[0].owner
        if arrive is not None and tile_of(arrive, bars, "empty") == "v" and arrive.operands[1] == results[V_PREVIOUS] \
                and getattr(test, "name", "") == "arith.cmpi" and cmpi_predicate(test) == "sge" \
                and int_constant(test.operands[1]) == 2:
            return StepOp("release_v_before")
    if name == "attn.rescale":
        return StepOp("rescale")
    return _common_op(op, "pv")


def _common_op(op, kind: str) -> StepOp | None:
    """The turns, the GEMM of `kind` (async) and the score ops, else None."""
    name = op.name
    if name in (R.NAMED_BARRIER_SYNC, R.NAMED_BARRIER_ARRIVE):
        return StepOp("turn_sync" if name == R.NAMED_BARRIER_SYNC else "turn_arrive")
    if name == "attn.mma" and R.attrs_of(op).get("kind") == kind:
        if "async" not in op.attributes:
            raise error_at(op, f"the overlapped steps' GEMMs are async (wgmma groups landed by {R.MMA_WAIT}) "
                               f"({NOTE})")
        return step_op(op, "mma", kind)
    if kind == "qk" and name in ("attn.softmax_step", "attn.score_mod", "attn.mask", "attn.block_map_read"):
        return step_op(op, name.removeprefix("attn."))
    return None


def around_ops(ops: list, seen: dict, where: str, step_of, whose: str = "a consumer's",
               note: str = NOTE) -> tuple[StepOp, ...]:
    """The step ops `step_of` makes of `ops` (the first step's or the last P.V's: `where`),
    one of each, recorded in `seen`; index arithmetic, ring advances and the terminator
    lower to nothing, and an op without a step (None) is refused at it."""
    out: list[StepOp] = []
    for op in ops:
        if op.name in (R.RING_ADVANCE, "scf.yield") or (op.name.startswith("arith.") and not op.regions):
            continue
        step = step_of(op)
        if step is None:
            raise error_at(op, f"the sm_90a lowering has no pattern for {op.name} in {whose} {where} ({note})")
        key = f"{step.name} {step.what}".strip()
        if key in seen:
            raise error_at(op, f"{whose} {where} has one {key} ({note})")
        seen[key] = op
        out.append(step)
    return tuple(out)


def require(seen: dict, needed: tuple, where, what: str, whose: str = "a consumer's", note: str = NOTE) -> None:
    for key in needed:
        if key not in seen:
            raise error_at(where, f"{whose} {what} has a {key} op, and this one has none ({note})")


def _flows(flows: list, what: str) -> None:
    for ok, op in flows:
        if not ok:
            raise error_at(op, f"the sm_90a lowering builds the data flow of a consumer's {what} as "
                               f"attn-overlap-gemms makes it, and this {op.name} differs ({NOTE})")


def _only_arrive(op):
    """The one mbarrier arrive of an scf.if without an else, or None."""
    inner = [o.operation for o in op.regions[0].blocks[0].operations][:-1]
    if len(inner) == 1 and inner[0].name == R.MBARRIER_ARRIVE and not op.regions[1].blocks:
        return inner[0]
    return None


def bar_of(op) -> str:
    return R.name_of(op.operands[0].owner)


def tile_of(op, bars: dict, side: str | None) -> str:
    """The K/V tile a slot read or write takes, or whose mbarrier of `side` an op is on
    ("" else)."""
    if op.name in (R.SLOT_READ, R.SLOT_WRITE):
        return ir.StringAttr(op.attributes["tile"]).value
    a = bars.get(bar_of(op), {})
    return a.get("tile", "") if a.get("channel") == "kv" and a.get("side") == side else ""


def _reads_q(value) -> bool:
    owner = value.owner
    return getattr(owner, "name", "") == R.SLOT_READ and ir.StringAttr(owner.attributes["tile"]).value == "q"


def check_key_range(scf_if, loops: list, kernel, note: str) -> None:
    """What the kernel builds of the scf.if over the key range and its loops as its own
    (Notes [Overlapped steps op by op], [Loads op by op]) stands as attn-overlap-gemms
    writes it: the range taken where it has a step (`total > 0`), each loop stepping one
    block, each ring advanced over the K/V channel's stages."""
    test = scf_if.operands[0].owner
    if getattr(test, "name", "") != "arith.cmpi" or cmpi_predicate(test) != "sgt" or \
            int_constant(test.operands[1]) != 0:
        raise error_at(scf_if, f"the kernel runs the steps of the key range where it has one: this scf.if "
                               f"tests total > 0, as attn-overlap-gemms writes it ({note})")
    for loop in loops:
        if int_constant(loop.operands[2]) != 1:
            raise error_at(loop, f"the kernel steps its KV loops one key block at a time ({note})")
    stages = next(R.attrs_of(c)["stages"] for c in R.channel_ops(kernel) if R.name_of(c) == "kv")
    for advance in R.ops_in(scf_if.regions[0].blocks[0], (R.RING_ADVANCE,)):
        if R.attrs_of(advance)["stages"] != stages:
            raise error_at(advance, f"the K and V rings run over the K/V channel's {stages} stages ({note})")


def advances(value, stage, phase) -> bool:
    """Whether `value` is the next stage of the ring at (stage, phase): a trip advances
    each ring once."""
    owner = value.owner
    return getattr(owner, "name", "") == R.RING_ADVANCE and list(owner.operands) == [stage, phase]


def _check_flow(seen: dict, args: list, terminator, loop) -> None:
    """The data flow attn-overlap-gemms makes: S from QK^T on the reads of Q and K,
    landed, through the score_mod and mask into the softmax with the carried m and l; O
    landed, rescaled by the carried factor, into P.V with the carried P and the read of
    V; the softmax's m, l, P and factor and P.V's O carried on."""
    qk, pv, softmax, rescale = seen["mma qk"], seen["mma pv"], seen["softmax_step"], seen["rescale"]
    chain = [seen["land_s"]] + [seen[k] for k in ("score_mod", "mask") if k in seen]
    flows = [
        (qk.operands[1] == seen["read k"].result and _reads_q(qk.operands[0]), qk),
        (list(seen["land_s"].operands) == [qk.result], seen["land_s"]),
        (all(op.operands[0] == before.results[0] for before, op in zip(chain, chain[1:] + [softmax])), softmax),
        (list(softmax.operands)[1:] == [args[M], args[L]], softmax),
        (list(rescale.operands) == [seen["land_o"].result, args[FACTOR]], rescale),
        (list(pv.operands) == [args[P], seen["read v"].result, rescale.result], pv),
        (list(terminator.operands)[:5] == [softmax.results[1], softmax.results[2], pv.result, softmax.results[0],
                                           softmax.results[3]], terminator),
        (advances(terminator.operands[K_STAGE], args[K_STAGE], args[K_PHASE])
         and advances(terminator.operands[V_STAGE], args[V_STAGE], args[V_PHASE])
         and terminator.operands[V_PREVIOUS] == args[V_STAGE], terminator),
    ]
    for ok, op in flows:
        if not ok:
            raise error_at(op, f"the sm_90a lowering builds an overlapped step's data flow as attn-overlap-gemms "
                               f"makes it, and this {op.name} differs ({NOTE})")
