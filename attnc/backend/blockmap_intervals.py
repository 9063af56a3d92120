"""The mask region evaluated over a whole tile at run time, on intervals: the block-map
kernel's step between the static tile class and the element walk (Note [Tile intervals]
in blockmap_kernel.py says where it runs and why).

    unsupported(block, params)   -> None, or why this region has no interval evaluation
    TileIntervals(e, block, ranges).truth([b, h, i, j])  -> Tri(may_true, may_false)
    TileIntervals(e, block, ranges).truths([b, h, i, j], values)  -> [Tri] of region values

Every value of the region gets an abstract value made of SSA values computed by the
kernel: an i32 becomes an `Ival(lo, hi)` (i32, lo <= hi), an i1 a `Tri(may_true,
may_false)` (two i1). Soundness is the only contract: for any concrete operands inside
the abstract ones, the concrete result (as the kernel's `emit_mask` computes it, i32
arithmetic exact: Note [Exact integers] in exact_ints.py) is inside the abstract result; `may_true` false proves the value
false, `may_false` false proves it true.

Note [Interval transfer functions]:

* i32 `addi`, `subi`, `muli` (4 corners, 2 when one side is a constant), `absi`: bounds
  computed in i64, where they are exact; a bound outside the i32 range means the i32
  operation may wrap, and the result is then TOP = [i32 min, i32 max].
* `floordivsi` by a compile-time constant c (Python's floor division, as `emit_mask`
  expands it): monotone in the dividend, nondecreasing for c > 0 and nonincreasing for
  c < 0; c = 0 gives 0 (the kernel's convention); c = -1 is negation in i64 (x = i32 min
  wraps, so TOP). A divisor that is not a constant is not supported.
* `minsi`/`maxsi` bound by bound; `select` the hull of the arms the condition may take.
* TOP stands for any i32 where the exact value is an i32. A value the kernel computes in
  64 bits (`IntPlan.wide`: it may leave i32 and is read as a value) may lie outside it,
  so an operation reading such a value gives TOP (a comparison: may be either) whenever
  that operand is TOP, instead of bounding the result by TOP's ends.
* `cmpi` (signed, or eq/ne on i1): `a < b` may be true when a.lo < b.hi and may be false
  when a.hi >= b.lo; `a == b` may be true when the intervals overlap and may be false
  unless both are the same single point.
* `andi`: (x.t & y.t, x.f | y.f); `ori`: (x.t | y.t, x.f & y.f); `xori` (`not` is xor with
  true): (x.t & y.f | x.f & y.t, x.t & y.t | x.f & y.f); constants and `attn.dim` are
  points, b and h points, i and j the tile's rows and keys.
* `attn.param(t, idx...)` (i32 tensors): each index interval is clamped into [0, size - 1]
  as `hooks.load_param` clamps the index (clamping is monotone, so the clamped interval
  holds exactly the elements read), and the result is [min, max] of the tensor over that
  box, which `WarpRange` computes (its loads are `hooks.load_param`'s too). An axis whose
  index does not depend on i or j is a point (checked at run time: not when an operation
  wrapped, and the read is TOP then).

A region with any other operation (floats, f32 params, bitwise i32 logic, ...) is not
supported: the kernel then keeps the element walk alone, decided at compile time.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, scf

from attnc.backend.exact_ints import IntPlan
from attnc.backend.hooks import load_param
from attnc.backend.nvgpu_builders import Emit
from attnc.ir import DIM, PARAM, YIELD, cmpi_predicate, defining_op, depends_on, int_constant, yielded

I32_MIN, I32_MAX = -(2 ** 31), 2 ** 31 - 1
PARAM_CAP = 4096          # elements of one param box, past which its interval is TOP
RANGE_UNROLL = 4          # loads per lane and trip of the param min/max walk

_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge")


@dataclass(frozen=True)
class Ival:
    """An i32 interval [lo, hi] (i32 SSA values)."""
    lo: ir.Value
    hi: ir.Value


@dataclass(frozen=True)
class Tri:
    """A three-valued i1: whether the value may be true, may be false (i1 SSA values)."""
    may_true: ir.Value
    may_false: ir.Value


# ---------------------------------------------------------------- what is supported

def _is(value: ir.Value, width: int) -> bool:
    return isinstance(value.type, ir.IntegerType) and ir.IntegerType(value.type).width == width


def _param_index(tensor: ir.Value) -> int:
    """Params are the function arguments after q, k and v (attn.irdl.mlir)."""
    return ir.BlockArgument(tensor).arg_number - 3


def unsupported(block: ir.Block, params: Sequence) -> str | None:
    """None when every operation of the mask region `block` has an interval transfer
    function (Note [Interval transfer functions]), else the first that has none.
    `params` are the variant's param tensors (frontend Tensors, the `params` order)."""
    if not all(_is(a, 32) for a in block.arguments):
        return "block arguments that are not i32"
    for op in block.operations:
        name = op.name
        results, operands = list(op.results), list(op.operands)
        if name == YIELD:
            if not (len(operands) == 1 and _is(operands[0], 1)):
                return "a yield of something else than one i1"
            continue
        if len(results) != 1:
            return f"'{name}' with {len(results)} results"
        ok = False
        if name == "arith.constant":
            ok = (_is(results[0], 1) or _is(results[0], 32)) and int_constant(results[0]) is not None
        elif name == DIM:
            ok = _is(results[0], 32)
        elif name == PARAM:
            p = params[_param_index(operands[0])]
            ok = p.dtype == "i32" and _is(results[0], 32) and all(_is(v, 32) for v in operands[1:])
        elif name in _INT_OPS:
            ok = all(_is(v, 32) for v in operands + results)
        elif name == "arith.floordivsi":
            ok = all(_is(v, 32) for v in operands + results) and _constant(operands[1]) is not None
        elif name in _BOOL_TRANSFER:
            ok = all(_is(v, 1) for v in operands + results)
        elif name == "arith.cmpi":
            pred = cmpi_predicate(op)
            ok = pred in _PREDICATES and (all(_is(v, 32) for v in operands)
                                          or (pred in ("eq", "ne") and all(_is(v, 1) for v in operands)))
        elif name == "arith.select":
            ok = _is(operands[0], 1) and (all(_is(v, 32) for v in operands[1:])
                                          or all(_is(v, 1) for v in operands[1:]))
        if not ok:
            return f"'{name}' ({', '.join(str(v.type) for v in operands)} -> {results[0].type})"
    return None


