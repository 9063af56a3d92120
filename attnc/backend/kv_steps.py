"""sm_80's cooperative role as its lowering, which builds it op by op (sm80.py), reads it
from the L5 IR: the KV loops' steps, and the ops before them (`kv_steps`).

Note [Steps op by op]: sm_80's KV step is lowered from the ops of its KV loop's body, in
the order they stand there: a pattern per op (sm80.py's `STEP_PATTERNS`), so a
reordered body -- a wait moved, the rescale before the V wait -- or an edited wait
(`pending`) is a different kernel. The lowering checks what stands in a KV loop
(`kv_steps`) and builds it (Note [Roles followed in full] in attnc/ir/roles.py). What
stays fixed:

  * the ops: one QK^T and one P.V, reads of Q, K and V, loads of K and V (of the step's
    block, from the kernel's K and V), the softmax step and the rescale, the score_mod
    and mask where the variant has them (the mask but in a loop of full blocks), and
    cp.async waits, CTA barriers and commits; no op without a pattern;
  * how values flow: QK^T on the reads of Q and K; the score_mod and mask on S in that
    order; the softmax on them and the carried m and l; the rescale of the carried O by
    the softmax's alpha; P.V on the softmax's P, the read of V and the rescaled O; m, l
    and O carried from -inf, 0 and 0 through the KV loops in turn;
  * how far ahead each load is (V S - 1 steps, K S): a load `ahead` a steps fills the
    slot of step t + a, where the verifier sees the slot its ring value names, so the
    two must not part; the reads of K and V read the slot of step t, one ring stage.

Anything else is refused at its op. The synchronization as it stands -- where the waits,
barriers and commits are, and the waits' `pending` -- is checked by attn-verify-pipeline,
which the lowering runs on the same IR first, so an unsound edit is refused at its op.
The loop structure around the bodies (the peeled first step of Note [Dead rows], the
partial, full and partial loops of the key range) is the kernel's: each of its loops is
built from the IR loop of its kind (`KvSteps.body`: the top partial steps from the first
mixed loop, the bottom ones from the last), and an IR loop of a kind the key range gives
no steps is not built; over several segments every loop of a kind must hold one trip
(`check_trips_by_kind`), and the loops Note [Key loops] in sm80.py merges must hold the
trip their merged loop is built from (`check_merged_trips`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace

from mlir import ir

from attnc.errors import AttncError
from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.ir.ops import cmpi_predicate, defining_op, int_constant
from attnc.passes.tile_program import KV_LOOP, first_kv_block, kv_block
from attnc.schedule.walk import PAIRS, walk_order

# The ops of a step body the lowering has patterns for, with the attribute each keeps
# (a tile, an operand or a GEMM's kind), and its count (`pending`, `ahead`).
_WHAT = {R.SLOT_READ: "tile", R.SLOT_WRITE: "tile", "attn.load": "operand", "attn.mma": "kind"}
COUNTS = {R.CP_ASYNC_WAIT: "pending", "attn.load": "ahead"}
_LOWERED = (R.CP_ASYNC_WAIT, R.CTA_BARRIER, R.SLOT_READ, R.SLOT_WRITE, R.CP_ASYNC_COMMIT, "attn.load", "attn.mma",
            "attn.score_mod", "attn.mask", "attn.softmax_step", "attn.rescale", "attn.block_map_read")
# Ops that lower to nothing: the ring's stage arithmetic (slots come from `ahead`), index
# arithmetic and the terminator.
_NOTHING = (R.RING_ADVANCE, "scf.yield")


@dataclass(frozen=True)
class StepOp:
    name: str           # the op's name without "attn."
    what: str = ""      # its tile, operand or GEMM kind
    count: int = 0      # a wait's `pending`, a load's `ahead`
    # The op's own kernel choices, ((attribute, value), ...): Note [Choices op by op] in
    # attnc/passes/kernel_choices.py. Not part of what the op is: a step's ops compare
    # without them.
    choices: tuple = field(default=(), compare=False)
    body: tuple = ()    # a branch's ops (a guessed first block's miss: Note [The guessed first block in the IR])

    def choice(self, attr: str):
        """The value of the op's choice `attr` (every op holds its own once the lowering
        has read the kernel: `with_choices`)."""
        for name, value in self.choices:
            if name == attr:
                return value
        raise AttncError(f"attn.{self.name} holds no {attr} (Note [Choices op by op])")


def step_op(op, name: str, what: str = "", count: int = 0) -> StepOp:
    """The StepOp of the IR op `op`, with the choices it holds."""
    from attnc.passes.kernel_choices import op_choices
    return StepOp(name, what, count, op_choices(op))


def _map(value, fn):
    """`value` (a StepOp, or tuples and records of them) with fn applied to every StepOp."""
    if isinstance(value, StepOp):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(_map(v, fn) for v in value)
    if is_dataclass(value):
        return replace(value, **{f.name: _map(getattr(value, f.name), fn) for f in fields(value)})
    return value


def with_choices(record, defaults: dict):
    """`record` (KvSteps, WgmmaSteps, CoopSteps or LoadSteps) with every op that lacks
    a choice of `defaults` ({(op name, what): {attribute: value}}) given it."""
    def filled(op: StepOp) -> StepOp:
        wanted = {**defaults.get((op.name, op.what), {}), **dict(op.choices)}
        return replace(op, choices=tuple(sorted(wanted.items()))) if wanted else op
    return _map(record, filled)


def check_hooks(seen: dict, hooks: dict, kind: str, where, what: str, note: str) -> None:
    """The variant's score_mod and mask ({"mask": wanted, ...}) stand where attn-tile and
    attn-analyze-masks put them in `what` (a KV loop, the first step: `where`, seen
    {"mask": op, ...}) of blocks of `kind` -- no mask in a full block's; `note` explains."""
    for hook, wanted in hooks.items():
        wanted = wanted and (hook != "mask" or kind != "full")
        if (hook in seen) != bool(wanted):
            raise error_at(seen.get(hook, where), f"{what} (of {kind} key blocks) has {'no' if wanted else 'an'} "
                                                  f"attn.{hook} op, and the kernel's steps of its kind "
                                                  f"{'apply it' if wanted else 'have none'}: the kernel applies "
                                                  f"the variant's hooks where attn-tile and attn-analyze-masks "
                                                  f"put them ({note})")


