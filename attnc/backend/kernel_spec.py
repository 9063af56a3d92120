"""One specialization of the sm_80 forward kernel, and the mask hooks it is built with.

`Sm80KernelSpec` is a frozen value: every field changes the generated code, and
`cache_key()` covers them all. `check()` does every feasibility check (tile shapes,
registers, shared memory) before anything is built, naming the knob to change.

Note [Mask hooks]: the kernel asks a mask these questions, each answered by emitting
i32/i1 arithmetic at the point of use (so a runtime block map or a DSL `mask_mod` can
answer them later):

* `kv_range(e, ctx) -> KvRange`: for the CTA's m_block, the key blocks to visit,
  [lo, hi), and inside it the blocks that need no per-element predicate, [full_lo,
  full_hi). The kernel visits hi-1 down to lo, so the partial blocks at the top
  (diagonal, ragged N edge) are peeled first; blocks outside [lo, hi) are never loaded.
  `KvRange.segments` (optional): the blocks to visit are the union of these sorted,
  disjoint [start, end) ranges inside [lo, hi) (a mask with holes, e.g. global tokens
  and a window); the loop then walks the union downwards, loading nothing in the holes.
* `kv_hint(e, ctx) -> KvRange` (optional, with a block map's kv_range): the static
  analysis' hull of the same mask, whose top block the kernel loads before the map is
  read (Note [First block before the map] in sm80.py).
* `tile_partial(e, ctx, n_block) -> i1` (optional): whether a block outside the full
  range [full_lo, full_hi) needs the predicate after all (the kernel adds the ragged
  last block itself); without it every such block is masked. Blocks inside the full
  range are never asked: give an empty full range to have every block asked (a block
  map).
* `tile_skip(e, ctx, n_block) -> i1` (optional): a block outside [full_lo, full_hi)
  that keeps nothing: it is neither loaded nor computed. It must be false inside the
  full range (a skipped block is not full).
* `keep(e, b, h, i, j) -> i1`: the element predicate applied in partial blocks, with
  i, j the global query/key indices (i32). The bound j < N is always added by the kernel.
* `row_interval(e, b, h, i) -> (lo, hi)` (optional): keep(b, h, i, j) holds exactly when
  lo <= j <= hi (i32, inclusive; lo None: no lower bound) and, if given,
  `row_residual(e, b, h, i, j, j_below_n) -> i1` (j_below_n: the kernel knows 0 <= j <
  N, Note [Indices known in range] in hooks.py); partial blocks then test each score's column
  against the row's bounds (and the residual) instead of calling keep (Note [Row
  intervals] and Note [Residual conjuncts] in hooks.py, Note [One compare per score] in
  sm80_masks.py).
* `tile_holds(e, ctx, n_block) -> (interval, residual)` (optional, with row_interval
  and row_residual): i1s that say the row interval's conjuncts, or the residual's, hold
  on every element of block n_block (rows < M, keys < N); a partial block then tests
  only the other part, and the kernel still drops keys >= N itself (Note [Conjuncts a
  tile holds] in blockmap.py).

and on scores, on every visited block (natural-log units, as dsl.md defines them):

* `score_mod(e, s, b, h, i, j) -> f32` rewrites the scaled score of every element
  (then the softmax uses base-2 exponent scale log2(e) instead of scale*log2(e)); with
  `score_mod_in` it is given the raw score times that factor instead of times the
  scale, and with `score_mod_out` its result times that factor is the score (both fold
  constant scalings of a score_mod into multiplications the kernel does anyway);
* or `score_bias(e, b, h, i, j) -> f32`, a score_mod that is s + bias: the kernel keeps
  the raw score and the folded scale, adding bias/scale with one FMA (Note [Folded
  scale] in sm80_softmax.py);
* `sink(e, h) -> f32`: the sink logit of head h, folded into the row sum at the end.

`e` is the kernel's `Emit` (nvgpu_builders.py); hooks may also call `arith`/`math`
directly: an insertion point and location are active.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Optional

DTYPES = ("f16", "bf16")
OUT_DTYPES = ("f16", "bf16", "f32")
HEAD_DIMS = (64, 96, 128, 256)
# "mask_mod": a DSL mask compiled into the hooks (kv_range and keep given by the spec).
MASK_MODES = ("none", "causal", "causal_bottom_right", "mask_mod")
STATIC_MAX_SPREAD = 64.0            # Note [Bounded score_mod] in sm80_softmax.py
INTERVAL_TESTS = ("range", "pair", "bits")  # Note [One compare per score] in sm80_masks.py
SM80_MAX_DYNAMIC_SMEM = 166912      # bytes per block on A100 (163 KB)
SM90_MAX_DYNAMIC_SMEM = 232448      # bytes per block on H100/H200 (227 KB)
SM90_SMEM_PER_SM = 228 * 1024       # H100/H200: shared memory per SM
SM90_SMEM_RESERVED_PER_CTA = 1024   # the driver's reserve per resident CTA
SM90_REGISTERS_PER_SM = 65536       # 32-bit registers per SM
PRODUCER_THREADS = 128              # sm_90a: the producer warpgroup (one warpgroup of 4 warps)
# Its mbarriers, 8 bytes each after the tiles: Q's, then per K/V slot these (sm90_ws.py).
SLOT_BARRIERS = ("k_full", "v_full", "k_empty", "v_empty")
MBARRIER_BYTES = 8
# The instruction set the kernel's two GEMMs use: mma.sync (sm_80, runs on every GPU
# since) or wgmma from swizzled shared memory (sm_90a, Note [wgmma steps] in sm90.py).
KERNEL_TARGETS = ("sm_80", "sm_90a")
MAX_ACC_REGS = 192                  # f32 accumulators (S + O) per thread before spilling


class SpecError(ValueError):
    """A specialization that cannot be built, with the knob to change."""


@dataclass(frozen=True)
class KvCtx:
    """What the mask hooks may read: all i32 values but the block sizes. On the fixed
    grid query block m_block holds the rows [m_block * block_m, +block_m) and key block n
    the keys [n * block_n, +block_n). With a tile table (`aligned`, Note [Document-aligned
    tiles] in qtiles.py) m_block is the table's tile, its rows [row0, row_end), and its key
    blocks start at the tile's key origin key0: `n_keys` keys lie past it (N - key0, at
    least 0); key_end is the table's (the end of the tile's run, or -1). Hooks that work
    on grid coordinates (the static analysis' kv_range) refuse such a context."""
    m_block: Any
    b: Any
    h: Any
    M: Any
    N: Any
    block_m: int
    block_n: int
    aligned: bool = False
    n_keys: Any = None
    row0: Any = None
    row_end: Any = None
    key0: Any = None
    key_end: Any = None

    def grid_only(self, what: str) -> None:
        assert not self.aligned, f"{what} reads grid blocks, not a tile table's tiles"


@dataclass(frozen=True)
class KvRange:
    lo: Any
    full_lo: Any
    full_hi: Any
    hi: Any
    segments: tuple[tuple[Any, Any], ...] = ()    # () : the whole [lo, hi)


KvRangeFn = Callable[[Any, KvCtx], KvRange]
TilePartialFn = Callable[[Any, KvCtx, Any], Any]
TileHoldsFn = Callable[[Any, KvCtx, Any], tuple[Any, Any]]
KeepFn = Callable[[Any, Any, Any, Any, Any], Any]
ScoreModFn = Callable[[Any, Any, Any, Any, Any, Any], Any]
ScoreBiasFn = Callable[[Any, Any, Any, Any, Any], Any]
SinkFn = Callable[[Any, Any], Any]
RowIntervalFn = Callable[[Any, Any, Any, Any], tuple[Any, Any]]


@dataclass(frozen=True)
class ExtraParam:
    """A kernel parameter a hook reads (`e.arg(name)`, or `e.arg(key)` which no ABI name
    can shadow), appended to the ABI: kind 'dim' (an int), 'ptr' (a tensor's device
    pointer) or 'scratch' (a buffer of `bytes` (manifest factors) that the runtime
    allocates and zeroes before the launch)."""
    kind: str
    name: str
    type: str = "i32"
    bytes: tuple = ()

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    def manifest(self) -> dict:
        if self.kind == "dim":
            return {"kind": "dim", "name": self.name, "type": self.type}
        if self.kind == "scratch":
            return {"kind": "scratch", "name": self.name, "bytes": list(self.bytes)}
        return {"kind": "ptr", "tensor": self.name}


@dataclass(frozen=True)
class Sm80KernelSpec:
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
    symbol: str = "attnc_sm80_fwd"
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
    q_blocks_per_cta: Optional[int] = None  # 1 or 2 (Note [Two query blocks per CTA] in sm80.py);
                                          # None: on sm_80 2 with a constant softmax max
                                          # (static_max) at block_n >= 128, else 1; on sm_90a 1
    interval_test: Optional[str] = None    # a row interval's per-score test: "bits", "range"
                                          # or "pair" (Note [One compare per score] in
                                          # sm80_masks.py); None: bits up to block_n 128
    min_ctas_per_sm: Optional[int] = None  # .minnctapersm (0: none); None: min_ctas decides
    target: str = "sm_80"                  # one of KERNEL_TARGETS
    producer_warpgroup: Optional[bool] = None  # sm_90a: a warpgroup that only loads, besides the
                                          # num_warps computing ones (Note [Producer warpgroup] in
                                          # sm90_ws.py); None: warp_specialized decides
    pingpong: bool = False                 # with it: two consumer warpgroups take turns at the GEMMs
    producer_regs: Optional[int] = None    # with it: setmaxnreg budgets of the producer and each
    consumer_regs: Optional[int] = None    # consumer thread (two consumer warpgroups); None: the
                                          # recipe's (attnc/schedule/recipes.py)
    v_first: bool = False                  # with it: each producer step issues V before K
    persistent: Optional[bool] = None      # with a producer warpgroup: one CTA per SM loops over
                                          # the query blocks (Note [Persistent CTAs] in sm90_ws.py);
                                          # None: persistent_ctas decides
    exp2_fma: Optional[int] = None         # of every 8 scores of a row, how many take their exp2 on
                                          # the FMA pipe, 0..8 (Note [Exponentials on the FMA pipe]
                                          # in sm80_softmax.py); None: exp2_on_fma decides
    banded: bool = False                   # the mask keeps a band of keys per row (tile.banded_mask)
    blockmap: bool = False                 # the key ranges are found at run time: from a block map,
                                          # or from a tile table's runs (run_ranges.py)
    heads_first: Optional[bool] = None     # grid x runs over the heads, y over the query blocks
                                          # (Note [Heads first] in sm80.py); None: grid_heads_first
    tiles_last: Optional[bool] = None      # grid (H, B, query blocks): each query block of every
                                          # (b, h) before the next (Note [Tiles last] in sm80.py);
                                          # None: off
    lean_loads: Optional[bool] = None      # lean KV steps for block maps and bands (Note
                                          # [Lean step loads] in sm80.py); None: step_loads_lean
    staged_o: Optional[bool] = None        # O written through shared memory in 16-byte stores
                                          # (Note [Staged O] in sm80_epilogue.py); None: o_staged
    split_mask: Optional[bool] = None      # partial blocks test only the conjuncts tile_holds does
                                          # not prove (Note [Conjuncts a tile holds]); None: mask_split
    lazy_rescale: Optional[bool] = None    # Note [Lazy rescale] in sm80_softmax.py; None: rescale_lazily
    mma_row_sum: Optional[bool] = None     # Note [Row sums on the tensor cores] in sm80_softmax.py;
                                          # None: row_sum_on_mma
    early_first: Optional[bool] = None     # load the top block of kv_hint (a table tile: its diagonal)
                                          # before the range is read from a map or scanned from the
                                          # runs (Note [First block before the map] in sm80.py);
                                          # None: first_before_map
    aligned_tiles: bool = False            # query tiles from a tile table (Note [Document-aligned
                                          # tiles] in qtiles.py), set by the lowering with the map
                                          # or the runs
    tiles_per_head: bool = False           # the tile table has a slot per head (else per batch)
    dead_rows: Optional[bool] = None       # warps' 16-row tiles interleaved, and in the first key
                                          # step a tile whose rows keep none of its keys skips its
                                          # MMAs (Note [Dead rows] in sm80.py); None: skips_dead_rows

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
        sm80_softmax.py), or None: bf16 only, and (hi - lo) in natural units at most
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
    def registers_at_floor(self) -> bool:
        """Whether the default register bound of Note [CTAs per SM] leaves a thread just the
        128 registers below which the accumulators spill (a bound given as min_ctas_per_sm
        is the user's, kept whatever ptxas reports: never at the floor in this sense)."""
        return (self.min_ctas_per_sm is None and self.min_ctas >= 2
                and self.min_ctas * self.threads * 128 >= SM90_REGISTERS_PER_SM)

    @property
    def interval_test_form(self) -> str:
        """interval_test resolved: "bits" while a lane's row holds at most 32 scores
        (block_n <= 128), else "range" (Note [One compare per score] in sm80_masks.py)."""
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
        block's first QK^T (Note [The next block's first QK^T] in sm90_ws.py). Not for the
        others: causal ran as fast as without, softcap and ALiBi 4 % slower (their
        persistent consumers spill), documents + causal slower than at its 64x64 tiles
        (results/sm90a_h200.md, "Persistent CTAs")."""
        if self.persistent is not None:
            return self.persistent
        return self.warp_specialized and self.banded

    @property
    def grid_tiles_last(self) -> bool:
        """The grid is (H, B, query blocks) (tiles_last given true: Note [Tiles last] in sm80.py)."""
        return bool(self.tiles_last)

    @property
    def has_small_grid_kernel(self) -> bool:
        """Whether the bundle also holds this kernel with tiles_last, for the runtime to
        launch on small grids (Note [Small grids] in sm80.py): sm_80's kernels of one query
        block per CTA whose query blocks' work differs (a mask, not a band), neither
        tiles_last nor heads_first given."""
        return (self.tiles_last is None and self.heads_first is None and self.target == "sm_80"
                and self.blocks_per_cta == 1 and self.mask != "none" and not self.banded
                and not self.warp_specialized and not self.persistent_ctas)

    @property
    def grid_heads_first(self) -> bool:
        """heads_first resolved (Note [Heads first] in sm80.py): by default in sm_80's
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
        """lean_loads resolved (Note [Lean step loads] in sm80.py): by default for a block
        map or a band on sm_80."""
        return self._can_lean_loads if self.lean_loads is None else self.lean_loads

    @property
    def _can_lean_loads(self) -> bool:
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
        return self._can_load_first_early if self.early_first is None else self.early_first

    @property
    def _can_load_first_early(self) -> bool:
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
        """staged_o resolved (Note [Staged O] in sm80_epilogue.py): by default on sm_80
        wherever it can be (1-6 % faster, but causal at head dim 64 1.5 % slower: ptxas
        schedules its whole loop differently), on sm_90a for bands and block maps (3-7 %);
        not sm_90a's other kernels (ALiBi at head dim 64 6 % slower, causal and softcap
        within noise: there a query block's long key loop leaves the O store a small
        share). results/sm80_h200.md and sm90a_h200.md, "Staged O"."""
        if self.staged_o is not None:
            return self.staged_o
        return self._can_stage_o and (self.target == "sm_80" or self.banded or self.blockmap)

    @property
    def _can_stage_o(self) -> bool:
        """Every tile is dead at the epilogue (one query block per CTA, no producer loading
        the next), O is 16-bit and fits in the tiles' shared memory."""
        return (self.blocks_per_cta == 1 and not self.warp_specialized and self.o_dtype != "f32"
                and self.block_m * self.head_dim_v * 2 <= self.tiles_bytes)

    @property
    def skips_dead_rows(self) -> bool:
        """dead_rows resolved (Note [Dead rows] in sm80.py): by default wherever it can be
        and a key block is shorter than the query block, so that a causal-like mask's
        first block (the diagonal's) leaves whole 16-row tiles without a key. With key
        blocks as long as the query block it has none to skip (window 1024 at head dim 64,
        128x128 tiles: it spilled and ran 5 % slower; results/sm80_h200.md, "Dead rows")."""
        if self.dead_rows is not None:
            return self.dead_rows
        return self._can_skip_dead_rows and self.block_n < self.block_m

    @property
    def _can_skip_dead_rows(self) -> bool:
        """An sm_80 kernel whose warps own two or more 16-row tiles, with two or more K/V
        slots (V waited for after the softmax) and a mask that keeps an interval of keys
        per row (the test of a tile's rows)."""
        return (self.target == "sm_80" and not self.warp_specialized and self.m_atoms > 1 and self.stages > 1
                and self.row_interval is not None)

    @property
    def atom_rows(self) -> int:
        """Rows from one of a warp's 16-row tiles to its next: 16 (a warp's rows contiguous),
        or 16 * num_warps where the tiles interleave (Note [Dead rows] in sm80.py)."""
        return 16 * self.num_warps if self.skips_dead_rows else 16

    @property
    def rescale_lazily(self) -> bool:
        """lazy_rescale resolved (Note [Lazy rescale] in sm80_softmax.py): by default above
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
        """mma_row_sum resolved (Note [Row sums on the tensor cores] in sm80_softmax.py): by
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
        """exp2_fma resolved (Note [Exponentials on the FMA pipe] in sm80_softmax.py), as
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
    def tiles_bytes(self) -> int:
        """Shared memory of the Q tile and the K/V slots."""
        return self.q_tile_bytes + self.stages * (self.k_tile_bytes + self.v_tile_bytes)

    @property
    def smem_bytes(self) -> int:
        """The tiles, and with a producer warpgroup its mbarriers (SLOT_BARRIERS)."""
        barriers = 1 + len(SLOT_BARRIERS) * self.stages if self.warp_specialized else 0
        barriers += 1 if self.persistent_ctas else 0       # q_empty (after the slots')
        return self.tiles_bytes + MBARRIER_BYTES * barriers

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

    def check(self) -> "Sm80KernelSpec":
        """Raise SpecError unless this specialization can be built; return self."""
        _require(self.dtype in DTYPES, f"dtype {self.dtype!r}: expected one of {DTYPES}")
        _require(self.o_dtype in OUT_DTYPES, f"out_dtype {self.o_dtype!r}: expected one of {OUT_DTYPES}")
        for name in ("head_dim_qk", "head_dim_v"):
            _require(getattr(self, name) in HEAD_DIMS,
                     f"{name}={getattr(self, name)}: supported head dims are {HEAD_DIMS}")
        _require(self.mask in MASK_MODES, f"mask {self.mask!r}: expected one of {MASK_MODES}")
        _require(self.mask != "mask_mod" or (self.kv_range is not None and self.keep is not None),
                 "mask 'mask_mod' needs the kv_range and keep hooks")
        _require(self.score_mod_out > 0, f"score_mod_out={self.score_mod_out}: must be positive")
        _require(self.score_mod is None or self.score_bias is None,
                 "give score_mod or score_bias (an affine score_mod), not both")
        _require(all(x.kind in ("dim", "ptr", "scratch") for x in self.extra_params),
                 "extra_params: kind must be 'dim', 'ptr' or 'scratch'")
        warps = (4, 8, 12, 16) if self.target == "sm_90a" else (1, 2, 4, 8)
        _require(self.num_warps in warps, f"num_warps={self.num_warps}: expected one of {warps} on {self.target}")
        _require(self.block_m % (16 * self.num_warps) == 0,
                 f"block_m={self.block_m} must be a multiple of 16*num_warps={16 * self.num_warps}")
        _require(self.block_n % 16 == 0 and self.block_n >= 16,
                 f"block_n={self.block_n} must be a positive multiple of 16")
        _require(self.stages in (1, 2, 3, 4), f"stages={self.stages}: expected 1 to 4")
        _require(self.q_blocks_per_cta in (None, 1, 2), f"q_blocks_per_cta={self.q_blocks_per_cta}: expected 1 or 2")
        _require(self.min_ctas_per_sm is None or 0 <= self.min_ctas_per_sm <= 32,
                 f"min_ctas_per_sm={self.min_ctas_per_sm}: expected 0 to 32")
        _require(isinstance(self.exp2_on_fma, int) and 0 <= self.exp2_on_fma <= 8,
                 f"exp2_fma={self.exp2_fma!r}: expected 0 to 8 (of every 8 scores of a row, those "
                 f"whose exp2 runs on the FMA pipe)")
        _require(self.interval_test in (None, *INTERVAL_TESTS),
                 f"interval_test={self.interval_test!r}: expected one of {INTERVAL_TESTS}")
        _require(self.interval_test != "bits" or self.block_n <= 128,
                 f"interval_test='bits' needs block_n <= 128 (32 scores per row and lane), not {self.block_n}: "
                 f"use 'range' or 'pair'")
        half_page = self.page_width(self.head_dim_qk) // 16
        _require(self.qk_steps_per_trip == 0 or (half_page % self.qk_steps_per_trip == 0),
                 f"qk_unroll={self.qk_unroll} must divide {half_page} (k16 steps per smem page), or be 0")
        _require(self.scale > 0, f"softmax_scale={self.scale}: must be positive")
        for d in {self.head_dim_qk, self.head_dim_v}:
            per_pass = self.loader_threads * 8 // self.page_width(d)
            _require(per_pass % 8 == 0,
                     f"{self.loader_threads} threads copy rows of head dim {d} in passes of {per_pass} rows, "
                     f"which breaks the 8-row swizzle: raise num_warps")
        _require(self.target in KERNEL_TARGETS, f"target {self.target!r}: expected one of {KERNEL_TARGETS}")
        _require(not self.row_sum_on_mma or self.target == "sm_80",
                 f"mma_row_sum sums P on mma.sync, an sm_80 kernel's P.V, not {self.target}'s")
        _require(not (self.row_sum_on_mma and self.with_lse),
                 f"mma_row_sum sums P as rounded to {self.dtype} for P.V, which the variant's LSE output "
                 f"would keep (up to 2^-8 of l in bf16, 2^-11 in f16): drop mma_row_sum to sum in f32")
        if self.target == "sm_90a":
            self._check_sm90a()
        _require(not self.warp_specialized or self.target == "sm_90a",
                 f"a producer warpgroup is an sm_90a kernel's (mbarriers), not {self.target}'s")
        _require(not self.pingpong or (self.warp_specialized and self.consumer_warpgroups == 2),
                 f"pingpong takes turns between two consumer warpgroups (block_m=128) and needs the "
                 f"producer warpgroup: block_m={self.block_m}, producer={int(self.warp_specialized)}")
        _require(not self.warp_specialized or self.blocks_per_cta == 1,
                 "with a producer warpgroup each CTA runs one query block (q_blocks_per_cta=1); for two, "
                 "a plan without one (attn-warp-specialize{producer=0})")
        _require(not self.grid_tiles_last or (self.blocks_per_cta == 1 and not self.warp_specialized
                                               and not self.persistent_ctas),
                 "tiles_last needs a kernel with one query block per CTA, no producer warpgroup and no "
                 "persistent CTAs")
        _require(not (self.grid_tiles_last and self.heads_first),
                 "tiles_last and heads_first are two orders of the grid: give one")
        _require(not self.grid_heads_first or (self.blocks_per_cta == 1 and not self.warp_specialized),
                 "heads_first needs a kernel with one query block per CTA and no producer warpgroup")
        _require(not self.step_loads_lean or self._can_lean_loads,
                 "lean_loads needs an sm_80 kernel whose key ranges come from a block map or a band")
        _require(not self.aligned_tiles or (self.blockmap and self.takes_tile_table),
                 "aligned_tiles needs a kernel whose key ranges are found at run time (a block map or the "
                 "table's runs), one query block per CTA and no producer warpgroup")
        _require(not self.skips_dead_rows or self._can_skip_dead_rows,
                 "dead_rows needs an sm_80 kernel without a producer warpgroup, with two or more 16-row tiles "
                 "per warp, two or more K/V stages and a mask that keeps an interval of keys per row")
        _require(not self.first_before_map or self._can_load_first_early,
                 "early_first needs an sm_80 kernel whose key ranges come from a block map (kv_hint given) "
                 "or a tile table")
        _require(not self.o_staged or self._can_stage_o,
                 "staged_o needs a kernel with one query block per CTA, no producer warpgroup and a 16-bit O "
                 "that fits in its tiles' shared memory")
        _require(not self.split_mask or self.tile_holds is not None,
                 "split_mask needs a mask read from a block map whose MIXED tiles record the conjuncts they hold "
                 "(a row interval and a residual, Note [Conjuncts a tile holds])")
        _require(self.tile_holds is None or (self.row_interval is not None and self.row_residual is not None),
                 "tile_holds needs row_interval and row_residual")
        _require(not self.persistent_ctas or self.warp_specialized,
                 "persistent CTAs are the producer warpgroup's kernel: a plan with a producer role "
                 "(attn-warp-specialize{producer=1})")
        _require(not self.warp_specialized or self.stages >= 2,
                 "a producer warpgroup needs at least two K/V stages")
        _require(self.acc_registers <= MAX_ACC_REGS,
                 f"{self.acc_registers} f32 accumulator registers per thread (S {self.block_n} wide, "
                 f"O {self.head_dim_v} wide, {self.m_atoms} row tiles per warp) exceed {MAX_ACC_REGS}: "
                 f"lower block_n or block_m, or raise num_warps")
        _require(self.smem_bytes <= self.max_smem_bytes,
                 f"{self.smem_bytes} bytes of shared memory exceed {self.max_smem_bytes}: "
                 f"lower stages, block_n or block_m")
        _require(self.symbol.isidentifier(), f"symbol {self.symbol!r} is not an identifier")
        return self

    def _check_sm90a(self) -> None:
        _require(self.num_warps % 4 == 0 and self.rows_per_warp == 16,
                 f"sm_90a runs warpgroups of 4 warps and 64 rows: block_m={self.block_m} with "
                 f"num_warps={self.num_warps} gives {self.rows_per_warp} rows per warp, not 16")
        _require(self.block_n <= 256 and self.head_dim_v <= 256,
                 f"wgmma's N is at most 256: block_n={self.block_n}, head_dim_v={self.head_dim_v}")

    @property
    def max_smem_bytes(self) -> int:
        return SM90_MAX_DYNAMIC_SMEM if self.target == "sm_90a" else SM80_MAX_DYNAMIC_SMEM


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise SpecError(message)


# ---------------------------------------------------------------- default tiles

# max(head_dim_qk, head_dim_v) -> block_m, block_n, num_warps, stages. FA2's A100
# table, adjusted by what ran fastest with zero sm_80 spills (H200, M = N = 4096;
# results/sm80_h200.md, "Tiles"): 64 and 96 keep the QK^T loop rolled (Note [Rolled
# QK^T] in sm80.py), 256 single-buffers
# K/V (96 KB: two CTAs per SM where 228 KB are available).
_TILES = {
    64: dict(block_m=128, block_n=128, num_warps=4, stages=2),
    96: dict(block_m=128, block_n=64, num_warps=4, stages=2),
    128: dict(block_m=128, block_n=64, num_warps=4, stages=2),
    256: dict(block_m=64, block_n=64, num_warps=4, stages=1),
}


def default_sm80_spec(dtype: str, head_dim_qk: int, head_dim_v: int | None = None, **overrides) -> Sm80KernelSpec:
    """A checked spec with the tiles of `_TILES` for these head dims and `overrides` applied.
    Unequal head dims up to 128 take 32-key tiles (at 64, e.g. d_qk=96/d_v=128 spills)."""
    head_dim_v = head_dim_v or head_dim_qk
    tiles = dict(_TILES[max(head_dim_qk, head_dim_v)])
    if head_dim_qk != head_dim_v and max(head_dim_qk, head_dim_v) <= 128:
        tiles.update(block_n=32)
    return Sm80KernelSpec(**{"dtype": dtype, "head_dim_qk": head_dim_qk, "head_dim_v": head_dim_v,
                             **tiles, **overrides}).check()


# ---------------------------------------------------------------- built-in masks

def dense_kv_range(e, c: KvCtx) -> KvRange:
    """Every key block; only the ragged last one (N % block_n != 0) is partial."""
    return KvRange(lo=0, full_lo=0, full_hi=e.div(c.N, c.block_n), hi=e.cdiv(c.N, c.block_n))


def _causal_offset(e, c: KvCtx, bottom_right: bool):
    return e.sub(c.N, c.M) if bottom_right else e.c32(0)


def _causal_kv_range(bottom_right: bool) -> KvRangeFn:
    def kv_range(e, c: KvCtx) -> KvRange:
        c.grid_only("the causal key range")
        offset = _causal_offset(e, c, bottom_right)
        n_blocks = e.cdiv(c.N, c.block_n)
        last_row = e.min(e.mul(e.add(c.m_block, 1), c.block_m), c.M)        # exclusive
        hi = e.clamp(e.cdiv(e.add(last_row, offset), c.block_n), 0, n_blocks)
        # Block n is full when its last key (n+1)*block_n - 1 <= first row + offset, and < N.
        first_keep = e.add(e.add(e.mul(c.m_block, c.block_m), offset), 1)
        full_hi = e.min(e.div(e.max(first_keep, 0), c.block_n), e.div(c.N, c.block_n))
        return KvRange(lo=0, full_lo=0, full_hi=full_hi, hi=hi)
    kv_range.__qualname__ = f"causal_kv_range(bottom_right={bottom_right})"
    return kv_range


def _causal_keep(bottom_right: bool) -> KeepFn:
    def keep(e, b, h, i, j):
        offset = e.sub(e.dim("N"), e.dim("M")) if bottom_right else 0
        return e.le(j, e.add(i, offset))
    keep.__qualname__ = f"causal_keep(bottom_right={bottom_right})"
    return keep


_MASK_HOOKS = {
    "none": (dense_kv_range, None),
    "causal": (_causal_kv_range(False), _causal_keep(False)),
    "causal_bottom_right": (_causal_kv_range(True), _causal_keep(True)),
    "mask_mod": (dense_kv_range, None),
}


def mask_hooks(spec: Sm80KernelSpec) -> tuple[KvRangeFn, Optional[KeepFn]]:
    """The (kv_range, keep) hooks of `spec`: its own, else those of its mask mode. The
    built-in causal masks have no row interval (they keep their compare per score): as
    [-inf, i] they measured no faster, and slower next to a score_mod
    (results/sm80_h200.md, "Built-in causal mask")."""
    kv_range, keep = _MASK_HOOKS[spec.mask]
    return spec.kv_range or kv_range, spec.keep or keep
