"""Which code object of a bundle can run on which GPU.

Note [Code object compatibility]: SASS for `sm_XY` runs on every GPU of major
version X with minor >= Y; PTX for `compute_XY` is JIT-compiled by the driver for
any GPU of compute capability >= X.Y. The architecture-specific targets (`sm_90a`,
`sm_100a`) use instructions (wgmma, setmaxnreg, tcgen05) that exist on exactly one
compute capability, so both their SASS and their PTX run only there. A bundle
prefers its cubin and falls back to its PTX.
"""
from __future__ import annotations

from dataclasses import dataclass

from attnc_runtime.errors import AttncRuntimeError

Capability = tuple[int, int]


@dataclass(frozen=True)
class Target:
    name: str
    capability: Capability
    arch_specific: bool         # an 'a' target: runs on exactly `capability`

    def runs_cubin(self, cc: Capability) -> bool:
        if self.arch_specific:
            return cc == self.capability
        return cc[0] == self.capability[0] and cc[1] >= self.capability[1]

    def runs_ptx(self, cc: Capability) -> bool:
        if self.arch_specific:
            return cc == self.capability
        return cc >= self.capability

    def requirement(self, kind: str) -> str:
        major, minor = self.capability
        if self.arch_specific:
            return f"exactly {major}.{minor}"
        return f"{major}.x with x >= {minor}" if kind == "cubin" else f">= {major}.{minor}"


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("sm_80", (8, 0), False),
    Target("sm_86", (8, 6), False),
    Target("sm_89", (8, 9), False),
    Target("sm_90", (9, 0), False),
    Target("sm_90a", (9, 0), True),
    Target("sm_100a", (10, 0), True),
)}


def select_code(target: str, kinds, cc: Capability, device: int) -> str:
    """The code object kind ('cubin' or 'ptx') to load on a GPU of capability `cc`."""
    spec = TARGETS[target]
    if "cubin" in kinds and spec.runs_cubin(cc):
        return "cubin"
    if "ptx" in kinds and spec.runs_ptx(cc):
        return "ptx"
    needs = "; ".join(f"its {kind} needs compute capability {spec.requirement(kind)}"
                      for kind in ("cubin", "ptx") if kind in kinds)
    raise AttncRuntimeError(f"bundle for {target} cannot run on device {device} "
                            f"(compute capability {cc[0]}.{cc[1]}): {needs}")


@dataclass(frozen=True)
class DeviceInfo:
    """What the argument checks need to know about one GPU."""
    ordinal: int
    name: str
    capability: Capability
    max_dynamic_smem_bytes: int     # per block, with the opt-in attribute set
    multiprocessors: int            # SMs (a persistent kernel's grid: manifest.MinSms)
