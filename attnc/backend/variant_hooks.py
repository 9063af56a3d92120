"""A kernel's hooks, `KernelHooks` (Note [Mask hooks] in mask_hooks.py), read from
the L2+ IR of its `attn.attention`: the regions compiled by hooks.py, and the per-tile
answers of `attn-analyze-masks`.

    score_mod   s + f(b, h, i, j)  -> score_bias = f       (the exp2 scale stays folded)
                anything else       -> score_mod           (natural units; constant scalings
                                       of s and of the result folded: Note [Score scalings])
    mask_mod    none / causal / bottom-right causal -> the kernel's built-in mask modes
                static or runtime (attn-analyze-masks' mask_kind):
                  kv_range     from @<f>_kv_range: [start_0, end_K-1) and the K segments,
                               full blocks from the last pair
                  tile_skip    @<f>_tile_class == 0  (SKIP: not loaded, not computed)
                  tile_partial @<f>_tile_class != 2  (FULL blocks run unmasked)
                  keep         the mask_mod region, per element of partial blocks
                  row_interval the keys [lo, hi] of each row, when the mask is a conjunction
                               with comparisons linear in j (Note [Row intervals],
                               row_intervals.py)
                  row_residual its other conjuncts, per element (Note [Residual conjuncts])
    sink        the sink region at h, folded in at the end

Note [Runtime masks]: for a mask that reads a param, the analysis functions still hold --
SKIP and FULL are proven from the integer part of the mask (the upper triangle of
`doc[b, i] == doc[b, j] and j <= i` is SKIP), the rest is MIXED -- and without a block
map the kernel visits what they allow and masks every element there. With the block map
built on the GPU (blockmap.py: it starts from the same tile class and evaluates the mask
on the MIXED tiles), kv_range, tile_partial and tile_skip read the map instead, and
tile_holds says which of a MIXED tile's conjuncts it proves (Note [Conjuncts a tile holds]).
"""
from __future__ import annotations

from typing import Any

from attnc.backend.hooks import KernelNames, RegionCode, role_dims
from attnc.backend.mask_hooks import KernelHooks, KvCtx, KvRange
from attnc.backend.row_intervals import RowInterval
from attnc.backend.score_forms import BiasCode, ScaledScoreCode, affine_bias
from attnc.ir import MASK_MOD, SCORE_MOD, SINK, get_bool, region_block, yielded
from attnc.passes.analyze_masks import mask_functions
from attnc.analysis.tile_classes import KV_ARGS, TILE_ARGS

BUILT_IN_MASKS = ("none", "causal", "causal_bottom_right")
SKIP, FULL = 0, 2
# Dims that are >= 1 wherever a hook runs: the launch grid and every visited tile need them.
_TILE_ROLES = ("batch", "heads", "heads_kv", "seq_q", "seq_k")
_SINK_ROLES = ("batch", "heads", "heads_kv", "seq_q")


def variant_hooks(op, variant, mask_mode: str | None, blockmap=None, module=None) -> KernelHooks:
    """The hooks of `op` (after attn-analyze-masks); `mask_mode`: a built-in mask mode
    recognised exactly (lowering.mask_mode), or None for the analysed mask; `blockmap`:
    the block map (blockmap.BlockMapPlan) that answers the tile questions of a mask that
    reads params; `module`: the ir.Module of `op`, kept alive by the hooks (they clone its
    regions whenever a kernel is built)."""
    names = KernelNames(variant, op, module)
    fields: dict[str, Any] = {}
    tile_dims = role_dims(variant, _TILE_ROLES)
    if get_bool(op, "has_score_mod"):
        fields.update(_score_hooks(region_block(op, SCORE_MOD), names, tile_dims))
    if get_bool(op, "has_sink"):
        block = region_block(op, SINK)
        names.scan(block)
        fields["sink"] = RegionCode(block, names, role_dims(variant, _SINK_ROLES))
    if mask_mode in BUILT_IN_MASKS:
        fields["mask"] = mask_mode
    else:
        fields.update(_mask_hooks(op, names, tile_dims))
    if blockmap is not None and not blockmap.built:
        # Note [Ranges from the runs] (run_ranges.py): the analysis' grid answers go.
        from attnc.backend.run_ranges import RunHooks
        runs = RunHooks(blockmap.runs, names)
        fields.update(kv_hint=None, tile_partial=None, tile_skip=None,
                      **runs.fields(split=fields.get("row_residual") is not None))
    extra = names.extra_params()
    if blockmap is not None and blockmap.built:
        from attnc.backend.blockmap_hooks import blockmap_holds, blockmap_hooks, blockmap_skip
        kv_range, tile_partial, map_params = blockmap_hooks(blockmap)
        # The analysis' range stays as the hint of the first block (Note [First block before the map]).
        fields.update(kv_range=kv_range, kv_hint=fields["kv_range"], tile_partial=tile_partial,
                      tile_skip=blockmap_skip(blockmap))
        if blockmap.holds:
            # The map and the kernel split the mask alike (hook_walks.MaskConjuncts).
            assert fields.get("row_residual") is not None, "a map that records conjuncts needs a residual"
            fields["tile_holds"] = blockmap_holds(blockmap)
        extra += tuple(map_params)
    if blockmap is not None and blockmap.qtiles is not None:
        from attnc.backend.qtiles import qtiles_param
        extra += (qtiles_param(blockmap.qtiles),)
    return KernelHooks(extra_params=extra, **fields)


