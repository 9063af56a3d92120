"""A mask's keys per row as bit masks over a lane's columns (Note [Row bit masks]).

A lane holds, in each score row, the columns column(c) = 8 (c // 2) + c % 2 of its
tile's first one (score_masks.ElementCoords), slot c of the row. `low_bits`, `below`
and `point_bit` build 32-bit masks of those slots from column offsets; `RowBits` builds
a mask_mod's per row from them.

Note [Row bit masks]
~~~~~~~~~~~~~~~~~~~~
A mask_mod that is a boolean combination (and, or, not, xor, `where` of booleans) of
comparisons each linear in j with coefficient +-1 (`i - j == 3`, `j <= i + c`, `j != i`;
Note [Row intervals] in row_intervals.py solves each for j) and of values free of j keeps, per
row, keys that each comparison gives as an interval or a point in j. So in a partial
tile the kernel builds, once per score row, one 32-bit mask per comparison over the
lane's columns (a point is one shifted bit, an interval a run of low bits: Note [Kept
bits] in score_masks.py), combines them with the mask's own and/or/not as bitwise ops,
ANDs the keys below N, and per score tests one bit. The per-score code no longer
grows with the mask: an `or` of 150 equalities was 300 ops per score, unrolled for
the 64 to 128 scores a thread holds at each of the kernel's mask sites, and most of
its compile time in LLVM and ptxas; as bits it is about 10 ops per comparison per row
and two per score. The other cures weighed: a noinline function per score keeps the
300 ops per score at run time, adds a call per score and keeps the kernel's scores
live across the calls; fewer mask sites divide the cost by a constant only.

Masks of fewer than `MIN_COMPARISONS` comparisons (causal, windows, prefixes, a few
`or`s) keep their per-score code, whose kernels are the measured ones; a mask with any
other j-dependent value (a param read at j, a division of j, a float) too.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from attnc.backend.hook_walks import _int_range, _j_coefficient_of, _operands_first, _sub
from attnc.backend.hooks import RegionCode
from attnc.backend.nvgpu_builders import Emit
from attnc.backend.row_intervals import _clamp_far, solve_term
from attnc.ir import cmpi_predicate, defining_op, depends_on, yielded

MIN_COMPARISONS = 8         # fewer: the per-score code (Note [Row bit masks])
WORD = 32                   # slots per mask word
_COMPARISONS = ("eq", "ne", "slt", "sle", "sgt", "sge")
_BITWISE = ("arith.andi", "arith.ori", "arith.xori")


def words_of(slots: int) -> list[int]:
    """The slots of each 32-bit word of a row of `slots` scores."""
    return [min(WORD, slots - w) for w in range(0, slots, WORD)]


def below(e: Emit, v, slots: int):
    """The number of the row's `slots` whose column is < v: 2 (v // 8) + min(v % 8, 2)
    for v clamped to [0, 4 slots]."""
    v = e.max(e.min(v, 4 * slots), 0)
    return e.add(e.shl(e.shr(v, 3), 1), e.min(e.and_(v, 7), 2))


def low_bits(e: Emit, n, slots: int):
    """The n lowest bits, 0 <= n <= slots (a shift by 32 is undefined)."""
    ones = e.sub(e.shl(1, e.min(n, 31)), 1)
    return e.select(e.ge(n, 32), e.c32(-1), ones) if slots == 32 else ones


def point_bit(e: Emit, d, slots: int):
    """The bit of the slot whose column is d, 0 when no slot's is: column 8m + x (x = 0
    or 1, m < slots / 2) is slot 2m + x = (d >> 2) | (d & 1)."""
    span = 4 * slots
    if span & (span - 1) == 0:          # d in [0, span) with d & 6 == 0 in one test
        valid = e.eq(e.and_(d, -span | 6), 0)
    else:
        valid = e.land(e.ult(d, span), e.eq(e.and_(d, 6), 0))
    return e.select(valid, e.shl(1, e.or_(e.shr(d, 2), e.and_(d, 1))), e.c32(0))


@dataclass(frozen=True)
class _Comparison:
    """`a - b <pred> 0` with a - b = d0 + k * j: `term` = (pred, k, a, b) as
    RowInterval.bounds solves it ("ne" solved as "eq", then `negated`)."""
    term: tuple
    negated: bool


class RowBits:
    """Note [Row bit masks]: `words(e, b, h, i, j0, bound, slots)` -> one i32 per 32
    slots of a row, bit c set when the mask keeps the key j0 + column(c) and it lies
    below `bound`. Build with `RowBits.of` (None for a mask outside that form)."""

    def __init__(self, code: RegionCode, nodes: dict, order: list):
        self.code = code
        self.nodes = nodes          # value -> None (free of j), a _Comparison, or its operands
        self.order = order          # the values of `nodes`, operands before their users
        abi_dims, memo = frozenset(code.names.abi_dims), {}
        self.ranges = {v: _sub(_int_range(n.term[2], abi_dims, memo=memo), _int_range(n.term[3], abi_dims, memo=memo))
                       for v, n in nodes.items() if isinstance(n, _Comparison)}
        # At j = 0 only the values free of j and the comparisons' sides are emitted.
        needed = [v for v, n in nodes.items() if n is None] + [
            w for n in nodes.values() if isinstance(n, _Comparison) for w in n.term[2:]]
        results = {r for op in code.block.operations for r in op.results}
        computed: set = set()
        for v in needed:
            computed.update(_operands_first(v, results - computed))
        self.skip = frozenset(results - computed)

    @staticmethod
    def of(code) -> "RowBits | None":
        """The bit masks of the mask region `code` (a RegionCode), or None when it is not
        a combination of at least MIN_COMPARISONS comparisons linear in j and values free
        of j (one walk of the region)."""
        if not isinstance(code, RegionCode):
            return None
        nodes = _boolean_nodes(code.block)
        if nodes is None or sum(isinstance(n, _Comparison) for n in nodes.values()) < MIN_COMPARISONS:
            return None
        return RowBits(code, nodes, list(nodes))

    def words(self, e: Emit, b, h, i, j0, bound, slots: int) -> list[ir.Value]:
        block = self.code.block
        env = self.code._run(e, dict(zip(block.arguments, (b, h, i, e.c32(0)))), self.skip)
        value = lambda v: env.get(v, v)  # noqa: E731
        sizes = words_of(slots)
        bits: dict = {}
        for v in self.order:
            node = self.nodes[v]
            if node is None:
                bits[v] = [e.select(value(v), e.c32(-1), e.c32(0))] * len(sizes)
            elif isinstance(node, _Comparison):
                bits[v] = self._comparison(e, node, self.ranges[v], value, j0, sizes)
            else:
                bits[v] = _combined(e, defining_op(v), [bits[w] for w in node])
        n = e.sub(bound, j0)                # keys j < bound: columns below bound - j0
        return [e.and_(word, low_bits(e, below(e, e.sub(n, 4 * WORD * w), s), s))
                for w, (word, s) in enumerate(zip(bits[yielded(block)], sizes))]

    @staticmethod
    def _comparison(e: Emit, node: _Comparison, r, value, j0, sizes: list[int]) -> list[ir.Value]:
        side, v, r, wide = solve_term(e, node.term, r, value)
        d = e.sub(_clamp_far(e, v) if wide else _clamp_far(e, v, r), j0)    # in [-2^31, 2^30]: no wrap
        out = []
        for w, s in enumerate(sizes):
            dw = e.sub(d, 4 * WORD * w) if w else d
            if side == "eq":
                word = point_bit(e, dw, s)
            elif side == "hi":
                word = low_bits(e, below(e, e.add(dw, 1), s), s)
            else:
                word = e.xor(low_bits(e, below(e, dw, s), s), -1)
            out.append(e.xor(word, -1) if node.negated else word)
        return out


def _combined(e: Emit, op: ir.Operation, operands: list[list]) -> list:
    """The bitwise form of the i1 `op` (andi, ori, xori, select, or == and != of
    booleans) on its operands' words."""
    if op.name == "arith.select":
        return [e.or_(e.and_(c, x), e.and_(e.xor(c, -1), y)) for c, x, y in zip(*operands)]
    if op.name == "arith.cmpi":
        same = cmpi_predicate(op) == "eq"
        return [e.xor(e.xor(x, y), -1) if same else e.xor(x, y) for x, y in zip(*operands)]
    bitwise = {"arith.andi": e.and_, "arith.ori": e.or_, "arith.xori": e.xor}[op.name]
    return [bitwise(x, y) for x, y in zip(*operands)]


