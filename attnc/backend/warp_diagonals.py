"""The values of a hook's diagonals shared across a warp's lanes near its flat diagonals.

Note [Diagonals across the warp]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A tile near the flat diagonals computes a hook's values once per diagonal of a thread's
scores (Note [Values of a diagonal] in hooks.py): 34 at head dim 64 on sm_90a, each T5's
bucket with its log, IEEE division and int(), half the kernel's PTX. The warp's 32 lanes
hold scores on few more diagonals than one lane does: a lane's first score lies at the
warp's least j - i plus 0 to 13 (ElementCoords.SPREAD: column 2t, row g), so the warp's
keys span a lane's plus 13. With attn-hoist{lanes=true} (`attn.flat_lanes` on the op d) a
lane computes the values of diagonal D = the warp's least + 32 s + lane, for s < ceil(span
/ 32) (5 at head dim 64 on sm_90a, 3 on sm_80), and reads each of its own from the lane
that computed it, with shfl.sync.idx (two and a select where the lanes' diagonals of one
key straddle two sets), just before the first score that takes it. Only the values that
the rest of the hook reads move (`read_outside`); the others stand as the lane's own set
0's, which nothing reads. Every lane must then take the same side of the far test: the
warp's, far where each of its diagonals is, passed through vote.sync.all so that ptxas
knows it the same in every lane (without it ptxas guards each shuffle for a divergent
warp, and relative_bias's kernel spilled 448 bytes under its bound against 112). The far
sides' copy (Note [Spills of the near tiles] in register_bound.py) drops that vote with
the near side. relative_bias's PTX: 7,416 -> 3,753 lines on sm_90a, 8,591 -> 5,803 on
sm_80; its cold compile on sm_90a 1.95 -> 1.23 s (results/compile_times.md, "Diagonals
across the warp"). On by default on sm_80 and sm_90a (LANES_BY_DEFAULT in
attnc/passes/hoist.py): on an H100 the sm_90a T5 kernels ran as fast or 5 % faster, though
under the 3-CTA bound they spill 112 bytes against 52 (results/sm90a_h200.md, "Diagonals
across the warp"), and the sm_80 ones, their PTX compiled by the driver, 1-4 % faster
(results/sm80_h200.md); nvJitLink spills 1,720 bytes on relative_bias's sm_80 kernel,
so its cubin is ptxas's, assembled as a whole program as the driver does, which spills 16
(Note [The assembly that spills less] in cubin.py).
"""
from __future__ import annotations

from typing import Mapping

from mlir import ir
from mlir.dialects import arith

from attnc.backend.nvgpu_builders import Emit
from attnc.ir.diagonals import read_outside

# What a shuffle moves: a 32-bit value as it is, an i1 as an i32, an i64 as two.
_MOVABLE = frozenset({"i1", "i32", "f32", "i64"})


def _shuffled(e: Emit, x: ir.Value, lane: ir.Value) -> ir.Value:
    """`x` of lane `lane` of the warp (x of a type in _MOVABLE)."""
    if x.type == e.i1:
        return e.ne(e.shfl_idx(arith.extui(e.i32, x), lane), 0)
    if x.type == e.i64:
        low = e.shfl_idx(arith.trunci(e.i32, x), lane)
        high = e.shfl_idx(arith.trunci(e.i32, arith.shrui(x, e.c64(32))), lane)
        return arith.ori(arith.extui(e.i64, low), arith.shli(arith.extui(e.i64, high), e.c64(32)))
    return e.shfl_idx(x, lane)


def _target_of(op: ir.Operation) -> str | None:
    """The target of the kernel op that holds `op`, or None."""
    while op is not None:
        if "target" in op.attributes and isinstance(op.attributes["target"], ir.StringAttr):
            return op.attributes["target"].value
        op = op.parent
    return None


class _ReadWhereFirstUsed(dict):
    """{key: read(key)}, each emitted where it is first asked for: a diagonal's values
    read from other lanes just before the first score that takes them."""

    def __init__(self, read):
        super().__init__()
        self.read = read

    def __missing__(self, key):
        self[key] = value = self.read(key)
        return value


def lane_values(code) -> list[ir.Value] | None:
    """The values of the RegionCode `code`'s diagonal that the rest of the hook reads, which
    move between lanes, where the lanes share them near the flat diagonals -- as attn-hoist
    said (`attn.flat_lanes` on the op d), or where it did not run (no attn.level on d) as its
    default for the kernel's target would, and where a shuffle moves their types -- else
    None."""
    from attnc.passes.hoist import lanes_asked

    if code.diagonal is None:
        return None
    root = code.diagonal[0]
    asked = lanes_asked(root, _target_of(root))
    moved = read_outside(code.block, code.on_diagonal) if asked else []
    return moved if asked and all(str(v.type) in _MOVABLE for v in moved) else None


def diagonals_across_warp(code, e: Emit, given: Mapping, spots: Mapping, i0: ir.Value, j0: ir.Value,
                          moved: list[ir.Value], lane: ir.Value, offset: ir.Value, spread: int) -> dict:
    """{key: `given` and the values of `code`'s diagonal on the diagonal of key} for each key
    of `spots` (j - i less that of (i0, j0), the lane's first score's), the lane computing a
    few of its warp's diagonals and reading the rest, those of `moved` (`lane_values`), from
    the lanes that computed them; `offset` is the lane's first j - i less the warp's least,
    at most `spread`."""
    low = min(spots)
    sets = -(-(max(spots) - low + spread + 1) // 32)
    mine = e.add(e.sub(j0, offset), e.add(lane, low))          # j - i0: the warp's least + lane
    computed = [code.hoist_at(e, given, code.d_at(e, i0, e.add(mine, 32 * k))) for k in range(sets)]

    def read(key: int) -> dict:
        at = key - low
        first, last = at // 32, (at + spread) // 32
        index = e.add(offset, at)                   # in the sets, 0 <= index < 32 * sets
        source = e.and_(index, 31)
        values = dict(computed[0])
        for v in moved:
            x = _shuffled(e, computed[first][v], source)
            if last != first:
                x = e.select(e.ge(index, 32 * last), _shuffled(e, computed[last][v], source), x)
            values[v] = x
        return values
    return _ReadWhereFirstUsed(read)
