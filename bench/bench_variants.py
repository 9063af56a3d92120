"""attnc's variant kernels vs FlexAttention (torch.compile) and vs themselves without the mod,
in one run (the results: results/sm80_h200.md and results/sm90a_h200.md).

    python bench/bench_variants.py [--bundles .bundles/gpu] [--json out.json] [--iters 20] [--rounds 5]
                                   [--warmup-ms 100] [--min-ms 200]

The variants of peers.md, as peers/peers.py defines them, at M = N = 8192, bf16, head
dim 64 (B=4, H=32) and 128 (B=4, H=16):

    causal           j <= i                          (the same kernel without a mod)
    softcap_causal   30 tanh(s / 30), causal
    alibi_causal     s + slopes[h] (j - i), slopes 2**(-8 (h + 1) / H), causal
    window1024       j <= i and i - j < 1024
    doc_causal       documents of 1000 positions (doc = position // 1000), causal
    t5_causal        s + bias[h, bucket(j - i)], T5's 32 buckets (examples/relative_bias.attn),
                     bias random normal, causal

One bundle each per target (tools/build_gpu_bundles.py --suites bench_variants --archs
sm_80,sm_90a): every target's kernel is timed against the same FlexAttention time, and
the goals are reported per target. attnc's time
includes every kernel of its bundle (the block map of doc_causal too); FlexAttention's
block mask is built once, outside the timing, as peers.py does. A bundle with a block map
is also timed with the map built once and reused (`launch(reuse_mask=True)`, Note [Reused
masks] in runtime/attnc_runtime/kernel.py), FlexAttention's way: printed beside, while the
goals keep the whole launch. CUDA events: WARMUP launches and --warmup-ms (default 100)
more of the same function, then the mean of --iters calls (at least 20) or of as many as
take --min-ms of GPU time (default 200), in --rounds rounds (default 5) that each time
every kernel once; a time is the median of its rounds (the JSON keeps them all, the table
prints their range); `--warmup-ms 0 --min-ms 0` times five warm-up launches and 20 calls.
TFLOP/s of useful work: 4*B*H*M*N*D times the fraction of (i, j) pairs the mask keeps,
counted exactly. Before timing, each attnc output is compared with FlexAttention's (max
|difference| printed). Causal is also timed, in the same rounds, on torch SDPA's cuDNN
and flash (FA2) backends, and the window and documents on the flash backend's FA2 kernel
(its sliding window and its varlen layout: `fa2_runner`). Beside each row, the median SM
clock and board power nvidia-smi logged while attnc's and FlexAttention's kernels were
timed (Note [Clock under the power cap] in smi_log.py; also in the JSON). Prints a table,
then the speed goals with each ratio:

    score_mod overhead over causal       softcap, ALiBi          <= 10 %
    speed-up over causal                 window1024              >= 3.5x
                                         doc_causal              >= 3x
    attnc / FlexAttention                softcap, doc_causal     >= 1.3x

Note [Warm-up to the kernel's own clocks]: under its power cap the GPU sets its clock
from what ran in the last tens of milliseconds. With five warm-up launches, a 1 ms kernel
is timed over 20 ms that follow 70 ms or more of another kernel of the round, and its
time depends on which (the sm_80 window kernel ran a fifth longer right after the sm_90a
causal kernel than alone), while a 3 ms kernel's 60 ms mostly run at its own clocks. So
each function first runs --warmup-ms of GPU time by itself (the way
triton.testing.do_bench warms up for a time, not a count), peers and attnc alike.

Note [Timing over the clock's swings]: at the 700 W cap the SM clock does not settle; it
swings between about 1.41 and 1.83 GHz every 100-200 ms while one kernel runs back to back
(clock_trace.py). Twenty calls of a 1 ms kernel span 20 ms, one phase of a swing, which the
kernels timed before it choose; FlexAttention's 0.6-1 ms kernels move the same way. So
each timing spans at least --min-ms of GPU time (200), after --warmup-ms (100) of the same
function: a short kernel is timed over whole swings at its own sustained clock, as a long
one is, whatever ran before it. The rounds then spread 0.5-3 % around their median
instead of up to 4-14 %, and no side is favoured (attnc's short kernels and
FlexAttention's moved both ways). What it does not remove: the run's history (the chip's
temperature, the kernels of the rounds) still moves a 0.5 ms kernel by up to about 10 %
between contexts, so a goal that close to its bound is read over runs. Nor the
neighbour: the documents launch with its map reused, timed always right after the same
kernel building its map, came out 1-4 % slower than that one although it runs one kernel
less, and mostly faster in alternating order; so the rounds alternate between the given
order and its reverse, which takes a fixed neighbour out of the comparison (differences
of 1 % are still below what these timings resolve). The measurements:
results/sm80_h200.md, "Benchmark timing".

FlexAttention on an H100/H200 runs wgmma code, which sm_80 kernels cannot; beside it the
sm_80 kernels are also compared, on softcap and doc_causal, with FlexAttention as Triton
builds it without wgmma (mma.sync, what it runs on an sm_80 GPU; flex_mma_v2.py, in a
worker process timed in the same rounds; --no-flex-mma-v2 leaves it out).
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from pathlib import Path
from statistics import median

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import attnc_runtime  # noqa: E402
from flex_mma_v2 import ROW_STEP  # noqa: E402
from smi_log import SmiLog, summarize  # noqa: E402

WARMUP = 5
WARMUP_MS = 100.0          # Note [Timing over the clock's swings]
MIN_MS = 200.0
M = N = 8192
SHAPES = {64: (4, 32), 128: (4, 16)}           # head dim -> (B, H), as peers.md
CASES = ("causal", "softcap_causal", "alibi_causal", "window1024", "doc_causal", "t5_causal")
GOALS = [  # (what, numerator case, denominator case, kind, bound)
    ("softcap score_mod overhead vs causal", "softcap_causal", "causal", "overhead", 0.10),
    ("ALiBi score_mod overhead vs causal", "alibi_causal", "causal", "overhead", 0.10),
    ("window1024 speed-up vs causal", "window1024", "causal", "speedup", 3.5),
    ("doc_causal speed-up vs causal", "doc_causal", "causal", "speedup", 3.0),
    ("attnc / Flex on softcap_causal", "softcap_causal", "flex", "vs_flex", 1.3),
    ("attnc / Flex on doc_causal", "doc_causal", "flex", "vs_flex", 1.3),
    # FlexAttention built without wgmma (flex_mma_v2.py): the sm_80 kernels' peer, beside the above.
    ("attnc / Flex (mma.sync) on softcap_causal", "softcap_causal", "flex_mma_v2", "vs_flex_mma_v2", 1.3),
    ("attnc / Flex (mma.sync) on doc_causal", "doc_causal", "flex_mma_v2", "vs_flex_mma_v2", 1.3),
]
MMA_V2_CASES = {case for _, case, _, kind, _ in GOALS if kind == "vs_flex_mma_v2"}


def timed(fn, iters: int, warmup_ms: float = 0.0, min_ms: float = 0.0, window: list | None = None) -> float:
    """Seconds per call of `fn`: WARMUP calls, then as many more as take `warmup_ms` of GPU
    time (Note [Warm-up to the kernel's own clocks]), then the mean of `iters` calls, or of
    as many as take `min_ms` (Note [Timing over the clock's swings]), between two CUDA
    events. `window`: gets the timed calls' (start, end) in wall-clock time (smi_log.py)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(WARMUP):
        fn()
    end.record()
    torch.cuda.synchronize()
    per_call = max(start.elapsed_time(end) / WARMUP, 1e-3)
    for _ in range(int(warmup_ms / per_call)):
        fn()
    iters = max(iters, int(min_ms / per_call) + 1) if min_ms > 0 else iters
    torch.cuda.synchronize()
    t0 = time.time()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    if window is not None:
        window.append((t0, time.time()))
    return start.elapsed_time(end) / iters / 1e3


def interleaved(timers: dict, rounds: int, iters: int, worker=None, warmup_ms: float = 0.0,
                min_ms: float = 0.0, windows: dict | None = None) -> dict:
    """Each key's times in ms, one per round; every round times every function once
    (`timed`), so that a slow stretch of the machine lands in one round of each, in the
    given order and in reverse on alternate rounds (Note [Timing over the clock's swings]:
    what ran just before a timing moves it); and `worker`'s kernels
    (flex_mma_v2.FlexMmaV2), keyed ("flex_mma_v2", d, case). `windows`: gets each key's
    timings' wall-clock windows."""
    runs = {key: [] for key in timers}
    order = list(timers.items())
    for r in range(rounds):
        for key, fn in (order[::-1] if r % 2 else order):
            window = windows.setdefault(key, []) if windows is not None else None
            runs[key].append(timed(fn, iters, warmup_ms, min_ms, window) * 1e3)
        if worker is not None:
            for (d, case), ms in worker.round().items():
                runs.setdefault(("flex_mma_v2", d, case), []).append(ms)
    return runs


def inputs(d: int):
    """q, k, v of head dim d (seeded: flex_mma_v2.py's worker makes the same)."""
    b, h = SHAPES[d]
    torch.manual_seed(d)
    return tuple(torch.randn(b, h, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))


def flex_case(case: str, h: int):
    """(score_mod, mask_mod) of a case for FlexAttention, as peers/peers.py writes them."""
    slopes = torch.exp2(-8.0 * torch.arange(1, h + 1, device="cuda") / h)
    docs = torch.arange(N, device="cuda") // 1000

    def causal(b, h_, q, k):
        return q >= k

    def window(b, h_, q, k):
        return (q >= k) & (q - k < 1024)

    def documents(b, h_, q, k):
        return (docs[q] == docs[k]) & (q >= k)

    def softcap(score, b, h_, q, k):
        return 30.0 * torch.tanh(score / 30.0)

    def alibi(score, b, h_, q, k):
        return score + slopes[h_] * (k - q)

    bias = attnc_params("t5_causal", 1, h)["bias"]

    def t5(score, b, h_, q, k):
        # the bucket as relative_bias.attn computes it, in f32, truncated by int()
        d = k - q
        n = d.abs()
        far = (torch.log(n.clamp(min=1).to(torch.float32) / 8.0) / math.log(128.0 / 8.0) * 8.0).to(torch.int32)
        bucket = torch.where(d > 0, 16, 0) + torch.where(n < 8, n, (8 + far).clamp(max=15))
        return score + bias[h_, bucket]

    return {"causal": (None, causal), "softcap_causal": (softcap, causal), "alibi_causal": (alibi, causal),
            "window1024": (None, window), "doc_causal": (None, documents), "t5_causal": (t5, causal)}[case]


def add_tags_option(ap) -> None:
    ap.add_argument("--tags", help="experiment bundles (tools/build_exp_bundles.py) of these tags, "
                                   "comma-separated, instead of the bench_variants ones")


def bundle_lookup(bundles: Path, tags: str | None) -> tuple[list, dict]:
    """(the tags to run, [None] for the bench_variants bundles; the index entries of that
    suite, or of the experiment bundles, by (arch, case, head dim, tag))."""
    suite, tag_list = ("exp", tags.split(",")) if tags else ("bench_variants", [None])
    index = {(e.get("arch", "sm_80"), e["case"], e["head_dim"], e.get("tag")): e
             for e in json.loads((Path(bundles) / "index.json").read_text()) if e.get("suite") == suite}
    return tag_list, index


def attnc_params(case: str, b: int, h: int) -> dict:
    if case == "alibi_causal":
        return {"slopes": torch.exp2(-8.0 * torch.arange(1, h + 1, device="cuda", dtype=torch.float32) / h)}
    if case in ("t5", "t5_causal"):     # t5: tools/gpu_variants.py's EXP_CASES
        return {"bias": torch.randn(h, 32, device="cuda", generator=torch.Generator("cuda").manual_seed(0))}
    if case in ("doc_causal", "doc_only"):     # doc_only: tools/gpu_variants.py's EXP_CASES
        docs = (torch.arange(N, device="cuda", dtype=torch.int32) // 1000)
        return {"doc": docs.expand(b, N).contiguous()}
    return {}


def kept_fraction(mask_mod) -> float:
    q = torch.arange(M, device="cuda")[:, None]
    k = torch.arange(N, device="cuda")[None, :]
    return mask_mod(0, 0, q, k).float().mean().item()


def main() -> int:
    global M, N
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundles", default=str(ROOT / ".bundles" / "gpu"))
    ap.add_argument("--json")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5,
                    help="timing rounds over all kernels, interleaved; a time is their median (default 5)")
    ap.add_argument("--warmup-ms", type=float, default=WARMUP_MS,
                    help="GPU time each function runs before it is timed, after its first "
                         f"{WARMUP} calls (default {WARMUP_MS:g}; 0: those {WARMUP} calls only); "
                         "Note [Warm-up to the kernel's own clocks]")
    ap.add_argument("--min-ms", type=float, default=MIN_MS,
                    help="GPU time each timing spans at least, in as many calls as that takes beyond --iters "
                         f"(default {MIN_MS:g}; 0: --iters calls); "
                         "Note [Timing over the clock's swings]")
    ap.add_argument("--no-flex-mma-v2", action="store_true",
                    help="leave out FlexAttention built without wgmma (flex_mma_v2.py), the sm_80 kernels' peer")
    ap.add_argument("--cases", default=",".join(CASES),
                    help=f"the cases to time, comma-separated (default: all, {','.join(CASES)})")
    ap.add_argument("--seq", type=int, default=N,
                    help=f"M = N (default {N}, peers.md's and the goals'; another leaves out FlexAttention "
                         "without wgmma, whose worker runs at the default)")
    args = ap.parse_args()
    cases = [c for c in CASES if c in args.cases.split(",")]
    unknown = set(args.cases.split(",")) - set(CASES)
    if unknown:
        ap.error(f"unknown cases {', '.join(sorted(unknown))}: the cases are {', '.join(CASES)}")
    if args.seq != N:
        M = N = args.seq
        args.no_flex_mma_v2 = True
    iters, rounds, warmup_ms = max(20, args.iters), max(1, args.rounds), max(0.0, args.warmup_ms)
    min_ms = max(0.0, args.min_ms)
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    torch._dynamo.config.cache_size_limit = 1000
    torch._dynamo.config.recompile_limit = 1000
    flex = torch.compile(flex_attention, dynamic=False)

    bundles = Path(args.bundles)
    index = {(e.get("arch", "sm_80"), e["case"], e["head_dim"]): e
             for e in json.loads((bundles / "index.json").read_text()) if e.get("suite") == "bench_variants"}
    archs = sorted({arch for arch, _, _ in index})
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; M = N = {N}, bf16, "
          f"median of {rounds} interleaved rounds, each the mean of {iters} calls"
          + (f" or of {min_ms:g} ms of calls" if min_ms else "")
          + f" after {WARMUP} warm-up calls and {warmup_ms:g} ms more")
    # Everything is bound (and FlexAttention compiled) first; then every round times every
    # kernel once, so that a slow stretch of the machine lands in one round of each, not in
    # all rounds of one.
    timers, rows, reference_rows = {}, [], {}
    for d, (b, h) in SHAPES.items():
        q, k, v = inputs(d)
        for case in cases:
            score_mod, mask_mod = flex_case(case, h)
            frac = kept_fraction(mask_mod)
            block_mask = create_block_mask(mask_mod, None, None, M, N, device="cuda")
            run_flex, reference, flex_options = flex_runner(flex, f"d={d} {case}", q, k, v, score_mod, block_mask)
            reference = reference.float()
            if case in MMA_V2_CASES:
                reference_rows[(d, case)] = reference[:, :, ::ROW_STEP].cpu()
            timers[("flex", d, case)] = run_flex
            if case == "causal":
                timers.update({("sdpa_" + name, d, case): fn for name, fn in sdpa_runners(q, k, v, True).items()})
            fa2 = fa2_runner(case, q, k, v, reference)
            if fa2 is not None:
                timers[("sdpa_flash", d, case)] = fa2
            for arch in archs:
                entry = index.get((arch, case, d))
                if entry is None or "refused" in entry:
                    print(f"d={d:3d} {case:15s} {arch:6s}: no bundle "
                          f"({entry['refused'].splitlines()[-1] if entry else 'not built'})")
                    continue
                kernel = attnc_runtime.load(bundles / entry["path"])
                bound = kernel.bind(q=q, k=k, v=v, **attnc_params(case, b, h))
                bound.launch()
                diff = (bound.outputs["o"].float() - reference).abs().max().item()
                timers[(arch, d, case)] = bound.launch
                if kernel.manifest.mask_kernels:
                    timers[(arch + " map reused", d, case)] = functools.partial(bound.launch, reuse_mask=True)
                rows.append({"arch": arch, "head_dim": d, "case": case, "B": b, "H": h, "M": M, "N": N,
                             "kept": frac, "max_abs_diff_vs_flex": diff, "flex_kernel_options": flex_options})
            del reference
    worker = None if args.no_flex_mma_v2 or not reference_rows else start_flex_mma_v2(iters, reference_rows, warmup_ms, min_ms)
    windows = {}
    try:
        with SmiLog() as smi:       # Note [Clock under the power cap] in smi_log.py
            runs = interleaved(timers, rounds, iters, worker, warmup_ms, min_ms, windows)
    finally:
        if worker is not None:
            worker.close()
    samples = smi.samples()         # read once for every row's windows
    for row in rows:
        mine, theirs = runs[(row["arch"], row["head_dim"], row["case"])], runs[("flex", row["head_dim"], row["case"])]
        flops = 4 * row["B"] * row["H"] * M * N * row["head_dim"] * row["kept"]
        row.update(attnc_ms=median(mine), flex_ms=median(theirs), attnc_ms_runs=mine, flex_ms_runs=theirs)
        row.update(attnc_tflops=flops / row["attnc_ms"] / 1e9, flex_tflops=flops / row["flex_ms"] / 1e9)
        v2 = runs.get(("flex_mma_v2", row["head_dim"], row["case"]))
        if v2:
            row.update(flex_mma_v2_ms=median(v2), flex_mma_v2_ms_runs=v2)
        reused = runs.get((row["arch"] + " map reused", row["head_dim"], row["case"]))
        if reused:
            row.update(attnc_map_reused_ms=median(reused), attnc_map_reused_ms_runs=reused)
        for who, key in (("attnc", (row["arch"], row["head_dim"], row["case"])),
                         ("flex", ("flex", row["head_dim"], row["case"])),
                         ("attnc_map_reused", (row["arch"] + " map reused", row["head_dim"], row["case"]))):
            clock = summarize(samples, windows.get(key, []))
            if clock is not None:
                row.update({f"{who}_{k}": v for k, v in clock.as_dict().items()})
        print(f"d={row['head_dim']:3d} {row['case']:15s} {row['arch']:6s} kept {row['kept']:6.2%}: "
              f"attnc {row['attnc_tflops']:6.1f} TFLOP/s ({row['attnc_ms']:7.3f} ms, {spread(mine)}) | "
              f"flex {row['flex_tflops']:6.1f} ({row['flex_ms']:7.3f} ms, {spread(theirs)}) | "
              f"attnc/flex {row['flex_ms'] / row['attnc_ms']:4.2f}x | "
              f"max |attnc - flex| {row['max_abs_diff_vs_flex']:.2e}"
              + (f" | flex kernel options {row['flex_kernel_options']}" if row["flex_kernel_options"] else "")
              + (f" | flex mma.sync {row['flex_mma_v2_ms']:7.3f} ms, attnc/that "
                 f"{row['flex_mma_v2_ms'] / row['attnc_ms']:4.2f}x" if "flex_mma_v2_ms" in row else "")
              + (f" | map reused {row['attnc_map_reused_ms']:7.3f} ms, attnc/flex "
                 f"{row['flex_ms'] / row['attnc_map_reused_ms']:4.2f}x" if "attnc_map_reused_ms" in row else "")
              + (f" | SM clock attnc {row['attnc_sm_clock_mhz']:.0f} MHz at {row['attnc_power_w']:.0f} W, "
                 f"flex {row['flex_sm_clock_mhz']:.0f} MHz at {row['flex_power_w']:.0f} W"
                 if "attnc_sm_clock_mhz" in row and "flex_sm_clock_mhz" in row else "")
              + (f", map reused {row['attnc_map_reused_sm_clock_mhz']:.0f} MHz at "
                 f"{row['attnc_map_reused_power_w']:.0f} W" if "attnc_map_reused_sm_clock_mhz" in row else ""),
              flush=True)
    sdpa = report_sdpa(rows, runs)
    goals = [g for arch in archs for g in report_goals([r for r in rows if r["arch"] == arch], arch)]
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                               "iters": iters, "rounds": rounds, "warmup_ms": warmup_ms,
                                               "min_ms": min_ms,
                                               "rows": rows, "goals": goals,
                                               "sdpa": sdpa}, indent=1))
    return 0


