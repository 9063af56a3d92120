"""The interval abstract interpreter of a mask region.

Given a `Program` (`region.py`) and a *box* -- a symbolic interval for each block
argument (b, h, i, j), e.g. the rows and keys of one tile -- `Interpreter.truth(v, box)`
says whether the i1 value `v` may be true and may be false somewhere in the box, and
`Interpreter.value(v, box)` bounds an i32 value. Everything is symbolic (`symbolic.py`):
the answer is a formula of the tile bounds and the runtime dims, which the pass emits
as code.

Note [Conditional narrowing]
Plain Kleene logic over intervals is sound but loses what a conjunction knows about
its parts: in `j < G or i < G or abs(i - j) < W` no single disjunct holds on a whole
tile that straddles G, yet the union does. So `and`/`or` ask the harder of their two
questions (may `A and B` be true? may `A or B` be false?) in a narrowed box: the box is
shrunk by the literals assumed (here `j >= G`, `i >= G`) with HC4-style backward
propagation (narrowing.py: a comparison narrows its operands, and `+`, `-`, `*` and
`//` by constants, `min`, `max` and `abs` push the narrowing down to the block
arguments) plus the facts of Note [Opposite constraints], then both sides are evaluated
in the narrowed box. The narrowed box contains every point of the original one where
the literals hold, so this stays sound; on the masks of dsl.md (windows, chunks,
prefixes, global tokens) one round of it is exact (the tests check this). Boxes are
memoised with the set of literals they assume, and a budget bounds the work on
adversarial masks (past it, boxes are simply not narrowed): the masks of dsl.md take
under 50 units of it, while each level of nested `where`s can double the boxes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from attnc.analysis import domain as D
from attnc.analysis.domain import TOP, Interval, Truth, point
from attnc.analysis.narrowing import Narrowing
from attnc.analysis.region import ARG, EXTERNAL, Node, Program
from attnc.analysis.symbolic import Builder, Expr

Literal = tuple[int, bool]           # (value index, the truth assumed for it)

INT_OPS = {
    "arith.addi": D.add, "arith.subi": D.sub, "arith.muli": D.mul,
    "arith.floordivsi": D.floordiv, "arith.minsi": D.min_, "arith.maxsi": D.max_,
}
BOOL_OPS = ("arith.andi", "arith.ori", "arith.xori")
MODELED = {*INT_OPS, *BOOL_OPS, ARG, "arith.constant", "arith.cmpi", "arith.select",
           "math.absi", "attn.dim"}


@dataclass(frozen=True)
class Box:
    vars: tuple[Interval, ...]      # one interval per block argument
    facts: Expr                     # what else must hold for the box to be non-empty
    assumed: frozenset = frozenset()


def opaque_nodes(program: Program) -> list[Node]:
    """The nodes the result depends on whose value the analysis cannot know at compile
    time (param reads, float arithmetic, anything unmodelled)."""
    seen, stack, out = set(), [program.result], []
    while stack:
        v = stack.pop()
        if v == EXTERNAL or v in seen:
            continue
        seen.add(v)
        node = program.nodes[v]
        if node.op not in MODELED or node.type not in ("i1", "i32", "i64", "index"):
            out.append(node)
            continue
        stack.extend(node.operands)
    return sorted(out, key=lambda n: program.nodes.index(n))


class Interpreter:
    """Abstract evaluation of one `Program` in symbolic boxes (memoised).

    `base` is the box of the question asked; it is non-empty by the caller's contract,
    so its emptiness is never tested. `dims` maps each `attn.dim` name to its symbol.
    """

    def __init__(self, program: Program, S: Builder, base: Box, dims: Mapping[str, Expr],
                 rounds: int = 1, budget: int = 2000):
        self.p, self.S, self.base, self.dims = program, S, base, dims
        self.rounds, self.budget = rounds, budget
        self._values: dict = {}
        self._truths: dict = {}
        self._boxes: dict = {}
        self._literals: dict = {}     # (v, polarity) -> literals: a value reused by lets is
        self._disjuncts: dict = {}    # taken apart once (Note [One target per value])
        self.narrowing = Narrowing(self)
        self._work = 0          # values and truths computed; past `budget`, no narrowing

    # --- boxes ----------------------------------------------------------------------
    def feasible(self, box: Box) -> Expr:
        S = self.S
        return S.and_(box.facts, *(D.nonempty(S, x) for x, b in zip(box.vars, self.base.vars)
                                   if x != b))

    def literals(self, v: int, polarity: bool) -> frozenset:
        """`v == polarity` as a conjunction of atomic literals."""
        key = (v, polarity)
        hit = self._literals.get(key)
        if hit is None:
            hit = self._literals[key] = self._literals_of(v, polarity)
        return hit

    def _literals_of(self, v: int, polarity: bool) -> frozenset:
        node = self.p.nodes[v] if v != EXTERNAL else None
        if node is None:
            return frozenset()
        a = node.operands
        if (node.op, polarity) in (("arith.andi", True), ("arith.ori", False)):
            return self.literals(a[0], polarity) | self.literals(a[1], polarity)
        flip = self._negation_of(node)
        if flip is not None:
            return self.literals(flip, not polarity)
        return frozenset({(v, polarity)})

    def disjuncts(self, v: int, polarity: bool = True) -> list[Literal]:
        """`v == polarity` as a disjunction of literals (top-level `or`s only), each once."""
        key = (v, polarity)
        hit = self._disjuncts.get(key)
        if hit is None:
            hit = self._disjuncts[key] = tuple(dict.fromkeys(self._disjuncts_of(v, polarity)))
        return list(hit)

    def _disjuncts_of(self, v: int, polarity: bool) -> list[Literal]:
        node = self.p.nodes[v]
        if (node.op, polarity) in (("arith.ori", True), ("arith.andi", False)):
            return self.disjuncts(node.operands[0], polarity) + self.disjuncts(node.operands[1], polarity)
        flip = self._negation_of(node)
        if flip is not None:
            return self.disjuncts(flip, not polarity)
        return [(v, polarity)]

    def _negation_of(self, node: Node) -> int | None:
        """The operand `x` when the node is `xori x, true`."""
        if node.op != "arith.xori":
            return None
        for x, y in (node.operands, node.operands[::-1]):
            if y != EXTERNAL and self.p.nodes[y].op == "arith.constant" and self.p.nodes[y].attr is True:
                return x
        return None

    def assume(self, box: Box, literals) -> Box:
        """A box containing every point of `box` where all `literals` hold."""
        new = frozenset(literals) - box.assumed
        if not new:
            return box
        key = (box, new)
        hit = self._boxes.get(key)
        if hit is not None:
            return hit
        if self._work >= self.budget:
            return box          # past the budget the box stays as it is, one box for all
        out = replace(box, assumed=box.assumed | new)
        lits = sorted(out.assumed)
        out = replace(out, facts=self.S.and_(out.facts, self.narrowing.opposed(lits)))
        for _ in range(self.rounds):
            for lit in lits:
                out = self.narrowing.revise(out, lit)
        self._boxes[key] = out
        return out

    # --- values ---------------------------------------------------------------------
    def value(self, v: int, box: Box) -> Interval:
        key = (v, box)
        hit = self._values.get(key)
        if hit is None:
            self._work += 1
            hit = self._values[key] = self._value(v, box)
        return hit

    def _value(self, v: int, box: Box) -> Interval:
        if v == EXTERNAL:
            return TOP
        node, S = self.p.nodes[v], self.S
        ops = node.operands
        if node.op == ARG:
            return box.vars[node.attr]
        if node.op == "arith.constant" and isinstance(node.attr, int) and node.type != "i1":
            return point(S.const(node.attr))
        if node.op == "attn.dim":
            return point(self.dims[node.attr])
        mod = self.mod_operands(node)
        if mod is not None:
            return D.mod(S, self.value(mod[0], box), self.value(mod[1], box))
        if node.op in INT_OPS:
            return INT_OPS[node.op](S, self.value(ops[0], box), self.value(ops[1], box))
        if node.op == "math.absi":
            return D.abs_(S, self.value(ops[0], box))
        if node.op == "arith.select" and node.type != "i1":
            c, truth = ops[0], self.truth(ops[0], box)
            if truth.may_false is S.false:
                return self.value(ops[1], box)
            if truth.may_true is S.false:
                return self.value(ops[2], box)
            return D.select(S, truth, self.value(ops[1], self.assume(box, self.literals(c, True))),
                            self.value(ops[2], self.assume(box, self.literals(c, False))))
        return TOP

    def mod_operands(self, node: Node) -> tuple[int, int] | None:
        """(a, b) when the node is `a - floordivsi(a, b) * b`, the expanded floor modulo."""
        if node.op != "arith.subi":
            return None
        a, prod = node.operands
        if prod == EXTERNAL or self.p.nodes[prod].op != "arith.muli":
            return None
        for q, b in (self.p.nodes[prod].operands, self.p.nodes[prod].operands[::-1]):
            qn = self.p.nodes[q] if q != EXTERNAL else None
            if qn is not None and qn.op == "arith.floordivsi" and qn.operands == (a, b):
                return a, b
        return None

    # --- truths ---------------------------------------------------------------------
    def truth(self, v: int, box: Box) -> Truth:
        key = (v, box)
        hit = self._truths.get(key)
        if hit is None:
            self._work += 1
            hit = self._truths[key] = D.within(self.S, self.feasible(box), self._truth(v, box))
        return hit

    def literal_truth(self, lit: Literal, box: Box) -> Expr:
        """May the literal hold somewhere in the box?"""
        t = self.truth(lit[0], box)
        return t.may_true if lit[1] else t.may_false

    def _truth(self, v: int, box: Box) -> Truth:
        S = self.S
        unknown = Truth(S.true, S.true)
        if v == EXTERNAL:
            return unknown
        node = self.p.nodes[v]
        ops = node.operands
        if node.op == "arith.constant" and isinstance(node.attr, bool):
            return Truth(S.true, S.false) if node.attr else Truth(S.false, S.true)
        if node.op == "arith.cmpi":
            return self._compare(node, box)
        if node.op == "arith.andi":
            both = self.assume(box, self.literals(v, True))
            return Truth(S.and_(self.truth(ops[0], both).may_true, self.truth(ops[1], both).may_true),
                         S.or_(self.truth(ops[0], box).may_false, self.truth(ops[1], box).may_false))
        if node.op == "arith.ori":
            neither = self.assume(box, self.literals(v, False))
            return Truth(S.or_(self.truth(ops[0], box).may_true, self.truth(ops[1], box).may_true),
                         S.and_(self.truth(ops[0], neither).may_false,
                                self.truth(ops[1], neither).may_false))
        if node.op == "arith.xori":
            return D.xor(S, self.truth(ops[0], box), self.truth(ops[1], box))
        if node.op == "arith.select" and node.type == "i1":
            c = self.truth(ops[0], box)
            if c.may_false is S.false or c.may_true is S.false:
                return self.truth(ops[1] if c.may_false is S.false else ops[2], box)
            x = self.truth(ops[1], self.assume(box, self.literals(ops[0], True)))
            y = self.truth(ops[2], self.assume(box, self.literals(ops[0], False)))
            return Truth(S.or_(S.and_(c.may_true, x.may_true), S.and_(c.may_false, y.may_true)),
                         S.or_(S.and_(c.may_true, x.may_false), S.and_(c.may_false, y.may_false)))
        return unknown

    def _compare(self, node: Node, box: Box) -> Truth:
        S = self.S
        a, b = node.operands
        if a != EXTERNAL and self.p.nodes[a].type == "i1":
            x = D.xor(S, self.truth(a, box), self.truth(b, box))
            return {"eq": D.not_(S, x), "ne": x}.get(node.attr, Truth(S.true, S.true))
        pred = node.attr
        if pred not in D.SWAPPED:
            return Truth(S.true, S.true)
        return D.compare(S, pred, self.value(a, box), self.value(b, box))
