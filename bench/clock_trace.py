"""Kernel times over seconds of back-to-back launches, beside nvidia-smi's clock and power log.

    python3 bench/clock_trace.py BUNDLES_DIR OUT_DIR

Takes the sm_80 and sm_90a bundles of causal and window1024 at head dim 64 from a
bench_variants folder (tools/build_gpu_bundles.py --suites bench_variants --archs
sm_80,sm_90a), binds them on bench_variants.py's inputs and runs a fixed schedule of
phases, each launching one kernel back to back for 2-3 s and timing it in chunks of 20
launches (CUDA events); nvidia-smi logs the SM clock, power, temperature and the active
clock-event reasons every 100 ms into OUT_DIR/smi.csv. Each phase prints its first, median
and last chunks. What it showed: Note [Timing over the clock's swings] in bench_variants.py
(results/sm80_h200.md, "Benchmark timing"). A measuring tool: it asserts nothing.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import attnc_runtime  # noqa: E402
from bench_variants import SHAPES, attnc_params, inputs  # noqa: E402

KERNELS = (("sm_80", "window1024"), ("sm_80", "causal"), ("sm_90a", "causal"), ("sm_90a", "window1024"))
PHASES = (("sm_80 window1024", 3), ("sm_80 causal", 3), ("sm_80 window1024", 2), ("sm_90a causal", 3),
          ("sm_80 window1024", 2), ("sm_80 causal", 2), ("idle", 3), ("sm_80 window1024", 2),
          ("sm_90a window1024", 2), ("sm_80 window1024", 2))
CHUNK = 20
SMI_FIELDS = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"


def main(bundles: Path, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    index = {(e.get("arch", "sm_80"), e["case"], e["head_dim"]): e
             for e in json.loads((bundles / "index.json").read_text()) if e.get("suite") == "bench_variants"}
    b, h = SHAPES[64]
    q, k, v = inputs(64)
    launch = {}
    for arch, case in KERNELS:
        bound = attnc_runtime.load(bundles / index[(arch, case, 64)]["path"]).bind(q=q, k=k, v=v,
                                                                                **attnc_params(case, b, h))
        launch[f"{arch} {case}"] = bound.launch
    with open(out / "smi.csv", "w") as log_file:
        log = subprocess.Popen(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader", "-lms", "100"],
                               stdout=log_file)
        try:
            t0 = time.time()
            time.sleep(1)
            for name, seconds in PHASES:
                if name == "idle":
                    time.sleep(seconds)
                    continue
                chunks = timed_chunks(launch[name], seconds)
                print(f"{time.time() - t0:7.2f}s {name:18s} {len(chunks)} chunks of {CHUNK}: first "
                      f"{chunks[:4]} median {median(chunks):.3f} last {chunks[-4:]} ms", flush=True)
        finally:
            log.terminate()
    return 0


def timed_chunks(fn, seconds: float) -> list[float]:
    """ms per launch of `fn`, in chunks of CHUNK launches, for `seconds` of wall time."""
    chunks, end = [], time.time() + seconds
    while time.time() < end:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CHUNK):
            fn()
        stop.record()
        stop.synchronize()
        chunks.append(round(start.elapsed_time(stop) / CHUNK, 3))
    return chunks


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