def check_trips_by_kind(trips, loops, note: str, kernel=None) -> None:
    """The kernel builds the partial steps at the top of its key range from the first
    mixed KV loop, those at the bottom from the last and its full steps from the full
    loop (`body_of`): over one segment those are the IR's loops, each with a trip of its
    own; over several (more than one full loop) it builds every loop of a kind from one
    trip, so they must hold the same (`trips`: (kv_blocks, ops) of each of `loops`); with
    `kernel`'s kv_loops below 3, the merged loops their merged loop's trip
    (`check_merged_trips`)."""
    count = R.attrs_of(kernel).get("kv_loops") if kernel is not None else None
    if count in (1, 2):         # (another value is refused where the lowering reads the choices)
        check_merged_trips(trips, loops, count)
    if sum(1 for kind, _ in trips if kind == "full") <= 1:
        return
    for (kind, ops), loop in zip(trips, loops):
        if as_written(ops) != as_written(next(o for k, o in trips if k == kind)):
            raise error_at(loop, f"over a key range of several segments the KV loops of one kind ({kind}) have the "
                                 f"same trip: the kernel builds them from one ({note})")


def check_merged_trips(trips, loops, count: int) -> None:
    """Note [Key loops] in sm80.py: a merged loop's steps are built from one IR loop's
    trip (`trips`: (kv_blocks, ops) of each of `loops`, in program order) -- with
    kv_loops `count` 1 every loop's, from the first mixed loop; with 2 the full loops' and
    the far edge's (the last mixed loop, where there are two), from the far edge's -- so
    the loops it takes in hold the same ops, but the mask and the block map's read in a
    loop of full blocks."""
    mixed = [k for k, (kind, _) in enumerate(trips) if kind == "mixed"]
    if not mixed or (count == 2 and len(mixed) < 2):
        return
    source = mixed[0] if count == 1 else mixed[-1]
    merged = range(len(trips)) if count == 1 else [k for k, (kind, _) in enumerate(trips)
                                                    if kind == "full" or k == source]
    what = "every step of the key range" if count == 1 else "the full and far edge's steps"
    source_ops = trips[source][1]
    for k in merged:
        kind, ops = trips[k]
        want = source_ops if kind != "full" else tuple(op for op in source_ops
                                                       if op.name not in ("mask", "block_map_read"))
        if as_written(ops) != as_written(want):
            raise error_at(loops[k], f"kv_loops={count} builds {what} from the {'first' if count == 1 else 'last'} "
                                     f"mixed KV loop's trip, and this {kind} loop holds another: give these KV "
                                     f"loops the same ops and choices, or kv_loops=3 (Note [Key loops] in sm80.py)")


