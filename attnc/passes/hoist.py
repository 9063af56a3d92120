"""`attn-hoist`: place every value of the hooks at the level of what it reads (L2 -> L2).

Targets: all. Expects the tile program (attn-tile): attn.score_mod and attn.mask ops
holding their hook regions. Leaves each op of those regions (but the terminator) with
`attn.level`, where the kernel computes its value once (Note [Hoisted hook values] in
attnc/backend/hooks.py):

  * "cta": it reads b, h, the dims, params indexed by them, or nothing (`w[h]`, `P - 1`);
  * "row": it also reads i, one query row's (`doc[b, i]`);
  * "col": it also reads j, one key column's (`doc[b, j]`);
  * "score": it reads s, or both i and j (`j - i`, `s + w[h]`).

    before:  %w = "attn.param"(%slopes, %h)
             %x = arith.mulf %w, %d : f32
    after:   %w = "attn.param"(%slopes, %h) {attn.level = "cta"}
             %x = arith.mulf %w, %d {attn.level = "score"} : f32

It also records where the values of a diagonal stop changing (Note [Flat diagonals] in
attnc/ir/diagonals.py): on the op d = j - i (or i - j) of a score_mod that reads i and j
only through it, `attn.flat_below` and `attn.flat_above`, the d at and beyond which every
value computed from d (with b and h) that the rest of the hook reads is the same:

    after:   %d = arith.subi %j, %i {attn.flat_above = 92 : i64, attn.flat_below = -92 : i64,
                                     attn.level = "score"} : i32

Option `hoist=false` places every value at "score" (computed per score, as a hook
written out by hand would be), and records no flat diagonals; `flat=false` records none
(and drops those of an earlier run). A level can be edited finer than what the op reads
-- computed more often, e.g. "score" to keep a load per score -- but not coarser than
its operands' (i is not known once per CTA): the lowering refuses that at the op
(`check_levels`), as it refuses copies of a hook whose levels differ. A flat bound
edited farther from the diagonal, or removed, is followed; one nearer than the analysis
shows is refused at the op by the lowering. A mask the lowering compiles to a form that
other choices build on -- a key interval per row (interval_test, dead_rows), causal --
computes its values where that form does: its levels are checked, not followed. A bias
linear in j (ALiBi's) is computed per row in its own form only while no value of it is
placed finer than what it reads (Note [Bias linear in j] in attnc/backend/score_forms.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnc.passes.registry import Pass

LEVEL = "attn.level"
# The region arguments each level's values may read, by the hook's argument names.
LEVELS: dict[str, frozenset[str]] = {
    "cta": frozenset({"b", "h"}),
    "row": frozenset({"b", "h", "i"}),
    "col": frozenset({"b", "h", "j"}),
    "score": frozenset({"s", "b", "h", "i", "j"}),
}
PER = {"cta": "CTA", "row": "query row", "col": "key column", "score": "score"}
# The hook ops of the tile program and their regions' argument names.
HOOK_ARGS = {"attn.score_mod": ("s", "b", "h", "i", "j"), "attn.mask": ("b", "h", "i", "j")}


# Where attn-hoist{lanes} is on by default (Note [Diagonals across the warp] in warp_diagonals.py).
LANES_BY_DEFAULT = frozenset({"sm_80", "sm_90a"})
# Where a warp's lanes hold a tile's scores and may share their diagonals; on sm_100a a
# thread holds a row of scores (Note [Hoisted values of a row] in
# attnc/backend/sm100a_scores.py), and no lane shares them.
LANES_TARGETS = frozenset({"sm_80", "sm_90a"})


@dataclass(frozen=True)
class Hoist(Pass):
    """Place every value of the score_mod and mask hooks at the level of what it reads: per CTA, query row, key column or score; record where a hook's values of j - i stop changing."""

    name: ClassVar[str] = "attn-hoist"
    hoist: bool = field(default=True, metadata={
        "doc": "place values at the coarsest level their operands allow; false: every value per score "
               "(Note [Hoisted hook values] in attnc/backend/hooks.py)"})
    flat: bool | None = field(default=None, metadata={
        "doc": "record the diagonals beyond which a hook's values of d = j - i stop changing "
               "(attn.flat_below, attn.flat_above: Note [Flat diagonals] in attnc/ir/diagonals.py); a tile "
               "of scores beyond them computes those values once (default: with hoist; true is refused "
               "with hoist=false, which computes every value per score)"})
    lanes: bool | None = field(default=None, metadata={
        "doc": "near the flat diagonals, each lane of a warp computes the values of a few of its warp's "
               "diagonals and reads its own from the lanes that computed them (attn.flat_lanes on the op d: "
               "Note [Diagonals across the warp] in attnc/backend/warp_diagonals.py; sm_80 and sm_90a; refused "
               "without flat and on sm_100a, whose threads hold rows of scores); false: each lane computes "
               "those of its own scores (default: on for sm_80 and sm_90a, whose kernels ran as fast or "
               "faster with it; results/sm90a_h200.md and sm80_h200.md, \"Diagonals across the warp\")"})

    def run(self, module) -> None:
        from attnc.errors import AttncError

        if self.flat and not self.hoist:
            raise AttncError("flat=true: a tile beyond the flat diagonals computes their values once, and "
                             "hoist=false computes every value per score; give one or the other")
        flat = self.hoist and self.flat is not False
        if self.lanes and not flat:
            raise AttncError("lanes=true: the lanes share the values of the diagonals near the flat ones, and "
                             "there are none without flat (hoist=false or flat=false); give one or the other")
        hoist(module, self.hoist, flat, flat and self.lanes)


