"""`attn-kernel-choices`: every choice the kernel makes beyond the plan, as an attribute
on the op it concerns (L5 -> L5).

Targets: sm_80, sm_90a, sm_100a (four choices: Note [Choices on sm_100a]). Expects the L5 plan of one
attn.kernel (attn-insert-pipelines); leaves the same IR with the choices of CHOICES
on their ops: each given as an option of this pass, else its default for this
kernel (the measured defaults of choice_defaults.py, each saying where its
numbers are). The lowering builds what the attributes say (Note [Kernel choices]).

    before:  %a = "attn.rescale"(%acc, %alpha)
             %s = "attn.softmax_step"(%x, %m, %l)
    after:   %a = "attn.rescale"(%acc, %alpha) {lazy = true}
             %s = "attn.softmax_step"(%x, %m, %l) {exp2_fma = 1 : i64}

Note [Kernel choices]: the choices of a kernel that are not its plan (roles, stages,
budgets, buffers, synchronization: L3-L5) sit on the ops they concern -- the grid order
and CTAs per SM on attn.kernel, the per-score mask test on attn.mask, the exp2 split on
attn.softmax_step, the lazy rescale on attn.rescale, the row sums on the P.V mma, the
rolled k-steps on the QK^T mma, the step loads on the K and V loads, the staged epilogue
on O's store. attn-lower-sm80 and attn-lower-sm90a read them there and nowhere else: an
attribute edited by hand or by a user pass gives that kernel, or a located error naming
the condition it breaks (on an op it does not sit on: saying where it sits); where one
is absent (a pipeline without this pass) the lowering takes its default given the others
as they stand -- defaults depend on each other (the small grid's kernel is added only
where no grid order is given), so after editing one choice, run this pass again with it
as an option: a run chooses afresh every choice it is not given. A kernel is one
program, so every op of a kind holds the same value of a choice -- ops that disagree are
refused at the second -- but for the choices of Note [Choices op by op].
`min_ctas_unless_spills` is no option: it says whether min_ctas_per_sm is the default
bound, dropped where the kernel spills under it (but for spills in its near tiles alone:
Note [Spills of the near tiles] in attnc/backend/register_bound.py).

Note [Choices op by op]: five choices change only the code of the op they sit on, so
each op holds its own and the lowering reads it from the op it lowers (the step records'
`StepOp.choice`): the QK^T mma's `unroll`, the softmax step's `exp2_fma`, the mask's
`interval_test` and `split`, and O's store's `staged`. An edit of one op -- exp2_fma = 3
on the softmax step of the partial KV loop only, or the range test in the mask of one
loop -- is the kernel of that op alone; this pass's option sets every op of the kind.
Each value is checked at its op against the kernel (a located error naming the
condition), an op without one takes the default (choice_defaults.py's `op_default`), and
the manifest records the one value the ops hold, or the values, sorted, where they
differ. The other choices shape what several ops share -- O's registers (row sums), the
rescale's vote (lazy), the key range's loads (lean), the grid -- and stay one per kernel.

Note [Choices on sm_100a]: attn-lower-sm100a takes four choices, `SM100A_CHOICES`: each
softmax step's own `exp2_fma`, the kernel's `lazy` on attn.rescale (Note [Lazy rescale on
sm_100a] in attnc/backend/sm100a.py), and `aligned_tiles` and `run_ranges` on attn.kernel
(Note [Tile table on sm_100a] in attnc/backend/sm100a_tiles.py). This pass records them
with their defaults (choice_defaults.py's `sm100a_defaults`) and refuses any other option
for sm_100a; the lowering refuses another choice an op holds (an edit, a user pass),
naming the four, rather than build a kernel that ignores it.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, fields
from typing import Callable, ClassVar

from attnc.passes.registry import Pass, option_text

NAME = "attn-kernel-choices"


@dataclass(frozen=True)
class Choice:
    option: str                 # the pass option (but min_ctas_unless_spills), and the lowering's field
    attr: str                   # the attribute on its ops
    kind: type                  # bool, int or str
    op: str                     # the ops it sits on
    tiles: tuple[str, ...] = ()  # of those, the ones with this operand (load, store) or kind (mma)
    resolved: Callable | None = None    # ForwardLowering -> the value the kernel takes (None: its field)
    per_op: bool = False        # each op its own (Note [Choices op by op]); else one per kernel

    def value_in(self, lowered):
        if self.per_op:         # the default of an op that holds none
            from attnc.passes.choice_defaults import op_default
            return op_default(self.option, lowered.spec)
        return self.resolved(lowered) if self.resolved else getattr(lowered.spec.choices, self.option)


CHOICES: tuple[Choice, ...] = (
    Choice("min_ctas_per_sm", "min_ctas_per_sm", int, "attn.kernel"),
    Choice("min_ctas_unless_spills", "min_ctas_unless_spills", bool, "attn.kernel"),
    Choice("heads_first", "heads_first", bool, "attn.kernel"),
    Choice("tiles_last", "tiles_last", bool, "attn.kernel"),
    Choice("small_grid", "small_grid", bool, "attn.kernel"),
    Choice("aligned_tiles", "aligned_tiles", bool, "attn.kernel", resolved=lambda lowered: lowered.spec.aligned_tiles),
    Choice("run_ranges", "run_ranges", bool, "attn.kernel",
           resolved=lambda lowered: lowered.spec.aligned_tiles and lowered.blockmap.runs is not None),
    Choice("tail_waves", "tail_waves", int, "attn.kernel", resolved=lambda lowered: lowered.tail_waves),
    Choice("dead_rows", "dead_rows", bool, "attn.kernel"),
    Choice("kv_loops", "kv_loops", int, "attn.kernel"),
    Choice("interval_test", "interval_test", str, "attn.mask", per_op=True),
    Choice("split_mask", "split", bool, "attn.mask", per_op=True),
    Choice("exp2_fma", "exp2_fma", int, "attn.softmax_step", per_op=True),
    Choice("lazy_rescale", "lazy", bool, "attn.rescale"),
    Choice("mma_row_sum", "row_sum", bool, "attn.mma", ("pv",)),
    Choice("lean_loads", "lean", bool, "attn.load", ("k", "v")),
    Choice("staged_o", "staged", bool, "attn.store", ("o",), per_op=True),
    Choice("qk_unroll", "unroll", int, "attn.mma", ("qk",), per_op=True),
)
BY_OPTION = {c.option: c for c in CHOICES}
# Choices the plan makes as ops of its own, not attributes: where each stands.
PLANNED = {"early_first": "the guessed first block is the role's ops (attn.first_block_guess, its copies and "
                          "its miss branch), which attn-insert-pipelines{early_first} writes (Note [The guessed "
                          "first block in the IR] in attnc/schedule/first_guess.py)"}
PER_OP = tuple(c for c in CHOICES if c.per_op)
SM100A_CHOICES = ("exp2_fma", "lazy_rescale", "aligned_tiles", "run_ranges")     # Note [Choices on sm_100a]


@dataclass(frozen=True)
class KernelChoices(Pass):
    """Record the kernel's choices (grid order, CTAs per SM, mask tests, exp2 split, lazy rescale, ...) on the ops they concern."""

    name: ClassVar[str] = NAME
    interval_test: str | None = field(default=None, metadata={
        "doc": "a row-interval mask's test per score: bits, range or pair (default: bits up "
               "to 128-key tiles, else range); set on every attn.mask, each of which may hold its own (Note "
               "[Choices op by op])"})
    min_ctas_per_sm: int | None = field(default=None, metadata={
        "doc": "CTAs the kernel's registers must leave room for on one SM (PTX .minnctapersm; 0: no "
               "bound; Note [CTAs per SM] in choice_defaults.py; default: none on sm_80 and for a producer "
               "warpgroup; on sm_90a the CTAs its shared memory holds, at most down to 128 registers a "
               "thread, dropped where the kernel would then spill but in its near tiles (Note [Spills of the "
               "near tiles] in attnc/backend/register_bound.py): min_ctas_unless_spills)"})
    exp2_fma: int | None = field(default=None, metadata={
        "doc": "of every 8 scores of a softmax row, how many take their exp2 on the FMA pipe (a cubic "
               "and exponent bits) instead of the SFU, 0 to 8 (Note [Exponentials on the FMA pipe]; "
               "default: 2 in sm_90a's one-warpgroup softcap kernels, 1 in its two consumer warpgroups' "
               "kernels with a producer and a score_mod, else 0, sm_100a 0); set on every attn.softmax_step, each of "
               "which may hold its own (Note [Choices op by op])"})
    heads_first: bool | None = field(default=None, metadata={
        "doc": "order the grid's CTAs by head first, query block second (Note [Heads first]; default: "
               "on sm_80 for a band or a block map)"})
    tiles_last: bool | None = field(default=None, metadata={
        "doc": "order the grid's CTAs by head, then batch, then query block, so that every (b, h) starts "
               "its heaviest query block before any starts its next (Note [Tiles last] in kernel_abi.py; "
               "default: off)"})
    small_grid: bool | None = field(default=None, metadata={
        "doc": "add the kernel with tiles_last to the bundle, for the runtime to launch on grids of a few "
               "CTAs per SM (Note [Small grids] in kernel_abi.py; default: for sm_80's kernels of one query "
               "block per CTA with a mask that is not a band, where neither grid order is given)"})
    split_mask: bool | None = field(default=None, metadata={
        "doc": "in a block map's MIXED tiles, test only the conjuncts (row interval or residual) the map "
               "does not prove to hold on the whole tile (Note [Conjuncts a tile holds]; default: on wherever "
               "the map records them -- a mask with a row interval and a residual); set on every attn.mask, "
               "each of which may hold its own (Note [Choices op by op])"})
    aligned_tiles: bool | None = field(default=None, metadata={
        "doc": "for a block map whose mask has a conjunct P[.., i] == P[.., j] (document ids), query tiles "
               "and key blocks that start where the ids' runs start, from a table a third kernel fills at "
               "run time; unsorted ids fall back to the grid (Note [Document-aligned tiles] in qtiles.py; "
               "default: wherever the mask has that conjunct and a CTA runs one query block without a "
               "producer warpgroup, on sm_80 and sm_90a; on sm_100a wherever the CTAs do not walk the "
               "query blocks: Note [Tile table on sm_100a] in sm100a_tiles.py)"})
    run_ranges: bool | None = field(default=None, metadata={
        "doc": "on the aligned tiles, compute each key block's class from the tile's run of equal ids and "
               "the static analysis of the rest of the mask, with no block map kernel (Note [Ranges from the "
               "runs] in run_ranges.py; default: wherever the tiles are aligned and the mask's other "
               "conjuncts read no param and no float, but for a kernel at the 128-register floor of "
               "its CTAs per SM (sm_90a at head dim 64) and a mask with another residual conjunct "
               "beside the ids' whose map records what a tile holds; on sm_100a wherever the tiles are "
               "aligned and the rest is static; never where attn-mask-kernels' options asked for the map: "
               "Note [The block map's program])"})
    lazy_rescale: bool | None = field(default=None, metadata={
        "doc": "keep a softmax row's running max until a block's scores exceed it by more than a factor of 2^8, "
               "and skip a warp's rescale of O where no row of it moved (Note [Lazy rescale] in "
               "softmax.py; default: on above head dim 64 wherever the max "
               "is not a constant, but for sm_90a's persistent CTAs; on for sm_100a: Note [Lazy rescale on "
               "sm_100a] in sm100a.py)"})
    tail_waves: int | None = field(default=None, metadata={
        "doc": "on the aligned tiles with the heads-first grid, the last this many resident grids' worth of CTAs "
               "start their query tiles longest first (Note [Longest tiles last] in qtiles.py; 0: off, at most 64; "
               "default: 2 there)"})
    staged_o: bool | None = field(default=None, metadata={
        "doc": "write O through shared memory in coalesced 16-byte stores instead of 4-byte stores "
               "from the accumulators (Note [Staged O]; default: where it can -- one query "
               "block per CTA, no producer warpgroup, a 16-bit O -- on sm_80, and on sm_90a for a band or a "
               "block map); set on O's attn.store (Note [Choices op by op])"})
    lean_loads: bool | None = field(default=None, metadata={
        "doc": "sm_80: in the KV steps, load later key blocks without row predicates, and for a band do not "
               "ask tile_skip (Note [Lean step loads]; only for a block map or a band; default: "
               "on sm_80 for both)"})
    mma_row_sum: bool | None = field(default=None, metadata={
        "doc": "sm_80: sum each softmax row's probabilities on the tensor cores, as one more n8 column of the "
               "P.V GEMM whose B operand is all ones, instead of FADDs per score (Note [Row sums on the tensor "
               "cores] in softmax.py; default: for an affine score_mod, "
               "such as ALiBi's, in a kernel without an LSE output; refused with one: the LSE would keep "
               "the rounding of P)"})
    qk_unroll: int | None = field(default=None, metadata={
        "doc": "sm_80: the QK^T k16 steps as a loop of this many steps per trip, kept rolled (0: fully "
               "unrolled; it must divide the k16 steps of a shared-memory page) (Note [Rolled QK^T] in sm80.py; "
               "default: 1 up to head dim 96, where it removed spills, else 0); set on every QK^T attn.mma, each "
               "of which may hold its own (Note [Choices op by op])"})
    dead_rows: bool | None = field(default=None, metadata={
        "doc": "sm_80: interleave the warps' 16-row tiles of the query block (warp w owns rows 16w + 16 "
               "num_warps k) and, in the first key step, skip the MMAs of a tile whose rows keep none of its "
               "keys (Note [Dead rows] in sm80.py; default: wherever it can be -- "
               "two or more tiles per warp, two or more K/V stages and a mask with a row interval -- and key "
               "blocks are shorter than query blocks)"})

    kv_loops: int | None = field(default=None, metadata={
        "doc": "sm_80 and sm_90a: how many loops walk a key range's steps -- 3: a loop per kind of block (the "
               "mixed ones near the diagonal, the full ones, the mixed ones at a window's far edge); 2: the far "
               "edge's blocks in the full blocks' loop; 1: every step in one loop -- a merged loop masking a "
               "step's scores in a branch where its block is mixed (Note [Key loops] in sm80.py; default: 1 on "
               "sm_80 where a key range of one segment may end in mixed blocks, without a block map: a window's "
               "compile 30-40 % shorter, its kernel as fast or faster; else 3: sm_90a's windows ran slower "
               "merged; results/sm80_h200.md and sm90a_h200.md, \"Key loops\")"})

    def run(self, module) -> None:
        choose(module, **{f.name: getattr(self, f.name) for f in fields(self)})


