"""The sha256 of every kernel's PTX, one line per case: `NAME TARGET DIGEST`.

    .venv/bin/python tools/ptx_digest.py [--jobs N] [--seeds 40] [--only SUBSTRING] > digests.txt

Cases: every examples/*.attn and the generated variants of tests/gpu/variant_gen.py (seeds
0 .. --seeds - 1), each for sm_80 and sm_90a (--targets: others, sm_100a among them),
compiled by the target's whole pipeline without the kernel cache. Two runs print the same lines exactly when every kernel's PTX
is byte for byte the same, so `diff` of two outputs names the cases a change moved. A case
that fails to compile prints `error: <first line of the message>` in place of the digest.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("sm_80", "sm_90a")


def cases(seeds: int) -> list[tuple[str, str, str]]:
    """(name, filename, source) of every case, examples first."""
    sys.path.insert(0, str(ROOT / "tests" / "gpu"))
    from variant_gen import generate

    found = [(path.stem, str(path), path.read_text()) for path in sorted((ROOT / "examples").glob("*.attn"))]
    for seed in range(seeds):
        v = generate(seed)
        found.append((f"gen{seed:03d}", f"gen{seed:03d}.attn", v.source))
    return found


def ptx_of(filename: str, source: str, arch: str) -> str:
    """The PTX the target's pipeline gives (what `attnc compile --emit ptx` writes, its
    register bound decided: Note [The bound the assembler decides])."""
    from attnc.backend.lowering import build
    from attnc.driver import CompileOptions, compile_mlir
    from attnc.passes.pipelines import format_pipeline, target_pipeline

    pipeline = format_pipeline(target_pipeline(arch))
    result = compile_mlir(source, filename, CompileOptions(arch=arch, pass_pipeline=pipeline))
    return build(result, cubin=False).ptx


def digest(case: tuple[str, str, str, str]) -> str:
    name, filename, source, arch = case
    try:
        value = hashlib.sha256(ptx_of(filename, source, arch).encode()).hexdigest()
    except Exception as e:          # a case that fails is reported, not fatal
        value = "error: " + (str(e).splitlines() or [type(e).__name__])[0]
    return f"{name} {arch} {value}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="compiles run in parallel")
    parser.add_argument("--seeds", type=int, default=40, help="generated variants: seeds 0 .. N-1")
    parser.add_argument("--only", default="", help="only the cases whose name holds this")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated targets")
    args = parser.parse_args(argv)
    os.environ["ATTNC_DISABLE_CACHE"] = "1"
    todo = [(name, filename, source, arch) for name, filename, source in cases(args.seeds)
            if args.only in name for arch in args.targets.split(",")]
    if args.jobs <= 1:
        lines = map(digest, todo)
    else:
        lines = ProcessPoolExecutor(args.jobs).map(digest, todo)
    for line in lines:
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
