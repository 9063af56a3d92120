"""python -m attnc_sim BUNDLE --B 1 --H 2 --M 200 --N 333 [--HKV 1] [--seed 0] [--ctas 0,0,0 1,0,0]
                     [--quantum 64] [--inputs in.npz] [--save out.npz] [--collect]

Runs the bundle in the emulator on random inputs (or the arrays of --inputs, by name),
saves the outputs (--save), and compares them with attnc.reference when attnc is
importable. Prints the time, the instruction count and any race or protocol reports.
With --ctas, only the rows the chosen CTAs wrote are compared (a row of o: its head-dim
elements; of lse: one element), and their count is printed. Exit status 1 when the outputs
disagree with the reference (beyond the GPU tests' tolerances), a report was made, or the
launch stopped (without --collect the first report stops it, as a fault or a deadlock does).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from attnc_runtime.bundle import read_bundle
from attnc_runtime.errors import AttncRuntimeError
from attnc_sim.device import SimKernel, numpy_dtype
from attnc_sim.errors import SimError


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
        ap.add_argument(f"--{d}", type=_count)
    ap.add_argument("--dim", action="append", default=[], type=_dim_arg, metavar="NAME=VALUE",
                    help="the size of another dim (one no input shape carries, such as a prefix length)")
    ap.add_argument("--seed", type=_count, default=0)
    ap.add_argument("--ctas", nargs="*", type=_cta_arg, help="attention-kernel CTAs to run, as x,y,z (default: all)")
    ap.add_argument("--inputs", help="an .npz of inputs by name (floats are rounded to the declared dtype; bf16 "
                                     "may be float32 or 2-byte raw; the outputs' arrays are left out)")
    ap.add_argument("--save", help="write the outputs to this .npz (bf16 as float32, which holds them exactly)")
    ap.add_argument("--collect", action="store_true", help="collect race reports instead of stopping at the first")
    ap.add_argument("--quantum", type=_count, default=64, help="mean instructions a warp runs before a switch (0: "
                                                          "switch at synchronization points only)")
    args = ap.parse_args(argv)
    try:
        return _run(ap, args)
    except AttncRuntimeError as e:
        print(f"python -m attnc_sim: error: {e}", file=sys.stderr)
        return 2
    except SimError as e:       # the first report (without --collect), a fault or a deadlock
        print(f"python -m attnc_sim: the launch stopped: {e}", file=sys.stderr)
        return 1


def _run(ap, args) -> int:
    bundle = read_bundle(args.bundle)
    manifest = bundle.manifest
    rng = np.random.default_rng(args.seed)
    scalar = dict(args.dim)
    unknown = sorted(set(scalar) - set(manifest.dims))
    if unknown:
        ap.error(f"--dim: the bundle has no dim {unknown[0]} (its dims: {', '.join(manifest.dims)})")
    if args.inputs:
        inputs = _saved(manifest, args.inputs)
    else:
        dims = {d: getattr(args, d) for d in ("B", "H", "M", "N") if getattr(args, d) is not None}
        q_heads, kv_heads = manifest.role("q").shape[1], manifest.role("k").shape[1]
        if isinstance(kv_heads, str) and kv_heads != q_heads:      # k's own heads: --HKV, else q's
            if kv_heads not in dims:
                dims[kv_heads] = dims.get(q_heads, 1) if args.HKV is None else args.HKV
        elif args.HKV is not None:
            ap.error(f"--HKV: {manifest.variant}'s k has q's heads, {q_heads}" if kv_heads == q_heads else
                     f"--HKV: {manifest.variant}'s k has {kv_heads} head{'s' * (kv_heads != 1)}")
        for d, value in scalar.items():
            if dims.get(d, value) != value:
                ap.error(f"--dim {d}={value}: {d} is also given as {dims[d]}")
        dims.update(scalar)
        shaped = {s for t in manifest.inputs for s in t.shape if isinstance(s, str)}
        missing = sorted(d for d in manifest.dims if d not in dims and (d in shaped or d in manifest.read_dims))
        if missing:
            ap.error(f"give sizes for dims {missing} (--B, --H, --M, --N, or --dim NAME=VALUE)")
        inputs = random_inputs(manifest, dims, rng)
    inputs.update({d: v for d, v in scalar.items() if d in manifest.scalar_dims})
    kernel = SimKernel(bundle, seed=args.seed, raise_reports=not args.collect, quantum=args.quantum)
    t0 = time.perf_counter()
    out = kernel(ctas=args.ctas or None, **inputs)
    seconds = time.perf_counter() - t0
    count = sum(launch.instructions for launch in kernel.last_launches)
    print(f"{manifest.variant} ({manifest.target}): {seconds:.2f} s, {count} warp instructions")
    for r in kernel.last_reports:
        print(f"report: {r}")
    if args.save:
        np.savez(args.save, **{k: (v.astype(np.float32) if v.dtype.name == "bfloat16" else v)
                               for k, v in out.items()})
    status = 1 if kernel.last_reports else 0
    try:
        from attnc.reference import reference
    except ImportError:
        print("attnc is not importable: no comparison with the reference")
        return status
    ref = reference(manifest.source, **{k: (v.astype(np.float32) if k in ("q", "k", "v") else v)
                                        for k, v in inputs.items()})
    q_dtype = manifest.role("q").dtype
    for name, want in ref.items():
        got = out[name].astype(np.float64)
        row_mask = compared_rows(kernel.last_written[name])
        rows = np.broadcast_to(row_mask[..., None], got.shape) if row_mask.ndim < got.ndim else row_mask
        with np.errstate(invalid="ignore"):         # -inf - -inf: equal infinities, set to 0 below
            diff = np.abs(got - want)[rows]
        diff = np.where(np.isinf(want[rows]) & (got[rows] == want[rows]), 0.0, diff)
        # o: the larger of the inputs' and its own dtype's (P is rounded to the inputs' dtype)
        atol = _ATOL[manifest.tensor(name).dtype] if name == "lse" else \
            max(_ATOL[q_dtype], _ATOL[manifest.tensor(name).dtype])
        tol = atol + _RTOL * np.abs(np.nan_to_num(want[rows], posinf=0, neginf=0))
        bad = int((~(diff <= tol)).sum())
        print(f"{name}: {int(row_mask.sum())} of {row_mask.size} rows compared, max |sim - reference| = "
              f"{np.max(diff, initial=0.0):.3e}" + (f", {bad} elements over tolerance" if bad else ""))
        status = status or int(bad > 0)
    return status


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an int >= 0")
    return value


def _dim_arg(text: str) -> tuple[str, int]:
    name, eq, value = text.partition("=")
    try:
        if not eq or not name:
            raise ValueError
        return name, _count(value)
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE, VALUE an int >= 0") from None


def _saved(manifest, path: str) -> dict:
    """The inputs saved in the .npz `path`, by name, in their declared dtypes; arrays of the
    bundle's outputs are left out (the launch allocates its outputs)."""
    try:
        with np.load(path) as saved:
            arrays = {name: saved[name] for name in saved.files}
    except (OSError, ValueError) as e:      # no such file, not an .npz, object arrays (pickles)
        raise AttncRuntimeError(f"--inputs {path}: {e}") from None
    outputs = sorted(set(arrays) & {t.name for t in manifest.outputs})
    if outputs:
        print(f"--inputs: {', '.join(outputs)} left out (outputs: the launch allocates them)")
    return {name: _declared(manifest, name, a) for name, a in arrays.items() if name not in outputs}


