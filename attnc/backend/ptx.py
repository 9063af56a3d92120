"""L6 -> PTX: the upstream conversions to the LLVM dialect, then in-process NVPTX.

Input: an MLIR module (`gpu.container_module`) holding one or more `gpu.module`s whose
kernels are written in upstream dialects (gpu, nvgpu, nvvm, llvm, scf, arith, math,
vector, memref). Output: PTX text for one target.

    module ──rewrite_for_nvptx──▶ math transcendentals as NVVM approx intrinsics, int() as
                                  one cvt.rzi.s32.f32 (Note [One cvt for int()])
           ──nvvm-attach-target──▶ ──gpu.module(scf→cf, nvgpu→nvvm, math→llvm, gpu→nvvm)──▶
           ──reconcile-unrealized-casts──▶ ──restore_attributes──▶
           ──gpu-module-to-binary{format=isa}──▶ PTX

Each rewrite of ours is one walk of the module in Python, a callback an op (16,000 ops in
relative_bias's sm_90a kernel), so the rewrites before the conversion share one walk, as
do those after it, and a module lowered twice (a register bound's trial and its far
sides' copy, register_bound.py) is rewritten once, before the trial takes its bytecode.

Note [No libdevice]: `convert-gpu-to-nvvm` maps `math.exp`, `math.tanh`, ... to
libdevice calls (`__nv_expf`), which need the CUDA toolkit's `libdevice.10.bc` at link
time. We rewrite those ops first into the hardware's approximate instructions
(`ex2.approx.ftz.f32`, `lg2.approx.ftz.f32`, `tanh.approx.f32`, `rcp.approx`,
`rsqrt.approx`), which is also what attention kernels want for speed, and refuse a
module that would still need libdevice.

Note [A bound dropped]: a kernel's register bound (`nvvm.minctasm`, Note [CTAs per SM] in
attnc/passes/choice_defaults.py) reaches its PTX only as the `.minnctapersm` line among
its entry's directives: PTX has no physical registers, ptxas applies the bound. So the
PTX of a kernel built without the bound is that of the bounded one less the line
(`without_bound`), and a bound the assembler decides (register_bound.py) costs LLVM no
second run.

Note [One cvt for int()]: a hook's `int(x)` is LLVM's llvm.fptosi.sat.i32.f32 (Note
[Saturating int] in hooks.py), which LLVM 22's NVPTX backend does not take as legal: it
expands it into cvt.rzi.s32.f32, three compares (below -2^31, above 2^31 - 1, NaN) and three
selects, seven instructions and three predicates where PTX's cvt.rzi.s32.f32 alone is the
conversion (float to integer clamps to the destination's range, and NaN gives 0 for an f32
source and a 32-bit destination: PTX ISA 9.0, cvt; on an H200, NaN gave 0, +-inf and +-3e9
the i32 bounds). So every module calls llvm.nvvm.f2i.rz (cvt.rzi.s32.f32) instead.
Rewritten here, after the hooks' IR: the MLIR the passes print, and the IR the CPU tests
run, keep fptosi.sat. In relative_bias's score_mod, one int() a score: on sm_100a the
expansion made the softmax warpgroups spill 52 bytes (ptxas issues most of the row's 128
bias gathers before the tcgen05.ld of S, and the bucket arithmetic of the scores in flight
no longer fitted beside them in 200 registers); the one cvt takes 1,584 SASS instructions
off (15,232 -> 13,648) and the spill. On the H200 the same T5 bias under a causal mask ran
1.03-1.17x faster on sm_80 and 1.09-1.12x on sm_90a, and relative_bias's own kernel 1.15x
and 1.08x (on sm_90a with 4 bytes of spills the expansion did not have), the outputs bit for
bit the same (results/sm80_h200.md and sm90a_h200.md, "One cvt for int()").
"""
from __future__ import annotations

import functools
import io
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, TypeVar

from mlir import ir, passmanager
from mlir.dialects import arith, gpu, llvm

from attnc import timing
from attnc.backend import unlocked
from attnc.backend.ptx_kernels import Kernels, joined_head, split_ptx

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

