"""The manifest's rules across fields, checked by `parse_manifest` (manifest.py) once the
parts are read: one tensor of each role q, k, v and o, names declared once; a small grid
only where it may run; a scratch sized one way; and what a mask kernel reads and fills
(Note [Reused masks] in kernel.py).
"""
from __future__ import annotations

from typing import Mapping

from attnc_runtime.errors import ManifestError
from attnc_runtime.manifest_schema import (RESERVED_NAMES, Factor, KernelSpec, PtrParam, ScratchParam,
                                           TensorSpec, since)

_ROLE_COUNTS = (("inputs", "q", "exactly"), ("inputs", "k", "exactly"), ("inputs", "v", "exactly"),
                ("outputs", "o", "exactly"), ("outputs", "lse", "at most"))


def _check_tensor_set(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> None:
    seen: set[str] = set()
    for group, specs in (("inputs", inputs), ("outputs", outputs)):
        for i, t in enumerate(specs):
            if t.name in seen:
                raise ManifestError(f"manifest: {group}[{i}].name: tensor {t.name!r} is declared twice")
            if t.name in RESERVED_NAMES:
                raise ManifestError(f"manifest: {group}[{i}].name: {t.name!r} is a keyword of "
                                    f"{RESERVED_NAMES[t.name]}, not a tensor name")
            seen.add(t.name)
    for group, role, bound in _ROLE_COUNTS:
        count = sum(t.role == role for t in (inputs if group == "inputs" else outputs))
        if count > 1 or (count == 0 and bound == "exactly"):
            raise ManifestError(f"manifest: {group}: expected {bound} one tensor with role {role!r}, "
                                f"found {count}")


def _check_small_grids(kernels: tuple[KernelSpec, ...], fmt: str) -> None:
    """A small grid (format 3) names a symbol of its own, on a kernel that is not a mask
    kernel (whose scratch a later launch may keep) and has no cluster."""
    symbols = [k.symbol for k in kernels]
    for i, k in enumerate(kernels):
        if k.small_grid is None:
            continue
        path = f"manifest: kernels[{i}].small_grid"
        if not since(fmt, "attnc-bundle/3"):
            raise ManifestError(f"{path}: not a field of format {fmt!r}")
        if k.role is not None or k.cluster != (1, 1, 1):
            raise ManifestError(f"{path}: only a kernel without a role and a cluster may have one")
        if k.small_grid.symbol in symbols + [x.small_grid.symbol for x in kernels[:i] if x.small_grid]:
            raise ManifestError(f"{path}.symbol: {k.small_grid.symbol!r} names another kernel too")


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


def _check_resources(kernels: tuple[KernelSpec, ...], fmt: str) -> None:
    """A kernel's resources came with format 4."""
    for i, k in enumerate(kernels):
        if k.resources is not None and not since(fmt, "attnc-bundle/4"):
            raise ManifestError(f"manifest: kernels[{i}].resources: not a field of format {fmt!r}")
