"""Where an sm_100a CTA's tiles lie: the patterns of the key range's ops (attn.kv_range, the
block map's attn.block_map_range and attn.block_map_read), and the query tiles of a tile
table (document-aligned tiles) -- what a role reads of its entry, the rows and keys the
other patterns place on it, and O's store where a tile ends inside a Q tile.

Note [Tile table on sm_100a]: with `aligned_tiles` on attn.kernel (attn-kernel-choices; the
default wherever the kernel can take them: `table_refusal`) the bundle runs the tile
table's kernel first (Note [Document-aligned tiles] in qtiles.py, at the CTA's rows,
block_m x q_tiles), then the block map's over the table's tiles, then the attention kernel,
whose CTA takes the table's entry nctaid.x - 1 - ctaid.x of its (b, h): rows [row0,
row_end) and key origin key0. With `run_ranges` (the default where the rest of the mask is
static, such as the causal bound of documents + causal) there is no map: each role scans
the blocks of the tile's run (Note [Ranges from the runs] in run_ranges.py). Every role
reads the entry where it reads the CTA's coordinates (a 16-byte invariant load, which LLVM
may share with the CTA's test above the roles: so docs_sink assembles without spills; with
that test's read kept apart by an opaque batch index, it spilled 4 bytes stored and 20
loaded), and a CTA past the table's last tile does nothing, not even allocating tensor
memory. The patterns place what the IR indexes by query block and key block on the entry:
Q tile t's TMA box starts at row row0 + t x block_m, key block n's at key key0 + n x
block_n (TMA fills rows past the tensor with zeros, as on the grid), the hooks see i and j
so, the softmax drops the keys past N, and the block map's row is the entry's. The rows of
a box past row_end belong to the next tile: they are computed (their own documents' keys,
as the mask says) and never stored. The LSE's stores stop at row_end. O's stay TMA stores
where the tile fills the Q tile's 128 rows; a tile that ends inside them cannot be stored
by a box, which would write the next tile's rows (the CTA that owns them writes them too,
in any order), so the epilogue warp copies the slot's rows below row_end to global memory
itself: 16 bytes a lane, a row's units on neighbouring lanes (coalesced), each unit read
at its swizzled place (Note [O through TMA] in sm100a.py). FlashAttention-4 stores O so for
variable-length sequences, where it keeps TMA for fixed ones. A tile of at most block_m
rows skips the work of its second Q tile (Note [Q tiles without rows]). No Blackwell GPU has
timed any of it; the emulator runs each way against the reference
(tests/sim/test_tiles_sm100a_sim.py).

Note [Q tiles without rows]: a query block of two Q tiles whose rows end inside the first --
a tile of the table of at most block_m rows, or the last block of a sequence of M rows
with M mod (2 x block_m) in (0, block_m], M <= block_m among them -- has no row in its
second Q tile, and skips that tile's work where it is found, under a test of the tile's
first row against the block's row end:
- the MMA warp issues none of its GEMMs (QK^T and P.V: half the block's tensor-core
  work). Each commit that follows one not issued tracks the MMAs issued before it and
  arrives when those are done, so the barriers see their arrivals as ever;
- its softmax warpgroup runs its role's skeleton in place of the role: the same waits,
  arrivals and slot writes, without reading S, the hooks, the exponentials and P's store
  (`SKELETON_PATTERNS` in sm100a_ops.py: no scores, the row's statistics as they were, a
  factor of 1), so the other softmax warpgroup has the exponential units of the SM's
  quadrants to itself, and the correction warpgroup's lazy rescale skips the tile's O.
  What precedes the role's KV loops (the key range, the fills) is lowered once, before
  the test: in both branches, docs_sink's kernel spilled 24 bytes stored and 216 loaded
  (ptxas 13.0), and none so. A persistent CTA's softmax roles walk query blocks of either
  kind and run as they stand.
- the correction warpgroup finalizes the tile's statistics but neither reads its O from
  tensor memory nor writes it to O's staging slot: that slot's rows of the tile are never
  stored (O and the LSE are stored only below the row end).
The load warp still brings the tile's Q, which the expect_tx of its barrier counts.
Persistent CTAs zero O at each query block, so a block after one without rows starts
clean. No Blackwell GPU has timed the saving; the emulator counts it
(tests/sim/test_tiles_sm100a_sim.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import llvm, nvvm, scf

from attnc.backend.nvgpu_builders import Emit, _asm
from attnc.ir import error_at, get_bool, get_int, get_shape
from attnc.ir import roles as R


def table_refusal(kernel) -> str | None:
    """What `kernel` lacks to take its query tiles from a tile table, None where it can."""
    from attnc.passes.analyze_masks import mask_functions, table_ids

    if R.is_persistent(kernel):
        return "CTAs that run one query block each, not a walk over query blocks (persistent)"
    if not get_bool(kernel, "has_mask_mod") or mask_functions(kernel).kind != "runtime" \
            or get_int(kernel, "kv_segments") != 1:
        return "a block map (a mask that reads params, of one key range)"
    if table_ids(kernel) is None:
        return "a mask with a conjunct P[.., i] == P[.., j] (an i32 param, the same other indices)"
    return None


def table_runs(kernel):
    """`run_rest_of(kernel)`, refused where it is None or the map's program was asked for
    (`refuse_asked_map`)."""
    from attnc.backend.map_program import refuse_asked_map

    rest = run_rest_of(kernel)
    if rest is None:
        raise error_at(kernel, "run_ranges needs a mask whose other conjuncts read no param and no float")
    refuse_asked_map(kernel)
    return rest


def run_rest_of(kernel):
    """The analysis of `kernel`'s mask with the ids' conjunct taken as true (Note [Ranges
    from the runs] in run_ranges.py), None where that rest reads a param or a float."""
    from attnc.backend.qtiles import segment_conjunct
    from attnc.backend.run_ranges import run_rest
    from attnc.ir import MASK_MOD, region_block
    from attnc.ir.kernel import kernel_variant

    conjunct, _ = segment_conjunct(region_block(kernel, MASK_MOD), list(kernel_variant(kernel).params))
    return run_rest(kernel, conjunct)


def table_blockmap(result, kernel, blockmap, runs: bool):
    """The block map `blockmap` over the tile table's tiles (its `qtiles`), the programs of
    the table and the map checked to read the ids the mask compares; with `runs`, no map:
    the ranges from the table's runs (Note [Ranges from the runs] in run_ranges.py)."""
    from attnc.backend.map_program import check_map_reads_table, table_program_of
    from attnc.backend.qtiles import qtiles_plan, segment_ids
    from attnc.ir import MASK_MOD, region_block

    variant = result.variant
    ids = segment_ids(region_block(kernel, MASK_MOD), list(variant.params))
    table_program_of(kernel, ids.param)
    if not runs:
        check_map_reads_table(kernel, ids.param)
    return replace(blockmap, qtiles=qtiles_plan(variant, blockmap.block_m, ids, blockmap.per_head),
                   runs=table_runs(kernel) if runs else None)


