"""Document-aligned query tiles (Note [Document-aligned tiles], attnc/backend/qtiles.py) on
a real GPU, with the docs_sink example bundles.

For document ids of several kinds (two batches with ids of their own where B = 2), at
M = N = 2000; at M = N = 9000 (a table kernel's thread walks two trips of rows); at
M = 2000 > N = 1500 (the rows past N read the last id: bounds-safe reads) and at
M = 1500 < N = 2000:

* the outputs against a float32 reference in torch (documents mask, sink in the row sum);
* in a bundle with a tile table, the table the GPU wrote against the one this file
  derives from the ids: a tile at each run's start and every block_m rows after it, key0 the
  run's start and key_end its end, (M, M, 0, -1) past the last tile; the fixed grid (key_end
  -1, key0 the start of row0's run where the ids are sorted, else 0) where the ids are not
  sorted or their runs need more tiles than the table holds; in
  the last batch, with the manifest's tail_per_sm, its first R tiles in order of row_end -
  key0 (Note [Longest tiles last]) where the heads-first grid runs, not the small one.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from gpu_support import BUNDLES, document_ids, entries, skip_reason

pytestmark = pytest.mark.gpu

SHAPES = [(2, 8, 2000, 2000), (1, 2, 9000, 9000), (2, 4, 2000, 1500), (2, 4, 1500, 2000),   # B, H, M, N
          (2, 4, 1, 2000)]
SPARE_NUM, SPARE_DEN = 5, 4             # qtiles.py
TABLE_THREADS = 1024                    # qtiles.THREADS: at most one moved entry a thread


KINDS = ("long", "short", "unsorted", "one", "extreme")


def row_ids(ids: np.ndarray, M: int) -> np.ndarray:
    """The ids rows 0 .. M-1 read: doc[b, min(i, N - 1)] (bounds-safe reads)."""
    return ids[..., np.minimum(np.arange(M), ids.shape[-1] - 1)]


def expected_table(ids: np.ndarray, block_m: int, M: int) -> np.ndarray:
    """The tile table of one batch's ids (rows of row0, row_end, key0, key_end)."""
    ids = row_ids(ids, M)
    tiles = SPARE_NUM * -(-M // (SPARE_DEN * block_m))
    rows, run, run_of = [], 0, []
    for i in range(M):
        if i == 0 or ids[i] != ids[i - 1]:
            run = i
        run_of.append(run)
        if (i - run) % block_m == 0:
            rows.append([i, 0, run, 0])
    is_sorted = bool(np.all(np.diff(ids[:M]) >= 0))
    ok = is_sorted and len(rows) <= tiles
    if not ok:      # the grid; key0 the start of row0's run where the ids are sorted
        rows = [[row, 0, run_of[row] if is_sorted else 0, -1] for row in range(0, M, block_m)]
    for k, row in enumerate(rows):
        row[1] = rows[k + 1][0] if k + 1 < len(rows) else M
    if ok:
        for row in rows:        # the run's end: the row_end of its last tile
            row[3] = max(r[1] for r in rows if r[2] == row[2])
    rows += [[M, M, 0, -1]] * (tiles - len(rows))
    return np.array(rows, dtype=np.int32)


def longest_last(rows: np.ndarray, count: int) -> np.ndarray:
    """`rows` (a table) with its first `count` entries in the order Note [Longest tiles
    last] gives them: the CTAs take the entries from the last to the first, so the
    longest (row_end - key0) goes to the highest index; equal ones keep their order."""
    weight = rows[:count, 1] - rows[:count, 2]
    started = sorted(range(count), key=lambda i: (-weight[i], -i))     # the k-th to start
    out = rows.copy()
    for k, i in enumerate(started):
        out[count - 1 - k] = rows[i]
    return out


def last_batch_table(want: np.ndarray, got: np.ndarray, per_sm: int, heads: int, sms: int) -> np.ndarray:
    """The last batch's expected table: `want` with its first R tiles reordered, R =
    min(tiles, cdiv(per_sm * %nsmid, H), 1024). %nsmid is at least the SM count (SM ids
    need not be contiguous), so every R from that count's up to the bound is allowed;
    the one `got` matches, else the smallest (for the assertion's message)."""
    tiles = int(np.sum(want[:, 0] < want[-1, 1])) if want[0, 3] != -1 else 0      # aligned tiles only
    top = min(tiles, TABLE_THREADS)
    low = min(top, -(-per_sm * sms // heads))
    options = [longest_last(want, r) for r in range(low, top + 1)] or [want]
    return next((o for o in options if np.array_equal(o, got)), options[0])


def _reference(q, k, v, doc, sinks):
    import torch
    M, N = q.shape[2], k.shape[2]
    scale = q.shape[-1] ** -0.5
    s = torch.einsum("bhmd,bhnd->bhmn", q.float(), k.float()) * scale
    rows = doc[:, torch.arange(M, device=doc.device).clamp(max=N - 1)]
    keep = (rows[:, None, :, None] == doc[:, None, None, :]) & torch.ones(M, N, dtype=torch.bool,
                                                                          device=q.device).tril()
    s = s.masked_fill(~keep, float("-inf"))
    sink = sinks.float()[None, :, None, None].expand(s.shape[0], -1, M, 1)
    p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :N]
    return torch.einsum("bhmn,bhnd->bhmd", p, v.float())


def docs_sink_entries():
    found = [e for e in entries("examples") if e.get("example") == "docs_sink"]
    return [pytest.param(e, id=e["name"], marks=pytest.mark.xdist_group(e["name"]))
            for e in found] or [pytest.param({"name": "no-bundles"}, id="no-bundles")]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}M{}N{}".format(*s))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("entry", docs_sink_entries())
def test_documents_of_every_kind(gpu, entry, kind, shape):
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    import torch

    import attnc_runtime
    kernel = attnc_runtime.load(BUNDLES / entry["path"])
    manifest = json.loads((BUNDLES / entry["path"] / "manifest.json").read_text())
    d_qk, d_v = entry["head_dim"]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[entry["dtype"]]
    B, H, M, N = shape
    rng = np.random.default_rng(KINDS.index(kind))
    ids = document_ids(kind, rng, B, N)
    doc = torch.tensor(ids, dtype=torch.int32, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(3)
    sinks = torch.rand(H, generator=gen, device="cuda")
    q, k, v = (torch.randn(B, H, n, d, generator=gen, device="cuda", dtype=dtype)
               for n, d in ((M, d_qk), (N, d_qk), (N, d_v)))
    bound = kernel.bind(q, k, v, doc=doc, sinks=sinks)
    bound.launch()
    torch.cuda.synchronize()
    want = _reference(q, k, v, doc, sinks)
    err = (bound.outputs["o"].float() - want).abs().max().item()
    assert err < 2e-2, f"max |o - reference| = {err}"

    if manifest["specialization"].get("aligned_tiles"):
        block_m = manifest["specialization"]["block_m"]
        table = bound._scratch["qtiles"].view(torch.int32).reshape(B, -1, 4).cpu().numpy()
        per_sm = manifest["specialization"].get("tail_per_sm", 0)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        small = manifest["kernels"][-1].get("small_grid")      # Note [Small grids]: no reorder under it
        if small and table.shape[1] * H * B <= small["up_to_ctas_per_sm"] * sms:
            per_sm = 0
        for b in range(B):
            want = expected_table(ids[b], block_m, M)
            if b == B - 1 and per_sm:
                want = last_batch_table(want, table[b], per_sm, H, sms)
            assert np.array_equal(table[b], want), f"batch {b}"


@pytest.mark.parametrize("entry", docs_sink_entries())
def test_the_last_batch_starts_its_longest_tiles_first(gpu, entry):
    """Note [Longest tiles last] where it reorders a part of the table, on the heads-first
    grid (not the small one: B = 2, H = 32, M = N = 8192, documents of 1000, 5120 CTAs or
    more): the first batch's table as found, the last one's with its first R tiles
    reordered (R from cdiv(tail_per_sm * SMs, 32) = 17 on 132 SMs, below its 66 or 131
    tiles), and the output of two heads of the last batch against the reference."""
    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    manifest = json.loads((BUNDLES / entry["path"] / "manifest.json").read_text())
    per_sm = manifest["specialization"].get("tail_per_sm", 0)
    if not per_sm:
        pytest.skip("no table reordered in this bundle (tail_per_sm 0)")
    import torch

    import attnc_runtime
    B, H, M = 2, 32, 8192
    d_qk, d_v = entry["head_dim"]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[entry["dtype"]]
    ids = np.broadcast_to(np.arange(M, dtype=np.int32) // 1000, (B, M)).copy()
    doc = torch.tensor(ids, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(5)
    sinks = torch.rand(H, generator=gen, device="cuda")
    q, k, v = (torch.randn(B, H, M, d, generator=gen, device="cuda", dtype=dtype) for d in (d_qk, d_qk, d_v))
    bound = attnc_runtime.load(BUNDLES / entry["path"]).bind(q, k, v, doc=doc, sinks=sinks)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert bound.plan.symbols[-1] == manifest["kernels"][-1]["symbol"], "the small grid ran"
    bound.launch()
    torch.cuda.synchronize()
    table = bound._scratch["qtiles"].view(torch.int32).reshape(B, -1, 4).cpu().numpy()
    block_m = manifest["specialization"]["block_m"]
    first, last = (expected_table(ids[b], block_m, M) for b in range(B))
    assert np.array_equal(table[0], first)
    tiles = int(np.sum(last[:, 0] < M))
    assert -(-per_sm * sms // H) < tiles and not np.array_equal(table[1], last)
    assert np.array_equal(table[1], last_batch_table(last, table[1], per_sm, H, sms))
    heads = [0, H - 1]
    want = _reference(q[1:, heads], k[1:, heads], v[1:, heads], doc[1:], sinks[heads])
    err = (bound.outputs["o"][1:, heads].float() - want).abs().max().item()
    assert err < 2e-2, f"max |o - reference| = {err}"