def as_written(value):
    """`value` (StepOps, or tuples and records of them) with each op as all it holds, its
    choices too: what compares equal only where the kernel builds the same."""
    return _map(value, lambda op: (op.name, op.what, op.count, op.choices))


def choices_in(record, attr: str) -> set:
    """The values of choice `attr` the ops of `record` hold."""
    found: set = set()

    def note(op: StepOp) -> StepOp:
        found.update(value for name, value in op.choices if name == attr)
        return op
    _map(record, note)
    return found


@dataclass(frozen=True)
class KvSteps:
    """The bodies of a role's KV loops in program order: (kv_blocks, ops)."""

    loops: tuple[tuple[str, tuple[StepOp, ...]], ...]
    prologue: tuple[StepOp, ...] = ()       # the ops before the KV loops (Note [The role op by op]
                                            # in role_prologue.py)
    epilogue: tuple[StepOp, ...] = ()       # the finalize and the stores after them

    def body(self, mode: str, top: bool = True) -> tuple[StepOp, ...]:
        return body_of(self.loops, mode, top)

    @staticmethod
    def default(stages: int) -> "KvSteps":
        """The body attn-insert-pipelines makes (Note [cp.async prefetch] in
        attnc/schedule/prefetch.py), with a score_mod and a mask."""
        wait, bar = StepOp("cp_async_wait", count=2 * stages - 2), StepOp("cta_barrier")

        def load(tile, ahead):
            return [StepOp("load", tile, ahead), StepOp("slot_write", tile), StepOp("cp_async_commit")]
        head = [wait, bar, StepOp("slot_read", "k"), StepOp("slot_read", "q"), *load("v", stages - 1),
                StepOp("mma", "qk"), StepOp("score_mod"), StepOp("mask")]
        v_wait = [wait, bar, StepOp("slot_read", "v"), *load("k", stages)]
        softmax = [StepOp("softmax_step")]
        middle = v_wait + softmax if stages == 1 else softmax + v_wait
        body = tuple(head + middle + [StepOp("rescale"), StepOp("mma", "pv")])
        first = [StepOp("load", "q"), StepOp("slot_write", "q"), StepOp("cp_async_commit"), StepOp("kv_range")]
        for i in range(stages):
            first += load("k", i) + (load("v", i) if i < stages - 1 else [])
        return KvSteps((("all", body),), tuple(first))

    def in_default_order(self, stages: int) -> bool:
        """Whether every body has the ops of `default(stages)` in its order (the hooks'
        ops and the block map's read aside, which a body holds only where the variant has
        them)."""
        hooks = ("score_mod", "mask", "block_map_read")
        ops = [op for op in KvSteps.default(stages).loops[0][1] if op.name not in hooks]
        return all([op for op in body if op.name not in hooks] == ops for _, body in self.loops)


