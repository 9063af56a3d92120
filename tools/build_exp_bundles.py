"""Experiment bundles: bench_variants cases with pass options, for bench/ab_bundles.py.

    .venv/bin/python tools/build_exp_bundles.py OUT "ARCH|TAG|CASE|D|TILE_JSON|LOWER_JSON" ...

Each spec builds one bundle named exp_TAG_CASE_dD_ARCH into OUT (its index.json gains
an entry of suite "exp" with the tag): CASE one of build_gpu_bundles.BENCH_CASES (or a
windowW of the sweep, or one of its EXP_CASES: doc_only), D its head dim, TILE_JSON
options of attn-tile and LOWER_JSON of the target's lowering pass (both may be empty),
e.g.

    'sm_90a|ws|causal|128||{"producer_warpgroup":1}'
    'sm_80|t64x64|window1024|64|{"block_m":64,"block_n":64}|'

Give the tag `base` to the default build of a case: bench/ab_bundles.py compares the
other tags of the case with it.
"""
from __future__ import annotations

import json
import os
import sys
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime"), str(ROOT / "tools")]

from build_gpu_bundles import BENCH_CASES, Job, bench_source, build_one  # noqa: E402
from attnc.passes.pipelines import LOWERING, pipeline_with  # noqa: E402


def job(spec: str) -> Job:
    arch, tag, case, d, tile, lower = spec.split("|", 5)
    name = f"exp_{tag}_{case}_d{d}_{arch.replace('_', '')}"
    pipeline = pipeline_with(arch, {"attn-tile": json.loads(tile or "{}"), LOWERING[arch]: json.loads(lower or "{}")})
    meta = {"case": case, "head_dim": int(d), "dtype": "bf16", "fills": BENCH_CASES.get(case, ("", "", "", {}))[3],
            "pipeline": pipeline, "arch": arch, "tag": tag}
    return Job("exp", name, bench_source(name, int(d), case), meta, arch=arch)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    out, jobs = argv[0], [job(s) for s in argv[1:]]
    os.makedirs(out, exist_ok=True)
    with Pool(min(len(jobs), os.cpu_count() or 1)) as pool:
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
