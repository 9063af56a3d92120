"""SM clock and board power while one kernel runs back to back: is it held by the power cap?

    python3 bench/power_probe.py BUNDLES_DIR [--cases sm_80:doc_causal:128,...] [--seconds 4] [--reused]
                                 [--tags base,other] [--no-flex]

For each case (arch:case:head_dim of a bench_variants folder, tools/build_gpu_bundles.py
--suites bench_variants, or with --tags each tag's bundle of tools/build_exp_bundles.py)
and for FlexAttention (torch.compile) on the same variant, runs
the launch back to back for --seconds after a second of warm-up, timing chunks of 20
launches with CUDA events, while nvidia-smi logs the SM clock and the board power every
50 ms (smi_log.py); prints per phase the median time per launch, the median clock and
power of the samples inside it, and the share of them with the software power cap active.
The GPU idles 2 s between phases. A measuring tool: it asserts nothing.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import median

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import attnc_runtime  # noqa: E402
from bench_variants import M, N, SHAPES, add_tags_option, attnc_params, bundle_lookup, flex_case, inputs  # noqa: E402
from clock_trace import timed_chunks  # noqa: E402
from smi_log import SmiLog  # noqa: E402

DEFAULT_CASES = "sm_80:doc_causal:128,sm_80:causal:128"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bundles", type=Path)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--reused", action="store_true",
                    help="also each bundle with mask kernels launched with its mask reused (launch(reuse_mask=True))")
    add_tags_option(ap)
    ap.add_argument("--no-flex", action="store_true", help="leave FlexAttention out")
    args = ap.parse_args(argv)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
    tags, index = bundle_lookup(args.bundles, args.tags)
    phases = []
    for spec in args.cases.split(","):
        arch, case, d = spec.split(":")
        d = int(d)
        b, h = SHAPES[d]
        q, k, v = inputs(d)
        params = attnc_params(case, b, h)
        for tag in tags:
            bound = attnc_runtime.load(args.bundles / index[(arch, case, d, tag)]["path"]).bind(
                q=q, k=k, v=v, **params)
            name = f"attnc {arch} {case} d={d}" + (f" {tag}" if tag else "")
            phases.append((name, bound.launch))
            if args.reused and bound.bundle.manifest.mask_kernels:
                phases.append((f"{name} map reused", lambda b=bound: b.launch(reuse_mask=True)))
        if args.no_flex:
            continue
        score_mod, mask_mod = flex_case(case, h)
        block_mask = create_block_mask(mask_mod, None, None, M, N, device="cuda")
        phases.append((f"flex {case} d={d}", lambda q=q, k=k, v=v, s=score_mod, m=block_mask: flex(
            q, k, v, score_mod=s, block_mask=m)))
    for _, fn in phases:         # compile and load everything before the log starts
        fn()
    torch.cuda.synchronize()
    print(torch.cuda.get_device_name())
    with SmiLog() as smi:
        spans = []
        time.sleep(2)
        for name, fn in phases:
            timed_chunks(fn, 1.0)
            t0 = time.time()
            chunks = timed_chunks(fn, args.seconds)
            spans.append((name, t0, time.time(), median(chunks)))
            time.sleep(2)
    for name, t0, t1, ms in spans:
        print(f"{name:40s} {ms:.4f} ms a launch | {smi.summary([(t0, t1)], skip_s=0.2) or 'no nvidia-smi samples'}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
