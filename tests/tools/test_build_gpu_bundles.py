"""tools/build_gpu_bundles.py and the GPU tests' helpers (tests/gpu/gpu_support.py), without
a GPU: the examples' rewriting, PTX-only bundles, refusals reported and never dropped,
inputs for any variant and the comparison with the reference."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "tests" / "gpu")]

import build_gpu_bundles as builder        # noqa: E402
import gpu_support                         # noqa: E402
import attnc                               # noqa: E402
from attnc.frontend import load, load_file  # noqa: E402

EXAMPLES = sorted((ROOT / "examples").glob("*.attn"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_are_rewritten_to_each_dtype_and_head_dim(path):
    original = load_file(path)
    for job in (j for j in builder.example_jobs() if j.meta["example"] == path.stem):
        v = load(job.source)
        d_qk, d_v = job.meta["head_dim"]
        assert (v.dtype, v.head_dim_qk, v.head_dim_v) == (job.meta["dtype"], d_qk, d_v)
        assert v.output("o").dtype == job.meta["dtype"]
        assert v.q.shape[:3] == original.q.shape[:3] and v.k.shape[:3] == original.k.shape[:3]
        assert [p.name for p in v.params] == [p.name for p in original.params]
        assert (v.score_mod is None, v.mask_mod is None, v.sink is None) == \
            (original.score_mod is None, original.mask_mod is None, original.sink is None)


def test_every_example_gets_both_dtypes_and_two_head_dim_pairs():
    jobs = builder.example_jobs()
    assert len(jobs) == 8 * len(EXAMPLES) + 4 * len(builder.RANGES_BOTH_WAYS) + 4 * len(builder.TILES_LAST)
    assert len({j.name for j in jobs}) == len(jobs)
    diff = {tuple(j.meta["head_dim"]) for j in jobs if j.meta["example"] == "diff_head_dims"}
    assert diff == {(128, 64), (64, 128)}


def test_every_example_also_runs_with_the_other_kernel_choices():
    """Each example's second job differs only by asking for attn-kernel-choices' other
    choices, which the builder resolves from the default spec."""
    jobs = [j for j in builder.example_jobs() if not j.meta.get("flip_ranges") and not j.meta.get("tiles_last")]
    for a, b in zip(jobs[0::2], jobs[1::2]):
        assert b.name == f"{a.name}_other" and b.source == a.source
        assert b.meta == {**a.meta, "other_choices": True} and "pipeline" not in a.meta


@pytest.mark.parametrize("arch, d, ranges", [("sm_80", 64, False), ("sm_90a", 64, True), ("sm_90a", 128, False)])
def test_a_documents_example_also_runs_with_its_ranges_found_the_other_way(tmp_path, arch, d, ranges):
    """Note [Ranges from the runs]: from the table's runs by default but on sm_90a at head
    dim 64 (its register floor), where a block map gives them; the `_ranges` bundle flips
    that alone."""
    pytest.importorskip("mlir")
    name = f"ex_docs_sink_bf16_d{d}x{d}_ranges"
    job = next(j for j in builder.example_jobs() if j.name == name).for_arch(arch)
    entry = builder.build_one(job, str(tmp_path))
    assert "refused" not in entry, entry.get("refused")
    manifest = json.loads((tmp_path / job.name / "manifest.json").read_text())
    assert manifest["specialization"]["run_ranges"] is ranges
    assert manifest["specialization"]["aligned_tiles"] is True
    assert [k["name"] for k in manifest["kernels"]] == ["qtiles"] + ([] if ranges else ["blockmap"]) + ["attn_fwd"]


@pytest.mark.parametrize("name, blocks, test", [
    ("ex_sliding_window_bf16_d64x64_other", 2, "range"),     # default: 1 block, bits
    ("ex_sliding_window_f16_d128x128_other", 2, "pair"),
    ("ex_softcap_bf16_d64x64_other", 1, None),               # default: 2 blocks (constant max); no interval
])
def test_the_other_kernel_choices_reach_the_manifest(tmp_path, name, blocks, test):
    pytest.importorskip("mlir")
    job = next(j for j in builder.example_jobs() if j.name == name)
    entry = builder.build_one(job, str(tmp_path))
    assert "refused" not in entry, entry.get("refused")
    assert f"attn-warp-specialize{{q_blocks_per_cta={blocks}}}," in entry["pipeline"]
    other_test = f"interval_test={builder.OTHER_INTERVAL_TEST[job.meta['dtype']]} " if test else ""
    assert entry["pipeline"].endswith(f"attn-kernel-choices{{{other_test}exp2_fma=4}},attn-lower-sm80")
    manifest = json.loads((tmp_path / job.name / "manifest.json").read_text())
    spec = manifest["specialization"]
    assert (spec["q_blocks_per_cta"], spec["interval_test"], spec["exp2_fma"]) == (blocks, test, 4)
    assert manifest["kernels"][-1]["grid"][0] == [["cdiv", "M", spec["block_m"] * blocks]]


@pytest.mark.parametrize("name, persistent, exp2_fma", [
    ("ex_sliding_window_bf16_d128x128_other", False, 4),     # default: persistent (a band)
    ("ex_mha_bf16_d128x128_other", True, 4),                 # default: one block per CTA
    ("ex_softcap_bf16_d64x64_other", True, 4),               # default: 192x96, none on the FMA pipe
    ("ex_alibi_bf16_d64x64_other", None, 4),                 # default: 64x128, one warpgroup, none
])
def test_the_other_sm90a_choices_reach_the_manifest(tmp_path, name, persistent, exp2_fma):
    """On sm_90a every kernel runs one query block per CTA: the producer warpgroup's other
    choice is the other persistence, the cooperative kernel's the mask test and exp2's."""
    pytest.importorskip("mlir")
    job = dataclasses.replace(next(j for j in builder.example_jobs() if j.name == name), arch="sm_90a")
    entry = builder.build_one(job, str(tmp_path))
    assert "refused" not in entry, entry.get("refused")
    spec = json.loads((tmp_path / job.name / "manifest.json").read_text())["specialization"]
    assert spec["exp2_fma"] == exp2_fma
    if persistent is None:
        assert not spec["producer_warpgroup"] and spec["q_blocks_per_cta"] == 1
    else:
        assert spec["producer_warpgroup"] and spec["persistent"] is persistent and spec["q_blocks_per_cta"] == 1


def test_suites_have_the_sizes_the_issue_asks_for():
    assert len(builder.property_jobs(0, 240)) == 240
    bench = builder.bench_jobs()
    assert {(j.meta["case"], j.meta["head_dim"]) for j in bench} == \
        {(c, d) for c in builder.BENCH_CASES for d in (64, 128)}
    for j in bench:
        load(j.source)
    lets = builder.reused_lets_jobs()
    assert {j.meta["case"] for j in lets} == set(builder.REUSED_LETS)
    for j in lets:
        load(j.source)


def test_a_bundle_is_written_with_ptx_only(tmp_path):
    pytest.importorskip("mlir")
    job = builder.Job("examples", "mha_ptx", builder.source("mha_ptx", "bf16", 64, "j <= i"), {"x": 1})
    entry = builder.build_one(job, str(tmp_path))
    assert "refused" not in entry, entry.get("refused")
    manifest = json.loads((tmp_path / "mha_ptx" / "manifest.json").read_text())
    assert list(manifest["code"]) == ["ptx"]
    assert sorted(p.name for p in (tmp_path / "mha_ptx").iterdir()) == ["attn_fwd.compute_80.ptx", "manifest.json"]
    from attnc_runtime import read_bundle
    assert set(read_bundle(tmp_path / "mha_ptx").code) == {"ptx"}
    assert entry["x"] == 1 and entry["path"] == "mha_ptx"


def test_a_refused_variant_is_reported_not_dropped(tmp_path, capsys):
    pytest.importorskip("mlir")
    job = builder.Job("property", "broken", "attention broken { q: bf16[B, H, M, 64] }\n", {"seed": 7})
    entry = builder.build_one(job, str(tmp_path))
    assert "missing input 'k'" in entry["refused"] and not entry["crashed"] and entry["seed"] == 7

    class Args:
        allow_refusals, pack, jobs = False, None, 1
    assert builder._report(["property"], [entry], tmp_path, 1.0, Args) == 1
    assert "1 VARIANT(S) NOT BUILT" in capsys.readouterr().out
    Args.allow_refusals = True
    assert builder._report(["property"], [entry], tmp_path, 1.0, Args) == 0
    assert "broken was refused by the compiler" in gpu_support.skip_reason(entry)


def test_sizes_follow_the_shapes_of_q_and_k():
    rng = np.random.default_rng(0)
    sizes = lambda name, **kw: gpu_support.bind_sizes(     # noqa: E731
        load_file(ROOT / "examples" / f"{name}.attn"), batch=2, heads=8, heads_kv=2, m=200, n=517, rng=rng, **kw)
    assert sizes("gemma2") == {"B": 2, "H": 8, "HKV": 2, "M": 200, "N": 517}
    assert sizes("mha") == {"B": 2, "H": 8, "M": 200, "N": 517}
    assert sizes("mqa") == {"B": 2, "H": 8, "M": 200, "N": 517}
    prefix = sizes("prefix_lm")
    assert 1 <= prefix.pop("P") <= 517 and prefix == {"B": 2, "H": 8, "M": 200, "N": 517}


def test_params_are_filled_as_asked():
    rng = np.random.default_rng(1)
    variant = load_file(ROOT / "examples" / "docs_sink.attn")
    sizes = gpu_support.bind_sizes(variant, batch=3, heads=4, heads_kv=4, m=50, n=50, rng=rng)
    case = gpu_support.make_case(variant, sizes, {"doc": "sorted_ids"}, rng)
    assert case["doc"].dtype == np.int32 and case["doc"].shape == (3, 50)
    assert (np.diff(case["doc"], axis=-1) >= 0).all()
    assert case["sinks"].dtype == np.float32 and np.abs(case["sinks"]).max() <= 1
    slopes = gpu_support.fill_param((8,), "f32", "alibi", rng)
    assert np.allclose(slopes, 2.0 ** (-np.arange(1, 9)))


def test_compare_flags_what_is_wrong():
    variant = load_file(ROOT / "examples" / "gemma2.attn")
    rng = np.random.default_rng(2)
    sizes = gpu_support.bind_sizes(variant, batch=1, heads=4, heads_kv=2, m=40, n=30, rng=rng)
    ref = attnc.reference(variant, **gpu_support.make_case(variant, sizes, {}, rng))
    assert gpu_support.compare(variant, ref, ref) == []
    bad = {"o": ref["o"].copy(), "lse": ref["lse"].copy()}
    bad["o"][0, 1, 2, 3] += 0.1
    bad["lse"][0, 0, 5] = np.nan
    problems = gpu_support.compare(variant, bad, ref)
    assert len(problems) == 2 and "max |o - ref| = 1.000e-01" in problems[0] and "[0, 1, 2, 3]" in problems[0]
    bad = {"o": ref["o"] * np.nan, "lse": np.full_like(ref["lse"], -np.inf)}
    problems = gpu_support.compare(variant, bad, ref)
    assert any("NaN/inf" in p for p in problems) and any("empty" in p for p in problems)


def test_an_o_coarser_than_the_inputs_gets_the_coarser_tolerance():
    """prop_36 on the H200: f16 inputs, a bf16 o off by 7.8e-3 = half a bf16 ulp at |o| in
    [2, 4): the rounding of the output, not a kernel error."""
    source = (ROOT / "examples" / "mqa.attn").read_text()
    rng = np.random.default_rng(3)
    for o_dtype, tolerance in (("f16", 4e-3), ("bf16", 3e-2), ("f32", 4e-3)):
        variant = load(source.replace("out o: f16", f"out o: {o_dtype}"))
        sizes = gpu_support.bind_sizes(variant, batch=1, heads=2, heads_kv=1, m=20, n=20, rng=rng)
        ref = attnc.reference(variant, **gpu_support.make_case(variant, sizes, {}, rng))
        off = {"o": ref["o"] + 0.9 * tolerance, "lse": ref["lse"]}
        assert gpu_support.compare(variant, off, ref) == []
        off = {"o": ref["o"] + 1.1 * tolerance, "lse": ref["lse"]}
        assert len(gpu_support.compare(variant, off, ref)) == 1


@pytest.mark.parametrize("name, arch, extra", [
    ("ex_alibi_bf16_d128x128_tiles", "sm_80", {}),
    ("ex_docs_sink_f16_d64x64_tiles", "sm_90a", {}),                          # the table's tiles on z
    ("ex_alibi_bf16_d128x128_tiles", "sm_90a", {"producer": False}),  # default: a producer
])
def test_a_tiles_bundle_orders_its_grid_tiles_last(tmp_path, name, arch, extra):
    """Note [Tiles last]: the `_tiles` bundles take tiles_last, with what it needs."""
    pytest.importorskip("mlir")
    job = next(j for j in builder.example_jobs() if j.name == name).for_arch(arch)
    entry = builder.build_one(job, str(tmp_path))
    assert "refused" not in entry, entry.get("refused")
    assert entry["choices"] == {"tiles_last": True, **extra}
    manifest = json.loads((tmp_path / job.name / "manifest.json").read_text())
    assert manifest["specialization"]["tiles_last"] is True
    assert manifest["kernels"][-1]["grid"][:2] == [["H"], ["B"]]