def choose(module, **given) -> None:
    """Record `given` (None: not given) and the defaults of the rest on the kernel's ops."""
    from attnc.backend.lowering import lowering_from_ir
    from attnc.ir import attention_ops, error_at
    from attnc.passes.lower_kernel import compile_result_of
    from attnc.passes.choice_defaults import sm100a_defaults
    from attnc.errors import AttncError
    from attnc.ir.roles import GET, PUT, ops_in, role_block, role_ops
    from attnc.passes.plan_ir import required_attr, require_roles

    result = compile_result_of(module, NAME)
    op = attention_ops(module)[0]
    target = required_attr(op, "target", NAME)
    given = {name: value for name, value in given.items() if value is not None}
    _check_values(given)
    other = [name for name in given if name not in SM100A_CHOICES]
    if target == "sm_100a" and other:       # Note [Choices on sm_100a]
        raise error_at(op, f"{other[0]}={option_text(given[other[0]])}: no choice of attn-lower-sm100a, which takes "
                           f"{', '.join(SM100A_CHOICES[:-1])} and {SM100A_CHOICES[-1]} only")
    require_roles(op, NAME)
    left = [o for role in role_ops(op) for o in ops_in(role_block(role), (PUT, GET))]
    if left:
        raise error_at(left[0], f"{NAME} needs the synchronization attn-insert-pipelines makes of "
                                f"{left[0].name}; run attn-insert-pipelines first")
    from attnc.ir.roles import remember_verified, verified_as_is
    verified = verified_as_is(op)             # Note [Verified as it stands]
    if target != "sm_100a":
        from attnc.passes.plan_ir import check_channels, followed_plan, tile_of
        # The channels as the lowering takes them, before its defaults are read off them.
        check_channels(op, tile_of(op, NAME), followed_plan(op, NAME), NAME)
    sites = choice_sites(op)
    for name, value in given.items():         # a choice no op of this kernel would hold
        choice = BY_OPTION.get(name)
        if choice is not None and choice.op != "attn.kernel" and not sites[name]:
            raise AttncError(f"{name}={option_text(value)}: it sits on {_where(choice)}, and this kernel has none "
                             f"(Note [Kernel choices] in attnc/passes/kernel_choices.py)")
    for choice in CHOICES:                    # a second run (on a dump) chooses afresh
        for holder in sites[choice.option]:
            if choice.attr in holder.attributes:
                del holder.attributes[choice.attr]
    # an interval test is checked against the mask the lowering reads first (`_idle`)
    write(op, {k: v for k, v in given.items() if k != "interval_test" or target == "sm_100a"}, sites)
    if target == "sm_100a":
        write(op, {name: value for name, value in sm100a_defaults(op, given).items() if name not in given}, sites)
        sm100a_choices(op)                    # each value checked at its op
        if given.get("run_ranges"):           # (the lowering checks the runs of an edited one)
            from attnc.backend.sm100a_tiles import table_runs
            with _at_option(given):
                table_runs(op)
    else:
        with _at_option(given):
            lowered = lowering_from_ir(result)    # the defaults, for what is not given
        if "interval_test" in given:
            from attnc.backend.spec_checks import op_choice_error
            problem = op_choice_error(lowered.spec, "interval_test", given["interval_test"])
            if problem:
                raise AttncError(f"interval_test={given['interval_test']}: {problem}")
            write(op, {"interval_test": given["interval_test"]}, sites)
        write(op, {c.option: c.value_in(lowered) for c in CHOICES
                   if c.option not in given and not _idle(c.option, lowered.spec)}, sites)
    if verified:
        remember_verified(op)


