"""python -m attnc_sim BUNDLE --B 1 --H 2 --M 200 --N 333 [--HKV 1] [--seed 0] [--ctas 0,0,0 1,0,0]
                     [--quantum 64] [--inputs in.npz] [--save out.npz] [--collect]

Runs the bundle in the emulator on random inputs (or the arrays of --inputs, by name),
saves the outputs (--save), and compares them with attnc.reference when attnc is
importable. Prints the time, the instruction count and any race or protocol reports.
With --ctas, only the rows the chosen CTAs wrote are compared (a row of o: its head-dim
elements; of lse: one element), and their count is printed. Exit status 1 when the outputs
disagree with the reference (beyond the GPU tests' tolerances) or a report was made.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from attnc_runtime.bundle import read_bundle
from attnc_sim.device import SimKernel, numpy_dtype


def random_inputs(manifest, dims: dict, rng) -> dict:
    out = {}
    for spec in manifest.inputs:
        shape = tuple(d if isinstance(d, int) else dims[d] for d in spec.shape)
        if spec.dtype == "i32":
            out[spec.name] = np.sort(rng.integers(0, 4, shape), axis=-1).astype(np.int32)
        else:
            out[spec.name] = rng.standard_normal(shape).astype(np.float32).astype(numpy_dtype(spec.dtype))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnc_sim", description=__doc__.split("\n\n")[1])
    ap.add_argument("bundle")
    for d in ("B", "H", "HKV", "M", "N"):
        ap.add_argument(f"--{d}", type=int)
    ap.add_argument("--dim", action="append", default=[], help="NAME=VALUE for another dim")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ctas", nargs="*", help="attention-kernel CTAs to run, as x,y,z (default: all)")
    ap.add_argument("--inputs", help="an .npz of inputs by name")
    ap.add_argument("--save", help="write the outputs to this .npz")
    ap.add_argument("--collect", action="store_true", help="collect race reports instead of stopping at the first")
    ap.add_argument("--quantum", type=int, default=64, help="mean instructions a warp runs before a switch (0: "
                                                          "switch at synchronization points only)")
    args = ap.parse_args(argv)
    bundle = read_bundle(args.bundle)
    manifest = bundle.manifest
    rng = np.random.default_rng(args.seed)
    if args.inputs:
        inputs = dict(np.load(args.inputs))
    else:
        dims = {d: getattr(args, d) for d in ("B", "H", "M", "N") if getattr(args, d) is not None}
        kv_heads = next((s[1] for s in (t.shape for t in manifest.inputs if t.role == "k")), None)
        if isinstance(kv_heads, str) and kv_heads not in dims:
            dims[kv_heads] = args.HKV or dims.get("H", 1)
        dims.update({k: int(v) for k, v in (x.split("=") for x in args.dim)})
        inputs = random_inputs(manifest, dims, rng)
        missing = [d for d in manifest.dims if d not in dims]
        if missing:
            ap.error(f"give sizes for dims {missing}")
        inputs.update({d: v for d, v in dims.items() if d not in {s for t in manifest.inputs for s in t.shape}})
    ctas = [tuple(int(x) for x in c.split(",")) for c in args.ctas] if args.ctas else None
    kernel = SimKernel(bundle, seed=args.seed, raise_reports=not args.collect, quantum=args.quantum)
    t0 = time.perf_counter()
    out = kernel(ctas=ctas, **inputs)
    seconds = time.perf_counter() - t0
    count = sum(launch.instructions for launch in kernel.last_launches)
    print(f"{manifest.variant} ({manifest.target}): {seconds:.2f} s, {count} warp instructions")
    for r in kernel.last_reports:
        print(f"report: {r}")
    if args.save:
        np.savez(args.save, **out)
    status = 1 if kernel.last_reports else 0
    try:
        from attnc.reference import reference
    except ImportError:
        print("attnc is not importable: no comparison with the reference")
        return status
    ref = reference(manifest.source, **{k: (v.astype(np.float32) if k in ("q", "k", "v") else v)
                                        for k, v in inputs.items()})
    for name, want in ref.items():
        got = out[name].astype(np.float64)
        row_mask = compared_rows(kernel.last_written[name])
        rows = np.broadcast_to(row_mask[..., None], got.shape) if row_mask.ndim < got.ndim else row_mask
        diff = np.abs(got - want)[rows]
        diff = np.where(np.isinf(want[rows]) & (got[rows] == want[rows]), 0.0, diff)
        tol = _ATOL[manifest.tensor(name).dtype] + _RTOL * np.abs(np.nan_to_num(want[rows], posinf=0, neginf=0))
        bad = int((~(diff <= tol)).sum())
        print(f"{name}: {int(row_mask.sum())} of {row_mask.size} rows compared, max |sim - reference| = "
              f"{np.nanmax(diff, initial=0.0):.3e}" + (f", {bad} elements over tolerance" if bad else ""))
        status = status or int(bad > 0)
    return status


# the GPU tests' tolerances (tests/gpu/gpu_support.py): o by its dtype, lse 2e-3 + 1e-5 relative
_ATOL = {"bf16": 3e-2, "f16": 5e-3, "f32": 2e-3}
_RTOL = 1e-5


def compared_rows(written: np.ndarray) -> np.ndarray:
    """The rows to compare: a row (b, h, i) of a 4-d output when the kernels wrote any of its
    elements (every element of it is then compared), an element of a smaller one."""
    return written.any(axis=-1) if written.ndim >= 4 else written


if __name__ == "__main__":
    sys.exit(main())