def hoist(module, coarsest: bool = True, flat: bool = True, lanes: bool | None = None) -> None:
    """`lanes` None: the target's default (LANES_BY_DEFAULT)."""
    from mlir import ir

    from attnc.ir import attention_ops, error_at, get_str
    from attnc.ir.kernel import program_ops

    for kernel in attention_ops(module):
        if kernel.name != "attn.kernel":
            raise error_at(kernel, "attn-hoist places the values of the tile program's hooks; run attn-tile first")
        target = get_str(kernel, "target")
        if lanes and target not in LANES_TARGETS:
            raise error_at(kernel, _lanes_refused("lanes=true", target))
        share = lanes if lanes is not None else flat and target in LANES_BY_DEFAULT
        with kernel.context:
            for name, holders in program_ops(kernel, HOOK_ARGS).items():
                for holder in holders:
                    block = holder.regions[0].blocks[0]
                    for op, level in placed_levels(block, HOOK_ARGS[name], given=False, coarsest=coarsest):
                        op.attributes[LEVEL] = ir.StringAttr.get(level)
                    mark_flat(block, HOOK_ARGS[name], flat and name == "attn.score_mod", share)


def mark_flat(block, names: tuple[str, ...], flat: bool = True, lanes: bool = False) -> None:
    """`attn.flat_below` and `attn.flat_above` on the op d of a hook region (Note [Flat
    diagonals]) where they hold (`flat`), with `attn.flat_lanes` where `lanes`, and nowhere
    else."""
    from mlir import ir

    from attnc.ir.diagonals import ABOVE, BELOW, LANES, diagonal_values, flat_bounds

    found = diagonal_values(block, names)
    if found is None:
        return
    root, i64 = found[0], ir.IntegerType.get_signless(64)
    bounds = flat_bounds(block, names) if flat else (None, None)
    for attr, bound in zip((BELOW, ABOVE), bounds):
        if bound is not None:
            root.attributes[attr] = ir.IntegerAttr.get(i64, bound)
        elif attr in root.attributes:
            del root.attributes[attr]
    if lanes and bounds != (None, None):
        root.attributes[LANES] = ir.UnitAttr.get()
    elif LANES in root.attributes:
        del root.attributes[LANES]


def check_levels(kernel) -> None:
    """Refuse levels the kernel cannot follow, at the op: a level that is none of LEVELS,
    one coarser than its operands', and copies of a hook (one per KV loop and role) whose
    ops or levels differ -- the kernel compiles each hook once, from its first copy."""
    from attnc.ir import error_at
    from attnc.ir.kernel import program_ops

    found = program_ops(kernel, (*HOOK_ARGS, FINALIZE))
    _check_lanes(kernel, found)
    for name in HOOK_ARGS:
        holders = found[name]
        first = shape = None
        for holder in holders:
            block = holder.regions[0].blocks[0]
            placed = placed_levels(block, HOOK_ARGS[name])
            if first is None:
                first, shape = placed, _shape(block)
                continue
            for op, mine, theirs in zip([*block.operations], _shape(block), shape):
                if mine != theirs:
                    raise error_at(op, f"this op of a copy of the {name} region differs from the first copy's: the "
                                       f"kernel computes each hook once, from its first copy, so its copies are alike")
            if len(_shape(block)) != len(shape):
                raise error_at(holder, f"this copy of the {name} region has other ops than the first copy: the kernel "
                                       f"computes each hook once, from its first copy, so its copies are alike")
            for (op, level), (_, theirs) in zip(placed, first):
                if level != theirs:
                    raise error_at(op, f'{LEVEL} = "{level}" here, "{theirs}" on the same value in the first {name}: '
                                       f"the kernel computes each hook once, so its copies place their values alike")
    _check_sinks(kernel, found[FINALIZE])


FINALIZE = "attn.finalize"


def _check_lanes(kernel, found: dict) -> None:
    """`attn.flat_lanes` only where the target's lanes may share the diagonals."""
    from attnc.ir import error_at, get_str
    from attnc.ir.diagonals import LANES

    target = get_str(kernel, "target")
    if target in LANES_TARGETS:
        return
    for root in _diagonal_roots(found):
        if LANES in root.attributes:
            raise error_at(root, _lanes_refused(LANES, target))


