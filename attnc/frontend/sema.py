"""Semantic checks: `ast.AttentionDecl` -> `variant.Variant`, or an `AttncError`.

Checks, in order: declarations (unknown kinds, duplicates), tensor types (dtypes,
ranks, dim names), the q/k/v/o/lse shape contract (batch, heads, sequence and head
dims agree, GQA divisibility when the head counts are numbers, supported head
dims), params, hooks (names, arity, parameter names) and then every expression is
typed (INT / FLOAT / BOOL) in place. The first problem found is reported.
"""
from __future__ import annotations

import dataclasses
import math
import operator
import struct

from attnc.errors import AttncError, AttncWarning, Span
from attnc.frontend import ast
from attnc.frontend.ast import BOOL, FLOAT, INT
from attnc.frontend.depth import MAX_HOOK_DEPTH, run_deep
from attnc.frontend.parser import nearest_f32
from attnc.frontend.variant import Hook, Tensor, Variant
from attnc_runtime.manifest import RESERVED_NAMES   # keywords of a launch

DTYPES = ("bf16", "f16", "f32", "i32")
INPUT_DTYPES = ("bf16", "f16")
OUTPUT_DTYPES = ("bf16", "f16", "f32")
PARAM_DTYPES = ("f32", "i32")
HEAD_DIMS = (64, 96, 128, 256)

HOOK_PARAMS = {            # hook -> (conventional names, types)
    "score_mod": (("s", "b", "h", "i", "j"), (FLOAT, INT, INT, INT, INT)),
    "mask_mod": (("b", "h", "i", "j"), (INT, INT, INT, INT)),
    "sink": (("h",), (INT,)),
}

# name -> (arity, result rule): 'float' always float, 'same' keeps a numeric type,
# 'promote' is the common numeric type, 'int' casts.
FLOAT_FUNCS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "floor", "ceil")
BUILTINS = {**{f: (1, "float") for f in FLOAT_FUNCS},
            "abs": (1, "same"), "min": (2, "promote"), "max": (2, "promote"),
            "int": (1, "int"), "float": (1, "float"), "where": (3, "where")}

ARITH_OPS = ("+", "-", "*")
INT_OPS = ("//", "%")
ORDER_OPS = ("<", "<=", ">", ">=")
EQ_OPS = ("==", "!=")
BOOL_OPS = ("and", "or")


def check(decl: ast.AttentionDecl, source: str = "", filename: str = "<input>") -> Variant:
    try:
        return run_deep(_Checker(decl).variant, source, filename)     # Note [Deep expressions]
    except AttncError as e:
        raise e.located(filename, source) from None


def _type_name(ty: str) -> str:
    return {INT: "an integer", FLOAT: "a float", BOOL: "a boolean"}[ty]


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


