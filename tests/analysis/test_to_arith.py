"""Symbolic expressions emitted as arith (to_arith) compute what `evaluate` says, as
run by the arith interpreter (interp); and the interpreter follows MLIR's semantics."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from mlir import ir
from mlir.dialects import func
from test_symbolic import NAMES, _bool_tree, _int_tree, build

from attnc.analysis.interp import compile_function
from attnc.analysis.symbolic import Builder, evaluate
from attnc.analysis.to_arith import emit_function, inline_function
from attnc.ir import make_context, parse_module


def emitted(S, exprs, names=None):
    ctx = make_context()
    with ctx, ir.Location.unknown() as loc:
        module = ir.Module.create()
        fn = emit_function("f", NAMES, exprs, loc=loc, ip=ir.InsertionPoint(module.body),
                           names=names)
        assert module.operation.verify()
        return compile_function(fn), module


envs = st.fixed_dictionaries({n: st.integers(-30, 30) for n in NAMES})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_int_tree(3), _bool_tree(2)), min_size=1, max_size=3),
       st.lists(envs, min_size=1, max_size=4))
def test_emitted_code_computes_the_expression(trees, env_list):
    S = Builder()
    exprs = [build(S, t) for t in trees]
    ints = [S.select(e, S.const(1), S.const(0)) if e.is_bool else e for e in exprs]
    run, _ = emitted(S, ints)
    for env in env_list:
        assert run(*(env[n] for n in NAMES)) == tuple(evaluate(e, env) for e in ints)


def test_inlined_copy_computes_the_same():
    S = Builder()
    x, y, z = (S.sym(n) for n in NAMES)
    e = S.select(S.lt(x, y), S.floordiv(S.add(x, z), S.const(7)), S.max(y, z))
    run, module = emitted(S, [e])
    with module.context, ir.Location.unknown():
        i32 = ir.IntegerType.get_signless(32)
        caller = func.FuncOp("caller", ir.FunctionType.get([i32] * 3, [i32]),
                             ip=ir.InsertionPoint(module.body))
        block = caller.add_entry_block()
        with ir.InsertionPoint(block):
            a, b, c = block.arguments
            func.ReturnOp(inline_function(module.body.operations[0], [c, b, a]))
        assert module.operation.verify()
    inlined = compile_function(caller)
    for env in ({"x": 3, "y": 9, "z": -4}, {"x": 20, "y": 1, "z": 5}):
        assert inlined(env["z"], env["y"], env["x"]) == run(env["x"], env["y"], env["z"])


def test_names_become_name_locations():
    S = Builder()
    x, y = S.sym("x"), S.sym("y")
    keep = S.lt(x, y)
    _, module = emitted(S, [S.select(keep, S.const(1), S.const(0))], names={keep: "keep"})
    text = module.operation.get_asm(use_name_loc_as_prefix=True)
    assert "%keep = arith.cmpi slt, %0, %1 : i64" in text
    assert "func.func private @f(%x: i32, %y: i32, %z: i32) -> i32" in text


def test_interpreter_wraps_to_the_result_width():
    module = parse_module("""
      func.func @f(%a: i64) -> (i32, i1) {
        %t = arith.trunci %a : i64 to i32
        %c = arith.constant true
        %n = arith.xori %c, %c : i1
        return %t, %n : i32, i1
      }""")
    run = compile_function(module.body.operations[0])
    assert run((1 << 32) + 5) == (5, 0)
    assert run((1 << 31) + 1) == (-(1 << 31) + 1, 0)


def test_interpreter_refuses_what_it_does_not_know():
    module = parse_module("""
      func.func @f(%a: i32) -> i32 {
        %r = arith.remsi %a, %a : i32
        return %r : i32
      }""")
    with pytest.raises(NotImplementedError, match="arith.remsi"):
        compile_function(module.body.operations[0])
