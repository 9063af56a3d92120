"""exp2 on the FMA pipe (Note [Exponentials on the FMA pipe] in softmax.py): the
algorithm of `exp2_fma` (nvgpu_builders.py) in a float32 emulation against numpy's
exp2; the option `exp2_fma` of attn-kernel-choices: its instruction mix in the PTX,
the unchanged kernel at 0, its check, the manifest, and that the kernels assemble. Its
numerics on a GPU: tests/gpu with bundles built with the option."""
from __future__ import annotations

import functools
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from attnc.backend import cubin
from attnc.backend.nvgpu_builders import EXP2_POLY, EXP2_SHIFTER
from attnc.errors import AttncError
from attnc.testing import SM90A_ONE_WARPGROUP, build_with, variant_source

F32 = np.float32


def _fma(a, b, c):
    """a * b + c rounded once to f32 (the f64 product of two f32 values is exact; the f64
    sum's rounding then to f32 can differ from one rounding only at ties)."""
    return (a.astype(np.float64) * b.astype(np.float64) + np.float64(c)).astype(F32)


def emulate_exp2_fma(x) -> np.ndarray:
    """The operations exp2_fma emits, in order, in float32. add.rm.f32 of x in [-127, 0]
    and the shifter (ulp 1 there) is exactly shifter + floor(x)."""
    x = np.maximum(np.asarray(x, F32), F32(-127.0))
    r = (F32(EXP2_SHIFTER) + np.floor(x)).astype(F32)
    f = (x - (r - F32(EXP2_SHIFTER))).astype(F32)
    p = np.full_like(f, F32(EXP2_POLY[2]))
    for c in (EXP2_POLY[1], EXP2_POLY[0], 1.0):
        p = _fma(p, f, F32(c))
    bits = p.view(np.int32).astype(np.int64) + (r.view(np.int32).astype(np.int64) << 23)
    return (bits & 0xFFFFFFFF).astype(np.uint32).view(F32)


