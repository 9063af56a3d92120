"""A real sm_90a kernel's PTX with one protocol step removed must be reported by the
emulator, not hang it: mha (head dim 128, a producer warpgroup feeding a K/V ring of
mbarriers) without the consumers' first release of a K/V slot."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from attnc.testing import ptx_bundle
from attnc_sim import SimError
from attnc_sim.device import SimKernel, numpy_dtype

MHA = Path(__file__).resolve().parents[2] / "examples" / "mha.attn"


def _inputs(bundle, m, n, rng):
    return {t.name: rng.standard_normal((1, 2, m if t.role == "q" else n, 128)).astype(np.float32)
            .astype(numpy_dtype(t.dtype)) for t in bundle.manifest.inputs}


def test_missing_kv_release_is_a_deadlock_report():
    bundle = ptx_bundle(MHA, arch="sm_90a")
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
    bundle = ptx_bundle(MHA, arch="sm_90a")
    kernel = SimKernel(bundle)
    kernel(**_inputs(bundle, 64, 512, np.random.default_rng(0)), ctas=[(0, 0, 0)])
    assert kernel.last_reports == []


def _sm80_mha():
    bundle = ptx_bundle(MHA, arch="sm_80")
    ptx = bundle.images["ptx"]
    return bundle, ptx.decode() if isinstance(ptx, (bytes, bytearray)) else ptx


def test_weakened_cp_async_wait_is_a_read_before_complete():
    """mha sm_80 with its first cp.async.wait_group allowing one more group in flight: a warp
    reads K/V shared memory (ldmatrix) that a cp.async still writes."""
    bundle, ptx = _sm80_mha()
    wait = re.search(r"cp\.async\.wait_group\s+(\d+);", ptx)
    planted = ptx[:wait.start()] + f"cp.async.wait_group {int(wait.group(1)) + 1};" + ptx[wait.end():]
    kernel = SimKernel(bundle, ptx=planted, raise_reports=False, early=0.0)
    kernel(**_inputs(bundle, 64, 200, np.random.default_rng(0)), ctas=[(0, 0, 0)])
    first = kernel.last_reports[0]
    assert first.kind == "read-before-complete" and re.fullmatch(r"CTA \(0, 0, 0\) warp [0-3]", first.warp)
    line = int(re.match(r"PTX line (\d+): ", first.where).group(1))
    wait_line = ptx[:wait.start()].count("\n") + 1
    assert line > wait_line and re.search(r"ldmatrix|ld\.shared", planted.splitlines()[line - 1])
    assert "before the asynchronous copy writing it completed" in first.message
