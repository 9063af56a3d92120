"""A bundle launched in the emulator on numpy arrays: attnc_runtime's `device="sim"`.

    kernel = attnc_runtime.load(bundle, device="sim")       # -> SimKernel
    out = kernel(q=q, k=k, v=v)                             # numpy in, numpy out

The launch goes through attnc_runtime's own argument checks, grid rules and parameter
values (`plan_launch`, `param_values`): only the memory is the emulator's. bf16 arrays
are ml_dtypes.bfloat16 (or anything whose dtype is named 'bfloat16'). The emulated
device (`SimDevice`) has an H200's 132 SMs and 227 KiB of shared memory a CTA, whatever
the bundle's target (give another to emulate an A100's 108): its SM count picks a
kernel's small grid as a GPU's would.
"""
from __future__ import annotations

import ctypes
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnc_runtime.arch import TARGETS, DeviceInfo
from attnc_runtime.bundle import Bundle, read_bundle
from attnc_runtime.checks import named_arguments, plan_launch
from attnc_runtime.dtypes import DTYPES
from attnc_runtime.errors import AttncRuntimeError
from attnc_runtime.params import param_values, tensor_map_geometry
from attnc_runtime.tensors import TensorView

from attnc_sim import tma
from attnc_sim.engine import Launch
from attnc_sim.program import decode
from attnc_sim.ptx import parse_module
from attnc_sim.scheduler import Scheduler
from attnc_sim.state import GlobalMemory


@dataclass(frozen=True)
class SimDevice:
    """What the emulated GPU tells the argument checks."""
    multiprocessors: int = 132          # an H200's
    max_dynamic_smem_bytes: int = 227 * 1024

    def info(self, target: str) -> DeviceInfo:
        return DeviceInfo(ordinal=0, name=f"attnc_sim ({target})", capability=TARGETS[target].capability,
                          max_dynamic_smem_bytes=self.max_dynamic_smem_bytes,
                          multiprocessors=self.multiprocessors)


class _Platform:
    def __init__(self, info: DeviceInfo):
        self.info = info

    def device_info(self, ordinal: int) -> DeviceInfo:
        return self.info

    def pointer_device(self, ptr: int) -> int:
        return 0


class _Memory:
    """The caller's arrays as the emulator's global memory: the host bytes the arrays' owners
    (the ndarrays that own their memory) span, each run of overlapping owners as one
    allocation that copies all of those bytes, each array at its own offset in it and with
    its own strides. So views of one buffer overlap in the emulator as they do on a GPU --
    views of one ndarray, or np.frombuffer arrays of one buffer -- and an output that is
    also an input is refused; a read-only or broadcast output is refused before the launch,
    a strided view is read through its strides, and an element's alignment is its offset in
    its allocation's."""

    def __init__(self, memory: GlobalMemory, arrays=()):
        self.memory = memory
        self._spans: list[tuple[int, int, int, list]] = []     # (low, high, address, owners kept alive)
        owners = [_owner(a) for a in arrays if isinstance(a, np.ndarray)]
        spans = sorted(((*_byte_bounds(o), o) for o in owners), key=lambda x: x[:2])
        runs: list[list] = []
        for low, high, owner in spans:
            if runs and low < runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], high)
                runs[-1][2].append(owner)
            else:
                runs.append([low, high, [owner]])
        for low, high, owners in runs:
            self._place(low, high, owners)

    def _place(self, low: int, high: int, owners: list) -> tuple:
        # the host address's offset from 16 bytes kept: an array made over a bytes-like
        # buffer (np.frombuffer) at an odd offset is misaligned here as on a GPU
        pad = low % 16
        address = self.memory.alloc(high - low + pad) + pad
        self.memory.put(address, _host_bytes(low, high - low))
        self._spans.append((low, high, address, owners))
        return self._spans[-1]

    def array(self, value, dtype: str, name: str) -> "_SimArray":
        if isinstance(value, np.ma.MaskedArray):
            raise AttncRuntimeError(f"{name}: masked arrays are not supported")
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
        if not array.dtype.isnative:
            raise AttncRuntimeError(f"{name}: {array.dtype.str} is not in this machine's byte order; "
                                    f"pass array.astype(array.dtype.newbyteorder('='))")
        owner = _owner(array)
        low, high = _byte_bounds(owner)
        span = next((x for x in self._spans if x[0] <= low and high <= x[1]), None) or \
            self._place(low, high, [owner])
        return _SimArray(array, dtype, name, span[2] + array.ctypes.data - span[0])

    def read(self, a: "_SimArray") -> np.ndarray:
        """A's elements as the emulator's memory holds them now (a new array)."""
        if a.array.size == 0:
            return np.empty(a.array.shape, a.array.dtype)
        low, high = _byte_bounds(a.array)
        first = a.array.ctypes.data - low
        raw = self.memory.get(a.ptr - first, high - low)
        return np.ndarray(a.array.shape, a.array.dtype, buffer=raw, offset=first, strides=a.array.strides).copy()


