"""The bundle manifest: its schema and its validation, `parse_manifest`.

A manifest says everything a launch needs and nothing the runtime must guess
(design.md section 5). `parse_manifest` turns the JSON object into a `Manifest`
or raises `ManifestError` naming the field at fault, e.g.

    manifest: kernels[0].params[3].tensor: unknown tensor 'x' (tensors: q, k, v, o)

The value objects it returns are in manifest_schema.py (importable from here too: every
name of `__all__`), the rules across fields in manifest_checks.py.

The schema, format "attnc-bundle/4" (every key below is required unless marked; formats
still read: "attnc-bundle/3", the same without a kernel's `resources`, "attnc-bundle/2",
also without its `small_grid`, and "attnc-bundle/1", also without `code_sha256`; a runtime
that reads only an older format refuses a newer one):

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
                order: Note [Small grids] in attnc/backend/kernel_abi.py)
                and `resources?: {registers, spill_stores, spill_loads, stack_frame}`, what
                the assembler reported for the kernel in the bundle's cubin (informative)
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
    {"kind": "tensor_map", "tensor": t, "box": [n, ...], "swizzle": 0|32|64|128}
        a TMA tensor map of t (128 bytes): the box one copy moves, per axis of t, each
        1..256, its innermost row at most `swizzle` bytes and a multiple of 16 (Note
        [Tensor maps] in params.py)
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

import re
from typing import Any, Mapping

from attnc_runtime.arch import TARGETS
from attnc_runtime.dtypes import DTYPES
from attnc_runtime.errors import ManifestError
from attnc_runtime.manifest_checks import (_check_mask_kernels, _check_resources, _check_scratch_agree,
                                           _check_small_grids, _check_tensor_set)
from attnc_runtime.manifest_schema import (CODE_KINDS, CONSTRAINT_KINDS, FORMAT, INPUT_ROLES,
                                           INT_TYPES, KERNEL_ROLES, MAX_BLOCK_Z,
                                           MAX_THREADS_PER_BLOCK, OUTPUT_ROLES, READ_FORMATS,
                                           RESERVED_NAMES, RESOURCE_FIELDS, VECTOR_ROLES, Cdiv,
                                           ConstParam, Constraint, DimParam, Factor, KernelSpec, Manifest,
                                           MinSms, Param, PtrParam, Resources, ScratchParam,
                                           ShapeEntry, SmallGrid, StrideParam, TensorMapParam,
                                           TensorSpec, source_sha256)

__all__ = ["CODE_KINDS", "CONSTRAINT_KINDS", "Cdiv", "ConstParam", "Constraint", "DimParam",
           "FORMAT", "Factor", "INPUT_ROLES", "INT_TYPES", "KERNEL_ROLES", "KernelSpec",
           "MAX_BLOCK_Z", "MAX_THREADS_PER_BLOCK", "Manifest", "MinSms", "OUTPUT_ROLES", "Param",
           "PtrParam", "READ_FORMATS", "RESERVED_NAMES", "Resources", "ScratchParam", "ShapeEntry",
           "SmallGrid", "StrideParam", "TensorMapParam", "TensorSpec", "VECTOR_ROLES", "parse_manifest",
           "source_sha256"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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
    _check_resources(kernels, fmt)
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


def _kernel(raw: Any, path: str, dims: tuple[str, ...], tensors: Mapping[str, TensorSpec]) -> KernelSpec:
    fields = _obj(raw, path, required=("name", "symbol", "block", "dynamic_smem_bytes", "grid", "params"),
                  optional=("cluster", "role", "fills", "small_grid", "resources"))
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
        small_grid=_small_grid(fields["small_grid"], f"{path}.small_grid", dims) if "small_grid" in fields else None,
        resources=_resources(fields["resources"], f"{path}.resources") if "resources" in fields else None)


def _resources(raw: Any, path: str) -> Resources:
    fields = _obj(raw, path, required=RESOURCE_FIELDS)
    return Resources(*(_int(fields[name], f"{path}.{name}", minimum=0) for name in RESOURCE_FIELDS))



def _small_grid(raw: Any, path: str, dims: tuple[str, ...]) -> SmallGrid:
    fields = _obj(raw, path, required=("symbol", "grid", "up_to_ctas_per_sm"))
    grid = _list(fields["grid"], f"{path}.grid", min_len=3, max_len=3)
    return SmallGrid(symbol=_str(fields["symbol"], f"{path}.symbol"),
                     grid=tuple(_factors(g, f"{path}.grid[{i}]", dims, in_grid=True) for i, g in enumerate(grid)),
                     up_to_ctas_per_sm=_int(fields["up_to_ctas_per_sm"], f"{path}.up_to_ctas_per_sm", minimum=1))


def _param(raw: Any, path: str, dims: tuple[str, ...], tensors: Mapping[str, TensorSpec]) -> Param:
    kind = _choice(_obj(raw, path, free=True).get("kind"), f"{path}.kind",
                   ("ptr", "dim", "stride", "scratch", "const", "tensor_map"))
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
    if kind == "tensor_map":
        return _tensor_map(raw, path, tensors)
    fields = _obj(raw, path, required=("kind", "name", "bytes"))
    return ScratchParam(_ident(fields["name"], f"{path}.name"),
                        _factors(fields["bytes"], f"{path}.bytes", dims))


SWIZZLES = (0, 32, 64, 128)
MAX_BOX = 256           # elements of a TMA box along one axis


def _tensor_map(raw: Any, path: str, tensors: Mapping[str, TensorSpec]) -> TensorMapParam:
    fields = _obj(raw, path, required=("kind", "tensor", "box", "swizzle"))
    tensor = _tensor_name(fields["tensor"], f"{path}.tensor", tensors)
    spec = tensors[tensor]
    box = tuple(_int(x, f"{path}.box[{i}]", minimum=1)
                for i, x in enumerate(_list(fields["box"], f"{path}.box", min_len=spec.rank, max_len=spec.rank)))
    if max(box) > MAX_BOX:
        raise ManifestError(f"manifest: {path}.box: {list(box)}: a TMA box spans at most {MAX_BOX} elements an axis")
    swizzle = fields["swizzle"]
    if isinstance(swizzle, bool) or swizzle not in SWIZZLES:
        raise ManifestError(f"manifest: {path}.swizzle: {swizzle!r} is not one of {', '.join(map(str, SWIZZLES))}")
    row = box[-1] * DTYPES[spec.dtype].itemsize
    if row % 16 or (swizzle and row > swizzle):
        raise ManifestError(f"manifest: {path}.box: its innermost row is {row} bytes; TMA takes a multiple of 16"
                            + (f", at most the {swizzle}-byte swizzle" if swizzle else ""))
    return TensorMapParam(tensor, box, swizzle)


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
