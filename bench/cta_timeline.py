"""When and where every CTA of a bench_variants sm_80 bundle's attention kernel runs:
a time line from the GPU's global timer, to split a launch's time into the CTAs' own
work, their prologues and epilogues, the gaps between them and the grid's tail.

    python3 bench/cta_timeline.py --bundles DIR [--cases causal,doc_causal] [--head-dims 128]
                                  [--launches 20] [--tags base,...] [--json out.json]

Note [CTA time line]: the tool copies the bundle and adds to its PTX (the code an sm_80
bundle runs on an SM90 GPU; the copy's manifest takes the new sha256) a module-scope
array of one 32-byte record per CTA, which thread 0 fills: %globaltimer at the kernel's
entry (stored at once), after the text's first wait for copies followed by a barrier (the
first step's top: red.min over the steps of that loop), after the text's last one (the
wait of staged O, which the epilogue starts with: red.max), and at `ret` (with %smid and
the linear CTA id). No stamp is held in a register across the steps; ptxas still spills
up to 40 bytes more in the d = 128 kernels. The end is thread 0's `ret`, not the CTA's
retirement. From the stamps of the last of --launches launches:

* prologue (entry to the first step's top), epilogue (its wait to the end), and the steps
  between against the CTA's key blocks (from the grid order, Note [Heads first] in
  kernel_abi.py, and the bench's mask: causal, or documents of 1000 + causal on the tile
  table the GPU wrote, Notes [Document-aligned tiles] and [Longest tiles last]): a
  least-squares line intercept + per_block * blocks;
* per SM, a sweep of its CTAs' starts and ends: its slots (the most CTAs at once), their
  idle time while more CTAs were still to start on it (gaps) and after its last start
  (the grid's end); busy = CTA time over SMs x slots x the launch's span.

%globaltimer counts nanoseconds but advances in steps, which the tool measures first
(`globaltimer_steps_ns`, printed and in the JSON; 32 ns on an H100): a
single CTA's figures are as coarse as a step, the means over thousands are what the
tool reports. Only the low 32 bits are kept for the two middle stamps (a CTA is far
shorter than 4 s). The unpatched bundle is timed with CUDA events beside it; the
outputs must be equal.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import tail_model  # noqa: E402

SYMBOL = "attnc_cta_timeline"
RECORD = 32                     # start, end (u64); first and last wait (low 32 bits), smid, cta (u32)
DOC = 1000


def _record_address(n: int) -> str:
    """PTX setting %tlq2 to this CTA's record (label suffix n keeps the names apart)."""
    return ("\tmov.u32 %tlr1, %ctaid.x;\n\tmov.u32 %tlr2, %ctaid.y;\n\tmov.u32 %tlr3, %ctaid.z;\n"
            "\tmov.u32 %tlr4, %nctaid.x;\n\tmov.u32 %tlr5, %nctaid.y;\n"
            "\tmad.lo.u32 %tlr6, %tlr3, %tlr5, %tlr2;\n\tmad.lo.u32 %tlr6, %tlr6, %tlr4, %tlr1;\n"
            f"\tmov.u64 %tlq2, {SYMBOL};\n\tmul.wide.u32 %tlq3, %tlr6, {RECORD};\n"
            "\tadd.u64 %tlq2, %tlq2, %tlq3;\n")