T = TypeVar("T")

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
    """The pass pipeline, as text, from upstream dialects to the LLVM dialect. No
    canonicalize or cse after the conversions: LLVM's own passes leave every example's PTX
    the same without them, on all three targets, and they took 0.02 s of a kernel's
    lowering."""
    nested = ",".join([
        "convert-scf-to-cf",
        "convert-nvgpu-to-nvvm",
        "convert-math-to-llvm",
        "convert-gpu-to-nvvm",
        "convert-nvvm-to-llvm",
    ])
    return f"builtin.module({options.attach_target()},gpu.module({nested}),reconcile-unrealized-casts)"


BINARY_PIPELINE = "builtin.module(gpu-module-to-binary{format=isa})"


TENSOR_MAPS_ATTR = "attn.tensor_maps"        # a kernel's arguments that are tensor maps, by index
TENSOR_MAP_BYTES = 128


def restore_attributes(module: ir.Module) -> tuple[int, int]:
    """Put back, in one walk, what the conversion to the LLVM dialect leaves where LLVM's
    translation does not read it; returns (branches, arguments) marked.

    Note [Loop annotations]: `convert-scf-to-cf` copies an scf.for's
    `llvm.loop_annotation` attribute onto the latch branch as a discardable attribute,
    which the LLVM translation ignores; it goes to the branch's `loop_annotation`, so
    that e.g. `#llvm.loop_unroll<disable = true>` reaches LLVM (and PTX's
    `.pragma "nounroll"`, which ptxas obeys).

    Note [Tensor-map arguments]: a TMA tensor map is a 128-byte kernel parameter taken by
    value, whose generic address the copies take (`cvta.param`): in LLVM a `byval` pointer
    argument marked `nvvm.grid_constant`, so that NVPTX neither copies it to local memory nor
    refuses its address. convert-gpu-to-nvvm drops both attributes from a gpu.func's
    arguments; the kernel names the arguments in `attn.tensor_maps`, and they are put on the
    llvm.func here."""
    branches, funcs = [], []

    def collect(op):
        name = op.name
        if name in ("llvm.br", "llvm.cond_br") and "llvm.loop_annotation" in op.attributes:
            branches.append(op)
        elif name == "llvm.func" and TENSOR_MAPS_ATTR in op.attributes:
            funcs.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    for op in branches:
        op.attributes["loop_annotation"] = op.attributes["llvm.loop_annotation"]
        del op.attributes["llvm.loop_annotation"]
    with module.context:
        marked = sum(_mark_tensor_maps(op) for op in funcs)
    return len(branches), marked


def _mark_tensor_maps(op) -> int:
    attrs = list(ir.ArrayAttr(op.attributes["arg_attrs"]))
    indices = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes[TENSOR_MAPS_ATTR])]
    for i in indices:
        d = ir.DictAttr(attrs[i])
        items = {d[k].name: d[k].attr for k in range(len(d))}
        items["llvm.byval"] = ir.TypeAttr.get(ir.Type.parse(f"!llvm.array<{TENSOR_MAP_BYTES} x i8>"))
        items["llvm.align"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 64)
        items["nvvm.grid_constant"] = ir.UnitAttr.get()
        attrs[i] = ir.DictAttr.get(items)
    op.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
    return len(indices)


# ---------------------------------------------------------------- math -> approx

def _intrinsic(name: str, x: ir.Value, result: ir.Type | None = None) -> ir.Value:
    return llvm.call_intrinsic(result or x.type, name, [x], [], [])


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


# Note [One cvt for int()]: LLVM intrinsic -> the NVVM one that is its one PTX instruction
_SATURATING_INTS = {"llvm.fptosi.sat.i32.f32": "llvm.nvvm.f2i.rz"}