@contextlib.contextmanager
def _at_option(given: dict):
    """A refusal of a `given` choice the kernel cannot take, raised inside, located at its
    option (named in the message) rather than at the kernel."""
    import re

    from attnc.errors import AttncError

    try:
        yield
    except AttncError as e:
        named = next((n for n in given if re.search(rf"\b{n}\b", e.message)), None)
        if named is None:
            raise
        said = re.search(rf"\b{named}=", e.message)       # the option's value named already
        raise AttncError(e.message if said else f"{named}={option_text(given[named])}: {e.message}") from None


def _idle(option: str, spec) -> bool:
    """Whether no op of `spec`'s kernel would read the choice `option`: an interval test
    where the mask has no row interval (a built-in causal mask's compare, or a mask_mod
    tested by its predicate), whose default is then left off the ops."""
    return option == "interval_test" and spec.hooks.row_interval is None


def _check_values(given: dict) -> None:
    """The values given that no kernel takes, refused at their option whatever the variant
    (a variant without the op a choice sits on would otherwise never read it)."""
    from attnc.backend.spec_checks import choice_value_error
    from attnc.errors import AttncError

    for name, value in given.items():
        problem = choice_value_error(name, value)
        if problem:
            raise AttncError(problem)


def sm100a_choices(kernel) -> dict:
    """{option: value} of the choices attn-lower-sm100a takes (`SM100A_CHOICES`), as
    `kernel`'s ops hold them, a default where none does (Note [Choices on sm_100a]), and
    exp2_fma's values sorted where the softmax steps differ; a choice of the other
    lowerings on any of its ops is refused there, and so is an exp2_fma out of range."""
    from attnc.backend.spec_checks import op_choice_error
    from attnc.ir import error_at
    from attnc.passes.choice_defaults import sm100a_defaults

    sites = choice_sites(kernel)
    found = read(kernel, sites)
    for choice in CHOICES:
        for op in sites[choice.option]:
            if choice.attr not in op.attributes:
                continue
            if choice.option not in SM100A_CHOICES:
                raise error_at(op, f"{choice.attr} on {op.name}: attn-lower-sm100a does not take "
                                   f"{choice.option} (it takes exp2_fma on attn.softmax_step, lazy on "
                                   f"attn.rescale, aligned_tiles and run_ranges on attn.kernel: Note [Choices "
                                   f"on sm_100a])")
            problem = op_choice_error(None, choice.option, _value(op, choice))
            if problem:
                raise error_at(op, f"the sm_100a kernel cannot be built: {problem}")
    held = {name: found[name] for name in SM100A_CHOICES if name in found}
    chosen = {**sm100a_defaults(kernel, held), **held}
    at = sites["aligned_tiles"][0] if sites["aligned_tiles"] else kernel
    if chosen["aligned_tiles"] or chosen["run_ranges"]:
        from attnc.backend.sm100a_tiles import table_refusal
        problem = table_refusal(kernel)
        if problem:
            which = "aligned_tiles" if chosen["aligned_tiles"] else "run_ranges (on the aligned tiles)"
            raise error_at(at, f"{which} needs {problem} (Note [Tile table on sm_100a])")
        if not chosen["aligned_tiles"]:
            raise error_at(at, "run_ranges needs the aligned tiles (aligned_tiles is off)")
    steps = sorted({_value(op, BY_OPTION["exp2_fma"]) if "exp2_fma" in op.attributes else chosen["exp2_fma"]
                    for op in sites["exp2_fma"]})
    if len(steps) > 1:
        chosen["exp2_fma"] = steps
    return chosen


