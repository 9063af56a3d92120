"""Experiment bundles: bench_variants cases with pass options, for bench/ab_bundles.py.

    .venv/bin/python tools/build_exp_bundles.py OUT "ARCH|TAG|CASE|D|TILE_JSON|LOWER_JSON[|PASSES]" ...

Each spec builds one bundle named exp_TAG_CASE_dD_ARCH into OUT (its index.json gains
an entry of suite "exp" with the tag): CASE one of gpu_variants.BENCH_CASES (or a
windowW of the sweep, or one of its EXP_CASES: doc_only), D its head dim, TILE_JSON
options of attn-tile and LOWER_JSON those of the later passes (attn-warp-specialize's
consumers, producer, pingpong, persistent; attn-kernel-choices'), both may be empty, and
PASSES user pass files (comma-separated) run where build_gpu_bundles.USER_PASS_AFTER
puts them, e.g.

    'sm_90a|ws|causal|128||{"producer":1}'
    'sm_80|t64x64|window1024|64|{"block_m":64,"block_n":64}|'
    'sm_80|wve|causal|128|||examples/passes/wait_v_early.py'

Give the tag `base` to the default build of a case: bench/ab_bundles.py compares the
other tags of the case with it. With `--compiler ROOT` first, the bundles come from the
compiler of another checkout (its CLI, default pipeline): an A/B of two commits' kernels,

    git worktree add /tmp/old COMMIT
    .venv/bin/python tools/build_exp_bundles.py --compiler /tmp/old .bundles/ab 'sm_80|old|causal|128||' ...
    .venv/bin/python tools/build_exp_bundles.py .bundles/ab 'sm_80|base|causal|128||' ...
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime"), str(ROOT / "tools")]

from build_gpu_bundles import Job, bench_source, build_one, schedule_pipeline  # noqa: E402
from gpu_variants import BENCH_CASES  # noqa: E402
from attnc.passes.pipelines import pipeline_with_options  # noqa: E402


def job(spec: str) -> Job:
    arch, tag, case, d, tile, lower, *passes = spec.split("|", 6)
    name = f"exp_{tag}_{case}_d{d}_{arch.replace('_', '')}"
    user_passes = tuple(p for p in (passes[0] if passes else "").split(",") if p)
    pipeline = schedule_pipeline(arch, {**json.loads(tile or "{}"), **json.loads(lower or "{}")}, user_passes)
    meta = {"case": case, "head_dim": int(d), "dtype": "bf16", "fills": BENCH_CASES.get(case, ("", "", "", {}))[3],
            "pipeline": pipeline, "arch": arch, "tag": tag, "load_passes": list(user_passes)}
    return Job("exp", name, bench_source(name, int(d), case), meta, arch=arch)


def build_with(root: str, j: Job, out: str) -> dict:
    """Build `j` with the compiler of the checkout at `root` (its CLI, default pipeline)."""
    entry = {"suite": j.suite, "name": j.name, **j.meta, "compiler": root}
    if j.meta["pipeline"] != pipeline_with_options(j.arch, {}):
        return {**entry, "refused": "--compiler builds the default pipeline only: give no pass options"}
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"{j.name}.attn"
        source.write_text(j.source)
        env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{Path(root) / 'runtime'}"}
        # run from `root`: `python -m` puts the working directory first on the path
        done = subprocess.run([sys.executable, "-m", "attnc", "compile", str(source), "-arch", j.arch,
                               "-o", str((Path(out) / j.name).resolve())], env=env, cwd=root,
                              capture_output=True, text=True)
    if done.returncode:
        return {**entry, "refused": done.stderr}
    return {**entry, "path": j.name}


def main(argv: list[str]) -> int:
    compiler = None
    if argv[:1] == ["--compiler"]:
        compiler, argv = argv[1], argv[2:]
    if len(argv) < 2:
        print(__doc__)
        return 2
    out, jobs = argv[0], [job(s) for s in argv[1:]]
    os.makedirs(out, exist_ok=True)
    with Pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        if compiler:
            built = pool.starmap(build_with, [(compiler, j, out) for j in jobs])
        else:
            built = pool.starmap(build_one, [(j, out) for j in jobs])
    index = Path(out) / "index.json"
    old = json.loads(index.read_text()) if index.exists() else []
    names = {e["name"] for e in built}
    index.write_text(json.dumps([e for e in old if e["name"] not in names] + built, indent=1))
    for e in built:
        print(e["name"], e.get("block"), ("REFUSED " + e["refused"].splitlines()[-1]) if "refused" in e else "")
    return 1 if any("refused" in e for e in built) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
