"""Where one launch of a bench_variants bundle spends its GPU time: every kernel and
memset the runtime queues (the mask kernels, the zeroing of their scratch, the attention
kernel), timed by the CUDA profiler (torch.profiler), averaged over --iters launches.

    python3 bench/launch_breakdown.py --bundles DIR [--cases doc_causal] [--head-dims 64,128]
                                      [--archs sm_80] [--iters 50] [--tags base,runs] [--seqs 8192]

Run on the GPU machine with bundles built by tools/build_gpu_bundles.py --suites
bench_variants, or with --tags experiment bundles of tools/build_exp_bundles.py. The sum
is GPU busy time; the gaps between launches are not in it (the time a launch takes
between CUDA events, gaps included, is printed beside it). --seqs lists the M = N to run
at (the bundles take any; bench_variants' shapes are at 8192).
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]

import attnc_runtime  # noqa: E402
import bench_variants  # noqa: E402
from bench_variants import SHAPES, add_tags_option, attnc_params, bundle_lookup, inputs  # noqa: E402


def breakdown(bound, iters: int, reuse: bool) -> list[tuple[str, float, int]]:
    """(name, mean microseconds per launch, calls per launch) of every GPU activity."""
    for _ in range(5):
        bound.launch(reuse_mask=reuse)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            bound.launch(reuse_mask=reuse)
        torch.cuda.synchronize()
    total, count = collections.defaultdict(float), collections.Counter()
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            total[ev.name] += ev.device_time
            count[ev.name] += 1
    return [(name, total[name] / iters, count[name] // iters) for name in total]


def elapsed(bound, iters: int, reuse: bool) -> float:
    """Mean microseconds per launch between two CUDA events, gaps included (beside the
    profiler's busy time, which leaves them out)."""
    for _ in range(5):
        bound.launch(reuse_mask=reuse)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        bound.launch(reuse_mask=reuse)
    end.record()
    torch.cuda.synchronize()
    return 1000.0 * start.elapsed_time(end) / iters


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundles", required=True)
    ap.add_argument("--cases", default="doc_causal")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--archs", default="sm_80")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--seqs", default=str(bench_variants.N), help="M = N values, comma-separated")
    add_tags_option(ap)
    args = ap.parse_args()
    bundles = Path(args.bundles)
    tags, index = bundle_lookup(bundles, args.tags)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; mean of {args.iters} launches")
    for seq, d in ((s, d) for s in map(int, args.seqs.split(",")) for d in map(int, args.head_dims.split(","))):
        bench_variants.M = bench_variants.N = seq       # read by inputs() and attnc_params()
        b, h = SHAPES[d]
        q, k, v = inputs(d)
        for case in args.cases.split(","):
            for arch, tag in ((a, t) for a in args.archs.split(",") for t in tags):
                label = f"{arch} {case} d={d} M=N={seq}" + (f" {tag}" if tag else "")
                entry = index.get((arch, case, d, tag))
                if entry is None or "refused" in entry:
                    print(f"{label}: no bundle")
                    continue
                bound = attnc_runtime.load(bundles / entry["path"]).bind(q=q, k=k, v=v, **attnc_params(case, b, h))
                for reuse in (False, True):
                    rows = breakdown(bound, args.iters, reuse)
                    print(f"{label} {'mask reused' if reuse else 'mask built'}: "
                          f"{sum(us for _, us, _ in rows):.1f} us busy, "
                          f"{elapsed(bound, args.iters, reuse):.1f} us a launch between events")
                    for name, us, calls in sorted(rows, key=lambda r: -r[1]):
                        print(f"    {us:9.1f} us  x{calls}  {name[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
