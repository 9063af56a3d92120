"""The tile sizes `attn-tile` starts from, per target and head dims, and each
target's hard limits. Data only; the rules that use it are in tile.py.

Sources (numbers, not code): FlashAttention-2's forward table for sm_80
(notes/sm80-kernels.md §2.2, the no-dropout column with the H100-class SMEM choice
for hdim 256), FlashAttention-3's `tile_size_fwd_sm90` for sm_90a, and
FlashAttention-4 / CUTLASS example 77 for sm_100a (notes/sm100-kernels.md §3.1:
two 128-row Q tiles per CTA, 128-key blocks, a 3-stage K/V ring, 16 warps).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TileConfig:
    block_m: int          # query rows of one Q tile
    block_n: int          # keys per KV block
    stages: int           # K/V buffers in flight
    num_warps: int        # warps of the CTA, all roles included
    q_tiles: int = 1      # Q tiles per CTA (the CTA covers block_m * q_tiles rows)


@dataclass(frozen=True)
class TableRow:
    config: TileConfig
    block_n_masked: int | None = None     # block_n when the variant has a mask_mod
    block_n_params: int | None = None     # block_n at most, when the variant takes param tensors
    # TileConfig fields to override when mask_mod reads params (a block map decides its
    # tiles) and when it keeps a band of keys per row (tile.banded_mask).
    mask_params: dict[str, int] | None = None
    banded: dict[str, int] | None = None
    # ... and when score_mod's value depends on i or j score by score (tile.scores_by_position)
    positional: dict[str, int] | None = None


@dataclass(frozen=True)
class TargetLimits:
    smem_bytes: int                 # dynamic shared memory one CTA may use
    num_warps: tuple[int, ...]      # CTA warp counts the target's recipe can lay out
    block_m_unit: str               # how block_m relates to the warps (see tile.py)
    min_stages: int                 # fewest K/V buffers the recipe's pipeline works with
    q_tiles: tuple[int, ...]        # allowed Q tiles per CTA
    max_stages: int = 8             # most K/V buffers (sm_80, sm_90a: what their kernels build)
    producer_warps: int = 0         # warps that only load (they hold no accumulators)
    tmem_columns: int | None = None           # sm_100a: 512 columns of 32-bit cells
    accumulator_registers: int | None = None  # per thread, when S and O live in registers


TARGET_LIMITS: dict[str, TargetLimits] = {
    # A100: 163 KB of dynamic SMEM per CTA; one cooperative role of 4 or 8 warps,
    # each owning 16-row slices of the Q tile (mma.sync.m16n8k16).
    "sm_80": TargetLimits(smem_bytes=163 * 1024, num_warps=(4, 8), block_m_unit="warp16",
                          min_stages=1, max_stages=3, q_tiles=(1,), accumulator_registers=192),
    # H100: 227 KB; a producer warpgroup's 4 warps (attn-warp-specialize may drop them)
    # + 1, 2 or 3 consumer warpgroups of 64 rows (wgmma M=64): block_m = 64 (8 warps), 128 (12)
    # or 192 (16).
    "sm_90a": TargetLimits(smem_bytes=227 * 1024, num_warps=(8, 12, 16),
                           block_m_unit="consumer_wg64", min_stages=2, max_stages=4, q_tiles=(1,),
                           producer_warps=4, accumulator_registers=192),
    # B200: 227 KB; the fixed 16-warp role layout; tcgen05.mma M=128, S and O in TMEM.
    "sm_100a": TargetLimits(smem_bytes=227 * 1024, num_warps=(16,), block_m_unit="m128",
                            min_stages=2, q_tiles=(1, 2), tmem_columns=512),
}

# sm_90a's 64x64 tile of one consumer warpgroup and the producer's warps (a band, a mask
# that reads params), as the sm_90a rows override their tile with it.
SM90A_64X64 = dict(block_m=64, block_n=64, num_warps=8)

# (head_dim_qk, head_dim_v) -> choice. A pair not listed uses the row of
# (max, max) of its head dims: the larger head dim bounds SMEM, TMEM and registers.
TILE_TABLE: dict[str, dict[tuple[int, int], TableRow]] = {
    "sm_80": {
        # FA2's 128x128 at d=64: spill-free (255 registers) and 1.04-1.14x FA2 on an H200,
        # where 128x64 measured 0.95-1.04x (results/sm80_h200.md, "Tiles"). Param loads in the
        # score tile (a bias table read per score, document ids) spill it at 128 keys
        # (20 to 1700 bytes in nvJitLink's report); 64 keys are spill-free. Only params read
        # at an index that depends on i or j count (tile.py): ALiBi's slopes[h], loaded once
        # per CTA, keeps 128x128 (10 % faster than at 128x64), and so does T5's bias of
        # j - i, read once per tile beyond its flat diagonals (it spills 36-44 bytes in the
        # near tiles alone, and ran 1.10-1.12x faster than at 128x64: results/sm80_h200.md,
        # "T5 at 128 keys").
        # A mask that reads params (documents) is there to drop work: 64-row query blocks
        # follow its boundaries more tightly (documents of 1000 + causal 13 % faster at
        # 64x64 than at 128x64; at head dim 128, 128x64 stays ahead by 15 %).
        (64, 64): TableRow(TileConfig(128, 128, stages=2, num_warps=4), block_n_params=64,
                           mask_params=dict(block_m=64)),
        (96, 96): TableRow(TileConfig(128, 64, stages=2, num_warps=4)),
        (128, 128): TableRow(TileConfig(128, 64, stages=2, num_warps=4)),
        (256, 256): TableRow(TileConfig(64, 64, stages=2, num_warps=4)),
    },
    "sm_90a": {
        # attn-lower-sm90a's kernel (results/sm90a_h200.md, "Tiles"). At head dim 64
        # FlashAttention-3's 192-row Q tile, three consumer warpgroups and the producer,
        # with 96-key blocks (at 128 the consumers spill): no mask 11-13 %, T5 5-9 %,
        # causal 2-5 % and softcap 1-4 % faster than one consumer warpgroup of 64 rows per
        # CTA (64x128, several CTAs an SM hiding each other's loads and epilogue, 14-16 %
        # faster than 128x128). That stays for a score_mod of i and j score by score
        # (ALiBi, 2-4 % slower at 192 rows). A band (a sliding window) or a mask that
        # reads params (documents of 1000 + causal) is short work per query block: 64x64,
        # the window 13 % and documents 46 % faster than at 192x96 (and 11-24 % and 20-35 %
        # than 128x128, before the persistent kernel, which took the band at d = 128: below).
        (64, 64): TableRow(TileConfig(192, 96, stages=2, num_warps=16),
                           positional=dict(block_m=64, block_n=128, num_warps=8),
                           banded=SM90A_64X64, mask_params=SM90A_64X64),
        (96, 96): TableRow(TileConfig(128, 128, stages=2, num_warps=12)),
        # FA3 runs 176-key blocks without a mask (128 with one, so that masked tiles
        # line up with the 128-row Q tiles), with its consumers' registers raised by
        # setmaxnreg. attn-lower-sm90a's kernel (before its producer warpgroup, which
        # is the default here: recipes.default_producer): 128 keys,
        # and three K/V stages (loads two steps ahead): causal, ALiBi and softcap 3-6 %
        # faster (at head dim 64 and at 64x64 tiles three stages measured 4-35 % slower).
        # A band (window 1024, d = 128) runs this tile too since the persistent CTAs of
        # the producer warpgroup's kernel (recipes.default_persistent), 9 % faster than
        # at 64x64; documents keep 64x64 (17 % faster than 128x128 persistent).
        (128, 128): TableRow(TileConfig(128, 128, stages=3, num_warps=12),
                             mask_params=dict(SM90A_64X64, stages=2)),
        (256, 256): TableRow(TileConfig(128, 80, stages=2, num_warps=12)),
    },
    "sm_100a": {
        (64, 64): TableRow(TileConfig(128, 128, stages=3, num_warps=16, q_tiles=2)),
        (96, 96): TableRow(TileConfig(128, 128, stages=3, num_warps=16, q_tiles=2)),
        # K and V take turns in one ring of 32 KB slots, three as FlashAttention-4's; beside
        # an f32 O tile (64 KB) they leave no room for the mbarriers, and attn-tile takes two.
        (128, 128): TableRow(TileConfig(128, 128, stages=3, num_warps=16, q_tiles=2)),
        # Two Q tiles need 2 * (128 + 256) TMEM columns > 512, and three 64 KB K/V
        # stages do not fit next to Q: one Q tile (O then reuses its SMEM), two stages.
        (256, 256): TableRow(TileConfig(128, 128, stages=2, num_warps=16, q_tiles=1)),
    },
}