def body_of(loops, mode: str, top: bool = True) -> tuple[StepOp, ...]:
    """The ops of the kernel's `mode` steps ('partial': blocks the mask cuts or the ragged
    end of N; 'full'), from the IR loop of that kind among `loops` ((kv_blocks, ops) in
    program order) -- of two (a range's top and bottom partial blocks) the first in program
    order for `top`, whose blocks the walk visits first (Note [Key blocks top down] in
    attnc/passes/tile_program.py) -- or failing that of another kind."""
    kinds = ("mixed", "all", "full") if mode == "partial" else ("full", "all", "mixed")
    for kind in kinds:
        found = [ops for blocks, ops in loops if blocks == kind]
        if found:
            return found[0] if top else found[-1]
    raise AttncError("the role has no KV loop")


def kv_steps(role, kernel) -> KvSteps:
    """The KV loops' bodies of the cooperative role `role` of `kernel` (L5) and the ops
    before them, checked for the ops and the data flow the lowering builds, with the ops
    after them (Notes [Steps op by op] and [The role op by op] in role_prologue.py)."""
    stages = int(next(R.attrs_of(c)["stages"] for c in R.channel_ops(kernel) if R.name_of(c) == "kv"))
    hooks = {"attn.score_mod": R.attrs_of(kernel).get("has_score_mod", False),
             "attn.mask": R.attrs_of(kernel).get("has_mask_mod", False)}
    pairs = walk_order(role) == PAIRS           # Note [Two query blocks in the IR]
    ops = [op.operation for op in R.body_block(role).operations]
    at = [k for k, op in enumerate(ops) if op.name == "scf.for" and KV_LOOP in op.attributes]
    if not at:
        raise error_at(role, f"role '{R.name_of(role)}' has no KV loop (scf.for with {KV_LOOP})")
    if pairs:
        ops, at, moved = _before_loops(role, ops, at)
    loops, carried = [], None
    for k in at:
        op = ops[k]
        kind = R.value_of(op.attributes[KV_LOOP])
        body, positions = _body(op, kernel, stages, hooks, kind)
        _check_chain(op, positions, carried)
        carried = (op, positions)
        loops.append((kind, body))
    check_trips_by_kind(loops, [ops[k] for k in at], "Note [Steps op by op]", kernel)
    for op in ops[at[0]:at[-1]]:
        if op.name != "scf.for" and not op.name.startswith(ARITH):
            raise error_at(op, f"the sm_80 lowering builds the KV loops one after the other, with nothing but "
                               f"index arithmetic between them, not {op.name} (Note [The role op by op])")
    from attnc.backend.role_prologue import prologue_steps

    first = prologue_steps(ops[:at[0]], first_kv_block(ops[at[0]]), ops[at[0]], kernel, stages)
    if pairs:
        return KvSteps(tuple(loops), first, _pair_epilogue(role, moved, ops[at[-1] + 1:], carried))
    return KvSteps(tuple(loops), first, _check_epilogue(ops[at[-1] + 1:], carried, role))


# Note [The next block's loads in the IR] (attnc/schedule/walk_pairs.py), as the sm_80
# kernel of two query blocks per CTA builds it (Note [Two query blocks per CTA] in
# forward.py): in a round, the first loads, the epilogue of the last round's block, the
# KV loops, a wait for every copy and a CTA barrier; after the walk the last block's
# epilogue. Each epilogue is checked as the one-block kernel's, on the walk's carried O, m,
# l and the carried round's block.
PAIRS_NOTE = "Note [The next block's loads in the IR] in attnc/schedule/walk_pairs.py"


def _before_loops(role, ops: list, at: list) -> tuple[list, list, ir.Operation]:
    """A round's ops without the epilogue of the last round's block, which stands right
    before the first KV loop (index arithmetic aside); the loops' places; that epilogue."""
    k = at[0] - 1
    while k >= 0 and ops[k].name.startswith(ARITH):
        k -= 1
    moved = ops[k] if k >= 0 else None
    if moved is None or moved.name != "scf.if" or R.is_walk_branch(moved):
        raise error_at(ops[at[0]], f"a round of the pair's walk runs the last round's epilogue right before its "
                                   f"KV loops, in an scf.if over the carried round ({PAIRS_NOTE})")
    return ops[:k] + ops[k + 1:], [a - 1 for a in at], moved


