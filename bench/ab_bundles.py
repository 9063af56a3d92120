"""A/B timing of experiment bundles (tools/build_exp_bundles.py) on a GPU.

    python bench/ab_bundles.py BUNDLES_DIR

Groups the bundles by (case, head dim, arch); in each group every tag runs on the same
inputs (M = N = 8192, bf16, the shapes of bench_variants.py), is compared with the
`base` tag's output (max |difference|, NaNs), and is timed in 5 interleaved rounds
(CUDA events, each the mean of 20 launches after 5 warm-ups); the median is printed
with the rounds. A measuring tool: it asserts nothing.
"""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from statistics import median

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import attnc_runtime  # noqa: E402
from bench_variants import N, SHAPES, attnc_params, interleaved  # noqa: E402

ROUNDS = 5


def main(bundles: Path) -> int:
    entries = [e for e in json.loads((bundles / "index.json").read_text()) if "path" in e]
    print(torch.cuda.get_device_name())
    groups = collections.defaultdict(dict)
    for e in entries:
        groups[(e["case"], e["head_dim"], e.get("arch", "sm_80"))][e["tag"]] = e
    for (case, d, arch), tags in sorted(groups.items()):
        b, h = SHAPES[d]
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        launches, outputs = {}, {}
        for tag, e in tags.items():
            bound = attnc_runtime.load(bundles / e["path"]).bind(q=q, k=k, v=v, **attnc_params(case, b, h))
            bound.launch()
            torch.cuda.synchronize()
            outputs[tag], launches[tag] = bound.outputs["o"].float().clone(), bound.launch
        runs = interleaved(launches, ROUNDS, 20)
        base = outputs.get("base")
        for tag in launches:
            diff = (outputs[tag] - base).abs().max().item() if base is not None else float("nan")
            print(f"d={d} {case:15s} {arch} {tag:6s} {median(runs[tag]):.3f} ms  rounds "
                  f"{[round(x, 3) for x in runs[tag]]}  max|diff vs base| {diff:.3e} "
                  f"nan={torch.isnan(outputs[tag]).any().item()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
