"""The emulator's arithmetic against the GPU's, instruction by instruction.

    python3 tools/sim_isa_vs_gpu.py gpu --out isa_runs.npz      # on the GPU machine
    python tools/sim_isa_vs_gpu.py compare --runs isa_runs.npz  # here: the same kernels emulated

Each case is a small PTX kernel around one instruction that attnc's kernels use where the
PTX ISA leaves the result to the hardware: the `.approx` functions (ex2, tanh, lg2, rcp,
rsqrt) on inputs spread over the ranges the kernels feed them, and `mma.sync.m16n8k16`
(bf16 and f16 products, f32 sums) on register contents given lane by lane, so that no
fragment layout is assumed here. The compare step prints, per case, how many results are
bitwise equal and the largest difference in units in the last place of f32.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runtime")]

THREADS = 256
UNARY = {                           # case -> (instruction, input generator)
    "ex2.approx.ftz.f32": ("ex2.approx.ftz.f32", "ex2"),
    "ex2.approx.f32": ("ex2.approx.f32", "ex2"),
    "tanh.approx.f32": ("tanh.approx.f32", "tanh"),
    "lg2.approx.ftz.f32": ("lg2.approx.ftz.f32", "positive"),
    "rcp.approx.ftz.f32": ("rcp.approx.ftz.f32", "positive"),
    "rsqrt.approx.ftz.f32": ("rsqrt.approx.ftz.f32", "positive"),
}
MMA = {"mma.bf16": "bf16", "mma.f16": "f16"}
MMA_WARPS = 4096


def unary_inputs(kind: str, rng) -> np.ndarray:
    """Inputs over the ranges the kernels use, a dense sweep of one binade of mantissas and
    special values."""
    sweep = np.arange(1 << 16, dtype=np.uint32) << 7            # every 2^7-th mantissa of [1, 2)
    one_binade = (sweep | np.float32(1.0).view(np.uint32)).view(np.float32)
    if kind == "ex2":           # softmax exponents: (s - max) * log2(e) <= 0, and a little above
        parts = [-rng.exponential(8.0, 1 << 17), rng.uniform(-1, 1, 1 << 15), -one_binade, one_binade - 1.0,
                 [0.0, -0.0, -126.0, -127.0, -149.0, -150.0, 127.0, 128.0, -np.inf, np.inf, np.nan]]
    elif kind == "tanh":
        parts = [rng.normal(0, 3, 1 << 17), rng.uniform(-1e-3, 1e-3, 1 << 14), one_binade, -one_binade,
                 [0.0, -0.0, 9.0, 10.0, 20.0, -20.0, np.inf, -np.inf, np.nan]]
    else:
        parts = [np.exp(rng.uniform(-20, 20, 1 << 17)), one_binade, [1.0, 2.0, 1e-38, 1e38, 0.0, np.inf, np.nan]]
    return np.concatenate([np.asarray(p, np.float64) for p in parts]).astype(np.float32)


def unary_ptx(instruction: str) -> str:
    return f"""
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 pin, .param .u64 pout, .param .u32 n)
{{
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<4>;
    .reg .pred %p<2>;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    ld.param.u32 %r5, [n];
    setp.ge.u32 %p1, %r4, %r5;
    @%p1 bra DONE;
    ld.param.u64 %rd1, [pin];
    ld.param.u64 %rd2, [pout];
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    {instruction} %f2, %f1;
    st.global.f32 [%rd5], %f2;
DONE:
    ret;
}}
"""


def mma_ptx(dtype: str) -> str:
    """One m16n8k16 per warp; lane l of warp w reads its A, B and C registers from
    a[w, l, :], b[w, l, :], c[w, l, :] and writes D to d[w, l, :]."""
    loads = "\n    ".join(
        [f"ld.global.b32 %a{i}, [%rd4+{4 * i}];" for i in range(4)]
        + [f"ld.global.b32 %b{i}, [%rd5+{4 * i}];" for i in range(2)]
        + [f"ld.global.f32 %c{i}, [%rd6+{4 * i}];" for i in range(4)])
    stores = "\n    ".join(f"st.global.f32 [%rd7+{4 * i}], %d{i};" for i in range(4))
    return f"""
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
    .reg .b32 %r<8>;
    .reg .b64 %rd<12>;
    .reg .b32 %a<4>;
    .reg .b32 %b<2>;
    .reg .f32 %c<4>;
    .reg .f32 %d<4>;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pc];
    ld.param.u64 %rd8, [pd];
    mul.wide.u32 %rd9, %r4, 16;
    mul.wide.u32 %rd10, %r4, 8;
    add.s64 %rd4, %rd1, %rd9;
    add.s64 %rd5, %rd2, %rd10;
    add.s64 %rd6, %rd3, %rd9;
    add.s64 %rd7, %rd8, %rd9;
    {loads}
    mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32 {{%d0, %d1, %d2, %d3}}, {{%a0, %a1, %a2, %a3}}, {{%b0, %b1}}, {{%c0, %c1, %c2, %c3}};
    {stores}
    ret;
}}
"""


def mma_inputs(dtype: str, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Register contents: 16-bit floats of mixed magnitudes (sums that cancel, and a
    spread of exponents that tests the alignment of the products), f32 C."""
    def halves(shape):
        x = rng.normal(0, 1, shape) * np.exp2(rng.integers(-6, 7, shape))
        if dtype == "f16":
            return x.astype(np.float16).view(np.uint16)
        bits = x.astype(np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)     # round to nearest even
    a = halves((MMA_WARPS, 32, 8)).view(np.uint32).reshape(MMA_WARPS, 32, 4)
    b = halves((MMA_WARPS, 32, 4)).view(np.uint32).reshape(MMA_WARPS, 32, 2)
    c = (rng.normal(0, 4, (MMA_WARPS, 32, 4)) * (rng.random((MMA_WARPS, 32, 4)) < 0.5)).astype(np.float32)
    return a, b, c


