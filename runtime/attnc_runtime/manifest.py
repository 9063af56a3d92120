"""The bundle manifest: its schema, as frozen value objects, and its validation.

A manifest says everything a launch needs and nothing the runtime must guess
(design.md section 5). `parse_manifest` turns the JSON object into a `Manifest`
or raises `ManifestError` naming the field at fault, e.g.

    manifest: kernels[0].params[3].tensor: unknown tensor 'x' (tensors: q, k, v, o)

The schema, format "attnc-bundle/3" (every key below is required unless marked; formats
still read: "attnc-bundle/2", the same without a kernel's `small_grid`, and
"attnc-bundle/1", also without `code_sha256`; a runtime that reads only an older format
refuses a newer one's fields as unknown):

    format, compiler {name, version}, variant, source, source_sha256 (of source, UTF-8),
    target      "sm_80" | "sm_90a" | "sm_100a" | ... (see arch.py)
    code        {"cubin": file, "ptx": file}: at least one, plain file names in the bundle
    code_sha256 {"cubin": hex, "ptx": hex}: the sha256 of each code file, one for every file
                of `code` (format 2; format 1 had none); a file that does not match is refused
                when the bundle is read
    dims        every symbolic dim; those in no input shape are passed as ints at launch,
                unless nothing reads them (`Manifest.read_dims`: a dim declared and never used)
    inputs      [{name, role: q|k|v|param, dtype, shape, align?}]
    outputs     [{name, role?: o|lse (default: the name), dtype, shape, align?}]
    constraints [["divisible", a, b] | ["equal", a, b]]  (a, b: dim name or int; optional)
    kernels     [{name, symbol, block [x,y,z], cluster? [x,y,z], dynamic_smem_bytes,
                  grid [gx, gy, gz] (each a list of factors, multiplied), params [...],
                  role?: "mask", small_grid?: {symbol, grid, up_to_ctas_per_sm}}], launched
                in order; where `grid` has at most up_to_ctas_per_sm CTAs per SM of the device,
                the kernel `small_grid.symbol` runs instead on its own grid, with the same
                block, shared memory and params (the same computation, its CTAs in another
                order: Note [Small grids] in attnc/backend/sm80.py)
    specialization  free-form object (optional)

A shape entry is a dim name or a fixed size. A factor is an int, a dim name,
["cdiv", dim, int] or, in a grid only, ["min_sms", factor, ...]: the product of the
factors, but at most the device's number of SMs (a persistent kernel's grid). `align`
is the byte alignment required of the base pointer and of every stride but the last:
16 by default for q, k, v and o (16-byte vector loads and stores), the element size
otherwise. Params, in kernel ABI order:

    {"kind": "ptr", "tensor": t}                      64-bit device pointer
    {"kind": "dim", "name": D, "type": "i32"|"i64"}   a dim's value
    {"kind": "stride", "tensor": t, "axis": a, "type": "i32"|"i64"}   in elements
    {"kind": "const", "value": n, "type": "i32"|"i64"}   a size fixed at compile time
    {"kind": "scratch", "name": s, "bytes": [factors]}  pointer to a buffer the runtime
        allocates; kernels naming the same scratch share it. One that a mask kernel
        fills (below) is written by it, every byte a later kernel reads; any other is
        zeroed before every launch (Note [Filled scratch] in kernel.py)

A kernel of role "mask" builds mask data (the block map) into scratch from params and
dims alone, so that later launches may keep it (`Manifest.mask_kernels`; Note [Reused
masks] in kernel.py). It takes scratch and no pointer to q, k, v or an output, and says
which of its scratch it fills (`"fills": [names]`, at least one: it writes every byte of
them that a later kernel reads, so the runtime does not zero them); no kernel before it
takes a scratch it fills. Any other scratch it takes is read, and an earlier mask kernel
must fill it (the block map reads the tile table). The kernels after a mask kernel may
read its scratch but never write it (the compiler's promise; the rest is checked here).
"""
from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from attnc_runtime.arch import TARGETS
from attnc_runtime.dtypes import DTYPES
from attnc_runtime.errors import ManifestError

