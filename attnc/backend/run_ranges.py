"""Key ranges from the tile table's runs: a documents mask on document-aligned tiles
needs no block map.

Note [Ranges from the runs]: with the ids sorted, a tile of the table (Note
[Document-aligned tiles] in qtiles.py) lies in one run of equal ids [key0, key_end), so
the ids' conjunct P[.., i] == P[.., j] of its rows is known for every key below M
without reading an id: true on [key0, key_end), false on [key_end, M) (the ids there are
larger) and below key0 (smaller; those keys are not in the tile's blocks). Keys >= M,
where N > M, read ids the table does not order: unknown there. What remains of the mask
with the conjunct taken as true (the causal bound of documents + causal) is the static
analysis' business: attn-analyze-masks' analysis of that rest, run again at lowering,
classifies any tile of rows and keys exactly as it does the grid's. So block n of a tile
(its keys [key0 + n * block_n, +block_n) below N) is

    SKIP   where the rest is SKIP, or the conjunct is false on all of its keys;
    FULL   where the rest is FULL and the conjunct true on all of its keys;
    MIXED  otherwise,

computed in the attention kernel instead of read from a map: the range is a warp's scan
of the blocks of the tile's run (each lane a block, as blockmap_hooks.scan_row scans a
map row), the FULL blocks as the full range when they are one run
(blockmap_hooks.row_range). The steps ask nothing more: every block outside the full
range is masked (no tile_partial), and of a masked block's conjuncts (Note [Conjuncts a
tile holds] in blockmap.py) only the ids' is known to hold, below the run's first block
that reaches past key_end -- one value per tile, where asking each block's class again
kept the tile's rows and keys live through the loop (196 bytes of spills at 128x64
tiles, head dim 128). A table on the grid (ids not sorted: key_end = -1) knows nothing
of the conjunct, and every block the rest keeps is MIXED, the ids compared per score:
right, as slow as the mask is.

The range is known only after the entry is read and the scan done, so the sm_80 kernel
issues the diagonal's K and V first, as it does before a map's row is read (Note [First
block before the map] in forward_loads.py).

Where: a mask with the ids' conjunct whose rest reads no param and no float (the rest is
"static" to the analysis), on the aligned tiles (`BlockMapPlan.built` False: the bundle
holds the table's kernel and the attention kernel, no map kernel). Masks whose rest reads
params keep the map. So, by default, do
  * masks with a row interval and another residual conjunct beside the ids' (`doc[b, i]
    == doc[b, j] and j <= i and (i - j) % 3 == 0`), whose map records which part a MIXED
    tile holds (Note [Conjuncts a tile holds]), where the runs can say it only of the ids
    (unless split_mask=false: then the map's record is not read);
  * kernels at the 128-register floor of Note [CTAs per SM] (ForwardSpec.
    registers_at_floor: sm_90a's 64x64 tiles at head dim 64, four CTAs an SM), where the
    runs' kernel spilled and lost its bound (below; a bound given as min_ctas_per_sm
    is kept, so it does not count).
The option `run_ranges` of attn-kernel-choices turns it on or off (on sm_100a too: Note
[Tile table on sm_100a] in sm100a_tiles.py, where it is the default wherever the rest is
static).

Against the same kernels with the map (documents of 1000 + causal, the same outputs to
the bit), sm_80 ran 3-4 % faster and sm_90a 3 % at head dim 128 (results/sm80_h200.md and
sm90a_h200.md, "Ranges from the runs"). sm_90a at head dim 64 spilled under its register
bound of four CTAs an SM (Note [CTAs per SM] in attnc/passes/choice_defaults.py), which the
bundle's build then drops (163 registers: Note [The bound the assembler decides]), and ran 10 % slower; with the bound forced
(min_ctas_per_sm=4) it ran as fast as the map. Hence not the default at that register
floor.

There is no `tile_skip`: a block between the first and the last kept one that keeps
nothing (a rest such as `j < 10 or j <= i`, whose holes the analysis does not split under
the conjunction) is still computed right, masked whole (Note [Lean step loads] in
forward_loads.py says the same of a band's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mlir import ir

from attnc.analysis.region import Node, Program
from attnc.analysis.tile_classes import TILE_ARGS
from attnc.analysis.to_arith import emit_function
from attnc.backend.blockmap import FULL, MIXED, SKIP      # the analysis' classes too
from attnc.backend.blockmap_hooks import warp_range
from attnc.backend.hook_walks import MaskConjuncts
from attnc.backend.hooks import KernelNames, RegionCode
from attnc.backend.mask_hooks import KvCtx, KvRange
from attnc.backend.nvgpu_builders import Emit



@dataclass(frozen=True)
class RunRest:
    """The mask with the ids' conjunct taken as true, analysed: its tile class as a
    function (in a module of its own, kept alive here), and whether the ids' conjunct is
    the mask's only residual (Note [Residual conjuncts], row_intervals.py)."""
    module: ir.Module
    tile_class: object              # func.func (TILE_ARGS + dims) -> i32
    dims: tuple[str, ...]
    ids_only_residual: bool


