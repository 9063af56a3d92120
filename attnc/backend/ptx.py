"""L6 -> PTX: the upstream conversions to the LLVM dialect, then in-process NVPTX.

Input: an MLIR module (`gpu.container_module`) holding one or more `gpu.module`s whose
kernels are written in upstream dialects (gpu, nvgpu, nvvm, llvm, scf, arith, math,
vector, memref). Output: PTX text for one target.

    module ──lower_math_to_approx──▶ math transcendentals as NVVM approx intrinsics
           ──nvvm-attach-target──▶ ──gpu.module(scf→cf, nvgpu→nvvm, math→llvm, gpu→nvvm)──▶
           ──reconcile-unrealized-casts──▶ ──attach_loop_annotations──▶
           ──gpu-module-to-binary{format=isa}──▶ PTX

Note [No libdevice]: `convert-gpu-to-nvvm` maps `math.exp`, `math.tanh`, ... to
libdevice calls (`__nv_expf`), which need the CUDA toolkit's `libdevice.10.bc` at link
time. We rewrite those ops first into the hardware's approximate instructions
(`ex2.approx.ftz.f32`, `lg2.approx.ftz.f32`, `tanh.approx.f32`, `rcp.approx`,
`rsqrt.approx`), which is also what attention kernels want for speed, and refuse a
module that would still need libdevice.

Note [Recent PTX]: sm_90a's register bound (Note [CTAs per SM] in kernel_spec.py) is
kept only where a trial compile of the kernel does not spill, so a kernel that keeps it
was lowered through LLVM twice: once for the trial, once for the bundle, the two modules
differing only in the attributes attn-lower-sm80 then puts on the gpu.module (`attn.*`:
the kernels' ABI and specialization, which no pass to LLVM reads). So the trial asks
`to_ptx` to keep its PTX (`keep`), by a digest of the module's text without those
attributes (and without locations) and of the options, and the bundle's compile of the
same kernel is the trial's PTX, byte for byte. A kernel that spilled under the bound is
built again without it, which differs from the trial's in one more attribute: its
gpu.func's `nvvm.minctasm`, the bound, which LLVM's NVPTX backend reads only to print
the kernel's `.minnctapersm` directive (PTX has no physical registers: ptxas applies the
bound). So the digest leaves the bounds out too, the PTX is kept with the bounds it was
made with, and a module that wants a kernel unbounded gets the kept PTX without that
kernel's `.minnctapersm` line; any other difference of bounds is lowered afresh. A few
are kept, for trials of several kernels in one process.
"""
from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass

from mlir import ir, passmanager
from mlir.dialects import arith, gpu, llvm

from attnc import timing

TARGETS = {
    # target: (chip, PTX ISA feature) -- the lowest PTX ISA that knows the chip.
    "sm_80": ("sm_80", "+ptx70"),
    "sm_90a": ("sm_90a", "+ptx80"),
    "sm_100a": ("sm_100a", "+ptx86"),
}

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


class PtxError(RuntimeError):
    """The module could not be turned into PTX (with the MLIR diagnostic)."""


@dataclass(frozen=True)
class PtxOptions:
    target: str = "sm_80"
    opt_level: int = 3
    ptx_feature: str | None = None      # override, e.g. "+ptx80"

    def attach_target(self) -> str:
        if self.target not in TARGETS:
            raise PtxError(f"unknown target {self.target!r} (known: {', '.join(TARGETS)})")
        chip, feature = TARGETS[self.target]
        feature = self.ptx_feature or feature
        return f"nvvm-attach-target{{chip={chip} features={feature} O={self.opt_level}}}"


def to_llvm_pipeline(options: PtxOptions) -> str:
    """The pass pipeline, as text, from upstream dialects to the LLVM dialect."""
    nested = ",".join([
        "convert-scf-to-cf",
        "convert-nvgpu-to-nvvm",
        "convert-math-to-llvm",
        "convert-gpu-to-nvvm",
        "convert-nvvm-to-llvm",
        "canonicalize",
        "cse",
    ])
    return f"builtin.module({options.attach_target()},gpu.module({nested}),reconcile-unrealized-casts)"


BINARY_PIPELINE = "builtin.module(gpu-module-to-binary{format=isa})"


def lowering_pipeline(options: PtxOptions) -> str:
    """Both halves, for display; `to_ptx` runs `attach_loop_annotations` in between."""
    return f"{to_llvm_pipeline(options)[:-1]},gpu-module-to-binary{{format=isa}})"