def _cta_arg(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected x,y,z (ints)") from None


def _declared(manifest, name: str, array: np.ndarray) -> np.ndarray:
    """A saved input in its declared dtype: bf16 from 2-byte raw (numpy saves ml_dtypes'
    bf16 so) or from floats, f16 from floats (rounded), i32 from ints in its range; any
    other pair is left to the launch's checks to refuse."""
    names = {t.name: t for t in manifest.tensors}
    if name not in names:
        return array                    # the launch names what it does not take
    dtype = names[name].dtype
    if dtype == "bf16" and array.dtype.kind == "V" and array.dtype.itemsize == 2:
        return array.view(numpy_dtype("bf16"))
    if dtype in ("bf16", "f16", "f32") and array.dtype.kind == "f":
        return array.astype(numpy_dtype(dtype))
    if dtype == "i32" and array.dtype.kind in "iu" and array.size:
        if array.min() < -2**31 or array.max() >= 2**31:
            raise AttncRuntimeError(f"{name}: i32 holds {array.min()} to {array.max()}, outside its range")
        return array.astype(np.int32)
    return array


# the GPU tests' tolerances (tests/gpu/gpu_support.py): o by its dtype, lse 2e-3 + 1e-5 relative
_ATOL = {"bf16": 3e-2, "f16": 5e-3, "f32": 2e-3}
_RTOL = 1e-5


def compared_rows(written: np.ndarray) -> np.ndarray:
    """The rows to compare: a row (b, h, i) of a 4-d output when the kernels wrote any of its
    elements (every element of it is then compared), an element of a smaller one."""
    return written.any(axis=-1) if written.ndim >= 4 else written


if __name__ == "__main__":
    sys.exit(main())
