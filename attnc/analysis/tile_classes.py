"""What a mask means for the tiles of the KV loop: the questions the kernel asks.

* `tile_classes`: for a tile of rows [m_lo, m_hi) and keys [n_lo, n_hi), may some
  (i, j) be kept (`may_keep`) and may some be dropped (`may_drop`)? The tile is
  SKIP when nothing may be kept, FULL when nothing may be dropped (no per-element mask),
  MIXED otherwise. The tile is non-empty by the caller's contract.
* `kv_plan`: for query block `m_block`,
  - `segments`: the key blocks that may hold a kept key, as sorted, disjoint half-open
    ranges [start, end) of n_block, one per top-level disjunct of the mask (`j < P or
    j <= i` keeps a prefix and a causal band; their union may have a hole, as for
    global tokens plus a window). Blocks outside every segment are SKIP.
  - `full`: one range [start, end) of key blocks that are FULL for this query block
    (every row keeps every key): the keys no row can drop, solved from the analysis'
    "may drop key j" formula (`solve.py`), rounded inwards to whole blocks. It lies
    inside the segments; where FULL blocks form several runs, it is one of them.

All answers are symbolic (`symbolic.Expr`) in the names of `TILE_ARGS` / `KV_ARGS` and
the dims, computed by the interval interpreter (`intervals.py`), and are what the pass
emits as functions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from attnc.analysis.domain import Interval, point
from attnc.analysis.intervals import Box, Interpreter, opaque_nodes
from attnc.analysis.region import Program
from attnc.analysis.solve import inner_interval
from attnc.analysis.symbolic import Builder, Expr, as_const, symbols
from attnc.frontend.depth import run_deep

SKIP, MIXED, FULL = 0, 1, 2
TILE_ARGS = ("m_lo", "m_hi", "n_lo", "n_hi", "b", "h")
KV_ARGS = ("m_block", "b", "h")
KEY = "key"            # the key j while solving for the full range (never emitted)
MAX_SEGMENTS = 4       # more top-level disjuncts are covered by one hull


@dataclass(frozen=True)
class TileClasses:
    may_keep: Expr
    may_drop: Expr

    def tile_class(self, S: Builder) -> Expr:
        """SKIP / MIXED / FULL as one integer expression."""
        return S.select(self.may_keep, S.select(self.may_drop, S.const(MIXED), S.const(FULL)),
                        S.const(SKIP))


Range = tuple[Expr, Expr]                       # [start, end) of n_block


@dataclass(frozen=True)
class KvPlan:
    segments: tuple[Range, ...]
    full: Range


@dataclass(frozen=True)
class MaskSummary:
    kind: str                                   # 'none', 'static' or 'runtime'
    builder: Builder
    classes: TileClasses | None = None
    plan: KvPlan | None = None
    opaque: tuple = ()                          # the nodes that make it 'runtime'


def summarize_mask(program: Program | None, dims: Mapping[str, Expr] | None = None, *,
                   block_m: int, block_n: int, seq_q: Expr | int | str, seq_k: Expr | int | str,
                   builder: Builder | None = None) -> MaskSummary:
    """Everything the pass records about one mask (None: the variant has no mask).

    `dims` maps dim names to symbols (default: a symbol per name used); `seq_q`/`seq_k`
    are M and N, as a dim name, a number or an expression.
    """
    S = builder or Builder()
    if program is None:
        return MaskSummary("none", S)
    return run_deep(_summarize, program, S, dims, block_m, block_n, seq_q, seq_k)   # Note [Deep expressions]


def _summarize(program: Program, S: Builder, dims, block_m: int, block_n: int, seq_q, seq_k) -> MaskSummary:
    dims = dims if dims is not None else _DimSymbols(S)
    seq_q, seq_k = (_as_expr(S, x) for x in (seq_q, seq_k))
    opaque = tuple(opaque_nodes(program))
    return MaskSummary("runtime" if opaque else "static", S,
                       tile_classes(program, S, dims, seq_q, seq_k),
                       kv_plan(program, S, dims, block_m, block_n, seq_q, seq_k), opaque)


def unanalysed(summary: MaskSummary, *, block_n: int, seq_k: Expr | int | str) -> MaskSummary:
    """`summary`'s mask (its kind and opaque nodes kept) with nothing proven: every tile
    MIXED, every key block visited, none FULL. Sound for any mask, for what the analysis
    cannot compute exactly (attnc.passes.analyze_masks: values past 64 bits)."""
    S = Builder()
    zero = S.const(0)
    blocks = S.floordiv(S.add(_as_expr(S, seq_k), S.const(block_n - 1)), S.const(block_n))
    return MaskSummary(summary.kind, S, TileClasses(S.true, S.true), KvPlan(((zero, blocks),), (zero, zero)),
                       summary.opaque)


def tile_classes(program: Program, S: Builder, dims: Mapping[str, Expr], seq_q: Expr,
                 seq_k: Expr) -> TileClasses:
    m_lo, m_hi, n_lo, n_hi, b, h = (S.sym(n) for n in TILE_ARGS)
    zero, one = S.const(0), S.const(1)
    for lo, hi, seq in ((m_lo, m_hi, seq_q), (n_lo, n_hi, seq_k)):   # 0 <= lo < hi <= seq
        S.axiom(zero, lo)
        S.axiom(S.add(lo, one), hi)
        S.axiom(hi, seq)
    box = Box((point(b), point(h), Interval(m_lo, S.sub(m_hi, one)), Interval(n_lo, S.sub(n_hi, one))),
              S.true)
    t = Interpreter(program, S, box, dims).truth(program.result, box)
    return TileClasses(t.may_true, t.may_false)


def kv_plan(program: Program, S: Builder, dims: Mapping[str, Expr], block_m: int,
            block_n: int, seq_q: Expr, seq_k: Expr) -> KvPlan:
    m_block, b, h = (S.sym(n) for n in KV_ARGS)
    zero, one = S.const(0), S.const(1)
    m_lo = S.scale(m_block, block_m)
    S.axiom(zero, m_block)                      # a non-empty query block, keys to visit
    S.axiom(S.add(m_lo, one), seq_q)
    S.axiom(one, seq_k)
    S.axiom(one, seq_q)
    rows = Interval(m_lo, S.sub(S.min(S.add(m_lo, S.const(block_m)), seq_q), one))
    keys = Interval(zero, S.sub(seq_k, one))
    return KvPlan(_segments(program, S, dims, point(b), point(h), rows, keys, block_n),
                  _full_range(program, S, dims, point(b), point(h), rows, keys, block_n))


def _segments(program, S: Builder, dims, b, h, rows: Interval, keys: Interval,
              block_n: int) -> tuple[Range, ...]:
    box = Box((b, h, rows, keys), S.true)
    interp = Interpreter(program, S, box, dims)
    disjuncts = interp.disjuncts(program.result)
    if len(disjuncts) > MAX_SEGMENTS:
        disjuncts = [(program.result, True)]
    bn, one = S.const(block_n), S.const(1)
    all_blocks = S.floordiv(S.add(keys.hi, bn), bn)
    ranges = []
    for lit in disjuncts:
        narrowed = interp.assume(box, interp.literals(*lit))
        kept = narrowed.vars[3]
        start = S.floordiv(kept.lo, bn)
        end = S.select(interp.literal_truth(lit, narrowed),
                       S.add(S.floordiv(kept.hi, bn), one), start)
        if as_const(start) == 0 and end is all_blocks:
            return ((start, end),)
        ranges.append((start, end))
    return _disjoint(S, _merge_equal_starts(S, ranges))


def _full_range(program, S: Builder, dims, b, h, rows: Interval, keys: Interval,
                block_n: int) -> Range:
    """The blocks of keys that no row of `rows` drops (see the module docstring)."""
    j = S.sym(KEY)
    S.axiom(keys.lo, j)
    S.axiom(j, keys.hi)
    box = Box((b, h, rows, point(j)), S.true)
    may_drop = Interpreter(program, S, box, dims).truth(program.result, box).may_false
    bn, one = S.const(block_n), S.const(1)

    def blocks(kept: Interval) -> Range:
        """The whole blocks inside the keys [lo, hi] (the last block ends at the last key)."""
        start = S.ceildiv(kept.lo, block_n)
        end = S.select(S.le(keys.hi, kept.hi), S.floordiv(S.add(keys.hi, bn), bn),
                       S.floordiv(S.add(kept.hi, one), bn))
        return start, S.max(start, end)
    kept = inner_interval(S, S.not_(may_drop), j, keys,
                          size=lambda a: S.sub(blocks(a)[1], blocks(a)[0]))
    start, end = blocks(kept)
    if KEY in symbols(start) | symbols(end) or start is end:
        return S.const(0), S.const(0)
    return start, end


def _merge_equal_starts(S: Builder, ranges):
    merged: dict[int, tuple[Expr, Expr]] = {}
    for start, end in ranges:
        old = merged.get(start.id)
        merged[start.id] = (start, end if old is None else S.max(old[1], end))
    return list(merged.values())


def _disjoint(S: Builder, ranges):
    """Sorted, disjoint ranges with the same union (empty ones may remain)."""
    ranges = list(ranges)
    for k in range(len(ranges)):                  # a bubble sort network on the starts
        for n in range(len(ranges) - 1 - k):
            (s0, e0), (s1, e1) = ranges[n], ranges[n + 1]
            swap = S.lt(s1, s0)
            if swap is S.false:
                continue
            ranges[n] = (S.select(swap, s1, s0), S.select(swap, e1, e0))
            ranges[n + 1] = (S.select(swap, s0, s1), S.select(swap, e0, e1))
    out, covered = [], None
    for start, end in ranges:
        if covered is not None:
            start = S.max(start, covered)
            end = S.max(end, start)
        out.append((start, end))
        covered = end if covered is None else S.max(covered, end)
    return tuple(out)


def _as_expr(S: Builder, x) -> Expr:
    if isinstance(x, Expr):
        return x
    return S.const(x) if isinstance(x, int) else S.sym(x)


class _DimSymbols(dict):
    """A symbol for each dim name, made on first use."""

    def __init__(self, S: Builder):
        super().__init__()
        self.S = S

    def __missing__(self, name: str) -> Expr:
        self[name] = self.S.sym(name)
        return self[name]