FORMAT = "attnc-bundle/3"                               # what attnc writes
READ_FORMATS = ("attnc-bundle/1", "attnc-bundle/2", FORMAT)     # what this runtime reads
CODE_KINDS = ("cubin", "ptx")
INPUT_ROLES = ("q", "k", "v", "param")
OUTPUT_ROLES = ("o", "lse")
VECTOR_ROLES = ("q", "k", "v", "o")     # read and written with 16-byte vectors
INT_TYPES = {"i32": 32, "i64": 64}
CONSTRAINT_KINDS = ("divisible", "equal")
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_Z = 64                    # a block's z extent (x and y go to 1024)
KERNEL_ROLES = ("mask",)
RESERVED_NAMES = ("mask_from",)         # keywords of Kernel.bind, not tensors
_ROLE_COUNTS = (("inputs", "q", "exactly"), ("inputs", "k", "exactly"), ("inputs", "v", "exactly"),
                ("outputs", "o", "exactly"), ("outputs", "lse", "at most"))

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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


Param = Union[PtrParam, DimParam, StrideParam, ScratchParam, ConstParam]


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


def parse_manifest(raw: Any) -> Manifest:
    """Validate a manifest's JSON object and return it as a `Manifest`."""
    top = _obj(raw, "manifest", required=("format", "compiler", "variant", "source",
                                          "source_sha256", "target", "code", "dims",
                                          "inputs", "outputs", "kernels"),
               optional=("constraints", "specialization", "code_sha256"))
    fmt = top["format"]
    if fmt not in READ_FORMATS:
        raise ManifestError(f"manifest: format: {fmt!r} is not supported by this runtime "
                            f"(it reads {' and '.join(map(repr, READ_FORMATS))})")
    if fmt == "attnc-bundle/1" and "code_sha256" in top:
        raise ManifestError(f"manifest: code_sha256: not a field of format {fmt!r}")
    if fmt != "attnc-bundle/1" and "code_sha256" not in top:
        # Without it the code files would load unchecked (Bundle.from_files compares them).
        raise ManifestError(f"manifest: code_sha256: required in format {fmt!r}")
    compiler = _obj(top["compiler"], "compiler", required=("name", "version"))
    source = _str(top["source"], "source")
    digest = _str(top["source_sha256"], "source_sha256")
    if digest != source_sha256(source):
        raise ManifestError("manifest: source_sha256: does not match the sha256 of source "
                            f"({source_sha256(source)})")
    dims = _dims(top["dims"])
    inputs = tuple(_tensor(t, f"inputs[{i}]", dims, output=False)
                   for i, t in enumerate(_list(top["inputs"], "inputs")))
    outputs = tuple(_tensor(t, f"outputs[{i}]", dims, output=True)
                    for i, t in enumerate(_list(top["outputs"], "outputs")))
    _check_tensor_set(inputs, outputs)
    tensors = {t.name: t for t in inputs + outputs}
    kernels = tuple(_kernel(k, f"kernels[{i}]", dims, tensors)
                    for i, k in enumerate(_list(top["kernels"], "kernels", min_len=1)))
    _check_small_grids(kernels, fmt)
    _check_scratch_agree(kernels)
    _check_mask_kernels(kernels, tensors)
    return Manifest(
        compiler_name=_str(compiler["name"], "compiler.name"),
        compiler_version=_str(compiler["version"], "compiler.version"),
        variant=_str(top["variant"], "variant"),
        source=source, source_sha256=digest,
        target=_choice(top["target"], "target", tuple(TARGETS)),
        code=_code(top["code"]),
        code_sha256=_code_sha256(top["code_sha256"], top["code"]) if fmt != "attnc-bundle/1" else {},
        dims=dims, inputs=inputs, outputs=outputs,
        constraints=tuple(_constraint(c, f"constraints[{i}]", dims)
                          for i, c in enumerate(_list(top.get("constraints", []), "constraints"))),
        kernels=kernels,
        specialization=_obj(top.get("specialization", {}), "specialization", free=True),
        raw=raw)


# -- the parts ------------------------------------------------------------------

