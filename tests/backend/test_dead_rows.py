"""Note [Dead rows] (sm80.py): which kernels interleave their warps' 16-row tiles and run
the first key block a tile at a time, the PTX that gives, the option and its errors. The
numerics run on a GPU: every example and property variant of such a kernel takes it
(tests/gpu), and bench/ab_bundles.py compares it bit for bit with the kernel without it."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops, get_int
from attnc.passes import kernel_choices
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import build_with, kernel_ptx, variant_source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WINDOW = (EXAMPLES / "sliding_window.attn").read_text()     # a row interval; d = 128: 128x64 tiles on sm_80
MHA = (EXAMPLES / "mha.attn").read_text()                   # no mask: no interval


def window(arch: str = "sm_80", **options):
    """The sliding_window example (d = 128: 128x64 tiles on sm_80, two 16-row tiles a warp)."""
    return build_with(WINDOW, "sliding_window.attn", arch, cubin=False, **options)


@functools.lru_cache(maxsize=None)
def _compiled(source: str, arch: str, options: tuple):
    pipeline = pipeline_with_options(arch, dict(options))
    return compile_mlir(source, "v.attn", CompileOptions(arch=arch, pass_pipeline=pipeline))


def chosen(source: str, arch: str = "sm_80", **options) -> tuple[bool, int, int]:
    """dead_rows as attn-kernel-choices records it, with the tiles (block_m, block_n)."""
    op = attention_ops(_compiled(source, arch, tuple(sorted(options.items()))).module)[0]
    return kernel_choices.read(op)["dead_rows"], get_int(op, "block_m"), get_int(op, "block_n")


def mma_count(built) -> int:
    return len(re.findall(r"\bmma\.sync\.aligned\b", kernel_ptx(built.ptx, "attnc_sliding_window_fwd")))


def test_on_by_default_where_a_warp_holds_two_tiles_and_the_mask_a_row_interval():
    assert chosen(WINDOW) == (True, 128, 64)
    assert chosen(MHA, block_n=64) == (False, 128, 64)                      # no interval
    # Key blocks as long as the query block: off by default, on where asked.
    window_d64 = variant_source("v", 64, mask="j <= i and i - j < 1024")
    assert chosen(window_d64) == (False, 128, 128)
    assert chosen(window_d64, dead_rows="true") == (True, 128, 128)
    for arch, options in (("sm_80", dict(block_m=64)), ("sm_80", dict(stages=1)),
                          ("sm_80", dict(dead_rows="false")), ("sm_90a", dict(block_m=64))):
        assert chosen(WINDOW, arch, **options)[0] is False


@pytest.mark.parametrize("source, arch, options", [
    (MHA, "sm_80", dict(block_n=64)),                   # no interval
    (WINDOW, "sm_80", dict(block_m=64)),                # one 16-row tile a warp
    (WINDOW, "sm_80", dict(stages=1)),
    (WINDOW, "sm_90a", dict(block_m=64)),
])
def test_the_option_needs_two_tiles_a_warp_two_stages_and_an_interval(source, arch, options):
    """(Key blocks as long as the query block only turn the default off: the option may ask.)"""
    with pytest.raises(AttncError, match="dead_rows needs an sm_80 kernel"):
        chosen(source, arch, dead_rows="true", **options)


def test_the_first_step_runs_each_tile_in_its_own_branch():
    """Beside the three loops' steps (2 tiles x (8 n8 atoms x 8 k16 of QK^T + 16 x 4 of PV)
    MMAs each), the peeled first step holds each tile's 64 + 64 once more, and a vote per
    tile decides whether it runs."""
    on, off = window(), window(dead_rows="false")
    assert on.manifest["specialization"]["dead_rows"] is True
    assert off.manifest["specialization"]["dead_rows"] is False
    assert mma_count(on) - mma_count(off) == 2 * (64 + 64)
    votes = [len(re.findall(r"\bvote\.sync\.all\.pred\b", kernel_ptx(b.ptx, "attnc_sliding_window_fwd")))
             for b in (on, off)]
    assert votes[0] - votes[1] == 2


def test_sm_90a_is_unchanged_and_refuses_the_choice():
    assert window("sm_90a").manifest["specialization"]["dead_rows"] is False
    with pytest.raises(AttncError, match="the sm_90a kernel cannot be built: dead_rows needs an sm_80 kernel"):
        window("sm_90a", dead_rows="true")


class _Ints:
    """The integer arithmetic of an Emit, on Python ints."""
    add = staticmethod(lambda a, b: a + b)
    mul = staticmethod(lambda a, b: a * b)
    shr = staticmethod(lambda a, b: a >> b)


@pytest.mark.parametrize("atom_rows", [16, 64])
def test_staged_rows_cover_the_query_block_once(atom_rows):
    """Staged O (Note [Staged O]): warp w stages its two tiles' 32 rows contiguously;
    staged row r goes to row warp_row0 + r of the block (warp_row0 = 32w) without
    interleaving, and to warp_row0 + 64 (r // 16) + r % 16 (warp_row0 = 16w) with it
    (Note [Dead rows]). The 4 warps' rows together are the 128-row block's, each once."""
    from attnc.backend.epilogue import StagedRows
    first, seen = 1000, []
    for w in range(4):
        warp_row0 = 16 * w if atom_rows > 16 else 32 * w
        stage = StagedRows(None, first + warp_row0, 32, atom_rows)
        rows = [stage.global_row(_Ints, r) - first for r in range(32)]
        assert rows == [warp_row0 + atom_rows * k + x for k in range(2) for x in range(16)]
        seen += rows
    assert sorted(seen) == list(range(128))
