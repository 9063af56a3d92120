"""Tensor memory (sm_100a): the per-CTA array, its allocator, and the tcgen05 data movements and
MMA over it, as pure functions on numpy state (no scheduling: `isa_sm100` decides when).

Interface:

* `TensorMemory()` — 128 lanes x 512 columns of 32-bit cells (`.cells`, uint32) and the
  allocator: `try_alloc(ncols) -> address | None` (None: not enough free columns now, the
  allocating warp waits), `dealloc(address, ncols)`, `relinquish()`, `leaks()` (allocations
  still held, for the end-of-kernel check). Misuse raises `TmemError` naming the rule.
* Addresses are `lane << 16 | column` (PTX ISA "Tensor Memory Addressing"); `split(address)`.
* `ld_st_cells(shape, num, warp_id, address, half_split=0)` -> `(lanes, columns)`, two
  `(32, registers)` arrays: which cell thread t's register j reads (`tcgen05.ld`) or writes
  (`tcgen05.st`), for the shapes `32x32b`, `16x64b`, `16x128b`, `16x256b`, `16x32bx2`
  and `.num` x1..x128. A warp reaches only the 32 lanes of its quarter, `warp_id % 4`.
* `InstrDesc.decode(u32)` — the kind::f16 instruction descriptor (dtype, a/b types, negates,
  majors, N, M); `InstrDesc.encode()`.
* `mma_f16(tmem, smem, d_address, a, b_desc, idesc, accumulate)` — one tcgen05.mma
  cta_group::1 kind::f16 (K = 16): `a` is an `smem_desc.SmemDesc` or a TMEM address, `b_desc` a
  `SmemDesc`; D (f32) in TMEM is overwritten or accumulated. Returns the (lanes, columns)
  written, for hazard tracking.
* `cp_cells(shape, multicast)` and `cp(tmem, smem, address, desc, shape, multicast)` —
  tcgen05.cp from shared memory (`128x256b`, `4x256b`, `128x128b`, `64x128b` with
  `warpx2::02_13` / `warpx2::01_23`, `32x128b` with `warpx4`).

Note [TMEM data path layouts]: what the PTX ISA text (or CUTLASS, for its figures) confirms and
what the emulator infers.

* M = 128, cta_group::1: row r of D (and of A in TMEM) in lane r. Confirmed: PTX ISA 9.7.16.10.5
  "Data path layout organization", layout D.
* M = 64, cta_group::1 (no .ws): 16 rows in each warp's 32-lane quarter, row r in lane
  `(r // 16) * 32 + r % 16` past the address's lane. The 16-rows-per-quarter split is layout F of
  9.7.16.10.5; that the address's lane (0 or 16) picks the low or high half of each quarter is
  INFERRED: the layout is given as a figure only, and its summaries (TVM's tmem_datapath_layout:
  "64 rows scattered 16-per-warp, half datapath") do not say which half.
* A in TMEM holds two 16-bit elements per 32-bit column, the lower k in the low half: INFERRED
  from the f16x2 packing of registers (mma.sync fragments); the ISA shows it in a figure only.
* D is f32, one column per element: 9.7.16.10.9 (tcgen05.mma), confirmed.
* The tcgen05.ld/st fragments (`_pattern`): 32x32b, thread t reads lane t, register j column j, is
  in the text of 9.7.16.2.3.1.1. 16x64b, 16x128b, 16x256b and 16x32bx2 are figures (184-187);
  the maps here are confirmed against CUTLASS's cute/atom/copy_traits_sm100.hpp, whose
  Copy_Traits<SM100_TMEM_LOAD_16dp64b1x>, `_16dp128b1x`, `_16dp256b1x` and `_16dp32b1x` give
  the (thread, value) -> (data path, bit) layouts: 16x64b thread t in lane t/4 + 8(t%2), column
  (t/2)%2; 16x128b lanes t/4 and t/4 + 8, column t%4; 16x256b lanes t/4 and t/4 + 8, columns
  2(t%4) and +1 (the mma.sync accumulator pattern); 16x32bx2 lane t%16, the second half-warp at
  +immHalfSplitoff columns. `.num` repeats the pattern along the columns (the `_2x`.. traits:
  a repetition is 2, 4, 8 columns).
* Allocation: nCols a power of 2 from 32 to 512, and blocking while the columns are not free,
  are in 9.7.16.7.1 (tcgen05.alloc). Where an allocation lands is not: the emulator hands out
  the lowest free run aligned to its size (INFERRED; a kernel uses the address tcgen05.alloc
  writes to shared memory, so only code that assumes an alignment could tell).

Note [Stale tensor memory]: tcgen05.alloc does not clear the columns it hands out; they hold
what the last CTA on the SM left there. The emulator fills them with `STALE` at each
allocation, all bits set: NaN as an f32 and as both halves of a bf16 or f16 pair, so a kernel
that reads a column before writing it (with a tcgen05.st, or an MMA that does not accumulate)
gets NaNs into its results rather than the zeros of a fresh numpy array.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .smem_desc import SmemDesc, read_matrix

LANES = 128
COLUMNS = 512
QUARTER = 32                # lanes a warp reaches: those of quarter warp_id % 4
MIN_ALLOC = 32
STALE = np.uint32(0xFFFFFFFF)   # Note [Stale tensor memory]


class TmemError(ValueError):
    """A tensor-memory access or allocation the PTX ISA does not allow."""


def address(lane: int, column: int) -> int:
    return (lane << 16) | column


def split(addr: int) -> tuple[int, int]:
    addr = int(addr) & 0xFFFFFFFF
    return addr >> 16, addr & 0xFFFF


class TensorMemory:
    """One CTA's tensor memory and its column allocator."""

    def __init__(self):
        self.cells = np.zeros((LANES, COLUMNS), np.uint32)
        self.allocations: dict[int, int] = {}       # first column -> columns
        self.relinquished = False

    def try_alloc(self, ncols: int) -> int | None:
        """tcgen05.alloc: the address of `ncols` fresh columns (lane 0), aligned to `ncols` (an
        inferred placement: Note [TMEM data path layouts]), or None while the free columns
        cannot hold them."""
        ncols = int(ncols)
        if ncols < MIN_ALLOC or ncols > COLUMNS or ncols & (ncols - 1):
            raise TmemError(f"tcgen05.alloc of {ncols} columns: the count must be a power of 2 "
                            f"from {MIN_ALLOC} to {COLUMNS}")
        if self.relinquished:
            raise TmemError("tcgen05.alloc after tcgen05.relinquish_alloc_permit")
        for start in range(0, COLUMNS, ncols):
            if all(not (s < start + ncols and start < s + n) for s, n in self.allocations.items()):
                self.allocations[start] = ncols
                self.cells[:, start:start + ncols] = STALE
                return address(0, start)
        return None

    def dealloc(self, addr: int, ncols: int) -> None:
        lane, column = split(addr)
        if lane != 0 or self.allocations.get(column) != int(ncols):
            held = ", ".join(f"{n} at column {s}" for s, n in sorted(self.allocations.items())) or "none"
            raise TmemError(f"tcgen05.dealloc of {ncols} columns at lane {lane} column {column} "
                            f"matches no allocation (held: {held})")
        del self.allocations[column]

    def relinquish(self) -> None:
        self.relinquished = True

    def leaks(self) -> list[tuple[int, int]]:
        """Allocations not released: every allocation must be deallocated before the CTA exits."""
        return sorted(self.allocations.items())

    def check_allocated(self, lanes: np.ndarray, columns: np.ndarray, what: str) -> None:
        cols = np.unique(columns)
        if cols.size and (cols.min() < 0 or cols.max() >= COLUMNS or lanes.min() < 0 or lanes.max() >= LANES):
            raise TmemError(f"{what} reaches past tensor memory (lanes < {LANES}, columns < {COLUMNS})")
        held = np.zeros(COLUMNS, bool)
        for start, n in self.allocations.items():
            held[start:start + n] = True
        if not held[cols].all():
            bad = int(cols[~held[cols]][0])
            raise TmemError(f"{what} touches column {bad}, which is not allocated")


