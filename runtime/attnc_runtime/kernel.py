"""`Kernel`: a loaded bundle you call on tensors.

    kernel = attnc_runtime.load("bundles/gemma2.sm_80")
    out = kernel(q=q, k=k, v=v)             # {'o': tensor, 'lse': tensor}
    out = kernel(q, k, v, P=128)            # inputs by position, scalar dims by name

A call checks every argument (checks.py) before touching the GPU, allocates the
outputs not given, and launches the bundle's kernels in order on the current
torch/cupy stream. `bind` splits the two halves so a benchmark launches the same
checked arguments again without re-checking them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from attnc_runtime import libraries
from attnc_runtime.bundle import Bundle, read_bundle
from attnc_runtime.checks import LaunchPlan, Platform, plan_launch
from attnc_runtime.errors import AttncRuntimeError
from attnc_runtime.manifest import Manifest
from attnc_runtime.params import pack, param_values
from attnc_runtime.tensors import view


def load(path: str | Path) -> "Kernel":
    """The kernel of the bundle folder at `path`."""
    return Kernel(read_bundle(path))


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

    def plan(self, *tensors, **args) -> LaunchPlan:
        """Check the arguments; raises `AttncRuntimeError` or returns what a launch will do."""
        return plan_launch(self.manifest, self._named(tensors, args), self.platform)

    def bind(self, *tensors, **args) -> "BoundLaunch":
        args = self._named(tensors, args)
        return BoundLaunch(self.bundle, plan_launch(self.manifest, args, self.platform), args)

    def __call__(self, *tensors, **args) -> dict[str, Any]:
        bound = self.bind(*tensors, **args)
        bound.launch()
        return bound.outputs

    def _named(self, tensors: tuple, args: dict) -> dict:
        inputs = self.manifest.inputs
        if len(tensors) > len(inputs):
            raise AttncRuntimeError(f"{self.manifest.variant} takes {len(inputs)} positional "
                                    f"inputs ({', '.join(t.name for t in inputs)}), got {len(tensors)}")
        named = dict(args)
        for spec, tensor in zip(inputs, tensors):
            if spec.name in named:
                raise AttncRuntimeError(f"input {spec.name!r} given both by position and by name")
            named[spec.name] = tensor
        return named

    def __repr__(self) -> str:
        m = self.manifest
        return (f"Kernel({m.variant}, {m.target}, inputs=({', '.join(t.name for t in m.inputs)}), "
                f"outputs=({', '.join(t.name for t in m.outputs)}))")


class BoundLaunch:
    """Checked arguments with their outputs and scratch buffers allocated, ready to launch.

    The packed parameters hold raw device addresses, so the bound launch keeps every
    tensor it was given alive for as long as it lives: a caller's temporary (a param
    built in the call, `bind(..., slopes=torch.exp2(...))`) would otherwise be freed,
    and a later `launch` would read whatever reused its memory."""

    def __init__(self, bundle: Bundle, plan: LaunchPlan, args: dict[str, Any]):
        self.bundle = bundle
        self.plan = plan
        self._given = dict(args)
        device = plan.device.ordinal
        allocated = {spec.name: libraries.empty(plan.library, shape, spec.dtype, device)
                     for spec, shape in plan.allocate}
        self.outputs = {spec.name: args[spec.name] if spec.name in plan.views else allocated[spec.name]
                        for spec in bundle.manifest.outputs}
        views = {**plan.views, **{name: view(obj, name) for name, obj in allocated.items()}}
        self._scratch = {name: libraries.scratch(plan.library, nbytes, device)
                         for name, nbytes in plan.scratch.items()}
        self._scratch_ptrs = {name: view(buf, name).ptr for name, buf in self._scratch.items()}
        self._params = [pack(param_values(k, plan.dims, views, self._scratch_ptrs))
                        for k in bundle.manifest.kernels]
        self._functions = None          # looked up (and loaded, once per device) at the first launch

    def launch(self, stream=None) -> None:
        """Launch every kernel in order on `stream` (a handle, a torch or cupy stream; default:
        the current stream of the inputs' library)."""
        from attnc_runtime import driver
        plan, manifest, kind = self.plan, self.bundle.manifest, self.plan.code_kind
        device = plan.device.ordinal
        with driver.primary_context(device) as ctx:
            if self._functions is None:
                image, digest = self.bundle.images[kind], self.bundle.digests[kind]
                self._functions = [driver.get_function(ctx, image, digest, k.symbol, k.dynamic_smem_bytes)
                                   for k in manifest.kernels]
            handle = _stream_handle(stream) if stream is not None else \
                libraries.current_stream(plan.library, device)
            for name, nbytes in plan.scratch.items():
                driver.memset_zero_async(self._scratch_ptrs[name], nbytes, handle)
            for k, func, grid, params in zip(manifest.kernels, self._functions, plan.grids, self._params):
                if 0 in grid:
                    continue        # nothing to do (an empty batch or sequence)
                driver.launch(func, grid, k.block, k.cluster, k.dynamic_smem_bytes, handle,
                              params.address)


def _stream_handle(stream) -> int:
    for attr in ("cuda_stream", "ptr", "handle"):     # torch, cupy, cuda.core
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    return int(stream)
