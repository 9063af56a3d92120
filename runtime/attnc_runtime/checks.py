"""Every argument checked against the manifest before anything reaches the GPU.

`plan_launch` either returns a `LaunchPlan` -- the bound dims, the device, the
code object to load, the grids, the outputs still to allocate -- or raises an
`AttncRuntimeError` naming what is wrong. The order of the checks is the order a
user fixes things in: names, then each tensor alone (kind, dtype, rank, device),
then tensors against each other (dims, constraints), then layout (strides,
alignment), then the GPU (architecture, shared memory, grid limits).

It asks the GPU two questions only, through `platform`: which device holds a
pointer, and what a device is (`DeviceInfo`); tests answer them with a fake.
"""
from __future__ import annotations

import operator
import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from attnc_runtime import shapes
from attnc_runtime.arch import DeviceInfo, select_code
from attnc_runtime.errors import AttncRuntimeError
from attnc_runtime.manifest import (INT_TYPES, OUTPUT_ROLES, DimParam, Manifest, ScratchParam,
                                    StrideParam, TensorSpec)
from attnc_runtime.tensors import TensorView, contiguous_strides, view

MAX_GRID = (2**31 - 1, 65535, 65535)


class Platform(Protocol):
    def device_info(self, ordinal: int) -> DeviceInfo: ...
    def pointer_device(self, ptr: int) -> int: ...


@dataclass(frozen=True)
class LaunchPlan:
    device: DeviceInfo
    code_kind: str                                      # 'cubin' or 'ptx'
    dims: Mapping[str, int]
    views: Mapping[str, TensorView]                     # every tensor given, by name
    allocate: tuple[tuple[TensorSpec, tuple[int, ...]], ...]   # outputs not given, with shapes
    library: str                                        # who allocates: the library of q
    grids: tuple[tuple[int, int, int], ...]             # per kernel, in launch order
    symbols: tuple[str, ...]                            # per kernel: its own, or its small grid's
    scratch: Mapping[str, int]                          # bytes per scratch buffer


def plan_launch(manifest: Manifest, args: Mapping[str, Any], platform: Platform) -> LaunchPlan:
    tensors, dim_args = _split(manifest, args)
    views = {name: _view(manifest.tensor(name), obj) for name, obj in tensors.items()}
    device = _common_device(views, platform)
    dims = _bind_dims(manifest, views, dim_args)
    _check_sizes(manifest, dims)
    _check_constraints(manifest, dims)
    q = views[manifest.role("q").name]
    rows = math.prod(q.shape[:-1])          # B * H * M: with none, nothing is computed
    for name, v in views.items():
        _check_layout(manifest.tensor(name), v, rows)
    _check_outputs_apart(manifest, views)
    info = platform.device_info(device)
    code_kind = select_code(manifest.target, manifest.code, info.capability, device)
    allocate = tuple((spec, tuple(_size(s, dims) for s in spec.shape))
                     for spec in manifest.outputs if spec.name not in views)
    _check_param_ranges(manifest, dims, views, allocate)
    return LaunchPlan(
        device=info, code_kind=code_kind, dims=dims, views=views, allocate=allocate,
        library=views[manifest.role("q").name].library,
        **_kernel_grids(manifest, dims, info, rows),
        scratch={p.name: shapes.product(p.bytes, dims)
                 for k in manifest.kernels for p in k.params if isinstance(p, ScratchParam)})


def named_arguments(manifest, tensors: tuple, args: dict) -> dict:
    """A launch's arguments by name: `tensors` are the inputs in the manifest's order."""
    inputs = manifest.inputs
    if len(tensors) > len(inputs):
        raise AttncRuntimeError(f"{manifest.variant} takes {len(inputs)} positional "
                                f"inputs ({', '.join(t.name for t in inputs)}), got {len(tensors)}")
    named = dict(args)
    for spec, tensor in zip(inputs, tensors):
        if spec.name in named:
            raise AttncRuntimeError(f"input {spec.name!r} given both by position and by name")
        named[spec.name] = tensor
    return named


