"""A real sm_90a kernel's PTX with one protocol step removed must be reported by the
emulator, not hang it: mha (head dim 128, a producer warpgroup feeding a K/V ring of
mbarriers) without the consumers' first release of a K/V slot."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import attnc
from attnc_sim import SimError
from attnc_sim.device import SimKernel, numpy_dtype

MHA = Path(__file__).resolve().parents[2] / "examples" / "mha.attn"


def _inputs(bundle, m, n, rng):
    return {t.name: rng.standard_normal((1, 2, m if t.role == "q" else n, 128)).astype(np.float32)
            .astype(numpy_dtype(t.dtype)) for t in bundle.manifest.inputs}


def test_missing_kv_release_is_a_deadlock_report():
    bundle = attnc.compile(MHA, arch="sm_90a").bundle
    ptx = bundle.images["ptx"]
    ptx = ptx.decode() if isinstance(ptx, (bytes, bytearray)) else ptx
    arrive = re.search(r"^.*mbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\];\n", ptx, re.M)
    assert arrive is not None
    planted = ptx[:arrive.start()] + ptx[arrive.end():]
    rng = np.random.default_rng(0)
    # enough keys that the ring wraps: the producer waits for the slot never released
    kernel = SimKernel(bundle, ptx=planted)
    with pytest.raises(SimError, match=r"deadlock in CTA .*every live warp is waiting|deadlock: .*waits for mbarrier"):
        kernel(**_inputs(bundle, 64, 512, rng), ctas=[(0, 0, 0)])


def test_unplanted_kernel_runs_clean():
    bundle = attnc.compile(MHA, arch="sm_90a").bundle
    kernel = SimKernel(bundle)
    kernel(**_inputs(bundle, 64, 512, np.random.default_rng(0)), ctas=[(0, 0, 0)])
    assert kernel.last_reports == []
