"""The sm_90a kernel without a GPU: it builds, lowers to PTX, assembles for sm_90a with
nvJitLink with zero spills, its wgmma instructions read the tiles the way Note [wgmma
operands] says, and ptxas keeps them asynchronous (it serializes every wgmma of a kernel
in which an instruction redefines a register of one in flight, and says so in its log).
(Numerics run on a GPU: tests/gpu with --archs sm_90a bundles.)"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from mlir import ir

from attnc.backend import cubin, ptx
from attnc.backend.kernel_module import build_kernel_module
from attnc.backend.kernel_spec import ForwardSpec
from attnc.backend.mask_hooks import KvRange
from attnc.backend.lowering import build
from attnc.backend.spec_checks import SpecError
from attnc.driver import CompileOptions, compile_file

SERIALIZED = "wgmma.mma_async instructions are serialized"


def spec(dtype="bf16", d=128, d_v=None, block_m=128, block_n=128, **kw) -> ForwardSpec:
    return ForwardSpec(dtype=dtype, head_dim_qk=d, head_dim_v=d_v or d, block_m=block_m, block_n=block_n,
                          num_warps=block_m // 16, stages=kw.pop("stages", 2), target="sm_90a",
                          symbol=kw.pop("symbol", "attnc_sm90_test"), **kw).check()


@functools.lru_cache(maxsize=None)
def compiled(s: ForwardSpec) -> tuple[str, str]:
    with ir.Context():
        module, _ = build_kernel_module(s)
        text = ptx.to_ptx(module, "sm_90a")
    return text, cubin.ptx_to_cubin(text, "sm_90a", verbose=True).info_log


CASES = {
    "d128_causal": dict(mask="causal", with_lse=True),
    "d64_64x128": dict(d=64, block_m=64, mask="causal"),
    "d64_64x64_f16": dict(dtype="f16", d=64, block_m=64, block_n=64, mask="causal"),
    "d96_none": dict(d=96, mask="none"),
    "qk128_v64_f32_out": dict(d=128, d_v=64, out_dtype="f32", mask="causal_bottom_right"),
    "two_blocks_per_cta": dict(d=64, block_m=64, mask="causal", q_blocks_per_cta=2),
}


@pytest.mark.parametrize("name", CASES)
def test_assembles_without_spills_or_serialized_wgmma(name):
    text, log = compiled(spec(**CASES[name]))
    usage = cubin.parse_resource_usage(log)["attnc_sm90_test"]
    assert not usage.spills and usage.stack_frame == 0, usage
    assert SERIALIZED not in log, log


def test_gemms_are_wgmma_through_descriptors():
    s = spec(mask="causal")
    text, _ = compiled(s)
    assert ".target sm_90a" in text
    assert "mma.sync" not in text and "ldmatrix" not in text
    # QK^T: A and B descriptors (K-major, trans-b 0); P.V: A registers, B N-major (trans-b 1).
    qk = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16 \{[^}]*\}, %rd\d+, %rd\d+, p, 1, 1, 0, 0;",
                    text)
    pv = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16 \{[^}]*\}, \{[^}]*\}, %rd\d+, p, 1, 1, 1;",
                    text)
    assert len(qk) % (s.head_dim_qk // 16) == 0 and qk
    assert len(pv) % (s.block_n // 16) == 0 and pv
    # The swizzled tiles are 1024-byte aligned (Note [wgmma operands]).
    assert ".extern .shared .align 1024 .b8 attnc_dynamic_smem[];" in text


def test_overlap_keeps_one_group_in_flight():
    """Note [wgmma overlap]: step u's QK^T is waited for with P.V of u - 1 still in flight."""
    text, _ = compiled(spec(mask="causal"))
    assert "wgmma.wait_group.sync.aligned 1;" in text
    # It needs two K/V stages.
    with pytest.raises(SpecError, match="two or more K/V stages"):
        spec(d=64, block_m=64, block_n=64, mask="causal", stages=1).check()


def test_mask_hooks_and_scores_run_on_wgmma_accumulators():
    window = lambda e, c: KvRange(lo=e.max(e.sub(e.div(e.mul(c.m_block, c.block_m), c.block_n), 8), 0),  # noqa: E731
                                  full_lo=0, full_hi=0, hi=e.cdiv(e.mul(e.add(c.m_block, 1), c.block_m), c.block_n))
    keep = lambda e, b, h, i, j: e.land(e.le(j, i), e.lt(e.sub(i, j), 1024))  # noqa: E731
    text, log = compiled(spec(d=64, block_m=64, block_n=64, mask="mask_mod", kv_range=window, keep=keep))
    assert SERIALIZED not in log
    assert "wgmma.wait_group.sync.aligned 1;" in text


