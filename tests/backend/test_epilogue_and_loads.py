"""Note [Staged O] (epilogue.py) and Note [Lean step loads] (forward_loads.py): which kernels
write O through shared memory or load later key blocks without row predicates, the
PTX that gives, the option and its errors. The numerics run on a GPU (tests/gpu: every
example and property variant of a kernel with one query block per CTA takes it, ragged M
included; bench/ab_bundles.py compares it bit for bit with the direct store)."""
from __future__ import annotations

import re

import pytest
from mlir import ir

from attnc.backend import ptx
from attnc.backend.kernel_module import build_kernel_module
from attnc.backend.kernel_spec import ForwardSpec
from attnc.backend.spec_checks import SpecError

D64 = dict(dtype="bf16", head_dim_qk=64, head_dim_v=64, block_m=128, block_n=128, num_warps=4, mask="causal")


def ptx_of(**kw) -> str:
    sp = ForwardSpec(**{**D64, "symbol": "staged_test", **kw}).check()
    with ir.Context():
        module, _ = build_kernel_module(sp)
        return ptx.to_ptx(module, "sm_80")


def counts(text: str) -> dict[str, int]:
    ops = ("st.shared.b32", "ld.shared.v4.b32", "st.global.v4.b32", "st.global.b32", "bar.warp.sync")
    return {op: len(re.findall(re.escape(op) + r"\s", text)) for op in ops}


def test_staged_by_default_where_every_tile_is_dead_at_the_epilogue():
    assert ForwardSpec(**D64).check().o_staged
    # sm_90a: for bands and block maps (a short key loop per query block).
    sm90 = {**D64, "target": "sm_90a", "block_m": 64}
    assert ForwardSpec(**sm90, banded=True).check().o_staged
    assert ForwardSpec(**sm90, blockmap=True).check().o_staged
    assert not ForwardSpec(**sm90).check().o_staged
    assert ForwardSpec(**sm90, staged_o=True).check().o_staged
    # Two query blocks per CTA: the next block's loads fly during the epilogue.
    assert not ForwardSpec(**D64, q_blocks_per_cta=2).check().o_staged
    # A producer warpgroup (sm_90a, 128-row blocks) may still be loading.
    assert not ForwardSpec(**{**D64, "target": "sm_90a", "num_warps": 8, "head_dim_qk": 128,
                                 "head_dim_v": 128}).check().o_staged
    assert not ForwardSpec(**D64, out_dtype="f32").check().o_staged


def test_staged_o_writes_whole_rows_16_bytes_a_lane():
    """A lane holds 2 row tiles x 2 halves x 8 atoms of pairs (32 st.shared) and reads back
    32 rows x 8 chunks / 32 lanes = 8 chunks of 16 bytes (8 ld.shared.v4, 8 st.global.v4)."""
    staged, direct = counts(ptx_of()), counts(ptx_of(staged_o=False))
    assert staged == {"st.shared.b32": 32, "ld.shared.v4.b32": 8, "st.global.v4.b32": 8,
                      "st.global.b32": 0, "bar.warp.sync": 1}
    assert direct == {"st.shared.b32": 0, "ld.shared.v4.b32": 0, "st.global.v4.b32": 0,
                      "st.global.b32": 32, "bar.warp.sync": 0}


def test_staged_o_with_the_lse_still_stores_each_row_once():
    found = counts(ptx_of(with_lse=True))
    assert found["st.global.v4.b32"] == 8
    assert found["st.global.b32"] == 4          # the LSE of rows g, g+8, g+16, g+24


@pytest.mark.parametrize("dv, warps, reads", [(128, 4, 16), (96, 4, 12), (256, 8, 16)])
def test_staged_o_at_other_value_head_dims(dv, warps, reads):
    """A warp's rows (32, or 16 with 8 warps) x dv / 8 chunks, 32 chunks of 16 bytes per
    read: 16 at d = 128, 12 at 96 (12 chunks a row, swizzled within groups of 4)."""
    found = counts(ptx_of(head_dim_v=dv, block_n=64, num_warps=warps))
    assert found["ld.shared.v4.b32"] == reads == found["st.global.v4.b32"]
    assert found["st.shared.b32"] == (128 // warps // 16) * 2 * dv // 8


def test_staged_o_option_errors():
    with pytest.raises(SpecError, match="staged_o"):
        ForwardSpec(**D64, q_blocks_per_cta=2, staged_o=True).check()
    with pytest.raises(SpecError, match="staged_o"):
        ForwardSpec(**D64, out_dtype="f32", staged_o=True).check()


# ---------------------------------------------------------------- Note [Lean step loads]

def _predicated_copies(text: str) -> int:
    """cp.async copies with a source size operand (the zero-filling, predicated form)."""
    return len(re.findall(r"cp\.async\.cg\.shared\.global \[[^]]*\], \[[^]]*\], 16, %r", text))


def test_lean_step_loads_are_the_default_of_block_maps_and_bands_on_sm_80():
    never = lambda e, c, n: e.true()            # noqa: E731 (a tile_skip hook)
    assert ForwardSpec(**D64, blockmap=True).check().step_loads_lean
    assert ForwardSpec(**D64, blockmap=True, tile_skip=never).check().asks_tile_skip
    band = ForwardSpec(**D64, banded=True, tile_skip=never).check()
    assert band.step_loads_lean and not band.asks_tile_skip
    assert ForwardSpec(**D64, banded=True, tile_skip=never, lean_loads=False).check().asks_tile_skip
    assert not ForwardSpec(**D64).check().step_loads_lean
    assert not ForwardSpec(**{**D64, "target": "sm_90a", "block_m": 64}, blockmap=True).check().step_loads_lean
    with pytest.raises(SpecError, match="lean_loads"):
        ForwardSpec(**D64, lean_loads=True).check()


def test_lean_step_loads_drop_the_row_predicates_of_later_blocks():
    """Causal at 128x128, d = 64 (as a block map's kernel, without its skip answers): the
    prologue's Q, K0, V0 and K1 (8 copies a thread each) keep their row predicates either
    way; the diagonal step's loads of the next blocks (V and K, 8 copies each) lose theirs."""
    lean = ptx_of(blockmap=True, lean_loads=True)
    plain = ptx_of(blockmap=True, lean_loads=False)
    assert (_predicated_copies(lean), _predicated_copies(plain)) == (32, 48)


def test_a_bands_lean_steps_predicate_only_the_prologue():
    """The sliding_window example (d = 128, 128x64 tiles): Q (16 copies a thread), K0, V0
    and K1 (8 each) keep their row predicates; no step's copy has one (without lean loads
    the two partial loops' V and K copies, 32 more, do). Without dead rows, whose peeled
    first step is one more copy of a partial step's loads (Note [Dead rows])."""
    from pathlib import Path

    from attnc.testing import build_with

    def ptx_with(**options) -> str:
        path = Path(__file__).resolve().parents[2] / "examples" / "sliding_window.attn"
        art = build_with(path.read_text(), path.name, "sm_80", **options)
        assert art.manifest["specialization"]["lean_loads"] is (options.get("lean_loads", "true") == "true")
        return art.ptx
    lean, plain = ptx_with(dead_rows="false"), ptx_with(lean_loads="false", dead_rows="false")
    assert (_predicated_copies(lean), _predicated_copies(plain)) == (40, 72)
