"""`Kernel`: a loaded bundle you call on tensors.

    kernel = attnc_runtime.load("bundles/gemma2.sm_80")
    out = kernel(q=q, k=k, v=v)             # {'o': tensor, 'lse': tensor}
    out = kernel(q, k, v, P=128)            # inputs by position, scalar dims by name

A call checks every argument (checks.py) before touching the GPU, allocates the
outputs not given, and launches the bundle's kernels in order on the current
torch/cupy stream. `bind` splits the two halves so a benchmark launches the same
checked arguments again without re-checking them.

Note [Reused masks]: a mask that reads params (documents) is classified on the GPU by
the bundle's mask kernels (the block map: kernels of role "mask", `Manifest.mask_kernels`)
before the attention kernel, into scratch, at every launch. In a model the mask's params and dims are the same
for many launches -- every layer of a forward pass reads the same document ids -- so,
as FlexAttention's BlockMask is built once and passed to every layer:

    first = kernel.bind(q0, k0, v0, doc=ids)
    first.launch()                                      # builds the map, then attends
    kernel(q1, k1, v1, doc=ids, mask_from=first)        # attends with first's map
    first.launch(reuse_mask=True)                       # again, without rebuilding it

Both skip the mask kernels. They are the caller's
promise that the params the mask reads still hold the values they held when the map was
built: the runtime cannot read device memory to check, as FlexAttention cannot either.
It does check what it can: that a launch built the map, on the stream the reading launch
is on (the same stream orders them; on another, nothing would); and that a `mask_from`
binding is of the same bundle, on the same device, with the same dims (those anything
reads: Manifest.read_dims), reading the same
param tensors (the same addresses: the dims fix their shapes, and params are contiguous). The map's buffers and the stream that built it
(`_KeptMask`) are shared by the bindings that read them, so a reader keeps the buffers
alive, not the first binding's q, k, v and outputs. A bundle without mask kernels has
nothing to reuse, and both are no-ops.

Note [Filled scratch]: the runtime zeroes a scratch buffer before every launch unless a
mask kernel fills it (the manifest's `"fills"`). A kernel that fills a scratch writes
every byte of it that a later kernel reads: the block map writes each key block of each
query tile that the attention kernel may scan, the tile table each of its entries
(the compiler's promise; Note [Block map ABI] in attnc/backend/blockmap.py). So a
documents launch is its mask kernels and the attention kernel, with no memset between
them. The promise is checked on the GPU by launching with ATTNC_POISON_SCRATCH=1: the
filled scratch is then set to 0xFF bytes before the mask kernels run, so a byte read but
never written is a wrong tile class or table entry, and the output differs from the
reference (tests/gpu/test_gpu_filled_scratch.py, which also checks that a map left
unbuilt under the poison does change the output).

Note [Producer streams]: torch and cupy tensors are used on the stream the call runs
on, the library's current one by default, as the library's own operations are: the
caller orders that stream after whatever made them. An array that gives a stream in its
`__cuda_array_interface__` (version 3: numba, and cupy, which gives its current stream)
says instead that its producer may still be writing it there. So each launch first
makes its stream wait for every such stream of the binding's tensors (inputs, params and
given outputs, which the producer may still be reading): an event recorded on it and
waited on, which blocks no host thread and is nothing where the streams are the same.
It waits for all the producer's work queued by then, not only the tensor's. DLPack's
`__dlpack__(stream=...)` could ask the producer to order its work before the launch's
stream, but the capsule is read at the bind, before that stream is known. So it is asked
with no stream, which the protocol defines as the legacy default stream: the producer
makes the array ready there, and each launch waits for the legacy default stream as for
any producer's. That matters where the launch's stream is non-blocking (torch's side
streams, cupy's non-blocking ones), which nothing else orders after the legacy stream.

Note [Memory used on another stream]: the outputs and scratch the runtime allocates come
from the inputs' library's caching allocator, on the stream current at the bind. Launched
on another stream and then freed (the binding dropped), that memory would go back to the
first stream's pool and could be handed to a new tensor there while the launch still
writes it. So the first launch of a binding on another stream records that stream on
them (torch's `record_stream`: the memory waits for that stream's work before it is
reused); for cupy, whose pool has no such call, every launch on another stream makes the
allocating stream wait for it (an event, the host does not block). Memory the runtime
allocates itself (`DeviceArray`) is freed with cuMemFree, which waits for the device.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from attnc_runtime import libraries
from attnc_runtime.bundle import Bundle, read_bundle
from attnc_runtime.checks import LaunchPlan, Platform, named_arguments, plan_launch
from attnc_runtime.errors import AttncRuntimeError
from attnc_runtime.manifest import Manifest
from attnc_runtime.params import pack, param_values
from attnc_runtime.tensors import CU_STREAM_LEGACY, view


POISON_ENV, POISON_BYTE = "ATTNC_POISON_SCRATCH", 0xFF     # Note [Filled scratch]
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")   # as attnc/config.py's


def poison_requested(environ=os.environ) -> bool:
    """Whether ATTNC_POISON_SCRATCH asks for poisoned scratch (Note [Filled scratch]): a
    boolean spelled as the compiler's environment variables are; anything else is refused."""
    value = environ.get(POISON_ENV, "").strip().lower()
    if value not in _TRUE + _FALSE:
        raise AttncRuntimeError(f"environment variable {POISON_ENV}={environ[POISON_ENV]!r} is not a "
                                f"boolean; use one of {', '.join(_TRUE)} or {', '.join(_FALSE[1:])}")
    return value in _TRUE


