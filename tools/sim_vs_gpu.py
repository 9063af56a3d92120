"""The emulator against the GPU: the same bundles on the same inputs, on both.

    # here: the bundles (tools/build_gpu_bundles.py), packed with this script's choice of them
    python tools/build_gpu_bundles.py --out .bundles/sim --suites examples,property \\
        --property-count 48 --archs sm_80,sm_90a --pack .bundles/sim.tar.xz
    # on the GPU machine (runtime/, the frontend and lark importable):
    python3 tools/sim_vs_gpu.py gpu --bundles .bundles/sim --out gpu_runs
    # here again: every bundle of the file through the emulator, compared with the GPU's
    # outputs and with attnc.reference
    python tools/sim_vs_gpu.py compare --bundles .bundles/sim --runs gpu_runs_*.npz

The GPU step draws each bundle's inputs (tests/gpu/gpu_support.make_case at one ragged
shape), rounds q, k and v to the bundle's dtype, launches, and stores the inputs and the
outputs; the compare step feeds the emulator exactly those inputs. Agreement is read in
units in the last place of the output's dtype for o (at most `--o-ulps`, default 2) and
relatively for lse (at most `--lse-rtol`, default 1e-5); both sides are also held to the
GPU tests' tolerances against the reference.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime"), str(ROOT / "tests" / "gpu")]

import gpu_support  # noqa: E402

# One ragged shape: rows and keys not multiples of any tile, one KV head for two query
# heads (GQA wherever the variant's shapes allow it). Square variants (one document id per
# position) take M = N.
SHAPE = {"batch": 1, "heads": 2, "heads_kv": 1, "m": 150, "n": 97}
SQUARE_MN = 150
# The examples at two points of the space: bf16 at head dim 128 and f16 at head dim 64.
EXAMPLE_FORMS = ("bf16_d128x128", "bf16_d128x64", "f16_d64x64", "f16_d64x128")


def chosen(index: list[dict], property_count: int) -> list[dict]:
    """Every example in EXAMPLE_FORMS (its default choices) and the first `property_count`
    property variants, for each target the folder holds."""
    picked = []
    for entry in index:
        if "refused" in entry:
            continue
        name = entry["name"].removesuffix("_sm90a")
        if entry.get("suite") == "examples" and any(name.endswith(form) for form in EXAMPLE_FORMS):
            picked.append(entry)
        elif entry.get("suite") == "property" and entry.get("seed", property_count) < property_count:
            picked.append(entry)
    return picked


def case_for(entry: dict, variant, seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    shape = dict(SHAPE)
    if entry.get("square"):
        shape["m"] = shape["n"] = SQUARE_MN
    sizes = gpu_support.bind_sizes(variant, rng=rng, **shape)
    return gpu_support.make_case(variant, sizes, entry.get("fills", {}), rng), sizes


def _variant(bundle_path: Path):
    from attnc.frontend import load as load_variant
    manifest = json.loads((bundle_path / "manifest.json").read_text())
    return load_variant(manifest["source"], f"{manifest.get('name', bundle_path.name)}.attn")


SHARD_BYTES = 14 << 20           # the device machine sends files of at most 16 MiB back


def _bits(t) -> np.ndarray:
    """A torch tensor's values as numpy: 16-bit floats as their raw bits (half the bytes of
    float32, and exact), anything else as it is."""
    import torch
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.cpu().view(torch.int16).numpy().view(np.uint16)
    return t.cpu().numpy()


def _values(bits: np.ndarray, dtype: str) -> np.ndarray:
    """`_bits`' inverse, as float32 for 16-bit floats."""
    if bits.dtype != np.uint16:
        return bits
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def cmd_gpu(args) -> int:
    import torch

    import attnc_runtime
    bundles = Path(args.bundles)
    index = json.loads((bundles / "index.json").read_text())
    shard: dict[str, np.ndarray] = {}
    shards, names = 0, []

    def flush():
        nonlocal shard, shards
        if shard:
            np.savez(f"{args.out}_{shards}.npz", **shard)
            shard, shards = {}, shards + 1

    for entry in chosen(index, args.property_count):
        path = bundles / entry["path"]
        variant = _variant(path)
        case, sizes = case_for(entry, variant, args.seed)
        qkv = {"bf16": torch.bfloat16, "f16": torch.float16}[variant.dtype]
        launch = {}
        for name, value in case.items():
            if name in ("q", "k", "v"):
                launch[name] = torch.from_numpy(value).to(qkv).cuda()
            elif isinstance(value, np.ndarray):
                launch[name] = torch.from_numpy(value).cuda()
            else:
                launch[name] = value
        out = attnc_runtime.load(path)(**launch)
        torch.cuda.synchronize()
        key = entry["name"]
        names.append(key)
        record = {f"{key}/in/{name}": (_bits(value) if torch.is_tensor(value) else np.asarray(value))
                  for name, value in launch.items()}
        record.update({f"{key}/out/{name}": _bits(value) for name, value in out.items()})
        if sum(a.nbytes for a in shard.values()) + sum(a.nbytes for a in record.values()) > SHARD_BYTES:
            flush()
        shard.update(record)
        print(f"{key}: {sizes}", flush=True)
    flush()
    print(f"{len(names)} bundles run on {torch.cuda.get_device_name()}; wrote {shards} files {args.out}_*.npz")
    return 0


