"""One specialization of the forward kernel (every target's: sm80.py, sm90a.py, sm90a_ws.py).

`ForwardSpec` is a frozen value: every field changes the generated code, and
`cache_key()` covers them all. Its hooks (the mask's questions and the score's
rewrites, Note [Mask hooks]) are mask_hooks.py's; the options left None are resolved by
the derived properties here, each saying where its default comes from; `check()` does
every feasibility check before anything is built (spec_checks.py), naming the knob to
change; `default_forward_spec` gives a checked spec with the default tiles of its head dims.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Optional

from attnc.backend.mask_hooks import (ExtraParam, KeepFn, KvRangeFn, RowIntervalFn, ScoreBiasFn, ScoreModFn,
                                      SinkFn, TileHoldsFn, TilePartialFn)
from attnc.backend.coop_steps import CoopSteps
from attnc.backend.kv_steps import KvSteps
from attnc.backend.load_steps import LoadSteps
from attnc.backend.wgmma_steps import WgmmaSteps
from attnc.backend.smem_layout import Mbarrier, SmemLayout
from attnc.backend.spec_checks import check_spec

STATIC_MAX_SPREAD = 64.0            # Note [Bounded score_mod] in softmax.py
SM80_MAX_DYNAMIC_SMEM = 166912      # bytes per block on A100 (163 KB)
SM90_MAX_DYNAMIC_SMEM = 232448      # bytes per block on H100/H200 (227 KB)
SM90_SMEM_PER_SM = 228 * 1024       # H100/H200: shared memory per SM
SM90_SMEM_RESERVED_PER_CTA = 1024   # the driver's reserve per resident CTA
SM90_REGISTERS_PER_SM = 65536       # 32-bit registers per SM
PRODUCER_THREADS = 128              # sm_90a: the producer warpgroup (one warpgroup of 4 warps)


def producer_barriers(persistent: bool) -> tuple[str, ...]:
    """The mbarriers of the producer warpgroup's kernel (sm90a_ws.py), by tile and side,
    as attn-insert-pipelines orders them; a persistent CTA's Q slot has an empty one."""
    return ("q_full", *(("q_empty",) if persistent else ()), "k_full", "v_full", "k_empty", "v_empty")


