"""Warp collectives against hand-worked values (PTX ISA 8.x, 9.7.8.6 "shfl.sync" with its
clamp / segment mask and predicate output, 9.7.13.x "vote.sync")."""
from __future__ import annotations

import numpy as np
import pytest

from tests.sim.ptx_harness import run_kernel

LANE = np.arange(32)


def _shfl(mode: str, b: int, c: int):
    """Each lane's a = 100 + lane; returns (d, p) per lane of shfl.sync.mode d|p, a, b, c."""
    body = f"""
    add.u32 %r1, %tid, 100;
    shfl.sync.{mode}.b32 %r2|%p1, %r1, {b}, {c}, -1;
    selp.b32 %r3, 1, 0, %p1;
    st.global.b32 [%a0], %r2;
    st.global.b32 [%a1], %r3;"""
    out = run_kernel(body, [np.zeros(32, np.uint32), np.zeros(32, np.uint32)]).arrays
    return out[0].astype(np.int64) - 100, out[1].astype(bool)


@pytest.mark.parametrize("mode, b, c, src, valid", [
    # whole warp (c = 0x1f for down/bfly/idx, 0 for up)
    ("up", 1, 0x0, LANE - 1, LANE >= 1),
    ("down", 2, 0x1F, np.where(LANE + 2 <= 31, LANE + 2, LANE), LANE + 2 <= 31),
    ("bfly", 3, 0x1F, LANE ^ 3, np.ones(32, bool)),
    ("idx", 5, 0x1F, np.full(32, 5), np.ones(32, bool)),
    # 8-lane segments: segmask 0x18 (c bits 8-12), clamp as above
    ("up", 1, 0x1800, np.where(LANE % 8 >= 1, LANE - 1, LANE), LANE % 8 >= 1),
    ("down", 1, 0x181F, np.where(LANE % 8 <= 6, LANE + 1, LANE), LANE % 8 <= 6),
    ("idx", 2, 0x181F, LANE // 8 * 8 + 2, np.ones(32, bool)),
    # idx past the clamp: j = 9 > maxLane = 7, so every lane keeps its own value
    ("idx", 9, 0x0007, LANE, np.zeros(32, bool)),
])
def test_shfl_sync(mode, b, c, src, valid):
    """j = lane -/+/^ b (idx: b within the segment); j past the clamp (maxLane =
    (lane & segmask) | (c & ~segmask); up: j below it) keeps the lane's own value, p false."""
    d, p = _shfl(mode, b, c)
    assert d.tolist() == np.where(valid, src, LANE).tolist()
    assert p.tolist() == valid.tolist()


def test_vote_sync():
    """vote.sync.ballot: bit l set where lane l's predicate holds; .any / .all / .uni over the
    member lanes; a negated source predicate."""
    body = """
    and.b32 %r1, %tid, 1;
    setp.eq.u32 %p1, %r1, 1;
    setp.lt.u32 %p2, %tid, 32;
    vote.sync.ballot.b32 %r2, %p1, -1;
    vote.sync.ballot.b32 %r3, !%p1, -1;
    vote.sync.any.pred %p3, %p1, -1;
    vote.sync.all.pred %p4, %p1, -1;
    vote.sync.all.pred %p5, %p2, -1;
    vote.sync.uni.pred %p6, %p1, -1;
    vote.sync.uni.pred %p7, %p2, -1;
    selp.b32 %r4, 1, 0, %p3;
    selp.b32 %r5, 2, 0, %p4;
    selp.b32 %r6, 4, 0, %p5;
    selp.b32 %r7, 8, 0, %p6;
    selp.b32 %r8, 16, 0, %p7;
    or.b32 %r4, %r4, %r5;
    or.b32 %r4, %r4, %r6;
    or.b32 %r4, %r4, %r7;
    or.b32 %r4, %r4, %r8;
    st.global.b32 [%a0], %r2;
    st.global.b32 [%a1], %r3;
    st.global.b32 [%a2], %r4;"""
    out = run_kernel(body, [np.zeros(32, np.uint32) for _ in range(3)]).arrays
    assert hex(out[0][0]) == "0xaaaaaaaa" and hex(out[1][0]) == "0x55555555"
    assert out[2][0] == 1 | 4 | 16          # any, all of %p2, uni of %p2
