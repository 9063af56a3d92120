"""A list-scheduling model of the documents + causal grid: how long its tail is in each
order of the tile table (Notes [Longest tiles last] and [Document-aligned tiles] in
attnc/backend/qtiles.py). CPU only; it measures nothing on a GPU.

    python3 bench/tail_model.py [--seq 8192] [--doc 1000] [--block-m 128] [--block-n 64]
                                [--heads 16] [--batch 4] [--slots 264] [--fixed 1.33]

The slots (SMs x the CTAs an SM holds) take the CTAs in launch order, each the moment one
is free, as the hardware's CTA scheduler does; a CTA takes `fixed` + its key blocks, in
units of one key block's time (cta_timeline.py's prologue and epilogue at head dim 128,
about 1.33 blocks: results/sm80_h200.md, "Documents at head dim 128: where the time
goes"), a CTA past the table's last tile 0.05. The tail is the
makespan over the work's bound (the work spread evenly over the slots), in percent. The
orders: the table's (heads first: every head of an entry, the entries from the last to
the first, batch by batch), the same with the last batch's first R entries longest first
(R = cdiv(tail_waves * slots, H), as the table kernel reorders them),
and longest first over the whole grid.
"""
from __future__ import annotations

import argparse
import heapq
import sys

SPARE_NUM, SPARE_DEN = 5, 4         # attnc/backend/qtiles.py: the table's size
EMPTY = 0.05                        # a CTA past the last tile returns at once


def table_size(seq: int, block_m: int) -> int:
    """The entries of one batch's table: SPARE_NUM * cdiv(seq, SPARE_DEN * block_m)."""
    return SPARE_NUM * -(-seq // (SPARE_DEN * block_m))


def table(seq: int, doc: int, block_m: int, block_n: int, causal: bool = True) -> list[int | None]:
    """The key blocks of each entry of one batch's table (None past the last tile), in
    the order the table kernel finds the tiles: documents of `doc` positions + causal (or,
    without `causal`, a tile's keys the whole document)."""
    blocks: list[int | None] = []
    for start in range(0, seq, doc):
        end = min(start + doc, seq)
        blocks += [-(-((min(row + block_m, end) if causal else end) - start) // block_n)
                   for row in range(start, end, block_m)]
    return blocks + [None] * (table_size(seq, block_m) - len(blocks))


def longest_last(entries: list, count: int) -> list:
    """The first `count` entries as the table kernel leaves them: the longest at the
    highest index (started first, the CTAs taking the entries from the last); equal ones
    in their order."""
    started = sorted(range(count), key=lambda i: (-entries[i], -i))
    head = [None] * count
    for k, i in enumerate(started):
        head[count - 1 - k] = entries[i]
    return head + entries[count:]


def heads_first(entries_by_batch: list[list], heads: int, fixed: float) -> list[float]:
    """Every CTA's time in launch order on the heads-first grid (H, entries, B)."""
    return [EMPTY if e is None else fixed + e
            for entries in entries_by_batch for e in reversed(entries) for _ in range(heads)]


def tail(times: list[float], slots: int) -> float:
    """The makespan of list scheduling `times` in order on `slots`, over the work's bound, in %."""
    free = [0.0] * slots
    for t in times:
        heapq.heappush(free, heapq.heappop(free) + t)
    return 100.0 * (max(free) / (sum(times) / slots) - 1.0)


def orders(seq: int, doc: int, block_m: int, block_n: int, heads: int, batch: int, slots: int,
           fixed: float) -> dict[str, float]:
    """The tail of each order, by name."""
    entries = table(seq, doc, block_m, block_n)
    tiles = sum(e is not None for e in entries)
    base = heads_first([entries] * batch, heads, fixed)
    out = {"table order (heads first)": tail(base, slots)}
    for waves in (1, 2):                # attn-kernel-choices' tail_waves
        count = min(tiles, -(-waves * slots // heads))
        last = [entries] * (batch - 1) + [longest_last(entries, count)]
        out[f"last batch's first {count} entries longest first (tail_waves {waves})"] = tail(
            heads_first(last, heads, fixed), slots)
    out["longest first over the whole grid"] = tail(sorted(base, reverse=True), slots)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=8192, help="M = N (default 8192)")
    ap.add_argument("--doc", type=int, default=1000, help="positions a document (default 1000)")
    ap.add_argument("--block-m", type=int, default=128)
    ap.add_argument("--block-n", type=int, default=64)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--slots", type=int, default=264, help="SMs x CTAs an SM (default 132 x 2)")
    ap.add_argument("--fixed", type=float, default=1.33, help="a CTA's fixed cost in key blocks (default 1.33)")
    args = ap.parse_args(argv)
    for name, pct in orders(args.seq, args.doc, args.block_m, args.block_n, args.heads, args.batch,
                            args.slots, args.fixed).items():
        print(f"{pct:6.2f} %  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
