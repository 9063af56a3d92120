"""The defaults of attn-kernel-choices: for each choice the kernel can make (the pass's
options), its value where no option and no attribute gives one, from the kernel's facts
(target, tiles, the plan, the mask's and the score's hooks) and the choices already made.
Each rule says what was measured (results/sm80_h200.md and results/sm90a_h200.md, the
section named). `resolve` fills every choice of the kernel left None, in the order the
rules depend on each other; `op_default` gives the choices each op holds its own of
(Note [Choices op by op] in kernel_choices.py) where an op holds none; the
document-aligned tiles' three (`aligned_tiles`, `tail_waves`, `run_ranges`), which
decide the tile table and the map the lowering plans, are applied where it plans them
(attnc/backend/lowering.py). The lowering then
reads choices only (Note [Kernel choices] in kernel_choices.py).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from attnc.backend.kernel_spec import SM90_REGISTERS_PER_SM, SM90_SMEM_PER_SM, SM90_SMEM_RESERVED_PER_CTA

if TYPE_CHECKING:
    from attnc.backend.kernel_spec import ForwardSpec


def resolve(spec: "ForwardSpec") -> "ForwardSpec":
    """`spec` with every choice that is None set to its default, given the others."""
    choices = spec.choices
    bound_by_default = choices.min_ctas_per_sm is None
    for name, rule in _RULES:
        if getattr(choices, name) is None:
            choices = replace(choices, **{name: rule(replace(spec, choices=choices))})
    if choices.min_ctas_unless_spills is None:
        # The default register bound is dropped where the kernel spills under it (but in
        # its near tiles alone: Note [Spills of the near tiles] in register_bound.py); a
        # bound given as min_ctas_per_sm is the user's, kept whatever ptxas reports.
        choices = replace(choices, min_ctas_unless_spills=bound_by_default and choices.min_ctas_per_sm > 0)
    # A constant running max leaves no rescale to skip, whoever asked for it.
    if choices.lazy_rescale and spec.static_max is not None:
        choices = replace(choices, lazy_rescale=False)
    return replace(spec, choices=choices)


def qk_unroll(s) -> int:
    """Note [Rolled QK^T] in sm80.py: from sweeps of nvJitLink's sm_80 resource report,
    rolling the short QK^T loops of d <= 96 removes spills."""
    return 1 if s.variant.head_dim_qk <= 96 and s.target == "sm_80" else 0


def min_ctas_per_sm(s) -> int:
    """Note [CTAs per SM]: the sm_90a kernel's CTAs are independent warpgroups whose
    softmax and GEMMs interleave on an SM only if several are resident. Left alone, ptxas
    gives the 64x128-tile kernels at head dim 64 187 to 238 registers, two CTAs per SM,
    where shared memory has room for three; bounded to three (168 registers, no spills for
    causal and ALiBi, 16 bytes for softcap) they ran 5-7 % faster, and so did the 64x64
    kernels (window, documents) at four (128 registers) ("CTAs per SM"). So on sm_90a the
    bound is the CTAs shared memory holds, but no more than leave 128 registers per thread
    (below that the S and O accumulators spill). sm_80 keeps ptxas's choice: its kernels
    were tuned on it, and its occupancy depends on the GPU's shared memory. A producer's
    warpgroups set their own registers (setmaxnreg)."""
    if s.target != "sm_90a" or s.plan.producer:
        return 0
    by_smem = SM90_SMEM_PER_SM // (s.smem_bytes + SM90_SMEM_RESERVED_PER_CTA)
    by_registers = SM90_REGISTERS_PER_SM // (s.threads * 128)
    ctas = min(by_smem, by_registers)
    return ctas if ctas >= 2 else 0


def interval_test(s) -> str:
    """"bits" while a lane's row holds at most 32 scores (block_n <= 128), else "range"
    (Note [One compare per score] in score_masks.py)."""
    return "bits" if s.block_n <= 128 else "range"


def small_grid(s) -> bool:
    """Note [Small grids] in kernel_abi.py: sm_80's kernels of one query block per CTA
    whose query blocks' work differs (a mask, not a band), where neither grid order is
    given."""
    return (s.choices.tiles_last is None and s.choices.heads_first is None and s.target == "sm_80"
            and s.plan.q_blocks_per_cta == 1 and s.hooks.mask != "none" and not s.banded
            and not s.plan.producer and not s.plan.persistent)


def tiles_last(s) -> bool:
    """Note [Tiles last] in kernel_abi.py: only where asked."""
    return False


def heads_first(s) -> bool:
    """Note [Heads first] in kernel_abi.py: in sm_80's kernels for a band or a block map,
    whose query blocks each read a few key blocks of their own head: 1-2 % faster ("Heads
    first"). Not on sm_90a, where the window at head dim 64 (64x64 tiles, four CTAs per SM)
    ran 8 % slower and documents gained under 2 %; nor for other masks, whose blocks read
    keys from the start of the sequence, so that the keys of all heads at once would
    stream through L2 (causal at head dim 64 ran 2 % faster at N = 8192, where the keys of
    128 heads take 256 MiB already)."""
    return (s.target == "sm_80" and (s.banded or s.blockmap) and s.plan.q_blocks_per_cta == 1
            and not s.plan.producer and not s.choices.tiles_last)


def lean_loads(s) -> bool:
    """Note [Lean step loads] in forward_loads.py: wherever it can be, for a block map or
    a band on sm_80."""
    return s.can_lean_loads


def split_mask(s) -> bool:
    """Note [Conjuncts a tile holds]: wherever the block map records what a tile holds."""
    return s.hooks.tile_holds is not None


def staged_o(s) -> bool:
    """Note [Staged O] in epilogue.py: on sm_80 wherever it can be (1-6 % faster, but
    causal at head dim 64 1.5 % slower: ptxas schedules its whole loop differently), on
    sm_90a for bands and block maps (3-7 %); not sm_90a's other kernels (ALiBi at head
    dim 64 6 % slower, causal and softcap within noise: there a query block's long key
    loop leaves the O store a small share) ("Staged O")."""
    return s.can_stage_o and (s.target == "sm_80" or s.banded or s.blockmap)


def dead_rows(s) -> bool:
    """Note [Dead rows] in sm80.py: wherever it can be and a key block is shorter than the
    query block, so that a causal-like mask's first block (the diagonal's) leaves whole
    16-row tiles without a key. With key blocks as long as the query block it has none to
    skip (window 1024 at head dim 64, 128x128 tiles: it spilled and ran 5 % slower) ("Dead
    rows")."""
    return s.can_skip_dead_rows and s.block_n < s.block_m


def kv_loops(s) -> int:
    """Note [Key loops] in sm80.py: on sm_80 where a key range of one segment may end in
    mixed blocks (a window), whose three loops become one: the window's compile takes
    30-40 % less time and its kernel ran 1-5 % faster (H200). Not where the range starts
    with its full blocks (causal: 1-4 % slower, a loop fewer only), for a block map, whose
    full steps would read the map (3 % slower), over several segments (a window with global
    tokens spilled 52 bytes), nor on sm_90a, whose windows ran 0.3-1 % slower with two
    loops and 0-11 % with one ("Key loops")."""
    return 1 if s.target == "sm_80" and s.far_edge and not s.blockmap else 3


def lazy_rescale(s) -> bool:
    """Note [Lazy rescale] in softmax.py: above head dim 64, where O's rescale is 64 FMULs
    a row pair and skipping it paid (sm_80 causal 4 % faster, sm_90a causal 3 % and
    documents 2 %), but not in sm_90a's persistent CTAs, whose rotated consumer then
    spills. At 64 the vote and branch spilled on sm_80 and measured no gain on either
    target ("Lazy rescale")."""
    return s.variant.head_dim_v > 64 and not (s.target == "sm_90a" and s.plan.persistent)


def mma_row_sum(s) -> bool:
    """Note [Row sums on the tensor cores] in softmax.py: on sm_80 for an affine score_mod
    (score_bias), where it measured 1.2-1.5 % faster, every round of one below every round
    of the other; elsewhere no gain or a loss ("Row sums on the tensor cores"). Never with
    an LSE output, which would keep the rounding of P."""
    return s.target == "sm_80" and s.hooks.score_bias is not None and not s.variant.has_lse


def exp2_fma(s) -> int:
    """Note [Exponentials on the FMA pipe] in softmax.py, as measured ("Exponentials on the
    FMA pipe"):
      * 2 of 8 in sm_90a's one-warpgroup kernels with a constant softmax max (softcap),
        whose scores take two SFU operations: softcap + causal at head dim 64 5-8 %
        faster, partly because the register bound of Note [CTAs per SM] then holds three
        CTAs per SM;
      * 1 of 8 in the producer warpgroup's kernel of two consumer warpgroups with a
        score_mod (softcap and ALiBi at head dim 128, about 3 %; 2 and 4 of 8 no better);
      * none elsewhere, where it measured slower (the sm_80 kernels 4-13 %; softcap + causal
        at head dim 64 on three consumer warpgroups 2 % with 1 of 8, 4 % with 2)."""
    one_warpgroup = s.target == "sm_90a" and s.consumer_warpgroups == 1 and not s.plan.producer
    if one_warpgroup and s.static_max is not None:
        return 2
    two_consumers = s.plan.producer and s.consumer_warpgroups == 2
    return 1 if two_consumers and (s.hooks.score_mod or s.hooks.score_bias) else 0


def sm100a_defaults(kernel=None, held: dict | None = None) -> dict:
    """attn-lower-sm100a's choices (Note [Choices on sm_100a] in kernel_choices.py) for
    `kernel` (None: those of no kernel's), given those it `held` already ({option: value}:
    run_ranges' default follows aligned_tiles'), which no Blackwell GPU has timed here:
      * exp2_fma 0: the split pays on sm_90a only where measured, so none until measured;
      * lazy_rescale on: FlashAttention-4's own default for 16-bit inputs (a threshold of
        2^8), and the reason is sm_100a's: there a rescale is a round trip of O's row through
        tensor memory that the next P.V waits for (Note [Lazy rescale on sm_100a] in
        attnc/backend/sm100a.py), where on sm_80 and sm_90a it is FMULs on registers;
      * aligned_tiles wherever the kernel can take them, as on the other targets: what they
        save is tiles (MIXED ones, and the rows of a block that straddles two documents),
        which no target changes (Note [Tile table on sm_100a] in sm100a_tiles.py);
      * run_ranges on the aligned tiles wherever the rest of the mask is static and the
        map's program was not asked for (`asked_steps` in attnc/backend/map_program.py), as
        on the other targets but for their register floor, which sm_100a's budgets do not
        have: the bundle then runs no map kernel and the roles read no map."""
    chosen = {"exp2_fma": 0, "lazy_rescale": True}
    if kernel is not None:
        from attnc.backend.sm100a_tiles import run_rest_of, table_refusal
        held = held or {}
        possible = table_refusal(kernel) is None
        aligned = held.get("aligned_tiles", aligned_tiles(possible))
        chosen["aligned_tiles"] = aligned
        if "run_ranges" not in held:        # (the analysis of the rest runs only where asked)
            from attnc.backend.map_program import asked_steps
            chosen["run_ranges"] = aligned and possible and run_rest_of(kernel) is not None and \
                asked_steps(kernel) is None
    return chosen


def aligned_tiles(possible: bool) -> bool:
    """Note [Document-aligned tiles] in attnc/backend/qtiles.py: wherever the kernel can
    take them (a mask with the ids' conjunct, read from a map; one query block per CTA, no
    producer warpgroup, no persistent walk)."""
    return possible


def tail_waves(s) -> int:
    """Note [Longest tiles last] in attnc/backend/qtiles.py: on the heads-first grid."""
    from attnc.backend.qtiles import TAIL_WAVES
    return TAIL_WAVES if s.choices.heads_first else 0


def run_ranges(s) -> bool:
    """Note [Ranges from the runs] in attnc/backend/run_ranges.py: wherever the rest of
    the mask is static (the runs exist), but for a kernel at the 128-register floor of its
    CTAs per SM, where the runs' kernel spilled, lost its bound and ran 10 % slower
    (sm_90a at head dim 64), and where the map's program was asked for (the lowering asks
    `asked_steps`). `keeps_run_ranges` then says whether the map is kept after all."""
    return not s.registers_at_floor


def keeps_run_ranges(runs, map_holds: bool, split_mask) -> bool:
    """Where the map records what a MIXED tile holds and the rest has another residual
    conjunct beside the ids', the map stays (the runs can say it of the ids only), unless
    split_mask is false (split = false on every attn.mask), under which the map's record
    is not read (Note [Ranges from the runs])."""
    return not (map_holds and not runs.ids_only_residual and split_mask is not False)


# In the order they depend on each other: small_grid asks whether a grid order was given.
_RULES = (("min_ctas_per_sm", min_ctas_per_sm),
          ("small_grid", small_grid), ("tiles_last", tiles_last),
          ("heads_first", heads_first), ("lean_loads", lean_loads), ("dead_rows", dead_rows),
          ("kv_loops", kv_loops),
          ("lazy_rescale", lazy_rescale), ("mma_row_sum", mma_row_sum))
# The choices each op holds its own of (Note [Choices op by op] in kernel_choices.py): their
# defaults depend on the kernel's facts and its choices of one per kernel (resolved first).
_OP_RULES = {"qk_unroll": qk_unroll, "interval_test": interval_test, "exp2_fma": exp2_fma,
             "split_mask": split_mask, "staged_o": staged_o}


def op_default(option: str, spec: "ForwardSpec"):
    """The value of the choice of its own `option` in an op of `spec`'s kernel that holds none."""
    return _OP_RULES[option](spec)


def op_defaults(spec: "ForwardSpec") -> dict:
    """{(step op name, what): {attribute: default}} of the choices ops hold their own of,
    for `RoleSteps.with_defaults` (attnc/backend/role_steps.py)."""
    from attnc.passes.kernel_choices import PER_OP

    out: dict = {}
    for choice in PER_OP:
        for what in choice.tiles or ("",):
            key = (choice.op.removeprefix("attn."), what)
            out.setdefault(key, {})[choice.attr] = op_default(choice.option, spec)
    return out
