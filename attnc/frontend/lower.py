"""Checked `Variant` -> L1 MLIR: one `func.func` whose body is one `attn.attention`.

This is the only frontend module that imports MLIR (the frontend package itself
and the reference import without it; nothing in `attnc/frontend/__init__.py`
imports this file).

    attention gemma2 { ... mask_mod(b, h, i, j) = i >= j and i - j < 4096 ... }
  becomes
    func.func @gemma2(%q: tensor<?x?x?x128xbf16>, %k: ..., %v: ...) -> (tensor<...>, tensor<?x?x?xf32>) {
      %o, %lse = "attn.attention"(%q, %k, %v) ({score_mod}, {
      ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
        %0 = arith.cmpi sge, %i, %j : i32          loc("gemma2.attn":7:28)
        %1 = arith.subi %i, %j : i32               loc("gemma2.attn":7:41)
        ...
        gpu.yield %4 : i1
      }, {sink}) {variant = "gemma2", ...}
      return %o, %lse
    }

The region layout, attributes and the terminator are documented in
attnc/ir/attn.irdl.mlir. Expressions map onto `arith`/`math` one node at a time:
integers are i32, floats f32, booleans i1; an integer operand of a float operation
is converted with `arith.sitofp`; every op carries the location of the DSL node it
came from (for a binary operator, the operator's own position).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, math

from attnc.errors import Span
from attnc.frontend import ast
from attnc.frontend.ast import BOOL, FLOAT, INT
from attnc.frontend.depth import run_deep
from attnc.frontend.variant import Hook, Tensor, Variant
from attnc.ir import ATTENTION, DIM, PARAM, YIELD, int_constant, make_context

NEG_INF = float("-inf")

_CMPI = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}
_CMPF = {"<": "OLT", "<=": "OLE", ">": "OGT", ">=": "OGE", "==": "OEQ", "!=": "UNE"}
_INT_ARITH = {"+": arith.addi, "-": arith.subi, "*": arith.muli}
_FLOAT_ARITH = {"+": arith.addf, "-": arith.subf, "*": arith.mulf, "/": arith.divf}
_MATH = {"exp": math.exp, "exp2": math.exp2, "log": math.log, "log2": math.log2,
         "sqrt": math.sqrt, "rsqrt": math.rsqrt, "tanh": math.tanh,
         "floor": math.floor, "ceil": math.ceil}


def lower(variant: Variant, ctx: ir.Context | None = None) -> ir.Module:
    """The L1 module of `variant`, built in `ctx` (a new context when None)."""
    ctx = ctx or make_context()
    return run_deep(_build, variant, ctx)          # Note [Deep expressions]


def _build(variant: Variant, ctx: ir.Context) -> ir.Module:
    with ctx, ir.Location.unknown():
        return _ModuleBuilder(variant).build()


# --- types and attributes ---------------------------------------------------------------
def element_type(dtype: str) -> ir.Type:
    return {"bf16": ir.BF16Type.get, "f16": ir.F16Type.get, "f32": ir.F32Type.get,
            "i32": lambda: ir.IntegerType.get_signless(32)}[dtype]()


def tensor_type(t: Tensor) -> ir.RankedTensorType:
    """`[B, H, M, 128]` -> tensor<?x?x?x128xbf16>: symbolic dims are dynamic."""
    dynamic = ir.ShapedType.get_dynamic_size()
    shape = [d if isinstance(d, int) else dynamic for d in t.shape]
    return ir.RankedTensorType.get(shape, element_type(t.dtype))


def _i64(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


def _strings(items) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.StringAttr.get(s) for s in items])


def _shape(shape) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([_i64(d) if isinstance(d, int) else ir.StringAttr.get(d)
                             for d in shape])


def attention_attributes(v: Variant) -> dict[str, ir.Attribute]:
    """The L1 attributes of attn.attention (listed in attn.irdl.mlir)."""
    return {
        "variant": ir.StringAttr.get(v.name),
        "dtype": ir.StringAttr.get(v.dtype),
        "head_dim_qk": _i64(v.head_dim_qk),
        "head_dim_v": _i64(v.head_dim_v),
        "scale": ir.FloatAttr.get(ir.F32Type.get(), v.scale),
        "dims": _strings(v.dims),
        "q_shape": _shape(v.q.shape),
        "k_shape": _shape(v.k.shape),
        "v_shape": _shape(v.v.shape),
        "params": _strings(p.name for p in v.params),
        "param_shapes": ir.ArrayAttr.get([_shape(p.shape) for p in v.params]),
        "param_dtypes": _strings(p.dtype for p in v.params),
        "outputs": _strings(t.name for t in v.outputs),
        "gqa": ir.BoolAttr.get(v.heads != v.heads_kv),
        "has_score_mod": ir.BoolAttr.get(v.score_mod is not None),
        "has_mask_mod": ir.BoolAttr.get(v.mask_mod is not None),
        "has_sink": ir.BoolAttr.get(v.sink is not None),
    }


# --- the module -------------------------------------------------------------------------
# Note [Source in the module]
# The L1 module carries its `.attn` text and file name as module attributes, so an
# error of a pass late in the pipeline, or of `attnc opt` on a dumped file, can show the
# user's line. Nothing compiles from it: the lowerings build the kernel from the
# attributes (Note [The variant from the IR] in attnc/ir/kernel.py).


class _ModuleBuilder:
    def __init__(self, variant: Variant):
        self.v = variant

    def loc(self, span: Span) -> ir.Location:
        return ir.Location.file(self.v.filename, span.line, span.col)

    def build(self) -> ir.Module:
        v = self.v
        module = ir.Module.create(self.loc(v.span))
        # The checked source travels with the IR (Note [Source in the module]).
        module.operation.attributes["attn.source"] = ir.StringAttr.get(v.source)
        module.operation.attributes["attn.filename"] = ir.StringAttr.get(v.filename)
        arg_types = [tensor_type(t) for t in v.inputs]
        result_types = [tensor_type(t) for t in v.outputs]
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp(v.name, (arg_types, result_types), loc=self.loc(v.span))
        entry = fn.add_entry_block(arg_locs=[self.loc(t.span) for t in v.inputs])
        q, k, val, *param_args = entry.arguments
        params = {p.name: (arg, p) for p, arg in zip(v.params, param_args)}
        with ir.InsertionPoint(entry):
            op = ir.Operation.create(ATTENTION, results=result_types, operands=[q, k, val],
                                     attributes=attention_attributes(v), regions=3,
                                     loc=self.loc(v.span))
            func.ReturnOp(list(op.results), loc=self.loc(v.span))
        self._score_mod(op.regions[0], params)
        self._mask_mod(op.regions[1], params)
        self._sink(op.regions[2], params)
        return module

    def _region(self, region: ir.Region, types: list[ir.Type], hook: Hook | None) -> ir.Block:
        span = hook.span if hook is not None else self.v.span
        return region.blocks.append(*types, arg_locs=[self.loc(span)] * len(types))

    def _body(self, block: ir.Block, hook: Hook | None, params, neutral) -> None:
        """Lower `hook`'s expression into `block`, or `neutral(block)` when absent."""
        with ir.InsertionPoint(block):
            if hook is None:
                value, span = neutral(block), self.v.span
            else:
                scope = dict(zip(hook.params, block.arguments))
                # score_mod and sink return f32 even when the expression is an integer.
                want = BOOL if hook.name == "mask_mod" else FLOAT
                value = _ExprLowering(self.v.filename, scope, params).emit_as(hook.body, want)
                span = hook.body.span
            ir.Operation.create(YIELD, operands=[value], loc=self.loc(span))

    # The neutral bodies of absent hooks: the score as it is, keep everything, no sink.
    def _score_as_is(self, block: ir.Block) -> ir.Value:
        return block.arguments[0]

    def _keep_all(self, block: ir.Block) -> ir.Value:
        return arith.constant(ir.IntegerType.get_signless(1), 1, loc=self.loc(self.v.span))

    def _no_sink(self, block: ir.Block) -> ir.Value:
        return arith.constant(ir.F32Type.get(), NEG_INF, loc=self.loc(self.v.span))

    def _score_mod(self, region: ir.Region, params) -> None:
        i32, f32 = ir.IntegerType.get_signless(32), ir.F32Type.get()
        block = self._region(region, [f32, i32, i32, i32, i32], self.v.score_mod)
        self._body(block, self.v.score_mod, params, self._score_as_is)

    def _mask_mod(self, region: ir.Region, params) -> None:
        block = self._region(region, [ir.IntegerType.get_signless(32)] * 4, self.v.mask_mod)
        self._body(block, self.v.mask_mod, params, self._keep_all)

    def _sink(self, region: ir.Region, params) -> None:
        block = self._region(region, [ir.IntegerType.get_signless(32)], self.v.sink)
        self._body(block, self.v.sink, params, self._no_sink)