def lanes_shared(module) -> bool:
    """Whether a hook of a kernel of `module` has its lanes share the diagonals
    (`lanes_asked`): its sm_80 cubin is the one that spills less (Note [The assembly that
    spills less] in attnc/backend/cubin.py)."""
    from attnc.ir import attention_ops, get_str
    from attnc.ir.kernel import program_ops

    return any(lanes_asked(root, get_str(kernel, "target")) for kernel in attention_ops(module)
               for root in _diagonal_roots(program_ops(kernel, HOOK_ARGS)))


def lanes_asked(root, target: str | None) -> bool:
    """Whether the lanes share the values of the diagonals of a hook's op d `root`, in a
    kernel for `target`: as attn-hoist said (`attn.flat_lanes`), or where it did not run
    (no attn.level on d) as its default for the target would."""
    from attnc.ir.diagonals import LANES

    if LEVEL in root.attributes:
        return LANES in root.attributes
    return target in LANES_BY_DEFAULT


def _diagonal_roots(found: dict) -> list:
    """The op d of each hook region among `found` (program_ops') that has one."""
    from attnc.ir.diagonals import diagonal_values

    roots = []
    for name, holders in found.items():
        for holder in holders if name in HOOK_ARGS else ():
            values = diagonal_values(holder.regions[0].blocks[0], HOOK_ARGS[name])
            if values is not None:
                roots.append(values[0])
    return roots


def _lanes_refused(what: str, target: str) -> str:
    return (f"{what}: a thread of {target}'s kernel holds a row of scores, so its lanes have no diagonals to share; "
            f"the lanes share them on {' and '.join(sorted(LANES_TARGETS))} (Note [Diagonals across the warp] in "
            f"attnc/backend/warp_diagonals.py)")


def _check_sinks(kernel, holders: list) -> None:
    """The sink regions of the finalize ops (one per role that finalizes) are alike, as
    the kernel computes the sink from the first; without a sink (has_sink false) each
    yields -inf, the sink of none."""
    import math

    from mlir import ir

    from attnc.ir import error_at, get_bool

    shapes = [_shape(h.regions[0].blocks[0]) for h in holders]
    for holder, shape in zip(holders[1:], shapes[1:]):
        if shape != shapes[0]:
            raise error_at(holder, "this finalize's sink region differs from the first finalize's: the kernel computes "
                                   "the sink once, from the first, so its copies are alike")
    if holders and not get_bool(kernel, "has_sink"):
        value = list(holders[0].regions[0].blocks[0].operations)[-1].operands[0]
        owner = value.owner
        attr = owner.attributes["value"] if not isinstance(owner, ir.Block) and owner.name == "arith.constant" else None
        if not (isinstance(attr, ir.FloatAttr) and attr.value == -math.inf):
            raise error_at(holders[0], "the kernel has no sink (has_sink = false), and this finalize's sink region "
                                       "yields something other than -inf: a sink is the variant's (`sink` in the "
                                       ".attn source)")


def _shape(block) -> list[tuple]:
    """Each op of `block` as (name, attributes but its level, operands as positions: an
    argument's or an earlier op's result's), for comparing copies of a hook."""
    from attnc.ir import roles as R

    where = {arg: ("arg", k) for k, arg in enumerate(block.arguments)}
    out = []
    for i, op in enumerate(block.operations):
        attrs = {k: v for k, v in R.attrs_of(op.operation).items() if k != LEVEL}
        out.append((op.operation.name, sorted(attrs.items()), [where.get(v, ("outside", str(v.type)))
                                                               for v in op.operands]))
        for k, result in enumerate(op.results):
            where[result] = (i, k)
    return out


def placed_levels(block, names: tuple[str, ...], given: bool = True, coarsest: bool = True) -> list[tuple]:
    """[(op, level)] of `block`'s ops but its terminator, whose arguments are `names`: each
    op's `attn.level` where `given` and it has one (checked: valid, no coarser than its
    operands'), else the coarsest level of what it reads (`coarsest`) or "score"."""
    from mlir import ir

    from attnc.ir import error_at

    reads = {arg: frozenset({name}) for arg, name in zip(block.arguments, names)}
    out = []
    for op in list(block.operations)[:-1]:
        used = frozenset().union(*(reads.get(v, frozenset()) for v in op.operands))
        level = level_of(used) if coarsest else "score"
        if given and LEVEL in op.attributes:
            attr = op.attributes[LEVEL]
            level = attr.value if isinstance(attr, ir.StringAttr) else None
            if level not in LEVELS:
                raise error_at(op, f"{LEVEL} = {attr}: expected one of {', '.join(LEVELS)}")
            if not used <= LEVELS[level]:
                raise error_at(op, f'{LEVEL} = "{level}" computes this {op.name} once per {PER[level]}, but its '
                                   f"operands vary per {PER[level_of(used)]}: it reads "
                                   f"{', '.join(sorted(used - LEVELS[level]))}")
        reads.update((r, LEVELS[level] & frozenset(names)) for r in op.results)
        out.append((op.operation, level))
    return out


def level_of(reads: frozenset[str]) -> str:
    """The coarsest level whose values may read `reads`."""
    return next((level for level, allowed in LEVELS.items() if reads <= allowed), "score")