def load(path: str | Path, device: str = "cuda", **options) -> "Kernel":
    """The kernel of the bundle folder at `path`: on the GPU (`device="cuda"`), or in the
    PTX emulator (`device="sim"`: numpy arrays in and out, attnc_sim.device.SimKernel,
    which takes `options` such as seed=, raise_reports=); `path` may also be a Bundle read
    already."""
    if device not in ("cuda", "sim"):
        raise AttncRuntimeError(f"device={device!r}: expected 'cuda' or 'sim'")
    if isinstance(path, Bundle):
        bundle = path
    elif isinstance(path, (str, os.PathLike)):
        bundle = read_bundle(path)
    else:
        raise AttncRuntimeError(f"load takes a bundle's folder (a path) or a Bundle, not {type(path).__name__}")
    if device == "sim":
        from attnc_sim.device import SimKernel
        return SimKernel(bundle, **options)
    if options:
        raise AttncRuntimeError(f"load: unexpected options {sorted(options)} for device 'cuda'")
    return Kernel(bundle)


class Kernel:
    def __init__(self, bundle: Bundle, platform: Platform | None = None):
        self.bundle = bundle
        self._platform = platform

    @property
    def manifest(self) -> Manifest:
        return self.bundle.manifest

    @property
    def platform(self) -> Platform:
        if self._platform is None:
            from attnc_runtime.driver import DriverPlatform
            self._platform = DriverPlatform()
        return self._platform

    def plan(self, /, *tensors, **args) -> LaunchPlan:
        """Check the arguments; raises `AttncRuntimeError` or returns what a launch will do."""
        return plan_launch(self.manifest, named_arguments(self.manifest, tensors, args), self.platform)

    def bind(self, /, *tensors, mask_from: "BoundLaunch | None" = None, **args) -> "BoundLaunch":
        """Checked arguments, ready to `launch`; `mask_from`: a bound launch of this bundle
        whose mask data (the block map) this one reads instead of building its own (Note
        [Reused masks])."""
        args = named_arguments(self.manifest, tensors, args)
        return BoundLaunch(self.bundle, plan_launch(self.manifest, args, self.platform), args, mask_from)

    def __call__(self, /, *tensors, mask_from: "BoundLaunch | None" = None, **args) -> dict[str, Any]:
        bound = self.bind(*tensors, mask_from=mask_from, **args)
        bound.launch()
        return bound.outputs

    def __repr__(self) -> str:
        m = self.manifest
        return (f"Kernel({m.variant}, {m.target}, inputs=({', '.join(t.name for t in m.inputs)}), "
                f"outputs=({', '.join(t.name for t in m.outputs)}))")