# --- expressions ------------------------------------------------------------------------
class _ExprLowering:
    """One hook body -> arith/math ops at the current insertion point."""

    def __init__(self, filename: str, scope: dict[str, ir.Value], params: dict):
        self.filename = filename
        self.scope = scope
        self.params = params          # name -> (function argument, Tensor)

    def loc(self, span: Span) -> ir.Location:
        return ir.Location.file(self.filename, span.line, span.col)

    def emit(self, e: ast.Expr) -> ir.Value:
        return getattr(self, "_" + type(e).__name__.lower())(e)

    def emit_as(self, e: ast.Expr, ty: str) -> ir.Value:
        """`e` lowered and, when it is an integer and `ty` is FLOAT, converted."""
        value = self.emit(e)
        if ty == FLOAT and e.ty == INT:
            return arith.sitofp(ir.F32Type.get(), value, loc=self.loc(e.span))
        return value

    def constant(self, ty: str, value, span: Span) -> ir.Value:
        mlir_ty = ir.F32Type.get() if ty == FLOAT else ir.IntegerType.get_signless(
            1 if ty == BOOL else 32)
        return arith.constant(mlir_ty, value, loc=self.loc(span))

    # leaves
    def _num(self, e: ast.Num) -> ir.Value:
        return self.constant(FLOAT if e.is_float else INT, e.value, e.span)

    def _name(self, e: ast.Name) -> ir.Value:
        if e.id in self.scope:
            return self.scope[e.id]
        if isinstance(e.stands_for, int):         # Note [Canonical dims] in sema.py
            return self.constant(INT, e.stands_for, e.span)
        name = e.stands_for or e.id
        op = ir.Operation.create(DIM, results=[ir.IntegerType.get_signless(32)],
                                 attributes={"name": ir.StringAttr.get(name)}, loc=self.loc(e.span))
        return op.result

    def _index(self, e: ast.Index) -> ir.Value:
        tensor, decl = self.params[e.name]
        indices = [self.emit(a) for a in e.args]
        result = ir.F32Type.get() if decl.dtype == "f32" else ir.IntegerType.get_signless(32)
        op = ir.Operation.create(PARAM, results=[result], operands=[tensor, *indices],
                                 loc=self.loc(e.span))
        return op.result

    def _let(self, e: ast.Let) -> ir.Value:
        value = self.emit(e.value)
        inner = _ExprLowering(self.filename, {**self.scope, e.name: value}, self.params)
        return inner.emit(e.body)

    # operators
    def _unary(self, e: ast.Unary) -> ir.Value:
        x = self.emit(e.operand)
        loc = self.loc(e.span)
        if e.op == "+":
            return x
        if e.op == "not":
            return arith.xori(x, self.constant(BOOL, 1, e.span), loc=loc)
        if e.ty == FLOAT:
            return arith.negf(x, loc=loc)
        return arith.subi(self.constant(INT, 0, e.span), x, loc=loc)

    def _binary(self, e: ast.Binary) -> ir.Value:
        op, loc = e.op, self.loc(e.op_span or e.span)
        if op in ("and", "or"):
            lhs, rhs = self.emit(e.lhs), self.emit(e.rhs)
            return (arith.andi if op == "and" else arith.ori)(lhs, rhs, loc=loc)
        if op in _CMPI:
            return self._compare(e, loc)
        if op == "//":
            return arith.floordivsi(self.emit(e.lhs), self.emit(e.rhs), loc=loc)
        if op == "%":
            return self._floor_mod(e, loc)
        operand_ty = FLOAT if e.ty == FLOAT else INT
        lhs, rhs = self.emit_as(e.lhs, operand_ty), self.emit_as(e.rhs, operand_ty)
        table = _FLOAT_ARITH if operand_ty == FLOAT else _INT_ARITH
        return table[op](lhs, rhs, loc=loc)

    def _compare(self, e: ast.Binary, loc: ir.Location) -> ir.Value:
        if FLOAT in (e.lhs.ty, e.rhs.ty):
            lhs, rhs = self.emit_as(e.lhs, FLOAT), self.emit_as(e.rhs, FLOAT)
            return arith.cmpf(getattr(arith.CmpFPredicate, _CMPF[e.op]), lhs, rhs, loc=loc)
        lhs, rhs = self.emit(e.lhs), self.emit(e.rhs)       # integers, or booleans (==, !=)
        return arith.cmpi(getattr(arith.CmpIPredicate, _CMPI[e.op]), lhs, rhs, loc=loc)

    def _floor_mod(self, e: ast.Binary, loc: ir.Location) -> ir.Value:
        """Python's `a % b` (the sign of b): a - floordiv(a, b) * b; and 0 when b is 0, as
        the reference's `%` gives (Note [Total arithmetic] in reference_eval.py), where
        the subtraction alone would give a (floordiv by 0 is 0). A nonzero constant
        divisor needs no select."""
        a, b = self.emit(e.lhs), self.emit(e.rhs)
        quotient = arith.floordivsi(a, b, loc=loc)
        rem = arith.subi(a, arith.muli(quotient, b, loc=loc), loc=loc)
        if int_constant(b) not in (None, 0):
            return rem
        zero = arith.constant(b.type, 0, loc=loc)
        return arith.select(arith.cmpi(arith.CmpIPredicate.eq, b, zero, loc=loc), zero, rem, loc=loc)

    # builtins
    def _call(self, e: ast.Call) -> ir.Value:
        loc = self.loc(e.span)
        fn, args = e.fn, e.args
        if fn in _MATH:
            return _MATH[fn](self.emit_as(args[0], FLOAT), loc=loc)
        if fn == "sigmoid":
            return self._sigmoid(self.emit_as(args[0], FLOAT), e.span)
        if fn == "abs":
            return (math.absf if e.ty == FLOAT else math.absi)(self.emit(args[0]), loc=loc)
        if fn in ("min", "max"):
            return self._min_max(e, loc)
        if fn == "where":
            cond = self.emit(args[0])
            return arith.select(cond, self.emit_as(args[1], e.ty), self.emit_as(args[2], e.ty),
                                loc=loc)
        if fn == "int":
            x = self.emit(args[0])
            if args[0].ty == INT:
                return x
            return arith.fptosi(ir.IntegerType.get_signless(32), x, loc=loc)
        if fn == "float":
            return self.emit_as(args[0], FLOAT)
        raise NotImplementedError(f"no lowering for the builtin '{fn}'")

    def _min_max(self, e: ast.Call, loc: ir.Location) -> ir.Value:
        lhs, rhs = (self.emit_as(a, e.ty) for a in e.args)
        if e.ty == FLOAT:
            op = arith.minimumf if e.fn == "min" else arith.maximumf
        else:
            op = arith.minsi if e.fn == "min" else arith.maxsi
        return op(lhs, rhs, loc=loc)

    def _sigmoid(self, x: ir.Value, span: Span) -> ir.Value:
        """1 / (1 + exp(-x))."""
        loc = self.loc(span)
        one = self.constant(FLOAT, 1.0, span)
        denominator = arith.addf(one, math.exp(arith.negf(x, loc=loc), loc=loc), loc=loc)
        return arith.divf(one, denominator, loc=loc)
