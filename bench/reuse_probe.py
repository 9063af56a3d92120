"""Why the sm_80 documents kernel at d = 128 runs slower with its tile table reused than
built (bench_variants' "map reused" column, sessions 29-33): the attention kernel timed
after itself, after the table kernel, and after a trivial kernel. A measuring tool.

    python3 bench/reuse_probe.py BUNDLES_DIR [--rounds R]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import median

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import attnc_runtime  # noqa: E402
from bench_variants import SHAPES, attnc_params, inputs, interleaved  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bundles", type=Path)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    print(torch.cuda.get_device_name())
    for d in (128, 64):
        b, h = SHAPES[d]
        q, k, v = inputs(d)
        bound = attnc_runtime.load(args.bundles / f"bench_doc_causal_d{d}").bind(q=q, k=k, v=v, **attnc_params("doc_causal", b, h))
        bound.launch()
        torch.cuda.synchronize()
        tiny = torch.zeros(1, device="cuda")

        def after_tiny():
            tiny.add_(1.0)
            bound.launch(reuse_mask=True)

        def after_sleep():
            torch.cuda._sleep(20000)            # 13-14 us on an H100 (printed below)
            bound.launch(reuse_mask=True)

        timers = {"built": bound.launch, "reused": lambda: bound.launch(reuse_mask=True),
                  "reused after a tiny kernel": after_tiny, "reused after a _sleep(20000) kernel": after_sleep}
        runs = interleaved(timers, args.rounds, 20, warmup_ms=100, min_ms=200)
        for key, times in runs.items():
            print(f"d={d} {key:36s} {median(times):.4f} ms  rounds {[round(x, 4) for x in times]}", flush=True)
        ms = {}
        for n in (1000, 20000, 100000):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(10):
                torch.cuda._sleep(n)
            e.record()
            torch.cuda.synchronize()
            ms[n] = s.elapsed_time(e) / 10
        print(f"(torch.cuda._sleep: {', '.join(f'{n} cycles {t * 1e3:.1f} us' for n, t in ms.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
