"""Compile every bundle the GPU tests and benchmarks need into one folder (design.md section 8).

    python tools/build_gpu_bundles.py [--out .bundles/gpu] [--suites SUITE,...] [--jobs N]
                                      [--archs sm_80,sm_90a]
                                      [--property-count 240] [--property-seed 0]
                                      [--allow-refusals] [--pack FILE.tar.xz] [--only REGEX]

writes one bundle folder per variant and an index.json that tests/gpu and bench/ read
on the GPU machine, where neither MLIR nor the compiler is installed. Each index entry
names its "suite":

    sm80_matrix     dtype x head dim x {no mask, causal, bottom-right causal} (cubin
                    and PTX)                               -> tests/gpu/test_sm80_matrix.py
    examples        every examples/*.attn as bf16 and f16, head dims 64 and 128 (QK/V 128/64
                    and 64/128 for diff_head_dims), each also with attn-kernel-choices'
                    other choices (other_choices)          -> tests/gpu/test_examples.py
    property        variants from tests/gpu/variant_gen.py, seeds --property-seed onwards
                                                           -> tests/gpu/test_property.py
    reused_lets     masks and score_mods whose chains of `let`s use each value twice (2^n
                    paths; 30 nested `where`s, past the mask analysis' budget)
                                                           -> tests/gpu/test_reused_lets.py
    exact_ints      masks and score_mods whose integers leave 32 bits at 2^16 keys (Note
                    [Exact integers])                      -> tests/gpu/test_gpu_exact_ints.py
    bench_variants  the variants of bench/bench_variants.py (peers.md), head dims 64 and 128
    bench_sweep     causal sliding windows of 256 .. 4096 keys, head dims 64 and 128: time
                    against the kept fraction (bench/profile_variants.py)
    bench_sweep_sm90  sm_90a kernels of bench_variants' cases with other tiles and options
    schedules       examples under other plans of the plan passes (SCHEDULES: K/V ring depths,
                    one or three consumer warpgroups, ping-pong, examples/passes/v_before_k.py,
                    pv_before_qk.py, waits_first.py, last_v_early.py, loads_after_gemms.py,
                    wait_v_early.py and kv_first.py, attn-alloc-smem{kv_layout=separate},
                    attn-hoist{hoist=false}), each for its own target
                                                           -> tests/gpu/test_schedules.py

--archs (default sm_80) builds examples, property, reused_lets, exact_ints and bench_variants for each target
named; an sm_90a bundle's name ends in `_sm90a` and its index entry says "arch"
(sm80_matrix and bench_sweep are sm_80's). Rebuilding some suites keeps the other
suites' entries of an existing index. sm_80 bundles of the last three suites hold PTX
only (an sm_80 cubin does not load on Hopper anyway), sm_90a bundles their cubin and PTX,
and the whole folder must travel to the GPU machine (64 MiB at most, the total is
printed; --pack writes a compressed tarball to carry instead).

A variant the compiler refuses (an AttncError) or crashes on is never dropped silently:
each is printed with its error, the counts are printed last, and the build exits 1
unless --allow-refusals, in which case the index lists it with "refused" (the GPU
tests then skip it, saying why).
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import re
import shutil
import sys
import tarfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime"), str(ROOT / "tests" / "gpu")]

from attnc.passes.pipelines import CHOICES_PASS, LOWERING, pipeline_with, pipeline_with_options  # noqa: E402  (the targets with kernels)
from attnc.testing import let_chain  # noqa: E402
from gpu_variants import BENCH_CASES, EXACT_INTS, EXP_CASES, REUSED_LETS, SWEEP_CASES  # noqa: E402

SUITES = ("sm80_matrix", "examples", "property", "reused_lets", "exact_ints", "bench_variants", "bench_sweep",
          "bench_sweep_sm90", "schedules")
TRAVEL_LIMIT = 64 << 20         # bytes the device machine takes with the working tree

# --- sm80_matrix -------------------------------------------------------------------------

MASKS = {"none": None, "causal": "j <= i", "bottom_right": "j <= i + (N - M)"}


def source(name: str, dtype: str, d: int, mask: str | None) -> str:
    hook = f"  mask_mod(b, h, i, j) = {mask}\n" if mask else ""
    return (f"attention {name} {{\n"
            f"  q: {dtype}[B, H, M, {d}]\n  k: {dtype}[B, HKV, N, {d}]\n  v: {dtype}[B, HKV, N, {d}]\n"
            f"{hook}  out o: {dtype}[B, H, M, {d}]\n  out lse: f32[B, H, M]\n}}\n")


@dataclass(frozen=True)
class Job:
    suite: str
    name: str
    source: str
    meta: dict = field(default_factory=dict)    # copied into the index entry
    ptx_only: bool = True
    arch: str = "sm_80"

    def for_arch(self, arch: str) -> "Job":
        """This job for `arch` (named with its suffix), or itself for sm_80 or None."""
        if arch in (None, "sm_80", self.arch):
            return self
        suffix = "_" + arch.replace("_", "")
        return Job(self.suite, self.name + suffix, self.source, {**self.meta, "arch": arch}, self.ptx_only, arch)


def matrix_jobs() -> list[Job]:
    return [Job("sm80_matrix", f"sm80_{dtype}_d{d}_{mask_name}", source(f"sm80_{dtype}_d{d}_{mask_name}", dtype, d, mask),
                {"dtype": dtype, "head_dim": d, "mask": mask_name}, ptx_only=False)
            for dtype in ("f16", "bf16") for d in (64, 96, 128, 256) for mask_name, mask in MASKS.items()]


# --- examples ----------------------------------------------------------------------------

# How the GPU tests fill each example's params (gpu_support.fill_param), and the examples
# tested at M == N (docs_sink: one document id per position; tests/gpu/test_examples.py
# adds one shape with M > N).
EXAMPLE_FILLS = {"alibi": {"slopes": "alibi"}, "docs_sink": {"doc": "sorted_ids_tail", "sinks": "uniform"},
                 "relative_bias": {"bias": "uniform"}}
SQUARE = {"docs_sink"}
_DECL = re.compile(r"^(\s*(?:out\s+)?([qkvo])\s*:\s*)(bf16|f16)\[([^\]]*)\]", re.M)


def rewrite_example(text: str, dtype: str, d_qk: int, d_v: int) -> str:
    """The example with q, k, v and o in `dtype`, QK head dim `d_qk` and V (and o) head dim `d_v`."""
    def sub(m: re.Match) -> str:
        dims = [s.strip() for s in m.group(4).split(",")]
        dims[-1] = str(d_qk if m.group(2) in "qk" else d_v)
        return f"{m.group(1)}{dtype}[{', '.join(dims)}]"

    rewritten, count = _DECL.subn(sub, text)
    if count != 4:
        raise ValueError(f"expected the q, k, v and o declarations, rewrote {count}")
    return f"# {dtype}, head dims {d_qk}/{d_v} (rewritten by tools/build_gpu_bundles.py)\n{rewritten}"


# Every example runs a second time with the kernel choices the default pipeline did not
# make (interval_test and exp2_fma, attn-kernel-choices'; attn-warp-specialize's
# q_blocks_per_cta on sm_80 and persistent in the producer warpgroup's kernel): the other
# number of query blocks per CTA on sm_80 (sm_90a runs one: there, with a producer, the
# other persistence), a
# row-interval test other than the default "bits" ("range" for bf16, "pair" for f16; where
# the mask has a row interval),
# and exponentials on the FMA pipe (4 of 8) where the default has none, so that each
# code path meets the reference on the GPU whatever the defaults are. The builder
# reads the defaults from the default pipeline's IR (`default_choices`, `other_choices`).
OTHER_INTERVAL_TEST = {"bf16": "range", "f16": "pair"}
# A documents example also runs with the key ranges found the other way (Note [Ranges
# from the runs] in attnc/backend/run_ranges.py: the tile table's runs or a block map,
# whichever the default is not): `_ranges`, with only run_ranges flipped.
RANGES_BOTH_WAYS = ("docs_sink",)
# These examples also run with the grid in the order of Note [Tiles last] (attnc/backend/
# kernel_abi.py): `_tiles`, with tiles_last on and, where the default kernel cannot take it, one
# query block per CTA and no producer warpgroup (`tiles_last_choices`).
TILES_LAST = ("alibi", "docs_sink", "sliding_window")


def default_choices(source: str, filename: str, arch: str) -> dict:
    """What the default pipeline chose for `source`: attn-kernel-choices' choices as it
    recorded them on the kernel's ops, and the plan's producer warpgroup, persistence and
    query blocks per CTA."""
    from attnc.driver import CompileOptions, compile_mlir
    from attnc.ir import attention_ops
    from attnc.passes import kernel_choices, plan_ir
    from attnc.passes.pipelines import LOWERING
    from attnc.schedule.walk import PAIRS, walk_order_of

    result = compile_mlir(source, filename, CompileOptions(arch=arch))     # holds the module the ops live in
    kernel = attention_ops(result.module)[0]
    plan = plan_ir.followed_plan(kernel, LOWERING[arch])
    return {**kernel_choices.read(kernel), "producer": plan.producer, "persistent": plan.persistent,
            "q_blocks_per_cta": 2 if walk_order_of(kernel) == PAIRS else 1}


def tiles_last_choices(default: dict) -> dict:
    """The pipeline's options (attn-kernel-choices', attn-warp-specialize's) for a `_tiles`
    bundle of an example whose default choices are `default`."""
    choices = {"tiles_last": True}
    if default["producer"]:
        choices["producer"] = False
    elif default["q_blocks_per_cta"] != 1:
        choices["q_blocks_per_cta"] = 1
    return choices


def other_choices(default: dict, dtype: str, arch: str) -> dict:
    """The pipeline's options (attn-kernel-choices', and attn-warp-specialize's `persistent`
    and `q_blocks_per_cta`) that differ from the `default` choices."""
    # the row-interval test is recorded only where a row interval reads it
    tests = {"interval_test": OTHER_INTERVAL_TEST[dtype]} if "interval_test" in default else {}
    shared = {**tests, "exp2_fma": 0 if default["exp2_fma"] else 4}
    if default["producer"]:
        return {"persistent": not default["persistent"], **shared}
    if arch == "sm_80":
        return {"q_blocks_per_cta": 3 - default["q_blocks_per_cta"], **shared}
    return shared


def example_jobs() -> list[Job]:
    jobs = []
    for path in sorted((ROOT / "examples").glob("*.attn")):
        stem = path.stem
        head_dims = [(128, 64), (64, 128)] if stem == "diff_head_dims" else [(64, 64), (128, 128)]
        for dtype in ("bf16", "f16"):
            for d_qk, d_v in head_dims:
                name = f"ex_{stem}_{dtype}_d{d_qk}x{d_v}"
                source_text = rewrite_example(path.read_text(), dtype, d_qk, d_v)
                meta = {"example": stem, "dtype": dtype, "head_dim": [d_qk, d_v],
                        "fills": EXAMPLE_FILLS.get(stem, {}), "square": stem in SQUARE}
                jobs.append(Job("examples", name, source_text, meta))
                jobs.append(Job("examples", f"{name}_other", source_text, {**meta, "other_choices": True}))
                if stem in RANGES_BOTH_WAYS:
                    jobs.append(Job("examples", f"{name}_ranges", source_text, {**meta, "flip_ranges": True}))
                if stem in TILES_LAST:
                    jobs.append(Job("examples", f"{name}_tiles", source_text, {**meta, "tiles_last": True}))
    return jobs


# --- property ----------------------------------------------------------------------------

def property_jobs(first_seed: int, count: int, seeds: list[int] | None = None) -> list[Job]:
    """The property variants of seeds first_seed, first_seed + 1, ... (count of them), or
    of exactly `seeds`."""
    from variant_gen import generate
    jobs = []
    for seed in seeds if seeds is not None else range(first_seed, first_seed + count):
        v = generate(seed)
        jobs.append(Job("property", v.name, v.source,
                        {"seed": seed, "fills": v.fills(), "features": list(v.features)}))
    return jobs


# --- reused_lets ---------------------------------------------------------------------------
# (the variants: tools/gpu_variants.py)

def reused_lets_jobs() -> list[Job]:
    jobs = []
    for case, (hook, params, first, step, lets, last, fills) in REUSED_LETS.items():
        name = f"lets_{case}"
        args = "s, b, h, i, j" if hook == "score_mod" else "b, h, i, j"
        source_text = (f"attention {name} {{\n  q: f16[B, H, M, 64]\n  k: f16[B, H, N, 64]\n"
                       f"  v: f16[B, H, N, 64]\n{params}"
                       f"  {hook}({args}) = {let_chain(first, step, lets, last)}\n"
                       f"  out o: f16[B, H, M, 64]\n}}\n")
        jobs.append(Job("reused_lets", name, source_text, {"case": case, "fills": fills}))
    return jobs


# --- exact_ints ----------------------------------------------------------------------------
# (the variants: tools/gpu_variants.py)

def exact_ints_jobs() -> list[Job]:
    jobs = []
    for case, (hook, body) in EXACT_INTS.items():
        name = f"exact_{case}"
        args = "s, b, h, i, j" if hook == "score_mod" else "b, h, i, j"
        source_text = (f"attention {name} {{\n  q: bf16[B, H, M, 64]\n  k: bf16[B, H, N, 64]\n"
                       f"  v: bf16[B, H, N, 64]\n  {hook}({args}) = {body}\n"
                       f"  out o: bf16[B, H, M, 64]\n  out lse: f32[B, H, M]\n}}\n")
        jobs.append(Job("exact_ints", name, source_text, {"case": case, "fills": {}}))
    return jobs


# --- bench_variants (peers.md) -------------------------------------------------------------
# (the variants: tools/gpu_variants.py)

def bench_source(name: str, d: int, case: str) -> str:
    params, score_mod, mask_mod, _ = {**BENCH_CASES, **SWEEP_CASES, **EXP_CASES}[case]
    hooks = f"  score_mod(s, b, h, i, j) = {score_mod}\n" if score_mod else ""
    hooks += f"  mask_mod(b, h, i, j) = {mask_mod}\n" if mask_mod else ""
    return (f"attention {name} {{\n"
            f"  q: bf16[B, H, M, {d}]\n  k: bf16[B, H, N, {d}]\n  v: bf16[B, H, N, {d}]\n"
            f"{params}{hooks}  out o: bf16[B, H, M, {d}]\n}}\n")


def bench_jobs() -> list[Job]:
    return [Job("bench_variants", f"bench_{case}_d{d}", bench_source(f"bench_{case}_d{d}", d, case),
                {"case": case, "head_dim": d, "dtype": "bf16", "fills": BENCH_CASES[case][3]})
            for d in (64, 128) for case in BENCH_CASES]


# Other tiles for the cases whose speed-up depends on how tightly tiles cover the mask.
SWEEP_TILES = [("causal", 128, 64), ("window1024", 128, 64), ("window1024", 64, 64),
               ("doc_causal", 128, 64), ("doc_causal", 64, 64),
               ("causal", 64, 128), ("window1024", 64, 128), ("softcap_causal", 64, 128)]


def sweep_jobs() -> list[Job]:
    jobs = [Job("bench_sweep", f"sweep_{case}_d{d}", bench_source(f"sweep_{case}_d{d}", d, case),
                {"case": case, "head_dim": d, "dtype": "bf16", "fills": {}})
            for d in (64, 128) for case in SWEEP_CASES]
    for d in (64, 128):
        for case, bm, bn in SWEEP_TILES:
            name = f"sweep_{case}_d{d}_{bm}x{bn}"
            pipeline = pipeline_with("sm_80", {"attn-tile": dict(block_m=bm, block_n=bn)})
            jobs.append(Job("bench_sweep", name, bench_source(name, d, case),
                            {"case": case, "head_dim": d, "dtype": "bf16", "fills": {}, "pipeline": pipeline}))
    return jobs


# sm_90a: (case, head dim, attn-tile options, attn-kernel-choices options) around the defaults.
SWEEP_SM90 = [
    ("doc_causal", 128, {"block_m": 128, "block_n": 128, "num_warps": 12}, {}),
    ("window1024", 64, {"block_m": 64, "block_n": 128, "num_warps": 8}, {}),
    ("window1024", 128, {"block_m": 128, "block_n": 128, "num_warps": 12}, {}),
    ("causal", 64, {"block_m": 128, "num_warps": 12}, {}),
    ("causal", 128, {"stages": 2}, {}),
    ("softcap_causal", 128, {"stages": 2}, {}),
    ("alibi_causal", 128, {"stages": 2}, {}),
]


# Plans the plan passes make with other options (Note [The plan the lowerings follow] in
# attnc/passes/lower_kernel.py) and of user passes: (target, tag, options of the pipeline's
# passes, user passes), each built for SCHEDULE_EXAMPLES at bf16, head dim 128.
SCHEDULES = [
    ("sm_80", "stages2", {"stages": 2}, ()),
    ("sm_80", "stages3", {"stages": 3}, ()),
    ("sm_90a", "stages2", {"stages": 2, "block_n": 64}, ()),
    ("sm_90a", "stages3", {"stages": 3, "block_n": 64}, ()),
    ("sm_90a", "stages4", {"stages": 4, "block_n": 64}, ()),
    ("sm_90a", "consumers1", {"block_m": 64, "producer": True}, ()),
    ("sm_90a", "consumers2", {"block_m": 128, "producer": True}, ()),
    ("sm_90a", "consumers3", {"block_m": 192, "producer": True}, ()),
    # (documents get 64-row tiles and no producer by default: these ask for both)
    ("sm_90a", "pingpong", {"block_m": 128, "pingpong": True}, ()),
    ("sm_90a", "nopingpong", {"block_m": 128, "pingpong": False}, ()),
    ("sm_90a", "persistent", {"block_m": 128, "producer": True, "persistent": True}, ()),
    ("sm_90a", "persistent_pingpong", {"block_m": 128, "producer": True, "persistent": True, "pingpong": True}, ()),
    ("sm_90a", "persistent_linear", {"block_m": 128, "producer": True, "persistent": True, "walk_order": "linear"},
     ()),
    ("sm_90a", "v_before_k", {"block_m": 128, "producer": True}, ("examples/passes/v_before_k.py",)),
    ("sm_90a", "pv_before_qk", {"block_m": 128, "producer": True}, ("examples/passes/pv_before_qk.py",)),
    ("sm_90a", "pv_before_qk_turns", {"block_m": 128, "producer": True, "pingpong": True},
     ("examples/passes/pv_before_qk.py",)),
    ("sm_90a", "waits_first", {"block_m": 128, "producer": True}, ("examples/passes/waits_first.py",)),
    ("sm_90a", "last_v_early", {"block_m": 128, "producer": True, "pingpong": True},
     ("examples/passes/last_v_early.py",)),
    ("sm_90a", "coop", {"block_m": 128, "producer": False}, ()),
    ("sm_90a", "loads_after_gemms", {"block_m": 128, "producer": False}, ("examples/passes/loads_after_gemms.py",)),
    ("sm_80", "wait_v_early", {"stages": 2}, ("examples/passes/wait_v_early.py",)),
    ("sm_80", "wait_v_early3", {"stages": 3}, ("examples/passes/wait_v_early.py",)),
    # Note [Buffers as placed]: K and V in a ring each, and the K/V ring before Q
    ("sm_80", "kv_separate", {"stages": 2, "kv_layout": "separate"}, ()),
    ("sm_80", "kv_first", {"stages": 2}, ("examples/passes/kv_first.py",)),
    ("sm_90a", "kv_separate", {"block_m": 128, "producer": True, "kv_layout": "separate"}, ()),
    ("sm_90a", "kv_first", {"block_m": 128, "producer": True}, ("examples/passes/kv_first.py",)),
    ("sm_90a", "coop_kv_separate", {"block_m": 128, "producer": False, "kv_layout": "separate"}, ()),
    # Note [Choices op by op]: the loops without a mask with their own exp2_fma
    ("sm_80", "exp2_fma_unmasked", {}, ("examples/passes/exp2_fma_unmasked.py",)),
    ("sm_90a", "exp2_fma_unmasked", {}, ("examples/passes/exp2_fma_unmasked.py",)),
    # attn-hoist{hoist=false}: every hook value per score (ALiBi's bias not in its form linear in j)
    ("sm_80", "no_hoist", {"hoist": False}, ()),
    ("sm_90a", "no_hoist", {"hoist": False}, ()),
]
# The pass each user pass (by its file's name) runs after (default: attn-warp-specialize, at L3).
USER_PASS_AFTER = {"wait_v_early.py": "attn-insert-pipelines", "pv_before_qk.py": "attn-overlap-gemms",
                   "waits_first.py": "attn-overlap-gemms", "last_v_early.py": "attn-overlap-gemms",
                   "loads_after_gemms.py": "attn-overlap-gemms", "kv_first.py": "attn-alloc-smem",
                   "exp2_fma_unmasked.py": "attn-kernel-choices"}
SCHEDULE_EXAMPLES = ("mha", "alibi", "gemma2", "docs_sink")


def schedule_pipeline(arch: str, options: dict, user_passes: tuple[str, ...]) -> str:
    """The target's pipeline with `options` and the user passes' own pass (named as their
    file, with dashes) right after the pass USER_PASS_AFTER names."""
    from attnc.passes.pipelines import PassSpec, format_pipeline, parse_pipeline

    specs = parse_pipeline(pipeline_with_options(arch, options))
    for p in user_passes:
        after = USER_PASS_AFTER.get(Path(p).name, "attn-warp-specialize")
        at = 1 + next(i for i, spec in enumerate(specs) if spec.name == after)
        specs[at:at] = [PassSpec(Path(p).stem.replace("_", "-"))]
    return format_pipeline(specs)


def schedule_jobs() -> list[Job]:
    jobs = []
    for stem in SCHEDULE_EXAMPLES:
        text = rewrite_example((ROOT / "examples" / f"{stem}.attn").read_text(), "bf16", 128, 128)
        for arch, tag, options, user_passes in SCHEDULES:
            name = f"sched_{stem}_{tag}_{arch.replace('_', '')}"
            meta = {"example": stem, "dtype": "bf16", "head_dim": [128, 128], "fills": EXAMPLE_FILLS.get(stem, {}),
                    "square": stem in SQUARE, "schedule": tag, "arch": arch,
                    "pipeline": schedule_pipeline(arch, options, user_passes),
                    "load_passes": list(user_passes)}
            jobs.append(Job("schedules", name, text, meta, arch=arch))
    return jobs


def sweep_sm90_jobs() -> list[Job]:
    jobs = []
    for case, d, tile, lower in SWEEP_SM90:
        tag = "_".join(f"{k}{v}" for k, v in {**tile, **lower}.items())
        name = f"sweep90_{case}_d{d}_{tag}"
        pipeline = pipeline_with("sm_90a", {"attn-tile": tile, CHOICES_PASS: lower})
        jobs.append(Job("bench_sweep_sm90", name, bench_source(name, d, case),
                        {"case": case, "head_dim": d, "dtype": "bf16", "fills": BENCH_CASES[case][3],
                         "pipeline": pipeline, "arch": "sm_90a"}, arch="sm_90a"))
    return jobs


# --- building ----------------------------------------------------------------------------

def build_one(job: Job, out: str) -> dict:
    """Compile one job into out/job.name; the index entry, or one with 'refused' and 'crashed'."""
    from attnc.backend.bundle import write_bundle
    from attnc.backend.lowering import build
    from attnc.driver import CompileOptions, compile_mlir
    from attnc.errors import AttncError

    entry = {"suite": job.suite, "name": job.name, **job.meta}
    start = time.perf_counter()
    try:
        flips = job.meta.get("flip_ranges") or job.meta.get("other_choices") or job.meta.get("tiles_last")
        default = default_choices(job.source, f"{job.name}.attn", job.arch) if flips else None
        if job.meta.get("flip_ranges"):
            entry["pipeline"] = pipeline_with(job.arch, {CHOICES_PASS: {"run_ranges": not default["run_ranges"]}})
        if job.meta.get("other_choices") or job.meta.get("tiles_last"):
            entry["choices"] = (other_choices(default, job.meta["dtype"], job.arch) if job.meta.get("other_choices")
                                else tiles_last_choices(default))
            entry["pipeline"] = pipeline_with_options(job.arch, entry["choices"])
        options = CompileOptions(arch=job.arch, pass_pipeline=entry.get("pipeline"),
                                 load_passes=tuple(str(ROOT / p) for p in job.meta.get("load_passes", ())))
        art = build(compile_mlir(job.source, f"{job.name}.attn", options))
        manifest, files = art.manifest, dict(art.files)
        # What runs on the GPU machine: sm_80's PTX (JIT-compiled for Hopper), sm_90a's cubin
        # (and its PTX, which the emulator runs: tools/sim_vs_gpu.py).
        keep = ("cubin", "ptx") if job.arch == "sm_90a" else ("ptx",)
        if job.ptx_only and set(keep) <= set(manifest["code"]):
            manifest = {**manifest, "code": {k: manifest["code"][k] for k in keep},
                        "code_sha256": {k: manifest["code_sha256"][k] for k in keep}}
            files = {name: blob for name, blob in files.items() if name in manifest["code"].values()}
        write_bundle(Path(out) / job.name, manifest, files)
    except AttncError as e:
        return {**entry, "refused": str(e), "crashed": False, "source": job.source}
    except Exception:               # an internal compiler error: reported, never dropped
        return {**entry, "refused": traceback.format_exc(limit=-8), "crashed": True, "source": job.source}
    made = manifest["specialization"]
    entry.update(path=job.name, block=[made["block_m"], made["block_n"], made["num_warps"]],
                 bytes=sum(len(b) for b in files.values()),
                 seconds=round(time.perf_counter() - start, 2))
    return entry


def _build_star(args) -> dict:
    return build_one(*args)


def _reason(entry: dict) -> str:
    """An error's gist, to group refusals: its first line naming an error, numbers elided."""
    lines = [ln.strip() for ln in entry["refused"].strip().splitlines() if ln.strip()]
    gist = next((ln for ln in lines if ln.startswith("error:")), lines[-1])     # MLIR's own first
    gist = re.sub(r"\(dims: [^)]*\)|\"[^\"]*\":\d+:\d+: ", "", gist)
    return re.sub(r"\d+", "N", gist)[:160]


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / ".bundles" / "gpu"))
    ap.add_argument("--suites", default=",".join(SUITES),
                    help=f"comma-separated, of {', '.join(SUITES)} (default: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--archs", default="sm_80",
                    help="targets to build examples, property, reused_lets, exact_ints and bench_variants for "
                         "(default: sm_80)")
    ap.add_argument("--property-count", type=int, default=240)
    ap.add_argument("--property-seed", type=int, default=0, help="the first seed of the property suite")
    ap.add_argument("--property-seeds", help="comma-separated seeds: build exactly those property variants "
                                             "(e.g. the ones a change touches) instead of a range")
    ap.add_argument("--allow-refusals", action="store_true",
                    help="exit 0 even when the compiler refuses or crashes on variants (they stay in the index)")
    ap.add_argument("--pack", help="also write the folder as a tarball (.tar.xz or .tar.gz) to carry")
    ap.add_argument("--only", help="a regular expression: build only the bundles whose names it finds")
    args = ap.parse_args(argv)
    suites = [s for s in args.suites.split(",") if s]
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        ap.error(f"unknown suite(s) {', '.join(unknown)}; suites are {', '.join(SUITES)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    makers = {"sm80_matrix": matrix_jobs, "examples": example_jobs, "bench_variants": bench_jobs,
              "bench_sweep": sweep_jobs, "bench_sweep_sm90": sweep_sm90_jobs,
              "reused_lets": reused_lets_jobs, "exact_ints": exact_ints_jobs, "schedules": schedule_jobs,
              "property": lambda: property_jobs(args.property_seed, args.property_count, seeds)}
    seeds = [int(x) for x in args.property_seeds.split(",")] if args.property_seeds else None
    archs = [a for a in args.archs.split(",") if a]
    if not set(archs) <= set(LOWERING):
        ap.error(f"--archs: targets with kernels are {', '.join(LOWERING)}")
    per_arch = {"examples", "property", "reused_lets", "exact_ints", "bench_variants"}
    jobs = [job.for_arch(arch) for suite in suites for job in makers[suite]()
            for arch in (archs if suite in per_arch else [None])]
    if args.only:
        jobs = [job for job in jobs if re.search(args.only, job.name)]
    index_path = out / "index.json"
    old = json.loads(index_path.read_text()) if index_path.exists() else []
    for e in old:                   # the rebuilt suites' old bundles go
        if e.get("suite") in suites and e.get("path"):
            shutil.rmtree(out / e["path"], ignore_errors=True)
    kept = [e for e in old if e.get("suite") not in suites]

    print(f"building {len(jobs)} bundles ({', '.join(f'{s}: {sum(j.suite == s for j in jobs)}' for s in suites)}) "
          f"with {args.jobs} processes into {out}", flush=True)
    start = time.perf_counter()
    results = []
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for n, entry in enumerate(pool.imap_unordered(_build_star, [(j, str(out)) for j in jobs]), 1):
            results.append(entry)
            if "refused" in entry:
                what = "CRASHED" if entry["crashed"] else "REFUSED"
                print(f"[{n}/{len(jobs)}] {entry['suite']} {entry['name']}: {what}\n"
                      f"    {entry['refused'].strip().replace(chr(10), chr(10) + '    ')}", flush=True)
            else:
                print(f"[{n}/{len(jobs)}] {entry['suite']} {entry['name']}: block {entry['block']}, "
                      f"{entry['bytes'] / 1024:.0f} KiB, {entry['seconds']} s", flush=True)
    elapsed = time.perf_counter() - start

    order = {j.name: i for i, j in enumerate(jobs)}
    results.sort(key=lambda e: order[e["name"]])
    index_path.write_text(json.dumps(kept + results, indent=1))
    return _report(suites, results, out, elapsed, args)


