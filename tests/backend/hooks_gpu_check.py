"""Standalone GPU check of the hooks compiled into the sm_80 kernel (not collected by pytest).

Build here (MLIR machine):   python tests/backend/hooks_gpu_check.py build [OUT]
Run there (GPU, torch):      python3 tests/backend/hooks_gpu_check.py run [OUT] [--time]

`build` compiles every example of examples/ in bf16 and f16 (q, k, v and o retyped),
plus variants that reach the corners of the hook code (two KV segments, floor division
and clamped reads, approximate division and a sink, rows with nothing kept with and
without a sink, a param mask whose block map has holes), into bundles OUT/NAME.
`run` loads each bundle with attnc_runtime, runs it at ragged sizes (GQA where the
variant has HKV) and compares o and lse with attnc.reference (numpy float64); `--time`
adds a few timings at M = N = 8192 against the same kernel without the hook.
OUT defaults to .bundles/hooks (git-ignored).
"""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

OUT = ".bundles/hooks"
ROOT = Path(__file__).resolve().parents[2]

EXTRAS = {
    "globalwin": "mask_mod(b, h, i, j) = j < 16 or (j <= i and i - j < 300)\n  out lse: f32[B, H, M]",
    "floors": "param t: f32[H, 7]\n  dim W\n"
              "  score_mod(s, b, h, i, j) = s * t[h, (j - i) // 3 + W] + float((i - j) % 5)\n"
              "  mask_mod(b, h, i, j) = (i - j) % 4 == 0 or j // 7 == i // 7",
    "mathy": "param w: f32[N]\n"
             "  score_mod(s, b, h, i, j) = let x = s / (1.0 + abs(w[j])) in "
             "sigmoid(x) * exp2(min(x, 3.0)) + rsqrt(2.0 + w[j] * w[j]) - floor(x) + sqrt(4.0)\n"
             "  sink(h) = log(3.0 + float(h))\n  out lse: f32[B, H, M]",
    "strict": "mask_mod(b, h, i, j) = j < i\n  out lse: f32[B, H, M]",
    "strict_sink": "param sinks: f32[H]\n  mask_mod(b, h, i, j) = j < i\n  sink(h) = sinks[h]\n"
                   "  out lse: f32[B, H, M]",
    "parity": "param doc: i32[B, N]\n  mask_mod(b, h, i, j) = doc[b, i] % 2 == doc[b, j] % 2 and j <= i + 40\n"
              "  out lse: f32[B, H, M]",
    "causal128": "mask_mod(b, h, i, j) = j <= i",
}
EXTRA_HEAD_DIMS = {"causal128": 128}


def _retyped(text: str, dtype: str) -> str:
    return re.sub(r"\b(?:bf16|f16)\[", f"{dtype}[", text)


def _extra(name: str, decls: str) -> str:
    hd = EXTRA_HEAD_DIMS.get(name, 64)
    return (f"attention {name} {{\n  q: bf16[B, H, M, {hd}]\n  k: bf16[B, HKV, N, {hd}]\n"
            f"  v: bf16[B, HKV, N, {hd}]\n  {decls}\n  out o: bf16[B, H, M, {hd}]\n}}\n")


def sources() -> dict[str, str]:
    out = {}
    for path in sorted((ROOT / "examples").glob("*.attn")):
        for dtype in ("bf16", "f16"):
            out[f"{path.stem}_{dtype}"] = _retyped(path.read_text(), dtype)
    out.update({name: _extra(name, decls) for name, decls in EXTRAS.items()})
    return out


# ---------------------------------------------------------------- build (needs MLIR)

def build(out: str) -> None:
    from attnc.backend import cubin
    from attnc.backend.bundle import write_bundle
    from attnc.backend.lowering import build as build_sm80
    from attnc.driver import CompileOptions, compile_mlir

    for name, text in sources().items():
        art = build_sm80(compile_mlir(text, f"{name}.attn", CompileOptions(arch="sm_80")))
        write_bundle(os.path.join(out, name), art.manifest, art.files)
        usage = cubin.resource_usage(art.ptx, "sm_80")
        spills = sum(u.spill_stores + u.spill_loads for u in usage.values())
        regs = "/".join(str(u.registers) for u in usage.values())
        print(f"{name:24s} block_n={art.spec.block_n:3d} mask={art.spec.mask:20s} registers {regs}, "
              f"spilled {spills} bytes", flush=True)


# ---------------------------------------------------------------- run (needs a GPU and torch)