def _pair_epilogue(role, moved, after: list, carried) -> tuple[StepOp, ...]:
    """The end of a round (a wait for every copy, a CTA barrier, the yield of the round and
    its last KV loop's m, l and O), the epilogue in it (`moved`) and after the walk."""
    loop, positions = carried
    body = [op for op in after if not op.name.startswith(ARITH)]
    names = [(op.name, str(R.attrs_of(op).get("pending", ""))) for op in body]
    branch = R.walk_branch(role)
    walk = branch.parent
    yielded = [loop.results[positions[k]] for k in (0, 1, 2)]
    args = list(walk.regions[0].blocks[0].arguments)
    if names != [(R.CP_ASYNC_WAIT, "0"), (R.CTA_BARRIER, ""), ("scf.yield", "")] or \
            list(body[-1].operands)[-4:] != [args[0], *yielded]:
        raise error_at(body[0] if body else loop, f"a round of the pair's walk ends after its KV loops with a "
                                                  f"wait for every copy and a CTA barrier, and gives the walk its "
                                                  f"round and the last KV loop's m, l and O ({PAIRS_NOTE})")
    _check_pair_walk(role, walk, branch)
    ends = [op.operation for op in walk.block.operations]
    last = next((op for op in ends[ends.index(walk) + 1:] if not op.name.startswith(ARITH)), None)
    if last is None or last.name != "scf.if":
        raise error_at(walk, f"the last block's epilogue follows the pair's walk, in an scf.if over its last "
                             f"round ({PAIRS_NOTE})")
    stray = [op for op in ends[:-1] if op not in (walk, last) and not op.name.startswith(ARITH)
             and op.name not in ("attn.fill", R.WALK_ROUNDS)]
    if stray:
        raise error_at(stray[0], f"around the pair's walk the role has its starting values and nothing else, not "
                                 f"{stray[0].name} ({PAIRS_NOTE})")
    steps = [_carried_epilogue(role, moved, args[-4], args[-3:]),
             _carried_epilogue(role, last, list(walk.results)[-4], list(walk.results)[-3:])]
    if as_written(steps[0]) != as_written(steps[1]):
        raise error_at(last, f"the epilogue after the pair's walk is the one in its rounds ({PAIRS_NOTE})")
    return steps[0]


def _check_pair_walk(role, walk, branch) -> None:
    """The walk over the pair in the role's region: its rounds 0 to attn.walk_rounds in
    steps of 1, each taking attn.walk_block of its round."""
    rounds = walk.operands[1].owner
    item = branch.operands[0].owner
    iv = walk.regions[0].blocks[0].arguments[0]
    if walk.parent != role or getattr(rounds, "name", "") != R.WALK_ROUNDS or \
            int_constant(walk.operands[0]) != 0 or int_constant(walk.operands[2]) != 1 or \
            list(item.operands) != [iv]:
        raise error_at(walk, f"the pair's walk runs its rounds from 0 to attn.walk_rounds in steps of 1, each "
                             f"taking attn.walk_block of its round, in the role's region ({PAIRS_NOTE})")
    ops = [op.operation for op in walk.regions[0].blocks[0].operations]
    other = [op.operation for op in branch.regions[1].blocks[0].operations] if branch.regions[1].blocks else []
    if [op for op in ops[:-1] if not op.name.startswith(ARITH)] != [item, branch] or \
            list(ops[-1].operands) != list(branch.results) or len(other) != 1 or \
            list(other[0].operands) != list(walk.regions[0].blocks[0].arguments)[1:]:
        raise error_at(walk, f"a round of the pair's walk takes its block, runs the program where there is one, "
                             f"carries what it yields on (and else what came in), and does nothing else "
                             f"({PAIRS_NOTE})")


