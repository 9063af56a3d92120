"""GPU tests run from prebuilt bundles (design.md section 8).

`python tools/build_gpu_bundles.py` compiles them here into `.bundles/gpu/` (an
index.json lists them); on a machine with a GPU, torch and cuda-python,
`pytest -m gpu tests/gpu` loads them with `attnc_runtime` and compares with
`attnc.reference`. Without a GPU or without the bundles every test skips and
says why.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = Path(os.environ.get("ATTNC_GPU_BUNDLES", ROOT / ".bundles" / "gpu"))


def gpu_skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible"
    if not (BUNDLES / "index.json").exists():
        return f"no prebuilt bundles at {BUNDLES} (run tools/build_gpu_bundles.py)"
    return None


def bundle_index() -> list[dict]:
    path = BUNDLES / "index.json"
    return json.loads(path.read_text()) if path.exists() else []


def entries(suite: str) -> list[dict]:
    """The index entries of one suite (tools/build_gpu_bundles.py --suites ...)."""
    return [e for e in bundle_index() if e.get("suite") == suite]


def bundle_cases(suite: str, shapes):
    """pytest params (entry, m, n) for every bundle of `suite` and each (m, n) of
    `shapes(entry)`, grouped by bundle so that an xdist worker JITs each bundle once."""
    import pytest
    for entry in entries(suite) or [{"name": "no-bundles"}]:
        for m, n in shapes(entry):
            yield pytest.param(entry, m, n, id=f"{entry['name']}-M{m}-N{n}",
                               marks=pytest.mark.xdist_group(entry["name"]))


# --- inputs for any variant (numpy only: the CPU tests use these too) ---------------------

FILL_BY_DTYPE = {"f32": "uniform", "i32": "small_int"}


def _runs(rng, low: int, high: int, n: int):
    """Sorted ids whose runs have random lengths in [low, high] (ids need not be consecutive)."""
    import numpy as np
    ids, doc = [], 0
    while len(ids) < n:
        ids += [doc] * int(rng.integers(low, high + 1))
        doc += int(rng.integers(1, 3))
    return np.array(ids[:n])


def document_ids(kind: str, rng, batch: int, n: int):
    """[batch, n] document ids of a kind: "long" (runs of 450 .. 900: aligned tiles at
    block_m 64 and 128), "short" (runs of 1 .. 12: more tiles than the table holds, so
    the grid), "unsorted" (the grid), "one" (a single document) or "extreme" (long runs
    whose ids are sorted values of all of i32, its two ends included)."""
    import numpy as np
    if kind == "long":
        return np.stack([_runs(rng, 450, 900, n) for _ in range(batch)])
    if kind == "extreme":           # the runs' k-th document gets the k-th of sorted i32 values
        ends = [-2 ** 31, -2 ** 31 + 1, -1, 0, 2 ** 31 - 2, 2 ** 31 - 1]
        values = np.unique(np.concatenate([ends, rng.integers(-2 ** 31, 2 ** 31 - 1, 40)]))
        rows = []
        for _ in range(batch):
            rank = np.unique(_runs(rng, 450, 900, n), return_inverse=True)[1]
            last = max(int(rank.max()), 1)
            rows.append(values[rank * (len(values) - 1) // last])
        return np.stack(rows)
    if kind == "short":
        return np.stack([_runs(rng, 1, 12, n) for _ in range(batch)])
    if kind == "unsorted":
        return rng.integers(0, 3, (batch, n))
    if kind == "one":
        return np.zeros((batch, n), dtype=np.int64)
    raise ValueError(kind)


def fill_param(shape: tuple[int, ...], dtype: str, fill: str, rng):
    """A param's values (variant_gen.ParamSpec documents the fills); `alibi` is the
    usual slope schedule 2**(-8 (h + 1) / H) of a [H] param."""
    import numpy as np
    if fill == "uniform":
        values = rng.uniform(-1.0, 1.0, shape)
    elif fill == "alibi":
        values = np.broadcast_to(np.exp2(-8.0 * np.arange(1, shape[-1] + 1) / shape[-1]), shape)
    elif fill == "sorted_ids":
        values = np.sort(rng.integers(0, 4, shape), axis=-1)
    elif fill == "sorted_ids_tail":     # sorted_ids, and the last 4 positions a document of their own
        values = np.sort(rng.integers(0, 4, shape), axis=-1)
        values[..., -4:] = 4
    elif fill == "bits":
        values = (rng.random(shape) < 0.8).astype(np.int64)
    elif fill == "small_int":
        values = rng.integers(0, 8, shape)
    else:
        raise ValueError(f"unknown param fill {fill!r}")
    return np.ascontiguousarray(values, dtype=np.float32 if dtype == "f32" else np.int32)


def bind_sizes(variant, *, batch: int, heads: int, heads_kv: int, m: int, n: int, rng) -> dict[str, int]:
    """A size for every dim of `variant` (a frontend Variant): batch, heads and sequence
    lengths by their place in the q and k shapes (fixed numbers win), GQA as asked where the
    KV heads are a dim of their own, and the dims no tensor carries (`dim P`) at random in
    [1, N]."""
    sizes: dict[str, int] = {}

    def bind(entry, value: int) -> int:
        return entry if isinstance(entry, int) else sizes.setdefault(entry, value)

    q, k = variant.q.shape, variant.k.shape
    bind(q[0], batch)
    h = bind(q[1], heads)
    bind(k[1], heads_kv if heads_kv <= h and h % heads_kv == 0 else h)
    bind(q[2], m)
    seq_k = bind(k[2], n)
    for name in variant.dims:
        if name not in sizes:
            sizes[name] = int(rng.integers(1, seq_k + 1))
    return sizes


def make_case(variant, sizes: dict[str, int], fills: dict[str, str], rng) -> dict:
    """Inputs by DSL name for `variant`: q, k, v as float32 N(0, 1), each param filled as
    `fills` says (by dtype otherwise), and every dim that no input carries as an int."""
    import numpy as np

    def shape(t) -> tuple[int, ...]:
        return tuple(s if isinstance(s, int) else sizes[s] for s in t.shape)

    case = {t.name: rng.standard_normal(shape(t)).astype(np.float32) for t in (variant.q, variant.k, variant.v)}
    for p in variant.params:
        case[p.name] = fill_param(shape(p), p.dtype, fills.get(p.name, FILL_BY_DTYPE[p.dtype]), rng)
    carried = {s for t in variant.inputs for s in t.shape if isinstance(s, str)}
    case.update({d: sizes[d] for d in variant.dims if d not in carried})
    return case


# --- comparing with attnc.reference -----------------------------------------------------------

# |o| <= max |v| ~ 4 for N(0, 1) inputs; bf16 has 8 mantissa bits, fp16 11 (as in
# test_sm80_matrix.py). A score_mod adds its approximate math (tanh.approx is good to
# 2**-11 relative) to each score: f16 gets 1e-3 more. An o declared in a coarser dtype
# than q is rounded to it (f16 inputs, bf16 o: up to 2**-7 at |o| in [2, 4)), so the
# tolerance is the larger of the inputs' and the output's.
ATOL = {"bf16": 3e-2, "f16": 4e-3}
SCORE_MOD_ATOL = {"bf16": 3e-2, "f16": 5e-3}
LSE_ATOL, LSE_RTOL = 2e-3, 1e-5


def compare(variant, out: dict, ref: dict) -> list[str]:
    """What is wrong with the kernel's outputs (numpy arrays) against the reference: [] if nothing."""
    import numpy as np
    atol = max((SCORE_MOD_ATOL if variant.score_mod is not None else ATOL)[variant.dtype],
               ATOL.get(variant.output("o").dtype, 0.0))
    problems = []
    o = out["o"].astype(np.float64)
    if not np.isfinite(o).all():
        problems.append(f"o has {int((~np.isfinite(o)).sum())} NaN/inf")
    err = np.abs(o - ref["o"])
    if err.max(initial=0.0) > atol:
        at = np.unravel_index(int(np.nanargmax(err)), err.shape)
        problems.append(f"max |o - ref| = {err.max():.3e} > {atol:g} at [b, h, i, d] = {list(map(int, at))} "
                        f"({int((err > atol).sum())} elements over)")
    if "lse" in ref:
        lse, want = out["lse"].astype(np.float64), ref["lse"]
        finite = np.isfinite(want)
        if not (np.isneginf(lse) == ~finite).all():
            problems.append(f"lse: {int((np.isneginf(lse) != ~finite).sum())} rows disagree on being empty (-inf)")
        lse_err = np.nan_to_num(np.abs(lse[finite] - want[finite]), nan=np.inf)
        tol = LSE_ATOL + LSE_RTOL * np.abs(want[finite])
        if (lse_err > tol).any():
            problems.append(f"max |lse - ref| = {lse_err.max():.3e} ({int((lse_err > tol).sum())} rows over)")
    return problems


