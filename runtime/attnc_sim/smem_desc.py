"""Shared-memory matrix descriptors (wgmma on sm_90a, tcgen05 on sm_100a) and the matrix an MMA
reads through one.

Interface:

* `Swizzle` — the swizzling modes (`NONE`, `B32`, `B64`, `B128`, `B128_ATOM32`); `.width` is the
  bytes of one swizzled row (16 for `NONE`), `.atom` the bytes XOR-permuted as one unit.
* `SmemDesc` — a decoded descriptor: byte `start`, `lbo`, `sbo`, `base_offset`, `swizzle` and
  `lbo_absolute` (tcgen05's leading-dimension address mode).
* `decode_wgmma(u64)` / `encode_wgmma(desc)` and `decode_tcgen05(u64)` / `encode_tcgen05(desc)`:
  the two 64-bit encodings; decoding checks the fixed and reserved fields and raises
  `DescriptorError` naming the field.
* `swizzle_address(addr, swizzle, base_offset=0)`: the physical byte address of a logical one
  (works elementwise on integer arrays).
* `element_addresses(desc, rows, cols, itemsize, major)`: a `(rows, cols)` integer array of the
  shared-memory byte address of each element of the matrix the MMA reads; `rows` is its M (or N)
  extent and `cols` its K extent whatever the major-ness; `major` is `"K"` or `"MN"`.
* `element_bytes(...)`: the same, every byte of every element, flat (the race checks').
* `read_matrix(smem, desc, rows, cols, dtype, major)`: that `(rows, cols)` matrix of `dtype`
  read from `smem` (a uint8 array holding the CTA's shared memory, indexed by shared address).
* `write_matrix(smem, desc, matrix, major)`: the inverse: lays `matrix` out where
  `read_matrix` reads it.

Note [Canonical layouts]: the PTX ISA's "Shared Memory Matrix Layout" sections (wgmma,
9.7.15.5.1.2, and tcgen05, "Shared Memory Descriptor" with its canonical layouts) build an
operand from 16-byte chunks. With `T` elements per chunk and `x` chunks per swizzled row
(x = width / 16), in CuTe's (shape):(stride) form in elements:

    K-major,  no swizzle   ((8,m),(T,2k)) : ((T,SBO),(1,LBO))
    K-major,  swizzled     ((8,m),(T,xk)) : ((xT,SBO),(1,T))      one row holds all of K
    MN-major, no swizzle   ((T,1,m),(8,k)) : ((1,T,SBO),(T,LBO))
    MN-major, swizzled     ((T,x,m),(8,k)) : ((1,T,LBO),(xT,SBO))

and the swizzle then permutes the address. The swizzle acts on the absolute shared address,
as TMA's does, so a descriptor whose start moves along K inside a swizzled row (the usual way to
step K by one MMA) reads what a TMA load of the whole tile wrote. A pattern that does not start
on its repeat boundary (1024/512/256 bytes) carries `base_offset = (pattern start >> 7) & 7`
(confirmed: PTX ISA 9.7.16.4.1 "Shared Memory Descriptor", Tables 40-41, and 9.7.15.5.1.2.2 for
wgmma). The ISA gives that encoding only, not how the hardware applies it: this module takes a
row's phase in the pattern as `(addr >> 7) - base_offset` (INFERRED: subtracting the phase of
the pattern's start makes a pattern placed off its boundary swizzle as one placed on it).

Note [Swizzle units]: a swizzle XORs the index of a unit within a row with the row's phase,
bits 7 and up of the address. The 128B, 64B and 32B modes use 16-byte units and 3, 2, 1 phase
bits; tcgen05's mode 1, "128-Byte with 32B atomic swizzling" (PTX ISA 9.7.16.4.1, Table 40), and
TMA's CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B use 32-byte units of a 128-byte row and 2 phase bits.
The ISA draws these as figures; the bit functions are confirmed against CUTLASS
(cute/arch/mma_sm100_desc.hpp and mma_sm90_desc.hpp: SWIZZLE_128B = Swizzle<3,4,3>, 64B =
Swizzle<2,4,3>, 32B = Swizzle<1,4,3>, 128B_BASE32B = Swizzle<2,5,2>, i.e. address bits [M, M+B)
XORed with bits [M+S, M+S+B)).
"""
from __future__ import annotations

import dataclasses
import enum
import functools

import numpy as np

CHUNK = 16                      # bytes of one core-matrix row
ADDRESS_MASK = 0x3FFFF          # matrix-descriptor-encode keeps 18 address bits


class DescriptorError(ValueError):
    """A descriptor with a bad fixed field, an invalid mode, or a layout it cannot describe."""


