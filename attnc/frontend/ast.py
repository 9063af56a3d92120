"""The syntax tree of a `.attn` file.

Every node carries the `Span` of the source it came from, so that any later stage
-- semantic checks, the MLIR lowering, a pass -- can point at the user's line.
Expression nodes get their type (`INT`, `FLOAT`, `BOOL`) filled in by `sema`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from attnc.errors import Span

INT, FLOAT, BOOL = "int", "float", "bool"


@dataclass(eq=False)
class Expr:
    span: Span
    ty: str | None = field(default=None, init=False)


@dataclass(eq=False)
class Num(Expr):
    value: int | float = 0
    is_float: bool = False


@dataclass(eq=False)
class Name(Expr):
    id: str = ""
    # Set by sema for a canonical dim name the shapes do not use (Note [Canonical dims] in
    # sema.py): the number or the dim it stands for. None: `id` itself.
    stands_for: int | str | None = field(default=None, init=False)


@dataclass(eq=False)
class Index(Expr):
    """`param[idx, ...]`: an element of a `param` tensor."""
    name: str = ""
    args: tuple[Expr, ...] = ()


@dataclass(eq=False)
class Call(Expr):
    """A builtin call: math functions, `min`/`max`, `where`, `int`/`float` casts."""
    fn: str = ""
    args: tuple[Expr, ...] = ()


@dataclass(eq=False)
class Unary(Expr):
    op: str = ""          # '-', '+', 'not'
    operand: Expr | None = None


@dataclass(eq=False)
class Binary(Expr):
    op: str = ""          # arithmetic, comparison, 'and', 'or'
    lhs: Expr | None = None
    rhs: Expr | None = None
    op_span: Span | None = None


@dataclass(eq=False)
class Let(Expr):
    name: str = ""
    name_span: Span | None = None
    value: Expr | None = None
    body: Expr | None = None


ShapeItem = Union[str, int]


@dataclass(frozen=True)
class TensorType:
    dtype: str
    dtype_span: Span
    shape: tuple[ShapeItem, ...]
    shape_spans: tuple[Span, ...]


@dataclass(frozen=True)
class TensorDecl:
    kind: str             # 'input', 'param' or 'out'
    name: str
    type: TensorType
    span: Span            # of the name


@dataclass(frozen=True)
class DimDecl:
    names: tuple[str, ...]
    spans: tuple[Span, ...]


@dataclass(frozen=True)
class ScaleDecl:
    expr: Expr
    span: Span


@dataclass(frozen=True)
class HookDecl:
    name: str
    params: tuple[str, ...]
    param_spans: tuple[Span, ...]
    body: Expr
    span: Span            # of the hook's name


Decl = Union[TensorDecl, DimDecl, ScaleDecl, HookDecl]


@dataclass(frozen=True)
class AttentionDecl:
    name: str
    decls: tuple[Decl, ...]
    span: Span            # of the `attention` keyword
    name_span: Span


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of `e`, in source order."""
    if isinstance(e, (Index, Call)):
        return e.args
    if isinstance(e, Unary):
        return (e.operand,)
    if isinstance(e, Binary):
        return (e.lhs, e.rhs)
    if isinstance(e, Let):
        return (e.value, e.body)
    return ()
