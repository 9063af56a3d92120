"""What the runtime sees of a tensor, whatever library made it.

`view(obj, name)` reads a pointer, shape, strides (in elements), dtype and device
off a torch tensor (its own attributes: it is the only way to see bf16), an
`attnc_runtime.DeviceArray`, anything with `__cuda_array_interface__` (cupy,
numba, ...) or anything with `__dlpack__`. torch and cupy are never imported
here: a torch tensor is recognised by its type's module.
"""
from __future__ import annotations

import ctypes
import math
import sys
from dataclasses import dataclass, replace

from attnc_runtime import dtypes
from attnc_runtime.errors import AttncRuntimeError

DLPACK_CPU, DLPACK_CUDA, DLPACK_CUDA_HOST, DLPACK_CUDA_MANAGED = 1, 2, 3, 13
CU_STREAM_LEGACY = 1            # the legacy default stream's handle (the driver's and the protocols')


@dataclass(frozen=True)
class TensorView:
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]        # in elements
    dtype: str | None               # the manifest's name; None when it has none
    dtype_text: str                 # as the library spells it, for messages
    device: int | None              # CUDA ordinal; None: ask the driver about `ptr`
    location: str                   # 'cuda', or where it lives instead ('cpu', ...)
    library: str                    # 'torch', 'cupy' or 'other': who allocates outputs
    readonly: bool = False
    stream: int | None = None       # `__cuda_array_interface__` v3's: where the data is made

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def library_of(obj) -> str:
    """'torch' or 'cupy' for their tensors (subclasses defined elsewhere included: the
    library is asked only when it is already imported), else 'other'."""
    for library, name in (("torch", "Tensor"), ("cupy", "ndarray")):
        cls = getattr(sys.modules.get(library), name, None)
        if isinstance(cls, type) and isinstance(obj, cls):
            return library
    root = type(obj).__module__.split(".", 1)[0]
    return root if root in ("torch", "cupy") else "other"


def view(obj, name: str) -> TensorView:
    """The `TensorView` of `obj`; `name` is only for the message when it is not a tensor."""
    if hasattr(obj, "__attnc_view__"):          # DeviceArray
        return obj.__attnc_view__()
    if library_of(obj) == "torch" and hasattr(obj, "data_ptr"):
        return _torch_view(obj, name)
    if hasattr(obj, "__cuda_array_interface__"):
        return _cai_view(obj, name)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack_view(obj)
    raise AttncRuntimeError(f"{name}: expected a CUDA tensor (torch, cupy, or an object with "
                            f"__cuda_array_interface__ or __dlpack__), got {type(obj).__name__}")


def _torch_view(t, name: str) -> TensorView:
    layout = str(getattr(t, "layout", "torch.strided"))
    if layout != "torch.strided" or getattr(t, "is_nested", False):
        raise AttncRuntimeError(f"{name}: a {'nested' if getattr(t, 'is_nested', False) else layout} "
                                f"tensor; expected a dense (torch.strided) one")
    text = str(t.dtype)
    device = t.device
    return TensorView(ptr=t.data_ptr(), shape=tuple(t.shape), strides=tuple(t.stride()),
                      dtype=dtypes.from_library_name(text), dtype_text=text,
                      device=device.index if device.type == "cuda" else None,
                      location=device.type, library="torch")


