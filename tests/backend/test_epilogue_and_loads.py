"""Note [Staged O] (epilogue.py) and Note [Lean step loads] (forward_loads.py): which kernels
write O through shared memory or load later key blocks without row predicates, the
PTX that gives, the option and its errors. The numerics run on a GPU (tests/gpu: every
example and property variant of a kernel with one query block per CTA takes it, ragged M
included; bench/ab_bundles.py compares it bit for bit with the direct store)."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir.roles import name_of, role_ops
from attnc.passes import kernel_choices
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import SM90A_ONE_WARPGROUP, build_with, kernel_ptx, variant_source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CAUSAL = variant_source("v", 64)            # bf16, d = 64: 128x128 tiles and 4 warps on sm_80
WINDOW = variant_source("v", 64, mask="j <= i and i - j < 1024")
DOCS = """attention v {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  param doc: i32[B, N]
  mask_mod(b, h, i, j) = doc[b, i] == doc[b, j] and j <= i
  out o: bf16[B, H, M, 64]
}
"""


@functools.lru_cache(maxsize=None)
def _compiled(source: str, arch: str, options: tuple):
    pipeline = pipeline_with_options(arch, dict(options))
    return compile_mlir(source, "v.attn", CompileOptions(arch=arch, pass_pipeline=pipeline))


def planned(source: str, arch: str = "sm_80", **options):
    """The kernel op as the pipeline leaves it (its choices recorded, no PTX built)."""
    return attention_ops(_compiled(source, arch, tuple(sorted(options.items()))).module)[0]


def chosen(source: str, arch: str = "sm_80", **options) -> dict:
    """attn-kernel-choices' record ({option: value})."""
    return kernel_choices.read(planned(source, arch, **options))


@functools.lru_cache(maxsize=None)
def _built(source: str, arch: str, options: tuple):
    return build_with(source, "v.attn", arch, cubin=False, **dict(options))


def ptx_of(source: str = CAUSAL, **options) -> str:
    """The sm_80 attention kernel's PTX (the bundle may hold the small grid's kernel too)."""
    art = _built(source, "sm_80", tuple(sorted(options.items())))
    return kernel_ptx(art.ptx, art.manifest["kernels"][-1]["symbol"])


def counts(text: str) -> dict[str, int]:
    ops = ("st.shared.b32", "ld.shared.v4.b32", "st.global.v4.b32", "st.global.b32", "bar.warp.sync")
    return {op: len(re.findall(re.escape(op) + r"\s", text)) for op in ops}


def test_staged_by_default_where_every_tile_is_dead_at_the_epilogue():
    assert chosen(CAUSAL)["staged_o"] is True
    # sm_90a (d = 64: 64-row blocks): for bands and block maps (a short key loop per query block).
    assert chosen(WINDOW, "sm_90a")["staged_o"] is True
    assert chosen(DOCS, "sm_90a")["staged_o"] is True
    assert chosen(CAUSAL, "sm_90a", **SM90A_ONE_WARPGROUP)["staged_o"] is False
    assert chosen(CAUSAL, "sm_90a", staged_o="true", **SM90A_ONE_WARPGROUP)["staged_o"] is True
    # ... not with its producer warpgroup (causal's 192-row tile).
    assert chosen(CAUSAL, "sm_90a")["staged_o"] is False
    # Two query blocks per CTA: the next block's loads fly during the epilogue.
    assert chosen(CAUSAL, q_blocks_per_cta=2)["staged_o"] is False
    # A producer warpgroup (sm_90a, d = 128: 128-row blocks) may still be loading.
    wide = variant_source("v", 128)
    assert "producer" in {name_of(r) for r in role_ops(planned(wide, "sm_90a"))}
    assert chosen(wide, "sm_90a")["staged_o"] is False
    assert chosen(CAUSAL.replace("out o: bf16", "out o: f32"))["staged_o"] is False


def test_staged_o_writes_whole_rows_16_bytes_a_lane():
    """A lane holds 2 row tiles x 2 halves x 8 atoms of pairs (32 st.shared) and reads back
    32 rows x 8 chunks / 32 lanes = 8 chunks of 16 bytes (8 ld.shared.v4, 8 st.global.v4)."""
    staged, direct = counts(ptx_of()), counts(ptx_of(staged_o="false"))
    assert staged == {"st.shared.b32": 32, "ld.shared.v4.b32": 8, "st.global.v4.b32": 8,
                      "st.global.b32": 0, "bar.warp.sync": 1}
    assert direct == {"st.shared.b32": 0, "ld.shared.v4.b32": 0, "st.global.v4.b32": 0,
                      "st.global.b32": 32, "bar.warp.sync": 0}


