"""Tensor maps and the copies TMA makes with them (cp.async.bulk.tensor, tile mode).

Interface:

* `TensorMap(dtype, address, dims, strides, box, element_strides=None, interleave, swizzle,
  l2_promotion, oob_fill)` — what `cuTensorMapEncodeTiled` takes, innermost dimension first:
  `dims` in elements, `strides` in bytes for dimensions 1.. (rank - 1 entries), `box` in
  elements. Construction runs the driver's checks and raises `TmaError` naming the broken rule.
  `.box_shape` is the box as it lands in shared memory (innermost last, numpy order),
  `.box_bytes` the bytes one copy moves (the mbarrier's complete_tx count, out-of-bounds fill
  included). `.pack()` gives the 128-byte opaque object a kernel parameter holds and
  `TensorMap.unpack(raw)` reads it back (the layout is this emulator's own: the real one is
  opaque to PTX).
* `load(tmap, coords, memory, smem, smem_addr)`: global -> shared. `coords` are the signed
  element coordinates of the box's first element, innermost first; elements outside `dims`
  are filled with zero, or with NaN for `OobFill.NAN_REQUEST_ZERO_FMA`. Returns the bytes moved.
* `store(tmap, coords, memory, smem, smem_addr)`: shared -> global; elements outside `dims` are
  not written.
* `memory` is any object with `read(addresses, itemsize) -> uint8[n, itemsize]` and
  `write(addresses, data: uint8[n, itemsize])` over global byte addresses (int64 arrays).

Shared memory holds the box densely, innermost dimension fastest, and the swizzle permutes the
16-byte (or 32-byte) units by the absolute shared address exactly as `smem_desc.swizzle_address`
does, so an MMA descriptor with the same swizzle reads what TMA wrote.
"""
from __future__ import annotations

import dataclasses
import enum
import math
import struct

import numpy as np

from .smem_desc import Swizzle, swizzle_address

MAX_RANK = 5
PACKED_SIZE = 128
_MAGIC = b"attnc-sim-tmap\0\0"


class TmaError(ValueError):
    """A tensor map the driver would refuse, or a copy the PTX ISA does not allow."""


class DataType(enum.Enum):
    """CUtensorMapDataType: (code, bytes, is floating point, NaN bit pattern)."""

    UINT8 = (0, 1, False, 0)
    UINT16 = (1, 2, False, 0)
    UINT32 = (2, 4, False, 0)
    INT32 = (3, 4, False, 0)
    UINT64 = (4, 8, False, 0)
    INT64 = (5, 8, False, 0)
    FLOAT16 = (6, 2, True, 0x7E00)
    FLOAT32 = (7, 4, True, 0x7FC00000)
    FLOAT64 = (8, 8, True, 0x7FF8000000000000)
    BFLOAT16 = (9, 2, True, 0x7FC0)
    FLOAT32_FTZ = (10, 4, True, 0x7FC00000)
    TFLOAT32 = (11, 4, True, 0x7FC00000)
    TFLOAT32_FTZ = (12, 4, True, 0x7FC00000)

    @property
    def code(self) -> int:
        return self.value[0]

    @property
    def itemsize(self) -> int:
        return self.value[1]

    @property
    def is_float(self) -> bool:
        return self.value[2]

    @property
    def nan_bits(self) -> int:
        return self.value[3]


class Interleave(enum.IntEnum):
    NONE = 0
    B16 = 1
    B32 = 2


class TmaSwizzle(enum.IntEnum):
    """CUtensorMapSwizzle; the last two sm_100 modes are not modelled (refused at construction)."""

    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3
    B128_ATOM_32B = 4
    B128_ATOM_32B_FLIP_8B = 5
    B128_ATOM_64B = 6


class L2Promotion(enum.IntEnum):
    NONE = 0
    L2_64B = 1
    L2_128B = 2
    L2_256B = 3


class OobFill(enum.IntEnum):
    """CUtensorMapFloatOOBfill. Out-of-bounds elements of a load are zeros, or with
    NAN_REQUEST_ZERO_FMA a NaN (the driver API's cuTensorMapEncodeTiled; PTX ISA 5.5.4 "Out of
    Bounds Access"). Which NaN is not documented: the emulator writes each type's canonical quiet
    NaN (`DataType.nan_bits`: 0x7E00 f16, 0x7FC0 bf16, 0x7FC00000 f32) — INFERRED; a kernel
    that only tests for NaN cannot tell."""
    NONE = 0
    NAN_REQUEST_ZERO_FMA = 1


