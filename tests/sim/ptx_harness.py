"""Run a small hand-written PTX kernel in the emulator, with numpy arrays as its parameters.

    out = np.zeros(32, np.uint32)
    res = run_kernel(BODY, [out, np.arange(32, dtype=np.float32)])
    res.arrays[0]            # `out` after the launch, read back from the emulated memory

`kernel(body, nparams)` wraps an instruction list into a PTX module with a kernel `k` of
`nparams` .u64 parameters p0.. and registers enough for any test (%r, %rd, %f, %fd, %h,
%p). Its prologue puts `&p_i[tid]` in `%a<i>` for 4-byte elements, `%tid` the thread index,
so a test kernel loads its lane's input with `ld.global.b32 %r1, [%a1];`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnc_sim.engine import Launch
from attnc_sim.errors import SimError
from attnc_sim.program import decode
from attnc_sim.ptx import parse_module
from attnc_sim.scheduler import Scheduler
from attnc_sim.state import GlobalMemory

_REGS = """
    .reg .b32 %r<64>;
    .reg .b64 %rd<32>;
    .reg .b64 %a<8>;
    .reg .f32 %f<32>;
    .reg .f64 %fd<8>;
    .reg .b16 %h<16>;
    .reg .pred %p<16>;
    .reg .b32 %tid;
"""


def kernel(body: str, nparams: int = 1, target: str = "sm_90a", extra: str = "") -> str:
    """The PTX text of kernel `k`: `body` after a prologue that sets %tid and %a<i>."""
    params = ", ".join(f".param .u64 p{i}" for i in range(nparams))
    prologue = ["mov.u32 %tid, %tid.x;", "mul.wide.u32 %rd31, %tid, 4;"]
    for i in range(nparams):
        prologue += [f"ld.param.u64 %a{i}, [p{i}];", f"add.s64 %a{i}, %a{i}, %rd31;"]
    lines = "\n    ".join(prologue)
    return (f".version 8.4\n.target {target}\n.address_size 64\n{extra}\n"
            f".visible .entry k({params})\n{{{_REGS}\n    {lines}\n{body}\n    ret;\n}}\n")


# The source line of the first body instruction: tests name report lines relative to it.
BODY_LINE = kernel("", 0).count("\n") - 1


@dataclass
class Result:
    launch: Launch
    arrays: list            # the array parameters after the launch
    reports: list
    error: SimError | None = None       # what stopped the launch (a deadlock), if anything


def run_kernel(body_or_ptx: str, arrays: list, threads: int = 32, grid=(1, 1, 1), smem: int = 0,
               seed: int = 0, quantum: int = 64, early: float = 0.25, raise_reports: bool = False,
               target: str = "sm_90a") -> Result:
    """Launch kernel `k` (a body for `kernel`, or a whole module) on copies of `arrays`."""
    text = body_or_ptx if ".entry" in body_or_ptx else kernel(body_or_ptx, len(arrays), target)
    module = parse_module(text, "test.ptx")
    program = decode(module.kernels["k"])
    memory = GlobalMemory()
    ptrs = [memory.alloc(a.nbytes) for a in arrays]
    for p, a in zip(ptrs, arrays):
        memory.put(p, a)
    params = b"".join(int(p).to_bytes(8, "little") for p in ptrs)
    launch = Launch(program, grid, (threads, 1, 1), smem, memory, params,
                    Scheduler(seed=seed, early=early, quantum=quantum), raise_reports=raise_reports)
    error = None
    try:
        launch.run()
    except SimError as e:
        if raise_reports:
            raise
        error = e
    back = [memory.get(p, a.nbytes).view(a.dtype).reshape(a.shape) for p, a in zip(ptrs, arrays)]
    return Result(launch, back, launch.reports, error)


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the first line of `text` containing `needle`."""
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise ValueError(needle)


def f32_bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def lanes(dtype=np.uint32, n: int = 32) -> np.ndarray:
    return np.zeros(n, dtype)
