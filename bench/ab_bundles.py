"""A/B timing of experiment bundles (tools/build_exp_bundles.py) on a GPU.

    python bench/ab_bundles.py BUNDLES_DIR [--warmup-ms MS] [--min-ms MS] [--rounds R]
                               [--base TAG] [--only REGEX]

Groups the bundles by (case, head dim, arch) -- of a `schedules` suite
(tools/build_gpu_bundles.py), by (example, head dim, arch), its schedules the tags; with
--only, of the bundles whose name the regex finds; in each group every tag runs on the same
inputs (M = N = 8192, bf16, the shapes of bench_variants.py), is compared with the
`--base` tag's (default `base`) output (max |difference|, NaNs: the output is filled with NaN before the
compared launch, so that rows no CTA writes show), and is timed in R interleaved rounds (default 5)
(CUDA events, each the mean of 20 launches after 5 warm-ups and --warmup-ms more of the
same kernel, as bench_variants.py's Note [Warm-up to the kernel's own clocks], or of as
many launches as take --min-ms, Note [Timing over the clock's swings]); the median is
printed with the rounds. A measuring tool: it asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path
from statistics import median

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import attnc_runtime  # noqa: E402
from bench_variants import N, SHAPES, attnc_params, interleaved  # noqa: E402

ROUNDS = 5


def main(bundles: Path, warmup_ms: float = 0.0, min_ms: float = 0.0, rounds: int = ROUNDS, base_tag: str = "base",
         only: str = "") -> int:
    entries = [e for e in json.loads((bundles / "index.json").read_text())
               if "path" in e and re.search(only, e["path"])]
    print(torch.cuda.get_device_name())
    groups = collections.defaultdict(dict)
    for e in entries:
        d = e["head_dim"][0] if isinstance(e["head_dim"], list) else e["head_dim"]
        groups[(e.get("case", e.get("example")), d, e.get("arch", "sm_80"))][e.get("tag", e.get("schedule"))] = e
    for (case, d, arch), tags in sorted(groups.items()):
        b, h = SHAPES[d]
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        launches, outputs = {}, {}
        for tag, e in tags.items():
            bound = attnc_runtime.load(bundles / e["path"]).bind(q=q, k=k, v=v, **attnc_params(case, b, h))
            bound.outputs["o"].fill_(float("nan"))     # a row no CTA writes stays NaN
            bound.launch()
            torch.cuda.synchronize()
            outputs[tag], launches[tag] = bound.outputs["o"].float().clone(), bound.launch
        runs = interleaved(launches, rounds, 20, warmup_ms=warmup_ms, min_ms=min_ms)
        base = outputs.get(base_tag)
        for tag in launches:
            diff = (outputs[tag] - base).abs().max().item() if base is not None else float("nan")
            print(f"d={d} {case:15s} {arch} {tag:17s} {median(runs[tag]):.3f} ms  rounds "
                  f"{[round(x, 3) for x in runs[tag]]}  max|diff vs base| {diff:.3e} "
                  f"nan={torch.isnan(outputs[tag]).any().item()}", flush=True)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("bundles", type=Path)
    ap.add_argument("--warmup-ms", type=float, default=0.0,
                    help="GPU time each kernel runs before each of its timings (default 0)")
    ap.add_argument("--min-ms", type=float, default=0.0,
                    help="GPU time each timing spans at least (default 0: 20 launches)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})")
    ap.add_argument("--base", default="base", help="the tag the others' outputs are compared with")
    ap.add_argument("--only", default="", help="time the bundles whose name this regex finds")
    args = ap.parse_args()
    sys.exit(main(args.bundles, args.warmup_ms, args.min_ms, args.rounds, args.base, args.only))
