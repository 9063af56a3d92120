"""Standalone GPU check of the sm_80 kernel generator (not collected by pytest).

Build here (MLIR machine):   python tests/backend/sm80_gpu_check.py build [OUT]
Run there (GPU, torch):      python3 tests/backend/sm80_gpu_check.py run [check|time|all] [OUT]

`build` compiles the default specs of several head dims/dtypes/masks plus hook-driven
variants (sliding window + softcap, peeled and per-block `tile_partial`), S = 1 and 3, to
PTX (sm_80) and to sm_90 cubins with nvJitLink (an sm_80 cubin does not load on SM90),
and writes OUT/index.json with each kernel's ABI. `run` loads them with
cuda.bindings.driver (cubin, or the PTX through the driver JIT), compares with a float32
torch reference (o and lse) and times against torch SDPA (flash and cuDNN backends) at
M = N = 4096, B = 8, H = 16. OUT defaults to .bundles/sm80dev (git-ignored).
"""
from __future__ import annotations

import ctypes
import json
import os
import sys

OUT = ".bundles/sm80dev"
WINDOW, CAP = 100, 30.0


# ---------------------------------------------------------------- build (needs MLIR)

def window_softcap_hooks():
    """Spec fields of a sliding window of WINDOW keys with a softcap of CAP: `peeled`
    (the range's partial blocks at both ends, known) and `asked` (no block known full,
    tile_partial asked about each). test_sm80.py compiles them too."""
    from mlir.dialects import math as mmath
    from attnc.backend.mask_hooks import KvRange

    def window_kv_range(e, c):
        r0 = e.mul(c.m_block, c.block_m)
        hi = e.clamp(e.cdiv(e.min(e.add(r0, c.block_m), c.M), c.block_n), 0, e.cdiv(c.N, c.block_n))
        lo = e.div(e.max(e.sub(r0, WINDOW - 1), 0), c.block_n)
        full_lo = e.cdiv(e.max(e.add(r0, c.block_m - WINDOW), 0), c.block_n)
        return KvRange(lo, full_lo, e.div(e.add(r0, 1), c.block_n), hi)

    def keep(e, b, h, i, j):
        return e.land(e.le(j, i), e.lt(e.sub(i, j), WINDOW))

    def softcap(e, s, b, h, i, j):
        return e.fmul(mmath.tanh(e.fmul(s, 1 / CAP)), CAP)

    def whole_range(e, c):          # no block known full: tile_partial is asked about each
        r = window_kv_range(e, c)
        return KvRange(r.lo, r.lo, r.lo, r.hi)

    def tile_partial(e, c, n_block):
        r = window_kv_range(e, c)
        return e.or_(e.ge(n_block, r.full_hi), e.lt(n_block, r.full_lo))

    peeled = dict(kv_range=window_kv_range, keep=keep, score_mod=softcap)
    asked = dict(kv_range=whole_range, keep=keep, score_mod=softcap, tile_partial=tile_partial)
    return peeled, asked


def build(out: str) -> None:
    from mlir import ir
    from attnc.backend import cubin, ptx
    from attnc.backend.kernel_module import build_kernel_module
    from attnc.backend.kernel_spec import ForwardSpec, default_forward_spec

    peeled, asked = window_softcap_hooks()
    defaults = {
        "def_f16_d64": ("f16", 64, 64, {}),
        "def_bf16_d96_br": ("bf16", 96, 96, dict(mask="causal_bottom_right", with_lse=True)),
        "def_f16_d128": ("f16", 128, 128, {}),
        "def_bf16_d128_causal": ("bf16", 128, 128, dict(mask="causal", with_lse=True)),
        "def_f16_d256": ("f16", 256, 256, dict(with_lse=True)),
        "def_f16_d96_dv128_f32": ("f16", 96, 128, dict(out_dtype="f32", with_lse=True, mask="causal")),
        "def_bf16_d64_dv256": ("bf16", 64, 256, dict(mask="causal_bottom_right", with_lse=True)),
        "t_def_d128": ("f16", 128, 128, {}),
        "t_def_d128_causal": ("f16", 128, 128, dict(mask="causal")),
        "t_def_d64": ("f16", 64, 64, {}),
        "t_def_d96": ("f16", 96, 96, {}),
        "t_def_d256": ("f16", 256, 256, {}),
    }
    specs = {name: default_forward_spec(dt, d, dv, symbol=f"fwd_{name}", **kw)
             for name, (dt, d, dv, kw) in defaults.items()}
    specs.update({
        "window_softcap_f16_d64": ForwardSpec("f16", 64, 64, block_m=64, block_n=32, with_lse=True,
                                                 symbol="fwd_window_softcap", **peeled),
        "window_softcap_tile_partial_bf16_d128": ForwardSpec(
            "bf16", 128, 128, block_m=128, block_n=32, with_lse=True, symbol="fwd_window_tp", **asked),
        "f16_d64_s3": ForwardSpec("f16", 64, 64, block_m=64, block_n=64, stages=3, mask="causal",
                                     with_lse=True, symbol="fwd_s3"),
        "f16_d128_s1_br": ForwardSpec("f16", 128, 128, block_m=128, block_n=32, stages=1,
                                         mask="causal_bottom_right", with_lse=True, symbol="fwd_s1"),
    })
    os.makedirs(out, exist_ok=True)
    index = {}
    for name, spec in specs.items():
        with ir.Context():
            module, abi = build_kernel_module(spec)
            text = ptx.to_ptx(module, "sm_80")
        sm80 = cubin.resource_usage(text, "sm_80")[spec.symbol]
        sm90 = cubin.ptx_to_cubin(text, "sm_90")
        with open(os.path.join(out, f"{name}.ptx"), "w") as f:
            f.write(text)
        with open(os.path.join(out, f"{name}.sm_90.cubin"), "wb") as f:
            f.write(sm90.cubin)
        index[name] = dict(abi.manifest_kernel(name), specialization=abi.specialization,
                           ref="window_softcap" if "window" in name else spec.mask,
                           sm80_registers=sm80.registers, sm80_spill_bytes=sm80.spill_stores + sm80.spill_loads)
        print(f"{name:40s} sm_80: {sm80.registers} registers, {sm80.spill_stores}/{sm80.spill_loads} "
              f"bytes spilled, smem {abi.dynamic_smem_bytes}", flush=True)
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)


