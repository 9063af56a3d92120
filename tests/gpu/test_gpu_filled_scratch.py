"""Note [Filled scratch] (runtime/attnc_runtime/kernel.py) on a real GPU: the runtime does
not zero the scratch that a mask kernel fills, so the mask kernels must write every byte
of it that a later kernel reads. With the docs_sink example bundles (the tile table and
the block map on sm_80, the block map on sm_90a), the shapes and two id kinds of
test_gpu_aligned_tiles.py (long runs: table tiles; unsorted: the grid):

* launched over scratch set to 0x00 bytes and over scratch set to 0xFF bytes
  (ATTNC_POISON_SCRATCH=1), the outputs are equal to the bit;
* the poison reaches the attention kernel: with the block map's kernel left out, the
  0xFF bytes are read as the map, and the output changes (unsorted ids). A bundle with no
  map (Note [Ranges from the runs], attnc/backend/run_ranges.py) reads only the tile
  table, whose 0xFF entries would point its CTAs at row -1: there this test only shows
  that the poison reaches the table (the table's kernel and the attention kernel left
  out); that the kernel writes every entry the attention kernel reads is
  test_gpu_aligned_tiles.py's table check, run over the poison.

The other GPU suites run under ATTNC_POISON_SCRATCH=1 too (results/sm80_h200.md, "GPU
test suites"), against the reference.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu_support import BUNDLES, document_ids, entries, skip_reason

pytestmark = pytest.mark.gpu

SHAPES = [(2, 8, 2000, 2000), (1, 2, 9000, 9000), (2, 4, 2000, 1500), (2, 4, 1500, 2000)]   # B, H, M, N
KINDS = ("long", "unsorted")


def docs_sink_entries():
    found = [e for e in entries("examples") if e.get("example") == "docs_sink"]
    return [pytest.param(e, id=e["name"], marks=pytest.mark.xdist_group(e["name"]))
            for e in found] or [pytest.param({"name": "no-bundles"}, id="no-bundles")]


def _case(entry, kind: str, shape):
    import torch
    d_qk, d_v = entry["head_dim"]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[entry["dtype"]]
    B, H, M, N = shape
    ids = document_ids(kind, np.random.default_rng(KINDS.index(kind)), B, N)
    gen = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (torch.randn(B, H, n, d, generator=gen, device="cuda", dtype=dtype)
               for n, d in ((M, d_qk), (N, d_qk), (N, d_v)))
    return dict(q=q, k=k, v=v, doc=torch.tensor(ids, dtype=torch.int32, device="cuda"),
                sinks=torch.rand(H, generator=gen, device="cuda"))


def _launch_over(kernel, args: dict, fill: int, monkeypatch, leave_out: tuple[str, ...] = (), bound=None):
    """o of a launch whose filled scratch holds `fill` bytes before the mask kernels run
    (0xFF through ATTNC_POISON_SCRATCH); `leave_out`: kernels not launched; `bound`: the
    binding to launch (default: a new one of `args`)."""
    import torch

    from attnc_runtime import driver
    monkeypatch.setenv("ATTNC_POISON_SCRATCH", "1" if fill == 0xFF else "0")
    bound = bound or kernel.bind(**args)
    for name in kernel.manifest.mask_scratch:
        bound._scratch[name].fill_(0 if fill == 0 else -1)      # what the poison sets, too
    launch = driver.launch
    if leave_out:
        bound.launch()                                          # loads the functions
        names = [k.name for k in kernel.manifest.kernels]
        skipped = [bound._functions[names.index(name)] for name in leave_out]
        monkeypatch.setattr(driver, "launch",
                            lambda func, *rest: None if any(func is f for f in skipped) else launch(func, *rest))
    try:
        bound.launch()
    finally:
        monkeypatch.setattr(driver, "launch", launch)
    torch.cuda.synchronize()
    return bound.outputs["o"]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}M{}N{}".format(*s))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("entry", docs_sink_entries())
def test_outputs_do_not_depend_on_the_scratch_before_the_launch(gpu, entry, kind, shape, monkeypatch):
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    import torch

    import attnc_runtime
    kernel = attnc_runtime.load(BUNDLES / entry["path"])
    assert kernel.manifest.mask_kernels, "a docs_sink bundle builds its block map"
    args = _case(entry, kind, shape)
    zeroed = _launch_over(kernel, args, 0x00, monkeypatch).clone()
    poisoned = _launch_over(kernel, args, 0xFF, monkeypatch)
    assert torch.equal(poisoned, zeroed), f"max |diff| {(poisoned.float() - zeroed.float()).abs().max().item()}"


@pytest.mark.parametrize("entry", docs_sink_entries())
def test_the_poison_reaches_the_attention_kernel(gpu, entry, monkeypatch):
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    import torch

    import attnc_runtime
    kernel = attnc_runtime.load(BUNDLES / entry["path"])
    # Unsorted ids: the grid's tiles, whose keys start at 0. (With long sorted runs the
    # table's tiles start their keys at their document's start, and a causal documents
    # mask then keeps the same keys whatever the map says.)
    args = _case(entry, "unsorted", SHAPES[0])
    if "blockmap" not in [k.name for k in kernel.manifest.kernels]:
        bound = kernel.bind(**args)
        _launch_over(kernel, args, 0xFF, monkeypatch, leave_out=("qtiles", "attn_fwd"), bound=bound)
        table = bound._scratch["qtiles"]
        assert table.numel() > 0 and bool((table.view(-1).view(torch.uint8) == 0xFF).all())
        return
    built = _launch_over(kernel, args, 0xFF, monkeypatch).clone()
    unbuilt = _launch_over(kernel, args, 0xFF, monkeypatch, leave_out=("blockmap",))
    # 0xFF reads as a class that is neither SKIP nor FULL, with both conjunct groups proved
    # to hold: the keys of other documents are kept.
    assert (unbuilt.float() - built.float()).abs().max().item() > 0.1
