"""How long `attnc compile` takes, as a user runs it: a new process per compile, the
interpreter's start included, for every example and target, cold (ATTNC_DISABLE_CACHE=1)
and served from the kernel cache (a fresh cache folder, filled by one compile first),
and a variant whose score_mod reads 150 per-head params (tests/backend/test_compile_scaling.py's
PARAM_READS). Prints a markdown table: the median of `--rounds` runs of each.

    python bench/compile_times.py [--archs sm_80,sm_90a] [--rounds 3] [--only REGEX]

No GPU is used; the times are the machine's it runs on (the results file names it).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARAMS = 150


def params_variant() -> str:
    lines = ["attention reads {", "  q: f16[B, H, M, 64]", "  k: f16[B, H, N, 64]", "  v: f16[B, H, N, 64]"]
    lines += [f"  param w{k}: f32[H]" for k in range(PARAMS)]
    lines.append("  score_mod(s, b, h, i, j) = s + " + " + ".join(f"w{k}[h]" for k in range(PARAMS)))
    return "\n".join(lines + ["  out o: f16[B, H, M, 64]", "}"]) + "\n"


def timed(source: Path, arch: str, out: Path, env: dict) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "attnc", "compile", str(source), "-arch", arch, "-o", str(out)],
                          env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"attnc compile {source} -arch {arch} failed:\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", default="sm_80,sm_90a")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=None, help="a regular expression on the example's name")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sources = sorted((ROOT / "examples").glob("*.attn"))
        reads = tmp / "params150.attn"
        reads.write_text(params_variant())
        sources.append(reads)
        if args.only:
            sources = [s for s in sources if re.search(args.only, s.stem)]
        base = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "runtime"),
                                                             os.environ.get("PYTHONPATH", "")])}
        print("| case | target | cold compile (s) | cached compile (s) |")
        print("| --- | --- | --- | --- |")
        for source in sources:
            for arch in args.archs.split(","):
                cold_env = {**base, "ATTNC_DISABLE_CACHE": "1"}
                cold = [timed(source, arch, tmp / "out", cold_env) for _ in range(args.rounds)]
                cached_env = {**base, "ATTNC_DISABLE_CACHE": "0", "ATTNC_CACHE_DIR": str(tmp / f"cache_{arch}")}
                timed(source, arch, tmp / "out", cached_env)          # fills the cache
                cached = [timed(source, arch, tmp / "out", cached_env) for _ in range(args.rounds)]
                print(f"| {source.stem} | {arch} | {statistics.median(cold):.2f} | {statistics.median(cached):.2f} |",
                      flush=True)


if __name__ == "__main__":
    main()