def attach_loop_annotations(module: ir.Module) -> int:
    """Note [Loop annotations]: `convert-scf-to-cf` copies an scf.for's
    `llvm.loop_annotation` attribute onto the latch branch as a discardable attribute,
    which the LLVM translation ignores; move it to the branch's `loop_annotation`, so
    that e.g. `#llvm.loop_unroll<disable = true>` reaches LLVM (and PTX's
    `.pragma "nounroll"`, which ptxas obeys). Returns how many branches carry one."""
    found = []

    def collect(op):
        if op.name in ("llvm.br", "llvm.cond_br") and "llvm.loop_annotation" in op.attributes:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    for op in found:
        op.attributes["loop_annotation"] = op.attributes["llvm.loop_annotation"]
        del op.attributes["llvm.loop_annotation"]
    return len(found)


# ---------------------------------------------------------------- math -> approx

def _intrinsic(name: str, x: ir.Value) -> ir.Value:
    return llvm.call_intrinsic(x.type, name, [x], [], [])


def _tanh_approx(x: ir.Value) -> ir.Value:
    # No LLVM intrinsic for tanh.approx in LLVM 22's NVPTX backend: inline PTX (sm_75+).
    return llvm.inline_asm(x.type, [x], "tanh.approx.f32 $0, $1;", "=f,f")


def _scaled(x: ir.Value, factor: float) -> ir.Value:
    return arith.mulf(x, arith.constant(x.type, factor))


def _exp2(x): return _intrinsic("llvm.nvvm.ex2.approx.ftz.f", x)
def _log2(x): return _intrinsic("llvm.nvvm.lg2.approx.ftz.f", x)


_APPROX = {
    "math.exp2": _exp2,
    "math.exp": lambda x: _exp2(_scaled(x, LOG2E)),
    "math.log2": _log2,
    "math.log": lambda x: _scaled(_log2(x), LN2),
    "math.tanh": _tanh_approx,
    "math.rsqrt": lambda x: _intrinsic("llvm.nvvm.rsqrt.approx.ftz.f", x),
    "math.sin": lambda x: _intrinsic("llvm.nvvm.sin.approx.ftz.f", x),
    "math.cos": lambda x: _intrinsic("llvm.nvvm.cos.approx.ftz.f", x),
    # Exact ops that the GPU-to-NVVM conversion would otherwise send to libdevice too.
    "math.sqrt": lambda x: _intrinsic("llvm.nvvm.sqrt.rn.f", x),
    "math.floor": lambda x: _intrinsic("llvm.nvvm.floor.f", x),
    "math.ceil": lambda x: _intrinsic("llvm.nvvm.ceil.f", x),
    "math.trunc": lambda x: _intrinsic("llvm.nvvm.trunc.f", x),
    "math.roundeven": lambda x: _intrinsic("llvm.nvvm.round.f", x),
}


def lower_math_to_approx(module: ir.Module) -> int:
    """Rewrite f32/f16/bf16 scalar transcendental `math` ops into NVVM approximate
    instructions, in place. Returns how many ops were rewritten. (Note [No libdevice])"""
    found: list[ir.Operation] = []

    def collect(op):
        if op.name in _APPROX:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    f32 = ir.F32Type.get(module.context)
    for op in found:
        x = op.operands[0]
        if str(x.type) not in ("f32", "f16", "bf16"):
            raise PtxError(f"{op.name} on {x.type}: only scalar f32/f16/bf16 is lowered "
                           f"to approximate instructions")
        with ir.InsertionPoint(op), op.location:
            wide = x if x.type == f32 else arith.extf(f32, x)
            r = _APPROX[op.name](wide)
            if x.type != f32:
                r = arith.truncf(x.type, r)
        op.results[0].replace_all_uses_with(r)
        op.erase()
    return len(found)


# ---------------------------------------------------------------- driver

def ptx_of_binary(module: ir.Module) -> dict[str, str]:
    """PTX text of every `gpu.binary` in a lowered module, by binary name."""
    out = {}
    for op in module.body.operations:
        if op.operation.name != "gpu.binary":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        objects = ir.ArrayAttr(op.attributes["objects"])
        for obj in objects:
            out[name] = _object_assembly(obj)
    return out


def _object_assembly(obj: ir.Attribute) -> str:
    return bytes(gpu.ObjectAttr(obj).object).decode()


RECENT_PTX = 4          # modules whose PTX is kept (Note [Recent PTX])
MIN_CTAS = "nvvm.minctasm"
Bounds = dict[str, int]                                 # kernel symbol -> its nvvm.minctasm
_recent: OrderedDict[str, tuple[str, Bounds]] = OrderedDict()


