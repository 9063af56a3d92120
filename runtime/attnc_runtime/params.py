"""Kernel arguments in the ABI order the manifest lists them, packed for cuLaunchKernel.

cuLaunchKernel takes `void **kernelParams`: one pointer per parameter to memory
holding its value; the sizes come from the kernel image. `PackedParams` owns both
the values and the pointer array, so they live as long as the launch needs them.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Mapping

from attnc_runtime.manifest import (ConstParam, DimParam, KernelSpec, PtrParam, ScratchParam,
                                    StrideParam)
from attnc_runtime.tensors import TensorView

_INT_CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64}


def param_values(kernel: KernelSpec, dims: Mapping[str, int], views: Mapping[str, TensorView],
                 scratch: Mapping[str, int]) -> list:
    """One ctypes value per kernel parameter; `scratch` maps buffer names to device pointers."""
    values = []
    for p in kernel.params:
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
