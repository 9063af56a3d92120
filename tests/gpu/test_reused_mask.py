"""A block map built once and read by later launches (Note [Reused masks] in
runtime/attnc_runtime/kernel.py), on a real GPU, with the docs_sink example bundles.

Up to 8 documents of random lengths per batch (sorted ids in [0, 8): the map has SKIP,
FULL and MIXED tiles) at M = N = 777: a second binding with other q, k, v and `mask_from` the first, and
the first again with `reuse_mask`, must give the outputs of a full launch to the bit.
That they do read the kept map and build none is shown by clearing it: the same launches
then lose every key (o = 0: the sink alone), and a full launch of the owner restores them.
A bundle without a map (Note [Ranges from the runs] in attnc/backend/run_ranges.py) keeps
its tile table instead, which is cleared by making every entry one past the last tile:
then no CTA writes O.
"""
from __future__ import annotations

import pytest

from gpu_support import BUNDLES, entries, skip_reason

pytestmark = pytest.mark.gpu

M = N = 777


def docs_sink_entries():
    found = [e for e in entries("examples") if e.get("example") == "docs_sink"]
    return [pytest.param(e, id=e["name"], marks=pytest.mark.xdist_group(e["name"]))
            for e in found] or [pytest.param({"name": "no-bundles"}, id="no-bundles")]


def docs_sink_case(entry, seed: int):
    """(the kernel, doc, sinks, a function giving new q, k, v): up to 8 documents of random
    lengths per batch, at M = N; skips where the bundle is missing or was refused."""
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    import torch

    import attnc_runtime
    kernel = attnc_runtime.load(BUNDLES / entry["path"])
    d_qk, d_v = entry["head_dim"]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[entry["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    doc = torch.sort(torch.randint(0, 8, (2, N), generator=gen, device="cuda"), dim=1).values.to(torch.int32)
    sinks = torch.rand(8, generator=gen, device="cuda")

    def qkv():
        return [torch.randn(2, 8, n, d, generator=gen, device="cuda", dtype=dtype)
                for n, d in ((M, d_qk), (N, d_qk), (N, d_v))]
    return kernel, doc, sinks, qkv


@pytest.mark.parametrize("entry", docs_sink_entries())
def test_a_reused_map_gives_the_outputs_of_a_full_launch(gpu, entry):
    import torch

    kernel, doc, sinks, qkv = docs_sink_case(entry, 7)

    first_inputs, second_inputs = qkv(), qkv()
    first = kernel.bind(*first_inputs, doc=doc, sinks=sinks)
    second = kernel.bind(*second_inputs, doc=doc, sinks=sinks, mask_from=first)
    first.launch()
    second.launch()
    want_first = kernel(*first_inputs, doc=doc, sinks=sinks)["o"]
    want_second = kernel(*second_inputs, doc=doc, sinks=sinks)["o"]
    assert torch.equal(second.outputs["o"], want_second)
    first.outputs["o"].zero_()
    first.launch(reuse_mask=True)
    assert torch.equal(first.outputs["o"], want_first)

    if "blockmap" in first._scratch:
        first._scratch["blockmap"].zero_()      # every tile SKIP: nothing is kept
    else:                                       # no tile: no CTA writes O
        table = first._scratch["qtiles"].view(torch.int32).view(-1, 4)
        table[:] = torch.tensor([M, M, 0, -1], dtype=torch.int32, device=table.device)
    first.outputs["o"].zero_()
    second.outputs["o"].zero_()
    second.launch()
    first.launch(reuse_mask=True)
    torch.cuda.synchronize()
    assert not second.outputs["o"].any() and not first.outputs["o"].any()
    first.launch()                          # builds the map (or the table) again
    second.launch()
    assert torch.equal(first.outputs["o"], want_first) and torch.equal(second.outputs["o"], want_second)


@pytest.mark.parametrize("entry", docs_sink_entries())
def test_the_legacy_and_the_default_stream_share_a_map_and_no_rows_launch_nothing(gpu, entry):
    """Streams 0 and 1 (the default and the legacy stream) order their work both ways: a map
    built on one is reused on the other, and scratch written again there, to the bit. With
    B = 0 the documents' doc param is empty and no kernel runs: an empty output, no error."""
    import torch

    kernel, doc, sinks, qkv = docs_sink_case(entry, 11)
    q, k, v = qkv()
    want = kernel(q, k, v, doc=doc, sinks=sinks)["o"]
    bound = kernel.bind(q, k, v, doc=doc, sinks=sinks)
    bound.launch(stream=0)
    bound.outputs["o"].zero_()
    bound.launch(reuse_mask=True, stream=1)
    torch.cuda.synchronize()
    assert torch.equal(bound.outputs["o"], want)
    bound.launch(stream=1)
    torch.cuda.synchronize()
    assert torch.equal(bound.outputs["o"], want)

    empty = kernel(q[:0], k[:0], v[:0], doc=doc[:0], sinks=sinks)["o"]
    torch.cuda.synchronize()
    assert empty.shape == (0, 8, M, v.shape[-1])
