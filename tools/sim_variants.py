"""Generated variants (tests/gpu/variant_gen.py) compiled and run in the PTX emulator
against the reference, with the GPU tests' tolerances: the check of a target no GPU here
runs (sm_100a), over more seeds and larger shapes than CI's tests/sim/test_sm100a_variants.py.

    python tools/sim_variants.py [--arch sm_100a] [--seeds 0-239|3,5,8-9] [--m 300] [--n 400]
                                 [--batch 1] [--heads 2] [--heads-kv 1] [--sms 132]
                                 [--options "PASS{KEY=VALUE ...}" ...] [--jobs 2]

prints a line per seed (its time, ok or what failed, its features) and the count last;
exits 1 if any seed failed. Each --options gives a pass of the target's pipeline its
options, such as "attn-warp-specialize{persistent=1}" (sm_100a's persistent CTAs) or
"attn-tile{q_tiles=1 block_n=64}", the pipeline otherwise as it is. --sms sets the emulated
GPU's multiprocessors: persistent CTAs walk several query blocks where they are fewer.
"""
from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _seeds(text: str) -> list[int]:
    """The seeds of "A", "A-B" (both included, A <= B) or a comma-separated list of those,
    each once, in order."""
    found: dict[int, None] = {}
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or not (hi or lo).isdigit() or int(hi or lo) < int(lo):
            raise argparse.ArgumentTypeError(f"{part!r} is not a seed or a range A-B with A <= B")
        found.update(dict.fromkeys(range(int(lo), int(hi or lo) + 1)))
    return list(found)


def run_seed(job: tuple) -> tuple[int, bool, str]:
    """(seed, passed, its report line) of one generated variant in the emulator."""
    seed, arch, shape, pipeline, sms = job
    for path in (ROOT, ROOT / "runtime"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    import numpy as np

    from attnc_sim.device import SimDevice

    from attnc.frontend import load
    from attnc.testing import ptx_bundle
    from tests.gpu.gpu_support import bind_sizes, compare, make_case
    from tests.gpu.variant_gen import generate
    from tests.sim.test_examples_sim import emulated

    start = time.time()
    g = generate(seed)
    try:
        variant = load(g.source, f"prop_{seed}.attn")
        bundle = ptx_bundle(g.source, arch=arch, pass_pipeline=pipeline)
        rng = np.random.default_rng(seed)
        sizes = bind_sizes(variant, **shape, rng=rng)      # a variant's fixed sizes stay
        kernel, out, ref = emulated(bundle, variant, make_case(variant, sizes, g.fills(), rng),
                                    device=SimDevice(multiprocessors=sms))
        bad = compare(variant, out, ref)
        passed = not bad and kernel.last_reports == []
        status = "ok" if passed else f"FAILED {bad} {kernel.last_reports}"
    except Exception as exc:        # a refusal, a crash or the emulator's error: reported, not raised
        passed, status = False, "ERROR " + "".join(traceback.format_exception_only(exc)).strip()
    return seed, passed, f"{seed} {time.time() - start:.0f}s {status} {' '.join(g.features)}"


def pipeline_of(arch: str, given: list[str]) -> str | None:
    """The target's pipeline with the options of each of `given` ("PASS{...}") on that pass."""
    from attnc.passes.pipelines import parse_pipeline, pipeline_with, target_pipeline

    if not given:
        return None
    specs = parse_pipeline(",".join(given))
    names = [p.name for p in target_pipeline(arch)]
    for spec in specs:
        if spec.name not in names:
            raise SystemExit(f"--options {spec.text()!r}: {spec.name} is not in {arch}'s pipeline ({', '.join(names)})")
    return pipeline_with(arch, {spec.name: spec.options for spec in specs})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm_100a", choices=("sm_80", "sm_90a", "sm_100a"))
    parser.add_argument("--seeds", default="0-239", type=_seeds,
                        help="a seed, a range A-B (both included), or a comma-separated list of those")
    parser.add_argument("--m", type=int, default=300)
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--heads-kv", type=int, default=1, help="K/V heads of a GQA or MQA variant")
    parser.add_argument("--sms", type=int, default=132, help="the emulated GPU's multiprocessors (an H200's)")
    parser.add_argument("--options", action="append", default=[],
                        help='a pass with its options, e.g. "attn-warp-specialize{persistent=1}" (repeatable)')
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    pipeline = pipeline_of(args.arch, args.options)
    shape = dict(batch=args.batch, heads=args.heads, heads_kv=args.heads_kv, m=args.m, n=args.n)
    jobs = [(seed, args.arch, shape, pipeline, args.sms) for seed in args.seeds]
    failed = []
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for seed, passed, line in pool.imap_unordered(run_seed, jobs):
            print(line, flush=True)
            if not passed:
                failed.append(seed)
    print(f"{len(jobs) - len(failed)} of {len(jobs)} passed" + (f"; failed: {sorted(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