@pytest.mark.parametrize("fields, message", [
    (dict(block_m=128, num_warps=4), "warpgroups of 4 warps and 64 rows"),
    (dict(block_n=272), "at most 256"),
    (dict(num_warps=2, block_m=32), "expected one of (4, 8, 12, 16)"),
])
def test_sm90a_specs_are_checked(fields, message):
    base = dict(dtype="bf16", head_dim_qk=64, head_dim_v=64, block_m=128, block_n=128, num_warps=8,
                target="sm_90a")
    with pytest.raises(SpecError, match=re.escape(message)):
        ForwardSpec(**{**base, **fields}).check()


def test_twelve_warps_and_a_partial_copy_pass():
    """Three warpgroups (192 rows) copy K/V in passes of 48 rows: the last pass of a
    128-row tile is partial, and only its first 32 rows' threads copy. (384 threads
    get at most 168 registers each, so this tile spills: it is not a default.)"""
    text, log = compiled(spec(d=64, block_m=192, block_n=128, mask="causal"))
    assert SERIALIZED not in log
    # The partial pass's guard: thread row tid / 8 < 32, as LLVM writes it.
    assert re.search(r"setp\.gt\.u32\s+%p\d+, %r\d+, 255;", text)


EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES_DIR.glob("*.attn")))
def test_every_example_assembles_for_sm90a_without_spills(name):
    """Every example's sm_90a bundle, at its own head dims and the default choices (the
    block map of docs_sink included): no spills, no serialized wgmma. Their numerics run
    on a GPU (tests/gpu with --archs sm_90a bundles)."""
    art = build(compile_file(EXAMPLES_DIR / f"{name}.attn", CompileOptions(arch="sm_90a")))
    log = cubin.ptx_to_cubin(art.ptx, "sm_90a", verbose=True).info_log
    usage = cubin.parse_resource_usage(log)
    assert usage, "no kernel in the PTX"
    for symbol, u in usage.items():
        assert not u.spills and u.stack_frame == 0, f"{symbol}: {u}"
    assert SERIALIZED not in log, log


@pytest.mark.parametrize("kw, smem_ctas", [(dict(d=64, block_m=64, mask="causal"), 3),
                                           (dict(d=64, block_m=64, block_n=64, mask="causal"), 5),
                                           (dict(d=128, block_m=64, block_n=64, mask="causal"), 2),
                                           (dict(d=128, mask="causal", stages=3), 1)])
def test_the_default_register_bound_is_what_shared_memory_allows(kw, smem_ctas):
    """Note [CTAs per SM]: on sm_90a the CTAs shared memory holds, at most those that leave
    128 registers per thread, none (0) at one CTA; sm_80 keeps ptxas's choice; the
    option overrides."""
    s = spec(**kw)
    assert s.min_ctas == (0 if smem_ctas < 2 else min(smem_ctas, 65536 // (s.threads * 128)))
    assert ForwardSpec(**{**s.__dict__, "target": "sm_80", "num_warps": 4}).min_ctas == 0
    assert spec(**kw, min_ctas_per_sm=1).min_ctas == 1


def test_the_default_register_bound_is_kept_only_without_spills():
    """Note [CTAs per SM]: causal at head dim 64 (64x128 tiles) assembles at three CTAs per
    SM without spills and keeps the bound; the ALiBi example (bottom-right causal, f16)
    spills under it and is built without one. Both say so in their specialization."""
    causal = spec(d=64, block_m=64, mask="causal")
    assert causal.min_ctas == 3
    text, log = compiled(causal)
    assert ".minnctapersm 3" in text
    assert not cubin.parse_resource_usage(log)["attnc_sm90_test"].spills
    art = build(compile_file(EXAMPLES_DIR / "alibi.attn", CompileOptions(arch="sm_90a")))
    assert art.spec.min_ctas == 3
    assert ".minnctapersm" not in art.ptx
    assert art.manifest["specialization"]["min_ctas_per_sm"] == 0
