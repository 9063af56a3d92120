"""Brute-force checks of what `attn-analyze-masks` recorded, shared by its tests.

A variant is lowered by the frontend, given tile sizes (as attn-tile would) and analysed
by the pass; the functions it recorded are run with the small arith interpreter
(`attnc.analysis.interp`), so the code checked is the code later passes will call. They
are compared with the exact classes computed from the keep matrix that the reference's
own evaluator (`attnc.reference_eval`, no code shared with the analysis) gives for
mask_mod.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from mlir.passmanager import PassManager

from attnc.analysis.interp import compile_function
from attnc.frontend import Variant, load
from attnc.frontend.lower import lower
from attnc.ir import attention_ops, get_int, set_int
from attnc.passes.analyze_masks import AnalyzeMasks, mask_functions
from attnc.reference_eval import Evaluator

SKIP, MIXED, FULL = 0, 1, 2
NAMES = {SKIP: "skip", MIXED: "mixed", FULL: "full"}


@dataclass
class Recorded:
    """What the pass left on one attn.attention op."""
    kind: str
    dims: list[str]
    block_m: int
    block_n: int
    tile_class: object = None        # callable(m_lo, m_hi, n_lo, n_hi, b, h, *dims) -> (class,)
    kv_range: object = None          # callable(m_block, b, h, *dims) -> (start, end, ...)
    segments: int = 0


def recorded(module) -> Recorded:
    """The analysis results of the only attn.attention op of `module`, runnable."""
    ops = attention_ops(module)
    assert len(ops) == 1
    op = ops[0]
    found = mask_functions(op)
    rec = Recorded(kind=found.kind, dims=list(found.dims), block_m=get_int(op, "block_m"),
                   block_n=get_int(op, "block_n"))
    if found.kind != "none":
        rec.tile_class = compile_function(found.tile_class)
        rec.kv_range = compile_function(found.kv_range)
        rec.segments = found.segments
    return rec


def analyze_source(source: str, block_m: int, block_n: int) -> tuple[Variant, Recorded]:
    """Frontend, the tile sizes attn-tile would set, attn-analyze-masks; what it recorded."""
    variant = load(source)
    module = lower(variant)
    with module.context:
        for op in attention_ops(module):
            set_int(op, "block_m", block_m)
            set_int(op, "block_n", block_n)
        pm = PassManager("builtin.module")
        pm.add(AnalyzeMasks(), AnalyzeMasks.name)
        pm.run(module.operation)
        assert module.operation.verify()
    return variant, recorded(module)


def keep_matrix(variant: Variant, dims: dict, b: int = 0, h: int = 0,
                params: dict | None = None) -> np.ndarray:
    """mask_mod(b, h, i, j) for every (i, j) of one (b, h), by the reference's evaluator."""
    M, N = dims["M"], dims["N"]
    args = (np.int64(b), np.int64(h), np.arange(M, dtype=np.int64)[:, None],
            np.arange(N, dtype=np.int64)[None, :])
    keep = Evaluator(dims, params or {}).hook(variant.mask_mod, args)
    return np.broadcast_to(keep, (M, N))


def exact_class(tile: np.ndarray) -> int:
    if not tile.any():
        return SKIP
    return FULL if tile.all() else MIXED


@dataclass
class Report:
    unsound: list = field(default_factory=list)      # wrong skip/full, or a kept block outside
    inexact: list = field(default_factory=list)      # mixed where exact is skip/full; loose range

    def __str__(self):
        return f"unsound: {self.unsound[:5]}\ninexact: {self.inexact[:5]}"


def check(rec: Recorded, keep: np.ndarray, dims: dict[str, int], b: int = 0, h: int = 0) -> Report:
    """Compare every tile's recorded class and every query block's KV plan with `keep`
    (shape [M, N], True where mask_mod keeps (i, j) for this b, h)."""
    M, N = keep.shape
    bm, bn = rec.block_m, rec.block_n
    dim_values = [dims[d] for d in rec.dims]
    report = Report()
    for m_block in range(-(-M // bm)):
        rows = keep[m_block * bm:(m_block + 1) * bm]
        classes = []
        for n_block in range(-(-N // bn)):
            tile = rows[:, n_block * bn:(n_block + 1) * bn]
            want = exact_class(tile)
            classes.append(want)
            m_lo, n_lo = m_block * bm, n_block * bn
            got = rec.tile_class(m_lo, m_lo + tile.shape[0], n_lo, n_lo + tile.shape[1], b, h,
                                 *dim_values)[0]
            where = (m_block, n_block, NAMES[got], NAMES[want])
            if got != want:
                (report.inexact if got == MIXED else report.unsound).append(where)
        plan = rec.kv_range(m_block, b, h, *dim_values)
        _check_segments(rec, m_block, classes, plan[:-2], report)
        _check_full_range(m_block, classes, plan[-2:], report)
    return report


def _check_segments(rec, m_block, classes, ends, report):
    segments = list(zip(ends[0::2], ends[1::2]))
    assert len(segments) == rec.segments
    covered, last_end = set(), None
    for start, end in segments:
        if start >= end:
            continue
        if last_end is not None and start < last_end:
            report.unsound.append((m_block, "overlapping or unsorted segments", segments))
        last_end = end
        covered.update(range(start, end))
        if not (0 <= start and end <= len(classes)):
            report.inexact.append((m_block, "segment beyond the key blocks", segments))
        elif classes[start] == SKIP or classes[end - 1] == SKIP:
            report.inexact.append((m_block, "segment ends on a skipped block", segments))
    for n_block, cls in enumerate(classes):
        if cls != SKIP and n_block not in covered:
            report.unsound.append((m_block, n_block, "kept block outside the segments", segments))


def _check_full_range(m_block, classes, full, report):
    """Every block of the full range is FULL; when the FULL blocks form one run, the
    range is that run (else it may be any part of one)."""
    start, end = full
    if any(classes[n] != FULL for n in range(start, end)):
        report.unsound.append((m_block, "full range holds a block that is not FULL", full))
    runs = _runs([n for n, cls in enumerate(classes) if cls == FULL])
    if len(runs) <= 1 and (start, end) != (runs[0] if runs else (start, start)) and \
            not (not runs and start >= end):
        report.inexact.append((m_block, f"full range {full}, FULL blocks {runs}"))


def _runs(blocks: list[int]) -> list[tuple[int, int]]:
    runs: list[list[int]] = []
    for n in blocks:
        if runs and runs[-1][1] == n:
            runs[-1][1] = n + 1
        else:
            runs.append([n, n + 1])
    return [tuple(r) for r in runs]
