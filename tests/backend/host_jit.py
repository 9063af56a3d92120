"""Run kernel-side hook code on the CPU: a host function around what a hook emits,
lowered to LLVM and JIT-compiled with MLIR's ExecutionEngine.

    run = host_function({"M": "i32", "ptr:slopes": "ptr", "s": "f32", ...},
                        lambda e, a: [hook(e, a["s"], ...)])
    run(M=100, slopes=np.array(...), s=1.5, ...)       # -> [result, ...] as Python numbers

Arguments are scalars (i32, f32) or param arrays (numpy, contiguous, passed by
pointer); results are i1/i32/f32 values, returned through an output array. The
emitted code is the kernel's (hooks.py), down to the clamped loads and the floor
division expansion; only `math` ops run through libm here instead of the GPU's
approximate instructions.
"""
from __future__ import annotations

import ctypes
from typing import Callable, Mapping

import numpy as np
from mlir import execution_engine, ir, passmanager
from mlir.dialects import arith, func, llvm

from attnc.backend.nvgpu_builders import Emit

_LOWER = ("builtin.module(convert-math-to-llvm,convert-math-to-libm,convert-scf-to-cf,"
          "convert-arith-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts)")


def host_function(args: Mapping[str, str], body: Callable, context: ir.Context | None = None) -> Callable:
    """A callable running `body(e, values)` (values: the block arguments by name) on the CPU."""
    ctx = context or ir.Context.current
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        types = {"i32": ir.IntegerType.get_signless(32), "f32": ir.F32Type.get(),
                 "ptr": ir.Type.parse("!llvm.ptr<1>")}
        out_ptr = ir.Type.parse("!llvm.ptr")
        names = list(args)
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("hook", ([types[args[n]] for n in names] + [out_ptr], []))
            fn.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            block = fn.add_entry_block()
        with ir.InsertionPoint(block):
            values = dict(zip(names, block.arguments))
            e = Emit(values)
            results = body(e, values)
            result_types = ["f32" if isinstance(r.type, ir.F32Type) else "i32" for r in results]
            i32 = types["i32"]
            for k, r in enumerate(results):
                if isinstance(r.type, ir.IntegerType) and r.type.width == 1:
                    r = arith.extui(i32, r)
                slot = llvm.GEPOp(out_ptr, block.arguments[-1], [], [k], i32, 0).result
                llvm.store(r, slot)
            func.ReturnOp([])
        passmanager.PassManager.parse(_LOWER).run(module.operation)
        engine = execution_engine.ExecutionEngine(module, opt_level=2)
    kinds = [args[n] for n in names]
    count = len(result_types)

    def run(**values):
        keep_alive, pointers = [], []
        for name, kind in zip(names, kinds):
            v = values[name.split(":")[-1]]
            if kind == "ptr":
                arr = np.ascontiguousarray(v)
                keep_alive.append(arr)
                c = ctypes.c_void_p(arr.ctypes.data)
            elif kind == "f32":
                c = ctypes.c_float(v)
            else:
                c = ctypes.c_int32(int(v))
            keep_alive.append(c)
            pointers.append(ctypes.pointer(c))
        out = np.zeros(count, dtype=np.int32)
        out_c = ctypes.c_void_p(out.ctypes.data)
        engine.invoke("hook", *pointers, ctypes.pointer(out_c))
        return [float(out[k:k + 1].view(np.float32)[0]) if t == "f32" else int(out[k])
                for k, t in enumerate(result_types)]

    run.engine = engine         # keeps the JIT alive with the callable
    return run
