"""The KV step as a lowering that builds it op by op reads it from the L5 IR (sm80.py).

Note [Steps op by op]: sm_80's KV step is lowered from the ops of its KV loop's body, in
the order they stand there: a pattern per op (`Sm80Forward._lower_<op>`), so a
reordered body -- a wait moved, a load issued sooner, the rescale before the V wait --
is a different kernel, and so is an edited wait (`pending`) or load (`ahead`); the
lowering no longer compares the body with the plan's (Notes [Role programs] and [Role
schedules] in attnc/ir/roles.py leave out what stands in a KV loop on sm_80). What stays fixed is what the ops are and how values flow between
them: one QK^T and one P.V, reading the slots and the Q the step reads; the score_mod
and mask on S in that order; the softmax on them and the carried m and l; the rescale
of the carried O by the softmax's alpha; P.V on the softmax's P and the rescaled O. A
body that differs there is refused at the op, and so are ops the lowering has no
pattern for. The loop structure around the bodies (the peeled first step of Note [Dead
rows], the partial, full and partial loops of the key range) is the kernel's; each loop
is built from the IR loop of its kind (`KvSteps.body`).

The synchronization in a body -- cp.async waits with their `pending`, CTA barriers,
commits, how far ahead each load is -- is lowered as it stands, and the lowering has
attn-verify-pipeline's check run on the same IR first, so an unsound edit is refused at
its op. Slots are not read from the ring values: a load `ahead` a steps fills the slot
of step t + a, and the step reads K and V from the slot of step t, which are the rings'
stages there (the step's reads of K and V must read one stage).
"""
from __future__ import annotations

from dataclasses import dataclass

from attnc.errors import AttncError
from attnc.ir import error_at
from attnc.ir import roles as R

KV_LOOP = R.KV_LOOP
# The ops of a step body the lowering has patterns for, with the attribute each keeps
# (a tile, an operand or a GEMM's kind), and its count (`pending`, `ahead`).
_WHAT = {R.SLOT_READ: "tile", R.SLOT_WRITE: "tile", "attn.load": "operand", "attn.mma": "kind"}
_COUNT = {R.CP_ASYNC_WAIT: "pending", "attn.load": "ahead"}
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


@dataclass(frozen=True)
class KvSteps:
    """The bodies of a role's KV loops in program order: (kv_blocks, ops)."""

    loops: tuple[tuple[str, tuple[StepOp, ...]], ...]

    def body(self, mode: str, top: bool = True) -> tuple[StepOp, ...]:
        """The ops of the kernel's `mode` steps ('partial': blocks the mask cuts or the
        ragged end of N; 'full'), from the IR loop of that kind -- of two (a range's top
        and bottom partial blocks) the last in program order for `top`, whose blocks are
        the higher ones -- or failing that of another kind."""
        kinds = ("mixed", "all", "full") if mode == "partial" else ("full", "all", "mixed")
        for kind in kinds:
            found = [ops for blocks, ops in self.loops if blocks == kind]
            if found:
                return found[-1] if top else found[0]
        raise AttncError("the role has no KV loop")

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
        return KvSteps((("all", tuple(head + middle + [StepOp("rescale"), StepOp("mma", "pv")])),))

    def in_default_order(self, stages: int) -> bool:
        """Whether every body has the ops of `default(stages)` in its order (the hooks'
        ops and the block map's read aside, which a body holds only where the variant has
        them)."""
        hooks = ("score_mod", "mask", "block_map_read")
        ops = [op for op in KvSteps.default(stages).loops[0][1] if op.name not in hooks]
        return all([op for op in body if op.name not in hooks] == ops for _, body in self.loops)


def kv_steps(role) -> KvSteps:
    """The KV loops' bodies of the cooperative role `role` (L5), each checked for the ops
    and the data flow the lowering builds (Note [Steps op by op])."""
    loops = []
    for op in R.role_block(role).operations:
        op = op.operation
        if op.name == "scf.for" and KV_LOOP in op.attributes:
            loops.append((R.value_of(op.attributes[KV_LOOP]), _body(op)))
    if not loops:
        raise error_at(role, f"role '{R.name_of(role)}' has no KV loop (scf.for with {KV_LOOP})")
    return KvSteps(tuple(loops))