def ulps(got: np.ndarray, want: np.ndarray, dtype: str) -> np.ndarray:
    """|got - want| in units in the last place of `dtype` at want's magnitude."""
    mantissa = {"bf16": 7, "f16": 10, "f32": 23}[dtype]
    tiny = {"bf16": 2.0 ** -126, "f16": 2.0 ** -14, "f32": 2.0 ** -126}[dtype]
    scale = np.maximum(np.abs(want.astype(np.float64)), tiny)
    ulp = 2.0 ** (np.floor(np.log2(scale)) - mantissa)
    return np.abs(got.astype(np.float64) - want.astype(np.float64)) / ulp


def _as_declared(inputs: dict, dtype: str) -> dict:
    """q, k and v in their declared dtype, as the emulator takes them (bf16: ml_dtypes')."""
    import ml_dtypes
    numpy_dtype = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}[dtype]
    return {k: (v.astype(numpy_dtype) if k in ("q", "k", "v") else v) for k, v in inputs.items()}


def cmd_compare(args) -> int:
    import attnc
    import attnc_runtime
    bundles = Path(args.bundles)
    runs = {}
    for path in args.runs:
        with np.load(path) as shard:
            runs.update({name: shard[name] for name in shard.files})
    index = {e["name"]: e for e in json.loads((bundles / "index.json").read_text())}
    rows, failed = [], 0
    for key in dict.fromkeys(name.split("/")[0] for name in runs):
        if args.only and not any(part in key for part in args.only.split(",")):
            continue
        if key not in index:
            print(f"{key}: not in {bundles}, left out", flush=True)
            continue
        path = bundles / index[key]["path"]
        variant = _variant(path)
        if "ptx" not in json.loads((path / "manifest.json").read_text())["code"]:
            print(f"{key}: the bundle has no PTX to emulate, left out", flush=True)
            continue
        inputs = {k.split("/")[-1]: runs[k] for k in runs if k.startswith(f"{key}/in/")}
        inputs = {k: (int(v) if v.ndim == 0 else _values(v, variant.dtype)) for k, v in inputs.items()}
        gpu = {k.split("/")[-1]: _values(runs[k], variant.output(k.split("/")[-1]).dtype)
               for k in runs if k.startswith(f"{key}/out/")}
        start = time.perf_counter()
        sim = attnc_runtime.load(path, device="sim")(**_as_declared(inputs, variant.dtype))
        seconds = time.perf_counter() - start
        sim = {k: np.asarray(v, dtype=np.float32) for k, v in sim.items()}
        ref = attnc.reference(variant, **inputs)
        o_ulps = float(ulps(sim["o"], gpu["o"], variant.output("o").dtype).max(initial=0.0))
        problems = []
        if o_ulps > args.o_ulps:
            problems.append(f"o differs from the GPU's by {o_ulps:.0f} ulp")
        lse_rel = 0.0
        if "lse" in gpu:
            finite = np.isfinite(gpu["lse"])
            if not (np.isfinite(sim["lse"]) == finite).all():
                problems.append("lse: rows disagree on being empty")
            rel = np.abs(sim["lse"][finite] - gpu["lse"][finite]) / np.maximum(np.abs(gpu["lse"][finite]), 1e-30)
            lse_rel = float(rel.max(initial=0.0))
            if lse_rel > args.lse_rtol:
                problems.append(f"lse differs from the GPU's by {lse_rel:.2e} relative")
        problems += [f"emulator: {p}" for p in gpu_support.compare(variant, sim, ref)]
        problems += [f"GPU: {p}" for p in gpu_support.compare(variant, gpu, ref)]
        failed += bool(problems)
        rows.append((key, o_ulps, lse_rel, seconds, problems))
        status = "ok" if not problems else "; ".join(problems)
        print(f"{key}: o {o_ulps:.0f} ulp, lse {lse_rel:.1e}, {seconds:.1f} s: {status}", flush=True)
    worst_o = max((r[1] for r in rows), default=0.0)
    worst_lse = max((r[2] for r in rows), default=0.0)
    print(f"{len(rows) - failed} agreed, {failed} differed; largest o difference {worst_o:.0f} ulp, "
          f"largest lse difference {worst_lse:.2e} relative")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    gpu = sub.add_parser("gpu", help="run the chosen bundles on the GPU, store inputs and outputs")
    gpu.add_argument("--bundles", required=True)
    gpu.add_argument("--out", required=True, help="a path prefix: files PREFIX_0.npz, PREFIX_1.npz, ...")
    gpu.add_argument("--property-count", type=int, default=48)
    gpu.add_argument("--seed", type=int, default=0)
    cmp = sub.add_parser("compare", help="run the same bundles in the emulator and compare")
    cmp.add_argument("--bundles", required=True)
    cmp.add_argument("--runs", required=True, nargs="+", help="the gpu step's .npz files")
    cmp.add_argument("--only", help="comma-separated substrings of the bundle names to compare")
    cmp.add_argument("--o-ulps", type=float, default=2.0)
    cmp.add_argument("--lse-rtol", type=float, default=1e-5)
    args = ap.parse_args(argv)
    return cmd_gpu(args) if args.cmd == "gpu" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
