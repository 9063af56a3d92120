"""The forward kernel as the lowering reads it from the L5 IR (every target's: sm80.py,
sm90a.py, sm90a_ws.py).

`ForwardSpec` is a frozen record whose parts are each what one part of the IR gives:
the attn.kernel's variant, target and tiles; its hooks (`KernelHooks`, mask_hooks.py:
the mask's questions and the score's rewrites, Note [Mask hooks]) from the hook
regions; its plan (`FollowedPlan`, attnc/passes/plan_ir.py) from the roles and
channels; its roles' steps (`RoleSteps`, role_steps.py) and its buffers as placed;
and its choices (`KernelChoices`) from attn-kernel-choices' attributes, their
defaults attnc/passes/choice_defaults.py's. A feature adds to the part of the IR it
reads, not to this record. The properties here are facts derived from the parts
(threads, tiles' bytes, what a kind of kernel can do); `check()` does every feasibility
check before anything is built (spec_checks.py), naming the knob to change and the part
it read.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from attnc.backend.mask_hooks import KernelHooks
from attnc.ir.kernel import KernelVariant
from attnc.passes.plan_ir import FollowedPlan
from attnc.backend.role_steps import RoleSteps
from attnc.backend.smem_layout import SmemLayout
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
class KernelChoices:
    """The choices of one kernel that shape what several of its ops share -- O's
    registers, the rescale's vote across trips, the key range's loads, the grid -- as
    attn-kernel-choices recorded them on their ops (`kernel_choices.read`), each None
    until read from the IR or resolved (attnc/passes/choice_defaults.py's `resolve`).
    The pass's options document each, the Notes say what each does."""
    min_ctas_per_sm: Optional[int] = None   # .minnctapersm, 0: none (Note [CTAs per SM])
    min_ctas_unless_spills: Optional[bool] = None   # min_ctas_per_sm dropped where the kernel spills
    heads_first: Optional[bool] = None      # Note [Heads first] in kernel_abi.py
    tiles_last: Optional[bool] = None       # Note [Tiles last] in kernel_abi.py
    small_grid: Optional[bool] = None       # Note [Small grids] in kernel_abi.py
    lean_loads: Optional[bool] = None       # Note [Lean step loads] in forward_loads.py
    dead_rows: Optional[bool] = None        # Note [Dead rows] in sm80.py
    kv_loops: Optional[int] = None          # Note [Key loops] in sm80.py
    lazy_rescale: Optional[bool] = None     # Note [Lazy rescale] in softmax.py
    mma_row_sum: Optional[bool] = None      # Note [Row sums on the tensor cores] in softmax.py


@dataclass(frozen=True)
class ForwardSpec:
    """The forward kernel as the lowering reads it from the L5 IR (lowering.py), a record
    of what each part of the IR gives: the attn.kernel's variant (its types, head dims,
    scale, outputs: Note [The variant from the IR] in attnc/ir/kernel.py), target and
    tiles; the hooks its regions give (`KernelHooks`); the plan its roles and channels
    give (`FollowedPlan`, attnc/passes/plan_ir.py); its roles' steps and buffers as
    placed; and the choices attn-kernel-choices recorded (`KernelChoices`). `target`
    picks the GEMMs: mma.sync on sm_80, wgmma on sm_90a, where every 4 warps form a
    warpgroup of 64 rows."""
    variant: KernelVariant
    target: str                            # one of KERNEL_TARGETS (spec_checks.py)
    block_m: int
    block_n: int
    plan: FollowedPlan
    symbol: str = "attnc_fwd"
    hooks: KernelHooks = KernelHooks()     # from the hook regions and attn-analyze-masks (variant_hooks.py)
    banded: bool = False                   # the mask keeps a band of keys per row (tile.banded_mask)
    far_edge: bool = False                 # one segment's key range may end in mixed blocks (analyze_masks.far_edge)
    blockmap: bool = False                 # the key ranges are found at run time: from a block map,
                                          # or from a tile table's runs (run_ranges.py)
    aligned_tiles: bool = False            # query tiles from a tile table (Note [Document-aligned
                                          # tiles] in qtiles.py), set by the lowering with the map
                                          # or the runs
    tiles_per_head: bool = False           # the tile table has a slot per head (else per batch)
    steps: RoleSteps = RoleSteps()         # the steps of its roles, lowered op by op (role_steps.py)
    smem: Optional[SmemLayout] = None      # the tiles as attn-alloc-smem placed them (Note [Buffers as
                                          # placed] in smem_layout.py)
    # -- the kernel's choices as attn-kernel-choices recorded them (Note [Choices op by op]
    # in attnc/passes/kernel_choices.py: the ones each op holds its own of are on the steps' ops)
    choices: KernelChoices = KernelChoices()

    # -- derived
    @property
    def o_dtype(self) -> str:
        return self.variant.output("o").dtype

    @property
    def scale(self) -> float:
        return self.variant.scale

    @property
    def static_max(self) -> Optional[float]:
        """The constant running max of a bounded score_mod (Note [Bounded score_mod] in
        softmax.py), or None: bf16 only, and (hi - lo) in natural units at most
        STATIC_MAX_SPREAD."""
        bounds = getattr(self.hooks.score_mod, "bounds", None)
        return bounded_max(self.variant.dtype, bounds() if bounds is not None else None, self.hooks.score_mod_out)

    @property
    def registers_at_floor(self) -> bool:
        """Whether the default register bound of Note [CTAs per SM] leaves a thread just the
        128 registers below which the accumulators spill (a bound given as min_ctas_per_sm
        is the user's, kept whatever ptxas reports: never at the floor in this sense)."""
        return (self.choices.min_ctas_unless_spills and self.choices.min_ctas_per_sm >= 2
                and self.choices.min_ctas_per_sm * self.threads * 128 >= SM90_REGISTERS_PER_SM)

    @property
    def can_lean_loads(self) -> bool:
        """The key range stays below cdiv(N, block_n): a block map's, or a band's (clamped)."""
        return self.target == "sm_80" and (self.blockmap or self.banded)

    @property
    def asks_tile_skip(self) -> bool:
        """Whether the steps ask tile_skip: not a band's lean steps (Note [Lean step loads]:
        the blocks of its range nearly always keep keys, and one that keeps none is masked
        whole, as tile_partial says)."""
        return self.hooks.tile_skip is not None and (self.blockmap or not self.choices.lean_loads)

    @property
    def resident_ctas(self) -> int:
        """CTAs of this kernel an SM of an H100/H200 holds at most: by shared memory, and by
        registers at min_ctas's bound or else at 255 a thread (ptxas's count is not known
        here: low where it allocates fewer)."""
        by_smem = SM90_SMEM_PER_SM // (self.smem_bytes + SM90_SMEM_RESERVED_PER_CTA)
        by_registers = self.choices.min_ctas_per_sm or SM90_REGISTERS_PER_SM // (self.threads * 256)
        return max(1, min(by_smem, by_registers))

    @property
    def takes_tile_table(self) -> bool:
        """The kernel can take its query tiles from a tile table (Note [Document-aligned
        tiles] in qtiles.py): one query block per CTA, no producer warpgroup, no persistent
        walk over the grid's blocks."""
        return self.plan.q_blocks_per_cta == 1 and not self.plan.producer and not self.plan.persistent

    @property
    def can_stage_o(self) -> bool:
        """Every tile is dead at the epilogue (one query block per CTA, no producer loading
        the next), O is 16-bit and fits in the tiles' shared memory."""
        return (self.plan.q_blocks_per_cta == 1 and not self.plan.producer and self.o_dtype != "f32"
                and self.layout.o + self.block_m * self.variant.head_dim_v * 2 <= self.layout.end)

    @property
    def can_skip_dead_rows(self) -> bool:
        """An sm_80 kernel whose warps own two or more 16-row tiles, with two or more K/V
        slots (V waited for after the softmax) and a mask that keeps an interval of keys
        per row (the test of a tile's rows)."""
        return (self.target == "sm_80" and not self.plan.producer and self.m_atoms > 1 and self.plan.stages > 1
                and self.hooks.row_interval is not None and self.steps_in_default_order)

    @property
    def steps_in_default_order(self) -> bool:
        """The KV steps' ops stand in the order the plan passes make (Note [Steps op by
        op] in kv_steps.py): Note [Dead rows]' first step is built in that order."""
        return self.steps.kv is None or self.steps.kv.in_default_order(self.plan.stages)

    @property
    def atom_rows(self) -> int:
        """Rows from one of a warp's 16-row tiles to its next: 16 (a warp's rows contiguous),
        or 16 * num_warps where the tiles interleave (Note [Dead rows] in sm80.py)."""
        return 16 * self.plan.warps if self.choices.dead_rows else 16

    @property
    def threads(self) -> int:
        """Threads of the CTA: the computing warps, and the producer warpgroup's."""
        return 32 * self.plan.warps + (PRODUCER_THREADS if self.plan.producer else 0)

    @property
    def loader_threads(self) -> int:
        """Threads that issue the cp.async copies: the producer's, or every thread."""
        return PRODUCER_THREADS if self.plan.producer else self.threads

    @property
    def consumer_warpgroups(self) -> int:
        return self.plan.warps // 4

    @property
    def rows_per_warp(self) -> int:
        return self.block_m // self.plan.warps

    @property
    def m_atoms(self) -> int:
        """16-row MMA tiles each warp owns."""
        return self.rows_per_warp // 16

    def page_width(self, d: int) -> int:
        """Columns of one swizzled smem page (FA2's kBlockKSmem)."""
        return 64 if d % 64 == 0 else 32

    @property
    def q_tile_bytes(self) -> int:
        return self.block_m * self.variant.head_dim_qk * 2

    @property
    def k_tile_bytes(self) -> int:
        return self.block_n * self.variant.head_dim_qk * 2

    @property
    def v_tile_bytes(self) -> int:
        return self.block_n * self.variant.head_dim_v * 2

    @property
    def layout(self) -> SmemLayout:
        """Where the tiles lie in shared memory (Note [Buffers as placed] in smem_layout.py)."""
        return self.smem

    @property
    def smem_bytes(self) -> int:
        """The tiles and the mbarriers after them (Note [Mbarriers as planned])."""
        return self.layout.bytes

    @property
    def acc_registers(self) -> int:
        """f32 accumulator registers per thread: S (block_n wide) and O (head_dim_v wide)."""
        return self.m_atoms * 4 * (self.block_n // 8 + self.variant.head_dim_v // 8)

    def own_choice(self, attr: str, missing=None):
        """A choice each op holds its own of (Note [Choices op by op] in
        attnc/passes/kernel_choices.py) as the steps' ops hold it: its one value, the
        values sorted where ops differ, `missing` where no op holds one."""
        values = sorted(self.steps.choice_values(attr))
        return missing if not values else values[0] if len(values) == 1 else values

    def check(self) -> "ForwardSpec":
        """Raise SpecError (spec_checks.py) unless this specialization can be built; return self."""
        return check_spec(self)

    @property
    def max_smem_bytes(self) -> int:
        return SM90_MAX_DYNAMIC_SMEM if self.target == "sm_90a" else SM80_MAX_DYNAMIC_SMEM


def bounded_max(dtype: str, bounds: tuple[float, float] | None, out_factor: float) -> Optional[float]:
    """The constant running max of a score_mod whose g = score / out_factor lies in
    `bounds` (Note [Bounded score_mod] in softmax.py), or None: bf16 only, and (hi - lo)
    in natural units at most STATIC_MAX_SPREAD."""
    if dtype != "bf16" or bounds is None or (bounds[1] - bounds[0]) * out_factor > STATIC_MAX_SPREAD:
        return None
    return bounds[1]


# The kernel choices' fields: what attn-kernel-choices records, each resolved by
# attnc/passes/choice_defaults.py where the IR gives none.
CHOICES = tuple(f.name for f in fields(KernelChoices))
