"""Run a bundle on random inputs, check it against the reference, and time it.

    python -m attnc_runtime.run BUNDLE [--B 2 --H 8 --M 1024 --N 1024 ...] [--iters 20]

Inputs are built with torch on the GPU: q, k, v from a standard normal; f32
params uniform in [-1, 1); i32 params (document ids and the like) small
non-decreasing ints along their last axis. When `attnc.reference` is importable
(the frontend imports without MLIR), the outputs are compared with it; the
tolerances follow the input dtype. The time is the mean of `--iters` launches
after `--warmup` ones, with CUDA events; TFLOP/s counts 2*B*H*M*N*(Dqk + Dv)
times `--kept-fraction` (dense when not given). A bundle with a block map is timed
twice: whole launches, and launches that reuse the map the first one built. Exit
status: 0 pass (or not checked), 1 mismatch, 2 refused.

torch is used here only: the rest of the runtime does not need it.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys

import numpy as np

from attnc_runtime.bundle import read_bundle
from attnc_runtime.errors import AttncRuntimeError
from attnc_runtime.kernel import Kernel
from attnc_runtime.manifest import Manifest, TensorSpec

DEFAULT_DIMS = {"B": 2, "H": 8, "HKV": 2, "M": 1024, "N": 1024}
TOLERANCES = {"bf16": (2e-2, 2e-2), "f16": (5e-3, 5e-3), "f32": (1e-4, 1e-4)}   # (atol, rtol)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        path = _bundle_argument(argv)
        bundle = read_bundle(path) if path else None
        args = _parser(bundle.manifest if bundle else None).parse_args(argv)
        return _run(Kernel(bundle), args)
    except AttncRuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


_FLAGS = ("--no-check", "-h", "--help")        # the options that take no value


def _bundle_argument(argv: list[str]) -> str | None:
    """The bundle folder, wherever it stands among the options (which the bundle's dims
    decide, so no parser knows them all before it is read): the first word that is
    neither an option nor an option's value."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return argv[i + 1] if i + 1 < len(argv) else None
        if word.startswith("-") and len(word) > 1:
            i += 1 if word in _FLAGS or "=" in word else 2
            continue
        return word
    return None


