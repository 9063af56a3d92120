"""Allocating like the inputs, and finding the stream to launch on.

Outputs the caller did not pass are allocated by the library of the inputs
(torch.empty, cupy.empty), so they come back as the same kind of tensor and live
in that library's caching allocator; inputs from anything else get
`DeviceArray`s. torch and cupy are taken from `sys.modules`, never imported: a
torch tensor in hand means torch is already loaded.
"""
from __future__ import annotations

import math
import sys

from attnc_runtime.dtypes import DTYPES
from attnc_runtime.errors import AttncRuntimeError


def empty(library: str, shape: tuple[int, ...], dtype: str, device: int):
    """An uninitialised contiguous tensor of `library` on CUDA device `device`."""
    if library == "torch":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=getattr(torch, DTYPES[dtype].library_name),
                           device=f"cuda:{device}")
    if library == "cupy":
        cupy = sys.modules["cupy"]
        if dtype == "bf16":
            raise AttncRuntimeError("cupy has no bf16 dtype: pass the bf16 outputs yourself "
                                    "(e.g. as torch tensors or DLPack arrays)")
        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype=DTYPES[dtype].library_name)
    from attnc_runtime.device_array import DeviceArray
    return DeviceArray(shape, dtype, device)


def scratch(library: str, nbytes: int, device: int):
    """A buffer of at least `nbytes` (the launcher zeroes it before each launch, or a mask
    kernel fills it: Note [Filled scratch] in kernel.py)."""
    return empty(library, (max(math.ceil(nbytes / 4), 1),), "i32", device)


def used_on(library: str, objs, stream: int, device: int) -> None:
    """Tell torch's caching allocator that `objs` (tensors it allocated on another stream)
    are used on `stream`: freed, their memory is not reused until the work queued there by
    then is done (Note [Memory used on another stream] in kernel.py)."""
    torch = sys.modules["torch"]
    external = torch.cuda.ExternalStream(stream, device=torch.device("cuda", device))
    for obj in objs:
        obj.record_stream(external)


def current_stream(library: str, device: int) -> int:
    """The stream the library would run its own work on now (0, the default stream, otherwise)."""
    if library == "torch":
        return sys.modules["torch"].cuda.current_stream(device).cuda_stream
    if library == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(device):
            return cupy.cuda.get_current_stream().ptr
    return 0
