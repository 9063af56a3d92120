"""A contiguous CUDA array the runtime owns.

Outputs and scratch buffers are `DeviceArray`s when the inputs come from neither
torch nor cupy (only those two can allocate like their inputs). It is also the
torch-free way to run a bundle:

    q = DeviceArray.from_numpy(q_host, "bf16")      # rounds float32 to bf16
    out = kernel(q=q, k=k, v=v)
    out["o"].numpy()                                  # bf16 comes back as float32
"""
from __future__ import annotations

import math

import numpy as np

from attnc_runtime import driver
from attnc_runtime.dtypes import DTYPES
from attnc_runtime.errors import AttncRuntimeError
from attnc_runtime.tensors import CU_STREAM_LEGACY, TensorView, contiguous_strides


class DeviceArray:
    def __init__(self, shape, dtype: str, device: int = 0):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.device = device
        self.nbytes = math.prod(self.shape) * DTYPES[dtype].itemsize
        with driver.primary_context(device):
            self.ptr = driver.mem_alloc(self.nbytes)

    @classmethod
    def from_numpy(cls, array, dtype: str | None = None, device: int = 0) -> "DeviceArray":
        """Copy a host array to `device`, converting it to `dtype` (default: its own)."""
        array = np.asarray(array)
        dtype = dtype or _dtype_of(array)
        host = np.ascontiguousarray(_to_storage(array, dtype))
        out = cls(array.shape, dtype, device)
        with driver.primary_context(device):
            driver.copy_to_device(out.ptr, host.ctypes.data, out.nbytes)
        return out

    def numpy(self) -> np.ndarray:
        """A host copy; bf16 is widened to float32 (numpy has no bf16)."""
        host = np.empty(self.shape, dtype=_STORAGE[self.dtype])
        with driver.primary_context(self.device):
            driver.synchronize()
            driver.copy_to_host(host.ctypes.data, self.ptr, self.nbytes)
        if self.dtype == "bf16":
            return (host.astype(np.uint32) << 16).view(np.float32)
        return host

    def __attnc_view__(self) -> TensorView:
        # from_numpy's copy is on the legacy default stream and may still be landing when
        # it returns (pageable memory): a launch waits for that stream (Note [Producer
        # streams] in kernel.py), which orders nothing on the default stream itself.
        return TensorView(ptr=self.ptr, shape=self.shape, strides=contiguous_strides(self.shape),
                          dtype=self.dtype, dtype_text=self.dtype, device=self.device,
                          location="cuda", library="other", stream=CU_STREAM_LEGACY)

    def __repr__(self) -> str:
        return f"DeviceArray({list(self.shape)}, {self.dtype}, device={self.device})"

    def __del__(self):
        ptr = getattr(self, "ptr", None)
        if ptr is None:
            return
        try:
            with driver.primary_context(self.device):
                driver.mem_free(ptr)
        except Exception:       # at interpreter exit the driver may already be gone
            pass


_STORAGE = {"f16": "float16", "bf16": "uint16", "f32": "float32", "i32": "int32"}


def _dtype_of(array: np.ndarray) -> str:
    if array.dtype.name == "bfloat16":          # ml_dtypes' (numpy has none)
        return "bf16"
    for name, storage in _STORAGE.items():
        if name != "bf16" and array.dtype == np.dtype(storage):
            return name
    raise AttncRuntimeError(f"no attnc dtype for numpy {array.dtype}; pass dtype=")


def _to_storage(array: np.ndarray, dtype: str) -> np.ndarray:
    """`array` as `dtype`'s storage: floats rounded to nearest; i32 only from integers in its
    range (a document id must not change on the way)."""
    if dtype == "bf16":
        return float32_to_bf16_bits(array.astype(np.float32))
    if dtype == "i32" and array.size:
        if array.dtype.kind not in "iub":
            whole = np.isfinite(array).all() and (np.asarray(array) == np.round(array)).all()
            if not whole:
                raise AttncRuntimeError(f"i32: the {array.dtype} array holds values that are not integers")
        if array.min() < -2**31 or array.max() >= 2**31:
            raise AttncRuntimeError(f"i32: the array holds {array.min()} to {array.max()}, outside its range")
    return array.astype(_STORAGE[dtype], copy=False)


def float32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (to nearest, ties to even), as uint16 bit patterns."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return np.where(np.isnan(x), 0x7FC0, rounded).astype(np.uint16)
