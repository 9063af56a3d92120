"""A forward kernel built into a `gpu.container_module` (`build_kernel_module`, for every
target: `_lowering` picks sm80.py's, sm90a.py's or sm90a_ws.py's patterns), and the
second, tiles_last kernel of Note [Small grids] (kernel_abi.py) added to such a module
(`add_small_grid_kernel`).
"""
from __future__ import annotations

import dataclasses
import re

from mlir import ir
from mlir.dialects import gpu

from attnc.backend.kernel_abi import SMALL_GRID_CTAS_PER_SM, KernelAbi, grid_axes, kernel_abi
from attnc.backend.kernel_spec import ForwardSpec
from attnc.backend.nvgpu_builders import Emit, Smem
from attnc.backend.spec_checks import steps_read
from attnc.backend.forward import SMEM_SYMBOL, KernelState, TargetLowering, block_index, read_grid

GPU_MODULE = "attnc_kernels"


def build_kernel_module(spec: ForwardSpec, context: ir.Context | None = None) -> tuple[ir.Module, KernelAbi]:
    """The kernel of `spec` as a `gpu.container_module` holding one `gpu.module`, and its
    ABI. A default register bound (Note [CTAs per SM] in attnc/passes/choice_defaults.py)
    is written as any other; the assembler decides whether it stays (Note [The bound the
    assembler decides] in register_bound.py)."""
    steps_read(spec.check())
    abi = kernel_abi(spec)
    ctx = context or _current_context() or ir.Context()
    with ctx, ir.Location.name(spec.symbol):
        # sm_90a's wgmma reads 128B-swizzled tiles in 1024-byte atoms (Note [wgmma operands]).
        module, body = empty_kernel_module(SMEM_SYMBOL, 1024 if spec.target == "sm_90a" else Smem.ALIGN)
        _emit_kernel(spec, abi, body)
        if not module.operation.verify():
            raise RuntimeError(f"the kernel {spec.symbol} does not verify")
    return module, abi


def empty_kernel_module(smem_symbol: str, alignment: int) -> tuple[ir.Module, ir.Block]:
    """A `gpu.container_module` holding one empty gpu.module with the kernels' dynamic shared
    memory declared (aligned to `alignment` bytes); returns it and the gpu.module's body."""
    module = ir.Module.create()
    module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
    with ir.InsertionPoint(module.body):
        gpu_module = gpu.GPUModuleOp(GPU_MODULE)
        gpu_module.bodyRegion.blocks.append()
    body = gpu_module.bodyRegion.blocks[0]
    with ir.InsertionPoint(body):
        Smem.declare(smem_symbol, alignment=alignment)
    return module, body


def add_small_grid_kernel(module: ir.Module, spec: ForwardSpec) -> dict:
    """Add `spec`'s kernel with tiles_last, as `<symbol>_tiles_last`, to the gpu.module of
    `module` (build_kernel_module's, of `spec`), and return its manifest entry's
    `small_grid` (Note [Small grids]). The two differ only in the grid's axes the kernel
    reads its query block, head and batch from (`KernelState.grid_item`, its one read of
    them), so the second is the first's gpu.func with those reads moved: building it
    again took as long as the first (0.2 s of gemma2's compile, `--time-passes`)."""
    choices = dataclasses.replace(spec.choices, tiles_last=True, heads_first=False, small_grid=False)
    small = dataclasses.replace(spec, choices=choices, symbol=f"{spec.symbol}_tiles_last")
    abi = kernel_abi(small.check())
    body = _gpu_module(module).regions[0].blocks[0]
    with module.context, ir.Location.name(small.symbol):
        func = _kernel_func(module, spec.symbol).clone(ip=ir.InsertionPoint(body))
        func.attributes["sym_name"] = ir.StringAttr.get(small.symbol)
        _move_grid_reads(func, grid_axes(spec), grid_axes(small))
        if not module.operation.verify():
            raise RuntimeError(f"the kernel {small.symbol} does not verify")
    return {"symbol": small.symbol, "grid": [list(g) for g in abi.grid],
            "up_to_ctas_per_sm": SMALL_GRID_CTAS_PER_SM}