def _dims(raw: Any) -> tuple[str, ...]:
    dims = tuple(_ident(d, f"dims[{i}]") for i, d in enumerate(_list(raw, "dims")))
    for i, d in enumerate(dims):
        if d in dims[:i]:
            raise ManifestError(f"manifest: dims[{i}]: {d!r} is listed twice")
    return dims


def _tensor(raw: Any, path: str, dims: tuple[str, ...], *, output: bool) -> TensorSpec:
    # An input must say its role; an output's defaults to its name ('o' or 'lse').
    roles = OUTPUT_ROLES if output else INPUT_ROLES
    fields = _obj(raw, path, required=("name", "dtype", "shape") + (() if output else ("role",)),
                  optional=("role", "align"))
    name = _ident(fields["name"], f"{path}.name")
    role = fields.get("role", name if name in OUTPUT_ROLES else None)
    if role is None:
        raise ManifestError(f"manifest: {path}.role: missing (one of {', '.join(roles)})")
    role = _choice(role, f"{path}.role", roles)
    dtype = _choice(fields["dtype"], f"{path}.dtype", tuple(DTYPES))
    shape = tuple(_shape_entry(s, f"{path}.shape[{i}]", dims)
                  for i, s in enumerate(_list(fields["shape"], f"{path}.shape")))
    itemsize = DTYPES[dtype].itemsize
    default_align = 16 if role in VECTOR_ROLES else itemsize
    align = _int(fields.get("align", default_align), f"{path}.align", minimum=itemsize)
    if align & (align - 1):
        raise ManifestError(f"manifest: {path}.align: {align} is not a power of two")
    return TensorSpec(name, role, dtype, shape, align)


