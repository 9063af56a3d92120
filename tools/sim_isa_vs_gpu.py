"""The emulator's arithmetic against the GPU's, instruction by instruction.

    python3 tools/sim_isa_vs_gpu.py gpu --out isa_runs.npz      # on the GPU machine
    python tools/sim_isa_vs_gpu.py compare --runs isa_runs.npz  # here: the same kernels emulated
    python3 tools/sim_isa_vs_gpu.py gpu --set sweep --out isa_sweep.npz     # the sweeps (below)

Each case is a small PTX kernel around one instruction that attnc's kernels use where the
PTX ISA leaves the result to the hardware: the `.approx` functions (ex2, tanh, lg2, rcp,
rsqrt) on inputs spread over the ranges the kernels feed them, and `mma.sync.m16n8k16`
(bf16 and f16 products, f32 sums) on register contents given lane by lane, so that no
fragment layout is assumed here. The compare step prints, per case, how many results are
bitwise equal (NaN payloads and the signs of zeros count) and the largest difference in units
in the last place of f32 (NaNs equal, zeros equal).

`--set sweep` holds the cases that pin the approximations down exactly (Note [Sweeps]):
whole binades of inputs, neighbours closer than the inputs' grid, integer parts, and mma
inputs at the edges of the formats. Results of a case with more than 2^20 values are stored
packed (`pack_bits`): the differences of consecutive result bit patterns, as int8 with the
few larger ones apart, which zlib shrinks to a few MiB.
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


# Note [Sweeps]: what each sweep case answers (`--set sweep`).
#   ex2.fraction.sweep   every x = +-k 2^-23, k < 2^23: the hardware's 2^f on (0, 1) and
#                        2^-f, as two tables. The base cases show ex2.approx.ftz depends on
#                        x only through n = trunc(|x|) and f = trunc(frac(|x|) 2^23) 2^-23
#                        (sign and magnitude, not floor), and that ex2(-(n + f)) =
#                        2^-n ex2(-f) exactly, but ex2(-2 + f) != ex2(f) / 4: the negative
#                        side has its own table.
#   ex2.integer.parts    the same 16-bit fractions at every integer part, both signs, up to
#                        overflow and past the f32 underflow: is 2^n E(f) exact for n > 0
#                        too, where does the result flush to 0, where is it Inf.
#   ex2.neighbours       x with bits below 2^-23 (|x| < 1/2), subnormal x: truncation, not
#                        rounding, of the fixed-point fraction on both sides.
#   ex2.subnormal        ex2.approx.f32 (no .ftz) on x in [-150, -125]: how subnormal
#                        results are formed (2^-n E(f) rounded how, or flushed).
#   rcp/rsqrt/lg2.sweep  every mantissa of [1, 2) (rcp), [1, 4) (rsqrt), [1/2, 2) (lg2):
#                        with the exact exponent reductions the base cases show for rcp and
#                        rsqrt, a table of one (two) binades is the whole function; lg2's
#                        two binades show the fixed-point log2(m) the result is formed from.
#   tanh.neighbours      2048 x, each with its 8 lowest mantissa bits enumerated: how many
#                        input bits tanh.approx reads.
#   mma.*.edge           A, B with subnormals, zeros of both signs, Inf, NaN and exponents
#                        up to the format's limits; C subnormal, huge or -0: the parts of Note
#                        [Tensor-core accumulation] (isa_mma) that the random cases leave open.
#   rcp/rsqrt/lg2.powers every power of 2 of the normal range and its two neighbours: which
#                        exact powers are special cases (rsqrt(1) = 1 and lg2(1) = 0 are, the
#                        binade sweeps hold no other power of 4 or of 2).
#   mma.*.zeros          sums that cancel exactly (products +-1 and +-0, C +-0), products all
#                        -0, and (bf16) products and C in the subnormal range: the sign of a
#                        zero D and how subnormal results are formed, which .edge never gives.
SWEEP_UNARY = ("ex2.fraction.sweep", "ex2.integer.parts", "ex2.neighbours", "ex2.subnormal",
               "rcp.sweep", "rsqrt.sweep", "lg2.sweep", "tanh.neighbours",
               "rcp.powers", "rsqrt.powers", "lg2.powers")
SWEEP_INSTRUCTION = {"ex2": "ex2.approx.ftz.f32", "rcp": "rcp.approx.ftz.f32", "rsqrt": "rsqrt.approx.ftz.f32",
                     "lg2": "lg2.approx.ftz.f32", "tanh": "tanh.approx.f32"}
PACK_ABOVE = 1 << 20


def binade(lo: float, n_binades: int = 1) -> np.ndarray:
    """Every float32 of [lo, lo * 2^n_binades), in order."""
    start = int(np.float32(lo).view(np.uint32))
    return np.arange(start, start + (n_binades << 23), dtype=np.uint32).view(np.float32)


def sweep_inputs(name: str, rng) -> np.ndarray:
    if name == "ex2.fraction.sweep":
        f = np.arange(1 << 23, dtype=np.float64) * 2.0 ** -23
        return np.concatenate([f, -f]).astype(np.float32)
    if name == "ex2.integer.parts":
        f = np.concatenate([[0.0, 2.0 ** -16, 0.5, 1 - 2.0 ** -16], rng.integers(0, 1 << 15, 252) * 2.0 ** -15])
        n = np.arange(0, 151, dtype=np.float64)
        x = (n[:, None] + f[None, :]).reshape(-1)
        return np.concatenate([x[x <= 129], -x]).astype(np.float32)
    if name == "ex2.neighbours":
        grid = (rng.integers(1, 1 << 22, 4096) >> rng.integers(0, 22, 4096)) * 2.0 ** -23   # |x| < 1/2
        below = rng.integers(0, 1 << 20, (4096, 15)) * 2.0 ** -43               # finer than 2^-23
        x = (grid[:, None] + np.concatenate([np.zeros((4096, 1)), below], 1)).reshape(-1)
        tiny = np.ldexp(1.0, -rng.integers(24, 149, 4096)) * rng.uniform(1, 2, 4096)
        return np.concatenate([x, -x, tiny, -tiny, [1e-45, -1e-45]]).astype(np.float32)
    if name == "ex2.subnormal":
        return (-125.0 - np.arange(25 << 14) * 2.0 ** -14).astype(np.float32)
    if name == "rcp.sweep":
        return binade(1.0)
    if name == "rsqrt.sweep":
        return binade(1.0, 2)
    if name == "lg2.sweep":
        return binade(0.5, 2)
    if name.endswith(".powers"):
        powers = np.arange(1, 255, dtype=np.uint32) << 23
        return np.concatenate([powers, powers - 1, powers + 1]).view(np.float32)
    if name == "tanh.neighbours":
        base = rng.normal(0, 3, 2048).astype(np.float32).view(np.uint32) & np.uint32(0xFFFFFF00)
        return (base[:, None] | np.arange(256, dtype=np.uint32)).reshape(-1).view(np.float32)
    raise ValueError(name)


def mma_edge_inputs(dtype: str, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Register contents at the edges of the formats: each 16-bit value is, by chance,
    a normal number over the whole exponent range, a subnormal, +-0, +-Inf or NaN (rare);
    C a normal, subnormal, huge, +-0 or Inf value."""
    warps = 1024
    def halves(shape):
        if dtype == "f16":
            exp, man = rng.integers(0, 31, shape), rng.integers(0, 1 << 10, shape)
            bits = (exp << 10) | man
            pick = rng.random(shape)
            bits = np.where(pick < 0.15, man, bits)                                   # subnormal
            bits = np.where((pick >= 0.15) & (pick < 0.2), 0, bits)                   # zero
            bits = np.where((pick >= 0.2) & (pick < 0.201), 0x7C00, bits)             # Inf
            bits = np.where((pick >= 0.201) & (pick < 0.2015), 0x7E00, bits)          # NaN
            return (bits | (rng.integers(0, 2, shape) << 15)).astype(np.uint16)
        exp, man = rng.integers(0, 255, shape), rng.integers(0, 1 << 7, shape)
        exp = np.where(rng.random(shape) < 0.6, rng.integers(100, 155, shape), exp)   # most near 2^0
        bits = (exp << 7) | man
        pick = rng.random(shape)
        bits = np.where(pick < 0.15, man, bits)
        bits = np.where((pick >= 0.15) & (pick < 0.2), 0, bits)
        bits = np.where((pick >= 0.2) & (pick < 0.201), 0x7F80, bits)
        bits = np.where((pick >= 0.201) & (pick < 0.2015), 0x7FC0, bits)
        return (bits | (rng.integers(0, 2, shape) << 15)).astype(np.uint16)
    a = halves((warps, 32, 8)).view(np.uint32).reshape(warps, 32, 4)
    b = halves((warps, 32, 4)).view(np.uint32).reshape(warps, 32, 2)
    shape = (warps, 32, 4)
    pick = rng.random(shape)
    c = rng.normal(0, 4, shape)
    c = np.where(pick < 0.2, rng.uniform(-1, 1, shape) * 2.0 ** -127, c)              # subnormal
    c = np.where((pick >= 0.2) & (pick < 0.3), rng.normal(0, 1, shape) * 2.0 ** 127, c)
    c = np.where((pick >= 0.3) & (pick < 0.4), 0.0, c)
    c = np.where((pick >= 0.4) & (pick < 0.5), -0.0, c)
    c = np.where((pick >= 0.5) & (pick < 0.505), np.inf, c)
    with np.errstate(over="ignore"):                    # normal * 2^127 past FLT_MAX: Inf, wanted
        return a, b, c.astype(np.float32)


