"""sm_90a's cooperative role (no producer warpgroup) with its two GEMMs overlapped, written
into the L5 IR (attn-overlap-gemms).

Note [Overlapped cooperative steps in the IR]: the cooperative kernel loads K and V
through its own cp.async groups, ahead of their steps as on sm_80 (Note [cp.async
prefetch] in prefetch.py), and runs its steps rotated by half a step as the consumer
warpgroups do (Note [wgmma overlap] in attnc/backend/sm90a.py): over the key range
[lo, hi) of its KV loops, with S stages,

    if lo < hi:
      step lo       wait for all but the 2S - 2 youngest groups (Q, K(lo)); CTA barrier;
                    S = QK^T (async); land S; scores; softmax
      loops over n in [lo + 1, hi), each carrying P and the factor of step n - 1 and the
                    P.V of step n - 2 in flight:
                    land P.V(n - 2); O *= factor(n - 1)
                    wait for all but the 2S - 4 youngest groups (K(n), V(n - 1)); CTA barrier
                    load V of block n + S - 2 and K of block n + S - 1 into the slots P.V(n - 2)
                    and QK^T(n - 1) read, a group each
                    S = QK^T(n) (async); O += P(n - 1) V(n - 1) (async)
                    land S, the P.V left in flight (pending = 1); scores; softmax of step n
      last step     land P.V(hi - 2); O *= factor(hi - 1); wait for every group; CTA barrier;
                    P.V (async); land it
    else: O, m and l as they start

The prologue of loads before the loops stays as attn-warp-specialize puts it (Q, then K
and V of the first steps). K and V are read on rings a step apart (K of step n, V of
n - 1), each load writes its tile's own ring, and Q's slot is read at every step.
attn-verify-pipeline checks that no copy lands in a slot an asynchronous GEMM still
reads (Note [Asynchronous GEMMs] in verify.py). As for the consumer warpgroups, the
rotated loops run over the steps, each trip starting with its block (Note [Key blocks top
down] in attnc/passes/tile_program.py).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import scf

from attnc.ir import error_at
from attnc.ir import roles as R
from attnc.passes.tile_program import KV_LOOP, kv_block
from attnc.schedule.overlap import PASS, KeyRange, _Chain, chained_loops, kv_loops_to_rotate, ring_advance


def overlap_cooperative(role: ir.Operation, kernel: ir.Operation) -> None:
    """Note [Overlapped cooperative steps in the IR], on the cooperative role `role` of
    `kernel` (L5)."""
    ops, at, loops = kv_loops_to_rotate(role)
    stages = int(next(R.attrs_of(c)["stages"] for c in R.channel_ops(kernel) if R.name_of(c) == "kv"))
    if stages < 2:
        raise error_at(role, f"{PASS}: sm_90a's cooperative kernel overlaps its GEMMs across steps with two or "
                             f"more K/V stages (attn-tile{{stages}}); this plan has {stages}")
    bodies = [_CoopBody(loop, stages) for loop in loops]
    chained_loops(ops, at, "m, l, O and its rings", 3)
    last = loops[-1]
    with ir.InsertionPoint(loops[0]), R.pass_loc(PASS, loops[0]):
        results = _CoopChain(bodies, stages).build(loops[0])
    for old, new in zip(list(last.results)[:3], results):
        old.replace_all_uses_with(new)
    for loop in reversed(loops):
        loop.erase()


class _CoopBody:
    """One KV loop's body as attn-insert-pipelines makes it for the cooperative role with
    its loads ahead: the waits, barriers, reads, loads, writes and commits of Note [cp.async
    prefetch], the GEMMs, softmax and rescale, and the score ops between QK^T and the
    softmax (score_mod, mask, a block map's read)."""

    _ORDER = ("k_wait", "k_bar", "k_read", "q_read", "v_load", "v_write", "v_commit", "v_advance", "qk",
              "softmax", "v_wait", "v_bar", "v_read", "r_advance", "k_load", "k_write", "k_commit", "k_advance",
              "rescale", "pv", "yield")

    def __init__(self, loop: ir.Operation, stages: int):
        self.loop = loop
        block = loop.regions[0].blocks[0]
        self.n = kv_block(loop)
        self.args = list(block.arguments)[1:]
        self.scores: list[ir.Operation] = []
        self.op: dict[str, ir.Operation] = {}
        found: list[str] = []
        for op in block.operations:
            op = op.operation
            if op.name.startswith("arith.") and not op.regions:
                continue
            key = self._key(op, found)
            if key is None:
                if found and found[-1] == "qk" and op.name in ("attn.score_mod", "attn.mask", "attn.block_map_read"):
                    self.scores.append(op)
                    continue
                raise error_at(op, f"{PASS} rotates the KV step attn-insert-pipelines makes for sm_90a's cooperative "
                                   f"role (Note [cp.async prefetch]), which has no {op.name} here")
            found.append(key)
            self.op[key] = op
        if tuple(found) != self._ORDER:
            raise error_at(loop, f"{PASS} rotates the cooperative KV step attn-insert-pipelines makes, whose ops "
                                 f"are {', '.join(self._ORDER)}; this one has {', '.join(found)}")
        self._check(stages)

    @staticmethod
    def _key(op: ir.Operation, found: list[str]) -> str | None:
        name = op.name
        tile = R.attrs_of(op).get("tile", R.attrs_of(op).get("operand"))
        if name == R.CP_ASYNC_WAIT:
            return "v_wait" if "qk" in found else "k_wait"
        if name == R.CTA_BARRIER:
            return "v_bar" if "qk" in found else "k_bar"
        if name == R.SLOT_READ:
            return f"{tile}_read"
        if name in ("attn.load", R.SLOT_WRITE, R.CP_ASYNC_COMMIT, R.RING_ADVANCE):
            if name == R.RING_ADVANCE and found and found[-1] == "v_read":
                return "r_advance"
            what = {"attn.load": "load", R.SLOT_WRITE: "write", R.CP_ASYNC_COMMIT: "commit",
                    R.RING_ADVANCE: "advance"}[name]
            return f"{'k' if 'v_read' in found else 'v'}_{what}"
        if name == "attn.mma":
            return ir.StringAttr(op.attributes["kind"]).value
        return {"attn.softmax_step": "softmax", "attn.rescale": "rescale", "scf.yield": "yield"}.get(name)

    def _check(self, stages: int) -> None:
        f = self.op
        m, l, o = self.args[:3]
        chain = [f["qk"], *[s for s in self.scores if s.name in ("attn.score_mod", "attn.mask")]]
        r_stage, r_phase = f["r_advance"].operands
        ahead = {t: R.attrs_of(f[f"{t}_load"]).get("ahead") for t in "kv"}
        for t, value in ahead.items():
            if not isinstance(value, int):
                raise error_at(f[f"{t}_load"], f"{PASS}: this {t.upper()} load of the cooperative KV step has no "
                                               f"`ahead` (the steps ahead of its own it loads for, which "
                                               f"attn-warp-specialize writes: Note [cp.async prefetch])")
        flows = [
            (list(f["qk"].operands) == [f["q_read"].result, f["k_read"].result], f["qk"]),
            (f["softmax"].operands[0] == chain[-1].results[0], f["softmax"]),
            (list(f["softmax"].operands)[1:] == [m, l], f["softmax"]),
            (list(f["rescale"].operands) == [o, f["softmax"].results[3]], f["rescale"]),
            (list(f["pv"].operands) == [f["softmax"].results[0], f["v_read"].result, f["rescale"].result], f["pv"]),
            (f["k_read"].operands[1] == r_stage and f["v_read"].operands[1] == r_stage, f["v_read"]),
            (all(f[f"{t}_write"].operands[2] == f[f"{t}_load"].result for t in "kv"), f["k_write"]),
            (all(f[f"{t}_write"].operands[1] == f[f"{t}_advance"].operands[0] for t in "kv"), f["k_advance"]),
            (all(f[f"{t}_load"].operands[3] == self.n for t in "kv"), f["k_load"]),
            (ahead == {"k": stages, "v": stages - 1}, f["k_load"]),
            (R.attrs_of(f["k_wait"]).get("pending") == R.attrs_of(f["v_wait"]).get("pending") == 2 * stages - 2,
             f["v_wait"]),
        ]
        for ok, op in flows:
            if not ok:
                raise error_at(op, f"{PASS} rotates the cooperative KV step attn-insert-pipelines makes (m, l and "
                                   f"O carried; QK^T, scores, softmax, rescale and P.V in their data flow; K and V "
                                   f"read at one ring's stage, loaded S and S - 1 steps ahead at the step's block "
                                   f"into their own rings' slots; waits for all but 2S - 2 groups); this "
                                   f"{op.name} differs")
        # the carried values: m, l and O, then the rings, each advanced once a step (Q's
        # read stage, read at every step, carried as it is)
        advances = [f["r_advance"], f["k_advance"], f["v_advance"]]
        wanted = dict(zip(self.args, self.args))
        for advance in advances:
            for arg, advanced in zip(advance.operands, advance.results):
                wanted[arg] = advanced
        carried = list(f["yield"].operands)[3:]
        if any(arg not in self.args for a in advances for arg in a.operands) or \
                [wanted[arg] for arg in self.args[3:]] != carried:
            raise error_at(f["yield"], f"{PASS}: the cooperative KV loop carries its rings from one step to the "
                                       f"next, each advanced once (Q's read stage as it is)")
        self.rings = {"r": (r_stage, r_phase), **{t: tuple(f[f"{t}_advance"].operands) for t in "kv"}}


class _CoopChain(_Chain):
    """Builds the rotated cooperative steps (Note [Overlapped cooperative steps in the
    IR]) at the insertion point."""

    def __init__(self, bodies: list[_CoopBody], stages: int):
        super().__init__(bodies, None, None, False)
        self.stages = stages

    def build(self, first: ir.Operation, carried_on: bool = False) -> list:
        """The rotated steps; returns m, l and O after them (the cooperative role's rings
        end with the key range: chained_loops refuses a use after it)."""
        init = list(first.operands)[3:]
        m0, l0, o0 = init[:3]
        keys = KeyRange([b.loop for b in self.bodies])
        some = keys.some([m0.type, l0.type, o0.type])
        with ir.InsertionPoint(some.then_block):
            scf.YieldOp(self._steps(keys, init))
        with ir.InsertionPoint(some.else_block):
            scf.YieldOp([m0, l0, o0])
        return list(some.results)

    def _steps(self, keys: KeyRange, init: list) -> list:
        first, past = keys.first()
        mixed = [b for b in self.bodies if b.loop.attributes[KV_LOOP] == ir.StringAttr.get("mixed")]
        body = (mixed or self.bodies)[0]        # a masked body takes any block
        start = {arg: value for arg, value in zip(body.args, init)}
        ring = {name: [start[v] for v in pair] for name, pair in body.rings.items()}
        m0, l0, o0 = init[:3]
        self.q_stage = self._own(start[body.op["q_read"].operands[1]])
        # the first step
        vmap = {body.n: first}
        self._wait(body, "k", 2 * self.stages - 2)
        s = self._reads_and_qk(body, vmap, ring["r"][0])
        s = self._land([s], 0)[0]
        p, m, l, alpha = self._scores(body, vmap, s, m0, l0)
        k_read = ring_advance(*ring["r"], body.op["r_advance"].attributes["stages"])
        carried = [m, l, o0, p, alpha, *k_read, *ring["r"], *ring["k"], *ring["v"]]
        of = {b.loop: b for b in self.bodies}
        carried = keys.rotated(past, carried, lambda loop, old, n: self._trip(of[old], loop, n))
        m, l, o_flight, p, alpha, _, _, v_stage, _ = carried[:9]
        # the last step's P.V
        o = self._rescaled(body, o_flight, alpha)
        self._wait(body, "v", 0)
        vmap = {}
        self._read(body, "v", vmap, v_stage)
        o = self._pv(body, vmap, p, o)
        return [m, l, self._land([o], 0)[0]]

    def _trip(self, b: _CoopBody, loop, n) -> list:
        """One trip: QK^T of block n with P.V of the step before."""
        m, l, o_flight, p, alpha, rk_s, rk_p, rv_s, rv_p, wk_s, wk_p, wv_s, wv_p = loop.inner_iter_args
        vmap = {b.n: n}
        o = self._rescaled(b, o_flight, alpha)
        self._wait(b, "k", 2 * self.stages - 4)
        wv = self._load(b, "v", vmap, wv_s, wv_p, self.stages - 2)
        wk = self._load(b, "k", vmap, wk_s, wk_p, self.stages - 1)
        s = self._reads_and_qk(b, vmap, rk_s, then=lambda: self._read(b, "v", vmap, rv_s))
        o = self._pv(b, vmap, p, o)
        s = self._land([s], 1)[0]
        p, m, l, alpha = self._scores(b, vmap, s, m, l)
        stages = b.op["r_advance"].attributes["stages"]
        rk, rv = ring_advance(rk_s, rk_p, stages), ring_advance(rv_s, rv_p, stages)
        return [m, l, o, p, alpha, *rk, *rv, *wk, *wv]

    # -- the pieces
    def _own(self, stage: ir.Value) -> ir.Value:
        """Q's read stage as a value of its own: attn-verify-pipeline counts a read's fill
        by the advances of the value it reads at (Note [Re-reads] in sync_ir.py), and the
        constant Q's ring starts from also starts the K/V read ring, which advances."""
        owner = stage.owner
        if getattr(owner, "name", "") != "arith.constant":
            where = owner if hasattr(owner, "location") else self.bodies[0].loop
            raise error_at(where, f"{PASS}: the cooperative role's Q ring starts from a constant stage")
        return owner.clone().result

    def _wait(self, b: _CoopBody, tile: str, pending: int) -> None:
        """A wait for all but the `pending` youngest groups, and the CTA barrier."""
        self._copy(b.op[f"{tile}_wait"], {}).attributes["pending"] = R.i64(pending)
        self._copy(b.op[f"{tile}_bar"], {})

    def _read(self, b: _CoopBody, tile: str, vmap: dict, stage) -> None:
        read = b.op[f"{tile}_read"]
        vmap[read.operands[1]] = stage
        self._clone(read, vmap)

    def _reads_and_qk(self, b: _CoopBody, vmap: dict, stage, then=lambda: None):
        """K's slot at `stage` and Q's read (and what `then` reads), and QK^T on them (async)."""
        self._read(b, "k", vmap, stage)
        vmap[b.op["q_read"].operands[1]] = self.q_stage
        self._clone(b.op["q_read"], vmap)
        then()
        return self._clone(b.op["qk"], vmap, asynchronous=True)

    def _load(self, b: _CoopBody, tile: str, vmap: dict, stage, phase, ahead: int) -> list:
        """`tile` of the block `ahead` steps after the trip's into its ring's slot at
        (stage, phase), a group of its own; the ring's next state."""
        self._copy(b.op[f"{tile}_load"], vmap).attributes["ahead"] = R.i64(ahead)
        write = b.op[f"{tile}_write"]
        vmap[write.operands[1]] = stage
        self._clone(write, vmap)
        self._clone(b.op[f"{tile}_commit"], vmap)
        return ring_advance(stage, phase, b.op[f"{tile}_advance"].attributes["stages"])
