"""The CUDA driver, through cuda-python: the only module that talks to the GPU.

Everything here runs in the primary context of the tensors' device, the one torch
and cupy use, so pointers they hand out are valid in it. Loaded modules are cached
per (context, code digest): a bundle loaded twice, or two `Kernel`s of one
bundle, load its code once per device.
"""
from __future__ import annotations

import functools
import struct
import threading

from cuda.bindings import driver as cu

from attnc_runtime.arch import DeviceInfo
from attnc_runtime.errors import AttncRuntimeError

DEFAULT_MAX_DYNAMIC_SMEM = 48 * 1024     # above this a kernel must opt in (cuFuncSetAttribute)

_lock = threading.Lock()
_functions: dict[tuple[int, str, str], cu.CUfunction] = {}
_modules: dict[tuple[int, str], cu.CUmodule] = {}


def check(result, what: str):
    """Unwrap a cuda-python `(CUresult, *values)` tuple, raising on an error."""
    err, *values = result
    if err != cu.CUresult.CUDA_SUCCESS:
        _, text = cu.cuGetErrorString(err)
        detail = text.decode() if isinstance(text, bytes) else str(text)
        raise AttncRuntimeError(f"{what} failed: {getattr(err, 'name', err)}: {detail}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@functools.lru_cache(maxsize=None)
def init() -> None:
    """cuInit once; a machine with no driver gets an `AttncRuntimeError`, not a loader trace."""
    try:
        result = cu.cuInit(0)
    except Exception as e:       # cuda-python raises when libcuda.so cannot be found
        raise AttncRuntimeError(f"no usable NVIDIA driver: {e}") from None
    check(result, "cuInit")


@functools.lru_cache(maxsize=None)
def device_info(ordinal: int) -> DeviceInfo:
    init()
    count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
    if not 0 <= ordinal < count:
        raise AttncRuntimeError(f"CUDA device {ordinal} does not exist ({count} visible)")
    dev = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
    attr = cu.CUdevice_attribute

    def get(a):
        return check(cu.cuDeviceGetAttribute(a, dev), f"cuDeviceGetAttribute({a.name})")

    name = check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
    return DeviceInfo(
        ordinal=ordinal,
        name=name.split(b"\0", 1)[0].decode(errors="replace"),
        capability=(get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                    get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
        max_dynamic_smem_bytes=get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        multiprocessors=get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT))


def pointer_device(ptr: int) -> int:
    """The ordinal of the device that holds `ptr` (for tensors that do not say)."""
    init()
    attribute = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return int(check(cu.cuPointerGetAttribute(attribute, ptr), "cuPointerGetAttribute"))


class DriverPlatform:
    """The real GPU behind the argument checks (tests substitute a fake one)."""

    device_info = staticmethod(device_info)
    pointer_device = staticmethod(pointer_device)


@functools.lru_cache(maxsize=None)
def _primary_context(ordinal: int) -> cu.CUcontext:
    init()
    dev = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
    # Retained for the life of the process, as torch and cupy do.
    return check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")


class primary_context:
    """`with primary_context(ordinal) as ctx:` makes the device's primary context current."""

    def __init__(self, ordinal: int):
        self.ctx = _primary_context(ordinal)

    def __enter__(self) -> cu.CUcontext:
        check(cu.cuCtxPushCurrent(self.ctx), "cuCtxPushCurrent")
        return self.ctx

    def __exit__(self, *exc) -> None:
        check(cu.cuCtxPopCurrent(), "cuCtxPopCurrent")


def get_function(ctx: cu.CUcontext, image: bytes, digest: str, symbol: str,
                 dynamic_smem_bytes: int) -> cu.CUfunction:
    """The kernel `symbol` of code object `image` in the current context `ctx`, loaded once."""
    key = (int(ctx), digest, symbol)
    with _lock:
        if key in _functions:
            return _functions[key]
        module = _modules.get(key[:2])
        if module is None:
            module = check(cu.cuModuleLoadData(image), "cuModuleLoadData")
            _modules[key[:2]] = module
        func = _lookup(module, symbol)
        if dynamic_smem_bytes > DEFAULT_MAX_DYNAMIC_SMEM:
            check(cu.cuFuncSetAttribute(
                func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dynamic_smem_bytes), f"cuFuncSetAttribute({symbol}, MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        if dynamic_smem_bytes:
            # Note [Shared memory carveout]: without a preference the driver may run a kernel
            # with the L1/shared split the SM already has, if one CTA fits it, and so with
            # fewer CTAs per SM than the kernel's shared memory allows. A kernel that sizes
            # its shared memory asks for all of it. The price: the smallest L1, also where
            # registers or threads bound the CTAs per SM first, and param reads (bias
            # tables, document ids) go through L1; neither side is measured alone yet.
            check(cu.cuFuncSetAttribute(
                func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                int(cu.CUshared_carveout.CU_SHAREDMEM_CARVEOUT_MAX_SHARED)),
                f"cuFuncSetAttribute({symbol}, PREFERRED_SHARED_MEMORY_CARVEOUT)")
        _functions[key] = func
        return func


def _lookup(module: cu.CUmodule, symbol: str) -> cu.CUfunction:
    err, func = cu.cuModuleGetFunction(module, symbol.encode())
    if err == cu.CUresult.CUDA_ERROR_NOT_FOUND:
        raise AttncRuntimeError(f"the bundle's code object has no kernel named {symbol!r}")
    check((err,), f"cuModuleGetFunction({symbol})")
    return func


def launch(func: cu.CUfunction, grid: tuple[int, int, int], block: tuple[int, int, int],
           cluster: tuple[int, int, int], smem: int, stream: int, params_address: int) -> None:
    if cluster == (1, 1, 1):
        check(cu.cuLaunchKernel(func, *grid, *block, smem, stream, params_address, 0), "cuLaunchKernel")
        return
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = smem
    config.hStream = stream
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
    config.attrs = [attr]
    config.numAttrs = 1
    check(cu.cuLaunchKernelEx(config, func, params_address, 0), "cuLaunchKernelEx")


# -- memory the runtime owns (DeviceArray, scratch without a tensor library) -------

def mem_alloc(nbytes: int) -> int:
    return int(check(cu.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc"))


def mem_free(ptr: int) -> None:
    check(cu.cuMemFree(ptr), "cuMemFree")


def wait_for(producer: int, consumer: int) -> None:
    """Make `consumer`'s later work wait for everything queued on `producer` so far (an
    event recorded there and waited on; the host does not block)."""
    event = check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    try:
        check(cu.cuEventRecord(event, producer), "cuEventRecord")
        check(cu.cuStreamWaitEvent(consumer, event, 0), "cuStreamWaitEvent")
    finally:
        check(cu.cuEventDestroy(event), "cuEventDestroy")    # released once it completes


def memset_async(ptr: int, nbytes: int, byte: int, stream: int) -> None:
    check(cu.cuMemsetD8Async(ptr, byte, nbytes, stream), "cuMemsetD8Async")


def copy_to_device(ptr: int, host_address: int, nbytes: int) -> None:
    check(cu.cuMemcpyHtoD(ptr, host_address, nbytes), "cuMemcpyHtoD")


def copy_to_host(host_address: int, ptr: int, nbytes: int) -> None:
    check(cu.cuMemcpyDtoH(host_address, ptr, nbytes), "cuMemcpyDtoH")


def synchronize() -> None:
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize")


_TMA_TYPES = {"bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
              "f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "i32": "CU_TENSOR_MAP_DATA_TYPE_INT32"}
_TMA_SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B",
                 64: "CU_TENSOR_MAP_SWIZZLE_64B", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}


def encode_tensor_map(p, v) -> bytes:
    """cuTensorMapEncodeTiled of a `tensor_map` parameter over the tensor's view (Note
    [Tensor maps] in params.py): 128 bytes for the kernel's parameter."""
    from attnc_runtime.params import tensor_map_geometry

    dims, strides, box = tensor_map_geometry(p, v)
    rank = len(dims)
    device = v.device if v.device is not None else pointer_device(v.ptr)
    with primary_context(device):       # the driver encodes in a current context
        tmap = _encode(v, p, rank, dims, strides, box)
    return struct.pack("<16Q", *(int(x) for x in tmap.opaque))


def _encode(v, p, rank: int, dims: list, strides: list, box: list):
    return check(cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, _TMA_TYPES[v.dtype]), rank, v.ptr,
        [cu.cuuint64_t(d) for d in dims], [cu.cuuint64_t(s) for s in strides],
        [cu.cuuint32_t(b) for b in box], [cu.cuuint32_t(1)] * rank,
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, _TMA_SWIZZLES[p.swizzle]),
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