def mma_zero_inputs(dtype: str, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Register contents whose D elements are often exactly zero, of either sign, or (bf16)
    subnormal: per warp one of three kinds (Note [Sweeps], mma.*.zeros)."""
    warps = 768
    one, tiny = (0x3F80, 0x1C80) if dtype == "bf16" else (0x3C00, 0x0400)     # 1.0; bf16 2^-70
    def halves(shape, kind):
        sign = rng.integers(0, 2, shape) << 15
        if kind == 0:                                    # +-1 and +-0: products cancel
            return (np.where(rng.random(shape) < 0.8, one, 0) | sign).astype(np.uint16)
        if kind == 1:                                    # A +-0 and B +-1: every product +-0
            return sign.astype(np.uint16)
        mantissa = rng.integers(0, 1 << 7, shape) if dtype == "bf16" else 0
        return ((tiny + mantissa) | sign).astype(np.uint16)
    a = np.zeros((warps, 32, 8), np.uint16)
    b = np.zeros((warps, 32, 4), np.uint16)
    c = np.zeros((warps, 32, 4), np.float32)
    for w in range(warps):
        kind = w % 3
        a[w] = halves((32, 8), kind)
        b[w] = halves((32, 4), 0 if kind == 1 else kind)
        if kind == 2:
            c[w] = rng.integers(-1 << 20, 1 << 20, (32, 4)) * np.float32(2.0 ** -149)
        else:
            c[w] = np.where(rng.random((32, 4)) < 0.5, np.float32(-0.0), np.float32(0.0))
    return a.view(np.uint32).reshape(warps, 32, 4), b.view(np.uint32).reshape(warps, 32, 2), c


def cases(seed: int, which: str = "base"):
    """(name, ptx, inputs, output template, grid, block) of every case of the set `which`."""
    if which == "sweep":
        yield from sweep_cases(seed)
        return
    rng = np.random.default_rng(seed)
    for name, (instruction, kind) in UNARY.items():
        x = unary_inputs(kind, rng)
        yield unary_case(name, instruction, x)
    for name, dtype in MMA.items():
        a, b, c = mma_inputs(dtype, rng)
        yield name, mma_ptx(dtype), [a, b, c, np.zeros_like(c)], 3, (MMA_WARPS * 32 // THREADS, THREADS)


def unary_case(name: str, instruction: str, x: np.ndarray):
    n = x.size
    return name, unary_ptx(instruction), [x, np.zeros_like(x), np.uint32(n)], 1, ((n + THREADS - 1) // THREADS, THREADS)


def sweep_cases(seed: int):
    for i, name in enumerate(SWEEP_UNARY):
        x = sweep_inputs(name, np.random.default_rng([seed, i]))
        instruction = "ex2.approx.f32" if name == "ex2.subnormal" else SWEEP_INSTRUCTION[name.split(".")[0]]
        yield unary_case(name, instruction, x)
    for i, (name, dtype) in enumerate(MMA.items()):
        a, b, c = mma_edge_inputs(dtype, np.random.default_rng([seed, 100 + i]))
        yield name + ".edge", mma_ptx(dtype), [a, b, c, np.zeros_like(c)], 3, (a.shape[0] * 32 // THREADS, THREADS)
    for i, (name, dtype) in enumerate(MMA.items()):
        a, b, c = mma_zero_inputs(dtype, np.random.default_rng([seed, 200 + i]))
        yield name + ".zeros", mma_ptx(dtype), [a, b, c, np.zeros_like(c)], 3, (a.shape[0] * 32 // THREADS, THREADS)


def pack_bits(out: np.ndarray) -> dict:
    """A large f32 result as the differences of consecutive bit patterns: int8 where they
    fit, the others as (index, difference) pairs."""
    diff = np.diff(out.view(np.uint32).astype(np.int64), prepend=0)
    wide = np.flatnonzero((diff < -128) | (diff > 127))
    small = diff.copy()
    small[wide] = 0
    return {"diff8": small.astype(np.int8), "wide_at": wide.astype(np.int64), "wide": diff[wide]}


def unpack_bits(packed: dict) -> np.ndarray:
    diff = packed["diff8"].astype(np.int64)
    diff[packed["wide_at"]] = packed["wide"]
    return np.cumsum(diff).astype(np.uint32).view(np.float32)


def stored(runs, name: str) -> np.ndarray:
    """The results of case `name` in a runs file, unpacked."""
    if name in runs.files:
        return runs[name]
    return unpack_bits({k: runs[f"{name}::{k}"] for k in ("diff8", "wide_at", "wide")})


def selected(name: str, only: str | None) -> bool:
    """Whether case `name` contains one of the comma-separated substrings `only`."""
    return not only or any(part in name for part in only.split(","))


def cmd_gpu(args) -> int:
    import ctypes

    import torch
    from cuda.bindings import driver as cu

    torch.cuda.init()
    torch.zeros(1, device="cuda")           # the primary context, current
    runs = {}
    for name, ptx, inputs, out_index, (grid, block) in cases(args.seed, args.set):
        if not selected(name, args.only):
            continue
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
        if out.size > PACK_ABOVE:
            runs.update({f"{name}::{k}": v for k, v in pack_bits(out.reshape(-1)).items()})
        else:
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
    for name, ptx, inputs, out_index, (grid, block) in cases(args.seed, args.set):
        if not selected(name, args.only):
            continue
        if name not in runs.files and f"{name}::diff8" not in runs.files:
            print(f"{name}: not in {args.runs}", flush=True)
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
        gpu = stored(runs, name).reshape(template.shape)
        ulps = f32_ulps(sim.reshape(-1), gpu.reshape(-1))
        equal = int((sim.reshape(-1).view(np.uint32) == gpu.reshape(-1).view(np.uint32)).sum())
        where = int(np.argmax(ulps))
        detail = ""
        if out_index == 1:
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
    for p in (gpu, cmp):
        p.add_argument("--only", help="comma-separated substrings of the case names to run")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--set", choices=("base", "sweep"), default="base",
                       help="the base cases or the sweeps of Note [Sweeps]")
    args = ap.parse_args(argv)
    return cmd_gpu(args) if args.cmd == "gpu" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
