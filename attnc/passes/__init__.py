"""attnc's passes: one per file, found by name through the registry.

    attnc/passes/registry.py    name -> pass class; the `Pass` base; user pass files
    attnc/passes/pipelines.py   each target's pipeline as data; the textual syntax
    attnc/passes/tile.py        attn-tile
    attnc/passes/analyze_masks.py  attn-analyze-masks

Importing this package does not import MLIR; a pass imports it when it runs.
"""
from __future__ import annotations

from attnc.passes.registry import (Option, Pass, PassInfo, all_passes, load_pass_file, lookup,
                                   register)

__all__ = ["Option", "Pass", "PassInfo", "all_passes", "load_pass_file", "lookup", "register"]
