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
its values once per diagonal only in the tiles near the diagonal, in a branch of their own
(HookGrid in score_masks.py); the others take its far value. At head dim 64 on sm_90a that
branch holds the values of the 34 diagonals a thread's scores lie on (read from the lanes
that computed them, Note [Diagonals across the warp] in warp_diagonals.py) beside S, the
P.V in flight and O, and under the 3-CTA bound (168 registers) ptxas 13.5 spills there:
the relative_bias example 112 bytes, T5 with causal 116, where the same kernels with the
far side in place of the near one spill none. The near tiles are a few of a row's (two or
three in 64 under a causal mask at N = 8192), so such spills cost little, and the bound's
third CTA an SM gains more: 1.07x for T5 and 1.04x for T5 with causal at head dim 64 on an
H100 (results/sm90a_h200.md, "Spills of the near tiles"). So where the trial spills, a
copy of the kernel with each near branch's condition held true (the far side alone, the
near side dead code) is assembled too, and the bound is kept where that copy does not
spill. The module is rewritten for LLVM once and its bytecode handed to the trial, which
is lowered and assembled on a second core where one is idle (`beside` in ptx.py);
meanwhile the compile's own thread holds the module itself on its far sides and lowers and
assembles it: no copy to make before the trial starts, and the copy's LLVM and assembly,
the shorter (its near sides gone), end before the trial's. Where that copy spills, the
kernel is most likely built without the bound, so this thread then assembles the trial's
PTX less its bound while the trial's own assembly runs.
"""
from __future__ import annotations

from concurrent.futures import Future

from mlir import ir

from attnc import timing
from attnc.backend.cubin import CubinError, ptx_to_cubin, resource_usage
from attnc.backend.nvgpu_builders import Emit
from attnc.backend.ptx import (PtxError, beside, bytecode, ptx_of_bytecode, rewrite_for_nvptx, to_ptx,
                               without_bound)

# What an assembly that gives no resource report raises: no assembler, or it failed.
_NO_REPORT = (CubinError, ImportError, OSError)


def bounded_code(module: ir.Module, target: str, symbol: str, specialization: dict) -> tuple[str, dict]:
    """The PTX of `module` (a kernel module, used up) and the specialization of its kernel
    `symbol`, whose register bound is dropped where the specialization keeps it only
    without spills and the kernel spills under it (Note [The bound the assembler
    decides]). The trial's cubin is then `ptx_to_cubin`'s of the PTX returned.

    Where the kernel has near tiles, the trial (LLVM, then the assembler) runs on a second
    core where one is idle, while this thread holds the module's near tiles on their far
    sides and lowers and assembles that copy (Note [Spills of the near tiles]): the module
    is rewritten for LLVM once, and held in place, its bytecode the trial's."""
    if not (specialization.get("min_ctas_unless_spills") and specialization.get("min_ctas_per_sm")):
        return to_ptx(module, target, in_place=True), specialization
    from attnc.backend.score_masks import NEAR_TILES
    near: list = []
    rewrite_for_nvptx(module, marked=(NEAR_TILES, near))
    if not near:
        ptx = to_ptx(module, target, in_place=True, rewritten=True)
        unbounded, spilled = _trial(ptx, target, symbol, unbounded_moot=False)
        far_spills = None
    else:
        data = bytecode(module)
        lowered: Future = Future()
        work = lambda: _lowered_trial(data, target, symbol, lowered)     # noqa: E731
        trial = beside(work)
        with timing.step("the far sides' copy: MLIR -> PTX -> cubin (Note [Spills of the near tiles])"):
            far_spills = _far_sides_spill(module, near, target, symbol)
        if far_spills and trial is not work:        # the trial runs on a thread of its own
            _assemble_unbounded(lowered.result(), target, symbol)
        with timing.step("the trial: MLIR -> PTX -> cubin on a second core, the rest of it waited for"):
            ptx, unbounded, spilled = trial()
    if not spilled or far_spills is False:
        return ptx, specialization
    return unbounded, {**specialization, "min_ctas_per_sm": 0}


def _lowered_trial(data: bytes, target: str, symbol: str, lowered: Future) -> tuple[str, str, bool]:
    """The PTX of the kernel module of bytecode `data` (rewritten for LLVM), also set on
    `lowered` once made, and `_trial`'s answers for it."""
    try:
        ptx = ptx_of_bytecode(data, target, raising=True)
    except BaseException as e:
        lowered.set_exception(e)
        raise
    lowered.set_result(ptx)
    return (ptx, *_trial(ptx, target, symbol, unbounded_moot=True))


def _assemble_unbounded(ptx: str, target: str, symbol: str) -> None:
    """Assemble `ptx` less the kernel `symbol`'s bound, for the bundle to take where the
    bound is dropped (`ptx_to_cubin` keeps its last results); a failure is left to the
    bundle's own assembly of it to report."""
    unbounded = without_bound(ptx, symbol)
    if unbounded is None:
        return
    with timing.step("the kernel without its bound: PTX -> cubin beside the trial's"):
        try:
            ptx_to_cubin(unbounded, target)
        except _NO_REPORT:
            pass


def _trial(ptx: str, target: str, symbol: str, unbounded_moot: bool) -> tuple[str, bool]:
    """(`ptx` without the kernel `symbol`'s bound, whether the kernel spills under it); the
    PTX without the bound is assembled beside unless `unbounded_moot` (Note [Assembled
    beside the trial] in cubin.py)."""
    unbounded = without_bound(ptx, symbol)
    if unbounded is None:
        raise PtxError(f"the kernel {symbol} has no register bound in its PTX to drop")
    try:
        usage = resource_usage(ptx, target, unbounded=None if unbounded_moot else unbounded)
    except _NO_REPORT:                  # the bound is not kept
        return unbounded, True
    return unbounded, _spilled(usage, symbol)


def _spilled(usage: dict, symbol: str) -> bool:
    return any(u.spills for name, u in usage.items() if name == symbol)


def _far_sides_spill(module: ir.Module, near: list, target: str, symbol: str) -> bool:
    """Whether the kernel `symbol` of `module` (rewritten for LLVM) spills under its bound
    with its near tiles' branches `near` held on their far sides, in place (Note [Spills
    of the near tiles])."""
    hold_far_sides(module, near)
    ptx = ptx_of_bytecode(bytecode(module), target)
    try:
        return ptx is None or _spilled(resource_usage(ptx, target), symbol)
    except _NO_REPORT:
        return True


def hold_far_sides(module: ir.Module, branches: list) -> None:
    """Hold each of `branches`, `module`'s near-tiles branches (those with NEAR_TILES,
    HookGrid in score_masks.py), on its far side; a warp's vote that only the branch read
    goes with it (LLVM keeps a vote.sync whose result nothing reads, Note [Diagonals across
    the warp] in warp_diagonals.py)."""
    with module.context:
        e = Emit()
        for op in branches:
            held = op.operands[0]
            with ir.InsertionPoint(op), op.location:
                op.operands[0] = e.true()
            if isinstance(held, ir.OpResult) and held.owner.name == "nvvm.vote.sync" and not list(held.uses):
                held.owner.erase()
