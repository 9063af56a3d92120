"""Note [Row bit masks] (attnc/backend/row_bits.py): which masks the kernel tests as
per-row bit masks, and that the scores it keeps that way are exactly those the
reference keeps below N, run on the CPU (host_jit.py) for rows of 8 to 64 scores
(one and two mask words), tiles far from, across and past the kept keys, and bounds
at the ends of i32."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from attnc.backend import row_bits
from attnc.backend.row_bits import RowBits
from attnc.driver import CompileOptions, compile_mlir
from tests.backend.host_jit import host_function
from tests.backend.test_compile_scaling import OR_MASK, nested_wheres
from tests.backend.test_hooks import _arg_types, _hooks, source
from tests.backend.test_row_intervals import _row_mask_inputs, check_masked_row

OR_150 = " or ".join(f"i - j == {k}" for k in range(150))

MASKS = {       # mask -> taken as row bits (with MIN_COMPARISONS = 1 where small)
    OR_150: True,
    nested_wheres(150): True,
    "j <= i or j < off[b]": True,
    "i - j == 3 or not (j > i + 5) or i != j + 2": True,
    "where(i - j == 3, j >= i, i - j == 0 or not (j > i + 5)) and i > 4": True,
    "(j < 4 or j > i - 3) != (2 * i - j >= 7) or j - i == off[b]": True,
    "i - j < off[b] or j == i + 40": True,                      # a bound leaving i32 (EXTREME_OFF)
    "j > off[b] or j == i": True,
    "j <= i + N - M or i == j + (N - M) + 3": True,             # i + N may leave i32: solved in i64
    "where(i > 2, j <= i, j >= i) or not (i == j + 1)": True,
    "j // 7 == i // 7 or j <= i": False,                        # j under a division
    "2 * j == i or j <= i": False,                              # j's coefficient 2
    "off[b] == j or j < i": True,                               # a param read free of j
}

EXTREME_OFF = {
    "i - j < off[b] or j == i + 40": [2**31 - 1, -2**31, 200],
    "j > off[b] or j == i": [2**31 - 1, -2**31, 3],
}


@functools.lru_cache(maxsize=None)
def _compiled(mask: str):
    text = source("bits", f"param off: i32[B]\n  mask_mod(b, h, i, j) = {mask}")
    return compile_mlir(text, "bits.attn", CompileOptions(arch="sm_80"))


def test_large_masks_of_comparisons_linear_in_j_take_row_bits():
    """The `or` of 150 equalities and 150 nested `where`s do; `MIN_COMPARISONS` keeps the
    small ones (every example's mask) on their per-score code."""
    for mask, bits in MASKS.items():
        _, hooks = _hooks(_compiled(mask))
        large = mask in (OR_150, nested_wheres(150))
        assert (RowBits.of(hooks.keep) is not None) == (bits and large), mask


# Rows of 8, 24, 32 and 64 scores (two words); the large masks at 128-key tiles only (a
# host function of theirs takes seconds to build).
CASES = [(m, n) for m in sorted(MASKS, key=len) for n in ((128,) if len(m) > 200 else (32, 96, 128, 256))]


@pytest.mark.parametrize("mask, block_n", CASES)
def test_row_bits_keep_exactly_the_masked_keys_below_n(mask, block_n, monkeypatch):
    from attnc.backend.score_masks import ElementCoords, ScoreMasker
    monkeypatch.setattr(row_bits, "MIN_COMPARISONS", 1)
    result = _compiled(mask)
    _, hooks = _hooks(result)
    assert (RowBits.of(hooks.keep) is not None) == MASKS[mask]
    if not MASKS[mask]:
        return
    columns = block_n // 4
    args = {**_arg_types(result, hooks), "b": "i32", "h": "i32", "i": "i32", "col0": "i32", "n_block": "i32"}

    def body(e, a):
        coords = ElementCoords(e, a["i"], a["col0"], block_n)
        masker = ScoreMasker(e, coords, a["b"], a["h"], 1.0, None, hooks.keep)
        assert masker.row_bits is not None
        return masker.mask([[e.cf(1.0)] * columns], a["n_block"])[0]

    with result.module.context:
        run = host_function(args, body)
    rng = np.random.default_rng(3)
    dims = {"B": 3, "H": 4, "M": 600, "N": 600}
    values, evaluator = _row_mask_inputs(result, args, rng, dims, EXTREME_OFF.get(mask))
    values["off"] = values["off"] if mask in EXTREME_OFF else rng.integers(-4, 300, size=3).astype(np.int32)
    evaluator = type(evaluator)(dims, {"off": values["off"].astype(np.int64)})
    check_masked_row(run, values, evaluator, result, rng, 400, block_n, dims, mask[:60])


def test_the_or_of_150_equalities_is_tested_per_row_in_the_kernel():
    """The lowered kernel holds the mask's bits per row, not its 150 compares per score:
    far fewer `arith.cmpi eq` than 150 per score."""
    from attnc.backend.lowering import kernel_module_for
    result = compile_mlir(OR_MASK, "ors.attn", CompileOptions(arch="sm_80"))
    text = str(kernel_module_for(result)[0])
    compares = text.count("arith.cmpi eq")
    assert compares < 150 * 64, compares