# ---------------------------------------------------------------- run (needs a GPU and torch)

class Runner:
    def __init__(self, out: str):
        import torch
        from cuda.bindings import driver as cu
        self.torch, self.cu, self.out = torch, cu, out
        with open(os.path.join(out, "index.json")) as f:
            self.index = json.load(f)
        torch.zeros(1, device="cuda")                      # the primary context
        self.modules = {}

    def _check(self, res):
        err = res[0] if isinstance(res, tuple) else res
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA error {err}")
        return res[1] if isinstance(res, tuple) and len(res) == 2 else None

    def function(self, name: str, use_ptx: bool):
        if (name, use_ptx) not in self.modules:
            path = os.path.join(self.out, f"{name}.ptx" if use_ptx else f"{name}.sm_90.cubin")
            with open(path, "rb") as f:
                data = f.read() + (b"\0" if use_ptx else b"")
            module = self._check(self.cu.cuModuleLoadData(data))
            fn = self._check(self.cu.cuModuleGetFunction(module, self.index[name]["symbol"].encode()))
            attr = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._check(self.cu.cuFuncSetAttribute(fn, attr, self.index[name]["dynamic_smem_bytes"]))
            self.modules[(name, use_ptx)] = (module, fn)
        return self.modules[(name, use_ptx)][1]

    def launch(self, name: str, tensors: dict, dims: dict, use_ptx: bool = False) -> None:
        """Arguments built from the ABI exactly as the runtime would."""
        k = self.index[name]
        values = []
        for p in k["params"]:
            if p["kind"] == "ptr":
                values.append(ctypes.c_void_p(tensors[p["tensor"]].data_ptr()))
            elif p["kind"] == "dim":
                values.append(ctypes.c_int32(dims[p["name"]]))
            else:
                stride = tensors[p["tensor"]].stride(p["axis"])
                values.append(ctypes.c_int64(stride) if p["type"] == "i64" else ctypes.c_int32(stride))
        args = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        grid = []
        for factors in k["grid"]:
            g = 1
            for f in factors:
                g *= f if isinstance(f, int) else dims[f] if isinstance(f, str) else -(-dims[f[1]] // f[2])
            grid.append(g)
        stream = self.torch.cuda.current_stream().cuda_stream
        self._check(self.cu.cuLaunchKernel(self.function(name, use_ptx), *grid, *k["block"],
                                           k["dynamic_smem_bytes"], stream, ctypes.addressof(args), 0))

    def reference(self, q, k, v, ref: str, scale: float):
        torch = self.torch
        H, M, N = q.shape[1], q.shape[2], k.shape[2]
        group = H // k.shape[1]
        s = q.float() @ k.float().repeat_interleave(group, 1).transpose(-1, -2) * scale
        i = torch.arange(M, device=q.device)[:, None]
        j = torch.arange(N, device=q.device)[None, :]
        keep = {"none": torch.ones_like(i * j, dtype=torch.bool), "causal": j <= i,
                "causal_bottom_right": j <= i + N - M,
                "window_softcap": (j <= i) & (i - j < WINDOW)}[ref]
        if ref == "window_softcap":
            s = CAP * torch.tanh(s / CAP)
        s = s.masked_fill(~keep, float("-inf"))
        p = torch.softmax(s, -1).nan_to_num(0.0)
        return p @ v.float().repeat_interleave(group, 1), torch.logsumexp(s, -1)

    def check(self, name, B, H, HKV, M, N, strided=False, use_ptx=False) -> bool:
        torch = self.torch
        entry = self.index[name]
        sp = entry["specialization"]
        dt = {"f16": torch.float16, "bf16": torch.bfloat16}[sp["dtype"]]
        gen = torch.Generator(device="cuda").manual_seed(0)

        def rand(heads, rows, d):      # strided: [B, rows, heads, d] storage seen as [B, heads, rows, d]
            shape = (B, rows, heads, d) if strided else (B, heads, rows, d)
            x = torch.randn(*shape, device="cuda", dtype=dt, generator=gen)
            return x.transpose(1, 2) if strided else x

        q, k, v = rand(H, M, sp["head_dim_qk"]), rand(HKV, N, sp["head_dim_qk"]), rand(HKV, N, sp["head_dim_v"])
        o_dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[sp["out_dtype"]]
        o = torch.full((B, H, M, sp["head_dim_v"]), float("nan"), device="cuda", dtype=o_dt)
        lse = torch.full((B, H, M), float("nan"), device="cuda")
        self.launch(name, dict(q=q, k=k, v=v, o=o, lse=lse), dict(B=B, H=H, HKV=HKV, M=M, N=N), use_ptx)
        torch.cuda.synchronize()
        ro, rlse = self.reference(q, k, v, entry["ref"], sp["softmax_scale"])
        err = (o.float() - ro).abs().max().item()
        tol = 2e-2 if "bf16" in (sp["dtype"], sp["out_dtype"]) else 4e-3
        ok = err <= tol and not torch.isnan(o).any().item()
        line = f"{name:40s} B={B} H={H} HKV={HKV} M={M} N={N} strided={strided} ptx={use_ptx}: max|o-ref|={err:.2e}"
        if sp["with_lse"]:
            finite = torch.isfinite(rlse)
            lerr = (lse[finite] - rlse[finite]).abs().max().item() if finite.any() else 0.0
            empty_ok = bool((lse[~finite] == float("-inf")).all().item())
            ok = ok and lerr <= 1e-3 and empty_ok
            line += f" max|lse-ref|={lerr:.2e} empty rows={int((~finite).sum())} (lse -inf: {empty_ok})"
        print(("ok   " if ok else "FAIL ") + line, flush=True)
        return ok

    def bench(self, fn, iters=20) -> float:
        torch = self.torch
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters

    def time(self, name, B=8, H=16, M=4096, N=4096, use_ptx=False) -> None:
        torch = self.torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sp = self.index[name]["specialization"]
        d, causal = sp["head_dim_qk"], sp["mask"] == "causal"
        q, k, v = (torch.randn(B, H, L, d, device="cuda", dtype=torch.float16) for L in (M, N, N))
        o = torch.empty_like(q)
        ms = self.bench(lambda: self.launch(name, dict(q=q, k=k, v=v, o=o), dict(B=B, H=H, HKV=H, M=M, N=N), use_ptx))
        err = (o.float() - F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()).abs().max().item()
        flops = 4 * B * H * M * N * d / (2 if causal else 1)
        peers = []
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            with sdpa_kernel(backend):
                t = self.bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            peers.append(f"{backend.name} {t:.3f} ms ({flops / t / 1e9:.0f} TFLOP/s)")
        print(f"TIME {name}{' (PTX JIT)' if use_ptx else ''} B={B} H={H} M={M} N={N} d={d} causal={causal}: "
              f"ours {ms:.3f} ms ({flops / ms / 1e9:.0f} TFLOP/s), max|o-sdpa|={err:.2e}; " + ", ".join(peers),
              flush=True)


def run(what: str, out: str) -> int:
    r = Runner(out)
    print(r.torch.cuda.get_device_name(), "torch", r.torch.__version__, flush=True)
    failures = 0
    if what in ("check", "all"):
        shapes = [dict(B=2, H=4, HKV=4, M=257, N=300), dict(B=1, H=8, HKV=2, M=1000, N=1000, strided=True),
                  dict(B=2, H=4, HKV=1, M=1, N=777), dict(B=1, H=2, HKV=2, M=333, N=64),
                  dict(B=1, H=2, HKV=1, M=17, N=17, use_ptx=True)]
        for name in (n for n in r.index if not n.startswith("t_")):
            failures += sum(not r.check(name, **shape) for shape in shapes)
        print(f"{failures} failures", flush=True)
    if what in ("time", "all"):
        for name in (n for n in r.index if n.startswith("t_")):
            r.time(name)
        r.time("t_def_d128", use_ptx=True)
    return 1 if failures else 0


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "run"
    if mode == "build":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
        build(sys.argv[2] if len(sys.argv) > 2 else OUT)
    else:
        sys.exit(run(sys.argv[2] if len(sys.argv) > 2 else "all", sys.argv[3] if len(sys.argv) > 3 else OUT))