def patch_ptx(ptx: str, kernel: str, ctas: int) -> str:
    """The PTX with the stamps of Note [CTA time line] in entry `kernel`."""
    head = re.search(r"\.visible \.entry " + re.escape(kernel) + r"\(", ptx)
    if head is None:
        raise SystemExit(f"no entry {kernel} in the PTX")
    body_open = ptx.index("{", ptx.index(")", head.end()))
    close = _matching_brace(ptx, body_open)
    body = ptx[body_open + 1:close]
    # At entry thread 0 stores the start; no stamp is held in a register past its store.
    entry = ("\n\t.reg .b64 %tlq<4>;\n\t.reg .b32 %tlr<10>;\n\t.reg .pred %tlp<2>;\n"
             "\tmov.u64 %tlq0, %globaltimer;\n"
             "\tmov.u32 %tlr0, %tid.x;\n\tsetp.ne.u32 %tlp0, %tlr0, 0;\n\t@%tlp0 bra $L__tl_entry;\n"
             + _record_address(0) + "\tst.global.u64 [%tlq2], %tlq0;\n\tmov.u32 %tlr8, -1;\n\tmov.u32 %tlr9, 0;\n"
             "\tst.global.v2.u32 [%tlq2+16], {%tlr8, %tlr9};\n$L__tl_entry:\n")
    # After the text's first wait for copies followed by a barrier (the top of the first
    # loop's steps) thread 0 keeps the earliest time (red.min: the first step's top), and
    # after its last (the epilogue's wait, which the one-block kernel's text ends with) the
    # latest (red.max).
    def waited(n: int, first: bool) -> str:
        return ("\n\tmov.u32 %tlr8, %globaltimer_lo;\n\tmov.u32 %tlr0, %tid.x;\n\tsetp.ne.u32 %tlp1, %tlr0, 0;\n"
                f"\t@%tlp1 bra $L__tl_wait{n};\n" + _record_address(0)
                + ("\tred.global.min.u32 [%tlq2+16], %tlr8;\n" if first else
                   "\tred.global.max.u32 [%tlq2+20], %tlr8;\n") + f"$L__tl_wait{n}:")
    count = 0

    def stamp(match: re.Match) -> str:
        nonlocal count
        count += 1
        label = f"$L__tl_skip{count}"
        return (f"{match.group(1)}mov.u64 %tlq1, %globaltimer;\n"
                "\tmov.u32 %tlr0, %tid.x;\n\tsetp.ne.u32 %tlp0, %tlr0, 0;\n"
                f"\t@%tlp0 bra {label};\n" + _record_address(count) + "\tmov.u32 %tlr7, %smid;\n"
                "\tst.global.u64 [%tlq2+8], %tlq1;\n"
                "\tst.global.v2.u32 [%tlq2+24], {%tlr7, %tlr6};\n"
                f"{label}:\n{match.group(1)}ret;")

    if re.search(r"@!?%p\d+\s+ret;", body):
        raise SystemExit(f"entry {kernel} has a predicated ret, which the stamps do not cover")
    body = re.sub(r"(\n[ \t]*)ret;", stamp, body)
    if not count:
        raise SystemExit(f"entry {kernel} has no ret")
    tops = list(re.finditer(r"cp\.async\.wait_group[^;]*;\s*bar\.sync[^;]*;", body))
    if len(tops) < 2:
        raise SystemExit(f"entry {kernel} has fewer than two waits for copies followed by a barrier")
    for n, top in ((1, tops[-1]), (0, tops[0])):
        body = body[:top.end()] + waited(n, n == 0) + body[top.end():]
    decl_end = _after_declarations(body)
    body = body[:decl_end] + entry + body[decl_end:]
    array = f".global .align 16 .b8 {SYMBOL}[{RECORD * ctas}];\n\n"
    return ptx[:head.start()] + array + ptx[head.start():body_open + 1] + body + ptx[close:]


def _matching_brace(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise SystemExit("unbalanced braces in the PTX")


def _after_declarations(body: str) -> int:
    """The offset just past the body's leading .reg/.shared/.local declarations."""
    pos = 0
    for line in body.splitlines(keepends=True):
        stripped = line.strip()
        if stripped and not stripped.startswith((".reg", ".shared", ".local", "//")):
            break
        pos += len(line)
    return pos


def patched_bundle(src: Path, dst: Path, ctas: int, symbol: str) -> None:
    """A copy of the bundle at `src` whose attention kernel (launched last) `symbol`, its
    own or its small grid's build (Note [Small grids]: the one the launch picked), records
    a time line."""
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    ptx_file = dst / manifest["code"]["ptx"]
    ptx = patch_ptx(ptx_file.read_text(), symbol, ctas)
    ptx_file.write_text(ptx)
    manifest["code"].pop("cubin", None)
    manifest.get("code_sha256", {}).pop("cubin", None)
    manifest["code_sha256"]["ptx"] = hashlib.sha256(ptx.encode()).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1))


