"""Run a hand-written PTX kernel (ptx/) as one CTA through the emulator as a launch does: the
decoder with every instruction family, the parameters packed at the offsets the kernel declares,
inputs and outputs in global memory. The kernels are plain PTX (mov, ld/st, mbarrier, bar.sync
and the sm_100a instructions): the core runs them unchanged.

    mem = Memory()
    out = mem.zeros(128 * 16, np.float32)
    launch, cta = run("mma_ld_32x32b.ptx", 128, {"img": mem.place(image), "out": out, ...}, mem)
    d = mem.get(out, (128, 16), np.float32)

Most kernels start by copying a shared-memory image (`img`, `img_bytes`: what the test laid out
with smem_desc.write_matrix) from global memory into dynamic shared memory at address 0.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from attnc_sim.engine import Launch
from attnc_sim.errors import SimError
from attnc_sim.program import decode
from attnc_sim.ptx import parse_module
from attnc_sim.scheduler import Scheduler
from attnc_sim.state import GlobalMemory

PTX = Path(__file__).parent / "ptx"
_PACK = {"u64": "<Q", "s64": "<q", "b64": "<Q", "u32": "<I", "s32": "<i", "b32": "<I"}


class Memory(GlobalMemory):
    """Global memory with numpy in and out."""

    def place(self, array) -> int:
        array = np.ascontiguousarray(array)
        addr = self.alloc(array.nbytes)
        self.put(addr, array)
        return addr

    def zeros(self, count: int, dtype=np.uint32) -> int:
        return self.place(np.zeros(count, dtype))

    def get_array(self, addr: int, shape, dtype) -> np.ndarray:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.get(addr, nbytes).view(dtype).reshape(shape)


def kernel_text(name: str, **fill) -> str:
    """The kernel file's text, with `{KEY}` placeholders (a shape, a register vector) filled."""
    text = (PTX / name).read_text()
    for key, value in fill.items():
        text = text.replace("{" + key + "}", value)
    return text


def launch_of(name: str, threads: int, params: dict, memory: GlobalMemory, *, text: str | None = None,
              smem_bytes: int = 48 * 1024, seed: int = 0, early: float = 0.0) -> Launch:
    """The launch of kernel file `name` (or `text`) as one CTA of `threads` threads; `params`
    maps each parameter name to an int (packed as its declared type) or bytes. Races and
    protocol errors go to `launch.reports`, not raised."""
    module = parse_module(text if text is not None else (PTX / name).read_text(), name)
    program = decode(next(iter(module.kernels.values())))
    raw = bytearray(max(program.param_size, 8))
    for p in program.kernel.params:
        value, at = params[p.name], program.param_offsets[p.name]
        data = value if isinstance(value, (bytes, bytearray)) else struct.pack(_PACK[p.type], value)
        raw[at:at + len(data)] = data
    return Launch(program, (1, 1, 1), (threads, 1, 1), smem_bytes, memory, bytes(raw),
                  Scheduler(seed=seed, early=early), raise_reports=False)


def run(name: str, threads: int, params: dict, memory: GlobalMemory, **kw):
    """Run the kernel to its end: (launch, cta)."""
    launch = launch_of(name, threads, params, memory, **kw)
    return launch, launch.run_cta((0, 0, 0))


def run_until_error(name: str, threads: int, params: dict, memory: GlobalMemory, **kw):
    """Run a kernel the emulator must stop (a deadlock): (launch, the SimError)."""
    launch = launch_of(name, threads, params, memory, **kw)
    try:
        launch.run_cta((0, 0, 0))
    except SimError as e:
        return launch, e
    raise AssertionError(f"{name} ran to the end; expected the emulator to stop it")


def image(size: int, *writes) -> tuple[np.ndarray, int]:
    """A shared-memory image of `size` bytes (a multiple of 16) and its byte count; `writes`
    are functions of the uint8 array (smem_desc.write_matrix and friends)."""
    smem = np.zeros(size, np.uint8)
    for write in writes:
        write(smem)
    return smem, size