def run_rest(op, conjunct: ir.Value) -> Optional[RunRest]:
    """The analysis of op's mask_mod with `conjunct` (a top-level i1 of it) replaced by
    true, or None where that rest still reads a param or a float (a block map then
    decides)."""
    from attnc.ir import MASK_MOD, region_block
    from attnc.passes.analyze_masks import mask_dims, mask_program, summarize_as

    block = region_block(op, MASK_MOD)
    dims = mask_dims(op)
    program = mask_program(op, MASK_MOD, dims)
    index = _node_index(block, conjunct)
    nodes = list(program.nodes)
    nodes[index] = Node("arith.constant", (), "i1", True, nodes[index].loc)
    summary = summarize_as(op, Program(tuple(nodes), program.result, program.yield_loc))
    if summary.kind == "runtime":
        return None
    module = ir.Module.create(op.location)
    with op.context:
        tile_class = emit_function("run_rest_tile_class", TILE_ARGS + dims, [summary.classes.tile_class(summary.builder)],
                                   loc=op.location, ip=ir.InsertionPoint(module.body))
    residual = MaskConjuncts.of(block).residual
    return RunRest(module, tile_class, dims, [v for v, _ in residual] == [conjunct])


def _node_index(block: ir.Block, value: ir.Value) -> int:
    """The index of `value` in read_region(block)'s nodes (arguments, then results in order)."""
    k = len(block.arguments)
    for op in list(block.operations)[:-1]:
        for result in op.results:
            if result == value:
                return k
            k += 1
    raise ValueError("the conjunct is not a value of the mask region")


class RunHooks:
    """The attention kernel's kv_range and tile_holds for a tile of the table (Note
    [Ranges from the runs])."""

    def __init__(self, rest: RunRest, names: KernelNames):
        self.rest = rest
        self.names = names
        names.scan_function(rest.tile_class, rest.dims, len(TILE_ARGS))
        self.code = RegionCode(rest.tile_class.regions[0].blocks[0], names, exact_ints=False)

    def fields(self, split: bool) -> dict:
        """The hooks; `split`: the kernel tests a row interval and a residual apart."""
        out = {"kv_range": self.kv_range}
        if split and self.rest.ids_only_residual:
            out["tile_holds"] = self.tile_holds
        return out

    # -- a block's class
    def _keys(self, e: Emit, c: KvCtx, n_block):
        lo = e.add(c.key0, e.mul(n_block, c.block_n))
        return lo, e.min(e.add(lo, c.block_n), c.N)

    def _rest(self, e: Emit, c: KvCtx, n_block):
        from attnc.backend.variant_hooks import analysis_dims
        lo, hi = self._keys(e, c, n_block)
        dims = analysis_dims(e, self.names, self.code, self.rest.dims, len(TILE_ARGS))
        return self.code(e, c.row0, e.min(c.row_end, c.M), lo, hi, c.b, c.h, *dims)

    def _ids(self, e: Emit, c: KvCtx, n_block):
        """(the ids' conjunct holds on every key of the block, on none)."""
        lo, hi = self._keys(e, c, n_block)
        known = e.ge(c.key_end, 0)
        return e.land(known, e.le(hi, c.key_end)), e.land(known, e.land(e.ge(lo, c.key_end), e.le(hi, c.M)))

    def tile_class(self, e: Emit, c: KvCtx, n_block):
        rest = self._rest(e, c, n_block)
        true, false = self._ids(e, c, n_block)
        skip = e.or_(e.eq(rest, SKIP), false)
        full = e.land(e.eq(rest, FULL), true)
        return e.select(skip, e.c32(SKIP), e.select(full, e.c32(FULL), e.c32(MIXED)))

    # -- the hooks
    def kv_range(self, e: Emit, c: KvCtx) -> KvRange:
        assert c.aligned, "ranges from the runs need the tile table's tiles"
        return warp_range(e, lambda n: self.tile_class(e, c, n), self.scan_end(e, c), unroll=1)

    def scan_end(self, e: Emit, c: KvCtx):
        """The blocks kv_range scans, [0, scan_end): those below N, and with N <= M only the
        run's (every key past the run is then known dropped)."""
        n_blocks = e.cdiv(c.n_keys, c.block_n)
        run_blocks = e.cdiv(e.max(e.sub(e.min(c.key_end, c.N), c.key0), 0), c.block_n)
        bounded = e.land(e.ge(c.key_end, 0), e.le(c.N, c.M))
        return e.select(bounded, e.min(run_blocks, n_blocks), n_blocks)

    def tile_holds(self, e: Emit, c: KvCtx, n_block):
        """(the free and linear conjuncts hold on the block: not claimed; the residual, the
        ids' conjunct alone, holds: the block's keys below N end by key_end). A block n
        ends by key_end exactly when n < (key_end - key0) // block_n, or key_end >= N;
        that bound does not depend on n, so it is computed once a tile."""
        known = e.ge(c.key_end, 0)
        inside = e.div(e.max(e.sub(c.key_end, c.key0), 0), c.block_n)
        bound = e.select(known, e.select(e.ge(c.key_end, c.N), e.c32(2**31 - 1), inside), e.c32(0))
        return e.false(), e.lt(n_block, bound)