def write(kernel, values: dict, sites: dict | None = None) -> None:
    """Set each choice of `values` ({option: value}) on every op of `kernel` it sits on
    (`sites`: `choice_sites(kernel)`, when the caller has it)."""
    from mlir import ir

    from attnc.ir import error_at

    sites = sites or choice_sites(kernel)
    with kernel.context:
        for name, value in values.items():
            choice = BY_OPTION[name]
            if choice.kind is str:
                attr = ir.StringAttr.get(value)
            elif choice.kind is bool:
                attr = ir.BoolAttr.get(bool(value))
            elif not -(1 << 63) <= int(value) < 1 << 63:
                raise error_at(kernel, f"option {name} = {value} is out of range")
            else:
                attr = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))
            for op in sites[name]:
                op.attributes[choice.attr] = attr


def read(kernel, sites: dict | None = None) -> dict:
    """The choices recorded on `kernel`'s ops ({option: value}): each op of a kind must
    agree, but on a choice of its own (Note [Choices op by op]), given here only where
    every op that holds it holds one value (`sites`: `choice_sites(kernel)`, when the
    caller has it). A value no kernel takes is refused here, at the op, but one of a
    choice of its own, which `check_op_choices` refuses with the kernel's other reasons."""
    from attnc.backend.spec_checks import choice_value_error
    from attnc.ir import error_at

    found = {}
    sites = sites or choice_sites(kernel)
    _check_stray(kernel)
    for choice in CHOICES:
        held = [(op, _value(op, choice)) for op in sites[choice.option] if choice.attr in op.attributes]
        other = next(((op, value) for op, value in held if value != held[0][1]), None)
        if other is None and held:
            found[choice.option] = held[0][1]
            problem = None if choice.per_op else choice_value_error(choice.option, held[0][1])
            if problem:
                raise error_at(held[0][0], problem)
        elif other is not None and not choice.per_op:
            op, value = other
            raise error_at(op, f"{choice.attr} = {option_text(value)} on this {op.name}, "
                               f"{option_text(held[0][1])} on an earlier one: the kernel lowers every {op.name} of "
                               f"a kernel one way (Note "
                               f"[Kernel choices] in attnc/passes/kernel_choices.py)")
    return found