def to_ptx(module: ir.Module, target: str = "sm_80", *, opt_level: int = 3,
           ptx_feature: str | None = None, in_place: bool = False, keep: bool = False) -> str:
    """PTX for the single `gpu.module` of `module`, compiled for `target`.

    The module is cloned first unless `in_place`; an MLIR failure raises `PtxError`
    carrying the diagnostics. `keep`: the PTX is kept for the next call on the same
    module (Note [Recent PTX]), which then returns it without lowering anything.
    """
    options = PtxOptions(target, opt_level, ptx_feature)
    key = bounds = None
    if keep or _recent:
        with timing.step("MLIR -> PTX: the module's digest (Note [Recent PTX])"):
            key, bounds = _digest(module, options)
    if key in _recent:
        ptx = _with_bounds(*_recent.pop(key), bounds)
        if ptx is not None:
            return ptx
    with timing.step("MLIR -> PTX"):
        ptx = _lower(module if in_place else ir.Module.parse(str(module), module.context), options)
    if keep:
        _recent[key] = (ptx, bounds)
        if len(_recent) > RECENT_PTX:
            _recent.popitem(last=False)
    return ptx


def _digest(module: ir.Module, options: PtxOptions) -> tuple[str, Bounds]:
    """The module's text without the gpu.modules' `attn.*` attributes and its kernels'
    register bounds, and the options; and those bounds. Locations are left out: a module
    parsed from text has its text's positions, and without debug-info scopes (attnc makes
    none) they do not reach the PTX."""
    def attributes(op) -> bytes:
        return repr(sorted((name, str(op.attributes[name])) for name in op.attributes
                           if not name.startswith("attn."))).encode()

    h = hashlib.sha256(repr(options).encode())
    h.update(attributes(module.operation))
    bounds: Bounds = {}
    for op in module.body.operations:
        op = op.operation
        if op.name != "gpu.module":
            h.update(op.get_asm(binary=True))
            continue
        h.update(attributes(op))
        for inner in op.regions[0].blocks[0].operations:
            h.update(_asm_unbounded(inner.operation, bounds))
    return h.hexdigest(), bounds


def _asm_unbounded(op: ir.Operation, bounds: Bounds) -> bytes:
    """`op` as bytecode without its register bound, which goes to `bounds`."""
    if op.name != "gpu.func" or MIN_CTAS not in op.attributes:
        return op.get_asm(binary=True)
    bound = op.attributes[MIN_CTAS]
    bounds[ir.StringAttr(op.attributes["sym_name"]).value] = ir.IntegerAttr(bound).value
    del op.attributes[MIN_CTAS]
    try:
        return op.get_asm(binary=True)
    finally:
        op.attributes[MIN_CTAS] = bound


def _with_bounds(ptx: str, made_with: Bounds, wanted: Bounds) -> str | None:
    """The kept `ptx`, made with the bounds `made_with`, for a module that wants `wanted`:
    the kernels that want none lose their `.minnctapersm` line; None when any other bound
    differs (Note [Recent PTX])."""
    for kernel in made_with.keys() | wanted.keys():
        if made_with.get(kernel) == wanted.get(kernel):
            continue
        if kernel in wanted:
            return None
        ptx = _without_directive(ptx, kernel, f".minnctapersm {made_with[kernel]}")
        if ptx is None:
            return None
    return ptx


def without_bounds(ptx: str) -> str:
    """`ptx` without its kernels' `.minnctapersm` lines: the PTX of the same kernels built
    without register bounds (Note [Recent PTX])."""
    return _BOUND_LINE.sub("", ptx)


_BOUND_LINE = re.compile(r"^\.minnctapersm \d+\n", re.M)


def _without_directive(ptx: str, kernel: str, directive: str) -> str | None:
    """`ptx` less the line `directive` among `kernel`'s directives (between its `.entry`
    and its body's `{`); None when the line is not there once."""
    entry = ptx.find(f".entry {kernel}(")
    body = ptx.find("\n{\n", entry)
    if entry < 0 or body < 0:
        return None
    head = ptx[entry:body + 1]
    line = f"\n{directive}\n"
    if head.count(line) != 1:
        return None
    return ptx[:entry] + head.replace(line, "\n") + ptx[body + 1:]


def _lower(work: ir.Module, options: PtxOptions) -> str:
    target = options.target
    lower_math_to_approx(work)
    try:
        passmanager.PassManager.parse(to_llvm_pipeline(options), work.context).run(work.operation)
        attach_loop_annotations(work)
        passmanager.PassManager.parse(BINARY_PIPELINE, work.context).run(work.operation)
    except ir.MLIRError as e:
        raise PtxError(f"lowering to PTX for {target} failed:\n{e}") from None
    binaries = ptx_of_binary(work)
    if len(binaries) != 1:
        raise PtxError(f"expected one gpu.module, found {len(binaries)}")
    ptx = next(iter(binaries.values()))
    if "__nv_" in ptx:
        raise PtxError("the module still calls libdevice (__nv_*); see Note [No libdevice]")
    return ptx