class _Checker:
    def __init__(self, decl: ast.AttentionDecl):
        self.decl = decl
        self.tensors: dict[str, ast.TensorDecl] = {}
        self.hooks: dict[str, ast.HookDecl] = {}
        self.extra_dims: dict[str, Span] = {}
        self.scale: ast.ScaleDecl | None = None

    # --- declarations ------------------------------------------------------
    def variant(self, source: str, filename: str) -> Variant:
        self._collect()
        q, k, v = (self._input(n) for n in ("q", "k", "v"))
        self._check_qkv(q, k, v)
        outputs = self._outputs(q, v)
        aliases = self._aliases(q, k, v)
        params = tuple(self._param(t, aliases) for t in self.tensors.values() if t.kind == "param")
        tensors = (q, k, v, *outputs, *params)
        dims = self._dims(tensors)
        hooks = {name: self._hook(h, dims, params, aliases) for name, h in self.hooks.items()}
        unused = self._unused_dims(tensors, hooks)
        warnings = tuple(AttncWarning(f"dim '{name}' is declared but never used: no kernel reads it, and a "
                                      f"launch need not pass it", self.extra_dims[name],
                                      filename=filename, source=source) for name in unused)
        return Variant(
            name=self.decl.name, q=q, k=k, v=v, params=params, outputs=outputs, dims=dims,
            scale=self._scale(q), score_mod=hooks.get("score_mod"), mask_mod=hooks.get("mask_mod"),
            sink=hooks.get("sink"), source=source, filename=filename, span=self.decl.span,
            unused_dims=unused, warnings=warnings)

    def _unused_dims(self, tensors, hooks: dict[str, Hook]) -> tuple[str, ...]:
        """The `dim`s that no shape and no hook uses: legal, but likely leftovers (a warning).
        Nothing reads them, so neither the bundle's launch (Manifest.read_dims) nor the
        reference requires them."""
        used = {d for t in tensors for d in t.shape if isinstance(d, str)}
        for hook in hooks.values():
            used |= _names_in(hook.body)
        return tuple(name for name in self.extra_dims if name not in used)

    def _collect(self) -> None:
        seen: dict[str, Span] = {}

        def claim(name: str, span: Span, what: str) -> None:
            if name in seen:
                first = seen[name]
                raise AttncError(f"duplicate declaration of {what} '{name}' "
                                 f"(first declared at line {first.line})", span)
            seen[name] = span

        for d in self.decl.decls:
            if isinstance(d, ast.TensorDecl):
                if d.name in RESERVED_NAMES:
                    raise AttncError(f"'{d.name}' is reserved (a keyword of {RESERVED_NAMES[d.name]}): "
                                     "rename it", d.span)
                claim(d.name, d.span, "tensor")
                self.tensors[d.name] = d
            elif isinstance(d, ast.DimDecl):
                for name, span in zip(d.names, d.spans):
                    _check_dim_name(name, span)
                    claim(name, span, "dim")
                    self.extra_dims[name] = span
            elif isinstance(d, ast.ScaleDecl):
                if self.scale is not None:
                    raise AttncError(f"duplicate 'scale' (first given at line {self.scale.span.line})",
                                     d.span)
                self.scale = d
            else:
                if d.name not in HOOK_PARAMS:
                    raise AttncError(f"unknown hook '{d.name}'; hooks are score_mod, mask_mod and sink",
                                     d.span)
                if d.name in self.hooks:
                    raise AttncError(f"duplicate definition of '{d.name}' "
                                     f"(first defined at line {self.hooks[d.name].span.line})", d.span)
                self.hooks[d.name] = d
        for name, t in self.tensors.items():
            if t.kind == "param" and name in ("q", "k", "v", "o", "lse"):
                decl = f"{name}:" if name in ("q", "k", "v") else f"out {name}:"
                raise AttncError(f"'{name}' cannot name a param: declare it as '{decl} ...'", t.span)
            if t.kind == "input" and name not in ("q", "k", "v"):
                raise AttncError(f"unknown input '{name}': the inputs are q, k and v; "
                                 f"declare other tensors with 'param'", t.span)
            if t.kind == "out" and name not in ("o", "lse"):
                raise AttncError(f"unknown output '{name}': the outputs are o and lse", t.span)

    def _tensor_type(self, t: ast.TensorDecl, role: str) -> Tensor:
        ty = t.type
        if ty.dtype not in DTYPES:
            raise AttncError(f"unknown dtype '{ty.dtype}'; expected one of {', '.join(DTYPES)}",
                             ty.dtype_span)
        for axis, (item, span) in enumerate(zip(ty.shape, ty.shape_spans)):
            if isinstance(item, str):
                _check_dim_name(item, span)
            elif item < 1:
                raise AttncError(f"'{t.name}' has size {item} on axis {axis}; a size is at least 1", span)
        return Tensor(t.name, role, ty.dtype, ty.shape, t.span)

    def _input(self, name: str) -> Tensor:
        t = self.tensors.get(name)
        if t is None or t.kind != "input":
            raise AttncError(f"missing input '{name}': declare '{name}: bf16[...]'", self.decl.name_span)
        tensor = self._tensor_type(t, name)
        if tensor.dtype not in INPUT_DTYPES:
            raise AttncError(f"'{name}' has dtype {tensor.dtype}; q, k and v must be f16 or bf16",
                             t.type.dtype_span)
        if len(tensor.shape) != 4:
            want = "[B, H, M, D]" if name == "q" else "[B, HKV, N, D]"
            raise AttncError(f"'{name}' must have 4 dimensions {want}, got {len(tensor.shape)}", t.span)
        head = tensor.shape[3]
        if not isinstance(head, int):
            raise AttncError(f"the head dim of '{name}' must be a number, got '{head}'",
                             t.type.shape_spans[3])
        if head not in HEAD_DIMS:
            raise AttncError(f"head dim {head} is not supported; supported head dims are "
                             f"{', '.join(map(str, HEAD_DIMS))}", t.type.shape_spans[3])
        return tensor

    def _check_qkv(self, q: Tensor, k: Tensor, v: Tensor) -> None:
        spans = {n: self.tensors[n].type for n in "qkv"}
        for t in (k, v):
            if t.dtype != q.dtype:
                raise AttncError(f"'{t.name}' has dtype {t.dtype} but q has {q.dtype}",
                                 spans[t.name].dtype_span)
        if k.shape[0] != q.shape[0]:
            raise AttncError(f"the batch dim of k is '{k.shape[0]}' but q has '{q.shape[0]}'",
                             spans["k"].shape_spans[0])
        for axis in range(3):
            if v.shape[axis] != k.shape[axis]:
                raise AttncError(f"v must have the same [B, HKV, N] as k: {_fmt_shape(k.shape[:3])}, "
                                 f"got {_fmt_shape(v.shape[:3])}", spans["v"].shape_spans[axis])
        if k.shape[3] != q.shape[3]:
            raise AttncError(f"QK head dims differ: q has {q.shape[3]}, k has {k.shape[3]}",
                             spans["k"].shape_spans[3])
        h, hkv = q.shape[1], k.shape[1]
        if isinstance(h, int) and isinstance(hkv, int) and h % hkv:
            raise AttncError(f"query heads ({h}) must be a multiple of key/value heads ({hkv}) for GQA",
                             spans["k"].shape_spans[1])

    def _outputs(self, q: Tensor, v: Tensor) -> tuple[Tensor, ...]:
        o = self.tensors.get("o")
        if o is None:
            raise AttncError(f"missing output: declare 'out o: {q.dtype}{_fmt_shape((*q.shape[:3], v.shape[3]))}'",
                             self.decl.name_span)
        out = self._tensor_type(o, "o")
        if out.dtype not in OUTPUT_DTYPES:
            raise AttncError(f"'o' has dtype {out.dtype}; outputs must be bf16, f16 or f32",
                             o.type.dtype_span)
        want = (*q.shape[:3], v.shape[3])
        if out.shape != want:
            raise AttncError(f"'o' must have shape {_fmt_shape(want)}, got {_fmt_shape(out.shape)}", o.span)
        outputs = [out]
        lse = self.tensors.get("lse")
        if lse is not None:
            t = self._tensor_type(lse, "lse")
            if t.dtype != "f32":
                raise AttncError(f"'lse' must be f32, got {t.dtype}", lse.type.dtype_span)
            if t.shape != q.shape[:3]:
                raise AttncError(f"'lse' must have shape {_fmt_shape(q.shape[:3])}, "
                                 f"got {_fmt_shape(t.shape)}", lse.span)
            outputs.append(t)
        return tuple(outputs)

    def _param(self, t: ast.TensorDecl, aliases: dict[str, int | str]) -> Tensor:
        tensor = self._tensor_type(t, "param")
        # Note [Canonical dims]: `f32[H]` where q's heads are 8 is `f32[8]`, not a new dim H
        tensor = dataclasses.replace(tensor, shape=tuple(aliases.get(d, d) if isinstance(d, str) else d
                                                         for d in tensor.shape))
        if tensor.dtype not in PARAM_DTYPES:
            raise AttncError(f"param '{t.name}' has dtype {tensor.dtype}; params must be f32 or i32",
                             t.type.dtype_span)
        if not tensor.shape:
            raise AttncError(f"param '{t.name}' needs at least one dimension "
                             f"(use 'dim {t.name.upper()}' for a runtime integer)", t.span)
        return tensor

    def _dims(self, tensors) -> tuple[str, ...]:
        dims = dict.fromkeys(d for t in tensors for d in t.shape if isinstance(d, str))
        dims.update(dict.fromkeys(self.extra_dims))
        for t in tensors:
            if t.name in dims:
                raise AttncError(f"'{t.name}' names both a tensor and a dim", t.span)
        return tuple(dims)

    def _aliases(self, q: Tensor, k: Tensor, v: Tensor) -> dict[str, int | str]:
        """Note [Canonical dims]: dsl.md makes B, H, M, HKV and N usable in every variant,
        as q's batch, heads and rows and k's heads and rows. Where the shapes name them
        so, they are dims like any other; where a shape has a number there, or another
        name (`k: bf16[B, H, N, 64]` has no HKV), the name stands for that number or dim,
        in a hook and in a param's shape. A name the variant gives to a tensor is the
        tensor's. A `dim` declared with a name that stands for something else would be a
        second value for it: refused."""
        shaped = {d for t in (q, k, v) for d in t.shape if isinstance(d, str)}
        aliases = {n: size for n, size in _slots(q, k).items() if n not in shaped and n not in self.tensors}
        for name, span in self.extra_dims.items():
            if name in aliases:
                raise AttncError(f"'{name}' is {_SLOT_PLACES[name]}, which the shapes give as {aliases[name]}: "
                                 f"a dim of that name would be another value (write {aliases[name]}, or put "
                                 f"'{name}' in that place of the shape)", span)
        return aliases

    def _scale(self, q: Tensor) -> float:
        if self.scale is None:
            return _round_f32(1.0 / math.sqrt(q.shape[3]))      # an f32, as a given one (Note [Scale in f32])
        value = _ConstEval().eval(self.scale.expr)      # an f32 (Note [Scale in f32])
        if not math.isfinite(value):
            raise AttncError(f"scale must be a finite number (it is {value:g})", self.scale.expr.span)
        if value <= 0:
            # The kernels keep the running max of unscaled scores (Note [Folded scale],
            # softmax.py), which is the max of the scaled ones only for a positive scale.
            what = "0 in f32, the precision it is computed in" if value == 0 else f"{value:g}"
            raise AttncError(f"scale must be positive (it is {what})", self.scale.expr.span)
        return value

    # --- hooks -------------------------------------------------------------
    def _hook(self, h: ast.HookDecl, dims, params, aliases: dict[str, int | str]) -> Hook:
        names, types = HOOK_PARAMS[h.name]
        if len(h.params) != len(names):
            plural = "parameter" if len(names) == 1 else "parameters"
            raise AttncError(f"{h.name} takes {len(names)} {plural} ({', '.join(names)}), "
                             f"got {len(h.params)}", h.span)
        dim_names = (*dims, *aliases)
        scope: dict[str, str] = {d: INT for d in dim_names}
        param_tensors = {p.name: p for p in params}
        for name, span, ty in zip(h.params, h.param_spans, types):
            if name in scope and name not in dim_names:
                raise AttncError(f"duplicate parameter '{name}' in {h.name}", span)
            if name in dim_names:
                raise AttncError(f"parameter '{name}' of {h.name} shadows the dim '{name}'", span)
            if name in self.tensors:
                raise AttncError(f"parameter '{name}' of {h.name} shadows the tensor '{name}'", span)
            scope[name] = ty
        ty = _Typer(scope, param_tensors, set(self.tensors), aliases).type(h.body)
        hook_depth(h.body)
        if h.name == "mask_mod" and ty != BOOL:
            raise AttncError(f"mask_mod must return a boolean, got {_type_name(ty)}", h.body.span)
        if h.name != "mask_mod" and ty == BOOL:
            raise AttncError(f"{h.name} must return a number, got a boolean", h.body.span)
        return Hook(h.name, h.params, h.body, h.span)