def _check_stray(kernel) -> None:
    """Refuse a choice on an op it does not sit on (a Q load holding lean, the LSE's store
    holding staged, the QK^T mma holding row_sum, ...), which no lowering would read, and
    an attribute of a choice that is the plan's (`PLANNED`)."""
    from mlir import ir

    from attnc.ir import error_at

    by_attr: dict[str, list[Choice]] = {}
    for choice in CHOICES:
        if choice.op != "attn.kernel":
            by_attr.setdefault(choice.attr, []).append(choice)

    stray = []

    def visit(op):
        planned = next((attr for attr in PLANNED if attr in op.attributes), None)
        if planned is not None:
            stray.append((op.operation, planned, None))
            return ir.WalkResult.INTERRUPT
        for attr, choices in by_attr.items():
            if attr in op.attributes and not any(op.name == c.op and _holds(c, op) for c in choices):
                stray.append((op.operation, attr, choices[0]))
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    for op in kernel.regions[0].blocks[0].operations:
        op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
        if stray:           # (raised out of the walk, which would wrap it)
            op, attr, choice = stray[0]
            if choice is None:
                raise error_at(op, f"{attr} on {op.name}: no lowering reads it here; {PLANNED[attr]}")
            raise error_at(op, f"{attr} sits on {_where(choice)} only, not on this {op.name}: no lowering "
                               f"reads it here (Note [Kernel choices] in attnc/passes/kernel_choices.py)")


