"""The values of a hook's diagonal, and where they stop changing (Note [Flat diagonals]).

Note [Flat diagonals]
~~~~~~~~~~~~~~~~~~~~~
A relative position bias reads i and j only as d = j - i (Note [Values of a diagonal] in
attnc/backend/hooks.py), and what it computes from d often stops changing far from the
diagonal: T5's bucket is the last of its side for every |d| >= 91
(examples/relative_bias.attn), so its bias there is one param read per side, where a
tile's scores would compute it 22 to 34 times a thread. `flat_bounds` finds the d at and
below which (`below`), and at and above which (`above`), every value of the diagonal that
the rest of the hook reads is the same; attn-hoist records them on a score_mod's op d as
`attn.flat_below` and `attn.flat_above`; a tile of scores whose diagonals all lie beyond
one computes those values once, in a branch that yields the tile's scores (HookGrid.over
in attnc/backend/score_masks.py: a branch that yielded the values of the diagonals
instead kept them live beside O, and sm_80's T5 kernel at head dim 128 spilled 48 bytes).
On sm_100a, where a thread holds a row of 128 scores, each 32 of them (a tensor memory
load's) branch apart (`_score_mod` in attnc/backend/sm100a_scores.py): one branch over the
row spilled 1,216 bytes under the softmax warpgroups' 200 registers, 32 none; with T5's
offsets (Note [Affine scores on sm_100a] there), each 16 spilled 40 bytes, each 32 none.

The search evaluates the hook's ops on intervals of d, toward "varies" wherever it cannot
tell: integers exactly (the kernels compute them exactly, Note [Exact integers] in
attnc/backend/exact_ints.py); each float op's bounds widened by 2^-20 of their size for
f32 rounding; the transcendentals, which the kernels compute with the hardware's
approximations (Note [No libdevice] in attnc/backend/ptx.py: tanh.approx is good to
about 2^-11), by 2^-9 of their size and 2^-9; an op without a rule varies where its
operands do. A value is flat where its interval is one number, or where it reads nothing
that varies (b, h, the dims, params indexed by them). A value flat over a range of d is
flat over every range inside it, so each bound is found by bisection; one beyond
FARTHEST (no sequence is that long) is left out.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from mlir import ir

from attnc.ir.ops import PARAM

D_LIMIT = 2**31 - 1          # |j - i| of two indices below 2^31
FARTHEST = 2**24             # a bound farther from 0 is left out
BELOW, ABOVE = "attn.flat_below", "attn.flat_above"
LANES = "attn.flat_lanes"     # near the bounds, the lanes share the diagonals (warp_diagonals.py)
_ROUND = 2.0**-20            # an f32 op's rounding, with room
_APPROX = 2.0**-9            # the hardware's transcendentals (tanh.approx: ~2^-11)


def diagonal_values(block: ir.Block, names: tuple[str, ...]) -> tuple[ir.Operation, frozenset] | None:
    """(the op d = j - i or i - j, the values computed from d, b and h alone, d among
    them) of a hook region whose arguments are `names`, or None where it computes no d."""
    args = dict(zip(names, block.arguments))
    if "i" not in args or "j" not in args:
        return None
    sides = {args["i"], args["j"]}
    deps = {a: frozenset({n}) for n, a in args.items()}
    root = None
    for op in list(block.operations)[:-1]:
        if len(op.results) != 1:
            return None
        if root is None and op.name == "arith.subi" and set(op.operands) == sides:
            root, deps[op.results[0]] = op.operation, frozenset({"d"})
            continue
        deps[op.results[0]] = frozenset().union(*(deps.get(v, frozenset()) for v in op.operands))
    if root is None:
        return None
    return root, frozenset(v for v, used in deps.items() if "d" in used and used <= {"b", "h", "d"})


def read_outside(block: ir.Block, on: frozenset) -> list[ir.Value]:
    """The values of `on` that an op outside it (or the terminator) reads, in order."""
    out: list[ir.Value] = []
    for op in block.operations:
        if len(op.results) == 1 and op.results[0] in on:
            continue
        out.extend(v for v in op.operands if v in on and v not in out)
    return out


class Span(NamedTuple):
    lo: float | None            # None: unknown
    hi: float | None
    flat: bool                  # the same at every d of the range


_VARIES = Span(None, None, False)
_SOME = Span(None, None, True)


def flat_bounds(block: ir.Block, names: tuple[str, ...]) -> tuple[int | None, int | None]:
    """(below, above) of Note [Flat diagonals] for a hook region, None where none holds."""
    found = diagonal_values(block, names)
    if found is None:
        return None, None
    steps = _Steps(block, names, *found)
    if not steps.outputs:
        return None, None
    below = _nearest(lambda x: steps.flat(-D_LIMIT, -x))
    above = _nearest(lambda x: steps.flat(x, D_LIMIT))
    return None if below is None else -below, above


def _nearest(flat_from) -> int | None:
    """The least x in [-FARTHEST, FARTHEST] with `flat_from(x)`, which holds for every x
    above one where it holds; None where it fails at FARTHEST."""
    if not flat_from(FARTHEST):
        return None
    lo, hi = -FARTHEST, FARTHEST
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if flat_from(mid) else (mid + 1, hi)
    return lo


def flat_holds(block: ir.Block, names: tuple[str, ...], below: int | None, above: int | None) -> bool:
    """Whether the values of the diagonal are flat at and below `below` and at and above
    `above` (each None: not claimed), as the analysis can show."""
    found = diagonal_values(block, names)
    if found is None:
        return below is None and above is None
    steps = _Steps(block, names, *found)
    return ((below is None or steps.flat(-D_LIMIT, below))
            and (above is None or steps.flat(above, D_LIMIT)))


class _Steps:
    """A hook's ops, read once from the IR, to evaluate on intervals of d."""

    def __init__(self, block: ir.Block, names: tuple[str, ...], root: ir.Operation, on: frozenset):
        key = {a: -1 - k for k, a in enumerate(block.arguments)}     # the arguments: negative
        self.cta = frozenset(-1 - k for k, n in enumerate(names) if n in ("b", "h"))
        self.ops: list[tuple] = []
        for op in list(block.operations)[:-1]:
            if op.results[0] == root.results[0]:
                self.root = len(self.ops)
            # an operand from outside the region (a param's tensor) is the CTA's: None
            self.ops.append((op.name, [key.get(v) for v in op.operands], _facts(op)))
            key[op.results[0]] = len(self.ops) - 1
        self.outputs = [key[v] for v in read_outside(block, on)]

    def flat(self, lo: int, hi: int) -> bool:
        """Whether every output is flat over d in [lo, hi]."""
        env: list[Span] = []
        for k, (name, operands, facts) in enumerate(self.ops):
            if k == self.root:
                env.append(Span(lo, hi, lo == hi))
            else:
                env.append(_step(name, [self._operand(env, v) for v in operands], facts))
        return all(env[k].flat for k in self.outputs)

    def _operand(self, env: list, v: int | None) -> Span:
        if v is None or v in self.cta:
            return _SOME
        return _VARIES if v < 0 else env[v]