class BoundLaunch:
    """Checked arguments with their outputs and scratch buffers allocated, ready to launch.

    The packed parameters hold raw device addresses, so the bound launch keeps every
    tensor it was given alive for as long as it lives: a caller's temporary (a param
    built in the call, `bind(..., slopes=torch.exp2(...))`) would otherwise be freed,
    and a later `launch` would read whatever reused its memory. A torch tensor can
    also change its memory in place (`t.data = u`, `resize_`, `set_`), freeing the old:
    each launch checks that the given torch tensors still have the addresses it packed."""

    def __init__(self, bundle: Bundle, plan: LaunchPlan, args: dict[str, Any],
                 mask_from: "BoundLaunch | None" = None):
        self.bundle = bundle
        self.plan = plan
        self._given = dict(args)
        self._torch_given = [name for name in args if name in plan.views and plan.views[name].library == "torch"]
        device = plan.device.ordinal
        # Note [Reused masks]: the mask kernels' scratch, this binding's own or mask_from's.
        self._mask_kernels = frozenset(bundle.manifest.mask_kernels)
        if mask_from is not None and not isinstance(mask_from, BoundLaunch):
            raise AttncRuntimeError(f"mask_from: expected a bound launch (Kernel.bind), got {type(mask_from).__name__}")
        self._builds_mask = mask_from is None or not self._mask_kernels
        source = None if self._builds_mask else _check_mask_source(self, mask_from)
        allocated = {spec.name: libraries.empty(plan.library, shape, spec.dtype, device)
                     for spec, shape in plan.allocate}
        self.outputs = {spec.name: args[spec.name] if spec.name in plan.views else allocated[spec.name]
                        for spec in bundle.manifest.outputs}
        views = {**plan.views, **{name: view(obj, name) for name, obj in allocated.items()}}
        alloc_stream = libraries.current_stream(plan.library, device)
        if source is None:
            self._mask = _KeptMask({name: libraries.scratch(plan.library, plan.scratch[name], device)
                                    for name in bundle.manifest.mask_scratch}, alloc_stream)
        else:
            self._mask = source._mask
        self._scratch = {name: self._mask.buffers[name] if name in self._mask.buffers
                         else libraries.scratch(plan.library, nbytes, device)
                         for name, nbytes in plan.scratch.items()}
        self._scratch_ptrs = {name: view(buf, name).ptr for name, buf in self._scratch.items()}
        # Note [Memory used on another stream]: what this binding allocated, and where
        self._owned = _Allocated([*allocated.values(), *(buf for name, buf in self._scratch.items()
                                                         if name not in self._mask.buffers)],
                                 alloc_stream)
        self._params = [pack(param_values(k, plan.dims, views, self._scratch_ptrs, _encode_tensor_map))
                        for k in bundle.manifest.kernels]
        self._functions = None          # looked up (and loaded, once per device) at the first launch
        self._stream: int | None = None   # that of the last launch (_check_scratch_stream)
        # Note [Producer streams]
        self._producers = sorted({v.stream for v in views.values() if v.stream is not None})
        self._poison = poison_requested()      # Note [Filled scratch]

    def launch(self, stream=None, *, reuse_mask: bool = False) -> None:
        """Launch every kernel in order on `stream` (a handle, a torch or cupy stream; default:
        the current stream of the inputs' library). The mask kernels are left out when this
        binding reads another's mask (`mask_from`) or with `reuse_mask`, which keeps the mask
        this binding's last launch built (Note [Reused masks])."""
        from attnc_runtime import driver
        plan, manifest, kind = self.plan, self.bundle.manifest, self.plan.code_kind
        for name in self._torch_given:
            view, t = plan.views[name], self._given[name]
            if t.data_ptr() != view.ptr:
                raise AttncRuntimeError(f"{name}: its memory changed since the bind ({view.ptr:#x} -> "
                                        f"{t.data_ptr():#x}: .data =, resize_ or set_): bind again")
            if (tuple(t.shape), tuple(t.stride())) != (view.shape, view.strides):
                # The kernels' parameters hold the bind's shape and strides.
                raise AttncRuntimeError(f"{name}: its shape or strides changed since the bind "
                                        f"({_layout(view.shape, view.strides)} -> "
                                        f"{_layout(tuple(t.shape), tuple(t.stride()))}: an in-place "
                                        "view op such as transpose_, as_strided_ or resize_): bind again")
        build = self._builds_mask and not reuse_mask
        device = plan.device.ordinal
        with driver.primary_context(device) as ctx:
            if self._functions is None:
                image, digest = self.bundle.images[kind], self.bundle.digests[kind]
                self._functions = [driver.get_function(ctx, image, digest, symbol, k.dynamic_smem_bytes)
                                   for k, symbol in zip(manifest.kernels, plan.symbols)]
            handle = _stream_handle(stream) if stream is not None else \
                libraries.current_stream(plan.library, device)
            if self._mask_kernels and not build:
                self._check_kept_mask(handle)
            self._check_scratch_stream(handle, build)
            for producer in self._producers:        # Note [Producer streams]
                if not _ordered_after(handle, producer):
                    driver.wait_for(producer, handle)
            if build:
                self._mask.stream = None        # no map to reuse until every launch is queued
            for name, nbytes in plan.scratch.items():       # Note [Filled scratch]
                if name not in self._mask.buffers:
                    driver.memset_async(self._scratch_ptrs[name], nbytes, 0, handle)
                elif build and self._poison:
                    driver.memset_async(self._scratch_ptrs[name], nbytes, POISON_BYTE, handle)
            for i, (k, func, grid, params) in enumerate(zip(manifest.kernels, self._functions, plan.grids,
                                                            self._params)):
                if 0 in grid or (not build and i in self._mask_kernels):
                    continue        # nothing to do (an empty batch or sequence), or a kept mask
                driver.launch(func, grid, k.block, k.cluster, k.dynamic_smem_bytes, handle,
                              params.address)
            if build:
                self._mask.stream = handle
            self._stream = handle
            for owned in (self._owned, self._mask.allocated):   # Note [Memory used on another stream]
                owned.used_on(plan.library, handle, device)

    def _check_scratch_stream(self, stream: int, build: bool) -> None:
        """Refuse to write scratch on another stream than the launches that may still read
        it: the kept mask (this binding's and its mask_from readers') or this binding's own
        zeroed scratch. Nothing orders two streams' work; a new binding has new scratch."""
        own = set(self.plan.scratch) - set(self._mask.buffers)
        if build and self._mask.buffers and not _ordered_with(self._mask.stream, stream):
            last, what = self._mask.stream, "the mask was built"
        elif own and not _ordered_with(self._stream, stream):
            last, what = self._stream, "this binding last launched"
        else:
            return
        raise AttncRuntimeError(f"{what} on stream {last:#x}; writing its scratch again on {stream:#x} could "
                                f"overwrite it while that stream's launches still read it: launch on "
                                f"{last:#x}, or bind again for this stream")

    def _check_kept_mask(self, stream: int) -> None:
        """Refuse to read a kept mask that no launch has built, or that one built on another
        stream (nothing orders the two launches)."""
        if self._mask.stream is None:
            raise AttncRuntimeError("no mask to reuse: " + (
                "launch this binding once without reuse_mask first" if self._builds_mask else
                "the binding that builds this map (the first of the mask_from chain) has not launched"))
        if not _ordered_with(self._mask.stream, stream):
            raise AttncRuntimeError(f"the mask was built on stream {self._mask.stream:#x}, this launch is on "
                                    f"{stream:#x}: launch on that stream, or bind again (without mask_from) to build it on this one")