# ---------------------------------------------------------------- transfer functions

def top(e: Emit) -> Ival:
    return Ival(e.c32(I32_MIN), e.c32(I32_MAX))


def point(x: ir.Value) -> Ival:
    return Ival(x, x)


def known(e: Emit, value: bool) -> Tri:
    return Tri(arith.constant(e.i1, int(value)), arith.constant(e.i1, int(not value)))


def _wide(e: Emit, x: ir.Value) -> ir.Value:
    return arith.extsi(e.i64, x)


def _narrow(e: Emit, lo: ir.Value, hi: ir.Value) -> Ival:
    """i64 bounds (lo <= hi) as an i32 interval: TOP when either leaves the i32 range."""
    fits = e.land(e.ge(lo, I32_MIN), e.le(hi, I32_MAX))
    return Ival(e.select(fits, arith.trunci(e.i32, lo), e.c32(I32_MIN)),
                e.select(fits, arith.trunci(e.i32, hi), e.c32(I32_MAX)))


def add(e: Emit, a: Ival, b: Ival) -> Ival:
    w = lambda x: _wide(e, x)  # noqa: E731
    return _narrow(e, e.add(w(a.lo), w(b.lo)), e.add(w(a.hi), w(b.hi)))


def sub(e: Emit, a: Ival, b: Ival) -> Ival:
    w = lambda x: _wide(e, x)  # noqa: E731
    return _narrow(e, e.sub(w(a.lo), w(b.hi)), e.sub(w(a.hi), w(b.lo)))


