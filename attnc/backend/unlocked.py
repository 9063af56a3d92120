"""A pass pipeline run without holding Python's GIL, so that two threads lower two modules
to PTX at once (Note [Kernels apart] in ptx_kernels.py).

    ctx = private_context()          # None where MLIR's C API cannot be reached
    module = ir.Module.parse(bytecode, ctx)
    ok = run(PassManager.parse(pipeline, ctx), module.operation)

Note [Unlocked runs]: the bindings' `PassManager.run` holds the GIL while LLVM works, and
two threads lowering two kernels took as long as one after the other. MLIR's C API,
called through ctypes, runs the same pass manager with the GIL let go. Nothing of
Python may run meanwhile, so the context is a private one: no Python diagnostic handler
(the bindings' would touch Python objects without the GIL), but a C one that keeps
the diagnostics off the terminal; `run` answers only whether the pipeline succeeded,
and a caller that wants the diagnostics runs it again the usual way.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from mlir import ir


class _Handle(ctypes.Structure):          # MlirContext, MlirPassManager, MlirOperation, MlirDiagnostic
    _fields_ = [("ptr", ctypes.c_void_p)]


# MlirLogicalResult, a struct of one int8_t, is returned as that int8_t is (and ctypes's
# callbacks return no structs).
_RESULT = ctypes.c_int8
_DIAGNOSTIC_HANDLER = ctypes.CFUNCTYPE(_RESULT, _Handle, ctypes.c_void_p)


@functools.lru_cache(maxsize=1)
def _capi():
    """The bindings' C API library, the two functions called typed; None where it is not
    there to call."""
    import mlir._mlir_libs as libs
    try:
        lib = ctypes.CDLL(str(Path(libs.__file__).parent / "libMLIRPythonCAPI.so"))
        lib.mlirPassManagerRunOnOp.argtypes = [_Handle, _Handle]
        lib.mlirPassManagerRunOnOp.restype = _RESULT
        lib.mlirContextAttachDiagnosticHandler.argtypes = [_Handle, _DIAGNOSTIC_HANDLER, ctypes.c_void_p,
                                                           ctypes.c_void_p]
        lib.mlirContextAttachDiagnosticHandler.restype = ctypes.c_uint64
    except (OSError, AttributeError):
        return None
    return lib


# A function object of our own (ctypes.pythonapi's is shared, its types anyone's to set).
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def _pointer(obj, kind: str) -> _Handle:
    """The C handle a bindings object carries (`kind`: its class, as its capsule names it)."""
    return _Handle(_capsule_pointer(obj._CAPIPtr, f"mlir.{kind}._CAPIPtr".encode()))


@_DIAGNOSTIC_HANDLER
def _silent(diagnostic, user_data):
    return 1                              # handled: nothing printed


def available() -> bool:
    return _capi() is not None


def private_context() -> ir.Context | None:
    """A fresh context for `run`, its diagnostics kept quiet; None without the C API."""
    lib = _capi()
    if lib is None:
        return None
    ctx = ir.Context()
    lib.mlirContextAttachDiagnosticHandler(_pointer(ctx, "ir.Context"), _silent, None, None)
    return ctx


def run(pm, op: ir.Operation) -> bool:
    """Run `pm` on `op` (of a `private_context`) with the GIL let go; whether it succeeded."""
    return bool(_capi().mlirPassManagerRunOnOp(_pointer(pm, "passmanager.PassManager"),
                                               _pointer(op, "ir.Operation")))