# tcgen05.ld / tcgen05.st ------------------------------------------------------------------

_MAX_NUM = {"32x32b": 128, "16x64b": 128, "16x128b": 64, "16x256b": 32, "16x32bx2": 128}
LD_ST_SHAPES = tuple(_MAX_NUM)
_REGS_PER_NUM = {"32x32b": 1, "16x64b": 1, "16x128b": 2, "16x256b": 4, "16x32bx2": 1}


def _pattern(shape: str, t: np.ndarray, half_split: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(lane offset, column offset) of each of thread t's registers in one repetition, and the
    columns one repetition spans."""
    if shape == "32x32b":
        return t[:, None], np.zeros((32, 1), np.int64), 1
    if shape == "16x32bx2":
        return (t % 16)[:, None], np.where(t < 16, 0, half_split)[:, None], 1
    if shape == "16x64b":
        return (t // 4 + 8 * (t % 2))[:, None], ((t // 2) % 2)[:, None], 2
    row = (t // 4)[:, None]
    if shape == "16x128b":
        return np.hstack([row, row + 8]), np.hstack([t[:, None] % 4] * 2), 4
    pair = 2 * (t[:, None] % 4)
    return np.hstack([row, row, row + 8, row + 8]), np.hstack([pair, pair + 1, pair, pair + 1]), 8


def ld_st_cells(shape: str, num: int, warp_id: int, addr: int, half_split: int = 0):
    """Which (lane, column) thread t's register j holds in tcgen05.ld/st `shape`.`x<num>`."""
    if shape not in _MAX_NUM:
        raise TmemError(f"tcgen05.ld/st has no shape {shape}")
    if num < 1 or num > _MAX_NUM[shape] or num & (num - 1):
        raise TmemError(f"tcgen05.ld/st.{shape} takes .num x1 to x{_MAX_NUM[shape]} (powers of 2), not x{num}")
    lane0, col0 = split(addr)
    t = np.arange(32, dtype=np.int64)
    lane, col, span = _pattern(shape, t, half_split)
    reps = np.arange(num, dtype=np.int64)
    lanes = np.repeat(lane[:, None, :], num, axis=1).reshape(32, -1) + lane0
    cols = (col[:, None, :] + span * reps[None, :, None]).reshape(32, -1) + col0
    quarter = warp_id % 4
    if lanes.min() < QUARTER * quarter or lanes.max() >= QUARTER * (quarter + 1):
        raise TmemError(f"warp {warp_id} reaches lanes {QUARTER * quarter}-{QUARTER * quarter + 31} only "
                        f"(warp id % 4 = {quarter}); tcgen05.ld/st.{shape} at lane {lane0} touches lanes "
                        f"{int(lanes.min())}-{int(lanes.max())}")
    return lanes, cols


def registers_per_thread(shape: str, num: int) -> int:
    return _REGS_PER_NUM[shape] * num


# tcgen05.mma kind::f16 --------------------------------------------------------------------

_F16_TYPES = {0: "f16", 1: "bf16"}


@dataclasses.dataclass(frozen=True)
class InstrDesc:
    """The kind::f16 instruction descriptor (PTX ISA 9.7.16.4.2, Table "Instruction descriptor
    format"): dtype 4-5 (0 f16, 1 f32), atype 7-9 and btype 10-12 (0 f16, 1 bf16), negate A 13,
    negate B 14, transpose (MN-major) A 15 and B 16, N >> 3 in 17-22, M >> 4 in 24-28."""

    m: int
    n: int
    a_type: str = "f16"
    b_type: str = "f16"
    d_type: str = "f32"
    negate_a: bool = False
    negate_b: bool = False
    a_mn_major: bool = False
    b_mn_major: bool = False

    @classmethod
    def decode(cls, value: int) -> "InstrDesc":
        value = int(value) & 0xFFFFFFFF
        bit = lambda i: bool(value >> i & 1)  # noqa: E731
        if value & 0b111:
            raise TmemError("instruction descriptor bits 0-2 (sparsity) must be 0: sparse MMA is not modelled")
        if bit(3) or bit(6) or bit(23) or bit(29) or value >> 30:
            raise TmemError(f"instruction descriptor {value:#010x} sets a reserved bit, saturate or max-shift")
        dtype, atype, btype = value >> 4 & 3, value >> 7 & 7, value >> 10 & 7
        if dtype not in (0, 1) or atype not in _F16_TYPES or btype not in _F16_TYPES:
            raise TmemError(f"instruction descriptor {value:#010x}: kind::f16 takes dtype f16/f32 "
                            "and a/b types f16/bf16")
        return cls(m=(value >> 24 & 0x1F) << 4, n=(value >> 17 & 0x3F) << 3, a_type=_F16_TYPES[atype],
                   b_type=_F16_TYPES[btype], d_type=("f16", "f32")[dtype], negate_a=bit(13),
                   negate_b=bit(14), a_mn_major=bit(15), b_mn_major=bit(16))

    def encode(self) -> int:
        code = {v: k for k, v in _F16_TYPES.items()}
        return ((self.d_type == "f32") << 4 | code[self.a_type] << 7 | code[self.b_type] << 10
                | self.negate_a << 13 | self.negate_b << 14 | self.a_mn_major << 15
                | self.b_mn_major << 16 | (self.n >> 3) << 17 | (self.m >> 4) << 24)

    def check(self) -> None:
        """The cta_group::1 kind::f16 shapes: M 64 (N a multiple of 8 in 8..256) or M 128 (N a
        multiple of 16 in 16..256); D in f32 only here."""
        step = {64: 8, 128: 16}.get(self.m)
        if step is None or self.n % step or not step <= self.n <= 256:
            raise TmemError(f"tcgen05.mma kind::f16 has no shape M={self.m} N={self.n} "
                            "(M=64: N in 8..256 by 8; M=128: N in 16..256 by 16)")
        if self.d_type != "f32":
            raise TmemError("tcgen05.mma with an f16 accumulator is not modelled")


MMA_K = 16


def rows_to_lanes(m: int, lane0: int, what: str) -> np.ndarray:
    rows = np.arange(m, dtype=np.int64)
    if m == 128:
        if lane0:
            raise TmemError(f"{what} with M=128 must start at lane 0, not lane {lane0}")
        return rows
    if lane0 not in (0, 16):
        raise TmemError(f"{what} with M=64 starts at lane 0 or 16, not lane {lane0}")
    return (rows // 16) * QUARTER + rows % 16 + lane0


def half_to_f32(bits: np.ndarray, kind: str) -> np.ndarray:
    """16-bit f16 or bf16 bit patterns as float32."""
    bits = np.asarray(bits, np.uint16)
    if kind == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view(np.float16).astype(np.float32)


def _a_from_tmem(tmem: TensorMemory, addr: int, idesc: InstrDesc) -> tuple[np.ndarray, tuple]:
    lane0, col0 = split(addr)
    lanes = rows_to_lanes(idesc.m, lane0, "tcgen05.mma's A in tensor memory")
    cols = col0 + np.arange(MMA_K // 2)
    tmem.check_allocated(lanes, cols, "tcgen05.mma's A operand")
    words = tmem.cells[np.ix_(lanes, cols)]
    halves = np.stack([words & 0xFFFF, words >> 16], axis=-1).reshape(idesc.m, MMA_K)
    return half_to_f32(halves.astype(np.uint16), idesc.a_type), (lanes, cols)


def mma_f16(tmem: TensorMemory, smem: np.ndarray, d_addr: int, a, b_desc: SmemDesc,
            idesc: InstrDesc, accumulate: bool):
    """D = A x B (+ D): A is M x 16, B is 16 x N read as N rows of K, D is M x N f32 in TMEM.
    Returns the cells read and written: `{"a": (lanes, cols) or None, "d": (lanes, cols)}`."""
    idesc.check()
    if isinstance(a, SmemDesc):
        a_bits = read_matrix(smem, a, idesc.m, MMA_K, np.uint16, "MN" if idesc.a_mn_major else "K")
        a_vals, a_cells = half_to_f32(a_bits, idesc.a_type), None
    else:
        if idesc.a_mn_major:
            raise TmemError("tcgen05.mma with A in tensor memory takes no A transpose")
        a_vals, a_cells = _a_from_tmem(tmem, a, idesc)
    b_bits = read_matrix(smem, b_desc, idesc.n, MMA_K, np.uint16, "MN" if idesc.b_mn_major else "K")
    b_vals = half_to_f32(b_bits, idesc.b_type)
    if idesc.negate_a:
        a_vals = -a_vals
    if idesc.negate_b:
        b_vals = -b_vals
    lane0, col0 = split(d_addr)
    lanes = rows_to_lanes(idesc.m, lane0, "tcgen05.mma's D")
    cols = col0 + np.arange(idesc.n)
    tmem.check_allocated(lanes, cols, "tcgen05.mma's D")
    product = a_vals.astype(np.float64) @ b_vals.astype(np.float64).T
    block = np.ix_(lanes, cols)
    if accumulate:
        product = product + tmem.cells[block].view(np.float32)
    tmem.cells[block] = product.astype(np.float32).view(np.uint32)
    return {"a": a_cells, "d": (lanes, cols)}


# tcgen05.cp -------------------------------------------------------------------------------

CP_SHAPES = {"128x256b": (128, 8), "4x256b": (4, 8), "128x128b": (128, 4), "64x128b": (64, 4),
              "32x128b": (32, 4)}
_CP_MULTICAST = {"128x256b": {None}, "4x256b": {None}, "128x128b": {None},
                 "64x128b": {"warpx2::02_13", "warpx2::01_23"}, "32x128b": {"warpx4"}}


def cp_cells(shape: str, multicast: str | None) -> tuple[np.ndarray, int]:
    """For each destination lane of a tcgen05.cp, the source row it receives; and the columns."""
    if shape not in CP_SHAPES:
        raise TmemError(f"tcgen05.cp has no shape {shape}")
    if multicast not in _CP_MULTICAST[shape]:
        allowed = " or ".join(sorted(m or "no multicast" for m in _CP_MULTICAST[shape]))
        raise TmemError(f"tcgen05.cp.{shape} takes {allowed}, not {multicast or 'no multicast'}")
    rows, cols = CP_SHAPES[shape]
    if multicast is None:
        return np.arange(rows), cols
    r = np.arange(QUARTER)
    if multicast == "warpx4":                        # the 32 rows reach every quarter
        return np.concatenate([r] * 4), cols
    if multicast == "warpx2::02_13":                 # rows 0-31 -> quarters 0, 2; 32-63 -> 1, 3
        return np.concatenate([r, r + 32, r, r + 32]), cols
    return np.concatenate([r, r, r + 32, r + 32]), cols  # warpx2::01_23


def cp(tmem: TensorMemory, smem: np.ndarray, addr: int, desc: SmemDesc, shape: str,
       multicast: str | None = None):
    """Copy the source matrix (rows of 128 or 256 bits, 8-row core matrices as a K-major
    operand of 32-bit elements) into TMEM at `addr`; returns the (lanes, cols) written."""
    sources, cols = cp_cells(shape, multicast)
    rows = CP_SHAPES[shape][0]
    lane0, col0 = split(addr)
    source = read_matrix(smem, desc, rows, cols, np.uint32, "K")
    lanes = lane0 + np.arange(sources.size)
    columns = col0 + np.arange(cols)
    tmem.check_allocated(lanes, columns, f"tcgen05.cp.{shape}")
    tmem.cells[np.ix_(lanes, columns)] = source[sources]
    return lanes, columns
