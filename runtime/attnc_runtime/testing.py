"""Stand-ins for a GPU and its tensors, for checking launches on machines without one.

`FakeTensor` exposes `__cuda_array_interface__` (and a cupy-style `.device.id`)
over a made-up pointer; `FakePlatform` answers the two questions the argument
checks ask the GPU. With them `Kernel(bundle, platform=FakePlatform()).plan(...)`
runs every check a launch runs, and `synthetic_manifest()` is a small valid
manifest exercising every part of the schema (GQA, a param, a scalar dim, a
scratch buffer shared by two kernels).
"""
from __future__ import annotations

import ctypes
import hashlib
import math
from types import SimpleNamespace

from attnc_runtime.arch import DeviceInfo
from attnc_runtime.manifest import FORMAT, source_sha256
from attnc_runtime.tensors import (DLPACK_CUDA, DLDataType, DLDevice, DLManagedTensor, DLTensor,
                                   contiguous_strides)

_TYPESTR = {"f16": "<f2", "f32": "<f4", "i32": "<i4", "u16": "<u2", "f64": "<f8"}
_ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "u16": 2, "f64": 8}
_DLPACK_TYPES = {"bf16": (4, 16), "f16": (2, 16), "f32": (2, 32), "i32": (0, 32), "u16": (1, 16),
                 "f64": (2, 64)}
_CAPSULE_NAME = b"dltensor"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                                 ctypes.c_void_p]