def read_stamps(digest: str, ctas: int) -> np.ndarray:
    """(ctas, 6) int64: start, first mma, last mma, end, smid, cta; from the module loaded
    from the PTX of sha256 `digest` (the runtime's module cache, driver._modules)."""
    from cuda.bindings import driver as cu

    from attnc_runtime import driver
    for (_, key), module in driver._modules.items():
        if key != digest:
            continue
        err, ptr, size = cu.cuModuleGetGlobal(module, SYMBOL.encode())
        driver.check((err,), f"cuModuleGetGlobal({SYMBOL})")
        raw = np.zeros(size, dtype=np.uint8)
        driver.check(cu.cuMemcpyDtoH(raw.ctypes.data, ptr, size), "cuMemcpyDtoH")
        wide = raw.view(np.uint64).reshape(-1, 4)[:ctas].astype(np.int64)
        words = raw.view(np.uint32).reshape(-1, 8)[:ctas].astype(np.int64)
        out = np.zeros((ctas, 6), dtype=np.int64)
        out[:, 0], out[:, 3] = wide[:, 0], wide[:, 1]
        for col, word in ((1, 4), (2, 5)):          # low 32 bits, after the start
            out[:, col] = out[:, 0] + ((words[:, word] - out[:, 0]) % (1 << 32))
        out[:, 4], out[:, 5] = words[:, 6], words[:, 7]
        return out
    raise SystemExit(f"no module of the patched PTX ({digest[:12]}) is loaded")


