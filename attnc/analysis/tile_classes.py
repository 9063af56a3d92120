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

Note [Answer budget]
~~~~~~~~~~~~~~~~~~~~
The pass emits each answer as code that the kernel inlines where it asks it (the KV
range at each loop over the key blocks, the tile class in the loops' steps), so an
answer's size multiplies into the kernel's and LLVM's and ptxas' time. The formulas
grow with the mask: an `or` of 150 equalities gave a full range of 11,000 nodes and a
tile class of 1,400, 150 nested `where`s 28,000 and 3,100, most of the compile. So an
answer of more than `MAX_NODES` distinct nodes is replaced by its coarsest sound value:
may_keep and may_drop true (every tile MIXED), one segment of every key block, no FULL
blocks. Each is safe: a kept tile is still masked per element, a skipped one was never
needed. Solving for the full range costs more than linear time in the condition solved
(each `or` a union, each union's bounds a min or max whose arguments are compared
pairwise), so a condition of more than `MAX_SOLVED` nodes is not solved: no FULL
blocks. The masks of dsl.md and the generated variants stay below 450 nodes per answer
and 70 per condition solved.

Note [Many disjuncts]
~~~~~~~~~~~~~~~~~~~~~
A mask of more than `MAX_SEGMENTS` top-level disjuncts gets one segment: the hull of
the keys each disjunct allows (the box narrowed by it with j unbounded), cut to the
keys, and empty where the hull is. A range may over-approximate, so this is sound; for
an `or` of `i - j == k`, k = 0 .. 149, it is the band [i - 149, i] exactly, where one
segment for the whole `or` (narrowed by nothing) visited every key block. The hull's
bounds are a min and a max over the disjuncts, which `_extreme` keeps small when the
disjuncts differ by constants (Note [Answer budget] bounds it otherwise).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from attnc.analysis.domain import TOP, Interval, point
from attnc.analysis.intervals import Box, Interpreter, opaque_nodes
from attnc.analysis.region import Program
from attnc.analysis.solve import inner_interval
from attnc.analysis.symbolic import Builder, Expr, as_const, symbols
from attnc.frontend.depth import run_deep

SKIP, MIXED, FULL = 0, 1, 2
TILE_ARGS = ("m_lo", "m_hi", "n_lo", "n_hi", "b", "h")
KV_ARGS = ("m_block", "b", "h")
KEY = "key"            # the key j while solving for the full range (never emitted)
MAX_SEGMENTS = 4       # more top-level disjuncts are covered by one hull (Note [Many disjuncts])
MAX_NODES = 512        # the largest answer emitted as it is (Note [Answer budget])
MAX_SOLVED = 128       # the largest condition solved for the full range (Note [Answer budget])


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
    classes = tile_classes(program, S, dims, seq_q, seq_k)
    plan = kv_plan(program, S, dims, block_m, block_n, seq_q, seq_k)
    return MaskSummary("runtime" if opaque else "static", S, _bounded_classes(S, classes),
                       _bounded_plan(S, plan, block_n, seq_k), opaque)


def _bounded_classes(S: Builder, classes: TileClasses) -> TileClasses:
    """Note [Answer budget]: an answer too large to emit is unknown (true)."""
    return TileClasses(*(x if _nodes([x]) <= MAX_NODES else S.true
                         for x in (classes.may_keep, classes.may_drop)))


def _bounded_plan(S: Builder, plan: KvPlan, block_n: int, seq_k: Expr) -> KvPlan:
    """Note [Answer budget]: segments too large to emit are every key block, a full range
    too large is empty."""
    segments, full = plan.segments, plan.full
    if _nodes([x for segment in segments for x in segment]) > MAX_NODES:
        zero, bn = S.const(0), S.const(block_n)
        segments = ((zero, S.floordiv(S.add(seq_k, S.const(block_n - 1)), bn)),)
    if _nodes(full) > MAX_NODES:
        full = (S.const(0), S.const(0))
    return KvPlan(segments, full)


def _nodes(exprs) -> int:
    """The distinct nodes of `exprs` (the DAG the pass emits, each node once)."""
    seen: set[int] = set()
    stack = list(exprs)
    while stack:
        x = stack.pop()
        if x.id in seen:
            continue
        seen.add(x.id)
        if x.kind == "lin":
            stack.extend(a for a, _ in x.args[1])
        else:
            stack.extend(a for a in x.args if isinstance(a, Expr))
    return len(seen)


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
    bn, one = S.const(block_n), S.const(1)
    if len(disjuncts) > MAX_SEGMENTS:
        return (_hull(program, S, dims, box, disjuncts, bn),)
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


def _hull(program: Program, S: Builder, dims, box: Box, disjuncts, bn: Expr) -> Range:
    """The key blocks of every disjunct's keys in one range (Note [Many disjuncts]): the
    hull of the keys each disjunct allows with j unbounded, then cut to the keys."""
    keys = box.vars[3]
    free = Box(box.vars[:3] + (TOP,), box.facts)
    interp = Interpreter(program, S, free, dims)
    kept = [interp.assume(free, interp.literals(*lit)).vars[3] for lit in disjuncts]
    los, his = [k.lo for k in kept], [k.hi for k in kept]
    lo = keys.lo if None in los else S.max(keys.lo, _extreme(S, "min", los))
    hi = keys.hi if None in his else S.min(keys.hi, _extreme(S, "max", his))
    start = S.floordiv(lo, bn)
    return start, S.select(S.le(lo, hi), S.add(S.floordiv(hi, bn), S.const(1)), start)


def _extreme(S: Builder, kind: str, xs: list[Expr]) -> Expr:
    """min (kind "min") or max of `xs`, small where they are one expression plus different
    constants: an argument of the other kind that all share is taken out (min_k max(c, y_k)
    = max(c, min_k y_k)), and a min or max whose arguments share a constant is that
    constant plus the min or max of the rest (min(a - k, b - k) = min(a, b) - k); what is
    left differs by constants, which the Builder folds to one."""
    other = "max" if kind == "min" else "min"
    parts = [_arguments(S, other, x) for x in xs]
    shared = set.intersection(*(set(p) for p in parts))
    if shared and all(len(p) > len(shared) for p in parts):
        rest = [_extremum(S, other, [y for n, y in p.items() if n not in shared]) for p in parts]
        common = [y for n, y in parts[0].items() if n in shared]
        return _extremum(S, other, common + [_extreme(S, kind, rest)])
    if shared:                                  # some x is the shared arguments alone
        return _extremum(S, other, [y for n, y in parts[0].items() if n in shared])
    return _extremum(S, kind, [_shifted(S, x) for x in xs])


def _arguments(S: Builder, kind: str, x: Expr) -> dict[int, Expr]:
    """The arguments of `x` as a `kind` (min or max) of them (`x` alone if it is none)."""
    const, terms = x.args
    if len(terms) == 1 and terms[0][1] == 1 and terms[0][0].kind == kind:
        return {y.id: y for y in (S.add(a, S.const(const)) for a in terms[0][0].args)}
    return {x.id: x}


def _shifted(S: Builder, x: Expr) -> Expr:
    """`x`, a min or max whose arguments all have the constant c, as c + that min or max
    of the arguments less c; else `x`."""
    const, terms = x.args
    if len(terms) != 1 or terms[0][1] != 1 or terms[0][0].kind not in ("min", "max"):
        return x
    atom = terms[0][0]
    shifts = {a.args[0] for a in atom.args}
    if len(shifts) != 1:
        return x
    c = shifts.pop()
    inner = _extremum(S, atom.kind, [S.add(a, S.const(-c)) for a in atom.args])
    return S.add(inner, S.const(const + c))


def _extremum(S: Builder, kind: str, xs: list[Expr]) -> Expr:
    return S.min(*xs) if kind == "min" else S.max(*xs)


def _full_range(program, S: Builder, dims, b, h, rows: Interval, keys: Interval,
                block_n: int) -> Range:
    """The blocks of keys that no row of `rows` drops (see the module docstring)."""
    j = S.sym(KEY)
    S.axiom(keys.lo, j)
    S.axiom(j, keys.hi)
    box = Box((b, h, rows, point(j)), S.true)
    may_drop = Interpreter(program, S, box, dims).truth(program.result, box).may_false
    if _nodes([may_drop]) > MAX_SOLVED:
        return S.const(0), S.const(0)
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