def _inputs(kernel, sizes: dict, rng, torch):
    """Tensors for every input of the bundle: q, k, v ~ N(0, 1); ALiBi-like slopes,
    document ids in runs of 30 to 170, anything else N(0, 1)/2."""
    import numpy as np
    args = {}
    for t in kernel.manifest.inputs:
        shape = [sizes[d] if isinstance(d, str) else d for d in t.shape]
        if t.role in ("q", "k", "v"):
            dt = {"bf16": torch.bfloat16, "f16": torch.float16}[t.dtype]
            args[t.name] = torch.randn(*shape, generator=rng).to(device="cuda", dtype=dt)
        elif t.dtype == "i32":
            docs = np.zeros(shape, dtype=np.int32)
            gen = np.random.default_rng(int(torch.randint(0, 1 << 30, (1,), generator=rng).item()))
            for row in docs.reshape(-1, shape[-1]):
                row[:] = np.repeat(np.arange(shape[-1]), gen.integers(30, 170, size=shape[-1]))[:shape[-1]]
            args[t.name] = torch.from_numpy(docs).cuda()
        elif t.name == "slopes":
            args[t.name] = (2.0 ** (-8.0 * torch.arange(1, shape[0] + 1) / shape[0])).float().cuda()
        else:
            args[t.name] = (torch.randn(*shape, generator=rng) * 0.5).float().cuda()
    return args


def _sizes(manifest, B, H, HKV, M, N) -> dict:
    q, k = manifest.role("q").shape, manifest.role("k").shape
    sizes = {"P": 100, "W": 2}
    for entry, value in zip(q, (B, H, M)):
        if isinstance(entry, str):
            sizes[entry] = value
    for entry, value in zip(k, (B, HKV if isinstance(k[1], str) and k[1] != q[1] else H, N)):
        if isinstance(entry, str):
            sizes.setdefault(entry, value)
    return sizes


def run(out: str, timing: bool) -> int:
    import numpy as np
    import torch
    import attnc
    import attnc_runtime

    shapes = [(2, 4, 2, 333, 333), (1, 2, 1, 200, 517), (1, 4, 2, 517, 200), (1, 2, 2, 1, 77)]
    failures, rows = 0, []
    names = sorted(os.listdir(out))
    for name in names:
        kernel = attnc_runtime.load(os.path.join(out, name))
        rng = torch.Generator(device="cpu").manual_seed(0)
        for shape in shapes:
            sizes = _sizes(kernel.manifest, *shape)
            inputs = _inputs(kernel, sizes, rng, torch)
            scalars = {d: sizes[d] for d in kernel.manifest.scalar_dims}
            got = kernel(**inputs, **scalars)
            torch.cuda.synchronize()
            ref = attnc.reference(kernel.manifest.source, **{k: v.cpu().float().numpy() if v.dtype in
                                  (torch.bfloat16, torch.float16) else v.cpu().numpy()
                                  for k, v in inputs.items()}, **scalars)
            errs = {}
            ok = True
            for key, want in ref.items():
                have = got[key].float().cpu().numpy().astype(np.float64)
                finite = np.isfinite(want)
                if not np.array_equal(finite, np.isfinite(have)) or np.isnan(have).any():
                    ok = False
                    errs[key] = "non-finite mismatch"
                    continue
                same_inf = np.all(want[~finite] == have[~finite])
                err = float(np.abs(have[finite] - want[finite]).max()) if finite.any() else 0.0
                tol = (3e-2 if "bf16" in kernel.manifest.role("o").dtype else 6e-3) if key == "o" else 2e-2
                ok &= bool(same_inf) and err <= tol
                errs[key] = err
            failures += not ok
            rows.append((name, shape, errs, ok))
            print(f"{'ok  ' if ok else 'FAIL'} {name:24s} B,H,HKV,M,N={shape} " +
                  " ".join(f"{k}: {v if isinstance(v, str) else f'{v:.2e}'}" for k, v in errs.items()), flush=True)
    print(f"{len(rows) - failures}/{len(rows)} passed on {torch.cuda.get_device_name()}")
    if timing:
        _time(out, torch)
    return 1 if failures else 0


def _time(out: str, torch) -> None:
    """Milliseconds at M = N = 8192 of a hooked kernel next to the same kernel without it."""
    import attnc_runtime
    pairs = [("mha_bf16", 128), ("softcap_bf16", 128), ("causal128", 128), ("sliding_window_bf16", 128),
             ("gemma2_bf16", 128), ("docs_sink_bf16", 64), ("alibi_bf16", 64)]
    for name, hd in pairs:
        kernel = attnc_runtime.load(os.path.join(out, name))
        B, H = (4, 16) if hd == 128 else (4, 32)
        sizes = _sizes(kernel.manifest, B, H, H, 8192, 8192)
        gen = torch.Generator(device="cpu").manual_seed(1)
        inputs = _inputs(kernel, sizes, gen, torch)
        bound = kernel.bind(**inputs)
        for _ in range(3):
            bound.launch()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            bound.launch()
        end.record()
        torch.cuda.synchronize()
        print(f"time {name:24s} B={B} H={H} M=N=8192 d={hd}: {start.elapsed_time(end) / 10:.3f} ms", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "build"
    rest = [a for a in sys.argv[2:] if not a.startswith("--")]
    folder = rest[0] if rest else OUT
    if mode == "build":
        build(folder)
    else:
        t0 = time.time()
        code = run(folder, "--time" in sys.argv)
        print(f"run took {time.time() - t0:.1f} s")
        sys.exit(code)