def _carried_epilogue(role, branch, prev, mlo: list) -> tuple[StepOp, ...]:
    """`branch`: if prev >= 0, the epilogue of round prev's block from the carried m, l, O."""
    test = defining_op(branch.operands[0])
    ops = [op.operation for op in branch.regions[0].blocks[0].operations]
    item = ops[0] if ops else None
    if getattr(test, "name", "") != "arith.cmpi" or cmpi_predicate(test) != "sge" or \
            list(test.operands)[0] != prev or int_constant(test.operands[1]) != 0 or \
            getattr(item, "name", "") != R.WALK_BLOCK or list(item.operands) != [prev]:
        raise error_at(branch, f"the epilogue of the carried round's block runs where that round is >= 0, at its "
                               f"block (attn.walk_block of the round) ({PAIRS_NOTE})")
    m, l, o = mlo
    return check_epilogue(ops[1:-1], [o, m, l], role, False, PAIRS_NOTE, "the walk's carried values",
                          list(item.results)[1:4])


def pattern_op(op, quiet, lowered: tuple[str, ...], where: str, note: str):
    """(attributes, tile/operand/kind) of an op a pattern lowers; None for one that lowers
    to nothing (`quiet(name)`); refused at the op where no pattern takes it."""
    name = op.name
    if quiet(name):
        return None
    if name not in lowered:
        raise error_at(op, f"the cooperative role's lowering has no pattern for {name} {where} (Note [{note}])")
    attrs = R.attrs_of(op)
    return attrs, str(attrs.get(_WHAT.get(name, ""), ""))


def _check_epilogue(ops: list, carried, role) -> tuple[StepOp, ...]:
    """A wait for every copy, the finalize of the last loop's O, m and l, O's store and
    (with it) the LSE's: the finalize and the stores."""
    loop, positions = carried
    results = [loop.results[positions[2]], loop.results[positions[0]], loop.results[positions[1]]]
    return check_epilogue(ops, results, role, True, "Note [The role op by op]", "the last KV loop", block_of(role))


def block_of(role) -> list:
    """The CTA's block as the kernel's region takes it: (b, h, m_block), its arguments."""
    kernel = role.parent.parent
    return list(kernel.regions[0].blocks[0].arguments)


def check_epilogue(ops: list, results: list, role, wait: bool, note: str, source: str,
                   at: list) -> tuple[StepOp, ...]:
    """The ops after a role's key range (`ops`): with `wait` a wait for every copy, then the
    finalize of `results` (O, m and l, from `source`) with the block's head, O's store and
    (with it) the LSE's at the block `at` (b, h, m_block), as the kernels build their
    epilogue; refused at the first op that differs. The finalize and the stores, as step
    ops (O's store holds its choice `staged`: Note [Choices op by op])."""
    body = [op for op in ops if not op.name.startswith(ARITH) and op.name != R.YIELD]
    names = [(op.name, str(R.attrs_of(op).get("operand", R.attrs_of(op).get("pending", "")))) for op in body]
    wanted = [(R.CP_ASYNC_WAIT, "0")] if wait else []
    wanted += [("attn.finalize", ""), ("attn.store", "o")]
    if names not in (wanted, wanted + [("attn.store", "lse")]):
        first = "waits for every copy (pending = 0), " if wait else ""
        raise error_at(body[0] if body else role, f"after its key range the role {first}finalizes, and stores O, "
                                                  f"then the LSE ({note})")
    finalize = body[len(wanted) - 2]
    if list(finalize.operands) != [*results, at[1]]:
        raise error_at(finalize, f"the finalize takes O, m and l from {source}, and the block's head ({note})")
    for store, k in zip(body[len(wanted) - 1:], (0, 1)):
        if list(store.operands) != [finalize.results[k], *at]:
            raise error_at(store, f"the stores take O and the LSE from the finalize, at the block's (b, h, m_block) "
                                  f"({note})")
    return tuple(step_op(op, op.name.removeprefix("attn."), str(R.attrs_of(op).get("operand", "")))
                 for op in body[len(wanted) - 2:])


# Ops of other dialects a body may hold that lower to nothing of their own: index arithmetic
# (the lowering computes its blocks and slots itself).
ARITH = ("arith.",)
_ONE_EACH = ("attn.mma", "attn.load", R.SLOT_READ, R.SLOT_WRITE, "attn.score_mod", "attn.mask",
             "attn.softmax_step", "attn.rescale")