class _KeptMask:
    """The scratch the mask kernels fill (Note [Reused masks]), shared by every binding
    that reads it; `stream`: that of the launch that filled it, None while none has."""

    def __init__(self, buffers: dict[str, Any], alloc_stream: int):
        self.buffers = buffers
        self.stream: int | None = None
        self.allocated = _Allocated(list(buffers.values()), alloc_stream)


class _Allocated:
    """Tensors the runtime allocated on `stream`, and the other streams they were used on
    (Note [Memory used on another stream])."""

    def __init__(self, objs: list, stream: int):
        self.objs, self.stream = objs, stream
        self.recorded: set[int] = set()

    def used_on(self, library: str, stream: int, device: int) -> None:
        """After a launch on `stream`: keep the memory from reuse until that launch is done."""
        if not self.objs or _ordered_after(stream, self.stream) or library not in ("torch", "cupy"):
            return
        if library == "cupy":
            from attnc_runtime import driver
            driver.wait_for(stream, self.stream)        # no record_stream: every launch
        elif stream not in self.recorded:
            libraries.used_on(library, self.objs, stream, device)
            self.recorded.add(stream)


def _encode_tensor_map(p, v) -> bytes:
    from attnc_runtime import driver

    return driver.encode_tensor_map(p, v)


def _check_mask_source(bound: BoundLaunch, source: BoundLaunch) -> BoundLaunch:
    """`source`, if `bound` may read its mask data (Note [Reused masks]); else raises."""
    if source.bundle.manifest.raw != bound.bundle.manifest.raw:
        there, here = source.bundle.manifest, bound.bundle.manifest
        raise AttncRuntimeError(f"mask_from: a bound launch of another bundle ({there.variant} for {there.target}; "
                                f"this is {here.variant} for {here.target})")
    if source.plan.device.ordinal != bound.plan.device.ordinal:
        raise AttncRuntimeError(f"mask_from: bound on device {source.plan.device.ordinal}, "
                                f"this launch on device {bound.plan.device.ordinal}")
    read = bound.bundle.manifest.read_dims          # a dim nothing reads cannot change the mask
    differ = ", ".join(f"{d} = {source.plan.dims.get(d)} there, {bound.plan.dims.get(d)} here"
                       for d in bound.bundle.manifest.dims
                       if d in read and source.plan.dims.get(d) != bound.plan.dims.get(d))
    if differ:
        raise AttncRuntimeError(f"mask_from: the mask was built for other dims ({differ})")
    for name in bound.bundle.manifest.mask_params:   # same dims: same shapes; params are contiguous
        if bound.plan.views[name].ptr != source.plan.views[name].ptr:
            raise AttncRuntimeError(f"mask_from: the mask was built from another {name!r} tensor; "
                                    f"pass the same {name!r} to both")
    return source


def _ordered_after(consumer: int, producer: int) -> bool:
    """Whether work queued on stream `consumer` already runs after the work queued before
    it on `producer`: the same stream, or the legacy default stream (1) and the default
    stream (0: the legacy one, or a per-thread one, which synchronizes with it both ways)."""
    return consumer == producer or {consumer, producer} == {0, CU_STREAM_LEGACY}


def _ordered_with(last: int | None, stream: int) -> bool:
    """Whether a launch on `stream` runs after every launch on `last` (None: none yet) and
    before any later one there: the two are one stream, as far as ordering goes."""
    return last is None or _ordered_after(stream, last)


def _stream_handle(stream) -> int:
    for attr in ("cuda_stream", "ptr", "handle"):     # torch, cupy, cuda.core
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    return int(stream)


def _layout(shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    return f"shape {tuple(shape)}, strides {tuple(strides)}"
