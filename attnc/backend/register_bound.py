"""A register bound kept only where the kernel assembles without spills: the assembler
decides it, where the code is made (`bounded_code`).

Note [The bound the assembler decides]: a default register bound (Note [CTAs per SM] in
attnc/passes/choice_defaults.py; `min_ctas_unless_spills` in the kernel's
specialization) holds only where ptxas fits the kernel under it without spills, which
ptxas alone can tell. So the lowering writes the kernel with the bound (its gpu.func's
`nvvm.minctasm`) and the bundle's build assembles that kernel first as a trial: where it
does not spill, the trial is the bundle's code; where it does, the code is the same PTX
less the kernel's `.minnctapersm` line (Note [A bound dropped] in ptx.py), assembled
while the trial ran where a core was idle (Note [Assembled beside the trial] in
cubin.py), and the specialization says min_ctas_per_sm 0. LLVM lowers the kernel once,
and the IR the passes print (`--emit mlir`) is made without the assembler.

Note [Spills of the near tiles]: a hook with flat diagonals (T5's bucketed bias) computes
its values once per diagonal only in the tiles near the diagonal, in a branch of their
own (HookGrid in score_masks.py); the others take its far value. At head dim 64 on
sm_90a that branch alone holds the 34 values a thread's scores lie on beside S, the P.V
in flight and O, and under the 3-CTA bound (168 registers) ptxas spills there: the
relative_bias example 44 bytes, T5 with causal 80, where the same kernels with the far
side in place of the near one spill none. The near tiles are a few of a row's (two or
three in 64 under a causal mask at N = 8192), so such spills cost little, and the
bound's third CTA an SM gains more: 1.07x for T5 and 1.04x for T5 with causal at head dim
64 on an H100 (results/sm90a_h200.md, "Spills of the near tiles"). So where the trial
spills, a copy of the kernel with each near branch's condition held true (the far side
alone, the near side dead code) is assembled too, and the bound is kept where that copy
does not spill. The copy is lowered and assembled on a second core, where one is idle,
while the trial runs (`beside` in ptx.py).
"""
from __future__ import annotations

from typing import Callable

from mlir import ir

from attnc.backend.cubin import CubinError, resource_usage
from attnc.backend.nvgpu_builders import Emit
from attnc.backend.ptx import PtxError, beside, bytecode, ptx_of_bytecode, to_ptx, without_bound


def bounded_code(module: ir.Module, target: str, symbol: str, specialization: dict) -> tuple[str, dict]:
    """The PTX of `module` (a kernel module, lowered in place) and the specialization of
    its kernel `symbol`, whose register bound is dropped where the specialization keeps it
    only without spills and the kernel spills under it (Note [The bound the assembler
    decides]). The trial's cubin is then `ptx_to_cubin`'s of the PTX returned."""
    if not (specialization.get("min_ctas_unless_spills") and specialization.get("min_ctas_per_sm")):
        return to_ptx(module, target, in_place=True), specialization
    from attnc.backend import unlocked
    data = bytecode(module)
    far_spills = _far_sides_spill(data, target, symbol)
    # without the GIL where it can, so that the far sides' copy is lowered meanwhile
    ctx = unlocked.private_context() if far_spills is not None else None
    with ctx or module.context:
        ptx = to_ptx(ir.Module.parse(data) if ctx else module, target, in_place=True,
                     without_gil=ctx is not None)
    unbounded = without_bound(ptx, symbol)
    if unbounded is None:
        raise PtxError(f"the kernel {symbol} has no register bound in its PTX to drop")
    try:
        spilled = _spilled(resource_usage(ptx, target, unbounded=unbounded), symbol)
    except (CubinError, ImportError, OSError):     # no report: the bound is not kept
        spilled = True
    if not spilled or (far_spills is not None and not far_spills()):
        return ptx, specialization
    return unbounded, {**specialization, "min_ctas_per_sm": 0}


def _spilled(usage: dict, symbol: str) -> bool:
    return any(u.spills for name, u in usage.items() if name == symbol)


def _far_sides_spill(data: bytes, target: str, symbol: str) -> Callable[[], bool] | None:
    """A function that answers whether the kernel `symbol` of bytecode `data` spills under
    its bound with its near tiles' branches held on their far sides (Note [Spills of the
    near tiles]), its work begun beside; None where the kernel has no near tiles."""
    from attnc.ir.context import make_context
    with make_context() as ctx:
        copy = ir.Module.parse(data, ctx)
        if not far_sides_only(copy):
            return None
        far = bytecode(copy)

    def spills() -> bool:
        ptx = ptx_of_bytecode(far, target)
        try:
            return ptx is None or _spilled(resource_usage(ptx, target), symbol)
        except (CubinError, ImportError, OSError):
            return True
    return beside(spills)


def far_sides_only(module: ir.Module) -> bool:
    """Hold each near-tiles branch of `module` on its far side; whether it had any."""
    from attnc.backend.score_masks import NEAR_TILES
    branches = []

    def collect(op):
        if NEAR_TILES in op.attributes:
            branches.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    e = Emit()
    for op in branches:
        with ir.InsertionPoint(op), op.location:
            op.operands[0] = e.true()
    return bool(branches)