# --- one variant on the GPU against the reference -------------------------------------------

def skip_reason(entry: dict) -> str | None:
    """Why an index entry cannot run: no bundles at all, or the compiler refused it at build time."""
    if entry.get("name") == "no-bundles":
        return f"no bundles of this suite in {BUNDLES} (run tools/build_gpu_bundles.py)"
    if "refused" in entry:
        what = "crashed the compiler" if entry.get("crashed") else "was refused by the compiler"
        return f"{entry['name']} {what} at build time: {entry['refused'].strip().splitlines()[-1]}"
    return None


def run_against_reference(entry: dict, m: int, n: int, *, batch: int = 2, heads: int = 8,
                          heads_kv: int = 2, seed: int = 0, library: str = "torch",
                          adjust=None) -> tuple[list[str], dict, str]:
    """Launch the bundle of `entry` on random inputs of the given sizes and compare o (and
    lse) with attnc.reference; returns (problems, the sizes used, the variant's source).
    `library`: the inputs as torch tensors, or as cupy arrays launched on a cupy stream of
    their own (the outputs must then come back as cupy arrays). `adjust(case, sizes)`, if
    given, returns the inputs to use instead of the random ones."""
    import numpy as np

    import attnc
    import attnc_runtime
    from attnc.frontend import load

    kernel = attnc_runtime.load(BUNDLES / entry["path"])
    variant = load(kernel.manifest.source, f"{entry['name']}.attn")
    rng = np.random.default_rng(seed)
    sizes = bind_sizes(variant, batch=batch, heads=heads, heads_kv=heads_kv, m=m, n=n, rng=rng)
    case = make_case(variant, sizes, entry.get("fills", {}), rng)
    if adjust is not None:
        case = adjust(case, sizes)
    launch = _launch_cupy if library == "cupy" else _launch_torch
    ref_inputs, got, problems = launch(kernel, variant.dtype, case)
    ref = attnc.reference(variant, **ref_inputs)
    return problems + compare(variant, got, ref), sizes, variant.source