def _facts(op) -> object:
    """What an op's step needs of its attributes and types: a constant's value, a
    compare's predicate, an extension's source width, whether an integer op is on i1."""
    if op.name == "arith.constant":
        attr = op.attributes["value"]
        if isinstance(attr, ir.FloatAttr):
            return float(attr.value)
        if isinstance(attr, ir.BoolAttr):
            return int(attr.value)
        return ir.IntegerAttr(attr).value
    if op.name in ("arith.cmpi", "arith.cmpf"):
        from mlir.dialects import arith
        enum = arith.CmpIPredicate if op.name == "arith.cmpi" else arith.CmpFPredicate
        return enum(ir.IntegerAttr(op.attributes["predicate"]).value).name.lower()
    if op.name in ("arith.extsi", "arith.extui"):
        return ir.IntegerType(op.operands[0].type).width     # sign-extending an i1 true gives -1
    result = op.results[0].type
    return isinstance(result, ir.IntegerType) and result.width == 1


def _widen(lo: float, hi: float, rel: float, add: float = 0.0) -> tuple[float, float]:
    return lo - abs(lo) * rel - add, hi + abs(hi) * rel + add


def _step(name: str, xs: list[Span], facts) -> Span:
    if name == "arith.constant":
        return Span(facts, facts, True)
    if not xs:                           # attn.dim: the CTA's
        return _SOME
    if name == PARAM:                    # the same where its indices are
        return Span(None, None, all(x.flat for x in xs[1:]))
    if name == "arith.select":
        c, a, b = xs
        if c.lo is not None and c.lo == c.hi:
            return a if c.lo else b
        if a.lo is not None and a.lo == a.hi == b.lo == b.hi:
            return a
        bounds = _hull(a, b)
        return Span(*bounds, c.flat and a.flat and b.flat)
    every = all(x.flat for x in xs)
    if any(x.lo is None for x in xs):
        return _SOME if every else _VARIES
    try:
        bounds = _bounds(name, xs, facts)
    except (OverflowError, ValueError, ZeroDivisionError):
        bounds = None
    if bounds is None or not all(math.isfinite(v) for v in bounds):
        return _SOME if every else _VARIES
    return Span(*bounds, every or bounds[0] == bounds[1])


