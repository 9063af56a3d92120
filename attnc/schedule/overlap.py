"""sm_90a's consumer warpgroups with their two GEMMs overlapped, written into the L5 IR
(attn-overlap-gemms).

Note [Overlapped steps in the IR]: attn-insert-pipelines leaves each consumer warpgroup's
KV step as the tile program has it -- QK^T of block n, its scores and softmax, then
P.V(n). The kernel (Note [wgmma overlap] in attnc/backend/sm90a.py) runs the steps
rotated by half a step, so that the P.V of one block runs on the tensor cores while the
warpgroup's softmax of the next one runs on the other pipes. This writes that rotation:
over the key range [lo, hi) of the role's KV loops,

    if lo < hi:
      step lo       wait K; S = QK^T (async); land S; release K; scores; softmax
      loops over n in [lo + 1, hi), each carrying P and the factor of step n - 1 and the
      P.V of step n - 2 in flight:
                    land P.V(n - 2); O *= factor(n - 1); release V(n - 2) (from n = lo + 2)
                    wait K(n); wait V(n - 1)
                    S = QK^T(n) (async); O += P(n - 1) V(n - 1) (async)
                    land S, the P.V left in flight (pending = 1); release K(n)
                    scores; softmax of step n
      last step     land P.V(hi - 2); O *= factor(hi - 1); wait V(hi - 1); P.V (async); land it
    else: O, m and l as they start

with `async` on both attn.mma ops and attn.mma_wait where a GEMM's result is landed
(Note [Asynchronous GEMMs] in verify.py): the K and V slots are on rings of their own
((stage, phase) pairs a step apart), and each loop keeps its bounds clamped above lo.
The V slots of the last two steps are released only with persistent CTAs, where the
next query block reuses them; Q's slot (persistent CTAs) once the last QK^T landed.
With ping-pong the turns are taken around the GEMMs issued together -- step lo's QK^T,
each loop's pair, the last P.V -- with the waits for K and V before the turn. The
steps are the loops' (block n of step t is top - t: Note [Key blocks top down] in
attnc/passes/tile_program.py), so `lo` and `hi` above count steps, and each rotated
trip starts with its block. Persistent CTAs
without ping-pong also issue a block's first QK^T before the previous block's O is
stored: walk_ahead.py writes that after this rotation (Note [The next block's first QK^T
in the IR]).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.passes.tile_program import KV_LOOP, block_of_step, kv_block

PASS = "attn-overlap-gemms"


def overlap_role(role: ir.Operation, kernel: ir.Operation) -> None:
    """Note [Overlapped steps in the IR], on consumer role `role` of `kernel` (L5)."""
    bars = {R.name_of(b): R.attrs_of(b) for b in R.mbarrier_ops(kernel)}
    ops, at, loops = kv_loops_to_rotate(role)
    bodies = [_Body(loop, bars) for loop in loops]
    chained_loops(ops, at, "m, l, O and its ring", 5)
    last = loops[-1]
    turns = _Turns(ops[:at[0]], ops[at[-1] + 1:])
    for b in bodies:        # the steps' turns are rebuilt from those around the loops
        inside = [b.op[k] for k in ("turn_sync", "turn_arrive") if k in b.op]
        if inside and len(inside) != 2 or bool(inside) != (len(turns.erased) == 2):
            raise error_at(inside[0] if inside else b.loop,
                           f"{PASS} takes ping-pong's turns in a KV step (a sync before P.V, an arrive after "
                           f"QK^T) with those around the KV loops (a sync before, an arrive after), all or none")
    q_release = next((op for op in ops[at[-1] + 1:] if op.name == R.MBARRIER_ARRIVE
                      and bars[_bar(op)].get("channel") == "q"), None)
    persistent = R.is_persistent(kernel)
    # the ring after the key range, where the next query block goes on with it (Note [The
    # walk over query blocks] in walk.py)
    carried_on = any(list(r.uses) for r in list(last.results)[3:])
    with ir.InsertionPoint(loops[0]), R.pass_loc(PASS, loops[0]):
        chain = _Chain(bodies, turns, q_release, persistent)
        results = chain.build(loops[0], carried_on)
    for old, new in zip(last.results, results):
        old.replace_all_uses_with(new)
    for loop in reversed(loops):
        loop.erase()
    for op in turns.erased + ([q_release] if q_release is not None else []):
        op.erase()


def kv_loops_to_rotate(role: ir.Operation) -> tuple[list, list[int], list]:
    """(the ops of `role`'s block, the places of its KV loops among them, the loops), for
    a role whose steps are not overlapped yet."""
    block = R.body_block(role)
    ops = [op.operation for op in block.operations]
    if R.ops_in(block, (R.MMA_WAIT,)):
        raise error_at(role, f"{PASS} ran twice on role '{R.name_of(role)}'")
    at = [k for k, op in enumerate(ops) if op.name == "scf.for" and KV_LOOP in op.attributes]
    if not at:
        raise error_at(role, f"{PASS}: role '{R.name_of(role)}' has no KV loop (scf.for with {KV_LOOP})")
    return ops, at, [ops[k] for k in at]


def _const(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(32), value).result


def _cmp(pred: str, a, b) -> ir.Value:
    return arith.CmpIOp(getattr(arith.CmpIPredicate, pred), a, b).result


def ring_advance(stage, phase, stages: ir.Attribute) -> list:
    """The next (stage, phase) of a ring of `stages` stages at (stage, phase)."""
    i32 = ir.IntegerType.get_signless(32)
    return list(R.create(R.RING_ADVANCE, [i32, i32], [stage, phase], {"stages": stages}).results)


def chained_loops(ops: list, at: list[int], carried: str, kept: int) -> None:
    """Check that the KV loops `ops[k]` (k in `at`) follow each other, each carrying
    its values (`carried`: what they are) from the loop before it and to the next only,
    with nothing but index arithmetic between them, which is moved above the first; of
    the last loop's results only the first `kept` may be used."""
    loops = [ops[k] for k in at]
    for op in ops[at[0]:at[-1]]:
        if op.name != "scf.for":
            if not op.name.startswith("arith.") or any(v.owner in loops for v in op.operands):
                raise error_at(op, f"{PASS} rotates KV loops that follow each other, with nothing but index "
                                   f"arithmetic between them")
            op.move_before(loops[0])
    for before, loop in zip(loops, loops[1:]):
        if list(loop.operands)[3:] != list(before.results):
            raise error_at(loop, f"{PASS}: a KV loop carries {carried} from the loop before it")
        if any(use.owner != loop for r in before.results for use in r.uses):
            raise error_at(before, f"{PASS}: what a KV loop carries out goes to the next KV loop only")
    for r in list(loops[-1].results)[kept:]:
        if list(r.uses):
            raise error_at(loops[-1], f"{PASS}: the ring state after the KV loops is used; the rotated loops "
                                      f"end it elsewhere")


class KeyRange:
    """The key range [lo, hi) of a role's KV loops: its segments (runs of loops, each
    starting where the last ended), their bounds and the range's step count, built at
    the insertion point."""

    def __init__(self, loops: list):
        self.segments: list[list] = []
        for loop in loops:
            if self.segments and loop.operands[0] == self.segments[-1][-1].operands[1]:
                self.segments[-1].append(loop)
            else:
                self.segments.append([loop])
        zero = self.zero = _const(0)
        self.bounds = [(seg[0].operands[0], seg[-1].operands[1]) for seg in self.segments]
        self.total = None
        for lo, hi in self.bounds:
            count = arith.MaxSIOp(arith.SubIOp(hi, lo).result, zero).result
            self.total = count if self.total is None else arith.AddIOp(self.total, count).result


    def some(self, results: list) -> scf.IfOp:
        """scf.if the range has a step."""
        return scf.IfOp(_cmp("sgt", self.total, self.zero), results, has_else=bool(results))

    def first(self) -> tuple[ir.Value, list]:
        """The first step's block -- the first of the first segment with blocks -- and
        where each segment's loops start past it (the segment's start, one more where it
        holds it)."""
        one = self.one = _const(1)
        first, past, before_empty = None, [], None
        for k, ((lo, hi), seg) in enumerate(zip(self.bounds, self.segments)):
            after = arith.AddIOp(lo, one).result
            block = block_of_step(seg[0], lo)
            if first is None:
                first, start = block, after
            else:
                first = arith.SelectOp(before_empty, block, first).result
                start = arith.SelectOp(before_empty, after, lo).result
            past.append(start)
            if k + 1 < len(self.bounds):
                empty = _cmp("sge", lo, hi)
                before_empty = empty if before_empty is None else arith.AndIOp(before_empty, empty).result
        return first, past

    def rotated(self, past: list, carried: list, trip) -> list:
        """The loops again, each over its steps past the first one, carrying `carried`,
        a trip's ops built by `trip(loop, original, block)`, which yields; returns what
        the last carries out."""
        for seg, start in zip(self.segments, past):
            for old in seg:
                lb = arith.MaxSIOp(old.operands[0], start).result
                ub = arith.MaxSIOp(old.operands[1], start).result
                loop = scf.ForOp(lb, ub, old.operands[2], carried)
                for name in old.attributes:
                    loop.operation.attributes[name] = old.attributes[name]
                with ir.InsertionPoint(loop.body):
                    scf.YieldOp(trip(loop, old, block_of_step(old, loop.induction_variable)))
                carried = list(loop.results)
        return carried


def _bar(op: ir.Operation) -> str:
    return R.name_of(op.operands[0].owner)


class _Turns:
    """Ping-pong's turns around a consumer's KV loops (Note [Ping-pong turns] in sync.py):
    the sync on its own barrier just before them and the arrive on the other's just
    after, which the rotated steps take around their GEMMs instead."""

    def __init__(self, before: list, after: list):
        syncs = [op for op in before if op.name == R.NAMED_BARRIER_SYNC]
        arrives = [op for op in after if op.name == R.NAMED_BARRIER_ARRIVE]
        self.sync = syncs[-1] if syncs else None
        self.arrive = arrives[0] if arrives else None
        self.erased = [op for op in (self.sync, self.arrive) if op is not None]

    def begin(self) -> None:
        if self.sync is not None:
            self.sync.clone()

    def end(self) -> None:
        if self.arrive is not None:
            self.arrive.clone()


class _Body:
    """One KV loop's body as attn-insert-pipelines makes it for a consumer warpgroup: its
    synchronization, GEMMs, softmax and rescale, and the score ops between QK^T and the
    softmax (score_mod, mask, a block map's read)."""

    def __init__(self, loop: ir.Operation, bars: dict):
        self.loop = loop
        block = loop.regions[0].blocks[0]
        self.n = kv_block(loop)
        self.args = list(block.arguments)[1:]
        found: dict[str, ir.Operation] = {}
        self.scores: list[ir.Operation] = []
        for op in list(block.operations)[1:]:      # past the step's block, rebuilt in each rotated trip
            op = op.operation
            key = self._key(op, bars)
            if key is None:
                if "qk" in found and "softmax" not in found:
                    self.scores.append(op)
                    continue
                raise error_at(op, f"{PASS} rotates the KV step attn-insert-pipelines makes for a consumer "
                                   f"warpgroup, which has no {op.name} here")
            if key in found:
                raise error_at(op, f"{PASS}: a consumer's KV step has one {op.name} of this kind")
            found[key] = op
        wanted = ("k_wait", "k_read", "qk", "k_release", "softmax", "rescale", "v_wait", "v_read", "advance", "pv",
                  "v_release", "yield")
        missing = [k for k in wanted if k not in found]
        if missing:
            raise error_at(loop, f"{PASS}: this KV loop has no {missing[0].replace('_', ' ')} op, which a "
                                 f"consumer's step has")
        self.op = found
        f = found
        m, l, o, stage, phase = self.args[:5] if len(self.args) == 5 else (None,) * 5
        chain = [f["qk"], *[s for s in self.scores if s.name in ("attn.score_mod", "attn.mask")]]
        flows = [
            (f["qk"].operands[1] == f["k_read"].result, f["qk"]),
            (f["softmax"].operands[0] == chain[-1].results[0], f["softmax"]),
            (list(f["softmax"].operands)[1:] == [m, l], f["softmax"]),
            (list(f["rescale"].operands) == [o, f["softmax"].results[3]], f["rescale"]),
            (list(f["pv"].operands) == [f["softmax"].results[0], f["v_read"].result, f["rescale"].result], f["pv"]),
            (f["k_read"].operands[1] == stage and f["v_read"].operands[1] == stage, f["v_read"]),
            (list(f["k_wait"].operands)[1:] == [stage, phase], f["k_wait"]),
            (list(f["v_wait"].operands)[1:] == [stage, phase], f["v_wait"]),
            (f["k_release"].operands[1] == stage and f["v_release"].operands[1] == stage, f["v_release"]),
            (list(f["advance"].operands) == [stage, phase], f["advance"]),
            (list(f["yield"].operands) == [f["softmax"].results[1], f["softmax"].results[2], f["pv"].result,
                                           *f["advance"].results], f["yield"]),
        ]
        for ok, op in flows:
            if not ok:
                raise error_at(op, f"{PASS} rotates the KV step attn-insert-pipelines makes (m, l, O and one "
                                   f"ring carried; QK^T, scores, softmax, rescale and P.V in their data flow, "
                                   f"K and V waited for, read and released at the ring's stage); this "
                                   f"{op.name} differs")

    @staticmethod
    def _key(op: ir.Operation, bars: dict) -> str | None:
        name = op.name
        if name in (R.MBARRIER_WAIT, R.MBARRIER_ARRIVE):
            a = bars.get(_bar(op), {})
            if a.get("channel") != "kv" or a.get("tile") not in ("k", "v"):
                return None
            return f"{a['tile']}_{'wait' if name == R.MBARRIER_WAIT else 'release'}"
        if name == R.SLOT_READ:
            return f"{ir.StringAttr(op.attributes['tile']).value}_read"
        if name == "attn.mma":
            return ir.StringAttr(op.attributes["kind"]).value
        return {"attn.softmax_step": "softmax", "attn.rescale": "rescale", R.RING_ADVANCE: "advance",
                R.NAMED_BARRIER_SYNC: "turn_sync", R.NAMED_BARRIER_ARRIVE: "turn_arrive",
                "scf.yield": "yield"}.get(name)


class _Chain:
    """Builds the rotated steps (Note [Overlapped steps in the IR]) at the insertion point."""

    def __init__(self, bodies: list[_Body], turns: _Turns, q_release, persistent: bool):
        self.bodies, self.turns, self.q_release, self.persistent = bodies, turns, q_release, persistent

    def build(self, first: ir.Operation, carried_on: bool = False) -> list:
        """The rotated steps; returns m, l and O after them, and with `carried_on` the ring."""
        m0, l0, o0, stage0, phase0 = list(first.operands)[3:8]
        start = [stage0, phase0] if carried_on else []
        keys = KeyRange([b.loop for b in self.bodies])
        some = keys.some([m0.type, l0.type, o0.type, *(v.type for v in start)])
        with ir.InsertionPoint(some.then_block):
            m, l, o, ring = self._steps(keys, m0, l0, o0, stage0, phase0)
            scf.YieldOp([m, l, o, *(ring if carried_on else [])])
        with ir.InsertionPoint(some.else_block):
            if self.q_release is not None:
                self.q_release.clone()
            scf.YieldOp([m0, l0, o0, *start])
        return list(some.results)

    def _steps(self, keys: KeyRange, m0, l0, o0, stage0, phase0) -> list:
        first, past = keys.first()
        one, total = keys.one, keys.total
        last_step = arith.SubIOp(total, one).result if self.q_release is not None else None
        mixed = [b for b in self.bodies if b.loop.attributes[KV_LOOP] == ir.StringAttr.get("mixed")]
        body = (mixed or self.bodies)[0]        # a masked body takes any block
        vmap = {body.n: first}
        # the first step
        k_stage = self._wait_read(body, "k", vmap, stage0, phase0)
        self.turns.begin()
        s = self._clone(body.op["qk"], vmap, asynchronous=True)
        self.turns.end()
        s = self._land([s], 0)[0]
        self._release_k(body, k_stage, lambda: _cmp("eq", total, one))
        k_next = ring_advance(stage0, phase0, body.op["advance"].attributes["stages"])
        p, m, l, alpha = self._scores(body, vmap, s, m0, l0)
        carried = [m, l, o0, p, alpha, *k_next, stage0, phase0, stage0, one]
        of = {b.loop: b for b in self.bodies}
        carried = keys.rotated(past, carried, lambda loop, old, n: self._step(of[old], loop, n, last_step))
        m, l, o_flight, p, alpha, _, _, v_stage, v_phase, v_prev, _ = carried
        # the last step's P.V
        o = self._rescaled(body, o_flight, alpha)
        vmap = {}
        self._wait_read(body, "v", vmap, v_stage, v_phase)
        self.turns.begin()
        o = self._pv(body, vmap, p, o)
        self.turns.end()
        o = self._land([o], 0)[0]
        if self.persistent:
            self._when(_cmp("sge", total, _const(2)), lambda: self._arrive(body, "v", v_prev))
            self._arrive(body, "v", v_stage)
        # the ring past the last step, V's (a read's fill is counted by its ring's advances)
        return [m, l, o, ring_advance(v_stage, v_phase, body.op["advance"].attributes["stages"])]

    def _step(self, b: _Body, loop, n, last_step) -> list:
        """One trip: step t (counted from the first, carried) of block n."""
        m, l, o_flight, p, alpha, k_stage, k_phase, v_stage, v_phase, v_prev, t = loop.inner_iter_args
        vmap = {b.n: n}
        o = self._rescaled(b, o_flight, alpha)
        self._when(_cmp("sge", t, _const(2)), lambda: self._arrive(b, "v", v_prev))
        self._wait_read(b, "k", vmap, k_stage, k_phase)
        self._wait_read(b, "v", vmap, v_stage, v_phase)
        self.turns.begin()
        s = self._clone(b.op["qk"], vmap, asynchronous=True)
        o = self._pv(b, vmap, p, o)
        self.turns.end()
        s = self._land([s], 1)[0]
        self._release_k(b, k_stage, lambda: _cmp("eq", t, last_step))
        p, m, l, alpha = self._scores(b, vmap, s, m, l)
        stages = b.op["advance"].attributes["stages"]
        k_next, v_next = ring_advance(k_stage, k_phase, stages), ring_advance(v_stage, v_phase, stages)
        return [m, l, o, p, alpha, *k_next, *v_next, v_stage, arith.AddIOp(t, _const(1)).result]

    # -- the pieces, cloned from a body's ops with `vmap` (old value -> new)
    def _clone(self, op: ir.Operation, vmap: dict, asynchronous: bool = False) -> ir.Value | None:
        new = self._copy(op, vmap, asynchronous)
        return new.results[0] if len(new.results) else None

    def _copy(self, op: ir.Operation, vmap: dict, asynchronous: bool = False) -> ir.Operation:
        new = op.clone()
        for k, v in enumerate(new.operands):
            if v in vmap:
                new.operands[k] = vmap[v]
        for old, fresh in zip(op.results, new.results):
            vmap[old] = fresh
        if asynchronous:
            new.attributes["async"] = ir.UnitAttr.get()
        return new

    def _wait_read(self, b: _Body, tile: str, vmap: dict, stage, phase):
        """Wait for `tile`'s slot at (stage, phase) and read it."""
        vmap[b.op[f"{tile}_wait"].operands[1]] = stage
        vmap[b.op[f"{tile}_wait"].operands[2]] = phase
        vmap[b.op[f"{tile}_read"].operands[1]] = stage
        self._clone(b.op[f"{tile}_wait"], vmap)
        self._clone(b.op[f"{tile}_read"], vmap)
        return stage

    def _arrive(self, b: _Body, tile: str, stage) -> None:
        release = b.op[f"{tile}_release"]
        self._clone(release, {release.operands[1]: stage})

    def _release_k(self, b: _Body, stage, is_last) -> None:
        """K's slot once QK^T landed; with persistent CTAs Q's after the block's last QK^T
        (`is_last()`: whether this step is the last)."""
        self._arrive(b, "k", stage)
        if self.q_release is not None:
            self._when(is_last(), lambda: self.q_release.clone())

    def _when(self, cond, then) -> None:
        branch = scf.IfOp(cond)
        with ir.InsertionPoint(branch.then_block):
            then()
            scf.YieldOp([])

    def _land(self, values: list, pending: int) -> list:
        return list(R.create(R.MMA_WAIT, [v.type for v in values], values, {"pending": pending}).results)

    def _rescaled(self, b: _Body, o_flight, alpha):
        """The P.V in flight landed, times the factor of the step whose P comes next."""
        o = self._land([o_flight], 0)[0]
        rescale = b.op["rescale"]
        return self._clone(rescale, {rescale.operands[0]: o, rescale.operands[1]: alpha})

    def _pv(self, b: _Body, vmap: dict, p, o):
        pv = b.op["pv"]
        vmap = dict(vmap)
        vmap[pv.operands[0]], vmap[pv.operands[2]] = p, o
        return self._clone(pv, vmap, asynchronous=True)

    def _scores(self, b: _Body, vmap: dict, s, m, l):
        vmap[b.op["qk"].result] = s
        for op in b.scores:
            self._clone(op, vmap)
        softmax = b.op["softmax"]
        vmap[softmax.operands[1]], vmap[softmax.operands[2]] = m, l
        self._clone(softmax, vmap)
        return [vmap[r] for r in (softmax.results[0], softmax.results[1], softmax.results[2], softmax.results[3])]