# --- the key range: the patterns of its ops ---------------------------------------------------
MIXED = 1       # a tile class (attn-analyze-masks): the mask applies per element


def block_map_read(cx, op):
    """Note [Block map on sm_100a] (sm100a.py): every block of a mixed loop is MIXED."""
    return [cx.e.c32(MIXED)]


def block_map_range(cx, op):
    """(lo, hi, full_lo, full_hi) from the block map's row of the CTA's query block (Note
    [Block map on sm_100a] in sm100a.py), or from its table tile's run (`run_ranges`: Note
    [Ranges from the runs] in run_ranges.py)."""
    from attnc.backend.blockmap_hooks import blockmap_hooks
    from attnc.backend.mask_hooks import KvCtx
    if cx.blockmap is None:
        raise error_at(op, "attn-lower-sm100a builds a block map where the mask reads params and the analysis "
                           "gives one segment; this kernel has none to read a range from")
    m_block, b, h = (cx.value(v) for v in list(op.operands)[:3])
    kernel, e, tile = cx.kernel, cx.e, tile_of(cx, m_block, op)
    if cx.blockmap.runs is not None and cx.runs is None:     # Note [Ranges from the runs]
        from attnc.backend.run_ranges import RunHooks
        cx.runs = RunHooks(cx.blockmap.runs, cx.names)
    table = {} if tile is None else dict(       # Note [Tile table on sm_100a]
        aligned=True, n_keys=e.max(e.sub(e.dim("N"), tile.key0), 0), row0=tile.row0, row_end=tile.row_end,
        key0=tile.key0, key_end=tile.key_end)
    ctx = KvCtx(m_block, b, h, e.dim("M"), e.dim("N"), get_int(kernel, "mask_block_m"),
                get_int(kernel, "mask_block_n"), **table)
    r = (cx.runs.kv_range if cx.runs is not None else blockmap_hooks(cx.blockmap)[0])(e, ctx)
    return [r.lo, r.hi, r.full_lo, r.full_hi]


def kv_range(cx, op):
    """The mask analysis' function, inlined (its arguments the op's)."""
    from attnc.backend.hooks import RegionCode
    name = ir.FlatSymbolRefAttr(op.attributes["fn"]).value
    fn = ir.SymbolTable(cx.module)[name]
    code = RegionCode(fn.regions[0].blocks[0], cx.names, exact_ints=False)
    return code.results(cx.e, *(cx.value(v) for v in op.operands))


# --- the tile table ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TableTile:
    """A CTA's entry of the table, as a role read it (i32s): `index` is the query block the
    IR's ops name."""
    index: ir.Value
    row0: ir.Value
    row_end: ir.Value
    key0: ir.Value
    key_end: ir.Value