# FlexAttention's kernel options: its defaults, else the fastest of the others that compile
# (fewer stages, smaller tiles), each timed alone. At head dim 64 its defaults ask T5's
# score_mod for more shared memory than an H100 has (245,760 bytes of 232,448) and Triton
# refuses the kernel.
FLEX_OPTIONS = (None, {"num_stages": 2}, {"num_stages": 1}, {"BLOCK_M": 64, "BLOCK_N": 64})


def flex_runner(flex, label: str, q, k, v, score_mod, block_mask):
    """(the FlexAttention call, its output, its kernel options) by FLEX_OPTIONS (each
    refusal, and each fallback's time, said)."""
    working = []
    for options in FLEX_OPTIONS:
        def run(options=options):
            return flex(q, k, v, score_mod=score_mod, block_mask=block_mask, kernel_options=options)
        try:
            out = run()
        except Exception as e:      # torch.compile's errors (Triton's, Inductor's) share no base class here
            lines = str(e).strip().splitlines() or [type(e).__name__]
            why = next((line for line in reversed(lines) if "Error" in line), lines[-1])
            print(f"{label}: FlexAttention with kernel options {options} fails: {why.strip()[:200]}")
            continue
        if options is None:
            return run, out, options
        ms = timed(run, 5, WARMUP_MS) * 1e3
        print(f"{label}: FlexAttention with kernel options {options}: {ms:.3f} ms")
        working.append((ms, run, out, options))
    if not working:
        raise RuntimeError(f"{label}: FlexAttention compiled with none of {FLEX_OPTIONS}")
    return min(working, key=lambda w: w[0])[1:]


