"""bench/cta_timeline.py on the CPU (Note [CTA time line]): the stamps it patches into a
real sm_80 kernel's PTX assemble and sit where the Note says, and its analysis recovers
a known schedule: the per-block cost and intercept, the prologue and epilogue, the slots
of an SM, the gaps between CTAs and the idle time after an SM's last start."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench")]

import cta_timeline as tl                   # noqa: E402
from attnc.backend import cubin             # noqa: E402
from attnc.testing import build_with, kernel_ptx, variant_source    # noqa: E402

CAUSAL = variant_source("causal", 128)


def test_the_patched_kernel_assembles_with_its_stamps():
    art = build_with(CAUSAL, "timeline.attn", "sm_80")
    symbol = art.manifest["kernels"][-1]["symbol"]
    ptx = tl.patch_ptx(art.ptx, symbol, 4096)
    assert f".global .align 16 .b8 {tl.SYMBOL}[{tl.RECORD * 4096}];" in ptx
    body = kernel_ptx(ptx, symbol)
    rets = len(re.findall(r"\bret;", kernel_ptx(art.ptx, symbol)))
    assert body.count("%globaltimer;") == 1 + rets                      # entry, each ret
    assert body.count("red.global.min.u32") == 1 and body.count("red.global.max.u32") == 1
    # the first stamp follows the text's first wait + barrier, the last its last
    waits = [m.end() for m in re.finditer(r"cp\.async\.wait_group[^;]*;\s*bar\.sync[^;]*;", body)]
    assert body.index("red.global.min.u32") > waits[0] and body.index("red.global.max.u32") > waits[-1]
    cubin.ptx_to_cubin(ptx, "sm_80", verbose=False)        # ptxas takes it


def test_the_timer_probe_assembles():
    cubin.ptx_to_cubin(tl.PROBE_PTX, "sm_80", verbose=False)


def test_a_predicated_ret_is_refused():
    ptx = ".visible .entry k(\n)\n{\n\t.reg .pred %p<2>;\n\tbar.sync 0;\n\t@%p1 ret;\n\tret;\n}\n"
    with pytest.raises(SystemExit, match="predicated ret"):
        tl.patch_ptx(ptx, "k", 1)


def schedule(blocks, slots=2, sms=4, gap=300, prologue=500, epilogue=400, per_block=2000, extra=700):
    """Stamps of CTAs taken in order by the first free slot of SM (cta % sms)."""
    free = {s: [0] * slots for s in range(sms)}
    out = np.zeros((len(blocks), 6), dtype=np.int64)
    for c, n in enumerate(blocks):
        s = c % sms
        k = int(np.argmin(free[s]))
        t0 = free[s][k] + gap
        body = extra + per_block * n
        t3 = t0 + prologue + body + epilogue
        out[c] = [t0, t0 + prologue, t0 + prologue + body, t3, s, c]
        free[s][k] = t3
    return out


def test_the_analysis_recovers_a_known_schedule():
    rng = np.random.default_rng(0)
    blocks = rng.integers(1, 17, 400)
    r = tl.analyse(schedule(blocks), blocks)
    assert r["slots_per_sm"] == 2 and r["sms"] == 4
    assert r["steps_per_block_us"] == pytest.approx(2.0) and r["steps_intercept_us"] == pytest.approx(0.7)
    assert r["prologue_us"] == pytest.approx(0.5) and r["epilogue_us"] == pytest.approx(0.4)
    # busy + gaps + idle after the last start (+ nothing before the first) add up to 1
    assert r["busy_fraction"] + r["gap_fraction"] + r["idle_after_finish_fraction"] == pytest.approx(1.0, abs=2e-3)
    no_gap = tl.analyse(schedule(blocks, gap=0), blocks)
    assert no_gap["gap_fraction"] == 0.0 and r["gap_fraction"] > 0.0


def test_an_end_and_a_start_at_the_same_tick_are_one_slot():
    """Two CTAs back to back on one slot of one SM: one slot, no gap."""
    stamps = np.array([[0, 10, 90, 100, 0, 0], [100, 110, 250, 260, 0, 1]], dtype=np.int64)
    r = tl.analyse(stamps, np.array([1, 2]))
    assert r["slots_per_sm"] == 1 and r["gap_fraction"] == 0.0 and r["busy_fraction"] == pytest.approx(1.0)


def test_block_counts_follow_the_grid_order():
    """Causal on the plain grid (query blocks from the last on x), documents on the table
    (heads on x, entries from the last on y); other layouts are refused."""
    spec = {"block_m": 128, "block_n": 64, "heads_first": False, "q_blocks_per_cta": 1, "aligned_tiles": False}
    b = tl.blocks_of("causal", (4, 2, 1), spec, 512)
    assert b.tolist() == [8, 6, 4, 2, 8, 6, 4, 2]
    docs = dict(spec, heads_first=True, aligned_tiles=True)
    d = tl.blocks_of("doc_causal", (2, 10, 1), docs, 1200)
    # documents [0, 1000) and [1000, 1200): tiles of 2, 4, ..., 14, 16 blocks, then 2, 4
    tiles = [2, 4, 6, 8, 10, 12, 14, 16, 2, 4]
    assert d.tolist() == [n for t in reversed(tiles) for n in (t, t)]
    # Note [Tiles last]: heads on x, the batch on y, the entries from the last on z
    last = tl.blocks_of("doc_causal", (2, 3, 10), dict(docs, heads_first=False, tiles_last=True), 1200)
    assert last.tolist() == [n for t in reversed(tiles) for n in [t] * 6]
    # The table the GPU wrote, per batch (Note [Longest tiles last]: the last one reordered).
    table = np.zeros((2, 10, 4), dtype=np.int32)
    table[:, :, 0] = 1200                   # past the last tile: no block
    table[0, :2] = [[0, 128, 0, 1000], [128, 256, 0, 1000]]
    table[1, :2] = [[128, 256, 0, 1000], [0, 128, 0, 1000]]
    by_table = tl.blocks_of("doc_causal", (2, 10, 2), docs, 1200, table)
    assert by_table.tolist()[16:20] == [4, 4, 2, 2] and by_table.tolist()[36:] == [2, 2, 4, 4]
    assert sum(by_table[:16]) == 0 and sum(by_table[20:36]) == 0
    with pytest.raises(SystemExit, match="aligned tile table"):
        tl.blocks_of("doc_causal", (2, 10, 1), spec, 1200)
    with pytest.raises(SystemExit, match="one query block per CTA"):
        tl.blocks_of("causal", (4, 2, 1), dict(spec, q_blocks_per_cta=2), 512)