def _hull(a: Span, b: Span) -> tuple:
    if a.lo is None or b.lo is None:
        return None, None
    return min(a.lo, b.lo), max(a.hi, b.hi)


_INCREASING = {"math.exp": math.exp, "math.exp2": lambda x: 2.0**x, "math.tanh": math.tanh}
_POSITIVE = {"math.log": math.log, "math.log2": math.log2}
_ORDER = {"slt": "lt", "ult": None, "sle": "le", "sgt": "gt", "sge": "ge", "olt": "lt", "ole": "le", "ogt": "gt",
          "oge": "ge", "eq": "eq", "oeq": "eq", "ne": "ne", "une": "ne"}


def _bounds(name: str, xs: list[Span], facts) -> tuple | None:
    """The bounds of an op's result given its operands' (all known), or None."""
    if len(xs) == 2:
        (a, b), (c, d) = (xs[0].lo, xs[0].hi), (xs[1].lo, xs[1].hi)
        if name in ("arith.addi", "arith.addf"):
            out = a + c, b + d
        elif name in ("arith.subi", "arith.subf"):
            out = a - d, b - c
        elif name in ("arith.muli", "arith.mulf"):
            corners = (a * c, a * d, b * c, b * d)
            out = min(corners), max(corners)
        elif name == "arith.divf" and (c > 0 or d < 0):
            corners = (a / c, a / d, b / c, b / d)
            out = min(corners), max(corners)
        elif name == "arith.floordivsi" and c == d and c != 0:
            ends = (a // c, b // c)
            return min(ends), max(ends)
        elif name in ("arith.minsi", "arith.minimumf", "arith.minnumf"):
            return min(a, c), min(b, d)
        elif name in ("arith.maxsi", "arith.maximumf", "arith.maxnumf"):
            return max(a, c), max(b, d)
        elif name in ("arith.andi", "arith.ori") and facts:          # i1
            return _logic(name, (a, b), (c, d))
        elif name in ("arith.cmpi", "arith.cmpf"):
            return _compare(_ORDER.get(facts), (a, b), (c, d))
        else:
            return None
        return _widen(*out, _ROUND, 1e-37) if name.endswith("f") else out
    (a, b), = ((x.lo, x.hi) for x in xs)
    if name in ("math.absi", "math.absf"):
        return (a, b) if a >= 0 else (-b, -a) if b <= 0 else (0, max(-a, b))
    if name == "arith.negf":
        return -b, -a
    if name == "arith.extsi":
        return (-b, -a) if facts == 1 else (a, b)
    if name in ("arith.extui", "arith.index_cast"):
        return (a, b) if a >= 0 else None
    if name == "arith.sitofp":
        return _widen(float(a), float(b), _ROUND)
    if name == "arith.fptosi":          # int(): toward zero, saturating
        return tuple(min(max(math.trunc(v), -2**31), 2**31 - 1) for v in (a, b))
    if name in ("math.floor", "math.ceil"):
        f = math.floor if name == "math.floor" else math.ceil
        return float(f(a)), float(f(b))
    if name == "math.sqrt" and a >= 0:
        return _widen(math.sqrt(a), math.sqrt(b), _ROUND)
    if name in _INCREASING:
        f = _INCREASING[name]
        return _widen(f(a), f(b), _APPROX, _APPROX)
    if name in _POSITIVE and a > 0:
        f = _POSITIVE[name]
        return _widen(f(a), f(b), _APPROX, _APPROX)
    return None


def _logic(name: str, x: tuple, y: tuple) -> tuple:
    if name == "arith.andi":
        return (0, 0) if x == (0, 0) or y == (0, 0) else (1, 1) if x == y == (1, 1) else (0, 1)
    return (1, 1) if x == (1, 1) or y == (1, 1) else (0, 0) if x == y == (0, 0) else (0, 1)


def _compare(order: str | None, x: tuple, y: tuple) -> tuple | None:
    """A compare's result as bounds in {0, 1}."""
    if order is None:
        return None
    (a, b), (c, d) = x, y
    if order == "ne":
        out = _compare("eq", x, y)
        return None if out is None else (1 - out[1], 1 - out[0])
    true, false = {
        "lt": (b < c, a >= d), "le": (b <= c, a > d), "gt": (a > d, b <= c), "ge": (a >= d, b < c),
        "eq": (a == b == c == d, b < c or d < a),
    }[order]
    return (1, 1) if true else (0, 0) if false else (0, 1)
