"""Element types a bundle may name, and how each tensor library spells them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str                   # as the manifest and the DSL write it
    itemsize: int               # bytes
    typestr: str | None         # `__cuda_array_interface__` kind+size; None: it has none
    dlpack: tuple[int, int]     # (DLDataTypeCode, bits)
    library_name: str           # torch.<name>, cupy/numpy dtype name


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("f16", 2, "f2", (2, 16), "float16"),
    DType("bf16", 2, None, (4, 16), "bfloat16"),
    DType("f32", 4, "f4", (2, 32), "float32"),
    DType("i32", 4, "i4", (0, 32), "int32"),
)}

_BY_TYPESTR = {d.typestr: d.name for d in DTYPES.values() if d.typestr}
_BY_DLPACK = {d.dlpack: d.name for d in DTYPES.values()}
_BY_LIBRARY_NAME = {d.library_name: d.name for d in DTYPES.values()}


def from_typestr(typestr: str) -> str | None:
    """`'<f2'` -> `'f16'`; None for big-endian or unknown types."""
    if len(typestr) < 3 or typestr[0] not in "<|=":
        return None
    return _BY_TYPESTR.get(typestr[1:])


def from_dlpack(code: int, bits: int, lanes: int) -> str | None:
    if lanes != 1:
        return None
    return _BY_DLPACK.get((code, bits))


def from_library_name(name: str) -> str | None:
    """`'torch.bfloat16'` or `'float16'` -> the manifest's name."""
    return _BY_LIBRARY_NAME.get(name.rsplit(".", 1)[-1])