def _owner(array: np.ndarray) -> np.ndarray:
    """The ndarray that owns `array`'s memory (or the last one before a non-array buffer)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _byte_bounds(array: np.ndarray) -> tuple[int, int]:
    """The addresses of the first byte of `array` and one past its last."""
    low = high = array.ctypes.data
    if array.size:
        for n, stride in zip(array.shape, array.strides):
            if stride < 0:
                low += (n - 1) * stride
            else:
                high += (n - 1) * stride
        high += array.dtype.itemsize
    return low, high


def _host_bytes(address: int, nbytes: int) -> np.ndarray:
    if nbytes == 0:
        return np.zeros(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address)).copy()


class _SimArray:
    """An array of the caller's in the emulator's memory (`_Memory.array`)."""

    def __init__(self, array: np.ndarray, dtype: str, name: str, ptr: int):
        self.array, self.dtype, self.ptr = array, dtype, ptr
        itemsize = array.dtype.itemsize
        if any(s % itemsize for s in array.strides):
            raise AttncRuntimeError(f"{name}: strides {array.strides} (bytes) are not multiples of the element "
                                    f"size {itemsize}")
        self.strides = tuple(s // itemsize for s in array.strides)

    def __attnc_view__(self) -> TensorView:
        return TensorView(ptr=self.ptr, shape=tuple(self.array.shape), strides=self.strides, dtype=self.dtype,
                          dtype_text=str(self.array.dtype), device=0, location="cuda", library="sim",
                          readonly=not self.array.flags.writeable)


def _dtype_name(array) -> str | None:
    name = np.asarray(array).dtype.name
    return {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "int32": "i32"}.get(name)


def numpy_dtype(name: str):
    if name == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(DTYPES[name].library_name)


# Outputs the launch allocates are filled with this byte before a launch of chosen CTAs
# (`ctas=`): an element still holding it afterwards (a NaN of every float dtype) was written
# by none of them (`SimKernel.last_written`).
UNWRITTEN = 0xFF


class SimKernel:
    """A bundle in the emulator. `seed` drives the warp order, the slices and asynchronous
    completion (`quantum`: the mean slice, Scheduler); `ctas`: CTA ids of the attention
    kernel to run (None: all; the mask kernels always run whole); `raise_reports`: stop at
    the first race or protocol report (else collect them in `last_reports`). After a call,
    `last_written[name]` says which elements of each allocated output a kernel wrote (every
    one when all CTAs ran)."""

    def __init__(self, bundle: Bundle, device: SimDevice | None = None, seed: int = 0,
                 raise_reports: bool = True, ptx: str | None = None, quantum: int = 64,
                 record: bool = False, early: float = 0.25):
        self.bundle, self.device, self.seed = bundle, device or SimDevice(), seed
        self.quantum, self.record, self.early = quantum, record, early
        self.last_written: dict[str, np.ndarray] = {}
        self.last_scheduler: Scheduler | None = None
        self.raise_reports = raise_reports
        self.last_reports: list = []
        self.last_launches: list[Launch] = []
        self._programs: dict = {}
        code = bundle.manifest.code
        if "ptx" not in code and ptx is None:
            raise AttncRuntimeError(f"{bundle.manifest.variant}: the bundle has no PTX to emulate")
        # `ptx`: run this text instead of the bundle's (an edited kernel: a planted bug)
        self._module = None if ptx is None else parse_module(ptx, f"{bundle.manifest.variant}.ptx")

    @property
    def manifest(self):
        return self.bundle.manifest

    def program(self, symbol: str):
        if self._module is None:
            text = self.bundle.images["ptx"]
            text = text.decode() if isinstance(text, (bytes, bytearray)) else text
            self._module = parse_module(text.rstrip("\0"), f"{self.manifest.variant}.ptx")
        if symbol not in self._programs:
            if symbol not in self._module.kernels:
                raise AttncRuntimeError(f"kernel {symbol} is not in the bundle's PTX")
            self._programs[symbol] = decode(self._module.kernels[symbol])
        return self._programs[symbol]

    def __call__(self, /, *tensors, ctas=None, mask_from=None, **args) -> dict[str, np.ndarray]:
        manifest = self.manifest
        if mask_from is not None:
            raise AttncRuntimeError("mask_from: the emulator builds every launch's mask data (block map, tile "
                                    "table) itself; a reused mask is a GPU launch's (Kernel.bind)")
        named = named_arguments(manifest, tensors, args)
        memory = GlobalMemory()
        tensor_names = {t.name for t in manifest.tensors}
        arrays = _Memory(memory, [v for name, v in named.items() if name in tensor_names])
        sim_args = {}
        for name, value in named.items():
            if name in tensor_names and value is not None:
                dtype = _dtype_name(value)
                if dtype is None:
                    raise AttncRuntimeError(f"{name}: expected a numpy array of f16, bf16, f32 or i32, "
                                            f"got {np.asarray(value).dtype}")
                sim_args[name] = arrays.array(value, dtype, name)
            else:
                sim_args[name] = value
        plan = plan_launch(manifest, sim_args, _Platform(self.device.info(manifest.target)))
        attention = [i for i in range(len(manifest.kernels)) if i not in manifest.mask_kernels]
        if ctas is not None:
            if not isinstance(ctas, Iterable) or isinstance(ctas, (str, bytes)):
                raise AttncRuntimeError(f"ctas: expected CTA ids (x, y, z) of the attention kernel, got {ctas!r}")
            ctas = [_cta(c, plan.grids[attention[-1]]) for c in ctas]
        outputs = {}
        for spec, shape in plan.allocate:
            arr = np.zeros(shape, numpy_dtype(spec.dtype))
            if ctas is not None:
                arr.view(np.uint8)[...] = UNWRITTEN
            outputs[spec.name] = sim_args[spec.name] = arrays.array(arr, spec.dtype, spec.name)
        views = {name: obj.__attnc_view__() for name, obj in sim_args.items() if isinstance(obj, _SimArray)}
        scratch = {name: memory.alloc(nbytes) for name, nbytes in plan.scratch.items()}
        scheduler = self.last_scheduler = Scheduler(self.seed, early=self.early, quantum=self.quantum,
                                                          record=self.record)
        self.last_reports, self.last_launches, self.last_written = [], [], {}
        for i, (k, grid, symbol) in enumerate(zip(manifest.kernels, plan.grids, plan.symbols)):
            if 0 in grid:
                continue
            program = self.program(symbol)
            params = pack_params(program, param_values(k, plan.dims, views, scratch, encode_tensor_map))
            launch = Launch(program, grid, k.block, k.dynamic_smem_bytes, memory, params, scheduler,
                            raise_reports=self.raise_reports)
            launch.run(None if i in manifest.mask_kernels or ctas is None else ctas)
            self.last_reports += launch.reports
            self.last_launches.append(launch)
        result = {}
        for spec in manifest.outputs:
            obj = sim_args[spec.name]
            data = arrays.read(obj)
            if spec.name in outputs:
                result[spec.name] = data
                raw = data.view(np.uint8).reshape(data.shape + (data.dtype.itemsize,))
                self.last_written[spec.name] = (raw != UNWRITTEN).any(axis=-1) if ctas is not None \
                    else np.ones(data.shape, bool)
            else:           # the caller's array, written as a GPU launch writes it
                obj.array[...] = data
                result[spec.name] = obj.array
        return result


def _cta(ctaid, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    """`ctaid` (x, y, z) checked against the attention kernel's grid."""
    try:
        x, y, z = (operator.index(c) for c in ctaid)
    except (TypeError, ValueError):
        raise AttncRuntimeError(f"ctas: {ctaid!r} is not a CTA id (x, y, z) of ints") from None
    if not all(0 <= c < g for c, g in zip((x, y, z), grid)):
        raise AttncRuntimeError(f"ctas: CTA {(x, y, z)} is outside the attention kernel's grid {tuple(grid)}")
    return x, y, z


