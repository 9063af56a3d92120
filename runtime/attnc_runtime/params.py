"""Kernel arguments in the ABI order the manifest lists them, packed for cuLaunchKernel.

cuLaunchKernel takes `void **kernelParams`: one pointer per parameter to memory
holding its value; the sizes come from the kernel image. `PackedParams` owns both
the values and the pointer array, so they live as long as the launch needs them.

Note [Tensor maps]: a `tensor_map` parameter is the 128-byte TMA descriptor of a tensor,
encoded at the bind by the device's encoder (`TensorMapEncoder`: the driver's
cuTensorMapEncodeTiled on a GPU, driver.encode_tensor_map; the emulator's own on the
CPU). The map's dimensions are the tensor's, innermost first, with its byte strides; a
box of the manifest's shape; zeros for elements outside the tensor. TMA needs the
innermost axis contiguous and the other strides multiples of 16 bytes, which the bind
checks before encoding.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable, Mapping

from attnc_runtime.dtypes import DTYPES
from attnc_runtime.errors import AttncRuntimeError
from attnc_runtime.manifest import (ConstParam, DimParam, KernelSpec, PtrParam, ScratchParam,
                                    StrideParam, TensorMapParam)
from attnc_runtime.tensors import TensorView

_INT_CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64}
TENSOR_MAP_BYTES = 128

# (param, the tensor's view) -> the 128 bytes of its tensor map (Note [Tensor maps])
TensorMapEncoder = Callable[[TensorMapParam, TensorView], bytes]


def param_values(kernel: KernelSpec, dims: Mapping[str, int], views: Mapping[str, TensorView],
                 scratch: Mapping[str, int], tensor_map: TensorMapEncoder | None = None) -> list:
    """One ctypes value per kernel parameter; `scratch` maps buffer names to device
    pointers; `tensor_map` encodes a tensor map (Note [Tensor maps])."""
    values = []
    for p in kernel.params:
        if isinstance(p, TensorMapParam):
            if tensor_map is None:
                raise AttncRuntimeError(f"kernel {kernel.name!r} takes a TMA tensor map of {p.tensor!r}, "
                                        f"which this device cannot encode")
            check_tensor_map(p, views[p.tensor])
            raw = tensor_map(p, views[p.tensor])
            values.append((ctypes.c_uint8 * TENSOR_MAP_BYTES).from_buffer_copy(raw))
            continue
        if isinstance(p, PtrParam):
            values.append(ctypes.c_uint64(views[p.tensor].ptr))
        elif isinstance(p, DimParam):
            values.append(_INT_CTYPES[p.type](dims[p.name]))
        elif isinstance(p, StrideParam):
            values.append(_INT_CTYPES[p.type](views[p.tensor].strides[p.axis]))
        elif isinstance(p, ScratchParam):
            values.append(ctypes.c_uint64(scratch[p.name]))
        elif isinstance(p, ConstParam):
            values.append(_INT_CTYPES[p.type](p.value))
        else:
            raise TypeError(f"unhandled param {p!r}")
    return values


@dataclass(frozen=True)
class PackedParams:
    values: tuple
    pointers: ctypes.Array

    @property
    def address(self) -> int:
        """The `void **` to hand to cuLaunchKernel."""
        return ctypes.addressof(self.pointers)


def pack(values: list) -> PackedParams:
    pointers = (ctypes.c_void_p * max(len(values), 1))(*(ctypes.addressof(v) for v in values))
    return PackedParams(tuple(values), pointers)


def check_tensor_map(p: TensorMapParam, v: TensorView) -> None:
    """What TMA needs of the tensor (Note [Tensor maps]): the innermost axis contiguous,
    the base and the other strides 16-byte aligned."""
    itemsize = DTYPES[v.dtype].itemsize if v.dtype in DTYPES else 1
    if 0 in v.shape:            # no element: its strides say nothing (numpy's are all 0), none is read
        return
    if v.shape and v.shape[-1] > 1 and v.strides[-1] != 1:
        raise AttncRuntimeError(f"{p.tensor}: a TMA tensor map needs the last axis contiguous "
                                f"(stride {v.strides[-1]})")
    bad = [s for s, n in zip(v.strides[:-1], v.shape[:-1]) if n > 1 and (s * itemsize) % 16]
    if v.ptr % 16 or bad:
        raise AttncRuntimeError(f"{p.tensor}: a TMA tensor map needs a 16-byte aligned base and strides "
                                f"(base {v.ptr:#x}, strides {list(v.strides)} elements of {itemsize} bytes)")


def tensor_map_geometry(p: TensorMapParam, v: TensorView) -> tuple[list[int], list[int], list[int]]:
    """(dims, byte strides of dims 1.., box), innermost first, as cuTensorMapEncodeTiled takes them."""
    itemsize = DTYPES[v.dtype].itemsize
    dims = [max(n, 1) for n in reversed(v.shape)]
    strides, extent = [], dims[0] * itemsize
    for k, stride in enumerate(reversed(v.strides[:-1]), start=1):
        # an axis of one element, or a tensor of none: any stride TMA takes (never used)
        step = stride * itemsize if v.shape[-1 - k] > 1 and 0 not in v.shape else -(-extent // 16) * 16
        strides.append(step)
        extent = step * dims[k]
    return dims, strides, list(reversed(p.box))