def _body(loop) -> tuple[StepOp, ...]:
    block = loop.regions[0].blocks[0]
    made: dict = {}         # value -> (op name, what, result index)
    for i, arg in enumerate(block.arguments):
        made[arg] = ("arg", "", i)
    ops: list[StepOp] = []
    seen: dict[tuple[str, str], object] = {}
    for op in block.operations:
        op = op.operation
        name = op.name
        if name in _NOTHING or (not name.startswith("attn.") and not op.regions):
            continue
        if name not in _LOWERED:
            raise error_at(op, f"the sm_80 lowering builds a KV step op by op and has no pattern for {name} "
                               f"in a KV loop (Note [Steps op by op])")
        attrs = R.attrs_of(op)
        what = str(attrs.get(_WHAT.get(name, ""), ""))
        key = (name, what)
        if key in seen and name in ("attn.mma", "attn.load", R.SLOT_READ, R.SLOT_WRITE, "attn.score_mod",
                                    "attn.mask", "attn.softmax_step", "attn.rescale"):
            raise error_at(op, f"a KV step has one {name} {what}".rstrip() + " (Note [Steps op by op])")
        seen[key] = op
        _check_flow(op, what, made)
        for k, result in enumerate(op.results):
            made[result] = (name, what, k)
        ops.append(StepOp(name.removeprefix("attn."), what, int(attrs.get(_COUNT.get(name, ""), 0))))
    for needed in (("attn.mma", "qk"), ("attn.mma", "pv"), ("attn.softmax_step", ""), ("attn.rescale", ""),
                   (R.SLOT_READ, "q"), (R.SLOT_READ, "k"), (R.SLOT_READ, "v")):
        if needed not in seen:
            raise error_at(loop, f"this KV loop has no {' '.join(needed).strip()}, which the lowering's step "
                                 f"needs (Note [Steps op by op])")
    _check_scores(seen, made)
    _check_carried(block, made)
    k_read, v_read = seen[(R.SLOT_READ, "k")], seen[(R.SLOT_READ, "v")]
    if k_read.operands[1] != v_read.operands[1]:
        raise error_at(v_read, "the step reads K and V from the slot of its own step: one ring stage (Note [Steps "
                               "op by op])")
    return tuple(ops)


def _check_flow(op, what: str, made: dict) -> None:
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


def _check_scores(seen: dict, made: dict) -> None:
    """S flows from QK^T through the score_mod, then the mask (those the body has) into
    the softmax."""
    chain = [seen[key] for key in (("attn.mma", "qk"), ("attn.score_mod", ""), ("attn.mask", "")) if key in seen]
    for before, op in zip(chain, chain[1:] + [seen[("attn.softmax_step", "")]]):
        source = made.get(op.operands[0])
        if source is None or source[:2] != (before.name, R.attrs_of(before).get("kind", "")) or source[2] != 0:
            raise _flow_error(op, 0)


def _flow_error(op, k: int):
    return error_at(op, f"the sm_80 lowering builds a KV step's data flow as attn-tile makes it, and operand "
                        f"{k} of this {op.name} is not what it reads there (Note [Steps op by op])")


def _check_carried(block, made: dict) -> None:
    """m, l and O go round the loop: the softmax's new m and l and P.V's O are yielded
    where the softmax and the rescale read them."""
    ops = [op.operation for op in block.operations]
    softmax = next(op for op in ops if op.name == "attn.softmax_step")
    rescale = next(op for op in ops if op.name == "attn.rescale")
    pv = next(op for op in ops if op.name == "attn.mma" and R.attrs_of(op).get("kind") == "pv")
    yielded = list(ops[-1].operands)
    carried = [(softmax.operands[1], softmax.results[1]), (softmax.operands[2], softmax.results[2]),
               (rescale.operands[0], pv.results[0])]
    for arg, new in carried:
        index = made[arg][2] - 1        # block argument 0 is the induction variable
        if index < 0 or yielded[index] != new:
            raise error_at(ops[-1], "the KV loop carries m, l and O from the softmax step and P.V to the next "
                                    "trip's softmax step and rescale (Note [Steps op by op])")
