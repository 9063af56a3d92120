"""Machine state: global memory, a CTA's shared memory and barriers, a warp's registers.

A warp's registers are four 2-D numpy arrays, one per register width, of shape
(registers, 32 lanes), each with typed views of the same bytes (`w.b32`, `w.s32`,
`w.f32` are one array read three ways), so a handler reads `%r7` as f32 with
`w.f32[7]` and no conversion. `pred` registers are booleans. Which row a register
name has is the kernel's `RegLayout`, fixed when the kernel is decoded.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnc_sim.errors import SimError

WARP = 32
LANES = np.arange(WARP)

# register type -> (register file, view attribute)
_CLASS = {"pred": "pred"}
for _t in ("b8", "u8", "s8", "b16", "u16", "s16", "f16", "bf16"):
    _CLASS[_t] = 16
for _t in ("b32", "u32", "s32", "f32", "f16x2", "bf16x2"):
    _CLASS[_t] = 32
for _t in ("b64", "u64", "s64", "f64"):
    _CLASS[_t] = 64

# PTX type -> the warp attribute that views a register file with that type's numpy dtype
VIEW = {"pred": "pred",
        "b8": "b16", "u8": "b16", "s8": "s16", "b16": "b16", "u16": "b16", "s16": "s16", "f16": "f16",
        "bf16": "b16", "b32": "b32", "u32": "b32", "s32": "s32", "f32": "f32", "f16x2": "b32",
        "bf16x2": "b32", "b64": "b64", "u64": "b64", "s64": "s64", "f64": "f64"}
DTYPE = {"pred": np.bool_, "b8": np.uint8, "u8": np.uint8, "s8": np.int8, "b16": np.uint16,
         "u16": np.uint16, "s16": np.int16, "f16": np.float16, "bf16": np.uint16, "b32": np.uint32,
         "u32": np.uint32, "s32": np.int32, "f32": np.float32, "f16x2": np.uint32, "bf16x2": np.uint32,
         "b64": np.uint64, "u64": np.uint64, "s64": np.int64, "f64": np.float64}
WIDTH = {t: (1 if t == "pred" else np.dtype(d).itemsize * 8) for t, d in DTYPE.items()}


def reg_class(ty: str):
    """The register file (16, 32, 64 or 'pred') a register declared with type `ty` lives in."""
    try:
        return _CLASS[ty]
    except KeyError:
        raise SimError(f"registers of type .{ty} are not supported") from None


@dataclass(frozen=True)
class RegLayout:
    """Where each register of a kernel lives: name -> (register file, row)."""
    rows: dict[str, tuple]
    counts: dict          # register file -> number of rows

    @staticmethod
    def of(regs: dict[str, str]) -> "RegLayout":
        rows, counts = {}, {16: 0, 32: 0, 64: 0, "pred": 0}
        for name, ty in regs.items():
            cls = reg_class(ty)
            rows[name] = (cls, counts[cls])
            counts[cls] += 1
        return RegLayout(rows, counts)


class Warp:
    """One warp of a CTA: 32 lanes' registers, the active mask and the SIMT stack.

    `mask` is the active lanes at `pc`; `wmask`/`wfull` the lanes an instruction
    writes (the active mask and its guard predicate); `stack` holds (pc, mask,
    reconvergence pc) entries of paths not yet run (Note [Reconvergence] in program.py)."""

    def __init__(self, cta: "Cta", index: int, layout: RegLayout, nthreads: int):
        self.cta, self.index = cta, index
        c = layout.counts
        r16 = np.zeros((max(c[16], 1), WARP), np.uint16)
        r32 = np.zeros((max(c[32], 1), WARP), np.uint32)
        r64 = np.zeros((max(c[64], 1), WARP), np.uint64)
        self.b16, self.s16, self.f16 = r16, r16.view(np.int16), r16.view(np.float16)
        self.b32, self.s32, self.f32 = r32, r32.view(np.int32), r32.view(np.float32)
        self.b64, self.s64, self.f64 = r64, r64.view(np.int64), r64.view(np.float64)
        self.pred = np.zeros((max(c["pred"], 1), WARP), np.bool_)
        tid = index * WARP + LANES
        self.exists = tid < nthreads                 # a partial last warp has absent lanes
        self.mask = self.exists.copy()
        self.full = bool(self.mask.all())
        self.wmask, self.wfull = self.mask, self.full
        self.exited = ~self.exists
        self.pc = 0
        self.rpc = -1                                # the reconvergence pc of the running path
        self.stack: list[tuple[int, np.ndarray, int]] = []
        self.done = False
        self.waiting: object = None                  # what a blocked warp waits for (its str), for reports
        self.special: dict[str, np.ndarray] = {}
        # asynchronous state (isa_mem.py: cp.async; isa_sm90.py: wgmma)
        self.async_state: dict[str, object] = {}
        self.pending_regs: dict = {}                 # (file, row) -> the in-flight op writing it
        self.local: np.ndarray | None = None         # (32, bytes): each thread's local memory

    # Note [Pending registers]: an asynchronous operation that writes registers (wgmma's
    # accumulators, tcgen05.ld's destinations) marks them pending from its issue until it
    # completes. The register readers and writers of isa.Context check the mark, so reading
    # one, or writing one the operation will still overwrite, is reported with the reading
    # instruction and the one that issued the operation; the operation then completes so
    # the run goes on with defined values.

    def mark_pending(self, keys, op) -> None:
        """Registers `keys` ((file, row) pairs) are written by the in-flight `op`."""
        for key in keys:
            self.pending_regs[key] = op

    def release_pending(self, keys, op) -> None:
        """`op` completed: its registers among `keys` are no longer pending."""
        for key in keys:
            if self.pending_regs.get(key) is op:
                del self.pending_regs[key]

    def set_mask(self, mask: np.ndarray) -> None:
        self.mask = mask
        self.full = bool(mask.all())
        self.wmask, self.wfull = mask, self.full

    @property
    def warpgroup(self) -> int:
        return self.index // 4

    def name(self) -> str:
        return f"CTA {self.cta.ctaid} warp {self.index}"


class GlobalMemory:
    """The device's global memory: one growing byte heap; allocations at 256-byte-aligned
    addresses from BASE with a guard gap between them, so a stray address faults."""

    BASE = 1 << 32
    GAP = 256

    def __init__(self):
        self.data = np.zeros(1 << 20, np.uint8)
        self.top = 0
        self.starts: list[int] = []
        self.ends: list[int] = []
        self._views: dict = {}

    def alloc(self, nbytes: int) -> int:
        """A new zeroed allocation's address."""
        start = (self.top + 255) // 256 * 256
        end = start + max(nbytes, 1)
        if end + self.GAP > self.data.size:
            grown = np.zeros(max(self.data.size * 2, end + self.GAP), np.uint8)
            grown[:self.data.size] = self.data
            self.data, self._views = grown, {}
        self.starts.append(start)
        self.ends.append(end)
        self.top = end + self.GAP
        return self.BASE + start

    def put(self, addr: int, array: np.ndarray) -> None:
        raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        off = addr - self.BASE
        self.data[off:off + raw.size] = raw

    def get(self, addr: int, nbytes: int) -> np.ndarray:
        off = addr - self.BASE
        return self.data[off:off + nbytes].copy()

    def view(self, dtype) -> np.ndarray:
        v = self._views.get(dtype)
        if v is None:
            v = self._views[dtype] = self.data.view(dtype)
        return v

    def offsets(self, addrs: np.ndarray, width: int, where: str) -> np.ndarray:
        """Byte offsets into the heap of the addresses `addrs` (active lanes only), each
        accessing `width` bytes; raises on a misaligned or out-of-allocation access."""
        offs = addrs.astype(np.int64) - self.BASE
        if offs.size == 0:
            return offs
        if (offs & (width - 1)).any():
            bad = int(addrs[(offs & (width - 1)) != 0][0])
            raise SimError(f"misaligned {width}-byte global access at {bad:#x}: {where}")
        k = np.searchsorted(self.starts, offs, side="right") - 1
        ok = (k >= 0) & (offs + width <= np.asarray(self.ends)[np.maximum(k, 0)])
        if not ok.all():
            bad = int(addrs[~ok][0])
            raise SimError(f"global access at {bad:#x} ({width} bytes) outside every allocation: {where}")
        return offs


