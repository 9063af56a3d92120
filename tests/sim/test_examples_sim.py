"""Every example, compiled for sm_80, sm_90a and sm_100a, run in the PTX emulator (attnc_sim)
at a small ragged shape -- M != N, neither a multiple of the tiles, GQA (one KV head for two
query heads) where the variant has a KV-head dim -- against attnc.reference, with the GPU
tests' tolerances (tests/gpu/gpu_support.py). The whole grid of every kernel runs, the
mask kernels (block map, tile table) first; zero race or protocol reports are allowed."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import attnc
from attnc.frontend import load_file
from attnc.testing import ptx_bundle
from attnc_sim.device import SimKernel, numpy_dtype
from tests.gpu.gpu_support import ATOL, SCORE_MOD_ATOL, bind_sizes, compare, make_case

EXAMPLES = sorted(Path(__file__).resolve().parents[2].joinpath("examples").glob("*.attn"))
ARCHS = ("sm_80", "sm_90a", "sm_100a")
# docs_sink's document ids are indexed by query and key position alike: M <= N there
SHAPES = {"docs_sink": (45, 70)}
CASES = [pytest.param(example, arch, id=f"{example.stem}-{arch}") for example in EXAMPLES for arch in ARCHS]


@pytest.fixture(scope="session")
def bundles():
    """PTX bundles by (example, arch), built once per session."""
    cache = {}

    def get(path: Path, arch: str):
        if (path, arch) not in cache:
            cache[path, arch] = ptx_bundle(path, arch=arch)
        return cache[path, arch]
    return get


@pytest.mark.parametrize("example,arch", CASES)
def test_example_in_emulator(bundles, example, arch):
    variant = load_file(str(example))
    rng = np.random.default_rng(7)
    m, n = SHAPES.get(example.stem, (70, 45))
    sizes = bind_sizes(variant, batch=1, heads=2, heads_kv=1, m=m, n=n, rng=rng)
    case = make_case(variant, sizes, {}, rng)
    kernel, out, ref = emulated(bundles(example, arch), variant, case)
    assert kernel.last_reports == []
    problems = compare(variant, out, ref)
    assert problems == [], f"{example.stem} {arch}: {problems}"


def typed_inputs(bundle, case: dict) -> dict:
    """A case's arrays in the dtypes the bundle's manifest declares."""
    return {name: (value.astype(numpy_dtype(bundle.manifest.tensor(name).dtype))
                   if isinstance(value, np.ndarray) else value) for name, value in case.items()}


def emulated(bundle, variant, case: dict, seed: int = 1, device=None):
    """(the SimKernel, its outputs, the reference's) of one whole run of `case` (on `device`,
    a SimDevice: by default an H200's multiprocessors)."""
    kernel = SimKernel(bundle, device, seed=seed)
    out = kernel(**typed_inputs(bundle, case))
    ref = attnc.reference(variant, **{k: (v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype.kind == "V"
                                          else v) for k, v in case.items()})
    return kernel, out, ref


def _case(example: Path, bundle, seed: int = 7):
    variant = load_file(str(example))
    rng = np.random.default_rng(seed)
    m, n = SHAPES.get(example.stem, (70, 45))
    sizes = bind_sizes(variant, batch=1, heads=2, heads_kv=1, m=m, n=n, rng=rng)
    case = make_case(variant, sizes, {}, rng)
    return variant, case, typed_inputs(bundle, case)


@pytest.mark.parametrize("seed", [2, 3])
@pytest.mark.parametrize("example,arch", CASES)
def test_example_clean_under_other_seeds(bundles, example, arch, seed):
    """The first CTA of every example (the whole grid where that CTA has no work: a tile
    table's order) under other seeds and short slices (warps switching every 1..32
    instructions): no report, and the rows written match the reference."""
    bundle = bundles(example, arch)
    variant, case, inputs = _case(example, bundle)
    kernel = SimKernel(bundle, seed=seed, quantum=16, raise_reports=False)
    out = kernel(**inputs, ctas=[(0, 0, 0)])
    if not kernel.last_written["o"].any():
        out = kernel(**inputs)
    assert kernel.last_reports == []
    ref = attnc.reference(variant, **{k: (v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype.kind == "V"
                                          else v) for k, v in case.items()})
    rows = kernel.last_written["o"].any(axis=-1)
    assert rows.any()
    err = np.abs(out["o"].astype(np.float64) - ref["o"])[rows]
    assert err.max() <= max(ATOL[variant.dtype], SCORE_MOD_ATOL[variant.dtype])


def test_seeds_change_the_interleaving_not_the_outputs(bundles):
    """Two seeds schedule the warps differently (the recorded (CTA, warp, pc) of every slice)
    and compute bitwise the same outputs."""
    example = EXAMPLES[[p.stem for p in EXAMPLES].index("mha")]
    bundle = bundles(example, "sm_80")
    _, _, inputs = _case(example, bundle)
    runs = []
    for seed in (1, 2):
        kernel = SimKernel(bundle, seed=seed, record=True)
        runs.append((kernel(**inputs, ctas=[(0, 0, 0)]), kernel.last_scheduler.trace))
    (out1, trace1), (out2, trace2) = runs
    assert trace1 != trace2 and len(trace1) > 10
    assert out1["o"].tobytes() == out2["o"].tobytes()