def hook_depth(e: ast.Expr, lets: dict[str, int] | None = None) -> int:
    """The levels of operations of `e` once its `let`s are substituted (a name bound by a
    `let` is as deep as its value); an error at the first sub-expression deeper than
    MAX_HOOK_DEPTH (Note [Deep expressions] in depth.py). Recursive on the source's
    nesting only, which the parser bounds."""
    lets = lets or {}
    if isinstance(e, ast.Let):
        return hook_depth(e.body, {**lets, e.name: hook_depth(e.value, lets)})
    if isinstance(e, ast.Name):
        return lets.get(e.id, 1)
    depth = 1 + max((hook_depth(c, lets) for c in ast.children(e)), default=0)
    if depth > MAX_HOOK_DEPTH:
        raise AttncError(f"expression too deep: more than {MAX_HOOK_DEPTH} levels of operations, counting "
                         f"each use of a `let` name as deep as its value (split a long chain into "
                         f"independent parts, e.g. a sum into sums of fewer terms)", e.span)
    return depth


_SLOT_PLACES = {"B": "q's batch", "H": "q's heads", "M": "q's rows", "HKV": "k's heads", "N": "k's rows"}


def _slots(q: Tensor, k: Tensor) -> dict[str, int | str]:
    """What each canonical name is: the entry of its place in q's or k's shape."""
    return {"B": q.shape[0], "H": q.shape[1], "M": q.shape[2], "HKV": k.shape[1], "N": k.shape[2]}


