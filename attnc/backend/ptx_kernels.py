"""The kernels of a gpu.module, lowered to PTX apart and joined (Note [Kernels apart]).

    kernels = Kernels.of(module)            # None: a module lowered as a whole
    part = kernels.part([1])                # kernel 1 alone; kernel 0 a stub before it
    head, entries = split_ptx(ptx, kernels.names[:2])
    ptx == head + "".join(entries)          # the whole module's PTX, from its kernels' parts

Note [Kernels apart]: a module may hold two or three kernels (sm_80's tiles_last kernel,
Note [Small grids] in kernel_abi.py; a block map, a tile table), which LLVM lowers one
after the other; lowered apart, on two cores (Note [Unlocked runs] in unlocked.py), they
take about the time of the largest. LLVM's NVPTX backend prints a module as a head (the
PTX version and target, then, after the first kernel's `// .globl` line, the module's
globals) and each kernel's entry in order, and what it prints of a kernel depends on the
kernel, the module's globals and target, and the kernel's position among the module's
functions (its basic blocks' labels are `$L__BB<position>_<n>`). So a part is the
gpu.module with its globals, the kernels asked for, and each kernel before them as a
stub (its signature and attributes, an empty body) holding its place; the kernels after
them are left out. The whole module's PTX is the head and the entries of the parts,
byte for byte. A head declares the globals its part's kernels use (LLVM drops the
others), the whole module's those any kernel uses: of the parts' heads, the one that
holds the lines of every other is the whole module's; where none does, the module is
lowered as a whole.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import gpu

GPU_FUNC = "gpu.func"
_GLOBALS = ("llvm.mlir.global",)                      # the ops besides kernels a module may hold


@dataclass
class Kernels:
    """The kernels of `module`'s only gpu.module, in order."""

    module: ir.Module
    gpu_module: ir.Operation
    funcs: list[ir.Operation]
    names: list[str]

    @classmethod
    def of(cls, module: ir.Module) -> Kernels | None:
        """None where the module is not one gpu.module of kernels and globals."""
        body = [op.operation for op in module.body.operations]
        if len(body) != 1 or body[0].name != "gpu.module":
            return None
        funcs = []
        for op in body[0].regions[0].blocks[0].operations:
            op = op.operation
            if op.name == GPU_FUNC and "gpu.kernel" in op.attributes:
                funcs.append(op)
            elif op.name not in _GLOBALS:
                return None
        if not funcs:
            return None
        return cls(module, body[0], funcs, [ir.StringAttr(f.attributes["sym_name"]).value for f in funcs])

    def part(self, kernels: list[int]) -> ir.Module:
        """A new module (in this one's context) holding `kernels` (positions, ascending),
        each kernel before the last of them that is not asked for as a stub."""
        last = kernels[-1]
        with self.module.context, ir.Location.unknown():
            part = ir.Module.create()
            for name, value in self.module.operation.attributes.items():
                part.operation.attributes[name] = value
            gpu_module = self.gpu_module.clone(ip=ir.InsertionPoint(part.body))
            funcs = [op.operation for op in gpu_module.regions[0].blocks[0].operations
                     if op.operation.name == GPU_FUNC]
            for position, func in enumerate(funcs):
                if position > last:
                    func.erase()
                elif position not in kernels:
                    _stub(func)
        return part


def _stub(func: ir.Operation) -> None:
    """Replace `func` by a kernel of its name, type and attributes that returns at once."""
    inputs = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).inputs
    stub = ir.Operation.create(GPU_FUNC, attributes=dict(func.attributes.items()), regions=1,
                               ip=ir.InsertionPoint(func))
    entry = stub.regions[0].blocks.append(*inputs)
    with ir.InsertionPoint(entry):
        gpu.ReturnOp([])
    func.erase()


# The `// .globl` line LLVM prints before each visible kernel, and a kernel's first line.
_GLOBL = re.compile(r"^\t// \.globl\t(\S+)\n", re.M)
_ENTRY = re.compile(r"^(?:\.\w+[ \t]+)*\.entry[ \t]", re.M)


def joined_head(heads: list[str]) -> str | None:
    """The head of the whole module's PTX, of its parts' `heads`: the one that holds the
    lines of each other, in order; None where none does (Note [Kernels apart])."""
    lines = [head.splitlines(keepends=True) for head in set(heads)]
    full = max(lines, key=len)
    return "".join(full) if all(_within(other, full) for other in lines) else None


def _within(lines: list[str], full: list[str]) -> bool:
    rest = iter(full)
    return all(line in rest for line in lines)


def split_ptx(ptx: str, names: list[str]) -> tuple[str, list[str]] | None:
    """(head, each kernel's entry) of the PTX of a module of the kernels `names`, in
    order; None where it is not so made. The first kernel's `// .globl` line and the
    globals after it are the head's."""
    marks = list(_GLOBL.finditer(ptx))
    if [m[1] for m in marks] != names:
        return None
    first = _ENTRY.search(ptx, marks[0].end())
    if first is None or (len(marks) > 1 and first.start() > marks[1].start()):
        return None
    starts = [first.start()] + [m.start() for m in marks[1:]]
    ends = starts[1:] + [len(ptx)]
    return ptx[:first.start()], [ptx[s:e] for s, e in zip(starts, ends)]