_TILES = {"attn.mma": ("qk", "pv"), "attn.load": ("k", "v"), R.SLOT_WRITE: ("k", "v"), R.SLOT_READ: ("q", "k", "v")}


def _body(loop, kernel, stages: int, hooks: dict, kind: str) -> tuple[tuple[StepOp, ...], tuple[int, ...]]:
    """The body's ops, and the positions of m, l and O among the loop's carried values."""
    block = loop.regions[0].blocks[0]
    made: dict = {}         # value -> (op name, what, result index)
    for i, arg in enumerate(block.arguments):
        made[arg] = ("arg", "", i)
    ops: list[StepOp] = []
    seen: dict[tuple[str, str], object] = {}
    for op in block.operations:
        op = op.operation
        found = pattern_op(op, lambda n: n in _NOTHING or (n.startswith(ARITH) and not op.regions), _LOWERED,
                            "in a KV loop", "Steps op by op")
        if found is None:
            continue
        (attrs, what), name = found, op.name
        if name in _TILES and what not in _TILES[name]:
            raise error_at(op, f"a KV step's {name} is of {' or '.join(_TILES[name])}, not {what!r} (Note "
                               f"[Steps op by op])")
        key = (name, what)
        if key in seen and name in _ONE_EACH:
            raise error_at(op, f"a KV step has one {name} {what}".rstrip() + " (Note [Steps op by op])")
        seen[key] = op
        check_flow(op, what, made)
        if name == "attn.load":
            _check_load(op, what, kernel, loop, stages)
        for k, result in enumerate(op.results):
            made[result] = (name, what, k)
        ops.append(step_op(op, name.removeprefix("attn."), what, int(attrs.get(COUNTS.get(name, ""), 0))))
    for needed in (("attn.mma", "qk"), ("attn.mma", "pv"), ("attn.softmax_step", ""), ("attn.rescale", ""),
                   (R.SLOT_READ, "q"), (R.SLOT_READ, "k"), (R.SLOT_READ, "v"), ("attn.load", "k"),
                   ("attn.load", "v"), (R.SLOT_WRITE, "k"), (R.SLOT_WRITE, "v")):
        if needed not in seen:
            raise error_at(loop, f"this KV loop has no {' '.join(needed).strip()}, which the lowering's step "
                                 f"needs (Note [Steps op by op])")
    check_hooks({h.removeprefix("attn."): op for (h, what), op in seen.items() if not what},
                {h.removeprefix("attn."): w for h, w in hooks.items()}, kind, loop, "this KV loop",
                "Note [Steps op by op]")
    _check_scores(seen)
    k_read, v_read = seen[(R.SLOT_READ, "k")], seen[(R.SLOT_READ, "v")]
    if k_read.operands[1] != v_read.operands[1]:
        raise error_at(v_read, "the step reads K and V from the slot of its own step: one ring stage (Note [Steps "
                               "op by op])")
    return tuple(ops), _check_carried(block, made)


def _check_load(op, what: str, kernel, loop, stages: int) -> None:
    """A step's load of K or V reads its tensor at the step's block, `ahead` as the plan
    has it (V's S - 1 steps, K's S: Note [cp.async prefetch]): the lowering takes the
    slot from `ahead`, the verifier from the rings, so the two must not part."""
    tensor = kernel.operands[1 if what == "k" else 2]
    if op.operands[0] != tensor or op.operands[3] != kv_block(loop):
        raise error_at(op, f"a KV step loads {what.upper()} from the kernel's {what} at the block of its own "
                           f"step (Note [Steps op by op])")
    ahead = int(R.attrs_of(op).get("ahead", -1))
    planned = stages if what == "k" else stages - 1
    if ahead != planned:
        raise error_at(op, f"ahead = {ahead}: with {stages} K/V stages a step loads {what.upper()} {planned} steps "
                           f"ahead, into the slot the ring frees there; another distance is another stage count "
                           f"(attn-tile{{stages}}) (Note [Steps op by op])")