@dataclass
class NamedBarrier:
    expected: int = 0                       # threads; 0 while no warp has arrived
    arrived: int = 0
    waiters: list = field(default_factory=list)     # (warp, on_release) pairs


class Cta:
    """One CTA: its shared memory bytes, named barriers, mbarriers and warps."""

    def __init__(self, ctaid: tuple[int, int, int], smem_bytes: int):
        self.ctaid = ctaid
        self.smem = np.zeros(max(smem_bytes, 16), np.uint8)
        self.smem_views = {np.uint8: self.smem}
        # bytes that in-flight asynchronous operations will write / still read (races)
        self.inflight_writes = np.zeros(self.smem.size, np.int16)
        self.inflight_reads = np.zeros(self.smem.size, np.int16)
        self.n_inflight = 0
        self.barriers: dict[int, NamedBarrier] = {}
        self.mbarriers: dict[int, object] = {}      # shared address -> isa_sync.MBarrier
        self.warps: list[Warp] = []
        self.launch = None                          # the engine's Launch (scheduler, memory, reports)

    def smem_view(self, dtype) -> np.ndarray:
        v = self.smem_views.get(dtype)
        if v is None:
            v = self.smem_views[dtype] = self.smem.view(dtype)
        return v

    def smem_offsets(self, addrs: np.ndarray, width: int, where: str) -> np.ndarray:
        offs = addrs.astype(np.int64)
        if offs.size == 0:
            return offs
        if (offs & (width - 1)).any():
            raise SimError(f"misaligned {width}-byte shared access at {int(offs[(offs & (width - 1)) != 0][0]):#x}: {where}")
        if offs.min() < 0 or offs.max() + width > self.smem.size:
            bad = int(offs[(offs < 0) | (offs + width > self.smem.size)][0])
            raise SimError(f"shared access at {bad:#x} ({width} bytes) outside the CTA's "
                           f"{self.smem.size} bytes of shared memory: {where}")
        return offs