def test_emulated_exp2_is_within_9e_5_relative_on_normal_results():
    """The Note's bound: 8.8e-5 at most for x in [-126, 8] (the error is the cubic's on
    f = x - floor(x); the exponent is added exactly; x up to 8 under a lazy max, Note
    [Lazy rescale])."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-1.0, 0.0, 1 << 20, dtype=F32),          # every f, densely
                        rng.uniform(-126.0, 8.0, 1 << 20).astype(F32),
                        np.arange(-126.0, 8.5, 0.5, dtype=F32)])
    exact = np.exp2(x.astype(np.float64))
    rel = np.abs(emulate_exp2_fma(x) - exact) / exact
    assert 8.0e-5 < rel.max() < 8.8e-5, rel.max()


def test_emulated_exp2_at_and_below_the_clamp():
    """-inf (a masked score), -127 and below give exactly 0 (p = 1 leaves no mantissa at
    exponent 0); (-127, -126) a subnormal below 2^-126, where ex2.approx.ftz gives 0; 0
    gives 1, and a rounding above 0 still about 1."""
    y = emulate_exp2_fma([-np.inf, -1000.0, -127.0, -126.5, 0.0, 1e-6])
    assert y[:3].tolist() == [0.0, 0.0, 0.0]
    assert 0.0 < y[3] < 2.0 ** -126
    assert y[4] == 1.0 and abs(y[5] - 1.0) < 1e-5


# ------------------------------------------------------------------ the kernels

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
SOFTCAP = (EXAMPLES_DIR / "softcap.attn").read_text()
SOFTCAP_D64 = SOFTCAP.replace("128]", "64]")       # a constant max (Note [Bounded score_mod])
CAUSAL_D64 = variant_source("causal", 64)
CAUSAL = CAUSAL_D64.replace("64]", "128]")


ONE_WG = tuple(SM90A_ONE_WARPGROUP.items())     # sm_90a's 64x128 tile at head dim 64


@functools.lru_cache(maxsize=None)
def built(source: str, arch: str, lower: tuple = (), tile: tuple = ()):
    """The bundle artifacts of `source` for `arch`, with options of attn-kernel-choices
    (`lower`) and attn-tile (`tile`)."""
    return build_with(source, "exp2.attn", arch, **dict(lower), **dict(tile))


def counts(ptx: str) -> tuple[int, int]:
    """(ex2.approx, add.rm.f32): exponentials on the SFU, and on the FMA pipe."""
    return len(re.findall(r"\bex2\.approx", ptx)), len(re.findall(r"\badd\.rm\.f32", ptx))


@pytest.mark.parametrize("source, arch, tile, default", [
    (SOFTCAP_D64, "sm_90a", ONE_WG, 2),   # one warpgroup, a constant max: two SFU operations per score
    (CAUSAL_D64, "sm_90a", ONE_WG, 0),
    (SOFTCAP_D64, "sm_90a", (), 0),       # three consumer warpgroups and the producer (192x96)
    (SOFTCAP, "sm_90a", (), 1),           # two and the producer (head dim 128), a score_mod
    (CAUSAL, "sm_90a", (), 0),            # the producer warpgroup's kernel without one
    (SOFTCAP_D64, "sm_80", (), 0),
    (CAUSAL_D64, "sm_80", (), 0),
])
def test_the_default_and_zero(source, arch, tile, default):
    """The default of exp2_fma: 2 of 8 in sm_90a's one-warpgroup kernels with a
    constant max (softcap), 1 of 8 in its kernels of two consumer warpgroups and the
    producer with a score_mod, else none, as measured; exp2_fma=0 has no add.rm at all,
    and the explicit default builds the default kernel."""
    art = built(source, arch, (), tile)
    assert art.manifest["specialization"]["exp2_fma"] == default
    assert built(source, arch, (("exp2_fma", default),), tile).ptx == art.ptx
    assert counts(built(source, arch, (("exp2_fma", 0),), tile).ptx)[1] == 0


@pytest.mark.parametrize("source, arch, tile", [(SOFTCAP_D64, "sm_90a", ONE_WG), (CAUSAL_D64, "sm_80", ())])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_the_last_k_of_every_8_probabilities_move_to_the_fma_pipe(source, arch, tile, k):
    """Of the per-score exponentials (all of them at k = 8), k/8 are emulated and the
    rest stay ex2.approx; the per-row ones (alpha, with a running max) stay on the SFU.
    Softcap at head dim 64 has a constant max: every ex2 is a score's (192 in the
    one-warpgroup sm_90a kernel's three copies of the step, 64 scores each)."""
    sfu_only, _ = counts(built(source, arch, (("exp2_fma", 0),), tile).ptx)
    per_row, scores = counts(built(source, arch, (("exp2_fma", 8),), tile).ptx)
    assert scores > 0 and scores % 8 == 0
    assert counts(built(source, arch, (("exp2_fma", k),), tile).ptx) == (sfu_only - scores * k // 8, scores * k // 8)
    assert per_row == sfu_only - scores
    if source is SOFTCAP_D64:
        assert (sfu_only, per_row) == (192, 0)


def _f32_hex(v: float) -> str:
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", v))[0]


def test_each_emulated_exp2_is_the_algorithm():
    """Per add.rm.f32 of the shifter: the shifter taken off again (round to nearest), the
    cubic's three FMAs with its coefficients, and the exponent moved by a shift of 23."""
    ptx = built(SOFTCAP_D64, "sm_90a", (("exp2_fma", 4),), ONE_WG).ptx
    n = counts(ptx)[1]
    assert n == 96
    assert len(re.findall(rf"add\.rn\.f32\s+%r\d+, %r\d+, {_f32_hex(-EXP2_SHIFTER)};", ptx)) == n
    c1, c2, c3 = map(_f32_hex, EXP2_POLY)
    assert len(re.findall(rf"fma\.rn\.f32\s+%r\d+, %r\d+, {c3}, {c2};", ptx)) == n
    assert len(re.findall(rf"fma\.rn\.f32\s+%r\d+, %r\d+, %r\d+, {c1};", ptx)) == n
    assert len(re.findall(r"shl\.b32\s+%r\d+, %r\d+, 23;", ptx)) == n


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
@pytest.mark.parametrize("k", [-1, 9])
def test_exp2_fma_is_checked(arch, k):
    """A value no kernel takes, refused at the option (attn-kernel-choices) on every target."""
    message = f"exp2_fma={k}: expected 0 to 8 (of every 8 scores of a row, those whose exp2 runs on the FMA pipe)"
    with pytest.raises(AttncError, match=re.escape(message)):
        built(SOFTCAP_D64, arch, (("exp2_fma", k),))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_the_option_reaches_the_manifest(arch):
    assert built(CAUSAL_D64, arch).manifest["specialization"]["exp2_fma"] == 0
    assert built(CAUSAL_D64, arch, (("exp2_fma", 3),)).manifest["specialization"]["exp2_fma"] == 3


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_softcap_example_assembles_with_half_the_exponentials_emulated(arch):
    """At its head dim 128 (on sm_90a the producer-warpgroup kernel, assembled by ptxas):
    no spills, no serialized wgmma."""
    art = built(SOFTCAP, arch, (("exp2_fma", 4),))
    log = cubin.ptx_to_cubin(art.ptx, arch, verbose=True).info_log
    usage = cubin.parse_resource_usage(log)[art.manifest["kernels"][-1]["symbol"]]
    assert not usage.spills and usage.stack_frame == 0, usage
    assert "serialized" not in log, log