def check_flow(op, what: str, made: dict) -> None:
    """The tile operands of `op` come from the ops attn-tile has them come from (the
    scores' chain aside: `_check_scores`)."""
    name = op.name
    if name == "attn.mma" and what == "qk":
        wants = [(R.SLOT_READ, "q", 0), (R.SLOT_READ, "k", 0)]
    elif name == "attn.mma":
        wants = [("attn.softmax_step", "", 0), (R.SLOT_READ, "v", 0), ("attn.rescale", "", 0)]
    elif name == "attn.softmax_step":
        wants = [None, "arg", "arg"]
    elif name == "attn.rescale":
        wants = ["arg", ("attn.softmax_step", "", 3)]
    elif name == R.SLOT_WRITE:
        wants = [None, None, ("attn.load", str(R.attrs_of(op).get("tile")), 0)]
    else:
        return
    for k, want in enumerate(wants):
        source = made.get(op.operands[k]) if k < len(op.operands) else None
        if want is not None and not (source is not None and (source[0] == "arg" if want == "arg" else source == want)):
            raise _flow_error(op, k)


def _check_scores(seen: dict) -> None:
    """S flows from QK^T through the score_mod, then the mask (those the body has) into
    the softmax."""
    chain = [seen[key] for key in (("attn.mma", "qk"), ("attn.score_mod", ""), ("attn.mask", "")) if key in seen]
    for before, op in zip(chain, chain[1:] + [seen[("attn.softmax_step", "")]]):
        if op.operands[0] != before.results[0]:
            raise _flow_error(op, 0)


def _flow_error(op, k: int):
    return error_at(op, f"the sm_80 lowering builds a KV step's data flow as attn-tile makes it, and operand "
                        f"{k} of this {op.name} is not what it reads there (Note [Steps op by op])")


def _check_carried(block, made: dict) -> tuple[int, ...]:
    """m, l and O go round the loop: the softmax's new m and l and P.V's O are yielded
    where the softmax and the rescale read them. Their positions among the carried values."""
    ops = [op.operation for op in block.operations]
    softmax = next(op for op in ops if op.name == "attn.softmax_step")
    rescale = next(op for op in ops if op.name == "attn.rescale")
    pv = next(op for op in ops if op.name == "attn.mma" and R.attrs_of(op).get("kind") == "pv")
    yielded = list(ops[-1].operands)
    carried = [(softmax.operands[1], softmax.results[1]), (softmax.operands[2], softmax.results[2]),
               (rescale.operands[0], pv.results[0])]
    positions = []
    for arg, new in carried:
        index = made[arg][2] - 1        # block argument 0 is the induction variable
        if index < 0 or yielded[index] != new:
            raise error_at(ops[-1], "the KV loop carries m, l and O from the softmax step and P.V to the next "
                                    "trip's softmax step and rescale (Note [Steps op by op])")
        positions.append(index)
    return tuple(positions)


# m starts at -inf, l and O at 0 (the values the kernel starts its steps with).
_START = (float("-inf"), 0.0, 0.0)


def is_fill(value, start: float) -> bool:
    """Whether `value` is an attn.fill of `start`."""
    owner = value.owner
    fill = getattr(owner, "name", "") == "attn.fill" and isinstance(owner.attributes["value"], ir.FloatAttr)
    return fill and ir.FloatAttr(owner.attributes["value"]).value == start


def _check_chain(loop, positions: tuple[int, ...], before) -> None:
    """The first KV loop starts m, l and O from attn.fill ops of -inf, 0 and 0, and each
    later one from where the loop before it left them."""
    for k, (at, start) in enumerate(zip(positions, _START)):
        init = loop.operands[3 + at]           # lower bound, upper bound, step, then the carried values
        if before is None:
            ok = is_fill(init, start)
        else:
            prev, prev_positions = before
            ok = init == prev.results[prev_positions[k]]
        if not ok:
            source = f"an attn.fill of {start}" if before is None else "the results of the KV loop before"
            raise error_at(loop, f"a KV loop starts {'mlO'[k]} from {source}, as the kernel's steps do (Note "
                                 f"[Steps op by op])")
