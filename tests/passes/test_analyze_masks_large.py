"""attn-analyze-masks on large masks: Notes [Many disjuncts] and [Answer budget] in
attnc/analysis/tile_classes.py.

An `or` of 150 equalities keeps the band [i - 149, i]: its KV range is that band's key
blocks exactly (the hull of the disjuncts), in a function of a few ops; its tile classes
and full range, too large to emit, are the coarse sound answers (every tile MIXED, no
FULL blocks). 150 nested `where`s fall back the same way. Every answer is checked
against the reference's keep matrix on every tile and query block (mask_oracle).
"""
from __future__ import annotations

import pytest
from mask_oracle import MIXED, SKIP, analyze_source, check, keep_matrix

from attnc.analysis.tile_classes import MAX_SEGMENTS

TERMS = 150


def source(mask: str) -> str:
    return f"""attention large_mask {{
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  dim P
  mask_mod(b, h, i, j) = {mask}
  out o: bf16[B, H, M, 64]
}}"""


OR_MASK = " or ".join(f"i - j == {k}" for k in range(TERMS))


def nested_wheres(depth: int) -> str:
    e = "j <= i"
    for k in range(depth):
        e = f"where(i - j == {k}, j >= i, {e})"
    return e


def kept_blocks(keep, block_m: int, block_n: int, m_block: int) -> list[int]:
    rows = keep[m_block * block_m:(m_block + 1) * block_m]
    return [n for n in range(-(-keep.shape[1] // block_n)) if rows[:, n * block_n:(n + 1) * block_n].any()]


@pytest.mark.parametrize("M, N", [(300, 333), (200, 200), (520, 100), (1, 400)])
@pytest.mark.parametrize("block_m, block_n", [(64, 128), (128, 128), (64, 64), (16, 32)])
def test_an_or_of_150_equalities_visits_its_band_exactly(M, N, block_m, block_n):
    variant, rec = analyze_source(source(OR_MASK), block_m, block_n)
    dims = {"B": 1, "H": 1, "M": M, "N": N, "P": 0}
    keep = keep_matrix(variant, dims)
    report = check(rec, keep, dims)
    assert not report.unsound, report
    assert rec.segments == 1
    values = [dims[d] for d in rec.dims]
    for m_block in range(-(-M // block_m)):
        start, end, full_start, full_end = rec.kv_range(m_block, 0, 0, *values)
        blocks = kept_blocks(keep, block_m, block_n, m_block)
        assert (start, end) == ((blocks[0], blocks[-1] + 1) if blocks else (start, start)), m_block
        assert full_start == full_end == 0


def test_the_or_of_150_equalities_emits_a_small_kv_range_and_a_constant_tile_class():
    """The hull's bounds fold to max(0, m_block - 2) and min(m_block, blocks - 1) + 1 (was
    12,400 ops); the tile class, past the budget, is MIXED without reading its arguments."""
    variant, rec = analyze_source(source(OR_MASK), 128, 128)
    dims = {"B": 1, "H": 1, "M": 1000, "N": 1000, "P": 0}
    values = [dims[d] for d in rec.dims]
    assert rec.kv_range(5, 0, 0, *values) == (3, 6, 0, 0)        # keys [491, 767]: blocks 3 .. 5
    assert {rec.tile_class(m, m + 128, n, n + 128, 0, 0, *values)[0]
            for m in (0, 512) for n in (0, 384, 896)} == {MIXED}


def test_the_functions_the_pass_emits_for_an_or_of_150_equalities_are_small():
    from mlir.passmanager import PassManager

    from attnc.frontend import load
    from attnc.frontend.lower import lower
    from attnc.ir import attention_ops, set_int
    from attnc.passes.analyze_masks import AnalyzeMasks, mask_functions

    module = lower(load(source(OR_MASK)))
    with module.context:
        for op in attention_ops(module):
            set_int(op, "block_m", 128)
            set_int(op, "block_n", 128)
        pm = PassManager("builtin.module")
        pm.add(AnalyzeMasks(), AnalyzeMasks.name)
        pm.run(module.operation)
        found = mask_functions(attention_ops(module)[0])
    sizes = [len(list(fn.regions[0].blocks[0].operations)) for fn in (found.kv_range, found.tile_class)]
    assert sizes[0] <= 30 and sizes[1] <= 3, sizes


@pytest.mark.parametrize("M, N", [(300, 333), (40, 420)])
def test_150_nested_wheres_fall_back_to_sound_answers(M, N):
    """kept: j == i or j <= i - 150; the answers past the budget: every block visited,
    every tile MIXED, none FULL."""
    variant, rec = analyze_source(source(nested_wheres(TERMS)), 64, 64)
    dims = {"B": 1, "H": 1, "M": M, "N": N, "P": 0}
    keep = keep_matrix(variant, dims)
    report = check(rec, keep, dims)
    assert not report.unsound, report
    values = [dims[d] for d in rec.dims]
    assert rec.kv_range(0, 0, 0, *values) == (0, -(-N // 64), 0, 0)
    assert rec.tile_class(0, 64, 0, 64, 0, 0, *values) == (MIXED,)


MIXED_DISJUNCTS = ["j < 3", "i - j == 40", "j == i + 2", "j // 64 == i // 64 - 2", "i - j >= 250",
                   "j == P", "abs(i - j - 100) <= 5"]


@pytest.mark.parametrize("M, N, P", [(300, 333, 7), (200, 500, 450), (64, 64, -1)])
@pytest.mark.parametrize("block_m, block_n", [(64, 128), (32, 16)])
def test_a_hull_of_unlike_disjuncts_covers_every_kept_block(M, N, P, block_m, block_n):
    """More than MAX_SEGMENTS disjuncts of different shapes: one segment, holding every key
    block with a kept key (and starting and ending on such blocks where the hull is tight)."""
    assert len(MIXED_DISJUNCTS) > MAX_SEGMENTS
    variant, rec = analyze_source(source(" or ".join(MIXED_DISJUNCTS)), block_m, block_n)
    dims = {"B": 1, "H": 1, "M": M, "N": N, "P": P}
    keep = keep_matrix(variant, dims)
    report = check(rec, keep, dims)
    assert not report.unsound, report
    assert rec.segments == 1
    values = [dims[d] for d in rec.dims]
    start, end = rec.kv_range(0, 0, 0, *values)[:2]
    assert start == 0 and 0 < end                     # j < 3 keeps block 0 in every row
    blocks = kept_blocks(keep, block_m, block_n, 0)
    assert end >= blocks[-1] + 1
    assert rec.tile_class(0, min(M, block_m), 0, min(N, block_n), 0, 0, *values)[0] != SKIP