def _launch_torch(kernel, dtype: str, case: dict):
    """(the reference's inputs, the outputs as float32 numpy arrays, problems) of one launch
    on torch tensors."""
    import numpy as np
    import torch

    qkv_dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    args = {}
    for name, value in case.items():
        if name in ("q", "k", "v"):
            args[name] = torch.from_numpy(value).to(qkv_dtype).cuda()
        elif isinstance(value, np.ndarray):
            args[name] = torch.from_numpy(value).cuda()
        else:
            args[name] = value
    out = kernel(**args)
    torch.cuda.synchronize()
    ref_inputs = {name: (value.float().cpu().numpy() if name in ("q", "k", "v") else case[name])
                  for name, value in args.items()}
    return ref_inputs, {name: t.float().cpu().numpy() for name, t in out.items()}, []


def _launch_cupy(kernel, dtype: str, case: dict):
    """`_launch_torch` on cupy arrays (f16: cupy has no bf16), launched inside a non-blocking
    cupy stream, which the runtime must pick as its current stream."""
    import cupy
    import numpy as np
    from attnc_runtime.libraries import current_stream

    if dtype != "f16":
        raise ValueError(f"cupy has no {dtype} arrays")
    host = {name: value.astype(np.float16) if name in ("q", "k", "v") else value for name, value in case.items()}
    args = {name: cupy.asarray(value) if isinstance(value, np.ndarray) else value for name, value in host.items()}
    cupy.cuda.Device().synchronize()
    with cupy.cuda.Stream(non_blocking=True) as stream:
        runtime_stream = current_stream("cupy", cupy.cuda.Device().id)
        out = kernel(**args)
    stream.synchronize()
    problems = [f"{name} came back as {type(t).__module__}.{type(t).__name__}, not a cupy array"
                for name, t in out.items() if not isinstance(t, cupy.ndarray)]
    if runtime_stream != stream.ptr:
        problems.append(f"the runtime's stream is {runtime_stream:#x}, not the current cupy stream {stream.ptr:#x}")
    ref_inputs = {name: value.astype(np.float32) if name in ("q", "k", "v") else value
                  for name, value in host.items()}
    return ref_inputs, {name: cupy.asnumpy(t).astype(np.float32) for name, t in out.items()}, problems


def check_against_reference(entry: dict, m: int, n: int, *, seed: int, label: str = "",
                            library: str = "torch") -> None:
    """The body of a GPU test of one bundle at one shape: skip an entry that cannot run
    (`skip_reason`), else fail with every problem, the sizes and the variant's source
    when its outputs differ from the reference's."""
    import pytest

    reason = skip_reason(entry)
    if reason:
        pytest.skip(reason)
    problems, sizes, source = run_against_reference(entry, m, n, seed=seed, library=library)
    assert not problems, (f"{label or entry['name']} at {sizes}:\n  " + "\n  ".join(problems)
                          + "\n" + source)