def test_staged_o_with_the_lse_still_stores_each_row_once():
    found = counts(ptx_of(CAUSAL.replace("}\n", "  out lse: f32[B, H, M]\n}\n")))
    assert found["st.global.v4.b32"] == 8
    assert found["st.global.b32"] == 4          # the LSE of rows g, g+8, g+16, g+24


@pytest.mark.parametrize("dv, warps, reads", [(128, 4, 16), (96, 4, 12), (256, 8, 16)])
def test_staged_o_at_other_value_head_dims(dv, warps, reads):
    """A warp's rows (32, or 16 with 8 warps) x dv / 8 chunks, 32 chunks of 16 bytes per
    read: 16 at d = 128, 12 at 96 (12 chunks a row, swizzled within groups of 4)."""
    source = CAUSAL.replace("v: bf16[B, H, N, 64]", f"v: bf16[B, H, N, {dv}]").replace(
        "out o: bf16[B, H, M, 64]", f"out o: bf16[B, H, M, {dv}]")
    found = counts(ptx_of(source, block_m=128, block_n=64, num_warps=warps))
    assert found["ld.shared.v4.b32"] == reads == found["st.global.v4.b32"]
    assert found["st.shared.b32"] == (128 // warps // 16) * 2 * dv // 8


def test_staged_o_option_errors():
    with pytest.raises(AttncError, match="staged_o"):
        chosen(CAUSAL, q_blocks_per_cta=2, staged_o="true")
    with pytest.raises(AttncError, match="staged_o"):
        chosen(CAUSAL.replace("out o: bf16", "out o: f32"), staged_o="true")


# ---------------------------------------------------------------- Note [Lean step loads]

COPY_SIZE = r"cp\.async\.cg\.shared\.global \[[^]]*\], \[[^]]*\], 16, (%r\d+)"


def _predicated_copies(text: str) -> int:
    """cp.async copies with a source size operand (the zero-filling, predicated form)."""
    return len(re.findall(COPY_SIZE, text))


def _row_and_tile_predicates(text: str, per_tile: int) -> tuple[int, int]:
    """Predicated copies whose size operand is their row's (shared at most by K0's and V0's
    copies of one row), and copies that share theirs with a whole tile's `per_tile`."""
    sizes = re.findall(COPY_SIZE, text)
    shared = [sizes.count(r) for r in sizes]
    return sum(n < per_tile for n in shared), sum(n >= per_tile for n in shared)


def test_lean_step_loads_are_the_default_of_block_maps_and_bands_on_sm_80():
    """(Which steps still ask tile_skip: the PTX tests below.)"""
    assert chosen(DOCS)["lean_loads"] is True
    assert chosen(WINDOW)["lean_loads"] is True
    assert chosen(CAUSAL)["lean_loads"] is False
    assert chosen(DOCS, "sm_90a")["lean_loads"] is False
    with pytest.raises(AttncError, match="lean_loads"):
        chosen(CAUSAL, lean_loads="true")


def test_lean_step_loads_drop_the_row_predicates_of_later_blocks():
    """Documents + causal at 128x128, d = 64, the map's own tiles without the early first
    block: the prologue's Q, K0, V0 and K1 (8 copies a thread each) keep their row
    predicates either way; the two partial loops' loads of the next blocks (V and K, 8
    copies each) lose theirs, and keep one predicate a tile, the map's skip answer."""
    fixed = dict(block_m=128, block_n=128, aligned_tiles="false", early_first="false")
    lean, plain = (ptx_of(DOCS, lean_loads=x, **fixed) for x in ("true", "false"))
    assert _row_and_tile_predicates(lean, 8) == (32, 32)
    assert _row_and_tile_predicates(plain, 8) == (64, 0)


def test_a_bands_lean_steps_predicate_only_the_prologue():
    """The sliding_window example (d = 128, 128x64 tiles): Q (16 copies a thread), K0, V0
    and K1 (8 each) keep their row predicates; no step's copy has one, as the band's lean
    steps ask no tile_skip (without lean loads the two partial loops' V and K copies, 32
    more, do, and the one loop's 16: Note [Key loops]). Without dead rows, whose peeled
    first step is one more copy of a partial step's loads (Note [Dead rows])."""
    def ptx_with(**options) -> str:
        path = EXAMPLES / "sliding_window.attn"
        art = build_with(path.read_text(), path.name, "sm_80", cubin=False, dead_rows="false", **options)
        assert art.manifest["specialization"]["lean_loads"] is (options.get("lean_loads", "true") == "true")
        return art.ptx
    lean, plain = ptx_with(kv_loops="3"), ptx_with(lean_loads="false", kv_loops="3")
    assert (_predicated_copies(lean), _predicated_copies(plain)) == (40, 72)
    assert (_predicated_copies(ptx_with()), _predicated_copies(ptx_with(lean_loads="false"))) == (40, 56)
