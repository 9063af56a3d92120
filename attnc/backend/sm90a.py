"""The sm_90a forward kernel: forward.py's kernel with its two GEMMs on wgmma, in steps
that overlap them (`SM90A`: functions over the kernel's state, the trips' patterns in
`TRIP_PATTERNS` and the last P.V's in `LAST_PATTERNS`).

Everything but the GEMMs and the steps is what the sm_80 kernel has too (forward.py,
forward_loads.py): the CTA's cp.async loads into the
swizzled tiles (smem_tiles.py), the K/V stages and their waits, the mask hooks, the
online softmax and the epilogue. `num_warps` warps form num_warps/4 warpgroups of 64
query rows each; warp w still owns rows [16w, 16w + 16), which is where a wgmma m64
accumulator puts them (Note [wgmma accumulators] in nvgpu_builders.py), so the
softmax and the masks see the registers they see on sm_80 with one m16 tile per warp.

Note [wgmma operands]: the swizzled tile layout of smem_tiles.py -- pages of rows x W
elements, 2W-byte rows, 16-byte chunk c of row r at chunk c ^ swz(r) (W = 64: r mod 8;
W = 32: (r >> 1) mod 4) -- is exactly wgmma's 128-byte (W = 64) or 64-byte (W = 32)
swizzle: both XOR the chunk bits of the byte address with the bits above a 128-byte
line, in atoms of 8 rows (1024 or 512 bytes). So the tiles need no other layout, once
every atom is aligned: the shared window is declared 1024-aligned, and tiles and slots
are whole numbers of atoms.
  * Q (A of QK^T) and K (B of QK^T) are K-major: the k16 step kk starts 32 bytes times
    (kk mod W/16) into page kk/(W/16); 8-row atoms are 16W bytes apart (the stride
    byte offset). Warpgroup g's A starts at row 64g.
  * V (B of P.V) is N-major (trans-b): the k16 step kk starts at key row 16kk; 8-key
    atoms are 16W bytes apart (stride byte offset) and the W-column pages of
    head_dim_v a page apart (leading byte offset).
  * P (A of P.V) comes from registers: wgmma's register A fragment is mma.sync's, so
    sm80.py's in-place packing (Note [P as A operand]) serves unchanged.
  * Proxies: wgmma reads shared memory through the async proxy. Q, K and V reach it only
    through cp.async, made visible by cp.async.wait_group and the CTA barrier before the
    wgmma that reads them; no thread stores a wgmma operand from registers, which is what
    would need a fence.proxy.async (Triton's fence insertion draws the same line). A
    slot is overwritten only after the wgmma that read it was waited for, and that wait
    carries the async-to-generic fence.

Note [wgmma steps]: a GEMM is issued as one wgmma group (QK^T: head_dim_qk/16
instructions of m64 x block_n x k16 from descriptors; P.V: block_n/16 of m64 x
head_dim_v x k16 with P from registers). With S >= 2 K/V stages (the kernel needs
two) the steps overlap as Note [wgmma overlap] says, loads issued S - 1 steps ahead. Here
the loads are the CTA's own cp.async, waited for with cp.async groups and CTA
barriers; sm90a_ws.py (Note [Producer warpgroup]) keeps these steps and replaces what
they wait for with a producer warpgroup's mbarrier ring.

Note [wgmma overlap]: iteration u (u >= 1) of the KV loop
    wait for P.V(u-2) (issued by iteration u-1); O *= alpha(u-1); pack P(u-1)
    wait for K(u), V(u-1) (cp.async, barrier); load V(u+S-2), K(u+S-1) into the freed slots
    issue QK^T(u), issue P.V(u-1)                      two groups in flight
    wait_group 1: S(u) is ready; mask and softmax of step u while P.V(u-1) runs
so that a warpgroup's exponentials run under its own P.V (FlashAttention-3's
intra-warpgroup overlap). P.V(u-1) is waited for at the top of the next iteration,
not at the end of this one: ptxas moved the softmax below a wait placed after it
(in the same basic block), undoing the overlap. Two rules keep ptxas from
serializing every wgmma of the kernel (its C7513 advisory, checked by
tests/backend/test_sm90.py): no instruction may write a register of a wgmma in
flight, so the P registers and the probabilities pass through the wait (Wgmma.wait)
and P is packed only after it (packed before, ptxas serialized); and the first k-step
of QK^T has no accumulator inputs (scale-d = 0), so none is carried in. Step 0's QK^T and softmax come before the loop and the
last P.V after it; a query block with no key block skips all of it. Each iteration is
built from the ops of the IR's trip, in their order, a `_trip_*` pattern each: the
cooperative kernel's here (Note [Cooperative steps op by op] in coop_steps.py), a
producer plan's consumers' with sm90a_ws.py's waits and releases (Note [Overlapped steps
op by op] in wgmma_steps.py).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import llvm, scf

from attnc.backend.forward import COPY_PATTERNS, SCORE_PATTERNS, TargetLowering
from attnc.backend.nvgpu_builders import Wgmma, values_if, warp_vote
from attnc.backend.score_masks import rows_of
from attnc.backend.softmax import SoftmaxState
from attnc.backend.wgmma_trips import CoopTrip, FirstTrip, LastPv

WARPGROUP_ROWS = 64


def setup(cx) -> None:
    """The wgmma builder, the IR's steps and what a trip's patterns share (Note
    [Cooperative steps op by op]; sm90a_ws.py's kernel has its own trips, and its
    producer the loads)."""
    cx.wgmma = Wgmma(cx.e, cx.spec.variant.dtype)
    cx.trips = cx.spec.steps.coop
    cx.prologue_ops = cx.trips.prologue if cx.trips else ()
    cx.epilogue_ops = cx.trips.epilogue if cx.trips else ()
    cx.trip_kind = CoopTrip


def operand_bases(cx) -> None:
    """The warpgroup's Q descriptor (K's and V's depend on the slot: _desc)."""
    e = cx.e
    warpgroup = e.shr(cx.warp, 2)
    q_rows = e.mul(warpgroup, WARPGROUP_ROWS * cx.q_tile.row_bytes)
    cx.q_desc = _desc(cx, cx.q_tile, 0, q_rows)


