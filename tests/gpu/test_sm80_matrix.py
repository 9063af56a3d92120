"""The sm_80 correctness matrix, on a real GPU, against attnc.reference.

fp16 and bf16 x head dims 64/96/128/256 x {no mask, causal, bottom-right causal}
(one bundle each) x shapes {M = N = 1, 17, 128, 1000, 4096; M = 1, N = 4096;
M = 333, N = 2048} x {MHA, GQA 4:1, MQA}: o and lse within fp16/bf16 tolerances.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu_support import BUNDLES, bundle_index

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (17, 17), (128, 128), (1000, 1000), (4096, 4096), (1, 4096), (333, 2048)]
HEADS = {"mha": (2, 2), "gqa4": (8, 2), "mqa": (4, 1)}
# |o| <= max |v| ~ 4 for normal inputs; bf16 has 8 mantissa bits, fp16 11.
ATOL = {"bf16": 3e-2, "f16": 4e-3}
LSE_ATOL = 2e-3

MATRIX = [e for e in bundle_index() if e.get("suite") == "sm80_matrix"]


def _cases():
    for entry in MATRIX or [{"name": "no-bundles"}]:
        for m, n in SHAPES:
            for heads in HEADS:
                yield pytest.param(entry, m, n, heads, id=f"{entry['name']}-M{m}-N{n}-{heads}")


@pytest.mark.parametrize("entry,m,n,heads", list(_cases()))
def test_sm80_matches_reference(gpu, entry, m, n, heads):
    import torch
    import attnc
    import attnc_runtime

    if entry["name"] == "no-bundles":
        pytest.skip(f"no sm80_matrix bundles in {BUNDLES}")
    h, hkv = HEADS[heads]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[entry["dtype"]]
    d = entry["head_dim"]
    gen = torch.Generator(device="cpu").manual_seed(m * 7919 + n * 31 + h)
    q = torch.randn(1, h, m, d, generator=gen).to(dtype).cuda()
    k = torch.randn(1, hkv, n, d, generator=gen).to(dtype).cuda()
    v = torch.randn(1, hkv, n, d, generator=gen).to(dtype).cuda()

    kernel = attnc_runtime.load(BUNDLES / entry["path"])
    out = kernel(q=q, k=k, v=v)
    torch.cuda.synchronize()

    ref = attnc.reference(kernel.manifest.source, q=q.float().cpu().numpy(),
                          k=k.float().cpu().numpy(), v=v.float().cpu().numpy())
    o = out["o"].float().cpu().numpy()
    assert np.isfinite(o).all(), "NaN or inf in o"
    err = np.abs(o - ref["o"]).max()
    assert err <= ATOL[entry["dtype"]], f"max |o - ref| = {err:.3e}"
    if "lse" in ref:
        lse = out["lse"].cpu().numpy()
        finite = np.isfinite(ref["lse"])
        assert (np.isneginf(lse) == ~finite).all(), "empty rows must give lse = -inf"
        lse_err = np.abs(lse[finite] - ref["lse"][finite]).max(initial=0.0)
        assert lse_err <= LSE_ATOL, f"max |lse - ref| = {lse_err:.3e}"