def mul(e: Emit, a: Ival, b: Ival, a_const: int | None = None, b_const: int | None = None) -> Ival:
    """a * b; a side known at compile time (`a_const`, `b_const`) needs 2 corners, not 4."""
    w = lambda x: _wide(e, x)  # noqa: E731
    if a_const is not None and b_const is None:
        a, b, a_const, b_const = b, a, b_const, a_const
    if b_const is not None:
        lo, hi = e.mul(w(a.lo), b_const), e.mul(w(a.hi), b_const)
        return _narrow(e, lo, hi) if b_const >= 0 else _narrow(e, hi, lo)
    corners = [e.mul(w(x), w(y)) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    lo, hi = corners[0], corners[0]
    for c in corners[1:]:
        lo, hi = e.min(lo, c), e.max(hi, c)
    return _narrow(e, lo, hi)


def _floordiv_const(e: Emit, x: ir.Value, c: int) -> ir.Value:
    """floor(x / c) in i32 for a constant c not in (0, -1) (no overflow possible)."""
    q = e.div(x, c)
    r = e.sub(x, e.mul(q, c))
    down = e.land(arith.cmpi(arith.CmpIPredicate.ne, r, e.c32(0)), e.lt(r, 0) if c > 0 else e.gt(r, 0))
    return e.sub(q, arith.extui(e.i32, down))


def floordiv(e: Emit, a: Ival, c: int) -> Ival:
    """a // c for a compile-time constant c (Note [Interval transfer functions])."""
    if c == 0:
        return point(e.c32(0))
    if c == -1:
        return _narrow(e, e.sub(0, _wide(e, a.hi)), e.sub(0, _wide(e, a.lo)))
    lo, hi = _floordiv_const(e, a.lo, c), _floordiv_const(e, a.hi, c)
    return Ival(lo, hi) if c > 0 else Ival(hi, lo)


def min_(e: Emit, a: Ival, b: Ival) -> Ival:
    return Ival(e.min(a.lo, b.lo), e.min(a.hi, b.hi))


def max_(e: Emit, a: Ival, b: Ival) -> Ival:
    return Ival(e.max(a.lo, b.lo), e.max(a.hi, b.hi))


def abs_(e: Emit, a: Ival) -> Ival:
    lo, hi = _wide(e, a.lo), _wide(e, a.hi)
    neg_lo, neg_hi = e.sub(0, lo), e.sub(0, hi)
    low = e.select(e.ge(lo, 0), lo, e.select(e.le(hi, 0), neg_hi, e.c64(0)))
    return _narrow(e, low, e.max(neg_lo, hi))


def cmp(e: Emit, pred: str, a: Ival, b: Ival) -> Tri:
    """Signed comparison of two intervals."""
    if pred == "sgt":
        return cmp(e, "slt", b, a)
    if pred == "sge":
        return cmp(e, "sle", b, a)
    if pred == "slt":
        return Tri(e.lt(a.lo, b.hi), e.ge(a.hi, b.lo))
    if pred == "sle":
        return Tri(e.le(a.lo, b.hi), e.gt(a.hi, b.lo))
    overlap = e.land(e.le(a.lo, b.hi), e.le(b.lo, a.hi))
    same_point = e.land(e.land(e.eq(a.lo, a.hi), e.eq(b.lo, b.hi)), e.eq(a.lo, b.lo))
    eq = Tri(overlap, not_(e, same_point))
    if pred == "eq":
        return eq
    if pred == "ne":
        return Tri(eq.may_false, eq.may_true)
    raise ValueError(f"no interval comparison '{pred}'")


def not_(e: Emit, x: ir.Value) -> ir.Value:
    return e.xor(x, e.true())


def and_(e: Emit, x: Tri, y: Tri) -> Tri:
    return Tri(e.land(x.may_true, y.may_true), e.or_(x.may_false, y.may_false))


def or_(e: Emit, x: Tri, y: Tri) -> Tri:
    return Tri(e.or_(x.may_true, y.may_true), e.land(x.may_false, y.may_false))


def xor(e: Emit, x: Tri, y: Tri) -> Tri:
    t = lambda a, b: e.land(a, b)  # noqa: E731
    return Tri(e.or_(t(x.may_true, y.may_false), t(x.may_false, y.may_true)),
               e.or_(t(x.may_true, y.may_true), t(x.may_false, y.may_false)))


def bool_eq(e: Emit, x: Tri, y: Tri) -> Tri:
    """x == y on i1 (not xor)."""
    d = xor(e, x, y)
    return Tri(d.may_false, d.may_true)


# The ops whose transfer function takes the operands' intervals alone (muli also gets
# its constant operands, floordivsi its constant divisor).
_INT_TRANSFER = {"arith.addi": add, "arith.subi": sub, "arith.minsi": min_, "arith.maxsi": max_,
                 "math.absi": abs_}
_INT_OPS = (*_INT_TRANSFER, "arith.muli")
_BOOL_TRANSFER = {"arith.andi": and_, "arith.ori": or_, "arith.xori": xor}


def select(e: Emit, c: Tri, a, b):
    """`select c, a, b` on two Ivals or two Tris: the hull of the arms c may pick."""
    if isinstance(a, Tri):
        pick = lambda x, y: e.or_(e.land(c.may_true, x), e.land(c.may_false, y))  # noqa: E731
        return Tri(pick(a.may_true, b.may_true), pick(a.may_false, b.may_false))
    lo = e.min(e.select(c.may_true, a.lo, e.c32(I32_MAX)), e.select(c.may_false, b.lo, e.c32(I32_MAX)))
    hi = e.max(e.select(c.may_true, a.hi, e.c32(I32_MIN)), e.select(c.may_false, b.hi, e.c32(I32_MIN)))
    return Ival(lo, hi)


# ---------------------------------------------------------------- the region

class TileIntervals:
    """The abstract evaluation of a supported mask region (`unsupported(...)` is None),
    emitted at the insertion point. `ranges` gives the intervals of param reads (a
    `WarpRange`: `start(param index, index intervals, varying)` then `finish(started)`;
    `varying[k]` says whether the index of axis k may depend on i or j).

    Note [Loads first]: the evaluation runs in two passes, so that every param walk whose
    indices do not depend on a param read (all of them, in the masks of dsl.md) issues
    the loads of its first trip before any of their values is used: the first pass emits
    the param-free arithmetic and those first trips (straight-line code, where the
    scheduler can put the loads of doc[b, i] and doc[b, j] back to back: one memory
    latency per tile instead of one per read); the second pass does the rest, each walk's
    remaining trips and its warp reduction included."""

    def __init__(self, e: Emit, block: ir.Block, ranges):
        self.e, self.block, self.ranges = e, block, ranges
        # Note [Interval transfer functions]: TOP read from these is not bounded by its ends.
        self.wide = IntPlan.of(block, ranges.names.size_dims).wide
        # What depends on i or j; the rest are points at run time (but for wrapping: the
        # param walk checks).
        self.varying = depends_on(block, 2, 3)

    def truth(self, args: Sequence) -> Tri:
        """The yielded i1 over the box `args` (Ivals for b, h, i, j)."""
        return self.truths(args, [yielded(self.block)])[0]

    def truths(self, args: Sequence, values: Sequence[ir.Value]) -> list[Tri]:
        """The Tri of each i1 of `values` (values of the region) over the box `args`."""
        env = dict(zip(self.block.arguments, args))
        after_read, started = set(), {}
        for op in self.block.operations:           # first pass (Note [Loads first])
            if op.name == YIELD:
                break
            depends = any(v in after_read for v in op.operands)
            if op.name == PARAM:
                after_read.update(op.results)
                if not depends:
                    started[op.result] = self._start(op, env)
            elif depends:
                after_read.update(op.results)
            else:
                env[op.result] = self._abstract(op, [env[v] for v in op.operands])
        for op in self.block.operations:           # second pass
            if op.name == YIELD:
                return [env[v] for v in values]
            if op.result in env:
                continue
            if op.name == PARAM:
                handle = started[op.result] if op.result in started else self._start(op, env)
                with op.location:
                    env[op.result] = self.ranges.finish(handle)
            else:
                env[op.result] = self._abstract(op, [env[v] for v in op.operands])
        raise ValueError("the mask_mod region has no terminator")

    def _abstract(self, op: ir.Operation, x: list):
        """`_op`, with TOP read from a wide value giving TOP (Note [Interval transfer functions])."""
        result = self._op(op, x)
        tops = [iv for v, iv in zip(op.operands, x) if v in self.wide and isinstance(iv, Ival)]
        if not tops:
            return result
        e = self.e
        with op.location:
            top_in = functools.reduce(e.or_, [e.land(e.eq(iv.lo, I32_MIN), e.eq(iv.hi, I32_MAX)) for iv in tops])
            if isinstance(result, Tri):
                return Tri(e.or_(result.may_true, top_in), e.or_(result.may_false, top_in))
            return Ival(e.select(top_in, e.c32(I32_MIN), result.lo), e.select(top_in, e.c32(I32_MAX), result.hi))

    def _start(self, op: ir.Operation, env: dict):
        indices = list(op.operands)[1:]
        with op.location:
            return self.ranges.start(_param_index(op.operands[0]), [env[v] for v in indices],
                                     [v in self.varying for v in indices])

    def _op(self, op: ir.Operation, x: list):
        e, name = self.e, op.name
        with op.location:
            if name == "arith.constant":
                c = int_constant(op.result)
                return known(e, c != 0) if _is(op.result, 1) else point(e.c32(c))
            if name == DIM:
                return point(e.dim(ir.StringAttr(op.attributes["name"]).value))
            transfer = _INT_TRANSFER.get(name) or _BOOL_TRANSFER.get(name)
            if transfer is not None:
                return transfer(e, *x)
            if name == "arith.muli":
                return mul(e, *x, _constant(op.operands[0]), _constant(op.operands[1]))
            if name == "arith.floordivsi":
                return floordiv(e, x[0], _constant(op.operands[1]))
            if name == "arith.select":
                return select(e, *x)
            if name == "arith.cmpi":
                pred = cmpi_predicate(op)
                if isinstance(x[0], Tri):
                    eq = bool_eq(e, *x)
                    return eq if pred == "eq" else Tri(eq.may_false, eq.may_true)
                return cmp(e, pred, *x)
        raise ValueError(f"no interval transfer function for '{name}' (check unsupported() first)")


def _constant(value: ir.Value) -> int | None:
    """An i32 known at compile time: an `arith.constant`, or one negated, as the frontend
    writes a negative literal (`-3` is `0 - 3`): a divisor of -3 turned the whole interval
    step off (found by a review)."""
    c = int_constant(value)
    owner = defining_op(value)
    if c is None and owner is not None and owner.name == "arith.subi" and int_constant(owner.operands[0]) == 0:
        negated = int_constant(owner.operands[1])
        if negated is not None:
            c = (-negated + 2 ** 31) % 2 ** 32 - 2 ** 31          # as the i32 subtraction wraps
    return c


# ---------------------------------------------------------------- param reads over a box

@dataclass
class _Walk:
    """A param walk between `WarpRange.start` and `finish`."""
    index: int
    los: list
    lengths: dict
    count: ir.Value             # elements to walk (0 when giving up)
    give_up: ir.Value
    lo: ir.Value                # this lane's running min and max (after the first trip)
    hi: ir.Value


class WarpRange:
    """The param reads of `TileIntervals`: [min, max] of an i32 param over the clamped box
    of its indices, walked by `lanes` lanes (lane `lane`), RANGE_UNROLL loads per lane and
    trip, each lane's running min/max folded by `reduce(x, 'min' | 'max')` (a warp's
    redux.sync in the kernel: every warp walks the box on its own, so no shared memory or
    barrier is needed; lanes = 1 and the identity on the CPU). The flat walk index past
    the end is clamped to the last element (a repeated load does not change min/max).
    `start` emits the first trip, straight-line (Note [Loads first]), `finish` the other
    trips and the reduction. A box of more than `cap` elements, or an index meant to be
    a point that is not one (it wrapped), gives TOP (the loads of the first trip still
    happen, at clamped, in-bounds indices, and are ignored). `names` (blockmap.MapNames)
    resolves the params, by their index in `names.param_order`, and their sizes; each
    element is read by `hooks.load_param`, exactly as the mask's own reads."""

    def __init__(self, e: Emit, names, lane: ir.Value, lanes: int,
                 reduce: Callable[[ir.Value, str], ir.Value], cap: int = PARAM_CAP):
        self.e, self.names = e, names
        self.lane, self.lanes, self.reduce, self.cap = lane, lanes, reduce, cap

    def _read(self, index: int, indices: Sequence[ir.Value]) -> ir.Value:
        names = self.names
        return load_param(self.e, names, names.param_order[index], indices, names.never_empty)

    def __call__(self, index: int, boxes: Sequence[Ival], varying: Sequence[bool]) -> Ival:
        return self.finish(self.start(index, boxes, varying))

    def start(self, index: int, boxes: Sequence[Ival], varying: Sequence[bool]) -> _Walk:
        e, p = self.e, self.names.params[self.names.param_order[index]]
        los, his = [], []
        for box, size in zip(boxes, p.shape):
            last = e.sub(self.names.size(e, size), 1)
            los.append(e.max(e.min(box.lo, last), 0))
            his.append(e.max(e.min(box.hi, last), 0))
        give_up = arith.constant(e.i1, 0)
        count, lengths = e.c32(1), {}
        for axis, vary in enumerate(varying):
            if not vary:
                give_up = e.or_(give_up, arith.cmpi(arith.CmpIPredicate.ne, los[axis], his[axis]))
                continue
            # lengths and their product saturate at cap + 1 (no i32 overflow)
            lengths[axis] = e.add(e.sub(his[axis], los[axis]), 1)
            count = e.min(e.mul(count, e.min(lengths[axis], self.cap + 1)), self.cap + 1)
        give_up = e.or_(give_up, e.gt(count, self.cap))
        if not lengths:
            value = self._read(index, los)
            return _Walk(index, los, lengths, count, give_up, value, value)
        walk = _Walk(index, los, lengths, e.select(give_up, e.c32(0), count), give_up,
                     e.c32(I32_MAX), e.c32(I32_MIN))
        walk.lo, walk.hi = self._trip(walk, e.c32(0), walk.lo, walk.hi)
        return walk

    def finish(self, walk: _Walk) -> Ival:
        e = self.e
        lo, hi = walk.lo, walk.hi
        if walk.lengths:
            step = self.lanes * RANGE_UNROLL
            loop = scf.ForOp(e.c32(step), walk.count, e.c32(step), [lo, hi])
            with ir.InsertionPoint(loop.body):
                scf.yield_(list(self._trip(walk, loop.induction_variable, *loop.inner_iter_args)))
            lo, hi = self.reduce(loop.results[0], "min"), self.reduce(loop.results[1], "max")
        return Ival(e.select(walk.give_up, e.c32(I32_MIN), lo), e.select(walk.give_up, e.c32(I32_MAX), hi))

    def _trip(self, walk: _Walk, base: ir.Value, lo: ir.Value, hi: ir.Value):
        """lo, hi folded with this lane's RANGE_UNROLL elements from flat index base."""
        e = self.e
        last = e.sub(walk.count, 1)
        for u in range(RANGE_UNROLL):
            k = e.min(e.add(base, e.add(self.lane, u * self.lanes)), last)
            value = self._read(walk.index, self._indices(walk.los, walk.lengths, k))
            lo, hi = e.min(lo, value), e.max(hi, value)
        return lo, hi

    def _indices(self, los, lengths: dict, k: ir.Value) -> list:
        """The index of flat element k of the box (the last varying axis fastest)."""
        e, indices = self.e, list(los)
        axes = sorted(lengths)
        for n, axis in enumerate(reversed(axes)):
            if n == len(axes) - 1:
                indices[axis] = e.add(los[axis], k)
            else:
                indices[axis] = e.add(los[axis], e.rem(k, lengths[axis]))
                k = e.div(k, lengths[axis])
        return indices
