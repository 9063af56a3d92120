"""Standalone GPU check of sm_80 kernels no GPU suite builds (not collected by pytest).

Build here (MLIR machine):   python tests/backend/sm80_gpu_check.py build [OUT]
Run there (GPU, torch):      python3 tests/backend/sm80_gpu_check.py run [OUT]

`build` compiles the `.attn` variants of CASES through the sm_80 pipeline (attnc.testing
.build_with, with their attn-tile options) to PTX and to sm_90 cubins with nvJitLink (an
sm_80 cubin does not load on SM90), and writes OUT/index.json with each kernel's manifest
entry. `run` loads them with cuda.bindings.driver (the cubin, or the PTX through the
driver JIT) and compares o and lse with a float32 torch reference at ragged sizes, GQA,
MQA, one query row, and Q, K, V stored as [B, rows, heads, d] (strides of a transposed
view). OUT defaults to .bundles/sm80dev (git-ignored).

The GPU suites (tools/build_gpu_bundles.py) cover the rest: the default kernels of every
head dim, dtype and causal mask (sm80_matrix), three K/V stages (schedules), the hooks
(examples, property). CASES are what none of them holds: a head dim pair and an f32 O
outside the property generator's, one K/V stage, and a window short enough to cut keys
at the suites' sizes, with a softcap.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys

OUT = ".bundles/sm80dev"
WINDOW, CAP = 100, 30.0
BOTTOM_RIGHT = "j <= i + (N - M)"


def window_softcap_source(dtype: str, d: int) -> str:
    """A causal window of WINDOW keys with a softcap of CAP, and the LSE (test_sm80.py
    compiles it too)."""
    return source("window_softcap", dtype, d, d, f"j <= i and i - j < {WINDOW}",
                  score_mod=f"{CAP} * tanh(s / {CAP})")


def source(name: str, dtype: str, d: int, d_v: int, mask: str, score_mod: str | None = None,
           out: str | None = None) -> str:
    hooks = (f"  score_mod(s, b, h, i, j) = {score_mod}\n" if score_mod else "") + \
        f"  mask_mod(b, h, i, j) = {mask}\n"
    return (f"attention {name} {{\n  q: {dtype}[B, H, M, {d}]\n  k: {dtype}[B, HKV, N, {d}]\n"
            f"  v: {dtype}[B, HKV, N, {d_v}]\n{hooks}  out o: {out or dtype}[B, H, M, {d_v}]\n"
            f"  out lse: f32[B, H, M]\n}}\n")


# name: (source, attn-tile options, the reference's mask)
CASES = {
    "f16_d96_dv128_f32": (source("f16_d96_dv128_f32", "f16", 96, 128, "j <= i", out="f32"), {}, "causal"),
    "bf16_d64_dv256_br": (source("bf16_d64_dv256_br", "bf16", 64, 256, BOTTOM_RIGHT), {}, "causal_bottom_right"),
    "f16_d128_s1_br": (source("f16_d128_s1_br", "f16", 128, 128, BOTTOM_RIGHT), dict(stages=1, block_n=32),
                       "causal_bottom_right"),
    "window_softcap_f16_d64": (window_softcap_source("f16", 64), dict(block_m=64, block_n=32), "window_softcap"),
    "window_softcap_bf16_d128": (window_softcap_source("bf16", 128), dict(block_n=32), "window_softcap"),
}


# ---------------------------------------------------------------- build (needs MLIR)

def build(out: str) -> None:
    from attnc.backend import cubin
    from attnc.testing import build_with, cubin_resources

    os.makedirs(out, exist_ok=True)
    index = {}
    for name, (text, options, ref) in CASES.items():
        art = build_with(text, f"{name}.attn", "sm_80", **options)
        kernel = art.manifest["kernels"][-1]
        sm80 = cubin_resources(art, "sm_80")[kernel["symbol"]]
        sm90 = cubin.ptx_to_cubin(art.ptx, "sm_90")
        with open(os.path.join(out, f"{name}.ptx"), "w") as f:
            f.write(art.ptx)
        with open(os.path.join(out, f"{name}.sm_90.cubin"), "wb") as f:
            f.write(sm90.cubin)
        index[name] = dict(kernel, specialization=art.manifest["specialization"], ref=ref,
                           sm80_registers=sm80.registers, sm80_spill_bytes=sm80.spill_stores + sm80.spill_loads)
        print(f"{name:40s} sm_80: {sm80.registers} registers, {sm80.spill_stores}/{sm80.spill_loads} "
              f"bytes spilled, smem {kernel['dynamic_smem_bytes']}", flush=True)
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
        """Arguments built from the manifest entry exactly as the runtime would."""
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
        M, N = q.shape[2], k.shape[2]
        group = q.shape[1] // k.shape[1]
        s = q.float() @ k.float().repeat_interleave(group, 1).transpose(-1, -2) * scale
        i = torch.arange(M, device=q.device)[:, None]
        j = torch.arange(N, device=q.device)[None, :]
        keep = {"causal": j <= i, "causal_bottom_right": j <= i + N - M,
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
        finite = torch.isfinite(rlse)
        lerr = (lse[finite] - rlse[finite]).abs().max().item() if finite.any() else 0.0
        empty_ok = bool((lse[~finite] == float("-inf")).all().item())
        ok = ok and lerr <= 1e-3 and empty_ok
        line += f" max|lse-ref|={lerr:.2e} empty rows={int((~finite).sum())} (lse -inf: {empty_ok})"
        print(("ok   " if ok else "FAIL ") + line, flush=True)
        return ok


def run(out: str) -> int:
    r = Runner(out)
    print(r.torch.cuda.get_device_name(), "torch", r.torch.__version__, flush=True)
    shapes = [dict(B=2, H=4, HKV=4, M=257, N=300), dict(B=1, H=8, HKV=2, M=1000, N=1000, strided=True),
              dict(B=2, H=4, HKV=1, M=1, N=777), dict(B=1, H=2, HKV=2, M=333, N=64),
              dict(B=1, H=2, HKV=1, M=17, N=17, use_ptx=True)]
    failures = sum(not r.check(name, **shape) for name in r.index for shape in shapes)
    print(f"{failures} failures", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "run"
    folder = sys.argv[2] if len(sys.argv) > 2 else OUT
    if mode == "build":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
        build(folder)
    else:
        sys.exit(run(folder))
