"""The bundle manifest as frozen value objects, what `parse_manifest` (manifest.py, whose
docstring is the schema) returns, and the constants of the format.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from attnc_runtime.dtypes import DTYPES

FORMAT = "attnc-bundle/4"                               # what attnc writes
READ_FORMATS = ("attnc-bundle/1", "attnc-bundle/2", "attnc-bundle/3", FORMAT)     # what this runtime reads


def since(fmt: str, first: str) -> bool:
    """Whether format `fmt` has the fields format `first` added."""
    return READ_FORMATS.index(fmt) >= READ_FORMATS.index(first)
CODE_KINDS = ("cubin", "ptx")
INPUT_ROLES = ("q", "k", "v", "param")
OUTPUT_ROLES = ("o", "lse")
VECTOR_ROLES = ("q", "k", "v", "o")     # read and written with 16-byte vectors
INT_TYPES = {"i32": 32, "i64": 64}
CONSTRAINT_KINDS = ("divisible", "equal")
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_Z = 64                    # a block's z extent (x and y go to 1024)
KERNEL_ROLES = ("mask",)
# Keywords a launch takes beside the tensors, so no tensor may be named so: name -> whose.
RESERVED_NAMES = {"mask_from": "the runtime's Kernel.bind", "ctas": "the emulator's kernel (attnc_sim)"}


@dataclass(frozen=True)
class Cdiv:
    """`ceil(dim / by)`."""
    dim: str
    by: int


@dataclass(frozen=True)
class MinSms:
    """`min(product(factors), the device's SM count)`: a persistent kernel's grid."""
    factors: tuple


Factor = Union[int, str, Cdiv, MinSms]
ShapeEntry = Union[int, str]


@dataclass(frozen=True)
class TensorSpec:
    name: str
    role: str
    dtype: str
    shape: tuple[ShapeEntry, ...]
    align: int

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize


@dataclass(frozen=True)
class PtrParam:
    tensor: str


@dataclass(frozen=True)
class DimParam:
    name: str
    type: str


@dataclass(frozen=True)
class StrideParam:
    tensor: str
    axis: int
    type: str


@dataclass(frozen=True)
class ScratchParam:
    name: str
    bytes: tuple[Factor, ...]


@dataclass(frozen=True)
class ConstParam:
    """A size fixed at compile time that the kernel still takes as an argument
    (e.g. HKV = 1 for MQA where the kernel's ABI has a heads-per-KV parameter)."""
    value: int
    type: str


@dataclass(frozen=True)
class TensorMapParam:
    """A TMA tensor map of `tensor` (a 128-byte kernel parameter the runtime encodes at
    the bind: cuTensorMapEncodeTiled on a GPU, attnc_sim's own layout on the emulator):
    `box`, the elements one copy moves along each axis (outermost first, as the shape),
    `swizzle`, the shared-memory swizzle in bytes (0: none). Elements outside the tensor
    load as zero and are not stored."""
    tensor: str
    box: tuple[int, ...]
    swizzle: int


Param = Union[PtrParam, DimParam, StrideParam, ScratchParam, ConstParam, TensorMapParam]


@dataclass(frozen=True)
class Constraint:
    kind: str
    a: ShapeEntry
    b: ShapeEntry


@dataclass(frozen=True)
class KernelSpec:
    name: str
    symbol: str
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    dynamic_smem_bytes: int
    grid: tuple[tuple[Factor, ...], tuple[Factor, ...], tuple[Factor, ...]]
    params: tuple[Param, ...]
    role: str | None = None             # "mask": Note [Reused masks] (kernel.py)
    fills: tuple[str, ...] = ()         # a mask kernel's scratch that it writes
    small_grid: "SmallGrid | None" = None
    resources: "Resources | None" = None   # the assembler's report for the cubin, where it has one


@dataclass(frozen=True)
class Resources:
    """What the assembler reported for a kernel of the bundle's cubin: registers a thread,
    bytes of local memory spilled (stored and loaded) and its stack frame in bytes."""
    registers: int
    spill_stores: int
    spill_loads: int
    stack_frame: int


RESOURCE_FIELDS = ("registers", "spill_stores", "spill_loads", "stack_frame")     # Resources', in order


@dataclass(frozen=True)
class SmallGrid:
    """The kernel launched instead where the grid has at most up_to_ctas_per_sm CTAs per SM."""
    symbol: str
    grid: tuple[tuple[Factor, ...], tuple[Factor, ...], tuple[Factor, ...]]
    up_to_ctas_per_sm: int


@dataclass(frozen=True)
class Manifest:
    compiler_name: str
    compiler_version: str
    variant: str
    source: str
    source_sha256: str
    target: str
    code: Mapping[str, str]
    code_sha256: Mapping[str, str]          # kind -> the sha256 its file must have (may be empty)
    dims: tuple[str, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    constraints: tuple[Constraint, ...]
    kernels: tuple[KernelSpec, ...]
    specialization: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def tensors(self) -> tuple[TensorSpec, ...]:
        return self.inputs + self.outputs

    def tensor(self, name: str) -> TensorSpec:
        return next(t for t in self.tensors if t.name == name)

    def role(self, role: str) -> TensorSpec | None:
        return next((t for t in self.tensors if t.role == role), None)

    @property
    def mask_kernels(self) -> tuple[int, ...]:
        """Launch-order indices of the kernels of role "mask": each fills its scratch from
        params and dims alone (the block map of a mask that reads params)."""
        return tuple(i for i, k in enumerate(self.kernels) if k.role == "mask")

    @property
    def mask_scratch(self) -> tuple[str, ...]:
        """The scratch the mask kernels fill, sorted: what a launch may keep."""
        return tuple(sorted({p.name for i in self.mask_kernels for p in self.kernels[i].params
                             if isinstance(p, ScratchParam)}))

    @property
    def mask_params(self) -> tuple[str, ...]:
        """The param tensors the mask kernels read, sorted: what a kept mask depends on."""
        return tuple(sorted({p.tensor for i in self.mask_kernels for p in self.kernels[i].params
                             if isinstance(p, PtrParam)}))

    @functools.cached_property
    def read_dims(self) -> frozenset[str]:
        """The dims something of the launch depends on: a tensor's shape, a constraint, a
        kernel's grid, scratch size or parameter. A declared dim outside them (one the
        variant never uses) may be left out of a launch."""
        used = {d for t in self.tensors for d in t.shape if isinstance(d, str)}
        used |= {x for c in self.constraints for x in (c.a, c.b) if isinstance(x, str)}
        for k in self.kernels:
            used |= _factor_dims(f for axis in k.grid for f in axis)
            if k.small_grid is not None:
                used |= _factor_dims(f for axis in k.small_grid.grid for f in axis)
            for p in k.params:
                if isinstance(p, DimParam):
                    used.add(p.name)
                elif isinstance(p, ScratchParam):
                    used |= _factor_dims(p.bytes)
        return frozenset(used)

    @property
    def scalar_dims(self) -> tuple[str, ...]:
        """Dims no input shape carries: passed as keyword ints at launch (those in
        `read_dims`; the others may be left out)."""
        shaped = {d for t in self.inputs for d in t.shape if isinstance(d, str)}
        return tuple(d for d in self.dims if d not in shaped)


def _factor_dims(factors) -> set[str]:
    """The dims a product of factors reads."""
    out = set()
    for f in factors:
        if isinstance(f, str):
            out.add(f)
        elif isinstance(f, Cdiv):
            out.add(f.dim)
        elif isinstance(f, MinSms):
            out |= _factor_dims(f.factors)
    return out


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()
