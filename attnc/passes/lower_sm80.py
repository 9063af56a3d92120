"""`attn-lower-sm80`: the L5 plan -> the sm_80 kernel in upstream dialects (L6).

Targets: sm_80 (sm_90a's is attn-lower-sm90a, lower_sm90a.py; what the two share is
lower_kernel.py's). Expects L5 (tile attributes, mask analysis, role regions, channels with
their buffers, mbarriers) on one attn.kernel; what the kernel is built from is the op's attributes,
its hook ops' regions and the function's types (Note [The variant from the IR] in
attnc/ir/kernel.py), never the `.attn` source. Leaves the module with a `gpu.module`
holding the FlashAttention-2-style kernel (and, for masks that read params, the
block-map kernel) in gpu/nvvm/llvm/scf/arith ops -- cp.async commit groups and
waits, ldmatrix, mma.sync, the online softmax, the hooks' code -- and the launch
ABI as a JSON attribute `attn.kernels` on it:

    before:  func.func @mha(...) { "attn.kernel"(...) ({ "attn.warp_specialize"() ({...}) }) }
    after:   module attributes {gpu.container_module, ...} {
               func.func @mha(...) { ...unchanged... }
               gpu.module @attnc_kernels attributes {attn.kernels = "[...]"} {
                 gpu.func @attnc_mha_fwd(...) kernel { ... nvvm.mma.sync ... }
               }
             }

`attnc compile --emit ptx|cubin|bundle` takes the gpu.module from here to PTX
(MLIR's NVPTX), cubin (nvJitLink) and the bundle manifest.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnc.passes.lower_kernel import LowerKernel


@dataclass(frozen=True)
class LowerSm80(LowerKernel):
    """Generate the sm_80 kernel (gpu.module) from the plan of attn.kernel."""

    name: ClassVar[str] = "attn-lower-sm80"
    target: ClassVar[str] = "sm_80"