def _report(suites, results, out: Path, elapsed: float, args) -> int:
    print(f"\nbuilt in {elapsed:.0f} s with {args.jobs} processes")
    for suite in suites:
        mine = [e for e in results if e["suite"] == suite]
        ok = [e for e in mine if "refused" not in e]
        size = sum(folder_bytes(out / e["path"]) for e in ok)
        print(f"  {suite:15s} {len(ok):4d} built, {len(mine) - len(ok):3d} refused or crashed, "
              f"{size / 2**20:6.1f} MiB")
    total = folder_bytes(out)
    print(f"  total size of {out}: {total / 2**20:.1f} MiB (the device machine takes {TRAVEL_LIMIT >> 20} MiB "
          f"with the working tree)")
    if args.pack:
        pack = Path(args.pack)
        pack.parent.mkdir(parents=True, exist_ok=True)
        mode = "w:xz" if pack.name.endswith(".xz") else "w:gz"
        with tarfile.open(pack, mode) as tar:
            tar.add(out, arcname=out.name)
        print(f"  packed into {pack}: {pack.stat().st_size / 2**20:.1f} MiB")
    elif total > TRAVEL_LIMIT * 3 // 4:
        print("  WARNING: too close to the travel limit; use --pack and carry the tarball")
    refused = [e for e in results if "refused" in e]
    if not refused:
        return 0
    crashed = sum(e["crashed"] for e in refused)
    print(f"\n{len(refused)} VARIANT(S) NOT BUILT ({len(refused) - crashed} refused with an error, "
          f"{crashed} crashed the compiler): " + ", ".join(e["name"] for e in refused))
    print("by error (numbers elided):")
    for reason, count in collections.Counter(map(_reason, refused)).most_common():
        print(f"  {count:4d} x {reason}")
    if args.allow_refusals:
        print("--allow-refusals: they stay in index.json marked 'refused'; the GPU tests skip them")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
