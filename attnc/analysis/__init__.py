"""Static analyses of hook regions, independent of targets.

    symbolic.py      the algebra of symbolic integers/booleans the analyses answer in
    domain.py        intervals and three-valued truths, with their transfer functions
    region.py        a hook region as plain data (`Program`)
    intervals.py     the abstract interpreter (boxes, conditional narrowing)
    narrowing.py     its backward half: boxes shrunk by assumed comparisons
    solve.py         a condition solved for one symbol (an interval where it surely holds)
    tile_classes.py  mask_mod per tile (skip / mixed / full) and per query block (KV plan)
    to_arith.py      symbolic expressions emitted as an `arith` function
    interp.py        a concrete interpreter of such functions (for tests)

The analysis is a pure function of a `Program`; only `region.read_region` and
`to_arith` touch MLIR (imported lazily), and the pass (attnc/passes/analyze_masks.py)
reads and writes the IR.
"""
from __future__ import annotations

from attnc.analysis.region import Program, read_region
from attnc.analysis.tile_classes import FULL, MIXED, SKIP, KvPlan, MaskSummary, summarize_mask

__all__ = ["FULL", "MIXED", "SKIP", "KvPlan", "MaskSummary", "Program", "read_region",
           "summarize_mask"]