def _check_tensor_set(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> None:
    seen: set[str] = set()
    for group, specs in (("inputs", inputs), ("outputs", outputs)):
        for i, t in enumerate(specs):
            if t.name in seen:
                raise ManifestError(f"manifest: {group}[{i}].name: tensor {t.name!r} is declared twice")
            if t.name in RESERVED_NAMES:
                raise ManifestError(f"manifest: {group}[{i}].name: {t.name!r} is a keyword of Kernel.bind, "
                                    "not a tensor name")
            seen.add(t.name)
    for group, role, bound in _ROLE_COUNTS:
        count = sum(t.role == role for t in (inputs if group == "inputs" else outputs))
        if count > 1 or (count == 0 and bound == "exactly"):
            raise ManifestError(f"manifest: {group}: expected {bound} one tensor with role {role!r}, "
                                f"found {count}")


def _kernel(raw: Any, path: str, dims: tuple[str, ...], tensors: Mapping[str, TensorSpec]) -> KernelSpec:
    fields = _obj(raw, path, required=("name", "symbol", "block", "dynamic_smem_bytes", "grid", "params"),
                  optional=("cluster", "role", "fills", "small_grid"))
    block = _triple(fields["block"], f"{path}.block")
    if block[0] * block[1] * block[2] > MAX_THREADS_PER_BLOCK:
        raise ManifestError(f"manifest: {path}.block: {list(block)} has more than "
                            f"{MAX_THREADS_PER_BLOCK} threads")
    if block[2] > MAX_BLOCK_Z:
        raise ManifestError(f"manifest: {path}.block: z = {block[2]} exceeds the hardware's {MAX_BLOCK_Z}")
    grid = _list(fields["grid"], f"{path}.grid", min_len=3, max_len=3)
    return KernelSpec(
        name=_str(fields["name"], f"{path}.name"),
        symbol=_str(fields["symbol"], f"{path}.symbol"),
        block=block,
        cluster=_triple(fields.get("cluster", [1, 1, 1]), f"{path}.cluster"),
        dynamic_smem_bytes=_int(fields["dynamic_smem_bytes"], f"{path}.dynamic_smem_bytes", minimum=0),
        grid=tuple(_factors(g, f"{path}.grid[{i}]", dims, in_grid=True) for i, g in enumerate(grid)),
        params=tuple(_param(p, f"{path}.params[{i}]", dims, tensors)
                     for i, p in enumerate(_list(fields["params"], f"{path}.params"))),
        role=_choice(fields["role"], f"{path}.role", KERNEL_ROLES) if "role" in fields else None,
        fills=tuple(_ident(x, f"{path}.fills[{i}]") for i, x in enumerate(_list(fields.get("fills", []),
                                                                                 f"{path}.fills"))),
        small_grid=_small_grid(fields["small_grid"], f"{path}.small_grid", dims) if "small_grid" in fields else None)


def _check_small_grids(kernels: tuple[KernelSpec, ...], fmt: str) -> None:
    """A small grid (format 3) names a symbol of its own, on a kernel that is not a mask
    kernel (whose scratch a later launch may keep) and has no cluster."""
    symbols = [k.symbol for k in kernels]
    for i, k in enumerate(kernels):
        if k.small_grid is None:
            continue
        path = f"manifest: kernels[{i}].small_grid"
        if fmt != FORMAT:
            raise ManifestError(f"{path}: not a field of format {fmt!r}")
        if k.role is not None or k.cluster != (1, 1, 1):
            raise ManifestError(f"{path}: only a kernel without a role and a cluster may have one")
        if k.small_grid.symbol in symbols + [x.small_grid.symbol for x in kernels[:i] if x.small_grid]:
            raise ManifestError(f"{path}.symbol: {k.small_grid.symbol!r} names another kernel too")


def _small_grid(raw: Any, path: str, dims: tuple[str, ...]) -> SmallGrid:
    fields = _obj(raw, path, required=("symbol", "grid", "up_to_ctas_per_sm"))
    grid = _list(fields["grid"], f"{path}.grid", min_len=3, max_len=3)
    return SmallGrid(symbol=_str(fields["symbol"], f"{path}.symbol"),
                     grid=tuple(_factors(g, f"{path}.grid[{i}]", dims, in_grid=True) for i, g in enumerate(grid)),
                     up_to_ctas_per_sm=_int(fields["up_to_ctas_per_sm"], f"{path}.up_to_ctas_per_sm", minimum=1))


def _param(raw: Any, path: str, dims: tuple[str, ...], tensors: Mapping[str, TensorSpec]) -> Param:
    kind = _choice(_obj(raw, path, free=True).get("kind"), f"{path}.kind",
                   ("ptr", "dim", "stride", "scratch", "const"))
    if kind == "ptr":
        fields = _obj(raw, path, required=("kind", "tensor"))
        return PtrParam(_tensor_name(fields["tensor"], f"{path}.tensor", tensors))
    if kind == "dim":
        fields = _obj(raw, path, required=("kind", "name", "type"))
        return DimParam(_dim(fields["name"], f"{path}.name", dims),
                        _choice(fields["type"], f"{path}.type", tuple(INT_TYPES)))
    if kind == "stride":
        fields = _obj(raw, path, required=("kind", "tensor", "axis", "type"))
        tensor = _tensor_name(fields["tensor"], f"{path}.tensor", tensors)
        axis = _int(fields["axis"], f"{path}.axis", minimum=0)
        if axis >= tensors[tensor].rank:
            raise ManifestError(f"manifest: {path}.axis: {axis} is out of range for "
                                f"{tensor!r} of rank {tensors[tensor].rank}")
        return StrideParam(tensor, axis, _choice(fields["type"], f"{path}.type", tuple(INT_TYPES)))
    if kind == "const":
        fields = _obj(raw, path, required=("kind", "value", "type"))
        kind_type = _choice(fields["type"], f"{path}.type", tuple(INT_TYPES))
        value = _int(fields["value"], f"{path}.value", minimum=0)
        if value >= 2 ** (INT_TYPES[kind_type] - 1):
            raise ManifestError(f"manifest: {path}.value: {value} does not fit {kind_type}")
        return ConstParam(value, kind_type)
    fields = _obj(raw, path, required=("kind", "name", "bytes"))
    return ScratchParam(_ident(fields["name"], f"{path}.name"),
                        _factors(fields["bytes"], f"{path}.bytes", dims))


def _check_scratch_agree(kernels: tuple[KernelSpec, ...]) -> None:
    sizes: dict[str, tuple[Factor, ...]] = {}
    for i, kernel in enumerate(kernels):
        for j, p in enumerate(kernel.params):
            if isinstance(p, ScratchParam) and sizes.setdefault(p.name, p.bytes) != p.bytes:
                raise ManifestError(f"manifest: kernels[{i}].params[{j}].bytes: scratch {p.name!r} "
                                    "is sized differently by another param")


def _check_mask_kernels(kernels: tuple[KernelSpec, ...], tensors: Mapping[str, TensorSpec]) -> None:
    """A mask kernel reads params and dims only, fills scratch that no earlier kernel took,
    and reads no scratch but what an earlier mask kernel filled."""
    taken: set[str] = set()             # by any earlier kernel
    filled: set[str] = set()            # by earlier mask kernels
    for i, kernel in enumerate(kernels):
        path = f"manifest: kernels[{i}]"
        scratch = {p.name for p in kernel.params if isinstance(p, ScratchParam)}
        if kernel.role != "mask":
            if kernel.fills:
                raise ManifestError(f"{path}.fills: only a kernel of role 'mask' fills scratch")
            taken |= scratch
            continue
        reads = sorted(p.tensor for p in kernel.params
                       if isinstance(p, PtrParam) and tensors[p.tensor].role != "param")
        if reads:
            raise ManifestError(f"{path}: a mask kernel reads params only, not {', '.join(reads)}")
        if not kernel.fills:
            raise ManifestError(f"{path}: a mask kernel fills scratch, and names none in 'fills'")
        for name in kernel.fills:
            if name not in scratch:
                raise ManifestError(f"{path}.fills: {name!r} is not a scratch param of the kernel")
            if name in taken:
                raise ManifestError(f"{path}: scratch {name!r} is taken by an earlier kernel; "
                                    "a mask kernel fills its own")
        unfilled = sorted(scratch - set(kernel.fills) - filled)
        if unfilled:
            raise ManifestError(f"{path}: reads scratch {unfilled[0]!r}, which no earlier mask kernel fills")
        taken |= scratch
        filled |= set(kernel.fills)


def _constraint(raw: Any, path: str, dims: tuple[str, ...]) -> Constraint:
    items = _list(raw, path, min_len=3, max_len=3)
    kind = _choice(items[0], f"{path}[0]", CONSTRAINT_KINDS)
    return Constraint(kind, _shape_entry(items[1], f"{path}[1]", dims),
                      _shape_entry(items[2], f"{path}[2]", dims))


def _code(raw: Any) -> Mapping[str, str]:
    code = _obj(raw, "code", required=(), optional=CODE_KINDS)
    if not code:
        raise ManifestError(f"manifest: code: names no code object (expected {' and/or '.join(CODE_KINDS)})")
    for kind, name in code.items():
        name = _str(name, f"code.{kind}")
        if name in ("", ".", "..", "manifest.json") or "/" in name or "\\" in name:
            raise ManifestError(f"manifest: code.{kind}: {name!r} is not a plain file name")
    return dict(code)


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _code_sha256(raw: Any, code: Mapping[str, str]) -> Mapping[str, str]:
    digests = _obj(raw, "code_sha256", required=(), optional=CODE_KINDS)
    for kind, digest in digests.items():
        if kind not in code:
            raise ManifestError(f"manifest: code_sha256.{kind}: the bundle has no {kind} (code names "
                                f"{', '.join(code)})")
        if not _SHA256.fullmatch(_str(digest, f"code_sha256.{kind}")):
            raise ManifestError(f"manifest: code_sha256.{kind}: {digest!r} is not a sha256 "
                                f"(64 lowercase hex digits)")
    missing = [kind for kind in code if kind not in digests]
    if missing:
        # A digest short of a code file would let that file load unchecked (found by a review).
        raise ManifestError(f"manifest: code_sha256: no digest of the {missing[0]} (every code file has one)")
    return dict(digests)


def _factors(raw: Any, path: str, dims: tuple[str, ...], in_grid: bool = False) -> tuple[Factor, ...]:
    return tuple(_factor(f, f"{path}[{i}]", dims, in_grid) for i, f in enumerate(_list(raw, path)))


def _factor(raw: Any, path: str, dims: tuple[str, ...], in_grid: bool = False) -> Factor:
    if isinstance(raw, list):
        if in_grid and raw[:1] == ["min_sms"]:
            _list(raw, path, min_len=2)
            return MinSms(tuple(_factor(f, f"{path}[{i}]", dims) for i, f in enumerate(raw[1:], 1)))
        items = _list(raw, path, min_len=3, max_len=3)
        if items[0] != "cdiv":
            expected = "'cdiv' or 'min_sms'" if in_grid else "'cdiv'"
            raise ManifestError(f"manifest: {path}[0]: expected {expected}, got {items[0]!r}")
        return Cdiv(_dim(items[1], f"{path}[1]", dims), _int(items[2], f"{path}[2]", minimum=1))
    return _shape_entry(raw, path, dims)


def _shape_entry(raw: Any, path: str, dims: tuple[str, ...]) -> ShapeEntry:
    if isinstance(raw, str):
        return _dim(raw, path, dims)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return _int(raw, path, minimum=1)
    raise ManifestError(f"manifest: {path}: expected a dim name or a positive int, got {raw!r}")


# -- JSON leaves ------------------------------------------------------------------

def _obj(raw: Any, path: str, required: tuple[str, ...] = (), optional: tuple[str, ...] = (),
         free: bool = False) -> dict:
    if not isinstance(raw, dict):
        raise ManifestError(f"manifest: {path}: expected an object, got {type(raw).__name__}")
    for key in required:
        if key not in raw:
            raise ManifestError(f"manifest: {path}: missing field {key!r}")
    unknown = [k for k in raw if k not in required and k not in optional]
    if unknown and not free:
        raise ManifestError(f"manifest: {path}: unknown field {unknown[0]!r}")
    return raw


def _list(raw: Any, path: str, min_len: int = 0, max_len: int | None = None) -> list:
    if not isinstance(raw, list):
        raise ManifestError(f"manifest: {path}: expected a list, got {type(raw).__name__}")
    if len(raw) < min_len or (max_len is not None and len(raw) > max_len):
        want = f"{min_len}" if max_len == min_len else f"at least {min_len}"
        raise ManifestError(f"manifest: {path}: expected {want} entries, got {len(raw)}")
    return raw


def _triple(raw: Any, path: str) -> tuple[int, int, int]:
    a, b, c = (_int(x, f"{path}[{i}]", minimum=1)
               for i, x in enumerate(_list(raw, path, min_len=3, max_len=3)))
    return a, b, c


def _str(raw: Any, path: str) -> str:
    if not isinstance(raw, str):
        raise ManifestError(f"manifest: {path}: expected a string, got {raw!r}")
    return raw


def _ident(raw: Any, path: str) -> str:
    if not _IDENT.match(_str(raw, path)):
        raise ManifestError(f"manifest: {path}: {raw!r} is not an identifier")
    return raw


def _int(raw: Any, path: str, minimum: int | None = None) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise ManifestError(f"manifest: {path}: expected an integer, got {raw!r}")
    if minimum is not None and raw < minimum:
        raise ManifestError(f"manifest: {path}: {raw} is less than {minimum}")
    return raw


def _choice(raw: Any, path: str, choices: tuple[str, ...]) -> str:
    if raw not in choices:
        raise ManifestError(f"manifest: {path}: {raw!r} is not one of {', '.join(choices)}")
    return raw


def _dim(raw: Any, path: str, dims: tuple[str, ...]) -> str:
    if raw not in dims:
        raise ManifestError(f"manifest: {path}: {raw!r} is not a declared dim "
                            f"(dims: {', '.join(dims) or 'none'})")
    return raw


def _tensor_name(raw: Any, path: str, tensors: Mapping[str, TensorSpec]) -> str:
    if raw not in tensors:
        raise ManifestError(f"manifest: {path}: unknown tensor {raw!r} (tensors: {', '.join(tensors)})")
    return raw
