"""A score_mod compiled in a form cheaper than its region per score: `BiasCode`, the f of
an affine s + f, with the per-row terms of one linear in j (Note [Bias linear in j]),
and `ScaledScoreCode`, its constant scalings of s and of the result folded into the
kernel's own multiplications (Note [Score scalings]).

Note [Bias linear in j]: an affine score_mod s + a * float(L) (ALiBi: slopes[h] * (j - i))
whose a does not depend on j and whose i32 L is R + cj * j (cj a constant, R free of j) is
not evaluated per score: per accumulator row and key block the kernel computes a and
l = L at the row's first column j0 (an I2F per row), and per score a * (float(l) + cj * d)
(d: the column's constant offset from j0) as one FADD of an immediate and one FFMA. The
float sum is exact while |L| < 2^24, as the per-score conversion is. The form places a
and L's terms free of j per row, as attn-hoist does; where a value of the bias is placed
finer than what it reads (`attn-hoist{hoist=false}`, or an `attn.level` edited to
"score"), the bias is computed as its region says, per score, at the levels given.

Measured against one alternative: adding only the bias of the lane's first row per
column (an IADD, an I2F and an FMUL per column, one FADD per score, each row's constant
remainder put back into its running max at the end) was 3-5 % slower at head dim 64 on
both targets (results/sm80_h200.md, "Bias linear in j").

Note [Score scalings]: a score_mod such as softcap, 30 * tanh(s / 30), scales s by a
constant on the way in and its result on the way out. Both fold into multiplications
the kernel does anyway: the raw score is multiplied by scale / 30 (one FMUL instead of
two) and the softmax's exp2 factor becomes 30 * log2(e) (the running max is then kept
in units of tanh), which changes the result by rounding only (dsl.md allows it). A
temperature, s * 2, is one multiplication that is both: it is taken once, on the way in.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
from mlir import ir
from mlir.dialects import arith

from attnc.backend.hook_arith import _f32_constant, _reciprocal
from attnc.backend.hook_walks import _interval, _j_coefficient
from attnc.backend.hooks import KernelNames, ScoreCode
from attnc.backend.nvgpu_builders import Emit
from attnc.ir import defining_op, depends_on, yielded


def affine_bias(block: ir.Block) -> tuple[ir.Value, bool] | None:
    """For a score_mod region that returns s + f or f + s or s - f with f independent of s:
    (f, negate); else None."""
    tainted = depends_on(block, 0)
    s = block.arguments[0]
    top = defining_op(yielded(block))
    if top is None or top.name not in ("arith.addf", "arith.subf"):
        return None
    lhs, rhs = top.operands
    if lhs == s and rhs not in tainted:
        return rhs, top.name == "arith.subf"
    if rhs == s and lhs not in tainted and top.name == "arith.addf":
        return lhs, False
    return None


class BiasCode(ScoreCode):
    """The f of an affine score_mod s + f, compiled alone (the ops that read s are left out)."""

    def __init__(self, block: ir.Block, names: KernelNames, bias: ir.Value, negate: bool,
                 never_empty: frozenset[str] = frozenset()):
        super().__init__(block, names, never_empty)
        self.bias, self.negate = bias, negate
        self.tainted = depends_on(block, 0)

        # Note [Bias linear in j]: the form computes a and L once per row; a level placed per
        # score is followed by computing the bias per score.
        self.j_linear = None if self.placed_finer else _j_linear_split(block, bias)

    @property
    def of_diagonal(self) -> bool:
        """Whether the bias is computed from d = j - i (or i - j), b and h alone (Note
        [Values of a diagonal] in hooks.py): one value per tile beyond the flat diagonals."""
        return self.diagonal is not None and self.bias not in self.diagonal[1]

    def __call__(self, e: Emit, b, h, i, j, given: Mapping | None = None) -> ir.Value:
        env = dict(given) if given else {}
        env.update(zip(list(self.block.arguments)[1:], (b, h, i, j)))
        env = self._run(e, env, self.tainted)
        value = env.get(self.bias, self.bias)
        return arith.negf(value) if self.negate else value

    def row_terms(self, e: Emit, b, h, i, j0) -> tuple[ir.Value, ir.Value, int]:
        """Note [Bias linear in j]: (a, l, cj) with bias(i, j0 + d) = a * float(l + cj * d)
        (sign included); only when `j_linear` is set."""
        a, conv_in, cj = self.j_linear
        env = self._run(e, dict(zip(list(self.block.arguments)[1:], (b, h, i, j0))), self.tainted)
        a_value = e.cf(1.0) if a is None else env.get(a, a)
        if self.negate:
            a_value = arith.negf(a_value)
        return a_value, env.get(conv_in, conv_in), cj


def _j_linear_split(block: ir.Block, bias: ir.Value):
    """Note [Bias linear in j]: (a or None for 1, L, cj) when `bias` is a * sitofp(L) (or
    sitofp(L)), a independent of j and L = R + cj * j an i32 with R independent of j."""
    j = block.arguments[4]
    j_tainted = depends_on(block, 4)
    op = defining_op(bias)
    if op is None:
        return None
    candidates = []
    if op.name == "arith.mulf":
        x, y = op.operands
        candidates = [(x, y), (y, x)]
    elif op.name == "arith.sitofp":
        candidates = [(None, bias)]
    for a, conv in candidates:
        if a is not None and a in j_tainted:
            continue
        conv_op = defining_op(conv)
        if conv_op is None or conv_op.name != "arith.sitofp":
            continue
        inner = conv_op.operands[0]
        if str(inner.type) != "i32":
            continue
        cj = _j_coefficient(inner, j, j_tainted)
        if cj is not None and cj != 0 and abs(cj) <= 1024:
            return a, inner, cj
    return None


class ScaledScoreCode(ScoreCode):
    """A score_mod region with its constant scalings of s and of the result split off
    (Note [Score scalings]): called with s' = s * in_factor, returns score / out_factor."""

    def __init__(self, block: ir.Block, names: KernelNames, never_empty: frozenset[str] = frozenset()):
        super().__init__(block, names, never_empty)
        self.scaled_inputs, self.in_factor = _input_scalings(block)
        self.inner, self.out_factor = _output_scaling(block)
        if yielded(block) in self.scaled_inputs:      # s * c: one scaling, not two (Note [Score scalings])
            self.inner, self.out_factor = yielded(block), 1.0

    def bounds(self) -> tuple[float, float] | None:
        """(lo, hi) that every value of the returned g = score / out_factor lies in, for
        any s (Note [Bounded score_mod] in softmax.py), or None when unbounded."""
        return _interval(self.inner)

    def __call__(self, e: Emit, s, b, h, i, j, given: Mapping | None = None) -> ir.Value:
        env = self._start((s, b, h, i, j), given)
        env.update({v: s for v in self.scaled_inputs})
        env = self._run(e, env)
        return env.get(self.inner, self.inner)