def cases(seed: int):
    """(name, ptx, inputs, output template, grid, block) of every case."""
    rng = np.random.default_rng(seed)
    for name, (instruction, kind) in UNARY.items():
        x = unary_inputs(kind, rng)
        n = x.size
        yield name, unary_ptx(instruction), [x, np.zeros_like(x), np.uint32(n)], 1, ((n + THREADS - 1) // THREADS, THREADS)
    for name, dtype in MMA.items():
        a, b, c = mma_inputs(dtype, rng)
        yield name, mma_ptx(dtype), [a, b, c, np.zeros_like(c)], 3, (MMA_WARPS * 32 // THREADS, THREADS)


def cmd_gpu(args) -> int:
    import ctypes

    import torch
    from cuda.bindings import driver as cu

    torch.cuda.init()
    torch.zeros(1, device="cuda")           # the primary context, current
    runs = {}
    for name, ptx, inputs, out_index, (grid, block) in cases(args.seed):
        err, module = cu.cuModuleLoadData(ptx.encode() + b"\0")
        assert err == cu.CUresult.CUDA_SUCCESS, (name, err)
        err, func = cu.cuModuleGetFunction(module, b"k")
        assert err == cu.CUresult.CUDA_SUCCESS, (name, err)
        tensors, values = [], []
        for arg in inputs:
            if isinstance(arg, np.ndarray):
                t = torch.from_numpy(np.ascontiguousarray(arg).view(np.uint8).reshape(-1)).cuda()
                tensors.append(t)
                values.append(ctypes.c_uint64(t.data_ptr()))
            else:
                values.append(ctypes.c_uint32(int(arg)))
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        err, = cu.cuLaunchKernel(func, grid, 1, 1, block, 1, 1, 0, 0, ctypes.addressof(pointers), 0)
        assert err == cu.CUresult.CUDA_SUCCESS, (name, err)
        torch.cuda.synchronize()
        out = tensors[out_index].cpu().numpy().view(inputs[out_index].dtype).reshape(inputs[out_index].shape)
        runs[name] = out
        print(f"{name}: {out.size} results", flush=True)
    runs["__device__"] = np.array(torch.cuda.get_device_name())
    np.savez_compressed(args.out, **runs)
    print(f"wrote {args.out}")
    return 0


def f32_ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in f32 steps between a and b (NaNs equal to NaNs, of any payload)."""
    def ordered(x):
        i = x.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    d = np.abs(ordered(a) - ordered(b))
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, d)


def cmd_compare(args) -> int:
    from attnc_sim.engine import Launch
    from attnc_sim.program import decode
    from attnc_sim.ptx import parse_module
    from attnc_sim.scheduler import Scheduler
    from attnc_sim.state import GlobalMemory

    runs = np.load(args.runs)
    print(f"GPU: {runs['__device__']}")
    worst = 0
    for name, ptx, inputs, out_index, (grid, block) in cases(args.seed):
        if args.only and args.only not in name:
            continue
        program = decode(parse_module(ptx, f"{name}.ptx").kernels["k"])
        memory = GlobalMemory()
        params = b""
        pointers = []
        for arg in inputs:
            if isinstance(arg, np.ndarray):
                ptr = memory.alloc(arg.nbytes)
                memory.put(ptr, np.ascontiguousarray(arg))
                pointers.append(ptr)
                params += int(ptr).to_bytes(8, "little")
            else:
                pointers.append(None)
                params += int(arg).to_bytes(4, "little")
        Launch(program, (grid, 1, 1), (block, 1, 1), 0, memory, params, Scheduler(seed=0)).run()
        template = inputs[out_index]
        sim = memory.get(pointers[out_index], template.nbytes).view(template.dtype).reshape(template.shape)
        gpu = runs[name]
        ulps = f32_ulps(sim.reshape(-1), gpu.reshape(-1))
        equal = int((ulps == 0).sum())
        where = int(np.argmax(ulps))
        detail = ""
        if name in UNARY:
            x = inputs[0].reshape(-1)[where]
            detail = f" (x = {x!r}: GPU {gpu.reshape(-1)[where]!r}, emulator {sim.reshape(-1)[where]!r})"
        hist = {k: int((ulps == k).sum()) for k in (1, 2, 3)}
        print(f"{name}: {equal} of {ulps.size} equal, 1/2/3 ulp: {hist[1]}/{hist[2]}/{hist[3]}, "
              f"largest {int(ulps.max())} ulp{detail}", flush=True)
        worst = max(worst, int(ulps.max()))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    gpu = sub.add_parser("gpu", help="run every case on the GPU, store the results")
    gpu.add_argument("--out", required=True)
    cmp = sub.add_parser("compare", help="run every case in the emulator and compare")
    cmp.add_argument("--runs", required=True)
    cmp.add_argument("--only", help="a substring of the case names")
    for p in (gpu, cmp):
        p.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    return cmd_gpu(args) if args.cmd == "gpu" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