def _desc(cx, tile, slot, rows_offset=0, leading_bytes: int = 16):
    """The descriptor of `tile` in K/V slot `slot` (bytes), `rows_offset` bytes in
    (Note [wgmma operands]); K-major operands ignore the leading byte offset."""
    e = cx.e
    addr = cx.smem.address(e.add(e.add(e.c32(tile.offset), slot), rows_offset))
    return cx.wgmma.descriptor(addr, tile.row_bytes, leading_bytes, 8 * tile.row_bytes)


def _k_major_step(cx, desc, tile, kk: int):
    """The descriptor of k16 step kk of a K-major tile."""
    page, within = divmod(kk, tile.page_width // 16)
    return cx.wgmma.advance(desc, page * tile.page_bytes + within * 32)


def qk_issue(cx, slot) -> list:
    """Issue S = Q K^T for the K tile in `slot` as one wgmma group: S's registers,
    in flight."""
    s, mma = cx.spec, cx.wgmma
    k_desc = _desc(cx, cx.k_tile, slot)
    acc = None
    for kk in range(s.variant.head_dim_qk // 16):
        acc = mma.mma(acc, s.block_n, _k_major_step(cx, k_desc, cx.k_tile, kk),
                      a_desc=_k_major_step(cx, cx.q_desc, cx.q_tile, kk))
    mma.commit()
    return acc


def pv_issue(cx, p, acc_o, slot) -> list:
    """Issue O += P V for the V tile in `slot` as one wgmma group (p[kk]: the A
    registers of k16 step kk): O's registers, in flight."""
    s, mma, tile = cx.spec, cx.wgmma, cx.v_tile
    v_desc = _desc(cx, tile, slot, leading_bytes=tile.page_bytes)
    acc = cx.flat(acc_o)
    for kk in range(s.block_n // 16):
        acc = mma.mma(acc, s.variant.head_dim_v, mma.advance(v_desc, kk * 16 * tile.row_bytes),
                      a_regs=p[kk], trans_b=True)
    mma.commit()
    return acc


# ------------------------------------------------------------ Note [wgmma overlap]
def steps(cx, kv):
    """Every KV step of the current block (Note [wgmma overlap]): (O, softmax state)."""
    e = cx.e
    total = kv.total(e)
    zero = e.cf(0.0)
    acc_o = [[[zero] * 4 for _ in range(cx.spec.variant.head_dim_v // 8)]]
    state = cx.softmax.initial(2)
    carried = cx.flat(acc_o) + state.m + state.l
    some = scf.IfOp(e.gt(total, 0), [v.type for v in carried], has_else=True)
    with ir.InsertionPoint(some.then_block):
        acc_o, state = overlapped_steps(cx, kv, total, state)
        scf.yield_(cx.flat(acc_o) + state.m + state.l)
    with ir.InsertionPoint(some.else_block):
        scf.yield_(carried)
    return cx.unpack_carried(list(some.results))


def overlapped_steps(cx, kv, total, state, first_step=None):
    """The steps of a block with some, from step 0 (by `first_step(cx, kv, state)`,
    default the IR's: `_first_step`) to the last P.V."""
    e = cx.e
    t_full = kv.steps_above(e, kv.full_hi)
    t_low = kv.below_full(e)
    state, flight = (first_step or _first_step)(cx, kv, state)
    one = e.c32(1)
    # The loops' bounds, past step 0 (the first trip's): Note [Key loops] in sm80.py
    at = {"start": lambda: one, "full": lambda: e.max(t_full, one), "low": lambda: e.max(t_low, one),
          "total": lambda: total}
    phases = [(at[loop.lo](), at[loop.hi](), loop) for loop in kv.key_loops(cx.spec.choices.kv_loops)]
    for lo, hi, loop in phases:
        edge = None if loop.edge is None else lambda u, loop=loop: kv.masked_step(e, loop, u, t_full, t_low)
        state, flight = _overlapped_loop(cx, lo, hi, kv, state, flight, loop.mode, loop.top, edge)
    return _last_pv(cx, total, flight), state


def _first_step(cx, kv, state):
    """Step 0 from the IR's first step, op by op: QK^T alone, its softmax, and nothing
    in flight yet."""
    first = cx.trips.first
    trip = cx.target.run(cx, "trip", first, FirstTrip(cx, cx.e.c32(0), kv, state, None, "partial", first))
    return trip.state, nothing_in_flight(cx, trip.probs, trip.alpha)


def nothing_in_flight(cx, probs, alpha) -> "_InFlight":
    """After step 0: O is zero, and no P is read."""
    s, zero = cx.spec, cx.e.cf(0.0)
    no_p = llvm.mlir_undef(cx.mma.pair_type)
    return _InFlight([zero] * (s.variant.head_dim_v // 2), [no_p] * (s.block_n // 4), _flat(probs), alpha or [],
                     _moved(cx))


def _last_pv(cx, total, flight: "_InFlight"):
    """The last step's P.V, landed: from the IR's ops after the loops, op by op."""
    return cx.target.run(cx, "last", cx.trips.last, LastPv(cx, total, flight)).acc_o


def _overlapped_loop(cx, lo, hi, kv, state, flight: "_InFlight", mode: str, top: bool = True, edge=None):
    """scf.for over iterations [lo, hi), carrying m, l and what is in flight; `top`:
    of the range's top partial blocks, not its bottom ones; `edge`: of the iteration, whether
    its block is masked (Note [Key loops] in sm80.py)."""
    loop = scf.ForOp(lo, hi, cx.e.c32(1), state.m + state.l + flight.values())
    with ir.InsertionPoint(loop.body):
        it = list(loop.inner_iter_args)
        u = loop.induction_variable
        st, fl = _overlapped_step(cx, u, kv, SoftmaxState(it[0:2], it[2:4]), flight.like(it[4:]), mode, top,
                                  None if edge is None else edge(u))
        scf.yield_(st.m + st.l + fl.values())
    results = list(loop.results)
    return SoftmaxState(results[0:2], results[2:4]), flight.like(results[4:])


def _scaled(cx, acc_o: list, flight: "_InFlight") -> list:
    """O (flat) times the carried step's alpha per row; with a lazy softmax only in a
    warp where a row moved (Note [Lazy rescale] in softmax.py)."""
    e = cx.e

    def scaled():
        return [e.fmul(x, flight.alpha[(i % 4) // 2]) for i, x in enumerate(acc_o)]
    if not flight.moved:
        return scaled()
    return values_if(warp_vote(e, flight.moved[0], "any"), scaled, acc_o)


def _moved(cx) -> list:
    """[whether a row of this thread moved at the last softmax step] with a lazy
    softmax, else []: carried in flight with the step's alpha."""
    return [cx.softmax.moved] if cx.softmax.moved is not None else []


# ---------------------- Notes [Overlapped steps op by op], [Cooperative steps op by op]
def _overlapped_step(cx, u, kv, state, flight, mode: str, top: bool = True, edge=None):
    """Iteration u >= 1, lowered from the ops of the IR's trip of its kind, in their order."""
    body = cx.trips.body(mode, top)
    trip = cx.trip_kind(cx, u, kv, state, flight, mode, body)
    trip.edge = edge
    trip = cx.target.run(cx, "trip", body, trip)
    return trip.state, _InFlight(trip.acc_o, _flat(trip.p), _flat(trip.probs), trip.alpha or [],
                                 _moved(cx))


def _trip_land_o(cx, op, trip) -> None:
    """The P.V in flight landed, P and the probabilities passed through the wait."""
    flight = trip.flight
    waited = cx.wgmma.wait(flight.acc_o, op.count, through=flight.p + flight.probs)
    trip.acc_o = waited[:len(flight.acc_o)]
    trip.landed_probs = _chunks(waited[len(flight.acc_o) + len(flight.p):], len(flight.probs) // 2)
    trip.wrote()


def _trip_rescale(cx, op, trip) -> None:
    """O times the carried factor, and the carried probabilities packed as P."""
    acc_o = _scaled(cx, trip.acc_o, trip.flight) if trip.flight.alpha else trip.acc_o
    trip.acc_o, trip.p = cx.unflatten(acc_o), cx.pack_p(trip.landed_probs)[0]
    trip.wrote()


def _trip_read(cx, op, trip) -> None:
    """The slot is read by the GEMM that takes it."""


def _trip_turn_sync(cx, op, trip) -> None:
    """Before a warpgroup issues its GEMMs: no turns to take here (ping-pong: sm90a_ws.py)."""
    trip.fence()


def _trip_turn_arrive(cx, op, trip) -> None:
    """After a warpgroup issued its GEMMs."""


def _trip_mma(cx, op, trip) -> None:
    trip.fence()
    if op.what == "qk":
        trip.acc_s = qk_issue(cx, trip.qk_slot())
    else:
        trip.acc_o = pv_issue(cx, trip.p, trip.acc_o, trip.prev)


def _trip_land_s(cx, op, trip) -> None:
    trip.acc_s = cx.unflatten(cx.wgmma.wait(trip.acc_s, pending=op.count), cx.spec.block_n // 8)
    trip.rows = rows_of(trip.acc_s)


def _trip_block_map_read(cx, op, trip) -> None:
    """The block's class is read where the trip asks it (tile_skip, tile_partial)."""


def _trip_softmax_step(cx, op, trip) -> None:
    trip.finish_scores()
    trip.probs, trip.state, trip.alpha = cx.softmax_step(trip.rows, trip.state, trip.mode, op, trip.offset)


def _last_mma(cx, op, last) -> None:
    last.fence()
    last.acc = pv_issue(cx, last.p, last.acc_o, cx.slot_offset(0, last.step))


def _last_land_pv(cx, op, last) -> None:
    waited = cx.wgmma.wait(last.acc, op.count, through=_flat(last.p))
    last.acc_o = cx.unflatten(waited[:len(last.acc)])


def _last_cp_async_wait(cx, op, last) -> None:
    last.step                       # (made where the kernel made it, before the wait)
    cx.cp.wait(op.count)


# the cooperative kernel's own loads (Note [Cooperative steps op by op])
def _trip_load(cx, op, trip) -> None:
    trip.load_slots()
    trip.ahead[op.what] = op.count


def _trip_slot_write(cx, op, trip) -> None:
    """The copy of the load this slot write takes: of the trip's own block (ahead 0) or
    of the block `ahead` steps later, where the key range has one (Note [cp.async group
    counting]: the commit that follows counts a group either way)."""
    e, s, name = cx.e, cx.spec, op.what
    ahead, ragged = trip.ahead[name], trip.mode != "full"
    if ahead == 0:
        cx.load_kv(name, trip.n_block, trip.slot, ragged, trip.skip)
        return
    n_block, exists = trip.kv.ahead(e, trip.u, trip.n_block, ahead)
    offset = trip.prev if ahead == s.plan.stages - 1 else cx.slot_offset(ahead, trip.u)
    cx.load_kv_guarded(name, n_block, offset, exists, ragged, ragged and s.hooks.tile_skip is not None)


# Notes [Overlapped steps op by op], [Cooperative steps op by op]: the patterns of a
# trip's ops (OVERLAPPED: those of every overlapped step) and of the last P.V's
OVERLAPPED = {
    "land_o": _trip_land_o, "rescale": _trip_rescale, "read": _trip_read, "turn_sync": _trip_turn_sync,
    "turn_arrive": _trip_turn_arrive, "mma": _trip_mma, "land_s": _trip_land_s, **SCORE_PATTERNS,
    "block_map_read": _trip_block_map_read, "softmax_step": _trip_softmax_step,
}


TRIP_PATTERNS = {
    **OVERLAPPED, **COPY_PATTERNS, "load": _trip_load, "slot_write": _trip_slot_write,
}


LAST_PATTERNS = {
    "land_o": _trip_land_o, "rescale": _trip_rescale, "read": _trip_read, "turn_sync": _trip_turn_sync,
    "turn_arrive": _trip_turn_arrive, "mma": _last_mma, "land_pv": _last_land_pv,
    "cp_async_wait": _last_cp_async_wait, "cta_barrier": COPY_PATTERNS["cta_barrier"],
}


SM90A = TargetLowering("sm_90a", setup, operand_bases, steps, {"trip": TRIP_PATTERNS, "last": LAST_PATTERNS})


@dataclass(frozen=True)
class _InFlight:
    """What an overlapped iteration leaves in flight for the next (Note [wgmma overlap]):
    the O registers of the P.V being computed, that P.V's A registers (untouched until
    it is waited for), and the probabilities and O scale factors of the step whose P.V
    comes next, with (a lazy softmax) whether a row of the thread moved there."""
    acc_o: list
    p: list
    probs: list
    alpha: list
    moved: list

    def values(self) -> list:
        return self.acc_o + self.p + self.probs + self.alpha + self.moved

    def like(self, values) -> "_InFlight":
        cut = list(itertools.accumulate([len(self.acc_o), len(self.p), len(self.probs), len(self.alpha)]))
        return _InFlight(values[:cut[0]], values[cut[0]:cut[1]], values[cut[1]:cut[2]], values[cut[2]:cut[3]],
                         values[cut[3]:])


def _flat(chunks) -> list:
    return [x for chunk in chunks for x in chunk]


def _chunks(flat, size: int = 4) -> list:
    """`flat` in lists of `size` (the packed P: its k16 steps' A registers, 4 each)."""
    return [flat[i:i + size] for i in range(0, len(flat), size)]