@dataclass(frozen=True)
class ForwardSpec:
    """The FlashAttention-2-shaped forward kernel: one cooperative role of `num_warps`
    warps loading with cp.async; `target` picks its GEMMs (mma.sync on sm_80, wgmma on
    sm_90a, where every 4 warps form a warpgroup of 64 rows)."""
    dtype: str
    head_dim_qk: int
    head_dim_v: int
    block_m: int = 128
    block_n: int = 64
    num_warps: int = 4
    stages: int = 2                       # K/V slots in shared memory (1: FA2's single K, V)
    out_dtype: Optional[str] = None       # default: dtype
    with_lse: bool = False
    mask: str = "none"
    softmax_scale: Optional[float] = None  # default: 1/sqrt(head_dim_qk)
    qk_unroll: Optional[int] = None       # k16 steps per QK^T loop trip; 0: fully unrolled;
                                          # None: 1 for head_dim_qk <= 96, else 0
    symbol: str = "attnc_fwd"
    kv_range: Optional[KvRangeFn] = None   # default: from `mask`
    kv_hint: Optional[KvRangeFn] = None    # a block map's static hull: its top guesses the first block
    tile_partial: Optional[TilePartialFn] = None
    tile_skip: Optional[TilePartialFn] = None
    tile_holds: Optional[TileHoldsFn] = None
    keep: Optional[KeepFn] = None          # default: from `mask`
    row_interval: Optional[RowIntervalFn] = None   # keep as a per-row key range, when it is one
    row_residual: Optional[KeepFn] = None  # with row_interval: keep's other conjuncts, tested per score
    score_mod: Optional[ScoreModFn] = None
    score_mod_in: Optional[float] = None   # raw score factor before score_mod (default: scale)
    score_mod_out: float = 1.0             # score_mod's result times this: natural units
    score_bias: Optional[ScoreBiasFn] = None
    sink: Optional[SinkFn] = None
    extra_params: tuple[ExtraParam, ...] = field(default=())
    q_blocks_per_cta: Optional[int] = None  # 1 or 2 (Note [Two query blocks per CTA] in forward.py);
                                          # None: on sm_80 2 with a constant softmax max
                                          # (static_max) at block_n >= 128, else 1; on sm_90a 1
    interval_test: Optional[str] = None    # a row interval's per-score test: "bits", "range"
                                          # or "pair" (Note [One compare per score] in
                                          # score_masks.py); None: bits up to block_n 128
    min_ctas_per_sm: Optional[int] = None  # .minnctapersm (0: none); None: min_ctas decides
    min_ctas_unless_spills: bool = False   # min_ctas_per_sm is kept only where the kernel does not
                                          # spill under it (as min_ctas' default is)
    target: str = "sm_80"                  # one of KERNEL_TARGETS (spec_checks.py)
    producer_warpgroup: Optional[bool] = None  # sm_90a: a warpgroup that only loads, besides the
                                          # num_warps computing ones (Note [Producer warpgroup] in
                                          # sm90a_ws.py); None: warp_specialized decides
    pingpong: bool = False                 # with it: two consumer warpgroups take turns at the GEMMs
    producer_regs: Optional[int] = None    # with it: setmaxnreg budgets of the producer and each
    consumer_regs: Optional[int] = None    # consumer thread (two consumer warpgroups); None: the
                                          # recipe's (attnc/schedule/recipes.py)
    persistent: Optional[bool] = None      # with a producer warpgroup: one CTA per SM loops over
                                          # the query blocks (Note [Persistent CTAs] in sm90a_ws.py);
                                          # None: persistent_ctas decides
    walk_order: str = "snake"              # with persistent CTAs: how they take the query blocks
                                          # (attnc/schedule/walk.py's ORDERS)
    exp2_fma: Optional[int] = None         # of every 8 scores of a row, how many take their exp2 on
                                          # the FMA pipe, 0..8 (Note [Exponentials on the FMA pipe]
                                          # in softmax.py); None: exp2_on_fma decides
    banded: bool = False                   # the mask keeps a band of keys per row (tile.banded_mask)
    blockmap: bool = False                 # the key ranges are found at run time: from a block map,
                                          # or from a tile table's runs (run_ranges.py)
    heads_first: Optional[bool] = None     # grid x runs over the heads, y over the query blocks
                                          # (Note [Heads first] in kernel_abi.py); None:
                                          # grid_heads_first
    tiles_last: Optional[bool] = None      # grid (H, B, query blocks): each query block of every
                                          # (b, h) before the next (Note [Tiles last] in
                                          # kernel_abi.py); None: off
    small_grid: Optional[bool] = None      # the bundle also holds the kernel with tiles_last (Note
                                          # [Small grids] in kernel_abi.py); None:
                                          # has_small_grid_kernel decides
    lean_loads: Optional[bool] = None      # lean KV steps for block maps and bands (Note
                                          # [Lean step loads] in forward_loads.py); None:
                                          # step_loads_lean
    staged_o: Optional[bool] = None        # O written through shared memory in 16-byte stores
                                          # (Note [Staged O] in epilogue.py); None: o_staged
    split_mask: Optional[bool] = None      # partial blocks test only the conjuncts tile_holds does
                                          # not prove (Note [Conjuncts a tile holds]); None: mask_split
    lazy_rescale: Optional[bool] = None    # Note [Lazy rescale] in softmax.py; None: rescale_lazily
    mma_row_sum: Optional[bool] = None     # Note [Row sums on the tensor cores] in softmax.py;
                                          # None: row_sum_on_mma
    early_first: Optional[bool] = None     # load the top block of kv_hint (a table tile: its diagonal)
                                          # before the range is read from a map or scanned from the
                                          # runs (Note [First block before the map] in
                                          # forward_loads.py); None: first_before_map
    aligned_tiles: bool = False            # query tiles from a tile table (Note [Document-aligned
                                          # tiles] in qtiles.py), set by the lowering with the map
                                          # or the runs
    tiles_per_head: bool = False           # the tile table has a slot per head (else per batch)
    dead_rows: Optional[bool] = None       # warps' 16-row tiles interleaved, and in the first key
                                          # step a tile whose rows keep none of its keys skips its
                                          # MMAs (Note [Dead rows] in sm80.py); None: skips_dead_rows
    wgmma_steps: Optional[WgmmaSteps] = None  # sm_90a consumers' overlapped trips, lowered op by op
                                          # (Note [Overlapped steps op by op]); None: the default
    load_steps: Optional[LoadSteps] = None  # sm_90a producer's trips, lowered op by op (Note [Loads
                                          # op by op] in load_steps.py); None: the default
    coop_steps: Optional[CoopSteps] = None  # sm_90a's cooperative trips, lowered op by op (Note
                                          # [Cooperative steps op by op]); None: the default
    kv_steps: Optional[KvSteps] = None     # the KV loops' bodies, lowered op by op on sm_80 (Note
                                          # [Steps op by op] in kv_steps.py); None: KvSteps.default
    smem: Optional[SmemLayout] = None      # the tiles as attn-alloc-smem placed them (Note [Buffers as
                                          # placed] in smem_layout.py); None: SmemLayout.interleaved

    # -- derived
    @property
    def o_dtype(self) -> str:
        return self.out_dtype or self.dtype

    @property
    def scale(self) -> float:
        return self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(self.head_dim_qk)

    @property
    def qk_steps_per_trip(self) -> int:
        """qk_unroll resolved (Note [Rolled QK^T] in sm80.py): from sweeps of nvJitLink's
        sm_80 resource report, rolling the short QK^T loops of d <= 96 removes spills."""
        if self.qk_unroll is not None:
            return self.qk_unroll
        return 1 if self.head_dim_qk <= 96 and self.target == "sm_80" else 0

    @property
    def static_max(self) -> Optional[float]:
        """The constant running max of a bounded score_mod (Note [Bounded score_mod] in
        softmax.py), or None: bf16 only, and (hi - lo) in natural units at most
        STATIC_MAX_SPREAD."""
        bounds = getattr(self.score_mod, "bounds", None)
        if self.dtype != "bf16" or bounds is None:
            return None
        b = bounds()
        if b is None or (b[1] - b[0]) * self.score_mod_out > STATIC_MAX_SPREAD:
            return None
        return b[1]

    @property
    def blocks_per_cta(self) -> int:
        """q_blocks_per_cta resolved. Two for a kernel with a constant max and 128-key
        tiles: softcap + causal ran 5 % faster at head dim 64 (128x128 tiles), hardly at
        128 (128x64, where the sm_80 assembly of the dense softcap example spilled 108
        bytes); causal, ALiBi and the window ran 1-8 % slower with two, so one block stays
        their default (results/sm80_h200.md, "Two query blocks per CTA")."""
        if self.q_blocks_per_cta is not None:
            return self.q_blocks_per_cta
        if self.target == "sm_90a":
            # sm_90a's wgmma kernel: one everywhere. Two ran softcap slower, and documents
            # + causal fast in some runs and a fifth slower in others, where one block a
            # CTA held its time (results/sm90a_h200.md, "One query block per CTA").
            return 1
        return 2 if self.static_max is not None and self.block_n >= 128 else 1

    @property
    def min_ctas(self) -> int:
        """min_ctas_per_sm resolved: the CTAs per SM that ptxas must fit the registers
        for (PTX .minnctapersm), 0 for no bound.

        Note [CTAs per SM]: the sm_90a kernel's CTAs are independent warpgroups whose
        softmax and GEMMs interleave on an SM only if several are resident. Left alone,
        ptxas gives the 64x128-tile kernels at head dim 64 187 to 238 registers, two CTAs
        per SM, where shared memory has room for three; bounded to three (168 registers,
        no spills for causal and ALiBi, 16 bytes for softcap) they ran 5-7 % faster, and
        so did the 64x64 kernels (window, documents) at four (128 registers): see
        results/sm90a_h200.md, "CTAs per SM". So on sm_90a the bound is the CTAs shared memory
        holds, but no more than leave 128 registers per thread (below that the S and O
        accumulators spill). sm_80 keeps ptxas's choice: its kernels were tuned on it,
        and its occupancy depends on the GPU's shared memory (A100 or later)."""
        if self.min_ctas_per_sm is not None:
            return self.min_ctas_per_sm
        if self.target != "sm_90a" or self.warp_specialized:
            return 0        # (a producer's warpgroups set their own registers: setmaxnreg)
        by_smem = SM90_SMEM_PER_SM // (self.smem_bytes + SM90_SMEM_RESERVED_PER_CTA)
        by_registers = SM90_REGISTERS_PER_SM // (self.threads * 128)
        ctas = min(by_smem, by_registers)
        return ctas if ctas >= 2 else 0

    @property
    def bound_unless_spills(self) -> bool:
        """Whether the register bound of min_ctas is dropped where the kernel spills under it:
        the default's (Note [CTAs per SM]), not a bound given as min_ctas_per_sm."""
        return self.min_ctas_per_sm is None or self.min_ctas_unless_spills

    @property
    def registers_at_floor(self) -> bool:
        """Whether the default register bound of Note [CTAs per SM] leaves a thread just the
        128 registers below which the accumulators spill (a bound given as min_ctas_per_sm
        is the user's, kept whatever ptxas reports: never at the floor in this sense)."""
        return (self.bound_unless_spills and self.min_ctas >= 2
                and self.min_ctas * self.threads * 128 >= SM90_REGISTERS_PER_SM)

    @property
    def interval_test_form(self) -> str:
        """interval_test resolved: "bits" while a lane's row holds at most 32 scores
        (block_n <= 128), else "range" (Note [One compare per score] in score_masks.py)."""
        if self.interval_test is not None:
            return self.interval_test
        return "bits" if self.block_n <= 128 else "range"

    @property
    def warp_specialized(self) -> bool:
        """producer_warpgroup resolved. By default on sm_90a where two consumer warpgroups
        share a 128-row Q tile at head dim 128 (one CTA per SM): causal, softcap and ALiBi
        14-22 % faster. Not with one consumer warpgroup (64-row tiles, several CTAs per
        SM, which overlap each other already), nor at head dim 64 on 128-row tiles, where
        it measured slower (results/sm90a_h200.md, "Producer warpgroup")."""
        from attnc.schedule.recipes import default_producer

        if self.producer_warpgroup is not None:
            return self.producer_warpgroup
        return (self.target == "sm_90a" and self.q_blocks_per_cta in (None, 1)
                and default_producer(self.consumer_warpgroups, self.stages, (self.head_dim_qk, self.head_dim_v)))

    @property
    def persistent_ctas(self) -> bool:
        """persistent resolved: by default for a band (a sliding window) in the producer
        warpgroup's kernel, where every query block is the same few steps, so that its
        prologue and epilogue weigh most: window 1024 at head dim 128 about 10 % faster
        than at the 64x64 tiles it had, with the consumers storing O under the next
        block's first QK^T (Note [The next block's first QK^T] in sm90a_ws.py). Not for the
        others: causal ran as fast as without, softcap and ALiBi 4 % slower (their
        persistent consumers spill), documents + causal slower than at its 64x64 tiles
        (results/sm90a_h200.md, "Persistent CTAs")."""
        if self.persistent is not None:
            return self.persistent
        return self.warp_specialized and self.banded

    @property
    def grid_tiles_last(self) -> bool:
        """The grid is (H, B, query blocks) (tiles_last given true: Note [Tiles last] in
        kernel_abi.py)."""
        return bool(self.tiles_last)

    @property
    def has_small_grid_kernel(self) -> bool:
        """small_grid resolved: whether the bundle also holds this kernel with tiles_last, for
        the runtime to launch on small grids (Note [Small grids] in kernel_abi.py); by default
        sm_80's kernels of one query block per CTA whose query blocks' work differs (a mask,
        not a band), neither tiles_last nor heads_first given."""
        if self.small_grid is not None:
            return self.small_grid
        return (self.tiles_last is None and self.heads_first is None and self.target == "sm_80"
                and self.blocks_per_cta == 1 and self.mask != "none" and not self.banded
                and not self.warp_specialized and not self.persistent_ctas)

    @property
    def grid_heads_first(self) -> bool:
        """heads_first resolved (Note [Heads first] in kernel_abi.py): by default in sm_80's
        kernels for a band or a block map, whose query blocks each read a few key blocks
        of their own head: 1-2 % faster (results/sm80_h200.md, "Heads first"). Not on
        sm_90a, where the window at head dim 64 (64x64 tiles, four CTAs per SM) ran 8 %
        slower and documents gained under 2 %; nor for other masks, whose blocks read keys
        from the start of the sequence, so that the keys of all heads at once would stream
        through L2 (causal at head dim 64 ran 2 % faster at N = 8192, where the keys of 128
        heads take 256 MiB already; a longer sequence only adds to them)."""
        if self.heads_first is not None:
            return self.heads_first
        return (self.target == "sm_80" and (self.banded or self.blockmap) and self.blocks_per_cta == 1
                and not self.warp_specialized and not self.grid_tiles_last)

    @property
    def step_loads_lean(self) -> bool:
        """lean_loads resolved (Note [Lean step loads] in forward_loads.py): by default for a block
        map or a band on sm_80."""
        return self.can_lean_loads if self.lean_loads is None else self.lean_loads

    @property
    def can_lean_loads(self) -> bool:
        """The key range stays below cdiv(N, block_n): a block map's, or a band's (clamped)."""
        return self.target == "sm_80" and (self.blockmap or self.banded)

    @property
    def asks_tile_skip(self) -> bool:
        """Whether the steps ask tile_skip: not a band's lean steps (Note [Lean step loads]:
        the blocks of its range nearly always keep keys, and one that keeps none is masked
        whole, as tile_partial says)."""
        return self.tile_skip is not None and (self.blockmap or not self.step_loads_lean)

    @property
    def first_before_map(self) -> bool:
        """early_first resolved: by default wherever it can be, an sm_80 kernel reading its
        ranges from a block map with the static hull as the hint, or from a table's runs."""
        return self.can_load_first_early if self.early_first is None else self.early_first

    @property
    def can_load_first_early(self) -> bool:
        """A block map (or a tile table's runs) gives the range, known only once it is read
        (or scanned), and there is a first block to guess: the static hull's top, or a
        table tile's diagonal."""
        return self.target == "sm_80" and self.blockmap and (self.kv_hint is not None or self.aligned_tiles)

    @property
    def resident_ctas(self) -> int:
        """CTAs of this kernel an SM of an H100/H200 holds at most: by shared memory, and by
        registers at min_ctas's bound or else at 255 a thread (ptxas's count is not known
        here: low where it allocates fewer)."""
        by_smem = SM90_SMEM_PER_SM // (self.smem_bytes + SM90_SMEM_RESERVED_PER_CTA)
        by_registers = self.min_ctas or SM90_REGISTERS_PER_SM // (self.threads * 256)
        return max(1, min(by_smem, by_registers))

    @property
    def takes_tile_table(self) -> bool:
        """The kernel can take its query tiles from a tile table (Note [Document-aligned
        tiles] in qtiles.py): one query block per CTA, no producer warpgroup, no persistent
        walk over the grid's blocks."""
        return self.blocks_per_cta == 1 and not self.warp_specialized and not self.persistent_ctas

    @property
    def mask_split(self) -> bool:
        """split_mask resolved: by default wherever tile_holds is given."""
        return self.tile_holds is not None and self.split_mask is not False

    @property
    def o_staged(self) -> bool:
        """staged_o resolved (Note [Staged O] in epilogue.py): by default on sm_80
        wherever it can be (1-6 % faster, but causal at head dim 64 1.5 % slower: ptxas
        schedules its whole loop differently), on sm_90a for bands and block maps (3-7 %);
        not sm_90a's other kernels (ALiBi at head dim 64 6 % slower, causal and softcap
        within noise: there a query block's long key loop leaves the O store a small
        share). results/sm80_h200.md and sm90a_h200.md, "Staged O"."""
        if self.staged_o is not None:
            return self.staged_o
        return self.can_stage_o and (self.target == "sm_80" or self.banded or self.blockmap)

    @property
    def can_stage_o(self) -> bool:
        """Every tile is dead at the epilogue (one query block per CTA, no producer loading
        the next), O is 16-bit and fits in the tiles' shared memory."""
        return (self.blocks_per_cta == 1 and not self.warp_specialized and self.o_dtype != "f32"
                and self.layout.o + self.block_m * self.head_dim_v * 2 <= self.layout.end)

    @property
    def skips_dead_rows(self) -> bool:
        """dead_rows resolved (Note [Dead rows] in sm80.py): by default wherever it can be
        and a key block is shorter than the query block, so that a causal-like mask's
        first block (the diagonal's) leaves whole 16-row tiles without a key. With key
        blocks as long as the query block it has none to skip (window 1024 at head dim 64,
        128x128 tiles: it spilled and ran 5 % slower; results/sm80_h200.md, "Dead rows")."""
        if self.dead_rows is not None:
            return self.dead_rows
        return self.can_skip_dead_rows and self.block_n < self.block_m

    @property
    def can_skip_dead_rows(self) -> bool:
        """An sm_80 kernel whose warps own two or more 16-row tiles, with two or more K/V
        slots (V waited for after the softmax) and a mask that keeps an interval of keys
        per row (the test of a tile's rows)."""
        return (self.target == "sm_80" and not self.warp_specialized and self.m_atoms > 1 and self.stages > 1
                and self.row_interval is not None and self.steps_in_default_order)

    @property
    def steps_in_default_order(self) -> bool:
        """The KV steps' ops stand in the order the plan passes make (Note [Steps op by
        op] in kv_steps.py): Note [Dead rows]' first step is built in that order."""
        return self.kv_steps is None or self.kv_steps.in_default_order(self.stages)

    @property
    def atom_rows(self) -> int:
        """Rows from one of a warp's 16-row tiles to its next: 16 (a warp's rows contiguous),
        or 16 * num_warps where the tiles interleave (Note [Dead rows] in sm80.py)."""
        return 16 * self.num_warps if self.skips_dead_rows else 16

    @property
    def rescale_lazily(self) -> bool:
        """lazy_rescale resolved (Note [Lazy rescale] in softmax.py): by default above
        head dim 64, where O's rescale is 64 FMULs a row pair and skipping it paid (sm_80
        causal 4 % faster, sm_90a causal 3 % and documents 2 %), but not in sm_90a's
        persistent CTAs, whose rotated consumer then spills. At 64 the vote and branch
        spilled on sm_80 and measured no gain on either target (results/sm80_h200.md and
        sm90a_h200.md, "Lazy rescale"). A kernel with a constant max (static_max) has no
        rescale to skip."""
        asked = (self.lazy_rescale if self.lazy_rescale is not None
                 else self.head_dim_v > 64 and not (self.target == "sm_90a" and self.persistent_ctas))
        return asked and self.static_max is None

    @property
    def row_sum_on_mma(self) -> bool:
        """mma_row_sum resolved (Note [Row sums on the tensor cores] in softmax.py): by
        default on sm_80 for an affine score_mod (score_bias), where it measured 1.2-1.5 %
        faster, every round of one below every round of the other; elsewhere no gain or a
        loss (results/sm80_h200.md, "Row sums on the tensor cores"). sm_90a's P.V is a
        wgmma.
        Never for a kernel that writes the LSE: the sum of rounded P is off the f32 sum by
        up to bf16's rounding, which the LSE would keep (Note [Row sums on the tensor
        cores])."""
        if self.mma_row_sum is not None:
            return self.mma_row_sum
        return self.target == "sm_80" and self.score_bias is not None and not self.with_lse

    @property
    def exp2_on_fma(self) -> int:
        """exp2_fma resolved (Note [Exponentials on the FMA pipe] in softmax.py), as
        measured (results/sm90a_h200.md and sm80_h200.md, "Exponentials on the FMA pipe"):
          * 2 of 8 in sm_90a's one-warpgroup kernels with a constant softmax max
            (softcap), whose scores take two SFU operations: softcap + causal at head
            dim 64 5-8 % faster, partly because the register bound of Note [CTAs per SM]
            then holds three CTAs per SM;
          * 1 of 8 in the producer warpgroup's kernel with a score_mod (softcap and ALiBi
            at head dim 128, about 3 %; 2 and 4 of 8 no better);
          * none elsewhere, where it measured slower (the sm_80 kernels 4-13 %)."""
        if self.exp2_fma is not None:
            return self.exp2_fma
        one_warpgroup = self.target == "sm_90a" and self.consumer_warpgroups == 1 and not self.warp_specialized
        if one_warpgroup and self.static_max is not None:
            return 2
        return 1 if self.warp_specialized and (self.score_mod or self.score_bias) else 0

    @property
    def threads(self) -> int:
        """Threads of the CTA: the computing warps, and the producer warpgroup's."""
        return 32 * self.num_warps + (PRODUCER_THREADS if self.warp_specialized else 0)

    @property
    def loader_threads(self) -> int:
        """Threads that issue the cp.async copies: the producer's, or every thread."""
        return PRODUCER_THREADS if self.warp_specialized else self.threads

    @property
    def consumer_warpgroups(self) -> int:
        return self.num_warps // 4

    @property
    def rows_per_warp(self) -> int:
        return self.block_m // self.num_warps

    @property
    def m_atoms(self) -> int:
        """16-row MMA tiles each warp owns."""
        return self.rows_per_warp // 16

    def page_width(self, d: int) -> int:
        """Columns of one swizzled smem page (FA2's kBlockKSmem)."""
        return 64 if d % 64 == 0 else 32

    @property
    def q_tile_bytes(self) -> int:
        return self.block_m * self.head_dim_qk * 2

    @property
    def k_tile_bytes(self) -> int:
        return self.block_n * self.head_dim_qk * 2

    @property
    def v_tile_bytes(self) -> int:
        return self.block_n * self.head_dim_v * 2

    @property
    def layout(self) -> SmemLayout:
        """Where the tiles lie in shared memory (Note [Buffers as placed] in smem_layout.py)."""
        if self.smem is not None:
            return self.smem
        barriers = []
        if self.warp_specialized:       # as attn-insert-pipelines makes them
            for key in producer_barriers(self.persistent_ctas):
                tile, side = key.split("_")
                count = PRODUCER_THREADS if side == "full" else self.num_warps
                barriers.append(Mbarrier(f"mbar_{key}", tile, side, count, 1 if tile == "q" else self.stages))
        return SmemLayout.interleaved(self.q_tile_bytes, self.k_tile_bytes, self.v_tile_bytes, self.stages, barriers)

    @property
    def smem_bytes(self) -> int:
        """The tiles and the mbarriers after them (Note [Mbarriers as planned])."""
        return self.layout.bytes

    @property
    def acc_registers(self) -> int:
        """f32 accumulator registers per thread: S (block_n wide) and O (head_dim_v wide)."""
        return self.m_atoms * 4 * (self.block_n // 8 + self.head_dim_v // 8)

    def cache_key(self) -> str:
        parts = []
        for f in fields(self):
            v = getattr(self, f.name)
            if callable(v) and getattr(v, "__self__", None) is not None:     # a bound method
                v = f"{v.__self__!r}.{v.__name__}"
            elif callable(v):
                v = f"{getattr(v, '__module__', '?')}.{getattr(v, '__qualname__', repr(v))}"
            parts.append(f"{f.name}={v}")
        return ";".join(parts)

    def check(self) -> "ForwardSpec":
        """Raise SpecError (spec_checks.py) unless this specialization can be built; return self."""
        return check_spec(self)

    @property
    def max_smem_bytes(self) -> int:
        return SM90_MAX_DYNAMIC_SMEM if self.target == "sm_90a" else SM80_MAX_DYNAMIC_SMEM


# ---------------------------------------------------------------- default tiles

# max(head_dim_qk, head_dim_v) -> block_m, block_n, num_warps, stages. FA2's A100
# table, adjusted by what ran fastest with zero sm_80 spills (H200, M = N = 4096;
# results/sm80_h200.md, "Tiles"): 64 and 96 keep the QK^T loop rolled (Note [Rolled
# QK^T] in sm80.py), 256 single-buffers K/V (96 KB: two CTAs per SM where 228 KB are
# available).
_TILES = {
    64: dict(block_m=128, block_n=128, num_warps=4, stages=2),
    96: dict(block_m=128, block_n=64, num_warps=4, stages=2),
    128: dict(block_m=128, block_n=64, num_warps=4, stages=2),
    256: dict(block_m=64, block_n=64, num_warps=4, stages=1),
}


def default_forward_spec(dtype: str, head_dim_qk: int, head_dim_v: int | None = None, **overrides) -> ForwardSpec:
    """A checked spec with the tiles of `_TILES` for these head dims and `overrides` applied.
    Unequal head dims up to 128 take 32-key tiles (at 64, e.g. d_qk=96/d_v=128 spills)."""
    head_dim_v = head_dim_v or head_dim_qk
    tiles = dict(_TILES[max(head_dim_qk, head_dim_v)])
    if head_dim_qk != head_dim_v and max(head_dim_qk, head_dim_v) <= 128:
        tiles.update(block_n=32)
    return ForwardSpec(**{"dtype": dtype, "head_dim_qk": head_dim_qk, "head_dim_v": head_dim_v,
                             **tiles, **overrides}).check()
