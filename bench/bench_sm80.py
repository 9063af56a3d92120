"""attnc sm_80 kernels vs torch SDPA (flash = FA2, cuDNN) and FlexAttention, in one run.

    python bench/bench_sm80.py [--bundles .bundles/gpu] [--json out.json]

B*M = 32k tokens, M = N in {1k, 4k, 8k, 16k}, head dims 64 (H=32) and 128 (H=16),
bf16, causal and not. CUDA events, 3 warm-ups, mean of 20 timed runs; TFLOP/s of
useful work (4*B*H*M*N*D times the kept fraction). Prints a table with each
peer's TFLOP/s and attnc's ratio to it; only ratios within this run mean anything.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import attnc_runtime  # noqa: E402
from bench_variants import sdpa_runners  # noqa: E402

WARMUP, ITERS = 3, 20


def timed(fn) -> float:
    for _ in range(WARMUP):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(ITERS):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / ITERS / 1e3


def peers(q, k, v, causal: bool) -> dict:
    runners = sdpa_runners(q, k, v, causal)
    out = {name: timed(runners[backend]) if backend in runners else None
           for name, backend in (("fa2", "flash"), ("cudnn", "cudnn"))}
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention)
    mask = None
    if causal:
        mask = create_block_mask(lambda b, h, i, j: j <= i, None, None, q.shape[2], k.shape[2])
    out["flex"] = timed(lambda: flex(q, k, v, block_mask=mask))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundles", default=str(ROOT / ".bundles" / "gpu"))
    ap.add_argument("--json")
    args = ap.parse_args()
    bundles = Path(args.bundles)
    index = {(e["dtype"], e["head_dim"], e["mask"]): e for e in json.loads((bundles / "index.json").read_text())
             if e.get("suite") == "sm80_matrix"}
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    for d, h in ((64, 32), (128, 16)):
        for causal in (False, True):
            kernel = attnc_runtime.load(bundles / index[("bf16", d, "causal" if causal else "none")]["path"])
            for n in (1024, 4096, 8192, 16384):
                b = 32768 // n
                q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                bound = kernel.bind(q=q, k=k, v=v)
                t_attnc = timed(bound.launch)
                times = peers(q, k, v, causal)
                kept = (n + 1) / (2 * n) if causal else 1.0
                flops = 4 * b * h * n * n * d * kept
                row = {"head_dim": d, "causal": causal, "M": n, "B": b, "H": h,
                       "attnc": flops / t_attnc / 1e12,
                       **{p: (flops / t / 1e12 if t else None) for p, t in times.items()}}
                rows.append(row)
                ratios = "  ".join(f"{p} {row[p]:6.1f} ({row['attnc'] / row[p]:.2f}x)"
                                   for p in ("fa2", "cudnn", "flex") if row.get(p))
                print(f"d={d:3d} causal={causal!s:5} M=N={n:5d} B={b:2d} H={h}: attnc {row['attnc']:6.1f} "
                      f"TFLOP/s | {ratios}", flush=True)
                del bound, q, k, v
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