def blocks_of(case: str, grid: tuple, spec: dict, M: int, table: np.ndarray | None = None) -> np.ndarray:
    """Key blocks of every CTA (linear id x + nx * (y + ny * z)), from the grid's order
    (Note [Heads first] in kernel_abi.py: heads on x and the query tile, from the last, on
    y; Note [Tiles last]: heads on x, the batch on y, the query tile, from the last, on z;
    or the query block, from the last, on x and heads on y) and the bench's mask:
    causal, or documents of DOC + causal on the tile table (Note [Document-aligned tiles]):
    `table` (batch, entry, 4), the one the GPU wrote, whose last batch may be reordered
    (Note [Longest tiles last] in qtiles.py); without it, the table of the documents in
    the order they were found."""
    if spec.get("q_blocks_per_cta", 1) != 1:
        raise SystemExit("the time line counts one query block per CTA (q_blocks_per_cta=1)")
    if case == "doc_causal" and not spec.get("aligned_tiles"):
        raise SystemExit("documents are counted on the aligned tile table (aligned_tiles)")
    bm, bn = spec["block_m"], spec["block_n"]
    nx, ny, nz = grid
    axis = 2 if spec.get("tiles_last") else 1 if spec["heads_first"] else 0     # the query tiles' axis
    nt = grid[axis]
    batch_axis = 1 if spec.get("tiles_last") else 2
    if case == "causal":
        tiles = [-(-min((m + 1) * bm, M) // bn) for m in range(nt)]
    elif case == "doc_causal" and table is not None:
        rows = table[..., 0] < M            # keys [key0, row_end): a tile's causal blocks
        tiles = np.where(rows, -(-(table[..., 1] - table[..., 2]) // bn), 0)
    elif case == "doc_causal":
        tiles = [n for n in tail_model.table(M, DOC, bm, bn) if n is not None]
        tiles += [0] * (nt - len(tiles))
    else:
        raise SystemExit(f"no block count for case {case}")
    tiles = np.asarray(tiles)
    if tiles.ndim == 1:
        tiles = np.broadcast_to(tiles, (grid[batch_axis], nt))
    x, y, z = np.meshgrid(np.arange(nx), np.arange(ny), np.arange(nz), indexing="ij")
    tile = nt - 1 - (x, y, z)[axis]
    out = np.zeros(nx * ny * nz, dtype=np.int64)
    out[(x + nx * (y + ny * z)).ravel()] = tiles[(x, y, z)[batch_axis].ravel(), tile.ravel()]
    return out


def analyse(stamps: np.ndarray, blocks: np.ndarray) -> dict:
    start, first, last, end, sm = (stamps[:, i] for i in range(5))
    t0, t1 = start.min(), end.max()
    span = float(t1 - t0)
    work = blocks > 0
    dur = (end - start).astype(float)
    body = (last - first)[work].astype(float)
    slope, intercept = np.polyfit(blocks[work], body, 1)
    # Per SM, a sweep over its CTAs' starts and ends (ends first at equal times): the
    # most CTAs at once (its slots), and the slots' idle time while more CTAs were still
    # to start on it (gaps) and after its last start (the grid's end).
    sweeps = []
    for s in np.unique(sm):
        sel = sm == s
        times = np.r_[start[sel], end[sel]]
        steps = np.r_[np.ones(sel.sum()), -np.ones(sel.sum())]
        order = np.lexsort((steps, times))          # ends (-1) before starts at a tie
        times, live = times[order], np.cumsum(steps[order])
        sweeps.append((times, live, start[sel].min(), start[sel].max()))
    slots = int(max(live.max() for _, live, _, _ in sweeps))
    first_finish = min(times[-1] for times, *_ in sweeps)      # an SM's last event is its last end
    gaps = idle_after = 0.0
    for times, live, first_start, last_start in sweeps:
        dt = np.diff(np.r_[times, t1])
        idle = (slots - live) * dt
        gaps += float(idle[(times >= first_start) & (times < last_start)].sum())
        idle_after += float(idle[times >= last_start].sum())
    sms = len(sweeps)
    slot_time = sms * slots * span
    us = 1e-3
    return {
        "ctas": int(len(stamps)), "working_ctas": int(work.sum()), "blocks_total": int(blocks.sum()),
        "sms": sms, "slots_per_sm": slots, "span_us": span * us,
        "busy_fraction": float(dur.sum() / slot_time),
        "prologue_us": float(np.mean((first - start)[work])) * us,
        "epilogue_us": float(np.mean((end - last)[work])) * us,
        "steps_per_block_us": float(slope) * us, "steps_intercept_us": float(intercept) * us,
        "steps_fit_rms_us": float(np.sqrt(np.mean((body - intercept - slope * blocks[work]) ** 2))) * us,
        "fixed_fraction": float(((first - start) + (end - last))[work].sum() / dur[work].sum()),
        "gap_fraction": gaps / slot_time,
        "idle_after_finish_fraction": idle_after / slot_time,
        "tail_us": float(t1 - first_finish) * us,
        "empty_cta_us": float(dur[~work].mean()) * us if (~work).any() else 0.0,
    }


PROBE_PTX = """.version 7.0
.target sm_80
.address_size 64
.visible .entry attnc_timer_probe(.param .u64 out)
{
  .reg .b64 %rd<8>;
  .reg .b32 %r<2>;
  .reg .pred %p<3>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u64 %rd2, %globaltimer;
  mov.u64 %rd7, %rd2;
  mov.u64 %rd6, -1;
  mov.u32 %r1, 0;
$L_probe:
  mov.u64 %rd3, %globaltimer;
  sub.u64 %rd4, %rd3, %rd2;
  setp.ne.u64 %p1, %rd4, 0;
  @%p1 min.u64 %rd6, %rd6, %rd4;
  @%p1 add.u32 %r1, %r1, 1;
  @%p1 mov.u64 %rd2, %rd3;
  setp.lt.u32 %p2, %r1, 1000;
  @%p2 bra $L_probe;
  sub.u64 %rd5, %rd2, %rd7;
  st.global.v2.u64 [%rd1], {%rd6, %rd5};
  ret;
}
"""


def globaltimer_steps_ns() -> tuple[int, float]:
    """(the smallest step, the mean step) of %globaltimer over its next 1000 changes, seen
    by one thread spinning on it: the resolution of the time line's stamps."""
    import ctypes

    import torch
    from cuda.bindings import driver as cu

    from attnc_runtime import driver
    out = torch.zeros(2, dtype=torch.int64, device="cuda")
    module = driver.check(cu.cuModuleLoadData(PROBE_PTX.encode() + b"\0"), "cuModuleLoadData")
    func = driver.check(cu.cuModuleGetFunction(module, b"attnc_timer_probe"), "cuModuleGetFunction")
    arg = ctypes.c_uint64(out.data_ptr())
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    driver.check(cu.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, torch.cuda.current_stream().cuda_stream,
                                   ctypes.addressof(params), 0), "cuLaunchKernel")
    torch.cuda.synchronize()
    smallest, total = out.tolist()
    return smallest, total / 1000


def main() -> int:
    import torch

    import attnc_runtime
    from bench_variants import SHAPES, add_tags_option, attnc_params, bundle_lookup, inputs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundles", required=True)
    ap.add_argument("--cases", default="causal,doc_causal")
    ap.add_argument("--head-dims", default="128")
    ap.add_argument("--launches", type=int, default=20)
    add_tags_option(ap)
    ap.add_argument("--json")
    args = ap.parse_args()
    bundles = Path(args.bundles)
    tags, index = bundle_lookup(bundles, args.tags)
    print(f"GPU: {torch.cuda.get_device_name()}")
    steps = globaltimer_steps_ns()
    print(f"%globaltimer: smallest step {steps[0]} ns, mean step {steps[1]:.1f} ns over 1000 changes")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in map(int, args.head_dims.split(",")):
            b, h = SHAPES[d]
            q, k, v = inputs(d)
            M = q.shape[2]
            for case, tag in ((c, t) for c in args.cases.split(",") for t in tags):
                entry = index.get(("sm_80", case, d, tag))
                if entry is None or "refused" in entry:
                    print(f"sm_80 {case} d={d} {tag or ''}: no bundle")
                    continue
                src = bundles / entry["path"]
                params = attnc_params(case, b, h)
                plain = attnc_runtime.load(src).bind(q=q, k=k, v=v, **params)
                ms = _event_ms(plain, args.launches)
                grid = tuple(plain.plan.grids[-1])
                spec = plain.bundle.manifest.specialization
                symbol = plain.plan.symbols[-1]
                if symbol != plain.bundle.manifest.kernels[-1].symbol:      # Note [Small grids]
                    spec = {**spec, "tiles_last": True, "heads_first": False}
                if not spec.get("staged_o"):
                    raise SystemExit(f"{src}: the epilogue's stamp is the wait of staged O (staged_o)")
                ctas = grid[0] * grid[1] * grid[2]
                dst = Path(tmp) / f"{src.name}_{tag or 'base'}_timeline"
                patched_bundle(src, dst, ctas, symbol)
                stamped = attnc_runtime.load(dst).bind(q=q, k=k, v=v, **params)
                assert stamped.plan.symbols == plain.plan.symbols and stamped.plan.grids == plain.plan.grids
                stamped_ms = _event_ms(stamped, args.launches)
                same = all(torch.equal(plain.outputs[n], stamped.outputs[n]) for n in plain.outputs)
                stamps = read_stamps(stamped.bundle.digests["ptx"], ctas)
                table = plain._scratch.get("qtiles")     # as the GPU wrote it (Note [Longest tiles last])
                table = None if table is None else table.view(torch.int32).reshape(b, -1, 4).cpu().numpy()
                row = {"case": case, "d": d, "tag": tag, "grid": grid, "globaltimer_step_ns": steps,
                       "event_ms": ms, "stamped_event_ms": stamped_ms, "outputs_equal": same,
                       **analyse(stamps, blocks_of(case, grid, spec, M, table))}
                results.append(row)
                print(json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def _event_ms(bound, launches: int) -> float:
    import torch

    for _ in range(5):
        bound.launch()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(launches):
        bound.launch()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / launches


if __name__ == "__main__":
    sys.exit(main())