def read_tile(e: Emit, plan, b, h) -> TableTile:
    """The CTA's entry of the table of `plan` (a QTilesPlan): entry nctaid.x - 1 - ctaid.x
    of (b, h)'s (of b's where the table is per batch)."""
    from attnc.backend.qtiles import qtiles_param, read_entry

    index = e.sub(e.sub(nvvm.read_ptx_sreg_nctaid_x(e.i32), 1), nvvm.read_ptx_sreg_ctaid_x(e.i32))
    z = e.add(e.mul(b, e.dim("H")), h) if plan.per_head else b
    return TableTile(index, *read_entry(e, e.arg(qtiles_param().key), z, index, e.dim("M"), plan.block_m))


def tile_of(cx, m_block, op) -> TableTile | None:
    """The table's tile of query block `m_block` (a lowered value) of `op`, None without a
    table; an op that names another query block than the CTA's is refused."""
    if cx.tile is None:
        return None
    if m_block != cx.tile.index:
        raise error_at(op, "attn-lower-sm100a: with a tile table (aligned_tiles) an op indexes the CTA's own "
                           "query block, the kernel's m_block (Note [Tile table on sm_100a])")
    return cx.tile


def first_row(cx, op, m_block, q_tile: int) -> ir.Value:
    """The first row of Q tile `q_tile` of query block `m_block`."""
    e, block_m = cx.e, get_int(cx.kernel, "block_m")
    tile = tile_of(cx, m_block, op)
    if tile is not None:
        return e.add(tile.row0, q_tile * block_m)
    return e.mul(e.add(e.mul(m_block, get_int(cx.kernel, "q_tiles")), q_tile), block_m)


def first_key(cx, n) -> ir.Value:
    """The first key of key block `n` (on the table's tiles, from the tile's key origin)."""
    e = cx.e
    start = e.mul(n, get_int(cx.kernel, "block_n"))
    return e.add(cx.tile.key0, start) if cx.tile is not None else start


def rows_end(cx, op, m_block, rows_total) -> ir.Value:
    """Where query block `m_block`'s rows end: the tile's row_end, or M."""
    tile = tile_of(cx, m_block, op)
    return tile.row_end if tile is not None else rows_total


def q_tile_of(op) -> int:
    """The Q tile an op works on (its `q_tile`; 0 where it has none)."""
    return get_int(op, "q_tile") if "q_tile" in op.attributes else 0


def q_tile_has_rows(cx, op, q_tile: int) -> ir.Value | None:
    """Note [Q tiles without rows]: whether Q tile `q_tile` of the role's query block holds
    one of its rows (an i1), None for the first Q tile, which always does."""
    if q_tile == 0:
        return None
    rows = cx.size(get_shape(cx.kernel, "q_shape")[2])
    return cx.e.lt(first_row(cx, op, cx.m_block, q_tile), rows_end(cx, op, cx.m_block, rows))


def o_rows(cx, op, m_block, first) -> ir.Value | None:
    """How many of the Q tile's rows from `first` O's store writes where the tile ends
    inside them (0 to block_m), None on the grid (a TMA store writes them all)."""
    tile = tile_of(cx, m_block, op)
    if tile is None:
        return None
    e = cx.e
    return e.max(e.min(e.sub(tile.row_end, first), get_int(cx.kernel, "block_m")), 0)


def store_o_rows(cx, slot_addr, swizzle: int, size: int, first, count, b, h) -> None:
    """The slot's first `count` rows of O (swizzled as Note [O through TMA] lays them out)
    to O's rows from `first`, by the lanes of the warp: 16 bytes a lane and a trip, the
    units of a row on neighbouring lanes."""
    from attnc.backend.sm100a_ops import element_address

    e, kernel = cx.e, cx.kernel
    units = get_int(kernel, "head_dim_v") * size // 16
    block_m = get_int(kernel, "block_m")
    loop = scf.ForOp(cx.lane, e.mul(count, units), e.c32(32))
    with ir.InsertionPoint(loop.body):
        f = loop.induction_variable
        row, unit = e.div(f, units), e.rem(f, units)
        block, within = e.div(e.mul(unit, 16), swizzle), e.rem(e.mul(unit, 16), swizzle)
        phase = e.shl(e.and_(e.shr(e.mul(row, swizzle), 7), swizzle // 16 - 1), 4)
        src = e.add(e.add(slot_addr, e.mul(block, block_m * swizzle)),
                    e.add(e.mul(row, swizzle), e.xor(within, phase)))
        words = _asm([e.i32] * 4, [src], "ld.shared.v4.b32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,r").result
        dst = element_address(cx, "o", [b, h, e.add(first, row)], e.mul(unit, 16 // size), size)
        _asm([], [dst, *[llvm.extractvalue(e.i32, words, [k]) for k in range(4)]],
             "st.global.v4.b32 [$0], {$1, $2, $3, $4};", "l,r,r,r,r")
        scf.yield_([])
