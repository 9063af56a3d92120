"""Note [Unlocked runs] in attnc/backend/unlocked.py: a pass manager run with the GIL let go,
in a private context, answers whether it succeeded and prints nothing either way."""
from __future__ import annotations

import pytest
from mlir import ir, passmanager

from attnc.backend import unlocked
from attnc.backend.ptx import BINARY_PIPELINE

pytestmark = pytest.mark.skipif(not unlocked.available(), reason="MLIR's C API library is not there to call")

UNLOWERED = """module attributes {gpu.container_module} { gpu.module @m [#nvvm.target] {
  gpu.func @k(%a: index) kernel { %b = arith.addi %a, %a : index
    gpu.return } } }"""


def test_a_run_answers_whether_it_succeeded_quietly(capfd):
    ctx = unlocked.private_context()
    fine = ir.Module.parse("module { func.func @f() { return } }", ctx)
    assert unlocked.run(passmanager.PassManager.parse("builtin.module(canonicalize)", ctx), fine.operation)
    failing = ir.Module.parse(UNLOWERED, ctx)            # gpu.func is not LLVM: no PTX
    assert not unlocked.run(passmanager.PassManager.parse(BINARY_PIPELINE, ctx), failing.operation)
    assert capfd.readouterr() == ("", "")