def _split(manifest: Manifest, args: Mapping[str, Any]) -> tuple[dict, dict]:
    tensor_names = {t.name for t in manifest.tensors}
    tensors, dims = {}, {}
    for name, value in args.items():
        if name in tensor_names:
            if value is not None:
                tensors[name] = value
        elif name in manifest.dims:
            dims[name] = _dim_arg(name, value)
        else:
            raise AttncRuntimeError(f"unknown argument {name!r}; {manifest.variant} takes "
                                    f"{_signature(manifest)}")
    for spec in manifest.inputs:
        if spec.name not in tensors:
            raise AttncRuntimeError(f"missing input {spec.name!r}: {_type_text(spec)}")
    return tensors, dims


def _signature(manifest: Manifest) -> str:
    parts = [f"inputs {', '.join(t.name for t in manifest.inputs)}",
             f"outputs (optional) {', '.join(t.name for t in manifest.outputs)}"]
    if manifest.dims:
        parts.append(f"dims (ints) {', '.join(manifest.dims)}")
    return "; ".join(parts)


def _dim_arg(name: str, value: Any) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise AttncRuntimeError(f"dim {name} must be an int, got {value!r}") from None
    if number < 0:
        raise AttncRuntimeError(f"dim {name} must not be negative, got {number}")
    return number


def _type_text(spec: TensorSpec) -> str:
    return f"{spec.dtype}[{', '.join(map(str, spec.shape))}]"


def _view(spec: TensorSpec, obj: Any) -> TensorView:
    v = view(obj, spec.name)
    if v.location != "cuda":
        raise AttncRuntimeError(f"{spec.name}: is on {v.location}, expected a CUDA device")
    if v.dtype != spec.dtype:
        raise AttncRuntimeError(f"{spec.name}: expected dtype {spec.dtype}, got {v.dtype_text}")
    if len(v.shape) != spec.rank:
        raise AttncRuntimeError(f"{spec.name}: expected rank {spec.rank} ({_type_text(spec)}), "
                                f"got shape {_shape_text(v.shape)}")
    if spec.role in OUTPUT_ROLES and v.readonly:
        raise AttncRuntimeError(f"{spec.name}: is read-only; outputs must be writable")
    return v


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _common_device(views: Mapping[str, TensorView], platform: Platform) -> int:
    devices: dict[str, int] = {}
    for name, v in views.items():
        if v.device is not None:
            devices[name] = v.device
        elif v.numel:
            devices[name] = platform.pointer_device(v.ptr)
    distinct = sorted(set(devices.values()))
    if len(distinct) > 1:
        where = ", ".join(f"{name} on cuda:{d}" for name, d in devices.items())
        raise AttncRuntimeError(f"tensors are on different devices: {where}")
    return distinct[0] if distinct else 0


def _bind_dims(manifest: Manifest, views: Mapping[str, TensorView], dim_args: Mapping[str, int]) -> dict:
    dims = dict(dim_args)
    source = {name: f"argument {name}={value}" for name, value in dim_args.items()}
    for spec in manifest.tensors:
        v = views.get(spec.name)
        if v is None:
            continue
        for axis, (entry, size) in enumerate(zip(spec.shape, v.shape)):
            here = f"{spec.name}.shape[{axis}] = {size}"
            if isinstance(entry, int):
                if size != entry:
                    raise AttncRuntimeError(f"{spec.name}: shape {_shape_text(v.shape)} does not "
                                            f"match {_type_text(spec)}: axis {axis} must be {entry}")
            elif entry not in dims:
                dims[entry], source[entry] = size, here
            elif dims[entry] != size:
                raise AttncRuntimeError(f"dim {entry} disagrees: {source[entry]} but {here}")
    missing = [d for d in manifest.dims if d not in dims and d in manifest.read_dims]
    if missing:
        raise AttncRuntimeError(f"dim {missing[0]} is not given by any tensor shape; pass it as "
                                f"an int, e.g. kernel(..., {missing[0]}=...)")
    return dims


# The largest dim that sizes q, k or v: the kernels plan their integer arithmetic for
# indices and sizes up to it (Note [Exact integers] in attnc/backend/exact_ints.py).
MAX_SIZE_DIM = 2 ** 30


