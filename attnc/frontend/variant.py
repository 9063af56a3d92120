"""The checked meaning of one `.attn` file: what every later stage consumes.

`sema.check` builds a `Variant` only when the source is valid, so consumers
(the reference, the MLIR lowering, the bundle manifest) never re-validate.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from attnc.errors import AttncWarning, Span
from attnc.frontend import ast

DimValue = str | int     # a symbolic dim name, or a fixed size


@dataclass(frozen=True)
class Tensor:
    name: str
    role: str                       # 'q', 'k', 'v', 'param', 'o' or 'lse'
    dtype: str                      # 'f16', 'bf16', 'f32', 'i32'
    shape: tuple[DimValue, ...]
    span: Span


@dataclass(frozen=True)
class Hook:
    name: str                       # 'score_mod', 'mask_mod' or 'sink'
    params: tuple[str, ...]         # the user's names for the hook's arguments
    body: ast.Expr                  # typed by sema
    span: Span


@dataclass(frozen=True)
class Variant:
    name: str
    q: Tensor
    k: Tensor
    v: Tensor
    params: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]     # 'o' first, then 'lse' when declared
    dims: tuple[str, ...]           # every symbolic dim, in order of first appearance
    scale: float
    score_mod: Hook | None
    mask_mod: Hook | None
    sink: Hook | None
    source: str
    filename: str
    span: Span
    unused_dims: tuple[str, ...] = ()         # declared with `dim`, read by no shape or hook
    warnings: tuple[AttncWarning, ...] = field(default=(), compare=False)   # e.g. of a dim never used

    # The roles of the dims, read off the q/k/v shapes [B, H, M, D] / [B, HKV, N, D].
    @property
    def batch(self) -> DimValue:
        return self.q.shape[0]

    @property
    def heads(self) -> DimValue:
        return self.q.shape[1]

    @property
    def heads_kv(self) -> DimValue:
        return self.k.shape[1]

    @property
    def seq_q(self) -> DimValue:
        return self.q.shape[2]

    @property
    def seq_k(self) -> DimValue:
        return self.k.shape[2]

    @property
    def head_dim_qk(self) -> int:
        return self.q.shape[3]

    @property
    def head_dim_v(self) -> int:
        return self.v.shape[3]

    @property
    def dtype(self) -> str:
        return self.q.dtype

    @property
    def has_lse(self) -> bool:
        return any(t.role == "lse" for t in self.outputs)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (self.q, self.k, self.v, *self.params)

    def param(self, name: str) -> Tensor | None:
        return next((p for p in self.params if p.name == name), None)

    def output(self, name: str) -> Tensor | None:
        return next((t for t in self.outputs if t.name == name), None)

    def hooks(self) -> tuple[Hook, ...]:
        return tuple(h for h in (self.score_mod, self.mask_mod, self.sink) if h is not None)
