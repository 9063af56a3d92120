"""python -m attnc_sim.sweep INDEX_DIR [--M 45] [--N 70] [--seed 0] [--jobs N] [--only REGEX]

Runs every bundle an index.json of tools/build_gpu_bundles.py lists in the emulator at a
small ragged shape (batch 1, two query heads over one KV head where the variant has a KV-head
dim, M != N and neither a multiple of a tile), on the inputs the GPU tests would give it
(tests/gpu/gpu_support.py: bind_sizes, make_case with the entry's fills) and compares with
attnc.reference at the GPU tests' tolerances (`compare`). Prints one line per bundle
(status, race and protocol reports, seconds) and the summary `N passed, M failed`; exit
status 1 when any failed.

Statuses: `pass`; `FAIL` (outputs differ, or any race/protocol report); `ERROR` (the
emulator stopped: an unsupported instruction, a fault, a deadlock); `skip` (refused at build
time). An sm_90a bundle holds its cubin only: its PTX is compiled again from the manifest's
source for the same target (`ptx: recompiled` on its line).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Outcome:
    name: str
    arch: str
    status: str             # 'pass', 'FAIL', 'ERROR', 'skip'
    reports: int
    seconds: float
    detail: str = ""


def _gpu_support():
    import attnc
    root = Path(attnc.__file__).resolve().parents[1]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from tests.gpu import gpu_support
    return gpu_support


def _recompiled_ptx(manifest) -> str:
    import attnc
    bundle = attnc.compile(manifest.source, arch=manifest.target).bundle
    text = bundle.images.get("ptx")
    if text is None:
        raise RuntimeError(f"compiling the manifest's source for {manifest.target} gave no PTX")
    return text.decode() if isinstance(text, (bytes, bytearray)) else text


def run_entry(entry: dict, folder: Path, m: int, n: int, seed: int) -> Outcome:
    """One index entry in the emulator against the reference."""
    arch = entry.get("arch", "sm_80")
    t0 = time.perf_counter()
    if "refused" in entry:
        return Outcome(entry["name"], arch, "skip", 0, 0.0, "refused at build time")
    try:
        import attnc
        from attnc.frontend import load
        from attnc_runtime.bundle import read_bundle

        from attnc_sim.device import SimKernel, numpy_dtype
        support = _gpu_support()
        bundle = read_bundle(folder / entry["path"])
        manifest = bundle.manifest
        ptx, note = None, ""
        if "ptx" not in manifest.code:
            ptx, note = _recompiled_ptx(manifest), "ptx: recompiled"
        variant = load(manifest.source, f"{entry['name']}.attn")
        rng = np.random.default_rng(seed)
        if entry.get("square"):
            n = m
        sizes = support.bind_sizes(variant, batch=1, heads=2, heads_kv=1, m=m, n=n, rng=rng)
        case = support.make_case(variant, sizes, entry.get("fills", {}), rng)
        inputs = {name: (value.astype(numpy_dtype(manifest.tensor(name).dtype))
                         if isinstance(value, np.ndarray) else value) for name, value in case.items()}
        kernel = SimKernel(bundle, seed=seed, raise_reports=False, ptx=ptx)
        out = kernel(**inputs)
        ref_inputs = {name: (inputs[name].astype(np.float32) if name in ("q", "k", "v") else value)
                      for name, value in case.items()}
        problems = support.compare(variant, {k: v.astype(np.float32) for k, v in out.items()},
                                   attnc.reference(variant, **ref_inputs))
        reports = kernel.last_reports
        problems += [f"report: {r}" for r in reports[:3]]
        status = "FAIL" if problems else "pass"
        return Outcome(entry["name"], arch, status, len(reports), time.perf_counter() - t0,
                       "; ".join(([note] if note else []) + problems))
    except Exception as e:          # noqa: BLE001  (every failure is one bundle's line, not the sweep's end)
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        return Outcome(entry["name"], arch, "ERROR", 0, time.perf_counter() - t0, last[:400])


def _run(job):
    return run_entry(*job)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnc_sim.sweep", description=__doc__.split("\n\n")[1])
    ap.add_argument("index_dir", type=Path, help="a folder with index.json (tools/build_gpu_bundles.py --out)")
    ap.add_argument("--M", type=int, default=45)
    ap.add_argument("--N", type=int, default=70)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--only", help="run the entries whose names this regex finds")
    args = ap.parse_args(argv)
    index = json.loads((args.index_dir / "index.json").read_text())
    if args.only:
        index = [e for e in index if re.search(args.only, e["name"])]
    jobs = [(e, args.index_dir, args.M, args.N, args.seed) for e in index]
    t0 = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.Pool(args.jobs) as pool:
            outcomes = _report_each(pool.imap_unordered(_run, jobs))
    else:
        outcomes = _report_each(map(_run, jobs))
    passed = sum(o.status == "pass" for o in outcomes)
    failed = sum(o.status in ("FAIL", "ERROR") for o in outcomes)
    skipped = sum(o.status == "skip" for o in outcomes)
    reports = sum(o.reports for o in outcomes)
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else "")
          + f"; {reports} race/protocol reports; {time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


def _report_each(outcomes) -> list[Outcome]:
    done = []
    for o in outcomes:
        print(f"{o.status:5} {o.name:40} {o.arch:7} reports={o.reports:<3} {o.seconds:6.1f} s"
              + (f"  {o.detail}" if o.detail else ""), flush=True)
        done.append(o)
    return done


if __name__ == "__main__":
    sys.exit(main())