def _cai_view(obj, name: str) -> TensorView:
    cai = obj.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise AttncRuntimeError(f"{name}: masked arrays are not supported")
    typestr = cai["typestr"]
    dtype = dtypes.from_typestr(typestr)
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 1
    shape = tuple(int(s) for s in cai["shape"])
    byte_strides = cai.get("strides")
    if byte_strides is None:
        strides = contiguous_strides(shape)
    else:
        if any(s % itemsize for s in byte_strides):
            raise AttncRuntimeError(f"{name}: strides {tuple(byte_strides)} (bytes) are not "
                                    f"multiples of the element size {itemsize}")
        strides = tuple(s // itemsize for s in byte_strides)
    ptr, readonly = cai["data"]
    device = getattr(getattr(obj, "device", None), "id", None)      # cupy's; else ask the driver
    return TensorView(ptr=int(ptr or 0), shape=shape, strides=strides, dtype=dtype,
                      dtype_text=dtype or f"typestr {typestr!r}",
                      device=device if isinstance(device, int) else None,
                      location="cuda", library=library_of(obj), readonly=bool(readonly),
                      stream=_cai_stream(cai, name))


def _cai_stream(cai: dict, name: str) -> int | None:
    """The stream of a `__cuda_array_interface__` (version 3 and later): the one on which
    the producer may still be writing the data, which the launch must wait for (Note
    [Producer streams] in kernel.py); None where there is none to wait for. 1 and 2 are
    the legacy and per-thread default streams (the driver's handles are the same numbers);
    0 is refused, as the protocol does (it cannot tell those two apart)."""
    stream = cai.get("stream") if int(cai.get("version", 0)) >= 3 else None
    if stream is None:
        return None
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise AttncRuntimeError(f"{name}: __cuda_array_interface__ has stream {stream!r}, not a stream handle")
    if stream == 0:
        raise AttncRuntimeError(f"{name}: __cuda_array_interface__ has stream 0, which the protocol does not "
                                f"allow (it is ambiguous): use 1 for the legacy default stream, 2 for the "
                                f"per-thread one")
    return stream


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


# -- DLPack (the C structs of dlpack.h, read without consuming the capsule) ------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


DLPACK_FLAG_READ_ONLY = 1          # DLPACK_FLAG_BITMASK_READ_ONLY of dlpack.h


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

_DLPACK_LOCATIONS = {DLPACK_CPU: "cpu", DLPACK_CUDA: "cuda", DLPACK_CUDA_HOST: "cuda pinned host",
                     DLPACK_CUDA_MANAGED: "cuda"}


def _dlpack_view(obj) -> TensorView:
    device_type, device_id = obj.__dlpack_device__()
    location = _DLPACK_LOCATIONS.get(int(device_type), f"DLPack device type {int(device_type)}")
    if location != "cuda":
        # Not ours to read: report where it lives without asking for the capsule.
        return TensorView(0, (), (), None, "?", None, location, library_of(obj))
    try:                        # a versioned capsule carries the read-only flag
        capsule = obj.__dlpack__(max_version=(1, 0))
    except TypeError:           # a producer older than DLPack 1.0
        capsule = obj.__dlpack__()
    # Asked without a stream, the producer made the array ready on the legacy default
    # stream: the launch waits for that stream (Note [Producer streams] in kernel.py).
    return replace(dlpack_capsule_view(capsule, library_of(obj)), stream=CU_STREAM_LEGACY)


def dlpack_capsule_view(capsule, library: str = "other") -> TensorView:
    """Read a DLPack capsule without consuming it (its owner keeps the memory alive)."""
    name = _capsule_name(capsule)
    readonly = False
    if name == b"dltensor":
        managed = DLManagedTensor.from_address(_capsule_pointer(capsule, name))
    elif name == b"dltensor_versioned":
        managed = DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, name))
        readonly = bool(managed.flags & DLPACK_FLAG_READ_ONLY)
    else:
        raise AttncRuntimeError(f"__dlpack__ returned a capsule named {name!r}; it was already consumed")
    t = managed.dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else contiguous_strides(shape)
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    dtype = dtypes.from_dlpack(code, bits, lanes)
    location = _DLPACK_LOCATIONS.get(t.device.device_type, f"DLPack device type {t.device.device_type}")
    return TensorView(ptr=(t.data or 0) + t.byte_offset, shape=shape, strides=strides, dtype=dtype,
                      dtype_text=dtype or f"DLPack dtype (code={code}, bits={bits}, lanes={lanes})",
                      device=t.device.device_id if location == "cuda" else None,
                      location=location, library=library, readonly=readonly)
