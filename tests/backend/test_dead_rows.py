"""Note [Dead rows] (sm80.py): which kernels interleave their warps' 16-row tiles and run
the first key block a tile at a time, the PTX that gives, the option and its errors. The
numerics run on a GPU: every example and property variant of such a kernel takes it
(tests/gpu), and bench/ab_bundles.py compares it bit for bit with the kernel without it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnc.backend.kernel_spec import ForwardSpec
from attnc.backend.spec_checks import SpecError
from attnc.errors import AttncError
from attnc.testing import build_with, kernel_ptx

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
D128 = dict(dtype="bf16", head_dim_qk=128, head_dim_v=128, block_m=128, block_n=64, num_warps=4)


def interval(e, b, h, i):
    return None, i


def window(arch: str = "sm_80", **options):
    """The sliding_window example (d = 128: 128x64 tiles on sm_80, two 16-row tiles a warp)."""
    return build_with((EXAMPLES / "sliding_window.attn").read_text(), "sliding_window.attn", arch, **options)


def mma_count(built) -> int:
    return len(re.findall(r"\bmma\.sync\.aligned\b", kernel_ptx(built.ptx, "attnc_sliding_window_fwd")))


def test_on_by_default_where_a_warp_holds_two_tiles_and_the_mask_a_row_interval():
    assert ForwardSpec(**D128, row_interval=interval).check().skips_dead_rows
    assert ForwardSpec(**D128, row_interval=interval).check().atom_rows == 64
    assert not ForwardSpec(**D128).check().skips_dead_rows                           # no interval
    assert ForwardSpec(**D128).check().atom_rows == 16
    d64_128x128 = {**D128, "head_dim_qk": 64, "head_dim_v": 64, "block_n": 128}
    assert not ForwardSpec(**d64_128x128, row_interval=interval).check().skips_dead_rows
    assert ForwardSpec(**d64_128x128, row_interval=interval, dead_rows=True).check().skips_dead_rows
    for fields in (dict(block_m=64), dict(stages=1), dict(dead_rows=False), dict(target="sm_90a", block_m=64)):
        assert not ForwardSpec(**{**D128, "row_interval": interval, **fields}).check().skips_dead_rows


@pytest.mark.parametrize("fields", [dict(), dict(row_interval=interval, block_m=64),
                                    dict(row_interval=interval, stages=1),
                                    dict(row_interval=interval, target="sm_90a", block_m=64)])
def test_the_option_needs_two_tiles_a_warp_two_stages_and_an_interval(fields):
    """(Key blocks as long as the query block only turn the default off: the option may ask.)"""
    with pytest.raises(SpecError, match="dead_rows"):
        ForwardSpec(**{**D128, **fields}, dead_rows=True).check()


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


def test_the_option_is_refused_where_it_cannot_apply():
    with pytest.raises(AttncError, match="dead_rows"):
        build_with((EXAMPLES / "mha.attn").read_text(), "mha.attn", "sm_80", dead_rows="true")


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
