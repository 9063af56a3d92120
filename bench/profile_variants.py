"""Where the time of attnc's variant kernels goes: per-kernel times (torch.profiler, which
sees the driver-API launches of attnc_runtime too) against the tiles each kernel visits.

    python bench/profile_variants.py [--bundles .bundles/gpu] [--suites bench_variants,bench_sweep]
                                     [--cases causal,window1024] [--flex] [--json out.json]

For each bundle of the named suites (tools/build_gpu_bundles.py), at the shapes of
bench/bench_variants.py (M = N = 8192, bf16): the whole launch timed with CUDA events
(mean of --iters after warm-ups), each kernel's mean time from the profiler, the (query
block, key block) tiles the mask keeps anything in (the kernel's own tile, from the
index's `block`) and the time per visited tile, so that a sweep over kept fractions
separates the per-tile cost from the fixed costs. --flex profiles FlexAttention's
kernels for the same case too. A measuring tool: it asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import attnc_runtime  # noqa: E402
from bench_variants import M, N, SHAPES, attnc_params, flex_case, timed  # noqa: E402


def mask_of(case: str, h: int):
    if case.startswith("window") and case != "window1024":
        w = int(case[len("window"):])
        return lambda b, h_, q, k: (q >= k) & (q - k < w)
    return flex_case(case, h)[1]


def visited_tiles(mask_mod, block_m: int, block_n: int) -> tuple[int, float]:
    """(tiles with a kept element, kept fraction) of one (b, h) slice."""
    q = torch.arange(M, device="cuda")[:, None]
    k = torch.arange(N, device="cuda")[None, :]
    keep = mask_mod(0, 0, q, k)
    mb, nb = -(-M // block_m), -(-N // block_n)
    padded = torch.zeros(mb * block_m, nb * block_n, dtype=torch.bool, device="cuda")
    padded[:M, :N] = keep
    tiles = padded.view(mb, block_m, nb, block_n).any(dim=3).any(dim=1)
    return int(tiles.sum().item()), keep.float().mean().item()


def kernel_times(fn, iters: int) -> dict[str, float]:
    """Mean device time per call of each kernel fn launches, in microseconds."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    totals = collections.defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            totals[ev.name] += ev.device_time / iters
    return dict(totals)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundles", default=str(ROOT / ".bundles" / "gpu"))
    ap.add_argument("--suites", default="bench_variants,bench_sweep")
    ap.add_argument("--cases", help="only these cases (comma-separated)")
    ap.add_argument("--flex", action="store_true")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    bundles = Path(args.bundles)
    suites = set(args.suites.split(","))
    cases = set(args.cases.split(",")) if args.cases else None
    entries = [e for e in json.loads((bundles / "index.json").read_text())
               if e.get("suite") in suites and "path" in e and (cases is None or e["case"] in cases)]
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; M = N = {M}, bf16")
    rows = []
    if args.flex:
        from torch import _dynamo
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        _dynamo.config.cache_size_limit = 1000
        flex = torch.compile(flex_attention, dynamic=False)
    for d, (b, h) in SHAPES.items():
        q, k, v = (torch.randn(b, h, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for entry in (e for e in entries if e["head_dim"] == d):
            case = entry["case"]
            block_m, block_n = entry["block"][:2]
            tiles, kept = visited_tiles(mask_of(case, h), block_m, block_n)
            bound = attnc_runtime.load(bundles / entry["path"]).bind(q=q, k=k, v=v, **attnc_params(case, b, h))
            ms = timed(bound.launch, args.iters) * 1e3
            per_kernel = kernel_times(bound.launch, args.iters)
            row = {"name": entry["name"], "case": case, "head_dim": d, "block": [block_m, block_n],
                   "kept": kept, "tiles_per_bh": tiles, "ms": ms, "kernels_us": per_kernel,
                   "ns_per_tile": ms * 1e6 / (tiles * b * h)}
            text = ", ".join(f"{name[:40]} {us:8.1f} us" for name, us in per_kernel.items())
            print(f"d={d:3d} {case:14s} {block_m}x{block_n} kept {kept:6.2%} tiles/bh {tiles:5d}: "
                  f"{ms:7.3f} ms, {row['ns_per_tile']:6.2f} ns/tile | {text}", flush=True)
            if args.flex:
                score_mod, mask_mod = flex_case(case, h) if not case.startswith("window") or case == "window1024" \
                    else (None, mask_of(case, h))
                block_mask = create_block_mask(mask_mod, None, None, M, N, device="cuda")
                run = lambda: flex(q, k, v, score_mod=score_mod, block_mask=block_mask)  # noqa: E731
                row["flex_ms"] = timed(run, args.iters) * 1e3
                row["flex_kernels_us"] = kernel_times(run, args.iters)
                text = ", ".join(f"{name[:40]} {us:8.1f} us" for name, us in row["flex_kernels_us"].items())
                print(f"      flex {row['flex_ms']:7.3f} ms | {text}", flush=True)
            rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