def _parser(manifest: Manifest | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m attnc_runtime.run", description=__doc__.split("\n")[0])
    parser.add_argument("bundle", help="a bundle folder (manifest.json + code objects)")
    parser.add_argument("--iters", type=int, default=20, help="timed launches (0: no timing)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    parser.add_argument("--no-check", action="store_true", help="skip the reference comparison")
    parser.add_argument("--atol", type=float, help="override the dtype's absolute tolerance")
    parser.add_argument("--rtol", type=float, help="override the dtype's relative tolerance")
    parser.add_argument("--kept-fraction", type=float,
                        help="fraction of (i, j) pairs the mask keeps, for TFLOP/s (default: 1)")
    for dim in manifest.dims if manifest else ():
        default = DEFAULT_DIMS.get(dim)
        read = dim in manifest.read_dims
        parser.add_argument(f"--{dim}", type=int, default=default, required=default is None and read,
                            help=f"dim {dim}" + (f" (default {default})" if default else "")
                            + ("" if read else " (read by nothing: optional)"))
    return parser


def _run(kernel: Kernel, args: argparse.Namespace) -> int:
    try:
        import torch
    except ImportError:
        raise AttncRuntimeError("python -m attnc_runtime.run builds its inputs with torch, "
                                "which is not installed") from None
    with torch.cuda.device(args.device):        # the current stream and the timing events there
        return _run_on(torch, kernel, args)


def _run_on(torch, kernel: Kernel, args: argparse.Namespace) -> int:
    manifest = kernel.manifest
    dims = {d: getattr(args, d) for d in manifest.dims if getattr(args, d) is not None}
    torch.manual_seed(args.seed)
    device = torch.device("cuda", args.device)
    inputs = {t.name: _random_input(torch, t, dims, device) for t in manifest.inputs}
    scalars = {d: dims[d] for d in manifest.scalar_dims if d in dims}
    outputs = kernel(**inputs, **scalars)
    torch.cuda.synchronize(device)
    print(f"{manifest.variant} ({manifest.target}, {kernel.bundle.path}): "
          + ", ".join(f"{d}={v}" for d, v in dims.items()))
    status = 0 if args.no_check else _check(torch, manifest, inputs, scalars, outputs, args)
    if args.iters > 0:
        _time(torch, kernel, inputs, scalars, outputs, dims, args)
    return status


def _random_input(torch, spec: TensorSpec, dims: dict, device):
    shape = tuple(_size(s, dims) for s in spec.shape)
    if spec.role in ("q", "k", "v"):
        dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[spec.dtype]
        return torch.randn(shape, dtype=dtype, device=device)
    if spec.dtype == "i32":
        high = max(2, (shape[-1] if shape else 1) // 512)
        ids = torch.randint(0, high, shape, dtype=torch.int32, device=device)
        return ids.sort(dim=-1).values if shape else ids
    return torch.rand(shape, dtype=torch.float32, device=device) * 2 - 1


def _size(entry, dims: dict) -> int:
    return entry if isinstance(entry, int) else dims[entry]


def _check(torch, manifest: Manifest, inputs: dict, scalars: dict, outputs: dict, args) -> int:
    if importlib.util.find_spec("attnc") is None or importlib.util.find_spec("attnc.reference") is None:
        print("check: skipped (attnc.reference is not importable here)")
        return 0
    import attnc
    host = {name: t.float().cpu().numpy() if t.is_floating_point() else t.cpu().numpy()
            for name, t in inputs.items()}
    expected = attnc.reference(manifest.source, **host, **scalars)
    atol, rtol = TOLERANCES[manifest.role("q").dtype]
    atol = args.atol if args.atol is not None else atol
    rtol = args.rtol if args.rtol is not None else rtol
    status = 0
    for name, tensor in outputs.items():
        got = tensor.float().cpu().numpy().astype(np.float64)
        want = np.asarray(expected[name], dtype=np.float64)
        ok, err = compare(got, want, atol, rtol)
        print(f"check {name}: max abs error {err:.3e} (atol {atol:g}, rtol {rtol:g}): "
              + ("PASS" if ok else "FAIL"))
        status |= 0 if ok else 1
    return status


def compare(got: np.ndarray, want: np.ndarray, atol: float, rtol: float) -> tuple[bool, float]:
    """(all close, max abs error); equal infinities count as exact, a NaN anywhere as a failure."""
    if got.shape != want.shape:
        return False, float("inf")
    with np.errstate(invalid="ignore"):
        same = got == want
        err = np.nan_to_num(np.where(same, 0.0, np.abs(got - want)), nan=np.inf)
    ok = bool(np.all(same | (np.isfinite(want) & (err <= atol + rtol * np.abs(want)))))
    return ok, float(err.max()) if err.size else 0.0


def _time(torch, kernel: Kernel, inputs: dict, scalars: dict, outputs: dict, dims: dict, args) -> None:
    bound = kernel.bind(**inputs, **scalars, **outputs)
    ms = _mean_ms(torch, bound.launch, args)
    reused = None
    if kernel.manifest.mask_kernels:      # Note [Reused masks] (kernel.py): the map built once
        reused = _mean_ms(torch, lambda: bound.launch(reuse_mask=True), args)
    manifest = kernel.manifest
    d_qk, d_v = manifest.role("q").shape[-1], manifest.role("v").shape[-1]
    b, h, m = (_size(s, dims) for s in manifest.role("q").shape[:3])
    n = _size(manifest.role("k").shape[2], dims)
    kept = args.kept_fraction if args.kept_fraction is not None else 1.0
    flops = 2 * b * h * m * n * (d_qk + d_v) * kept
    label = "dense" if args.kept_fraction is None else f"kept fraction {kept:g}"
    print(f"time: {ms:.4f} ms (mean of {args.iters} after {args.warmup} warm-up), "
          f"{flops / ms / 1e9:.1f} TFLOP/s ({label})")
    if reused is not None:
        print(f"time with the block map reused (launch(reuse_mask=True)): {reused:.4f} ms, "
              f"{flops / reused / 1e9:.1f} TFLOP/s")


def _mean_ms(torch, launch, args) -> float:
    for _ in range(args.warmup):
        launch()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.iters):
        launch()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / args.iters


if __name__ == "__main__":
    sys.exit(main())