def _check_sizes(manifest: Manifest, dims: Mapping[str, int]) -> None:
    for spec in manifest.tensors:
        if spec.role not in ("q", "k", "v"):
            continue
        for entry in spec.shape:
            # A fixed size above 2^30 is refused by the frontend; a manifest may still say one.
            if _size(entry, dims) > MAX_SIZE_DIM:
                what = f"dim {entry} = {dims[entry]}" if isinstance(entry, str) else f"the fixed size {entry}"
                raise AttncRuntimeError(f"{what} (in {spec.name}'s shape) is above 2^30, the largest "
                                        "size the kernels are compiled for")


def _check_constraints(manifest: Manifest, dims: Mapping[str, int]) -> None:
    for c in manifest.constraints:
        a, b = _size(c.a, dims), _size(c.b, dims)
        # 0 is a multiple of everything, of 0 too: H = HKV = 0 is an empty launch, as B = 0 is.
        if c.kind == "divisible" and (a % b if b else a):
            raise AttncRuntimeError(f"{_named(c.a, a)} must be a multiple of {_named(c.b, b)}")
        if c.kind == "equal" and a != b:
            raise AttncRuntimeError(f"{_named(c.a, a)} must equal {_named(c.b, b)}")


def _size(entry, dims: Mapping[str, int]) -> int:
    return entry if isinstance(entry, int) else dims[entry]


def _named(entry, value: int) -> str:
    return str(value) if isinstance(entry, int) else f"{entry} = {value}"


def _check_layout(spec: TensorSpec, v: TensorView, rows: int) -> None:
    """Strides and alignment the kernel's loads and stores rely on (empty tensors are never
    read, but a param needs an element per axis: its reads clamp into each, wherever there
    are query rows to compute)."""
    if spec.role == "param" and 0 in v.shape and rows:
        # The hooks' reads clamp each index into its axis (the reference refuses it too).
        raise AttncRuntimeError(f"{spec.name}: a param tensor needs at least one element per axis "
                                f"(its reads clamp into each axis), got shape {_shape_text(v.shape)}")
    if v.numel == 0:
        return
    if v.shape and v.shape[-1] > 1 and v.strides[-1] != 1:
        raise AttncRuntimeError(f"{spec.name}: the last dim must be contiguous (stride 1), got "
                                f"strides {_shape_text(v.strides)}; pass a .contiguous() copy")
    for axis, (size, stride) in enumerate(zip(v.shape, v.strides)):
        if size > 1 and stride < 0:
            raise AttncRuntimeError(f"{spec.name}: axis {axis} has a negative stride ({stride})")
        if size > 1 and stride == 0 and spec.role in OUTPUT_ROLES:
            raise AttncRuntimeError(f"{spec.name}: axis {axis} has stride 0 (a broadcast view); "
                                    "an output's elements must not overlap")
    if spec.role in OUTPUT_ROLES and not _nested(v.shape, v.strides):
        raise AttncRuntimeError(f"{spec.name}: strides {_shape_text(v.strides)} for shape "
                                f"{_shape_text(v.shape)} make elements overlap (or interleave axes); "
                                "an output's elements must not overlap: pass a contiguous tensor")
    # The kernels index a param tensor row-major from its shape alone.
    dense = contiguous_strides(v.shape)
    if spec.role == "param" and any(size > 1 and stride != want
                                    for size, stride, want in zip(v.shape, v.strides, dense)):
        raise AttncRuntimeError(f"{spec.name}: a param tensor must be contiguous (strides "
                                f"{_shape_text(dense)}), got strides {_shape_text(v.strides)}; "
                                "pass a .contiguous() copy")
    if v.ptr == 0:
        raise AttncRuntimeError(f"{spec.name}: data pointer is null for {v.numel} elements")
    if v.ptr % spec.align:
        raise AttncRuntimeError(f"{spec.name}: data pointer {v.ptr:#x} is not {spec.align}-byte aligned")
    for axis, (size, stride) in enumerate(zip(v.shape[:-1], v.strides[:-1])):
        if size > 1 and (stride * spec.itemsize) % spec.align:
            raise AttncRuntimeError(
                f"{spec.name}: stride of axis {axis} is {stride} elements "
                f"({stride * spec.itemsize} bytes), not a multiple of {spec.align} bytes")


