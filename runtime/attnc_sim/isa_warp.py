"""Warp-collective instructions: shfl.sync, vote.sync, redux.sync, bar.warp.sync, activemask.

A `.sync` instruction names its member lanes; every member lane that has not exited
must execute it together (Note [Converged warps]): an error otherwise, as the hardware
would hang or return undefined values.
"""
from __future__ import annotations

import numpy as np

from attnc_sim import isa
from attnc_sim.errors import SimError
from attnc_sim.state import LANES, WARP

# Note [Converged warps]: the emulator runs a diverged warp's paths one after another
# (the SIMT stack), so a collective instruction reached on one path sees only that
# path's lanes. PTX requires every lane of `membermask` (of the whole warp for
# `.aligned`) to execute the same instruction together; reaching it with some of them
# on another path is the kernel's bug, and the emulator says so instead of guessing.

_BITS = (np.uint64(1) << LANES.astype(np.uint64)).astype(np.uint32)


def mask_lanes(mask_value: int) -> np.ndarray:
    return (np.uint32(mask_value & 0xFFFFFFFF) & _BITS) != 0


def require_converged(w, members: np.ndarray | None, where: str) -> None:
    """Raise unless every lane of `members` (None: the whole warp) that has not exited is active."""
    need = ~w.exited if members is None else members & ~w.exited
    if (need & ~w.mask).any():
        missing = np.flatnonzero(need & ~w.mask)
        raise SimError(f"{w.name()}: warp-collective instruction reached by a diverged warp "
                       f"(lanes {missing.tolist()} of its members are on another path) at {where}")


def _member_reader(ctx, op):
    if op is None:
        return lambda w: None
    r = ctx.reader(op, "b32")
    return lambda w: mask_lanes(int(r(w)[np.flatnonzero(w.mask)[0]]))


@isa.register("shfl.sync")
def shfl(ins, ctx):
    mode = ins.parts[2]
    dst, pred = ctx.pair(ins.operands[0])
    pred_out = ctx.writer(pred, "pred") if pred is not None else None
    d = ctx.writer(dst, "b32")
    a = ctx.reader(ins.operands[1], "b32")
    b = ctx.reader(ins.operands[2], "u32")
    c = ctx.reader(ins.operands[3], "u32")
    members = _member_reader(ctx, ins.operands[4])
    where = ins.where()

    def run(w):
        require_converged(w, members(w), where)
        bval, cval = b(w) & 31, c(w)
        seg = (cval >> 8) & 31
        clamp = cval & 31
        lane = LANES.astype(np.uint32)
        max_lane = (lane & seg) | (clamp & ~seg)
        min_lane = lane & seg
        if mode == "up":
            j = lane.astype(np.int64) - bval
            ok = j >= max_lane
        elif mode == "down":
            j = lane.astype(np.int64) + bval
            ok = j <= max_lane
        elif mode == "bfly":
            j = (lane ^ bval).astype(np.int64)
            ok = j <= max_lane
        else:
            j = (min_lane | (bval & ~seg)).astype(np.int64)
            ok = j <= max_lane
        j = np.where(ok, j, LANES)
        d(w, a(w)[j])
        if pred_out is not None:
            pred_out(w, ok)
    return run


@isa.register("vote.sync")
def vote(ins, ctx):
    mode = ins.parts[2]
    src = ctx.reader(ins.operands[1], "pred")
    members = _member_reader(ctx, ins.operands[2])
    where = ins.where()
    if mode == "ballot":
        d = ctx.writer(ins.operands[0], "b32")

        def ballot(w):
            require_converged(w, members(w), where)
            bits = int(np.bitwise_or.reduce(np.where(src(w) & w.mask, _BITS, 0)))
            d(w, np.full(WARP, bits, np.uint32))
        return ballot
    d = ctx.writer(ins.operands[0], "pred")
    reduce = {"any": np.any, "all": np.all, "uni": lambda v: bool(v.all() or not v.any())}[mode]

    def run(w):
        m = members(w)
        require_converged(w, m, where)
        take = w.mask if m is None else w.mask & m
        d(w, np.full(WARP, bool(reduce(src(w)[take])), np.bool_))
    return run


_REDUX = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and,
          "or": np.bitwise_or, "xor": np.bitwise_xor}


@isa.register("redux.sync")
def redux(ins, ctx):
    op, ty = ins.parts[2], ins.parts[-1]
    a = ctx.reader(ins.operands[1], ty)
    d = ctx.writer(ins.operands[0], ty)
    members = _member_reader(ctx, ins.operands[2])
    where, fn = ins.where(), _REDUX[op]

    def run(w):
        m = members(w)
        require_converged(w, m, where)
        take = w.mask if m is None else w.mask & m
        d(w, np.full(WARP, fn.reduce(a(w)[take]), a(w).dtype))
    return run


@isa.register("bar.warp.sync")
def bar_warp_sync(ins, ctx):
    members = _member_reader(ctx, ins.operands[0])
    where = ins.where()
    return lambda w: require_converged(w, members(w), where)


@isa.register("activemask")
def activemask(ins, ctx):
    d = ctx.writer(ins.operands[0], "b32")
    return lambda w: d(w, np.full(WARP, int(np.bitwise_or.reduce(np.where(w.mask, _BITS, 0))), np.uint32))
