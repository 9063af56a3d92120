"""What a query tile costs beside its key blocks: one documents + causal kernel run on
documents of several lengths, its time fitted to the key blocks it visits.

    python3 bench/doc_scaling.py BUNDLES_DIR [--case sm_80:doc_causal:128] [--lengths 128,256,...]
                                 [--tags TAG,...] [--reused] [--rounds 5]

The kernel is the bench_variants bundle (or, with --tags, each tag's experiment bundle
of tools/build_exp_bundles.py); the ids are position // L for each document length L,
at bench_variants' shapes (M = N = 8192). On document-aligned tiles (Note
[Document-aligned tiles] in attnc/backend/qtiles.py) a head visits, per document of
length n, cdiv(n, block_m) tiles, tile k of them the key blocks from the document's
start to its last row: counted here on the host, exactly as the table lays them out.
With L a multiple of block_m every head has M / block_m tiles whatever L, and L only
moves the blocks (the table holds at most 5/4 of the grid's tiles, so lengths that
need more fall back to the grid and are no use here), so the least-squares fit over
those lengths

    time = a * blocks + w

says what a block costs (a) and what the launch costs beyond its blocks (w: every
tile's Q load, O store, diagonal masking and first-block ramp, the table kernel, the
launches), in the same run (--rounds rounds, every length timed once a round,
alternating order; median). w over the tiles is an upper bound on what a tile costs
beside its blocks. The case doc_only (documents without the causal bound, an experiment
bundle: tools/build_exp_bundles.py) has no diagonal to mask. A measuring tool: it
asserts nothing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import median

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import attnc_runtime  # noqa: E402
from bench_variants import M, N, SHAPES, add_tags_option, bundle_lookup, inputs, interleaved  # noqa: E402
from tail_model import table, table_size  # noqa: E402

DEFAULT_LENGTHS = "128,256,512,1024,2048,4096,8192,1000"


def visits(length: int, block_m: int, block_n: int, causal: bool = True) -> tuple[int, int] | None:
    """(tiles, key blocks) one head visits: documents of `length` (+ causal) on aligned
    tiles; None where the table cannot hold the tiles (the kernel then runs the grid)."""
    entries = table(M, length, block_m, block_n, causal)
    if len(entries) > table_size(M, block_m):
        return None
    tiles = [e for e in entries if e is not None]
    return len(tiles), sum(tiles)


def fit(rows: list[dict]) -> tuple[float, float]:
    """(a, w) of ms = a * blocks + w over the rows."""
    x = np.array([[r["blocks"], 1.0] for r in rows])
    y = np.array([r["ms"] for r in rows])
    (a, w), *_ = np.linalg.lstsq(x, y, rcond=None)
    return a, w


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bundles", type=Path)
    ap.add_argument("--case", default="sm_80:doc_causal:128")
    ap.add_argument("--lengths", default=DEFAULT_LENGTHS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reused", action="store_true", help="launch with the mask reused (launch(reuse_mask=True))")
    add_tags_option(ap)
    args = ap.parse_args(argv)
    arch, case, d = args.case.split(":")
    d = int(d)
    b, h = SHAPES[d]
    q, k, v = inputs(d)
    lengths = [int(x) for x in args.lengths.split(",")]
    tags, index = bundle_lookup(args.bundles, args.tags)
    print(torch.cuda.get_device_name())
    for tag in tags:
        bundle = attnc_runtime.load(args.bundles / index[(arch, case, d, tag)]["path"])
        spec = bundle.manifest.specialization
        block_m, block_n = spec["block_m"], spec["block_n"]
        timers, rows = {}, []
        for length in lengths:
            ids = (torch.arange(N, device="cuda", dtype=torch.int32) // length).expand(b, N).contiguous()
            bound = bundle.bind(q=q, k=k, v=v, doc=ids)
            bound.launch()          # the first launch builds the mask (or table) a reused one keeps
            timers[length] = (lambda bd=bound: bd.launch(reuse_mask=True)) if args.reused else bound.launch
        torch.cuda.synchronize()
        runs = interleaved(timers, args.rounds, 20, warmup_ms=100.0, min_ms=200.0)
        print(f"\n{arch} {case} d={d}" + (f" {tag}" if tag else "") + f"  ({block_m}x{block_n} tiles, B={b} H={h})")
        print(f"{'L':>6} {'tiles/head':>10} {'blocks/head':>11} {'ms':>8} {'ns/block':>9}  rounds")
        for length in lengths:
            counted = visits(length, block_m, block_n, causal=case != "doc_only")
            ms = median(runs[length])
            if counted is None:
                print(f"{length:>6} {'(the grid: too many tiles for the table)':>22} {ms:>8.4f}")
                continue
            tiles, blocks = counted
            rows.append(dict(length=length, tiles=tiles * b * h, blocks=blocks * b * h, ms=ms))
            print(f"{length:>6} {tiles:>10} {blocks:>11} {ms:>8.4f} {ms * 1e6 / (blocks * b * h):>9.2f}  "
                  + " ".join(f"{t:.4f}" for t in runs[length]))
        aligned = [r for r in rows if r["length"] % block_m == 0]
        if len({r["blocks"] for r in aligned}) < 2:
            print(f"no fit: fewer than two lengths that are multiples of {block_m} with different blocks")
            continue
        a, w = fit(aligned)
        tiles = aligned[0]["tiles"]
        print(f"fit over L = {', '.join(str(r['length']) for r in aligned)}: {a * 1e6:.2f} ns a block, "
              f"{w * 1e3:.1f} us beside them ({w * 1e6 / tiles:.2f} ns = {w / a / tiles:.2f} blocks "
              f"a tile over {tiles} tiles); residuals (us): "
              + " ".join(f"{(r['ms'] - a * r['blocks'] - w) * 1e3:+.1f}" for r in aligned))
    return 0


if __name__ == "__main__":
    sys.exit(main())
