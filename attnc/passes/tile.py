"""`attn-tile`: choose the CTA tile (block_m, block_n, stages, warps) for a target, and
build the CTA's tile program (L2).

Targets: sm_80, sm_90a, sm_100a. Expects L1 (attnc/ir/attn.irdl.mlir): `attn.attention`
ops with `head_dim_qk`, `head_dim_v`, `dtype`, `has_mask_mod` and `params` (hooks that
read param tensors take the table's `block_n_params` where it has one); or attn.kernel
ops (tiled before: the new choice replaces the old one and the program is built anew).
Leaves each op replaced by an `attn.kernel` with the same operands, results, location
and attributes plus the choice, whose region is the program of one CTA
(tile_program.py; the ops in attnc/ir/tiles.py): the Q tile, one KV loop over
[0, cdiv(N, block_n)) carrying the running max, sum and O, the score_mod and mask ops
holding the hooks' regions (only for the hooks the variant has), finalize holding the
sink, and the stores. Which blocks the loop may skip is attn-analyze-masks' to say.

    before:  %o = "attn.attention"(%q, %k, %v) ({score_mod}, {mask_mod}, {sink})
                 {head_dim_qk = 128 : i64, ...}
    after:   %o = "attn.kernel"(%q, %k, %v) ({
             ^bb0(%b: i32, %h: i32, %m_block: i32):
               %q_tile = "attn.load"(%q, %b, %h, %m_block) {operand = "q"}
               %top = arith.subi %blocks, %c1
               %r:3 = scf.for %t = %c0 to %blocks step %c1 iter_args(max, sum, acc) {
                 %n = arith.subi %top, %t    (Note [Key blocks top down] in tile_program.py)
                 load k, mma qk, [score_mod], [mask], softmax_step, rescale, load v, mma pv
               } {kv_blocks = "all"}
               %o_tile, %lse = "attn.finalize"(%r#2, %r#0, %r#1, %h) ({sink})
               "attn.store"(%o_tile, %b, %h, %m_block) {operand = "o"}
             }) {head_dim_qk = 128 : i64, ..., target = "sm_100a", block_m = 128 : i64,
                 block_n = 128 : i64, stages = 3 : i64, num_warps = 16 : i64, q_tiles = 2 : i64}

The starting point is TILE_TABLE (tile_table.py); each option given overrides one
field, and the result must be buildable on the target (else an `AttncError` at the
op's `.attn` location naming the option to change):
  * block_m fits the warps: sm_80 a multiple of 16 rows per warp, sm_90a a multiple
    of 64 rows per consumer warpgroup, sm_100a exactly 128 (one tcgen05.mma tile);
  * block_n a multiple of 16 (the k-step of P.V; on sm_100a of 32, the scores of
    a tensor-memory load of S) and at most 256 (MMA N limit);
  * num_warps, stages and q_tiles within what the target's recipe lays out;
  * the Q tile and the K/V ring fit in shared memory, S and O in TMEM (sm_100a) or
    in the accumulator register budget (sm_80, sm_90a).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from attnc.errors import spelled
from attnc.passes.registry import Pass
from attnc.passes.tile_table import TARGET_LIMITS, TILE_TABLE, TargetLimits, TileConfig

ELEMENT_BYTES = {"bf16": 2, "f16": 2}
MMA_K = 16            # k-step of every 16-bit MMA: block_n is the K of P.V
TMEM_CHUNK = 32       # sm_100a: the columns of a tcgen05.ld of S's row (32 scores) or .st of P's (64)
MMA_N_MAX = 256       # largest N of wgmma / tcgen05.mma (and the sm_80 tile we allow)
TILE_FIELDS = ("block_m", "block_n", "stages", "num_warps", "q_tiles")


class TileError(Exception):
    """A tile that cannot be built; the pass turns it into a located AttncError."""


_CHOSEN = " (default: the target's choice for the head dims and the mask; --emit mlir shows it)"


@dataclass(frozen=True)
class Tile(Pass):
    """Choose block_m, block_n, stages and warps per target and head dim; build the tile program (attn.kernel)."""

    name: ClassVar[str] = "attn-tile"
    target: str | None = field(default=None, metadata={"doc": "sm_80, sm_90a or sm_100a (default: -arch)"})
    block_m: int | None = field(default=None, metadata={"doc": "query rows per Q tile" + _CHOSEN})
    block_n: int | None = field(default=None, metadata={"doc": "keys per KV block" + _CHOSEN})
    stages: int | None = field(default=None, metadata={
        "doc": "K/V buffers in flight, which attn-warp-specialize makes the K/V channels' stages" + _CHOSEN})
    num_warps: int | None = field(default=None, metadata={
        "doc": "warps per CTA, all roles (sm_80: 4 or 8; sm_90a: 8, 12 or 16, a producer warpgroup's 4 and 4 per "
               "64-row consumer, which attn-warp-specialize turns into roles, dropping the producer's where it "
               "plans none; sm_100a: 16)" + _CHOSEN})
    q_tiles: int | None = field(default=None, metadata={"doc": "Q tiles per CTA (sm_100a: 1 or 2; default: the target's choice)"})

    def run(self, module) -> None:
        overrides = {k: getattr(self, k) for k in TILE_FIELDS if getattr(self, k) is not None}
        tile(module, self.target, overrides)


def tile(module, target: str | None, overrides: dict[str, int]) -> None:
    """Record a tile choice on every attn.attention under `module` and replace it by its
    tile program (attn.kernel); an attn.kernel tiled again gets the new choice and one KV
    loop over all blocks again (the mask analysis, run again, splits it anew)."""
    from attnc.ir import attention_ops, error_at
    from attnc.ir.roles import record_key_range
    from attnc.ir.tiles import KERNEL
    from attnc.passes.tile_program import rebuild_program, to_kernel

    ops = attention_ops(module)
    if not ops:
        raise error_at(module, "attn-tile found no attn.attention op to tile")
    for op in ops:
        try:
            config = choose_tile(target, _shape_of(op, target), overrides)
        except TileError as e:
            raise error_at(op, str(e)) from None
        _record(op, target, config)
        kernel = (rebuild_program if op.name == KERNEL else to_kernel)(op)
        record_key_range(kernel)            # Note [The key range as made]


@dataclass(frozen=True)
class ProblemShape:
    head_dim_qk: int
    head_dim_v: int
    dtype: str
    masked: bool
    params: bool = False      # a hook reads param tensors
    mask_params: bool = False  # mask_mod reads param tensors (a block map decides its tiles)
    banded: bool = False      # mask_mod keeps a narrow band of keys per row (banded_mask)
    positional: bool = False  # score_mod's value depends on i or j score by score (scores_by_position)
    out_dtype: str | None = None   # O's element type (None: dtype's)


def _shape_of(op, target: str | None) -> ProblemShape:
    from attnc.ir import get_bool, get_int, get_str

    from mlir import ir

    params = "params" in op.attributes and len(ir.ArrayAttr(op.attributes["params"])) > 0
    params = params and _reads_params_per_element(op)
    masked = get_bool(op, "has_mask_mod")
    out_dtype = str(ir.RankedTensorType(op.results[0].type).element_type)
    shape = ProblemShape(get_int(op, "head_dim_qk"), get_int(op, "head_dim_v"), get_str(op, "dtype"),
                         masked, params, masked and _mask_reads_params(op), out_dtype=out_dtype)
    # The band probe runs the mask analysis once more: only where the table has a tile for bands.
    row = _table_row(target, shape) if target in TILE_TABLE else None
    if shape.masked and not shape.mask_params and row is not None and row.banded is not None:
        shape = dataclasses.replace(shape, banded=banded_mask(op))
    if row is not None and row.positional is not None:
        shape = dataclasses.replace(shape, positional=scores_by_position(op))
    return shape


BAND_PROBE = 8192       # the sequence length banded_mask looks at
BAND_BLOCK = 64


def banded_mask(op) -> bool:
    """Whether mask_mod keeps a band: at M = N = BAND_PROBE (every other dim half of
    it), the last query block may keep keys in at most a quarter of the 64-key blocks
    that a causal mask would visit there, by the KV plan of the mask analysis
    (attnc.analysis, the one attn-analyze-masks records). A sliding window of up to
    about BAND_PROBE / 4 keys is a band; causal and prefix-LM are not."""
    from attnc.analysis.symbolic import evaluate, symbols
    from attnc.analysis.tile_classes import summarize_mask
    from attnc.ir import MASK_MOD
    from attnc.passes.analyze_masks import mask_dims, mask_program

    summary = summarize_mask(mask_program(op, MASK_MOD, mask_dims(op)), block_m=BAND_BLOCK,
                             block_n=BAND_BLOCK, seq_q=BAND_PROBE, seq_k=BAND_PROBE)
    if summary.kind != "static":
        return False
    last = BAND_PROBE // BAND_BLOCK - 1
    visited = 0
    for start, end in summary.plan.segments:
        env = {name: BAND_PROBE // 2 for name in symbols(start) | symbols(end)}
        env.update(m_block=last, b=0, h=0)
        visited += max(0, int(evaluate(end, env)) - int(evaluate(start, env)))
    return 4 * visited <= last + 1


def scores_by_position(op) -> bool:
    """Whether score_mod's value depends on i or j score by score, as ALiBi's
    slopes[h] * (j - i) does. One that is a function of j - i flat beyond a few diagonals
    (T5's buckets: Note [Flat diagonals] in attnc/ir/diagonals.py) is one value a tile
    beyond them and does not count, nor does one of s, b and h alone (softcap)."""
    from attnc.ir import SCORE_MOD, depends_on, region_block, yielded
    from attnc.ir.diagonals import flat_bounds
    from attnc.passes.hoist import HOOK_ARGS

    block = region_block(op, SCORE_MOD)
    n = len(block.arguments)
    if yielded(block) not in depends_on(block, n - 2, n - 1):
        return False
    return flat_bounds(block, HOOK_ARGS["attn.score_mod"]) == (None, None)


def _mask_reads_params(op) -> bool:
    from attnc.ir import MASK_MOD, PARAM, region_block

    return any(inner.name == PARAM for inner in region_block(op, MASK_MOD).operations)


def _reads_params_per_element(op) -> bool:
    """Whether a hook reads a param at an index that depends on i or j (the last two
    arguments of the score_mod and mask_mod regions): such loads live in the score tile.
    One indexed by b and h only (ALiBi's slopes[h]) is loaded once per CTA, and one of the
    values of a diagonal with flat diagonals (T5's bias[h, bucket(j - i)]) once per tile
    beyond them (Note [Flat diagonals] in attnc/ir/diagonals.py): only the near tiles
    load it per diagonal, where its spills cost little. attn-tile's choice counts on
    attn-hoist's flat diagonals, which are on by default."""
    from attnc.ir import PARAM, depends_on, hook_blocks
    from attnc.ir.diagonals import diagonal_values, flat_bounds
    from attnc.passes.hoist import HOOK_ARGS

    by_arity = {len(names): names for names in HOOK_ARGS.values()}     # score_mod's, mask_mod's
    for block in hook_blocks(op):
        n = len(block.arguments)
        names = by_arity.get(n)
        if names is None:
            continue
        tainted = depends_on(block, n - 2, n - 1)
        found = diagonal_values(block, names)
        per_tile = found[1] if found is not None and flat_bounds(block, names) != (None, None) else frozenset()
        if any(inner.name == PARAM and inner.results[0] not in per_tile
               and any(v in tainted for v in list(inner.operands)[1:]) for inner in block.operations):
            return True
    return False


def _record(op, target: str, config: TileConfig) -> None:
    from attnc.ir import set_int, set_str

    set_str(op, "target", target)
    for key in TILE_FIELDS:
        set_int(op, key, getattr(config, key))


# --- the choice (pure) ------------------------------------------------------------------
def choose_tile(target: str | None, shape: ProblemShape, overrides: dict[str, int]) -> TileConfig:
    """The table's tile for `target` and `shape` with `overrides` applied, checked."""
    limits = _limits(target)
    config = dataclasses.replace(table_choice(target, shape), **overrides)
    if "stages" not in overrides:
        # the table's K/V stages, fewer where shared memory does not hold them (sm_100a at
        # head dim 128: three beside a 16-bit O, two beside an f32 one)
        while config.stages > limits.min_stages and not _fits_smem(target, limits, shape, config):
            config = dataclasses.replace(config, stages=config.stages - 1)
    if limits.block_m_unit == "consumer_wg64" and "block_m" in overrides and "num_warps" not in overrides:
        # a consumer warpgroup per 64 rows, besides the producer's warps
        from attnc.schedule.recipes import SM90A_BLOCK_M, SM90A_CONSUMERS
        if config.block_m not in SM90A_BLOCK_M:
            raise TileError(f"block_m={config.block_m} is not possible on {target}: a consumer warpgroup runs 64 "
                            f"rows, and a CTA has {spelled(SM90A_CONSUMERS)} of them: block_m "
                            f"{spelled(SM90A_BLOCK_M)}")
        config = dataclasses.replace(config, num_warps=limits.producer_warps + 4 * (config.block_m // 64))
    for check in (_check_positive, _check_warps, _check_block_m, _check_block_n,
                  _check_stages, _check_q_tiles, _check_smem, _check_tmem, _check_registers):
        check(target, limits, shape, config)
    return config


def _table_row(target: str, shape: ProblemShape):
    """The table's row for the shape's head dims (or for its widest, as a square), or None."""
    table = TILE_TABLE[target]
    widest = max(shape.head_dim_qk, shape.head_dim_v)
    return table.get((shape.head_dim_qk, shape.head_dim_v)) or table.get((widest, widest))


def table_choice(target: str, shape: ProblemShape) -> TileConfig:
    row = _table_row(target, shape)
    if row is None:
        known = ", ".join(str(qk) for qk, v in TILE_TABLE[target] if qk == v)
        raise TileError(f"no tile for head dims ({shape.head_dim_qk}, {shape.head_dim_v}) on "
                        f"{target}; head dims with a tile: {known}")
    config = row.config
    if shape.masked and row.block_n_masked is not None:
        config = dataclasses.replace(config, block_n=row.block_n_masked)
    if shape.params and row.block_n_params is not None:
        config = dataclasses.replace(config, block_n=min(config.block_n, row.block_n_params))
    if shape.positional and row.positional is not None:
        config = dataclasses.replace(config, **row.positional)
    if shape.banded and row.banded is not None:
        config = dataclasses.replace(config, **row.banded)
    if shape.mask_params and row.mask_params is not None:
        config = dataclasses.replace(config, **row.mask_params)
    return config


def _limits(target: str | None) -> TargetLimits:
    if target is None:
        raise TileError("attn-tile needs a target: pass -arch, or target=sm_80|sm_90a|sm_100a")
    if target not in TARGET_LIMITS:
        raise TileError(f"target={target}: unsupported; supported targets are "
                        f"{', '.join(TARGET_LIMITS)}")
    return TARGET_LIMITS[target]


def _check_positive(target, limits, shape, c: TileConfig) -> None:
    for key in TILE_FIELDS:
        if getattr(c, key) < 1:
            raise TileError(f"{key}={getattr(c, key)} must be at least 1")
    if shape.dtype not in ELEMENT_BYTES:
        raise TileError(f"attn-tile cannot tile dtype '{shape.dtype}'; expected bf16 or f16")


def _check_warps(target, limits: TargetLimits, shape, c: TileConfig) -> None:
    if c.num_warps not in limits.num_warps:
        allowed = spelled(limits.num_warps)
        raise TileError(f"num_warps={c.num_warps} is not possible on {target}: "
                        f"its kernel layout uses {allowed} warps")


def _check_block_m(target, limits: TargetLimits, shape, c: TileConfig) -> None:
    if limits.block_m_unit == "warp16":
        unit, why = 16 * c.num_warps, f"each of the {c.num_warps} warps owns 16-row slices"
    elif limits.block_m_unit == "consumer_wg64":
        # attn-warp-specialize gives each consumer warpgroup 64 rows, so block_m is theirs exactly
        consumers = (c.num_warps - limits.producer_warps) // 4
        if c.block_m != 64 * consumers:
            raise TileError(f"block_m={c.block_m} is not possible on {target} with num_warps={c.num_warps}: "
                            f"{limits.producer_warps} warps load, and each of the {consumers} consumer "
                            f"warpgroups runs 64 rows, so block_m must be {64 * consumers}")
        return
    else:
        if c.block_m != 128:
            raise TileError(f"block_m={c.block_m} is not possible on {target}: a Q tile is one "
                            f"tcgen05.mma of 128 rows (one row per softmax thread)")
        return
    if c.block_m % unit:
        raise TileError(f"block_m={c.block_m} is not possible on {target}: {why}, so block_m "
                        f"must be a multiple of {unit}")


def _check_block_n(target, limits, shape, c: TileConfig) -> None:
    if c.block_n % MMA_K or c.block_n > MMA_N_MAX:
        raise TileError(f"block_n={c.block_n} is not possible on {target}: it must be a multiple "
                        f"of {MMA_K} (the k-step of P.V) and at most {MMA_N_MAX}")
    if target == "sm_100a" and c.block_n % TMEM_CHUNK:
        raise TileError(f"block_n={c.block_n} is not possible on {target}: it must be a multiple of "
                        f"{TMEM_CHUNK} (a row of S is read from tensor memory, and P written there, in "
                        f"chunks of {TMEM_CHUNK} scores)")


def _check_stages(target, limits: TargetLimits, shape, c: TileConfig) -> None:
    if not limits.min_stages <= c.stages <= limits.max_stages:
        raise TileError(f"stages={c.stages} is not possible on {target}: the K/V pipeline "
                        f"needs {limits.min_stages} to {limits.max_stages} stages")


def _check_q_tiles(target, limits: TargetLimits, shape, c: TileConfig) -> None:
    if c.q_tiles not in limits.q_tiles:
        allowed = spelled(limits.q_tiles)
        raise TileError(f"q_tiles={c.q_tiles} is not possible on {target}: a CTA holds "
                        f"{allowed} Q tile(s)")


def smem_parts(target: str, shape: ProblemShape, c: TileConfig) -> dict[str, int]:
    """Shared memory of the Q tile(s), the K/V ring and the O staging tile(s), in bytes, as
    attn-alloc-smem will lay them out for this tile (an O tile that reuses Q's bytes adds
    nothing); "padding" is what alignment adds between them."""
    from attnc.schedule.alloc import lay_out_smem
    from attnc.schedule.recipes import recipe

    # The consumer warpgroups of sm_90a (attn-warp-specialize's option) own no SMEM.
    r = recipe(target, num_warps=c.num_warps, kv_stages=c.stages, q_tiles=c.q_tiles)
    buffers, total = lay_out_smem(r, _alloc_tile(shape, c))
    parts = {"Q": 0, "K/V": 0, "O": 0}
    for b in buffers:
        if b.alias_of is None:
            part = _SMEM_PART.get(b.channel, "row statistics")     # sm_100a's softmax -> correction
            parts[part] = parts.get(part, 0) + b.size
    parts["padding"] = total - sum(parts.values())
    return parts


_SMEM_PART = {"q": "Q", "kv": "K/V", "o": "O"}


def _alloc_tile(shape: ProblemShape, c: TileConfig):
    from attnc.schedule.alloc import Tile
    return Tile(c.block_m, c.block_n, shape.head_dim_qk, shape.head_dim_v, shape.dtype, c.q_tiles, shape.out_dtype)


def smem_bytes(target: str, shape: ProblemShape, c: TileConfig) -> int:
    return sum(smem_parts(target, shape, c).values())


def _mbarrier_bytes(target: str, shape: ProblemShape, c: TileConfig) -> int:
    """The mbarriers (and TMEM address word) attn-alloc-smem places after the buffers."""
    from attnc.schedule.alloc import sync_bytes
    from attnc.schedule.recipes import recipe
    return sync_bytes(recipe(target, num_warps=c.num_warps, kv_stages=c.stages, q_tiles=c.q_tiles),
                      _alloc_tile(shape, c))


def _fits_smem(target: str, limits: TargetLimits, shape: ProblemShape, c: TileConfig) -> bool:
    """Whether the tile's buffers and the plan's mbarriers (what attn-alloc-smem places) fit."""
    return smem_bytes(target, shape, c) + _mbarrier_bytes(target, shape, c) <= limits.smem_bytes


def _check_smem(target, limits: TargetLimits, shape, c: TileConfig) -> None:
    parts = {**smem_parts(target, shape, c), "mbarriers": _mbarrier_bytes(target, shape, c)}
    need = sum(parts.values())
    if need > limits.smem_bytes:
        detail = " + ".join(f"{name} {_kb(n)}" for name, n in parts.items() if n)
        raise TileError(f"the tile needs {_kb(need)} of shared memory ({detail}) but {target} "
                        f"has {_kb(limits.smem_bytes)}: lower block_n, stages or "
                        f"{'q_tiles' if target == 'sm_100a' else 'block_m'}")


def _check_tmem(target, limits: TargetLimits, shape, c: TileConfig) -> None:
    if limits.tmem_columns is None:
        return
    need = c.q_tiles * (c.block_n + shape.head_dim_v)
    if need > limits.tmem_columns:
        raise TileError(f"S and O need {need} TMEM columns ({c.q_tiles} x ({c.block_n} + "
                        f"{shape.head_dim_v})) but {target} has {limits.tmem_columns}: "
                        f"lower block_n or q_tiles")


def _check_registers(target, limits: TargetLimits, shape, c: TileConfig) -> None:
    if limits.accumulator_registers is None:
        return
    threads = (c.num_warps - limits.producer_warps) * 32
    need = -(-c.block_m * (c.block_n + shape.head_dim_v) // threads)
    if need > limits.accumulator_registers:
        raise TileError(f"S and O accumulators need {need} registers per thread "
                        f"({c.block_m} rows x ({c.block_n} + {shape.head_dim_v}) f32 over "
                        f"{threads} threads), more than the {limits.accumulator_registers} "
                        f"{target} leaves for them: lower block_m or block_n, or raise num_warps")


def _kb(n: int) -> str:
    return f"{n // 1024} KB" if n % 1024 == 0 else f"{n} bytes"
