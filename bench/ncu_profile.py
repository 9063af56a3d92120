"""One launch of each bundle of a directory, for Nsight Compute to profile.

    ncu --profile-from-start off --clock-control none --set full --import-source yes \
        -o OUT/report python bench/ncu_profile.py BUNDLES_DIR [NAME_SUBSTRING ...]

Each bundle (tools/build_exp_bundles.py or build_gpu_bundles.py --suites bench_variants)
is bound on the inputs of bench_variants.py (M = N = 8192, bf16), launched twice to warm
up, then once between cudaProfilerStart and cudaProfilerStop, so that `ncu
--profile-from-start off` sees only that launch (every kernel of it: the block map's too).
The bundles profiled are those whose name contains one of the substrings (all when none
is given). A measuring tool: it asserts nothing.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import attnc_runtime  # noqa: E402
from bench_variants import SHAPES, attnc_params, inputs  # noqa: E402


def main(bundles: Path, wanted: list[str]) -> int:
    entries = [e for e in json.loads((bundles / "index.json").read_text())
               if "path" in e and (not wanted or any(w in e["name"] for w in wanted))]
    cudart = torch.cuda.cudart()
    for e in entries:
        d = e["head_dim"]
        b, h = SHAPES[d]
        q, k, v = inputs(d)
        bound = attnc_runtime.load(bundles / e["path"]).bind(q=q, k=k, v=v, **attnc_params(e["case"], b, h))
        for _ in range(2):
            bound.launch()
        torch.cuda.synchronize()
        cudart.cudaProfilerStart()
        bound.launch()
        torch.cuda.synchronize()
        cudart.cudaProfilerStop()
        print(e["name"], "profiled", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
