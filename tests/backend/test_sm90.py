"""The sm_90a kernel without a GPU, built from `.attn` sources through the pipeline: it
lowers to PTX, assembles for sm_90a with zero spills, its wgmma instructions read the
tiles the way Note [wgmma operands] says, and ptxas keeps them asynchronous (it
serializes every wgmma of a kernel in which an instruction redefines a register of one
in flight, and says so in its log). (Numerics run on a GPU: tests/gpu with --archs
sm_90a bundles.)"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from mlir import ir

from attnc.backend import cubin
from attnc.backend.lowering import build
from attnc.driver import CompileOptions, compile_file, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir.roles import role_ops
from attnc.passes import kernel_choices
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import SM90A_ONE_WARPGROUP, build_with

SERIALIZED = "wgmma.mma_async instructions are serialized"
CAUSAL, BOTTOM_RIGHT = "j <= i", "j <= i + (N - M)"


def source(dtype: str = "bf16", d: int = 128, d_v: int | None = None, mask: str | None = CAUSAL,
           lse: bool = False, out: str | None = None) -> str:
    d_v = d_v or d
    hook = f"  mask_mod(b, h, i, j) = {mask}\n" if mask else ""
    return (f"attention t {{\n  q: {dtype}[B, H, M, {d}]\n  k: {dtype}[B, HKV, N, {d}]\n"
            f"  v: {dtype}[B, HKV, N, {d_v}]\n{hook}  out o: {out or dtype}[B, H, M, {d_v}]\n"
            + ("  out lse: f32[B, H, M]\n" if lse else "") + "}\n")


@functools.lru_cache(maxsize=None)
def built(text: str, **options):
    return build_with(text, "t.attn", "sm_90a", **options)


@functools.lru_cache(maxsize=None)
def assembled(text: str, **options) -> tuple[str, str]:
    """(PTX, ptxas's log) of the sm_90a kernel of `text` with the pipeline's `options`."""
    art = built(text, **options)
    return art.ptx, cubin.ptx_to_cubin(art.ptx, "sm_90a", verbose=True).info_log


@functools.lru_cache(maxsize=None)
def planned(text: str, arch: str = "sm_90a", **options):
    """The CompileResult of `arch`'s pipeline with `options` (no PTX)."""
    return compile_mlir(text, "t.attn", CompileOptions(arch=arch, pass_pipeline=pipeline_with_options(arch, options)))


def no_spills(log: str) -> None:
    usage = cubin.parse_resource_usage(log)
    assert usage, "no kernel in the PTX"
    for symbol, u in usage.items():
        assert not u.spills and u.stack_frame == 0, f"{symbol}: {u}"


TILE_128 = dict(block_m=128, block_n=128, stages=2)
TILE_64 = dict(block_m=64, block_n=128, stages=2)
CASES = {
    "d128_causal": (source(lse=True), TILE_128),
    "d64_64x128": (source(d=64), TILE_64),
    "d64_64x64_f16": (source("f16", 64), dict(block_m=64, block_n=64, stages=2)),
    "d96_none": (source(d=96, mask=None), TILE_128),
    "qk128_v64_f32_out": (source(d=128, d_v=64, out="f32", mask=BOTTOM_RIGHT), TILE_128),
}


@pytest.mark.parametrize("name", CASES)
def test_assembles_without_spills_or_serialized_wgmma(name):
    text, options = CASES[name]
    _, log = assembled(text, **options)
    no_spills(log)
    assert SERIALIZED not in log, log


def test_gemms_are_wgmma_through_descriptors():
    text, _ = assembled(source(), **TILE_128)
    assert ".target sm_90a" in text
    assert "mma.sync" not in text and "ldmatrix" not in text
    # QK^T: A and B descriptors (K-major, trans-b 0); P.V: A registers, B N-major (trans-b 1).
    qk = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16 \{[^}]*\}, %rd\d+, %rd\d+, p, 1, 1, 0, 0;",
                    text)
    pv = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16 \{[^}]*\}, \{[^}]*\}, %rd\d+, p, 1, 1, 1;",
                    text)
    assert len(qk) % (128 // 16) == 0 and qk          # head dim 128 in k16 steps
    assert len(pv) % (128 // 16) == 0 and pv          # block_n 128 in k16 steps
    # The swizzled tiles are 1024-byte aligned (Note [wgmma operands]).
    assert ".extern .shared .align 1024 .b8 attnc_dynamic_smem[];" in text


def test_overlap_keeps_one_group_in_flight():
    """Note [wgmma overlap]: step u's QK^T is waited for with P.V of u - 1 still in flight."""
    text, _ = assembled(source(), **TILE_128)
    assert "wgmma.wait_group.sync.aligned 1;" in text
    # It needs two K/V stages.
    with pytest.raises(AttncError, match=re.escape("stages=1 is not possible on sm_90a")):
        planned(source(d=64), block_m=64, block_n=64, stages=1)


def test_a_window_mask_runs_on_wgmma_accumulators():
    text, log = assembled(source(d=64, mask="j <= i and i - j < 1024"), block_m=64, block_n=64)
    assert SERIALIZED not in log
    assert "wgmma.wait_group.sync.aligned 1;" in text


@pytest.mark.parametrize("options, message", [
    (dict(block_m=128, num_warps=4), "num_warps=4 is not possible on sm_90a"),
    (dict(block_n=272), "at most 256"),
    (dict(num_warps=2, block_m=32), "num_warps=2 is not possible on sm_90a"),
])
def test_tiles_sm90a_cannot_take_are_refused_by_name(options, message):
    with pytest.raises(AttncError, match=re.escape(message)):
        planned(source(d=64), **options)


EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES_DIR.glob("*.attn")))
def test_every_example_assembles_for_sm90a_without_spills(name):
    """Every example's sm_90a bundle, at its own head dims and the default choices (the
    block map of docs_sink included): no spills, no serialized wgmma. Their numerics run
    on a GPU (tests/gpu with --archs sm_90a bundles)."""
    art = build(compile_file(EXAMPLES_DIR / f"{name}.attn", CompileOptions(arch="sm_90a")))
    log = cubin.ptx_to_cubin(art.ptx, "sm_90a", verbose=True).info_log
    no_spills(log)
    assert SERIALIZED not in log, log


