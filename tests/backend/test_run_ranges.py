"""Ranges from the tile table's runs (Note [Ranges from the runs], attnc/backend/run_ranges.py)
on the CPU: the code the attention kernel inlines for a block's class and for the ids'
conjunct holding (host_jit.py), against brute force over the masks' elements, for the
tables the table kernel writes (as tests/gpu/test_gpu_aligned_tiles.py derives them) from
sorted ids, unsorted ids (the grid, key_end -1), and M != N (keys past M, whose ids no
table orders, with ids of earlier documents)."""
from __future__ import annotations

import numpy as np
import pytest

from attnc.backend.hooks import KernelNames
from attnc.backend.mask_hooks import KvCtx
from attnc.backend.qtiles import segment_conjunct
from attnc.backend.run_ranges import RunHooks, run_rest
from attnc.driver import CompileOptions, compile_mlir
from attnc.ir import MASK_MOD, attention_ops, get_int, region_block
from attnc.passes import kernel_choices
from attnc.passes.pipelines import pipeline_with_options
from tests.backend.host_jit import host_function

SOURCE = """attention docs {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  param doc: i32[B, N]
  mask_mod(b, h, i, j) = MASK
  out o: bf16[B, H, M, 64]
}
"""

# mask_mod, the same over numpy index grids given the ids of rows and keys
MASKS = {
    "doc[b, i] == doc[b, j] and j <= i": lambda i, j, di, dj: (di == dj) & (j <= i),
    "doc[b, j] == doc[b, i]": lambda i, j, di, dj: di == dj,
    "doc[b, i] == doc[b, j] and i - j < 100 and j >= i - 300":
        lambda i, j, di, dj: (di == dj) & (i - j < 100) & (j >= i - 300),
    "doc[b, i] == doc[b, j] and (j <= 10 or i - j < 70)": lambda i, j, di, dj: (di == dj) & ((j <= 10) | (i - j < 70)),
    "doc[b, i] == doc[b, j] and j <= i and (i - j) % 3 == 0":
        lambda i, j, di, dj: (di == dj) & (j <= i) & ((i - j) % 3 == 0),
}
EXACT = ("doc[b, i] == doc[b, j] and j <= i", "doc[b, j] == doc[b, i]")
SKIP, MIXED, FULL = 0, 1, 2


def table(ids: np.ndarray, M: int, block_m: int) -> list[tuple[int, int, int, int]]:
    """(row0, row_end, key0, key_end) of the table's tiles (qtiles.py), the spare ones left out."""
    rows = ids[np.minimum(np.arange(M), len(ids) - 1)]
    if np.any(np.diff(rows) < 0):
        return [(t, min(t + block_m, M), 0, -1) for t in range(0, M, block_m)]
    starts = [i for i in range(M) if i == 0 or rows[i] != rows[i - 1]] + [M]
    return [(r, min(r + block_m, end), start, end)
            for start, end in zip(starts, starts[1:]) for r in range(start, end, block_m)]


def run_hooks(result) -> RunHooks:
    """The hooks the lowering inlines for the runs of `result`'s mask (Note [Ranges from
    the runs]): the analysis of the mask with the ids' conjunct taken as true."""
    op = attention_ops(result.module)[0]
    conjunct, _ = segment_conjunct(region_block(op, MASK_MOD), list(result.variant.params))
    return RunHooks(run_rest(op, conjunct), KernelNames(result.variant, op, result.module))


@pytest.mark.parametrize("mask", list(MASKS))
def test_block_classes_and_holds_against_brute_force(mask):
    options = CompileOptions(arch="sm_80", pass_pipeline=pipeline_with_options("sm_80", {"run_ranges": True}))
    result = compile_mlir(SOURCE.replace("MASK", mask), "docs.attn", options)
    op = attention_ops(result.module)[0]
    choices = kernel_choices.read(op)
    assert choices["run_ranges"]
    runs = run_hooks(result)
    # The kernel asks the ids' holding where it splits the mask (Note [Conjuncts a tile holds]).
    tile_holds = runs.fields(split=choices["split_mask"]).get("tile_holds")
    assert (tile_holds is not None) == choices["split_mask"]
    bm, bn = get_int(op, "block_m"), get_int(op, "block_n")
    names = ("row0", "row_end", "key0", "key_end", "M", "N", "b", "h", "n")

    def body(e, a):
        c = KvCtx(0, a["b"], a["h"], a["M"], a["N"], bm, bn, aligned=True,
                  n_keys=e.max(e.sub(a["N"], a["key0"]), 0), row0=a["row0"], row_end=a["row_end"],
                  key0=a["key0"], key_end=a["key_end"])
        holds = tile_holds(e, c, a["n"]) if tile_holds else (e.false(), e.false())
        return [runs.tile_class(e, c, a["n"]), *holds, runs.scan_end(e, c)]

    with runs.rest.module.context:         # the context of the code the hooks clone
        run = host_function({n: "i32" for n in names}, body)
    rng = np.random.default_rng(5)
    checked = held = 0
    for M, N, kind in ((700, 700, "sorted"), (700, 700, "unsorted"), (700, 500, "sorted"), (500, 700, "sorted"),
                       (500, 700, "tail"), (700, 700, "one")):
        lengths = rng.integers(1, 260, size=40)
        ids = np.repeat(np.arange(40), lengths)[:max(M, N)].astype(np.int64)
        if kind == "unsorted":
            ids = rng.permutation(ids)
        if kind == "tail":                  # keys past M, which no table orders, repeat earlier ids
            ids[M:] = rng.choice(ids[:M], size=len(ids) - M)
        if kind == "one":
            ids[:] = 3
        ids = ids[:N]                       # doc: i32[B, N]
        rows_ids = ids[np.minimum(np.arange(M), N - 1)]
        for row0, row_end, key0, key_end in table(ids, M, bm):
            i = np.arange(row0, row_end)[:, None]
            for n in range(-(-max(N - key0, 0) // bn)):
                lo, hi = key0 + n * bn, min(key0 + (n + 1) * bn, N)
                j = np.arange(lo, hi)[None, :]
                kept = MASKS[mask](i, j, rows_ids[i], ids[j])
                cls, interval_holds, ids_hold, scan_end = run(row0=row0, row_end=row_end, key0=key0,
                                                              key_end=key_end, M=M, N=N, b=0, h=0, n=n)
                where = (mask, M, N, kind, row0, row_end, key0, key_end, n, cls)
                truth = SKIP if not kept.any() else FULL if kept.all() else MIXED
                exact = mask in EXACT and kind != "unsorted" and hi <= M     # keys past M: the ids' test
                assert cls == truth if exact else cls in (truth, MIXED), where
                assert not interval_holds, where
                if ids_hold:
                    assert (rows_ids[i] == ids[j]).all(), where
                if n >= scan_end:                   # kv_range does not scan it: nothing kept
                    assert not kept.any(), where
                checked += 1
                held += ids_hold
    assert checked > 400
    if tile_holds:                              # the ids' conjunct is proved somewhere
        assert held > 0