def rewrite_for_nvptx(module: ir.Module, marked: tuple[str, list] | None = None) -> tuple[int, int]:
    """Rewrite, in place and in one walk, f32/f16/bf16 scalar transcendental `math` ops into
    NVVM approximate instructions (Note [No libdevice]) and each call of
    llvm.fptosi.sat.i32.f32 into llvm.nvvm.f2i.rz (Note [One cvt for int()]). Returns how
    many of each were rewritten. `marked` (an attribute's name, a list): the ops that carry
    the attribute are appended to the list, found in the same walk."""
    math_ops: list[ir.Operation] = []
    int_calls: list[ir.Operation] = []
    mark, found = marked or (None, None)

    def collect(op):
        name = op.name
        if name in _APPROX:
            math_ops.append(op)
        elif name == "llvm.call_intrinsic" and \
                ir.StringAttr(op.attributes["intrin"]).value in _SATURATING_INTS:
            int_calls.append(op)
        elif mark is not None and mark in op.attributes:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    f32 = ir.F32Type.get(module.context)
    for op in math_ops:
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
    for op in int_calls:
        name = _SATURATING_INTS[ir.StringAttr(op.attributes["intrin"]).value]
        with ir.InsertionPoint(op), op.location:
            r = _intrinsic(name, op.operands[0], op.results[0].type)
        op.results[0].replace_all_uses_with(r)
        op.erase()
    return len(math_ops), len(int_calls)


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


def to_ptx(module: ir.Module, target: str = "sm_80", *, opt_level: int = 3,
           ptx_feature: str | None = None, in_place: bool = False, rewritten: bool = False) -> str:
    """PTX for the single `gpu.module` of `module`, compiled for `target`.

    The module is left as it was unless `in_place`; an MLIR failure raises `PtxError`
    carrying the diagnostics. Its kernels are lowered apart where that is quicker (Note
    [Kernels apart] in ptx_kernels.py). `rewritten`: `rewrite_for_nvptx` has rewritten it.
    """
    options = PtxOptions(target, opt_level, ptx_feature)
    options.attach_target()                     # an unknown target, refused before anything runs
    with timing.step("MLIR -> PTX"):
        work = module if in_place else _copy(module)
        if not rewritten:
            rewrite_for_nvptx(work)
        kernels = Kernels.of(work)
        if kernels is None or _lanes(len(kernels.names)) == 1:
            return _lower(work, options)
        lowered = _lower_apart(kernels, options)
        head = joined_head([head for head, _ in lowered.values()]) if lowered is not None else None
        if head is None:                        # Note [Kernels apart]: lowered as a whole
            return _lower(work, options)
    return head + "".join(lowered[k][1] for k in range(len(kernels.names)))


def _copy(module: ir.Module) -> ir.Module:
    with module.context, ir.Location.unknown():
        copy = ir.Module.create()
        for name, value in module.operation.attributes.items():
            copy.operation.attributes[name] = value
        for op in module.body.operations:
            op.operation.clone(ip=ir.InsertionPoint(copy.body))
    return copy


def _lanes(count: int) -> int:
    """How many threads lower `count` kernels (Note [Kernels apart]): one per core."""
    if count < 2 or not unlocked.available():
        return 1
    return min(count, len(os.sched_getaffinity(0)))


def _lower_apart(kernels: Kernels, options: PtxOptions) -> dict[int, tuple[str, str]] | None:
    """(head, entry) of each kernel, their parts lowered side by side; None where a part
    fails or its PTX does not split (the module is then lowered whole)."""
    positions = list(range(len(kernels.names)))
    lanes = _lanes(len(positions))
    groups = [positions[k::lanes] for k in range(lanes)]
    payloads = [bytecode(kernels.part(group)) for group in groups]
    beside = [_threads().submit(_lower_unlocked, payload, options) for payload in payloads[1:]]
    ptxs = [_lower_unlocked(payloads[0], options)] + [f.result() for f in beside]
    pieces = {}
    for group, ptx in zip(groups, ptxs):
        split = split_ptx(ptx, kernels.names[:group[-1] + 1]) if ptx is not None else None
        if split is None:
            return None
        head, entries = split
        pieces.update({k: (head, entries[k]) for k in group})
    return pieces