_SMEM_SWIZZLE = {TmaSwizzle.NONE: Swizzle.NONE, TmaSwizzle.B32: Swizzle.B32, TmaSwizzle.B64: Swizzle.B64,
                 TmaSwizzle.B128: Swizzle.B128, TmaSwizzle.B128_ATOM_32B: Swizzle.B128_ATOM32}


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """A tiled tensor map, as `cuTensorMapEncodeTiled` is given it (innermost dimension first)."""

    dtype: DataType
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...] | None = None
    interleave: Interleave = Interleave.NONE
    swizzle: TmaSwizzle = TmaSwizzle.NONE
    l2_promotion: L2Promotion = L2Promotion.NONE
    oob_fill: OobFill = OobFill.NONE

    def __post_init__(self):
        for name in ("dims", "strides", "box"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        steps = self.element_strides or (1,) * len(self.dims)
        object.__setattr__(self, "element_strides", tuple(int(v) for v in steps))
        for name, kind in (("interleave", Interleave), ("swizzle", TmaSwizzle),
                           ("l2_promotion", L2Promotion), ("oob_fill", OobFill)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        _validate(self)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def smem_swizzle(self) -> Swizzle:
        return _SMEM_SWIZZLE[self.swizzle]

    @property
    def counts(self) -> tuple[int, ...]:
        """Elements traversed along each dimension, innermost first: ceil(box / element stride);
        dimension 0 takes no element stride unless the layout is interleaved."""
        steps = self._steps()
        return tuple(math.ceil(b / s) for b, s in zip(self.box, steps))

    @property
    def box_shape(self) -> tuple[int, ...]:
        """The box in shared memory, numpy order (outermost first)."""
        return self.counts[::-1]

    @property
    def box_bytes(self) -> int:
        return math.prod(self.counts) * self.dtype.itemsize

    def _steps(self) -> tuple[int, ...]:
        if self.interleave is Interleave.NONE:
            return (1,) + self.element_strides[1:]
        return self.element_strides

    def pack(self) -> bytes:
        """The 128-byte opaque object of a `.param .align 64 .b8 tmap[128]` kernel parameter."""
        pad = MAX_RANK - self.rank
        fields = struct.pack(
            "<BBBBBBBBQ5Q4Q5H5B", self.dtype.code, self.rank, self.interleave, self.swizzle,
            self.l2_promotion, self.oob_fill, 0, 0, self.address, *self.dims, *(0,) * pad,
            *self.strides, *(0,) * pad, *self.box, *(0,) * pad, *self.element_strides, *(0,) * pad)
        return (_MAGIC + fields).ljust(PACKED_SIZE, b"\0")

    @classmethod
    def unpack(cls, raw: bytes) -> "TensorMap":
        raw = bytes(raw)
        if len(raw) != PACKED_SIZE or not raw.startswith(_MAGIC):
            raise TmaError("the tensor-map operand does not hold a tensor map "
                           "(no TensorMap.pack() object at that address)")
        values = struct.unpack_from("<BBBBBBBBQ5Q4Q5H5B", raw, len(_MAGIC))
        dtype_code, rank, interleave, swizzle, l2, oob = values[:6]
        address = values[8]
        dims, strides, box, steps = values[9:14], values[14:18], values[18:23], values[23:28]
        dtype = next(d for d in DataType if d.code == dtype_code)
        return cls(dtype, address, dims[:rank], strides[:rank - 1], box[:rank], steps[:rank],
                   Interleave(interleave), TmaSwizzle(swizzle), L2Promotion(l2), OobFill(oob))


def _validate(t: TensorMap) -> None:
    """cuTensorMapEncodeTiled's requirements (CUDA driver API, Tensor Map Object Management)."""
    size = t.dtype.itemsize
    if not 1 <= t.rank <= MAX_RANK:
        raise TmaError(f"tensorRank must be 1 to 5, not {t.rank}")
    if t.interleave is not Interleave.NONE and t.rank < 3:
        raise TmaError("an interleaved tensor map needs tensorRank >= 3")
    if len(t.strides) != t.rank - 1 or len(t.box) != t.rank or len(t.element_strides) != t.rank:
        raise TmaError(f"a rank-{t.rank} tensor map takes {t.rank} dims, box dims and element "
                       f"strides and {t.rank - 1} global strides")
    address_align = 32 if t.interleave is Interleave.B32 else 16
    if t.address % address_align:
        raise TmaError(f"globalAddress {t.address:#x} must be {address_align}-byte aligned")
    if any(not 0 < d <= 2**32 for d in t.dims):
        raise TmaError(f"globalDim {t.dims} must be non-zero and at most 2^32")
    stride_align = 32 if t.interleave is Interleave.B32 else 16
    if any(s % stride_align or not 0 <= s < 2**40 for s in t.strides):
        raise TmaError(f"globalStrides {t.strides} must be multiples of {stride_align} below 2^40")
    if any(not 0 < b <= 256 for b in t.box):
        raise TmaError(f"boxDim {t.box} must be non-zero and at most 256")
    if any(not 0 < e <= 8 for e in t.element_strides):
        raise TmaError(f"elementStrides {t.element_strides} must be non-zero and at most 8")
    inner = t.box[0] * size
    if t.interleave is Interleave.NONE and inner % 16:
        raise TmaError(f"boxDim[0] * element size = {inner} bytes must be a multiple of 16")
    if t.swizzle not in _SMEM_SWIZZLE:
        raise TmaError(f"swizzle {t.swizzle.name} is not modelled by the emulator")
    if t.interleave is Interleave.B32 and t.swizzle is not TmaSwizzle.B32:
        raise TmaError("interleave 32B requires swizzle 32B")
    if t.interleave is Interleave.NONE and t.swizzle is not TmaSwizzle.NONE and inner > t.smem_swizzle.width:
        raise TmaError(f"swizzle {t.swizzle.name} requires the box's inner dimension to be at most "
                       f"{t.smem_swizzle.width} bytes, not {inner}")
    if t.oob_fill is OobFill.NAN_REQUEST_ZERO_FMA and not t.dtype.is_float:
        raise TmaError(f"NaN out-of-bounds fill needs a floating-point type, not {t.dtype.name}")


def box_coordinates(tmap: TensorMap, coords) -> tuple[np.ndarray, np.ndarray]:
    """The global byte address of each box element and whether it lies inside the tensor, both
    in `box_shape` (shared-memory) order."""
    coords = tuple(int(c) for c in coords)
    if len(coords) != tmap.rank:
        raise TmaError(f"a rank-{tmap.rank} tensor map takes {tmap.rank} coordinates, not {len(coords)}")
    byte_strides = (tmap.dtype.itemsize,) + tmap.strides
    address = np.full(tmap.box_shape, tmap.address, dtype=np.int64)
    inside = np.ones(tmap.box_shape, dtype=bool)
    for dim, (start, count, step) in enumerate(zip(coords, tmap.counts, tmap._steps())):
        index = start + step * np.arange(count, dtype=np.int64)
        shape = [1] * tmap.rank
        shape[tmap.rank - 1 - dim] = count
        index = index.reshape(shape)
        address = address + index * byte_strides[dim]
        inside = inside & (index >= 0) & (index < tmap.dims[dim])
    return address, inside


def shared_addresses(tmap: TensorMap, smem_addr: int) -> np.ndarray:
    """The shared byte address of each box element, `box_shape` order, swizzle applied."""
    if smem_addr % 128:
        raise TmaError(f"the shared-memory box address {smem_addr:#x} must be 128-byte aligned")
    linear = np.arange(math.prod(tmap.counts), dtype=np.int64).reshape(tmap.box_shape)
    return swizzle_address(smem_addr + linear * tmap.dtype.itemsize, tmap.smem_swizzle)


def _smem_bytes(smem: np.ndarray, addresses: np.ndarray, itemsize: int) -> np.ndarray:
    flat = addresses.reshape(-1)
    if flat.size and int(flat.max()) + itemsize > smem.size:
        raise TmaError(f"the box reaches shared address {int(flat.max()) + itemsize:#x}, past the "
                       f"{smem.size:#x} bytes of shared memory")
    return flat[:, None] + np.arange(itemsize)


def load(tmap: TensorMap, coords, memory, smem: np.ndarray, smem_addr: int) -> int:
    """Copy the box at `coords` into shared memory at `smem_addr`; returns the bytes moved."""
    size = tmap.dtype.itemsize
    address, inside = box_coordinates(tmap, coords)
    fill = tmap.dtype.nan_bits if tmap.oob_fill is OobFill.NAN_REQUEST_ZERO_FMA else 0
    values = np.frombuffer(fill.to_bytes(size, "little") * inside.size, np.uint8).reshape(-1, size).copy()
    where = inside.reshape(-1)
    if where.any():
        values[where] = memory.read(address.reshape(-1)[where], size)
    smem[_smem_bytes(smem, shared_addresses(tmap, smem_addr), size)] = values
    return tmap.box_bytes


def store(tmap: TensorMap, coords, memory, smem: np.ndarray, smem_addr: int) -> int:
    """Copy the box in shared memory at `smem_addr` to `coords`, skipping elements outside the
    tensor; returns the bytes read from shared memory."""
    size = tmap.dtype.itemsize
    address, inside = box_coordinates(tmap, coords)
    values = smem[_smem_bytes(smem, shared_addresses(tmap, smem_addr), size)]
    where = inside.reshape(-1)
    if where.any():
        memory.write(address.reshape(-1)[where], values[where])
    return tmap.box_bytes