def _names_in(e: ast.Expr) -> set[str]:
    """Every dim or other name an expression reads (a canonical name as what it stands for)."""
    out, todo = set(), [e]
    while todo:
        x = todo.pop()
        if isinstance(x, ast.Name):
            out.add(x.id)
            if isinstance(x.stands_for, str):
                out.add(x.stands_for)
        todo.extend(ast.children(x))
    return out


def _saturating_int(x: int | float) -> int:
    """The language's int(): toward zero, saturating at the i32 bounds, NaN to 0 (Note
    [Saturating int] in attnc/backend/hooks.py)."""
    if isinstance(x, int):
        return x
    if math.isnan(x):
        return 0
    return int(max(-2.0 ** 31, min(2.0 ** 31 - 1, math.trunc(x) if math.isfinite(x) else x)))


def _check_dim_name(name: str, span: Span) -> None:
    if not name[0].isupper():
        raise AttncError(f"dim name '{name}' must start with a capital letter", span)


class _Typer:
    """Types an expression tree in place (sets `.ty`), enforcing the rules of dsl.md."""

    def __init__(self, scope: dict[str, str], params: dict, tensors: set[str],
                 aliases: dict[str, int | str] | None = None):
        self.scope = dict(scope)
        self.params = params
        self.tensors = tensors
        self.aliases = aliases or {}        # Note [Canonical dims]

    def type(self, e: ast.Expr) -> str:
        e.ty = getattr(self, "_" + type(e).__name__.lower())(e)
        return e.ty

    def _num(self, e: ast.Num) -> str:
        return FLOAT if e.is_float else INT

    def _name(self, e: ast.Name) -> str:
        if e.id in self.scope:
            e.stands_for = self.aliases.get(e.id)       # (nothing rebinds a dim's name)
            return self.scope[e.id]
        if e.id in self.params:
            raise AttncError(f"param '{e.id}' must be indexed, e.g. {e.id}[...]", e.span)
        if e.id in self.tensors:
            raise AttncError(f"'{e.id}' cannot be used in an expression; hooks see the score "
                             f"and indices through their parameters", e.span)
        raise AttncError(f"unknown name '{e.id}'", e.span)

    def _index(self, e: ast.Index) -> str:
        p = self.params.get(e.name)
        if p is None:
            if e.name in self.scope or e.name in self.tensors:
                raise AttncError(f"'{e.name}' is not a param and cannot be indexed", e.span)
            raise AttncError(f"unknown name '{e.name}'", e.span)
        if len(e.args) != len(p.shape):
            raise AttncError(f"param '{e.name}' has {len(p.shape)} dimension(s) but is indexed "
                             f"with {len(e.args)}", e.span)
        for a in e.args:
            if self.type(a) != INT:
                raise AttncError(f"an index must be an integer, got {_type_name(a.ty)}", a.span)
        return FLOAT if p.dtype == "f32" else INT

    def _call(self, e: ast.Call) -> str:
        if e.fn not in BUILTINS:
            if e.fn in self.params:
                raise AttncError(f"'{e.fn}' is a param; index it with {e.fn}[...]", e.span)
            raise AttncError(f"unknown function '{e.fn}'", e.span)
        arity, rule = BUILTINS[e.fn]
        if len(e.args) != arity:
            plural = "argument" if arity == 1 else "arguments"
            raise AttncError(f"{e.fn} takes {arity} {plural}, got {len(e.args)}", e.span)
        tys = [self.type(a) for a in e.args]
        if rule == "where":
            if tys[0] != BOOL:
                raise AttncError(f"the condition of where must be a boolean, got {_type_name(tys[0])}",
                                 e.args[0].span)
            return self._common(tys[1], tys[2], e.args[2].span, "where")
        for a, ty in zip(e.args, tys):
            if ty == BOOL:
                raise AttncError(f"{e.fn} expects a number, got a boolean", a.span)
        if rule == "same":
            return tys[0]
        if rule == "promote":
            return INT if tys == [INT, INT] else FLOAT
        return INT if rule == "int" else FLOAT

    def _common(self, a: str, b: str, span: Span, what: str) -> str:
        if a == b:
            return a
        if BOOL in (a, b):
            raise AttncError(f"the branches of {what} must both be numbers or both booleans", span)
        return FLOAT

    def _unary(self, e: ast.Unary) -> str:
        ty = self.type(e.operand)
        if e.op == "not":
            if ty != BOOL:
                raise AttncError(f"'not' expects a boolean, got {_type_name(ty)}", e.operand.span)
            return BOOL
        if ty == BOOL:
            raise AttncError(f"unary '{e.op}' expects a number, got a boolean", e.operand.span)
        return ty

    def _binary(self, e: ast.Binary) -> str:
        lt, rt = self.type(e.lhs), self.type(e.rhs)
        op = e.op
        if op in BOOL_OPS:
            for side, ty in ((e.lhs, lt), (e.rhs, rt)):
                if ty != BOOL:
                    raise AttncError(f"'{op}' expects booleans, got {_type_name(ty)}", side.span)
            return BOOL
        if op in EQ_OPS and lt == rt == BOOL:
            return BOOL
        for side, ty in ((e.lhs, lt), (e.rhs, rt)):
            if ty == BOOL:
                raise AttncError(f"operator '{op}' expects numbers, got a boolean", side.span)
        if op in ORDER_OPS or op in EQ_OPS:
            return BOOL
        if op in INT_OPS:
            for side, ty in ((e.lhs, lt), (e.rhs, rt)):
                if ty != INT:
                    raise AttncError(f"operator '{op}' needs integer operands, got {_type_name(ty)}",
                                     side.span)
            return INT
        if op == "/":
            return FLOAT
        return INT if lt == rt == INT else FLOAT

    def _let(self, e: ast.Let) -> str:
        if e.name in self.scope or e.name in self.params or e.name in self.tensors:
            raise AttncError(f"'{e.name}' is already defined", e.name_span)
        self.type(e.value)
        inner = _Typer({**self.scope, e.name: e.value.ty}, self.params, self.tensors, self.aliases)
        return inner.type(e.body)