def ptx_of_bytecode(payload: bytes, target: str, *, raising: bool = False) -> str | None:
    """The PTX of the module whose bytecode is `payload` (a module `rewrite_for_nvptx`
    rewrote), for `target`, lowered without the GIL where MLIR's C API can be reached (Note
    [Unlocked runs]), so that a thread may lower it beside others (`beside`); where that
    fails, None, or with `raising` the PtxError of the module lowered again where the
    diagnostics are kept (whole: no part goes to another thread, this one may be one)."""
    options = PtxOptions(target, 3, None)
    with timing.step("MLIR -> PTX"):
        if unlocked.available():
            ptx = _lower_unlocked(payload, options)
            if ptx is not None or not raising:
                return ptx
        from attnc.ir.context import make_context
        try:
            with make_context() as ctx:
                return _lower(ir.Module.parse(payload, ctx), options)
        except (PtxError, ir.MLIRError):
            if raising:
                raise
            return None


def beside(work: Callable[[], T]) -> Callable[[], T]:
    """A function that returns `work()`: run now on a thread of its own where a core is
    idle and MLIR's C API can be reached (Note [Unlocked runs]), else when asked for."""
    from attnc.backend.cubin import idle_core
    if not (unlocked.available() and idle_core()):
        return work
    return _threads().submit(work).result


def bytecode(module: ir.Module) -> bytes:
    """`module` as MLIR bytecode (a fifth of the time of text to write and parse)."""
    out = io.BytesIO()
    module.operation.write_bytecode(out)
    return out.getvalue()


def _lower_unlocked(payload: bytes, options: PtxOptions) -> str | None:
    """The PTX of a part (as bytecode), lowered in a private context without the GIL
    (Note [Unlocked runs]); None where that fails."""
    try:
        return _lower(ir.Module.parse(payload, unlocked.private_context()), options, without_gil=True)
    except (PtxError, ir.MLIRError):
        return None


@functools.lru_cache(maxsize=1)
def _threads() -> ThreadPoolExecutor:
    from concurrent.futures import ThreadPoolExecutor
    return ThreadPoolExecutor(max_workers=max(1, len(os.sched_getaffinity(0)) - 1), thread_name_prefix="attnc-ptx")


def without_bound(ptx: str, kernel: str) -> str | None:
    """`ptx` less the `.minnctapersm` line among `kernel`'s directives (between its
    `.entry` and its body's `{`): the PTX of the kernel built without its register bound
    (Note [A bound dropped]); None where the kernel has no such line."""
    entry = ptx.find(f".entry {kernel}(")
    body = ptx.find("\n{\n", entry)
    if entry < 0 or body < 0:
        return None
    head = ptx[entry:body + 1]
    lines = _BOUND_LINE.findall(head)
    if len(lines) != 1:
        return None
    return ptx[:entry] + head.replace(lines[0], "", 1) + ptx[body + 1:]


_BOUND_LINE = re.compile(r"^\.minnctapersm \d+\n", re.M)


def _lower(work: ir.Module, options: PtxOptions, *, without_gil: bool = False) -> str:
    """The PTX of `work` (rewritten by `rewrite_for_nvptx`), lowered in place; `without_gil`:
    with the GIL let go (a private context's module, Note [Unlocked runs] in unlocked.py), a
    failure without its diagnostics."""
    target = options.target
    try:
        _run(to_llvm_pipeline(options), work, without_gil)
        restore_attributes(work)
        _run(BINARY_PIPELINE, work, without_gil)
    except ir.MLIRError as e:
        raise PtxError(f"lowering to PTX for {target} failed:\n{e}") from None
    binaries = ptx_of_binary(work)
    if len(binaries) != 1:
        raise PtxError(f"expected one gpu.module, found {len(binaries)}")
    ptx = next(iter(binaries.values()))
    if "__nv_" in ptx:
        raise PtxError("the module still calls libdevice (__nv_*); see Note [No libdevice]")
    return ptx


def _run(pipeline: str, work: ir.Module, without_gil: bool) -> None:
    pm = passmanager.PassManager.parse(pipeline, work.context)
    # Verified once, at the end, not after each upstream conversion: that took a quarter
    # of their time (0.25 s of gemma2's sm_80 kernel).
    pm.enable_verifier(False)
    if not without_gil:
        pm.run(work.operation)
    elif not unlocked.run(pm, work.operation):
        raise PtxError(f"lowering to PTX for {pipeline} failed")
    work.operation.verify()                     # raises ir.MLIRError
