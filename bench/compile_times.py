"""How long `attnc compile` takes, as a user runs it: a new process per compile, the
interpreter's start included, for every example and target, cold (ATTNC_DISABLE_CACHE=1)
and served from the kernel cache (a fresh cache folder, filled by one compile first),
and a variant whose score_mod reads 150 per-head params (tests/backend/test_compile_scaling.py's
PARAM_READS). Prints a markdown table: the median of `--rounds` runs of each, and the
fastest and slowest cold one. A round compiles every case once, so that each case's runs
are spread over the whole run: the machine's speed drifts within a run, and a slower
stretch of it then weighs on every case alike rather than on the few it met.

    python bench/compile_times.py [--archs sm_80,sm_90a] [--rounds 3] [--only REGEX]
    python bench/compile_times.py --against ../other-checkout [--only REGEX]

No GPU is used; the times are the machine's it runs on (the results file names it).

Python's bytecode cache is on, as an installed package has it (pip compiles the modules
when it installs them): the children write it to a folder of their own, which one
untimed compile fills first, whatever PYTHONDONTWRITEBYTECODE says in the caller's
environment. With `--no-bytecode-cache` each process compiles attnc's sources again, as
under PYTHONDONTWRITEBYTECODE=1 without a cache. The machine's speed drifts from one run to
the next, so `--against` compares with another checkout (`git worktree add DIR COMMIT`) in
one run, the compiles interleaved.
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
    # in the output's folder: `python -m` puts the working directory first on sys.path, so
    # run in a checkout it would import that checkout's attnc whatever PYTHONPATH says
    done = subprocess.run([sys.executable, "-m", "attnc", "compile", str(source), "-arch", arch, "-o", str(out)],
                          env=env, capture_output=True, text=True, cwd=out.parent)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"attnc compile {source} -arch {arch} failed:\n{done.stderr}")
    return seconds


def environment(root: Path, tmp: Path, bytecode: bool) -> dict:
    """The children's environment for the compiler checked out at `root`: its sources on
    PYTHONPATH, Python's bytecode cache in a folder of its own or off."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "runtime"),
                                                        os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp / f"pycache_{abs(hash(str(root)))}_{int(bytecode)}")
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"        # (the folder stays empty: nothing is read)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", default="sm_80,sm_90a")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=None, help="a regular expression on the example's name")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="every process compiles attnc's Python sources again")
    parser.add_argument("--against", type=Path, default=None, metavar="CHECKOUT",
                        help="cold compiles only, interleaved with those of the compiler checked out there "
                             "(another commit), and with this one's without the bytecode cache")
    args = parser.parse_args()
    archs = args.archs.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sources = sorted((ROOT / "examples").glob("*.attn"))
        reads = tmp / "params150.attn"
        reads.write_text(params_variant())
        sources.append(reads)
        if args.only:
            sources = [s for s in sources if re.search(args.only, s.stem)]
        base = environment(ROOT, tmp, not args.no_bytecode_cache)
        runs = {"this": (ROOT, base)}
        if args.against is not None:
            runs["against"] = (args.against.resolve(), environment(args.against.resolve(), tmp, True))
            runs["no bytecode"] = (ROOT, environment(ROOT, tmp, False))
        for root, env in runs.values():                 # fills the bytecode caches
            for arch in archs:
                timed(root / "examples" / "mha.attn", arch, tmp / "out", {**env, "ATTNC_DISABLE_CACHE": "1"})
        if args.against is not None:
            print(f"| case | target | cold, this (s) | cold, {args.against.name} (s) | cold, this without bytecode "
                  f"cache (s) |")
            print("| --- | --- | --- | --- | --- |")
        else:
            _rounds_over_cases(sources, archs, args.rounds, base, tmp)
            return
        for source in sources:
            for arch in archs:
                if args.against is not None:
                    cold = {name: [] for name in runs}
                    order = list(runs.items())
                    for k in range(args.rounds):
                        # each round starts with the next compiler, so that none always runs
                        # right after the same one
                        for name, (root, env) in order[k % len(order):] + order[:k % len(order)]:
                            own = source if source.parent != ROOT / "examples" else root / "examples" / source.name
                            cold[name].append(timed(own, arch, tmp / "out", {**env, "ATTNC_DISABLE_CACHE": "1"}))
                    cells = " | ".join(f"{statistics.median(v):.2f}" for v in cold.values())
                    print(f"| {source.stem} | {arch} | {cells} |", flush=True)


def _rounds_over_cases(sources: list[Path], archs: list[str], rounds: int, base: dict, tmp: Path) -> None:
    """The table of cold and cached compiles, each round compiling every case once."""
    cases = [(source, arch) for source in sources for arch in archs]
    cold_env = {**base, "ATTNC_DISABLE_CACHE": "1"}
    cached_env = {arch: {**base, "ATTNC_DISABLE_CACHE": "0", "ATTNC_CACHE_DIR": str(tmp / f"cache_{arch}")}
                  for arch in archs}
    for source, arch in cases:
        timed(source, arch, tmp / "out", cached_env[arch])          # fills the cache
    cold = {case: [] for case in cases}
    cached = {case: [] for case in cases}
    for _ in range(rounds):
        for source, arch in cases:
            cold[source, arch].append(timed(source, arch, tmp / "out", cold_env))
            cached[source, arch].append(timed(source, arch, tmp / "out", cached_env[arch]))
    print("| case | target | cold compile (s) | cold, fastest - slowest (s) | cached compile (s) |")
    print("| --- | --- | --- | --- | --- |")
    for source, arch in cases:
        times = cold[source, arch]
        print(f"| {source.stem} | {arch} | {statistics.median(times):.2f} | {min(times):.2f} - {max(times):.2f} | "
              f"{statistics.median(cached[source, arch]):.2f} |")


if __name__ == "__main__":
    main()