def _where(choice: Choice) -> str:
    """The ops `choice` sits on, in words."""
    kinds = {"attn.mma": {"qk": "QK^T", "pv": "P.V"}, "attn.load": {"k": "K", "v": "V"}, "attn.store": {"o": "O's"}}
    if not choice.tiles:
        return choice.op
    tiles = " and ".join(kinds[choice.op][t] for t in choice.tiles)
    return f"{'' if choice.op == 'attn.store' else 'the '}{tiles} {choice.op}"


def op_choices(op) -> tuple:
    """The choices of its own (Note [Choices op by op]) the IR op `op` holds, as
    ((attribute, value), ...), each checked for its type."""
    found = []
    for choice in PER_OP:
        if op.name == choice.op and choice.attr in op.attributes and _holds(choice, op):
            found.append((choice.attr, _value(op, choice)))
    return tuple(found)


def check_op_choices(kernel, spec) -> None:
    """Refuse, at its op, a choice of its own that `kernel` (as `spec` records it) cannot
    take (attnc/backend/spec_checks.py's `op_choice_error`)."""
    from attnc.backend.spec_checks import op_choice_error
    from attnc.ir import error_at

    sites = choice_sites(kernel)
    for choice in PER_OP:
        for op in sites[choice.option]:
            if choice.attr in op.attributes:
                problem = op_choice_error(spec, choice.option, _value(op, choice))
                if problem:
                    raise error_at(op, f"the {spec.target} kernel cannot be built: {problem}",
                                   held_note(op, choice.attr))