_GRID_READ = re.compile(r"nvvm\.read\.ptx\.sreg\.(n?ctaid)\.([xyz])")


def _move_grid_reads(func: ir.Operation, old: dict[str, str], new: dict[str, str]) -> None:
    """Move each ctaid / nctaid read of `func` from its axis in `old` to the axis `new`
    gives the same role (query block, head, batch: `grid_axes`); the query block's index,
    once off x, through `block_index`, as `KernelState.grid_item` reads it."""
    role_of = {axis: role for role, axis in old.items()}
    reads = []

    def collect(op):
        if _GRID_READ.fullmatch(op.name):
            reads.append(op)
        return ir.WalkResult.ADVANCE

    func.walk(collect)
    e = Emit()
    for op in reads:
        register, axis = _GRID_READ.fullmatch(op.name).groups()
        role = role_of[axis]
        with ir.InsertionPoint(op), op.location:
            value = read_grid(e, register, new[role])
            if register == "ctaid" and role == "block" and old["block"] == "x":
                value = block_index(e, value, new)
            elif register == "ctaid" and role == "block" and new["block"] == "x":
                raise ValueError("a query block index read opaque cannot be made plain again")
        op.results[0].replace_all_uses_with(value)
        op.erase()


def _kernel_func(module: ir.Module, symbol: str) -> ir.Operation:
    return next(op.operation for op in _gpu_module(module).regions[0].blocks[0].operations
                if op.operation.name == "gpu.func"
                and ir.StringAttr(op.operation.attributes["sym_name"]).value == symbol)


def _gpu_module(module: ir.Module):
    return next(o for o in module.body.operations if o.operation.name == "gpu.module")


def _emit_kernel(spec: ForwardSpec, abi: KernelAbi, block: ir.Block) -> None:
    """`spec`'s kernel (the parameters of `abi`) as a gpu.func at the end of `block`."""
    with ir.InsertionPoint(block):
        arg_types = [_param_type(p) for p in abi.params]
        func = gpu.GPUFuncOp(ir.TypeAttr.get(ir.FunctionType.get(arg_types, [])), spec.symbol,
                             kernel=True, known_block_size=list(abi.block))
        # A producer warpgroup's setmaxnreg takes effect only in a kernel that ptxas
        # knows runs one CTA per SM (.minnctapersm 1; without it ptxas drops it).
        min_ctas = 1 if spec.plan.producer and not spec.choices.min_ctas_per_sm else spec.choices.min_ctas_per_sm
        if min_ctas:
            func.operation.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32),
                                                                           min_ctas)
        entry = func.body.blocks.append(*arg_types)
    with ir.InsertionPoint(entry):
        args = {_param_name(p): a for p, a in zip(abi.params, entry.arguments)}
        extra = entry.arguments[len(abi.params) - len(spec.hooks.extra_params):]
        # Hook parameters by `kind:name` too, which no ABI name can shadow.
        args.update({x.key: a for x, a in zip(spec.hooks.extra_params, extra)})
        lowering = _lowering(spec)
        state = KernelState(spec, args, lowering)
        (lowering.emit or KernelState.emit)(state)
        gpu.ReturnOp([])


def _param_name(p: dict) -> str:
    if p["kind"] == "stride":
        return f"stride_{p['tensor']}_{p['axis']}"
    return p.get("tensor") or p["name"]


def _param_type(p: dict) -> ir.Type:
    if p["kind"] in ("ptr", "scratch"):
        return ir.Type.parse("!llvm.ptr<1>")
    return ir.IntegerType.get_signless(32 if p["type"] == "i32" else 64)


def _lowering(spec: ForwardSpec) -> TargetLowering:
    if spec.plan.producer:
        from attnc.backend.sm90a_ws import SM90A_WS
        return SM90A_WS
    if spec.target == "sm_90a":
        from attnc.backend.sm90a import SM90A
        return SM90A
    from attnc.backend.sm80 import SM80
    return SM80


def _current_context() -> ir.Context | None:
    try:
        return ir.Context.current
    except ValueError:
        return None