def _boolean_nodes(block: ir.Block) -> dict | None:
    """The boolean layer of a mask region, operands first: value -> None (free of j), a
    _Comparison, or the tuple of its operands (an i1 andi, ori, xori, select, == or !=); None when
    a j-dependent i1 is anything else. No recursion on the depth of the mask."""
    j = block.arguments[3]
    tainted = depends_on(block, 3)
    coefficients: dict = {}             # _j_coefficient's memo, shared by the comparisons
    nodes: dict = {}
    stack = [(yielded(block), False)]
    while stack:
        v, expanded = stack.pop()
        if v in nodes:
            continue
        op = defining_op(v) if v in tainted else None
        if v not in tainted:
            nodes[v] = None
        elif op is None or str(v.type) != "i1":
            return None
        elif op.name in _BITWISE or op.name == "arith.select" or _boolean_equality(op):
            if expanded:
                nodes[v] = tuple(op.operands)
            else:
                stack.append((v, True))
                stack.extend((w, False) for w in reversed(list(op.operands)) if w not in nodes)
        elif op.name == "arith.cmpi" and cmpi_predicate(op) in _COMPARISONS:
            comparison = _comparison(op, j, tainted, coefficients)
            if comparison is None:
                return None
            nodes[v] = comparison
        else:
            return None
    return nodes


def _boolean_equality(op: ir.Operation) -> bool:
    """`x == y` or `x != y` of two booleans: a bitwise xnor or xor."""
    return op.name == "arith.cmpi" and str(op.operands[0].type) == "i1" and cmpi_predicate(op) in ("eq", "ne")


def _comparison(op: ir.Operation, j: ir.Value, tainted: set, memo: dict) -> _Comparison | None:
    a, b = op.operands
    for v in (a, b):
        for w in _operands_first(v, tainted):
            if w not in memo:
                memo[w] = _j_coefficient_of(w, j, tainted, memo)
    ka, kb = (memo[v] if v in tainted else 0 for v in (a, b))
    if ka is None or kb is None or ka - kb not in (1, -1):
        return None
    pred = cmpi_predicate(op)
    return _Comparison(("eq" if pred == "ne" else pred, ka - kb, a, b), negated=pred == "ne")