class _ConstEval:
    """Evaluates the `scale` expression with the language's rules (Note [Scale in f32])."""

    FUNCS = {"exp": math.exp, "exp2": lambda x: math.pow(2.0, x), "log": math.log,
             "log2": math.log2, "sqrt": math.sqrt, "rsqrt": lambda x: 1 / math.sqrt(x),
             "tanh": math.tanh, "sigmoid": lambda x: 0.5 * (1.0 + math.tanh(0.5 * x)),
             "floor": lambda x: float(math.floor(x)) if math.isfinite(x) else x,
             "ceil": lambda x: float(math.ceil(x)) if math.isfinite(x) else x}

    def eval(self, e: ast.Expr) -> float:
        return float(self._float(self._eval(e)))

    def _eval(self, e: ast.Expr) -> int | float:
        if isinstance(e, ast.Num):
            return _wrap64(e.value) if not e.is_float else _round_f32(float(e.value))
        if isinstance(e, ast.Unary) and e.op in "+-":
            x = self._eval(e.operand)
            if e.op == "+":
                return x
            return _wrap64(-x) if isinstance(x, int) else -x
        if isinstance(e, ast.Binary) and e.op in ("+", "-", "*", "/", "//", "%"):
            a, b = self._eval(e.lhs), self._eval(e.rhs)
            if e.op in INT_OPS:
                for side, x in ((e.lhs, a), (e.rhs, b)):
                    if not isinstance(x, int):
                        raise AttncError(f"operator '{e.op}' needs integer operands, got a float", side.span)
                return 0 if b == 0 else _wrap64(a // b if e.op == "//" else a % b)
            if isinstance(a, int) and isinstance(b, int) and e.op != "/":
                return _wrap64({"+": a + b, "-": a - b, "*": a * b}[e.op])
            a, b = self._float(a), self._float(b)
            if e.op == "/" and b == 0:
                raise AttncError("scale cannot be evaluated: division by zero", e.op_span or e.span)
            return self._checked(_FLOAT_OPS[e.op](a, b), (a, b), e)
        if isinstance(e, ast.Call) and e.fn in BUILTINS and e.fn != "where":
            arity = BUILTINS[e.fn][0]
            if len(e.args) != arity:
                plural = "argument" if arity == 1 else "arguments"
                raise AttncError(f"{e.fn} takes {arity} {plural}, got {len(e.args)}", e.span)
            return self._call(e, [self._eval(a) for a in e.args])
        if isinstance(e, ast.Name):
            raise AttncError(f"scale must be a constant expression; '{e.id}' is not a constant", e.span)
        if isinstance(e, ast.Call) and e.fn not in BUILTINS:
            raise AttncError(f"unknown function '{e.fn}'", e.span)
        what = {ast.Let: "'let'", ast.Index: "a param", ast.Call: f"{getattr(e, 'fn', '')}()"}.get(
            type(e), "a comparison or logic")
        raise AttncError(f"scale must be a number: {what} has no place in it (numbers, + - * / // %, "
                         f"and the math functions)", e.span)

    def _call(self, e: ast.Call, args: list) -> int | float:
        if e.fn == "int":
            (x,) = args
            return x if isinstance(x, int) else _saturating_int(x)
        if e.fn == "float":
            return self._float(args[0])
        if e.fn == "abs":
            (x,) = args
            return _wrap64(abs(x)) if isinstance(x, int) else abs(x)
        if e.fn in ("min", "max"):
            if all(isinstance(x, int) for x in args):
                return (min if e.fn == "min" else max)(args)
            # IEEE 754-2019 minimum / maximum, as the kernels' and the reference's
            # (Note [Signed zeros in min and max] in attnc/reference_eval.py).
            import numpy as np

            from attnc.reference_eval import maximum, minimum
            a, b = (np.float64(self._float(x)) for x in args)
            return float((minimum if e.fn == "min" else maximum)(a, b))
        x = self._float(args[0])
        try:
            value = self.FUNCS[e.fn](x)
        except OverflowError:
            value = math.inf
        except ValueError:
            value = math.nan
        except ZeroDivisionError:           # rsqrt(0): found by a review
            raise AttncError("scale cannot be evaluated: division by zero", e.span) from None
        return self._checked(value, (x,), e)

    @staticmethod
    def _float(x: int | float) -> float:
        """A value as an f32 (an integer rounded to nearest, as the kernels' sitofp)."""
        return nearest_f32(x) if isinstance(x, int) else x      # an int64 never leaves f32's range

    @staticmethod
    def _checked(value: float, operands, e: ast.Expr) -> float:
        """`value` rounded to f32; an error at `e` where finite operands give no finite f32."""
        value = _round_f32(value)
        if not math.isfinite(value) and all(math.isfinite(x) for x in operands):
            what = "math domain error" if math.isnan(value) else "math range error (past f32)"
            raise AttncError(f"scale cannot be evaluated: {what}", getattr(e, "op_span", None) or e.span)
        return value


_FLOAT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


# Note [Scale in f32]
# ~~~~~~~~~~~~~~~~~~~
# dsl.md makes float arithmetic f32 and integer arithmetic exact (64 bits here, as in the
# hooks: README), and `scale` is an expression of the language, so it is evaluated so:
# every float operation rounds to f32 (computed in f64 and rounded, which for + - * / and
# sqrt is the correctly rounded f32 result), integers wrap at 64 bits, and an integer
# meets a float as its nearest f32. The value is then the one number both the kernels
# (an f32 constant) and the reference (`Variant.scale`) use. In f64, `16777217.0 -
# 16777216.0` was a scale of 1.0 where f32 gives 0, `1e20 * 1e20 / 1e30 / 1e9` was 10
# where f32 overflows, and the reference used 1e-45 where the kernels had 1.4e-45 (found
# by a review). An operation whose finite operands give no finite f32 (an overflow, a
# domain error, a division by zero) is an error at that operation.


def _round_f32(x: float) -> float:
    """x rounded to the nearest f32 (to nearest even; past f32's range, an infinity)."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _wrap64(n: int) -> int:
    """n as a 64-bit two's-complement integer (README: integer expressions wrap past 64 bits)."""
    return (n + 2 ** 63) % 2 ** 64 - 2 ** 63