def held_note(op, attr: str) -> str:
    """The note of an error about the choice `attr` that `op` holds: the op, and the value."""
    from attnc.ir import op_in_words

    return f"{op_in_words(op)}, which holds {attr} = {op.attributes[attr]}"


def _value(op, choice: Choice):
    from mlir import ir

    from attnc.ir import error_at

    attr = op.attributes[choice.attr]
    expected = {bool: ir.BoolAttr, int: ir.IntegerAttr, str: ir.StringAttr}[choice.kind]
    if not isinstance(attr, expected) or (choice.kind is int and isinstance(attr, ir.BoolAttr)):
        words = {bool: "true or false", int: "an integer", str: "a string"}[choice.kind]
        raise error_at(op, f"{choice.attr} on {op.name} must be {words}, got {attr}")
    return attr.value


def choice_sites(kernel) -> dict[str, list]:
    """{option: the ops of `kernel` (itself included) its choice sits on, in program order}."""
    from attnc.ir.kernel import program_ops

    found = program_ops(kernel, {c.op for c in CHOICES if c.op != "attn.kernel"})
    out = {}
    for c in CHOICES:
        out[c.option] = [kernel] if c.op == "attn.kernel" else [op for op in found[c.op] if _holds(c, op)]
    return out


def _holds(choice: Choice, op) -> bool:
    """Whether `op`, an op of the kind `choice` sits on, is one of its ops."""
    return not choice.tiles or _tile(op) in choice.tiles


def _tile(op) -> str:
    """The GEMM an attn.mma is (its kind), the tile a load or store moves (its operand)."""
    from mlir import ir

    return ir.StringAttr(op.attributes["kind" if op.name == "attn.mma" else "operand"]).value
