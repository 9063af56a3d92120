"""The attn dialect: its IRDL definition (attn.irdl.mlir), loading, names, locations.

Everything here imports MLIR; the frontend and the reference never import this
package (they must run where MLIR is not installed).
"""
from __future__ import annotations

from attnc.ir.context import load_attn_dialect, make_context, parse_module, to_text
from attnc.ir.kernel import hook_blocks
from attnc.ir.locations import error_at, file_loc, filename_of, op_in_words, span_of
from attnc.ir.ops import (ATTENTION, KERNEL, DIM, MASK_MOD, PARAM, REGION_NAMES, SCORE_MOD, SINK,
                          YIELD, attention_ops, cmpi_predicate, defining_op, depends_on, get_bool, get_int, get_shape,
                          get_str, int_constant, planned_target, region_block, set_int, set_str, yielded)

__all__ = [
    "ATTENTION", "KERNEL", "DIM", "MASK_MOD", "PARAM", "REGION_NAMES", "SCORE_MOD", "SINK", "YIELD",
    "attention_ops", "cmpi_predicate", "defining_op", "depends_on", "error_at", "file_loc", "filename_of",
    "get_bool", "get_int", "get_shape", "get_str", "hook_blocks", "int_constant", "load_attn_dialect",
    "make_context", "op_in_words", "parse_module", "planned_target", "region_block", "set_int", "set_str",
    "span_of", "to_text", "yielded",
]