def start_flex_mma_v2(iters: int, reference_rows: dict, warmup_ms: float, min_ms: float = 0.0):
    """The FlexAttention MMA v2 worker (flex_mma_v2.py) on MMA_V2_CASES, its outputs
    checked against this process's FlexAttention; None (and said) if it cannot run."""
    from flex_mma_v2 import FlexMmaV2
    try:
        worker = FlexMmaV2(sorted(reference_rows), iters, warmup_ms, min_ms)
    except RuntimeError as e:
        print(f"  FlexAttention without wgmma unavailable: {e}")
        return None
    print(f"FlexAttention without wgmma (DISABLE_MMA_V3=1, a worker process): PTX files with wgmma "
          f"{worker.wgmma}, with mma.sync {worker.mma_sync}")
    if worker.wgmma or not worker.mma_sync:
        print("  its kernels are not mma.sync ones: left out")
        worker.close()
        return None
    for key, out in worker.outputs().items():
        diff = (out - reference_rows[key]).abs().max().item()
        print(f"  d={key[0]:3d} {key[1]:15s} max |flex mma.sync - flex| {diff:.2e} (every {ROW_STEP}th row)")
    return worker


def sdpa_runners(q, k, v, causal: bool) -> dict:
    """torch SDPA on its cuDNN and flash (FlashAttention-2) backends, as peers/peers.py runs
    them: {"cudnn": fn, "flash": fn}; a backend this torch cannot run is left out (and said)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    out = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        def run(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            run()
        except RuntimeError as e:
            print(f"  sdpa {name} unavailable: {str(e).splitlines()[0]}")
            continue
        out[name] = run
    return out


def fa2_runner(case: str, q, k, v, reference):
    """FlashAttention-2 (the kernel of SDPA's flash backend, `aten._flash_attention_forward`)
    on the window and on documents, which SDPA itself cannot express: the window as FA2's
    window_size_left = 1023, right = 0; documents + causal as FA2's varlen layout, a causal
    sequence per document (cumulative lengths of the documents of 1000 of every batch).
    Its inputs are laid out (tokens, H, d) once, outside the timing. Returns fn or None
    (and says why); the output is checked against FlexAttention's `reference`."""
    b, h, n, d = q.shape
    packed = [t.transpose(1, 2).contiguous() for t in (q, k, v)]        # (B, N, H, d)
    fa2 = torch.ops.aten._flash_attention_forward
    if case == "window1024":
        def run():
            return fa2(*packed, None, None, n, n, 0.0, True, False, window_size_left=1023, window_size_right=0)[0]
    elif case == "doc_causal":
        starts = list(range(0, n, 1000)) + [n]
        cum = torch.tensor([z * n + s for z in range(b) for s in starts[:-1]] + [b * n],
                           device="cuda", dtype=torch.int32)
        flat = [t.reshape(b * n, h, d) for t in packed]
        longest = max(e - s for s, e in zip(starts, starts[1:]))

        def run():
            return fa2(*flat, cum, cum, longest, longest, 0.0, True, False)[0]
    else:
        return None
    try:
        out = run()
    except (RuntimeError, TypeError) as e:
        print(f"  FlashAttention-2 on {case} unavailable: {str(e).splitlines()[0]}")
        return None
    diff = (out.reshape(b, n, h, d).transpose(1, 2).float() - reference).abs().max().item()
    print(f"  d={d:3d} {case:15s} max |FlashAttention-2 - flex| {diff:.2e}")
    return run


def report_sdpa(rows: list[dict], runs: dict) -> list[dict]:
    """attnc's kernels against SDPA's backends timed in the same rounds: causal on cuDNN and
    flash, the window and documents on flash's FlashAttention-2 kernel (`fa2_runner`)."""
    report = []
    for row in rows:
        d, case = row["head_dim"], row["case"]
        for name in ("sdpa_cudnn", "sdpa_flash"):
            if (name, d, case) not in runs:
                continue
            ms = median(runs[(name, d, case)])
            flops = 4 * row["B"] * row["H"] * M * N * d * row["kept"]
            report.append({"arch": row["arch"], "head_dim": d, "case": case, "peer": name, "peer_ms": ms,
                           "peer_tflops": flops / ms / 1e9, "attnc_ms": row["attnc_ms"],
                           "peer_over_attnc": ms / row["attnc_ms"]})
            print(f"d={d:3d} {case:10s} {row['arch']:6s}: {name} {flops / ms / 1e9:6.1f} TFLOP/s ({ms:7.3f} ms) | "
                  f"attnc {row['attnc_tflops']:6.1f} | attnc/{name} {ms / row['attnc_ms']:4.2f}x", flush=True)
    return report


def spread(values: list[float]) -> str:
    """The rounds' range around their median, in percent."""
    m = median(values)
    return f"{(min(values) / m - 1):+.1%}/{(max(values) / m - 1):+.1%}"


def report_goals(rows: list[dict], arch: str) -> list[dict]:
    by = {(r["head_dim"], r["case"]): r for r in rows}
    goals = []
    whose = "" if arch == "sm_80" else " (set for the sm_80 kernels; shown for comparison)"
    at = "" if N == 8192 else f", at M = N = {N} (they are set at 8192)"
    print(f"\nspeed goals, {arch} kernels{whose}{at} (times of the same run):")
    for d in SHAPES:
        for what, case, base, kind, bound in GOALS:
            row, ref = by.get((d, case)), by.get((d, base))
            if kind == "vs_flex_mma_v2" and (arch != "sm_80" or row is None or "flex_mma_v2_ms" not in row):
                continue        # the sm_80 kernels' peer, when the run had it
            if row is None or kind in ("overhead", "speedup") and ref is None:
                print(f"  d={d:3d} {what}: not measured")
                continue
            if kind == "overhead":
                value = row["attnc_ms"] / ref["attnc_ms"] - 1
                met = value <= bound
                text = f"{value:+.1%} (goal <= {bound:.0%})"
            else:           # a speed-up: the other time over attnc's
                other = {"speedup": "attnc_ms", "vs_flex": "flex_ms", "vs_flex_mma_v2": "flex_mma_v2_ms"}[kind]
                value = (ref if kind == "speedup" else row)[other] / row["attnc_ms"]
                met = value >= bound
                text = f"{value:.2f}x (goal >= {bound}x)"
            print(f"  d={d:3d} {what:38s} {text:28s} {'met' if met else 'MISSED'}")
            goal = {"arch": arch, "head_dim": d, "goal": what, "value": value, "bound": bound, "met": met}
            if kind == "vs_flex_mma_v2":
                goal["peer"] = "FlexAttention without wgmma (DISABLE_MMA_V3=1)"
            goals.append(goal)
    return goals

if __name__ == "__main__":
    sys.exit(main())