class Swizzle(enum.Enum):
    """A swizzling mode: `(width, atom)` — the bytes of a swizzled row and of one permuted unit."""

    NONE = (16, 16)
    B32 = (32, 16)
    B64 = (64, 16)
    B128 = (128, 16)
    B128_ATOM32 = (128, 32)

    @property
    def width(self) -> int:
        return self.value[0]

    @property
    def atom(self) -> int:
        return self.value[1]

    @property
    def xor_bits(self) -> int:
        """How many row bits are XORed into the unit index."""
        return (self.width // self.atom).bit_length() - 1


_WGMMA_CODES = {0: Swizzle.NONE, 1: Swizzle.B128, 2: Swizzle.B64, 3: Swizzle.B32}
_TCGEN05_CODES = {0: Swizzle.NONE, 1: Swizzle.B128_ATOM32, 2: Swizzle.B128, 4: Swizzle.B64,
                  6: Swizzle.B32}


@dataclasses.dataclass(frozen=True)
class SmemDesc:
    """A decoded shared-memory matrix descriptor; byte quantities, not the encoded >> 4 fields."""

    start: int
    lbo: int
    sbo: int
    base_offset: int = 0
    swizzle: Swizzle = Swizzle.NONE
    lbo_absolute: bool = False


def _field(value: int, low: int, bits: int) -> int:
    return (value >> low) & ((1 << bits) - 1)


def _encode_address(x: int) -> int:
    return (x & ADDRESS_MASK) >> 4


def decode_wgmma(value: int) -> SmemDesc:
    """The wgmma descriptor (PTX ISA 9.7.15.5.1.2.2, "Matrix Descriptor Format"): start 0-13,
    LBO 16-29, SBO 32-45, base offset 49-51, swizzle 62-63 (0 none, 1 128B, 2 64B, 3 32B)."""
    value = int(value) & (2**64 - 1)
    return SmemDesc(start=_field(value, 0, 14) << 4, lbo=_field(value, 16, 14) << 4,
                    sbo=_field(value, 32, 14) << 4, base_offset=_field(value, 49, 3),
                    swizzle=_WGMMA_CODES[_field(value, 62, 2)])


def encode_wgmma(desc: SmemDesc) -> int:
    code = {v: k for k, v in _WGMMA_CODES.items()}.get(desc.swizzle)
    if code is None:
        raise DescriptorError(f"wgmma has no {desc.swizzle.name} swizzle")
    return (_encode_address(desc.start) | _encode_address(desc.lbo) << 16
            | _encode_address(desc.sbo) << 32 | (desc.base_offset & 7) << 49 | code << 62)


def decode_tcgen05(value: int) -> SmemDesc:
    """The tcgen05 descriptor (PTX ISA 9.7.16.4.1, "Shared Memory Descriptor"): start 0-13,
    LBO 16-29, SBO 32-45, the constant 0b001 in 46-48, base offset 49-51, LBO mode 52, zeros in
    53-60, swizzle 61-63 (0 none, 1 128B with 32B atoms, 2 128B, 4 64B, 6 32B)."""
    value = int(value) & (2**64 - 1)
    if _field(value, 46, 3) != 0b001:
        raise DescriptorError(f"tcgen05 descriptor bits 46-48 are {_field(value, 46, 3):#05b}, "
                              "must be the constant 0b001")
    if _field(value, 53, 8) != 0:
        raise DescriptorError("tcgen05 descriptor bits 53-60 must be zero")
    code = _field(value, 61, 3)
    if code not in _TCGEN05_CODES:
        raise DescriptorError(f"tcgen05 descriptor swizzle mode {code} is invalid")
    return SmemDesc(start=_field(value, 0, 14) << 4, lbo=_field(value, 16, 14) << 4,
                    sbo=_field(value, 32, 14) << 4, base_offset=_field(value, 49, 3),
                    swizzle=_TCGEN05_CODES[code], lbo_absolute=bool(_field(value, 52, 1)))


def encode_tcgen05(desc: SmemDesc) -> int:
    code = {v: k for k, v in _TCGEN05_CODES.items()}[desc.swizzle]
    return (_encode_address(desc.start) | _encode_address(desc.lbo) << 16
            | _encode_address(desc.sbo) << 32 | 0b001 << 46 | (desc.base_offset & 7) << 49
            | int(desc.lbo_absolute) << 52 | code << 61)


def swizzle_address(addr, swizzle: Swizzle, base_offset: int = 0):
    """The physical address of logical shared address `addr`: the index of its `atom`-byte unit
    within a `width`-byte row is XORed with the row's phase in the pattern (bits 7 and up;
    Note [Canonical layouts] for the base offset, Note [Swizzle units] for the units)."""
    if swizzle is Swizzle.NONE:
        return addr
    mask = (1 << swizzle.xor_bits) - 1
    phase = ((addr >> 7) - base_offset) & mask
    unit_shift = swizzle.atom.bit_length() - 1
    return addr ^ (phase << unit_shift)


def _check_layout(desc: SmemDesc, cols: int, itemsize: int, major: str) -> None:
    if major not in ("K", "MN"):
        raise DescriptorError(f"major must be 'K' or 'MN', not {major!r}")
    if desc.lbo_absolute:
        raise DescriptorError("the absolute leading-dimension address mode (descriptor bit 52) "
                              "exists on sm_103a only")
    if desc.start % CHUNK:
        raise DescriptorError(f"matrix start address {desc.start:#x} is not 16-byte aligned")
    if major == "K" and desc.swizzle is not Swizzle.NONE and cols * itemsize > desc.swizzle.width:
        raise DescriptorError(f"a K-major {desc.swizzle.name} operand holds at most "
                              f"{desc.swizzle.width} bytes of K, not {cols * itemsize}")


# Note [Addresses of a descriptor]: a kernel reads through a few descriptors (a ring's
# stages times the K steps of a tile) thousands of times, and the address arithmetic cost
# more than the MMA's product in the emulator; so the address arrays are made once per
# descriptor and shape, read-only, so that no caller can alter a shared one.
@functools.lru_cache(maxsize=4096)
def element_addresses(desc: SmemDesc, rows: int, cols: int, itemsize: int, major: str) -> np.ndarray:
    """The shared byte address of each element (row = M or N index, col = K index)."""
    _check_layout(desc, cols, itemsize, major)
    per_chunk = CHUNK // itemsize
    width = desc.swizzle.width
    r = np.arange(rows, dtype=np.int64)[:, None]
    k = np.arange(cols, dtype=np.int64)[None, :]
    if major == "K":
        within = (k % per_chunk) * itemsize
        if desc.swizzle is Swizzle.NONE:
            offset = (r % 8) * CHUNK + (r // 8) * desc.sbo + (k // per_chunk) * desc.lbo + within
        else:
            offset = (r % 8) * width + (r // 8) * desc.sbo + k * itemsize
    else:
        within = (r % per_chunk) * itemsize
        if desc.swizzle is Swizzle.NONE:
            offset = (r // per_chunk) * desc.sbo + (k % 8) * CHUNK + (k // 8) * desc.lbo + within
        else:
            per_row = width // itemsize
            offset = ((r % per_row) * itemsize + (r // per_row) * desc.lbo
                      + (k % 8) * width + (k // 8) * desc.sbo)
    return _read_only(swizzle_address(desc.start + offset, desc.swizzle, desc.base_offset))


@functools.lru_cache(maxsize=4096)
def element_bytes(desc: SmemDesc, rows: int, cols: int, itemsize: int, major: str) -> np.ndarray:
    """Every shared byte address the MMA reads through `desc` (for the race checks)."""
    addrs = element_addresses(desc, rows, cols, itemsize, major)
    return _read_only((addrs[..., None] + np.arange(itemsize)).reshape(-1))


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@functools.lru_cache(maxsize=4096)
def _byte_indices(desc: SmemDesc, rows: int, cols: int, itemsize: int, major: str, size: int) -> np.ndarray:
    """The (rows, cols, itemsize) shared byte addresses of the matrix, checked to lie in the
    `size` bytes of shared memory."""
    addresses = element_addresses(desc, rows, cols, itemsize, major)
    top = int(addresses.max()) + itemsize if addresses.size else 0
    if top > size:
        raise DescriptorError(f"the matrix reaches shared address {top:#x}, past the "
                              f"{size:#x} bytes of shared memory")
    return _read_only(addresses[..., None] + np.arange(itemsize))


def read_matrix(smem: np.ndarray, desc: SmemDesc, rows: int, cols: int, dtype, major: str) -> np.ndarray:
    """The `(rows, cols)` matrix of `dtype` the MMA reads through `desc` from `smem` (uint8)."""
    dtype = np.dtype(dtype)
    raw = smem[_byte_indices(desc, rows, cols, dtype.itemsize, major, smem.size)]
    return np.ascontiguousarray(raw).view(dtype).reshape(rows, cols)


def write_matrix(smem: np.ndarray, desc: SmemDesc, matrix: np.ndarray, major: str) -> None:
    """Lay `matrix` (rows x cols, K along columns) out in `smem` where `read_matrix` reads it."""
    matrix = np.ascontiguousarray(matrix)
    rows, cols = matrix.shape
    smem[_byte_indices(desc, rows, cols, matrix.itemsize, major, smem.size)] = \
        matrix.view(np.uint8).reshape(rows, cols, matrix.itemsize)