def _score_hooks(block, names: KernelNames, never_empty) -> dict[str, Any]:
    names.scan(block)
    if yielded(block) == block.arguments[0]:
        return {}                               # score_mod(s, ...) = s
    affine = affine_bias(block)
    if affine is not None:
        return {"score_bias": BiasCode(block, names, *affine, never_empty=never_empty)}
    code = ScaledScoreCode(block, names, never_empty)
    return {"score_mod": code, "score_mod_in": float(names.variant.scale) * code.in_factor,
            "score_mod_out": code.out_factor}


def _mask_hooks(op, names: KernelNames, never_empty) -> dict[str, Any]:
    block = region_block(op, MASK_MOD)
    names.scan(block)
    analysis = mask_functions(op)
    names.scan_function(analysis.kv_range, analysis.dims, len(KV_ARGS))
    names.scan_function(analysis.tile_class, analysis.dims, len(TILE_ARGS))
    tiles = AnalysedTiles(RegionCode(analysis.kv_range.regions[0].blocks[0], names, exact_ints=False),
                          RegionCode(analysis.tile_class.regions[0].blocks[0], names, exact_ints=False),
                          analysis.segments, analysis.dims, names)
    rows = RowInterval.of(block, names, never_empty)
    return {"mask": "mask_mod", "kv_range": tiles.kv_range, "tile_skip": tiles.tile_skip,
            "tile_partial": tiles.tile_partial, "keep": RegionCode(block, names, never_empty),
            "row_interval": rows.bounds if rows is not None else None,
            "row_residual": rows.residual_keep if rows is not None and rows.residual else None}


def analysis_dims(e, names: KernelNames, code: RegionCode, dims: tuple[str, ...], first: int) -> list:
    """The dim arguments (after the first `first`) of an analysis function's code; 0 for
    those it does not read."""
    args = list(code.block.arguments)[first:]
    return [names.dim(e, d) if any(True for _ in a.uses) else e.c32(0) for d, a in zip(dims, args)]


class AnalysedTiles:
    """The kernel's kv_range / tile_skip / tile_partial from attn-analyze-masks' functions."""

    def __init__(self, kv_range: RegionCode, tile_class: RegionCode, segments: int,
                 dims: tuple[str, ...], names: KernelNames):
        self.kv_code, self.class_code = kv_range, tile_class
        self.segments, self.dims, self.names = segments, dims, names

    def _dims(self, e, code: RegionCode, first: int) -> list:
        return analysis_dims(e, self.names, code, self.dims, first)

    def kv_range(self, e, c: KvCtx) -> KvRange:
        c.grid_only("the analysed key range")
        out = self.kv_code.results(e, c.m_block, c.b, c.h, *self._dims(e, self.kv_code, len(KV_ARGS)))
        k = self.segments
        pairs = [(out[2 * s], out[2 * s + 1]) for s in range(k)]
        full_lo, full_hi = out[2 * k], out[2 * k + 1]
        n_blocks = e.cdiv(c.N, c.block_n)
        lo, hi = e.max(pairs[0][0], 0), e.min(pairs[-1][1], n_blocks)
        if k == 1:
            return KvRange(lo, full_lo, full_hi, hi)
        return KvRange(lo, full_lo, full_hi, hi, segments=tuple(pairs))

    def tile_class(self, e, c: KvCtx, n_block):
        c.grid_only("the analysed tile class")
        m_lo, n_lo = e.mul(c.m_block, c.block_m), e.mul(n_block, c.block_n)
        m_hi, n_hi = e.min(e.add(m_lo, c.block_m), c.M), e.min(e.add(n_lo, c.block_n), c.N)
        return self.class_code(e, m_lo, m_hi, n_lo, n_hi, c.b, c.h,
                               *self._dims(e, self.class_code, len(TILE_ARGS)))

    def tile_skip(self, e, c: KvCtx, n_block):
        return e.eq(self.tile_class(e, c, n_block), SKIP)

    def tile_partial(self, e, c: KvCtx, n_block):
        return e.xor(e.eq(self.tile_class(e, c, n_block), FULL), e.true())
