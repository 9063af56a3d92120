"""Compile every bundle the GPU tests and benchmarks need into one folder (design.md section 8).

    python tools/build_gpu_bundles.py [--out .bundles/gpu]

writes one bundle per (dtype, head dim, mask) of the sm_80 matrix and an
index.json that tests/gpu and bench/ read on the GPU machine, where neither MLIR
nor the compiler is installed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime")]

from attnc.backend.bundle import write_bundle          # noqa: E402
from attnc.backend.sm80_lower import build             # noqa: E402
from attnc.driver import CompileOptions, compile_mlir  # noqa: E402

MASKS = {"none": None, "causal": "j <= i", "bottom_right": "j <= i + (N - M)"}


def source(name: str, dtype: str, d: int, mask: str | None) -> str:
    hook = f"  mask_mod(b, h, i, j) = {mask}\n" if mask else ""
    return (f"attention {name} {{\n"
            f"  q: {dtype}[B, H, M, {d}]\n  k: {dtype}[B, HKV, N, {d}]\n  v: {dtype}[B, HKV, N, {d}]\n"
            f"{hook}  out o: {dtype}[B, H, M, {d}]\n  out lse: f32[B, H, M]\n}}\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / ".bundles" / "gpu"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    index = []
    for dtype in ("f16", "bf16"):
        for d in (64, 96, 128, 256):
            for mask_name, mask in MASKS.items():
                name = f"sm80_{dtype}_d{d}_{mask_name}"
                result = compile_mlir(source(name, dtype, d, mask), f"{name}.attn",
                                      CompileOptions(arch="sm_80"))
                art = build(result)
                write_bundle(out / name, art.manifest, art.files)
                index.append({"suite": "sm80_matrix", "name": name, "path": name, "dtype": dtype,
                              "head_dim": d, "mask": mask_name,
                              "block": [art.spec.block_m, art.spec.block_n, art.spec.num_warps]})
                print(f"{name}: block {art.spec.block_m}x{art.spec.block_n}, "
                      f"{art.spec.num_warps} warps, {len(art.cubin)} B cubin", flush=True)
    (out / "index.json").write_text(json.dumps(index, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