# Spills of a kernel measured faster with them than without: relative_bias's at 64x128 (one
# consumer warpgroup a CTA), those of its near tiles under the 3-CTA bound, their diagonals
# shared across the warp (Notes [Spills of the near tiles] in attnc/backend/register_bound.py
# and [Diagonals across the warp] in warp_diagonals.py; results/sm90a_h200.md, "Spills of the
# near tiles" and "Diagonals across the warp"). More than these bytes fails.
MEASURED_SPILL_STORES = 112


@pytest.mark.parametrize("idle", [True, False])
def test_the_near_tiles_hold_relative_bias_spills(idle, monkeypatch):
    """Note [Spills of the near tiles]: relative_bias's kernel of one consumer warpgroup
    keeps the 3-CTA bound though it spills under it, since its copy with each near-tiles
    branch held on its far side spills none -- the trial lowered on a second core (`idle`)
    or after that copy; with the far sides alone the kernel is smaller."""
    from attnc.backend.ptx import rewrite_for_nvptx, to_ptx
    from attnc.backend.register_bound import hold_far_sides
    from attnc.backend.score_masks import NEAR_TILES

    monkeypatch.setattr(cubin, "idle_core", lambda: idle)
    pipeline = pipeline_with_options("sm_90a", SM90A_ONE_WARPGROUP)
    result = compile_file(EXAMPLES_DIR / "relative_bias.attn", CompileOptions(arch="sm_90a", pass_pipeline=pipeline))
    art = build(result)
    assert ".minnctapersm 3" in art.ptx
    usage = cubin.resource_usage(art.ptx, "sm_90a")
    assert any(u.spills for u in usage.values()) and all(u.spill_stores <= MEASURED_SPILL_STORES for u in usage.values()), usage
    with result.module.context:
        copy = ir.Module.parse(str(result.module))
        near = []
        rewrite_for_nvptx(copy, marked=(NEAR_TILES, near))
        assert near
        hold_far_sides(copy, near)
        far = to_ptx(copy, "sm_90a", rewritten=True)
    assert len(far) < len(art.ptx)
    usage = cubin.resource_usage(far, "sm_90a")
    assert usage and not any(u.spills for u in usage.values()), usage


def threads(result) -> int:
    """The CTA's threads: every role's warps."""
    return 32 * sum(len(ir.ArrayAttr(role.attributes["warps"])) for role in role_ops(attention_ops(result.module)[0]))


def chosen(result) -> dict:
    return kernel_choices.read(attention_ops(result.module)[0])


@pytest.mark.parametrize("text, tile, smem_ctas", [
    (source(d=64), dict(block_m=64, block_n=128), 3),
    (source(d=64), dict(block_m=64, block_n=64), 5),
    (source(d=128), dict(block_m=64, block_n=64), 2),
    (source(d=128), dict(block_m=128, block_n=128, stages=3), 1),
])
def test_the_default_register_bound_is_what_shared_memory_allows(text, tile, smem_ctas):
    """Note [CTAs per SM]: on sm_90a the CTAs shared memory holds, at most those that leave
    128 registers per thread, none (0) at one CTA; sm_80 keeps ptxas's choice; the
    option overrides."""
    result = planned(text, **tile)
    expected = 0 if smem_ctas < 2 else min(smem_ctas, 65536 // (threads(result) * 128))
    assert chosen(result)["min_ctas_per_sm"] == expected
    assert chosen(planned(text, "sm_80"))["min_ctas_per_sm"] == 0
    assert chosen(planned(text, **tile, min_ctas_per_sm=1))["min_ctas_per_sm"] == 1


def test_the_default_register_bound_is_kept_only_without_spills():
    """Note [CTAs per SM]: causal at head dim 64 (64x128 tiles) assembles at three CTAs per
    SM without spills and keeps the bound; the ALiBi example (bottom-right causal, f16)
    spills under it and is built without one. Both say so in their specialization."""
    causal = built(source(d=64), block_m=64, block_n=128)
    assert causal.manifest["specialization"]["min_ctas_per_sm"] == 3
    assert ".minnctapersm 3" in causal.ptx
    no_spills(cubin.ptx_to_cubin(causal.ptx, "sm_90a", verbose=True).info_log)
    art = build(compile_file(EXAMPLES_DIR / "alibi.attn", CompileOptions(arch="sm_90a")))
    asked = chosen(art.result)
    assert (asked["min_ctas_per_sm"], asked["min_ctas_unless_spills"]) == (3, True)
    assert ".minnctapersm" not in art.ptx
    assert art.manifest["specialization"]["min_ctas_per_sm"] == 0