class FakeTensor:
    """A CUDA array that is only a description: pointer, shape, strides (elements), dtype.

    It speaks `__cuda_array_interface__` (cupy-style) unless `protocol="dlpack"` or the
    dtype is bf16, which that interface cannot describe; then it speaks DLPack.
    """

    _next_ptr = 0x7F00_0000_0000

    def __init__(self, shape, dtype: str = "f16", *, strides=None, ptr: int | None = None,
                 device: int | None = 0, readonly: bool = False, protocol: str = "cai",
                 stream: int | None = None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.strides = tuple(strides) if strides is not None else contiguous_strides(self.shape)
        if ptr is None:     # distinct, 256-byte aligned, as an allocator's would be
            ptr = FakeTensor._next_ptr
            FakeTensor._next_ptr += (math.prod(self.shape) * _ITEMSIZE[dtype] + 511) // 256 * 256
        self.ptr = ptr
        self.device = SimpleNamespace(id=device) if device is not None else None
        self.readonly = readonly
        self.protocol = "dlpack" if dtype not in _TYPESTR else protocol
        self.stream = stream            # the interface's (version 3): where it is being made

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.protocol != "cai":
            raise AttributeError("__cuda_array_interface__")
        size = _ITEMSIZE[self.dtype]
        return {"shape": self.shape, "typestr": _TYPESTR[self.dtype], "version": 3,
                "data": (self.ptr, self.readonly), "strides": tuple(s * size for s in self.strides),
                "stream": self.stream}

    def __dlpack_device__(self) -> tuple[int, int]:
        return DLPACK_CUDA, self.device.id if self.device else 0

    def __dlpack__(self, stream=None):
        n = len(self.shape)
        shape, strides = (ctypes.c_int64 * n)(*self.shape), (ctypes.c_int64 * n)(*self.strides)
        code, bits = _DLPACK_TYPES[self.dtype]
        managed = DLManagedTensor(DLTensor(
            ctypes.c_void_p(self.ptr), DLDevice(DLPACK_CUDA, self.device.id if self.device else 0),
            n, DLDataType(code, bits, 1), shape, strides, 0), None, None)
        self._dlpack_keepalive = (shape, strides, managed)     # the capsule points into these
        return _capsule_new(ctypes.addressof(managed), _CAPSULE_NAME, None)


class FakePlatform:
    """Devices of given compute capabilities; pointers live on `pointer_devices` (default 0)."""

    def __init__(self, capability=(8, 0), *, devices: int = 1, max_dynamic_smem_bytes: int = 166912,
                 name: str = "Fake GPU", pointer_devices: dict[int, int] | None = None, multiprocessors: int = 108):
        self.infos = [DeviceInfo(i, name, tuple(capability), max_dynamic_smem_bytes, multiprocessors)
                      for i in range(devices)]
        self.pointer_devices = pointer_devices or {}

    def device_info(self, ordinal: int) -> DeviceInfo:
        return self.infos[ordinal]

    def pointer_device(self, ptr: int) -> int:
        return self.pointer_devices.get(ptr, 0)


SYNTHETIC_SOURCE = """attention synthetic {
  q: bf16[B, H, M, 128]
  k: bf16[B, HKV, N, 128]
  v: bf16[B, HKV, N, 128]
  param slopes: f32[H]
  dim P
  score_mod(s, b, h, i, j) = s + slopes[h] * (j - i)
  mask_mod(b, h, i, j) = j < P or j <= i
  out o: bf16[B, H, M, 128]
  out lse: f32[B, H, M]
}
"""


def synthetic_manifest(target: str = "sm_80") -> dict:
    """A valid manifest of two kernels: a block map into scratch, then attention."""
    qkvo = ("B", "H", "M", 128), ("B", "HKV", "N", 128)

    def tensor(name, role, dtype, shape):
        return {"name": name, "role": role, "dtype": dtype, "shape": list(shape)}

    def strides(name, rank):
        return [{"kind": "stride", "tensor": name, "axis": a, "type": "i64"} for a in range(rank - 1)]

    blockmap_bytes = ["B", ["cdiv", "M", 128], ["cdiv", "N", 128]]
    return {
        "format": FORMAT,
        "compiler": {"name": "attnc", "version": "0.1.0"},
        "variant": "synthetic",
        "source_sha256": source_sha256(SYNTHETIC_SOURCE),
        "source": SYNTHETIC_SOURCE,
        "target": target,
        "code": {"cubin": f"attn_fwd.{target}.cubin",
                 "ptx": f"attn_fwd.{target.replace('sm_', 'compute_')}.ptx"},
        "dims": ["B", "H", "M", "HKV", "N", "P"],
        "inputs": [tensor("q", "q", "bf16", qkvo[0]), tensor("k", "k", "bf16", qkvo[1]),
                   tensor("v", "v", "bf16", qkvo[1]), tensor("slopes", "param", "f32", ["H"])],
        "outputs": [tensor("o", "o", "bf16", qkvo[0]), tensor("lse", "lse", "f32", qkvo[0][:3])],
        "constraints": [["divisible", "H", "HKV"]],
        "kernels": [
            {"name": "blockmap", "symbol": "attnc_synthetic_blockmap", "block": [128, 1, 1],
             "dynamic_smem_bytes": 0, "grid": [[["cdiv", "N", 128]], [["cdiv", "M", 128]], ["B"]],
             "params": [{"kind": "scratch", "name": "blockmap", "bytes": blockmap_bytes},
                        {"kind": "dim", "name": "M", "type": "i32"},
                        {"kind": "dim", "name": "N", "type": "i32"},
                        {"kind": "dim", "name": "P", "type": "i32"}],
             "role": "mask", "fills": ["blockmap"]},
            {"name": "attn_fwd", "symbol": "attnc_synthetic_fwd", "block": [128, 1, 1],
             "dynamic_smem_bytes": 65536, "grid": [[["cdiv", "M", 128]], ["H"], ["B"]],
             "params": [*({"kind": "ptr", "tensor": t} for t in ("q", "k", "v", "slopes", "o", "lse")),
                        {"kind": "scratch", "name": "blockmap", "bytes": blockmap_bytes},
                        *strides("q", 4), *strides("k", 4), *strides("v", 4), *strides("o", 4),
                        *strides("lse", 3),
                        *({"kind": "dim", "name": d, "type": "i32"} for d in ("M", "N", "H", "HKV", "P"))]},
        ],
        "specialization": {"dtype": "bf16", "head_dim_qk": 128, "head_dim_v": 128, "block_m": 128,
                           "block_n": 64, "warps": 4, "stages": 2},
        "code_sha256": {kind: hashlib.sha256(_placeholder(kind)).hexdigest() for kind in ("cubin", "ptx")},
    }


def _placeholder(kind: str) -> bytes:
    return f"not a real {kind}".encode()


def synthetic_files(manifest: dict) -> dict[str, bytes]:
    """Placeholder code objects under the names `manifest` gives them."""
    return {name: _placeholder(kind) for kind, name in manifest["code"].items()}


def synthetic_arguments(B=2, H=8, HKV=2, M=1000, N=1100, *, outputs: bool = False) -> dict:
    """Valid fake arguments for `synthetic_manifest()` (q, k, v, slopes, P; o and lse if asked)."""
    args = {"q": FakeTensor((B, H, M, 128), "bf16"), "k": FakeTensor((B, HKV, N, 128), "bf16"),
            "v": FakeTensor((B, HKV, N, 128), "bf16"), "slopes": FakeTensor((H,), "f32"), "P": 16}
    if outputs:
        args.update(o=FakeTensor((B, H, M, 128), "bf16"), lse=FakeTensor((B, H, M), "f32"))
    return args