def region_static_max(block: ir.Block, dtype: str) -> float | None:
    """The constant running max the kernel gives the score_mod region `block` (its
    ScaledScoreCode's bounds: Note [Bounded score_mod] in softmax.py), or None; a region
    yielding s or an affine bias has none."""
    from attnc.backend.kernel_spec import bounded_max

    if yielded(block) == block.arguments[0] or affine_bias(block) is not None:
        return None
    inner, out_factor = _output_scaling(block)
    return bounded_max(dtype, _interval(inner), out_factor)


def _constant_operand(op: ir.Operation, other: ir.Value) -> np.float32 | None:
    """The f32 constant among the two operands of `op` that is not `other`."""
    values = [v for v in op.operands if v != other]
    return _f32_constant(values[0]) if len(values) == 1 else None


def _input_scalings(block: ir.Block) -> tuple[list, float]:
    """(the results of s * c / c * s / s / c, the factor f with each equal to s * f) when
    every use of s is one of them with the same f; else ([], 1)."""
    s = block.arguments[0]
    users, factors = [], set()
    for op in block.operations:
        if s not in list(op.operands):
            continue
        c = _constant_operand(op, s)
        if op.name == "arith.mulf" and c is not None and np.isfinite(c) and c != 0:
            factors.add(float(c))
        elif op.name == "arith.divf" and op.operands[0] == s and _reciprocal(op.operands[1]) is not None:
            factors.add(_reciprocal(op.operands[1]))
        else:
            return [], 1.0
        users.append(op.results[0])
    return (users, factors.pop()) if len(factors) == 1 else ([], 1.0)


def _output_scaling(block: ir.Block) -> tuple[ir.Value, float]:
    """(g, a) when the region yields a * g or g * a with a positive f32 constant a; else
    (the yielded value, 1)."""
    result = yielded(block)
    top = defining_op(result)
    if top is not None and top.name == "arith.mulf":
        for value, other in ((top.operands[0], top.operands[1]), (top.operands[1], top.operands[0])):
            a = _f32_constant(value)
            if a is not None and np.isfinite(a) and a > 0 and _f32_constant(other) is None:
                return other, float(a)
    return result, 1.0