_TMA_TYPES = {"bf16": tma.DataType.BFLOAT16, "f16": tma.DataType.FLOAT16, "f32": tma.DataType.FLOAT32,
              "i32": tma.DataType.INT32}
_TMA_SWIZZLES = {0: tma.TmaSwizzle.NONE, 32: tma.TmaSwizzle.B32, 64: tma.TmaSwizzle.B64, 128: tma.TmaSwizzle.B128}


def encode_tensor_map(p, v: TensorView) -> bytes:
    """The emulator's tensor map of a `tensor_map` parameter (Note [Tensor maps] in
    attnc_runtime/params.py): its own 128-byte layout, which its TMA instructions read."""
    dims, strides, box = tensor_map_geometry(p, v)
    return tma.TensorMap(_TMA_TYPES[v.dtype], v.ptr, tuple(dims), tuple(strides), tuple(box),
                         swizzle=_TMA_SWIZZLES[p.swizzle]).pack()


def pack_params(program, values: list) -> bytes:
    """The kernel's parameter buffer: each ctypes value at its PTX parameter's offset."""
    params = program.kernel.params
    if len(values) != len(params):
        raise AttncRuntimeError(f"{program.kernel.name}: the manifest gives {len(values)} parameters, "
                                f"the PTX declares {len(params)}")
    buf = bytearray(max(program.param_size, 8))
    for p, v in zip(params, values):
        raw = bytes(v)
        if len(raw) != p.size:
            raise AttncRuntimeError(f"{program.kernel.name}: parameter {p.name} is {p.size} bytes in the PTX, "
                                    f"{len(raw)} in the manifest's ABI")
        off = program.param_offsets[p.name]
        buf[off:off + len(raw)] = raw
    return bytes(buf)


def load(path: str | Path, **options) -> SimKernel:
    return SimKernel(read_bundle(path), **options)
