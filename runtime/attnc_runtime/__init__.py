"""attnc_runtime: load an attnc bundle and launch it on torch or cupy tensors.

Imports only the standard library, numpy and cuda-python -- never MLIR, lark or
the `attnc` compiler -- so it runs where the compiler cannot be installed
(design.md section 2). cuda-python itself is imported on the first launch.

    import attnc_runtime
    kernel = attnc_runtime.load("bundles/gemma2.sm_80")
    out = kernel(q=q, k=k, v=v)             # {'o': ..., 'lse': ...}

Modules, one concern each: `manifest` (the schema and `parse_manifest`),
`manifest_schema` (the value objects it returns and the format's constants),
`manifest_checks` (its rules across fields), `bundle` (reading a bundle folder),
`tensors` (what a tensor is, whatever library made it), `checks` (every argument
against the manifest, before any launch), `arch` (which code object runs on which
GPU), `shapes` (grid arithmetic), `params` (kernel ABI packing), `libraries`
(allocating like the inputs; streams), `driver` (the CUDA driver), `device_array`
(memory the runtime owns), `kernel` (`Kernel`), and the command line
`python -m attnc_runtime.run`.
"""
from __future__ import annotations

from attnc_runtime.bundle import Bundle, read_bundle
from attnc_runtime.checks import LaunchPlan
from attnc_runtime.errors import AttncRuntimeError, ManifestError
from attnc_runtime.kernel import BoundLaunch, Kernel, load
from attnc_runtime.manifest import FORMAT, Manifest, parse_manifest

__version__ = "0.1.0"
__all__ = ["AttncRuntimeError", "BoundLaunch", "Bundle", "DeviceArray", "FORMAT", "Kernel",
           "LaunchPlan", "Manifest", "ManifestError", "load", "parse_manifest", "read_bundle"]


def __getattr__(name: str):
    # DeviceArray needs the driver; importing it only on use keeps `import attnc_runtime` light.
    if name == "DeviceArray":
        from attnc_runtime.device_array import DeviceArray
        return DeviceArray
    raise AttributeError(f"module 'attnc_runtime' has no attribute {name!r}")