def _nested(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether each axis steps over the whole extent of the axes with smaller strides: a
    layout whose elements cannot overlap (every permutation of a dense layout, and their
    padded forms)."""
    extent = 1
    for stride, size in sorted((st, n) for n, st in zip(shape, strides) if n > 1):
        if stride < extent:
            return False
        extent = stride * size
    return True


def _byte_range(spec: TensorSpec, v: TensorView) -> tuple[int, int]:
    """[first, last + 1) bytes the view's elements occupy (its strides are not negative)."""
    last = sum((n - 1) * st for n, st in zip(v.shape, v.strides))
    return v.ptr, v.ptr + (last + 1) * spec.itemsize


def _check_outputs_apart(manifest: Manifest, views: Mapping[str, TensorView]) -> None:
    """An output given by the caller shares no memory with another tensor of the launch:
    the kernels read their inputs while other CTAs store outputs (a silent wrong answer)."""
    spans = {name: _byte_range(manifest.tensor(name), v) for name, v in views.items() if v.numel}
    for name, (lo, hi) in spans.items():
        if manifest.tensor(name).role not in OUTPUT_ROLES:
            continue
        for other, (olo, ohi) in spans.items():
            if other != name and lo < ohi and olo < hi:
                raise AttncRuntimeError(f"{name}: its memory overlaps {other}'s; an output must not "
                                        "share memory with another tensor of the launch")


def _check_param_ranges(manifest: Manifest, dims: Mapping[str, int], views: Mapping[str, TensorView],
                        allocate) -> None:
    """Dims and strides passed as i32 must fit in 32 bits (a silent wrap would corrupt memory)."""
    strides = {name: v.strides for name, v in views.items()}
    strides.update({spec.name: contiguous_strides(shape) for spec, shape in allocate})
    for kernel in manifest.kernels:
        for p in kernel.params:
            if isinstance(p, DimParam):
                value, what = dims[p.name], f"dim {p.name}"
            elif isinstance(p, StrideParam):
                value, what = strides[p.tensor][p.axis], f"{p.tensor}'s stride of axis {p.axis}"
            else:
                continue
            limit = 2 ** (INT_TYPES[p.type] - 1) - 1
            if abs(value) > limit:
                raise AttncRuntimeError(f"{what} = {value} does not fit the {p.type} kernel "
                                        f"{kernel.name} takes it as")


def _kernel_grids(manifest: Manifest, dims: Mapping[str, int], info: DeviceInfo, rows: int) -> dict:
    """Each kernel's grid and symbol (its small grid's where that applies), the grid
    checked against the hardware limits, after the kernel's shared memory. With no query
    rows (`rows` = B * H * M = 0) no kernel runs: the mask kernels' grids need not be
    empty (they may not depend on H or M), but nothing would read their map, and they
    could read params that are empty then."""
    grids, symbols = [], []
    for kernel in manifest.kernels:
        if kernel.dynamic_smem_bytes > info.max_dynamic_smem_bytes:
            raise AttncRuntimeError(
                f"kernel {kernel.name} needs {kernel.dynamic_smem_bytes} bytes of shared memory per "
                f"block; device {info.ordinal} ({info.name}) allows {info.max_dynamic_smem_bytes}")
        rules, symbol = kernel.grid, kernel.symbol
        grid = tuple(shapes.product(g, dims, info.multiprocessors) for g in rules)
        small = kernel.small_grid
        if small is not None and 0 < math.prod(grid) <= small.up_to_ctas_per_sm * info.multiprocessors:
            rules, symbol = small.grid, small.symbol
            grid = tuple(shapes.product(g, dims, info.multiprocessors) for g in rules)
        for axis, (size, limit, cluster) in enumerate(zip(grid, MAX_GRID, kernel.cluster)):
            rule = shapes.describe(rules[axis])
            if size > limit:
                raise AttncRuntimeError(f"kernel {kernel.name}: grid.{'xyz'[axis]} = {rule} = {size} "
                                        f"exceeds the limit {limit}")
            if size % cluster:
                raise AttncRuntimeError(f"kernel {kernel.name}: grid.{'xyz'[axis]} = {rule} = {size} "
                                        f"is not a multiple of the cluster size {cluster}")
        grids.append(grid if rows else (0, *grid[1:]))
        symbols.append(symbol)
    return {"grids": tuple(grids), "symbols": tuple(symbols)}
