"""The block map's interval step (Note [Tile intervals] in blockmap_kernel.py) and its full-range
scan (Note [Full range from the map]), run on the CPU (host_jit.py):

* every transfer function of blockmap_intervals.py against brute force over small random
  intervals, near the i32 limits too: sound (each concrete result, i32 wrapping, lies in
  the abstract one) and, where no operation wraps, exact;
* whole mask regions over random tiles against the reference evaluator: a tile called
  SKIP keeps nothing, one called FULL keeps everything; documents tiles are decided;
* the param walk (`WarpRange`) lane by lane, as a warp runs it, against numpy;
* which regions the step supports, and their kernels assembled for sm_80;
* the sampled elements of Note [Sampled elements] (in the tile, corners included);
* the holds bits of Note [Conjuncts a tile holds] over random tiles: each one a proof;
* the row scan of `blockmap_hooks(...).kv_range` lane by lane, and the range it gives.
(redux.sync cannot run on the CPU: the lanes' values are reduced in Python here. The map on
a GPU: test_blockmap_gpu.py.)
"""
from __future__ import annotations

import functools
import itertools
import zlib

import numpy as np
import pytest
from mlir import ir
from mlir.dialects import arith, llvm

from attnc.backend import blockmap_intervals as I
from attnc.backend import cubin, ptx
from attnc.backend.blockmap import FULL, MIXED, SKIP, MapNames, blockmap_plan
from attnc.backend.blockmap_hooks import _load_class, row_range, scan_row
from attnc.backend.blockmap_kernel import build_blockmap_module, sample_element
from attnc.backend.nvgpu_builders import GlobalPtr
from attnc.driver import compile_mlir
from attnc.ir import MASK_MOD, attention_ops, region_block
from tests.backend.host_jit import host_function
from tests.backend.test_hooks import reference_evaluator

I32_MIN, I32_MAX = I.I32_MIN, I.I32_MAX
CTX = ir.Context()              # the JIT-compiled helpers' context, alive with the module


def wrap(x: int) -> int:
    """x as an i32 (two's complement wrapping, as the kernel's arith computes)."""
    return (x + 2 ** 31) % 2 ** 32 - 2 ** 31


def floordiv(a: int, c: int) -> int:
    """The kernel's floor division (0 for c == 0), i32 wrapping."""
    return 0 if c == 0 else wrap(a // c)


@functools.lru_cache(maxsize=None)
def jit(kind: str, arg: int | None = None):
    """A host function (a_lo, a_hi, b_lo, b_hi) -> the transfer function's [lo, hi] or
    [may_true, may_false] (i1 operands: (t, f) pairs in a_lo, a_hi, b_lo, b_hi)."""
    def body(e, a):
        x, y = I.Ival(a["a_lo"], a["a_hi"]), I.Ival(a["b_lo"], a["b_hi"])
        bit = lambda v: arith.trunci(e.i1, v)  # noqa: E731
        tx, ty = I.Tri(bit(a["a_lo"]), bit(a["a_hi"])), I.Tri(bit(a["b_lo"]), bit(a["b_hi"]))
        if kind in ("add", "sub", "min_", "max_"):
            r = getattr(I, kind)(e, x, y)
        elif kind == "mul":
            r = I.mul(e, x, y)
        elif kind == "mul_const":
            r = I.mul(e, x, I.point(e.c32(arg)), None, arg)
        elif kind == "floordiv":
            r = I.floordiv(e, x, arg)
        elif kind == "abs_":
            r = I.abs_(e, x)
        elif kind in ("eq", "ne", "slt", "sle", "sgt", "sge"):
            r = I.cmp(e, kind, x, y)
        elif kind in ("and_", "or_", "xor", "bool_eq"):
            r = getattr(I, kind)(e, tx, ty)
        elif kind == "select":          # select (cond from arg bits), a, b
            r = I.select(e, I.Tri(arith.constant(e.i1, arg & 1), arith.constant(e.i1, arg >> 1)), x, y)
        elif kind == "select_bool":
            r = I.select(e, I.Tri(arith.constant(e.i1, arg & 1), arith.constant(e.i1, arg >> 1)), tx, ty)
        else:
            raise KeyError(kind)
        return [r.lo, r.hi] if isinstance(r, I.Ival) else [r.may_true, r.may_false]

    with CTX:
        return host_function({"a_lo": "i32", "a_hi": "i32", "b_lo": "i32", "b_hi": "i32"}, body)


CONCRETE = {
    "add": lambda a, b: wrap(a + b), "sub": lambda a, b: wrap(a - b), "mul": lambda a, b: wrap(a * b),
    "min_": min, "max_": max,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "slt": lambda a, b: a < b,
    "sle": lambda a, b: a <= b, "sgt": lambda a, b: a > b, "sge": lambda a, b: a >= b,
}


def intervals(rng, n: int, width: int = 6):
    """Random small intervals: around 0, and against either i32 limit."""
    for _ in range(n):
        where = rng.integers(0, 5)
        lo = int(rng.integers(-12, 12)) if where < 3 else \
            (I32_MAX - int(rng.integers(0, 8)) if where == 3 else I32_MIN + int(rng.integers(0, 8)))
        hi = lo + int(rng.integers(0, width))
        if hi > I32_MAX:
            lo, hi = I32_MAX - (hi - lo), I32_MAX
        yield lo, hi


def check_ival(got, values, exact: bool, what):
    lo, hi = got
    assert lo <= hi, what
    assert all(lo <= v <= hi for v in values), (what, got, sorted(set(values)))
    wrapped = (lo, hi) == (I32_MIN, I32_MAX)
    if exact and not wrapped:
        assert (lo, hi) == (min(values), max(values)), (what, got, min(values), max(values))


@pytest.mark.parametrize("kind", sorted(CONCRETE))
def test_binary_transfer_functions_are_sound_and_exact(kind):
    run, rng = jit(kind), np.random.default_rng(zlib.crc32(kind.encode()))     # the same in every process
    for (al, ah), (bl, bh) in zip(intervals(rng, 300), intervals(rng, 300)):
        values = [CONCRETE[kind](a, b) for a in range(al, ah + 1) for b in range(bl, bh + 1)]
        got = run(a_lo=al, a_hi=ah, b_lo=bl, b_hi=bh)
        what = (kind, (al, ah), (bl, bh))
        if isinstance(values[0], bool):
            # independent operands: may_true/may_false are exactly whether some pair gives it
            assert got == [int(any(values)), int(not all(values))], (what, got)
        else:
            # no i32 overflow in the exact bounds: the result is their hull
            exact_bounds = [CONCRETE[kind](a, b) if kind in ("min_", "max_") else
                            {"add": a + b, "sub": a - b, "mul": a * b}[kind]
                            for a in (al, ah) for b in (bl, bh)]
            fits = all(I32_MIN <= v <= I32_MAX for v in exact_bounds)
            check_ival(got, values, fits, what)
            if not fits:
                assert got == [I32_MIN, I32_MAX], what


@pytest.mark.parametrize("c", [-1000, -7, -3, -1, 0, 1, 2, 5, 64])
def test_constant_multiplication_and_floor_division(c):
    mul, div, rng = jit("mul_const", c), jit("floordiv", c), np.random.default_rng(c + 5000)
    for al, ah in intervals(rng, 300, width=40):
        got = mul(a_lo=al, a_hi=ah, b_lo=0, b_hi=0)
        fits = all(I32_MIN <= a * c <= I32_MAX for a in (al, ah))
        check_ival(got, [wrap(a * c) for a in range(al, ah + 1)], fits, ("mul", c, al, ah))
        got = div(a_lo=al, a_hi=ah, b_lo=0, b_hi=0)
        check_ival(got, [floordiv(a, c) for a in range(al, ah + 1)], True, ("floordiv", c, al, ah))


def test_abs():
    run, rng = jit("abs_"), np.random.default_rng(11)
    for al, ah in intervals(rng, 400, width=30):
        check_ival(run(a_lo=al, a_hi=ah, b_lo=0, b_hi=0), [wrap(abs(a)) for a in range(al, ah + 1)],
                   True, ("abs", al, ah))


TRIS = [(1, 0), (0, 1), (1, 1)]          # true, false, unknown
BOOL = {"and_": lambda x, y: x and y, "or_": lambda x, y: x or y, "xor": lambda x, y: x != y,
        "bool_eq": lambda x, y: x == y}


def gamma(t):
    return [v for v, may in ((True, t[0]), (False, t[1])) if may]


@pytest.mark.parametrize("kind", sorted(BOOL))
def test_three_valued_logic_is_exact(kind):
    run = jit(kind)
    for x, y in itertools.product(TRIS, TRIS):
        values = [BOOL[kind](a, b) for a in gamma(x) for b in gamma(y)]
        assert run(a_lo=x[0], a_hi=x[1], b_lo=y[0], b_hi=y[1]) == [int(any(values)), int(not all(values))]


def test_not_is_xor_with_true():
    run = jit("xor")
    for x in TRIS:
        assert run(a_lo=x[0], a_hi=x[1], b_lo=1, b_hi=0) == [x[1], x[0]]


@pytest.mark.parametrize("cond", TRIS)
def test_select(cond):
    bits = cond[0] | cond[1] << 1
    ints, bools, rng = jit("select", bits), jit("select_bool", bits), np.random.default_rng(bits)
    for (al, ah), (bl, bh) in zip(intervals(rng, 100), intervals(rng, 100)):
        values = [v for c in gamma(cond) for v in (range(al, ah + 1) if c else range(bl, bh + 1))]
        check_ival(ints(a_lo=al, a_hi=ah, b_lo=bl, b_hi=bh), values, True, (cond, al, ah, bl, bh))
    for x, y in itertools.product(TRIS, TRIS):
        values = [v for c in gamma(cond) for v in (gamma(x) if c else gamma(y))]
        assert bools(a_lo=x[0], a_hi=x[1], b_lo=y[0], b_hi=y[1]) == [int(any(values)), int(not all(values))]


# ---------------------------------------------------------------- whole regions

def variant(mask: str, params: str) -> str:
    return f"""attention v {{
  q: f16[B, H, M, 64]
  k: f16[B, H, N, 64]
  v: f16[B, H, N, 64]
  {params}
  mask_mod(b, h, i, j) = {mask}
  out o: f16[B, H, M, 64]
}}"""


DOCS = variant("doc[b, i] == doc[b, j] and j <= i", "param doc: i32[B, N]")
WINDOW = variant("j <= i and i - j < win[h]", "param sinks: f32[H]\n  param win: i32[H]")
MASKS = {
    "docs": DOCS,
    "window": WINDOW,
    "chunks": variant("(i // 16 == j // 16 or abs(i - j) < w[b] * 3) and not (doc[b, j] % 5 == 2)",
                      "param doc: i32[B, N]\n  param w: i32[B]"),
    "where": variant("where(doc[b, i] > 2, i - j, j - i) >= -3 or (i % 5 == 0) == (doc[b, j] == 1)",
                     "param doc: i32[B, N]"),
    "minmax": variant("min(doc[b, i], doc[b, j]) + 1 >= max(doc[b, i] - 2, j // 7) and -j <= 2 - i",
                      "param doc: i32[B, N]"),
    "table": variant("tab[i // 8, j // 8] > 0 or tab[j % 8, 3] == doc[b, i]",
                     "param tab: i32[8, 8]\n  param doc: i32[B, N]"),
    "lookup": variant("lut[doc[b, i]] == lut[doc[b, j]] and j <= i + 3",
                      "param doc: i32[B, N]\n  param lut: i32[16]"),
    "wraps": variant("doc[b, i] * 1000000 + j > big[b] - i", "param doc: i32[B, N]\n  param big: i32[B]"),
    # negative literals (`0 - c` in the IR) as divisors and factors
    "negative": variant("doc[b, i] == doc[b, j] and doc[b, j] % -3 != 1 and (i - j) // -4 >= -9 "
                        "and doc[b, i] * -2 <= 6 - j // 50", "param doc: i32[B, N]"),
}


@functools.lru_cache(maxsize=None)
def compiled(source: str):
    return compile_mlir(source, "v.attn")


def region(result):
    return region_block(attention_ops(result.module)[0], MASK_MOD)


@functools.lru_cache(maxsize=None)
def tile_truth(source: str, cap: int = I.PARAM_CAP, holds: bool = False):
    """A host function: (dims, b, h, i_lo, i_hi, j_lo, j_hi, params) -> [may_true,
    may_false] of the mask region over that box (one lane), the params read as the
    block-map kernel reads them (contiguous, MapNames); with `holds`, [may_true,
    may_false, holds bits] of `blockmap_kernel.tile_truths` (Note [Conjuncts a tile holds])."""
    from attnc.backend.blockmap_kernel import tile_truths

    result = compiled(source)
    names = MapNames(result.variant.params, blockmap_plan(result, 128, 64).never_empty)
    args = {d: "i32" for d in result.variant.dims}
    args.update({k: "i32" for k in ("b", "h", "i_lo", "i_hi", "j_lo", "j_hi")})
    args.update({f"ptr:{p.name}": "ptr" for p in result.variant.params})

    def body(e, a):
        ranges = I.WarpRange(e, names, e.c32(0), 1, lambda x, kind: x, cap)
        box = [I.point(a["b"]), I.point(a["h"]), I.Ival(a["i_lo"], a["i_hi"]), I.Ival(a["j_lo"], a["j_hi"])]
        if not holds:
            t = I.TileIntervals(e, region(result), ranges).truth(box)
            return [t.may_true, t.may_false]
        t, bits = tile_truths(e, region(result), ranges, box, True)
        return [t.may_true, t.may_false, bits]

    with result.module.context:
        return host_function(args, body)


def random_params(name: str, variant, dims: dict, rng) -> dict:
    arrays = {}
    for p in variant.params:
        shape = tuple(dims[s] if isinstance(s, str) else s for s in p.shape)
        if p.dtype == "f32":
            arrays[p.name] = rng.random(shape, dtype=np.float32)
        elif p.name == "doc":               # packed documents: nondecreasing ids
            cuts = np.sort(rng.integers(0, dims["N"], (shape[0], int(rng.integers(0, 6)))), axis=1)
            arrays[p.name] = (np.arange(shape[1])[None, :, None] >= cuts[:, None, :]).sum(-1).astype(np.int32)
            if name in ("where", "minmax", "lookup") and rng.random() < 0.3:
                arrays[p.name] = rng.integers(-2, 14, shape).astype(np.int32)
            if name == "wraps":
                arrays[p.name] = rng.integers(0, 5000, shape).astype(np.int32)
        elif p.name == "big":
            arrays[p.name] = rng.integers(-2 ** 31, 2 ** 31 - 1, shape, dtype=np.int64).astype(np.int32)
        else:
            arrays[p.name] = rng.integers(-3, 40, shape).astype(np.int32)
    return arrays


def exact_reference(evaluator, variant, b, h, ii, jj):
    """The mask over the box, in exact integers as the kernels compute it (Note [Exact
    integers]; `wraps` leaves i32 there)."""
    return evaluator.hook(variant.mask_mod, (np.asarray(b), np.asarray(h), ii, jj)).astype(bool)


@pytest.mark.parametrize("name", sorted(MASKS))
def test_tile_intervals_are_sound_on_whole_masks(name):
    result = compiled(MASKS[name])
    assert I.unsupported(region(result), result.variant.params) is None
    variant = result.variant
    run = tile_truth(MASKS[name])
    rng = np.random.default_rng(sorted(MASKS).index(name))
    decided = {SKIP: 0, FULL: 0, MIXED: 0}
    for trial in range(150):
        dims = {d: int(rng.integers(1, 5)) for d in variant.dims}
        dims.update(M=int(rng.integers(1, 300)), N=int(rng.integers(1, 300)))
        arrays = random_params(name, variant, dims, rng)
        evaluator = reference_evaluator(dims, arrays)
        b, h = int(rng.integers(0, dims["B"])), int(rng.integers(0, dims["H"]))
        bm, bn = int(rng.choice([1, 8, 64, 128])), int(rng.choice([1, 16, 64]))
        m_lo = int(rng.integers(0, dims["M"])) // bm * bm
        n_lo = int(rng.integers(0, dims["N"])) // bn * bn
        m_hi, n_hi = min(m_lo + bm, dims["M"]), min(n_lo + bn, dims["N"])
        values = {**dims, "b": b, "h": h, "i_lo": m_lo, "i_hi": m_hi - 1, "j_lo": n_lo, "j_hi": n_hi - 1}
        values.update({p.name: arrays[p.name] for p in variant.params})
        may_true, may_false = run(**values)
        ii, jj = np.meshgrid(np.arange(m_lo, m_hi), np.arange(n_lo, n_hi), indexing="ij")
        kept = np.broadcast_to(exact_reference(evaluator, variant, b, h, ii, jj), ii.shape)
        where = (name, dims, b, h, (m_lo, m_hi), (n_lo, n_hi))
        assert may_true or not kept.any(), where
        assert may_false or kept.all(), where
        decided[SKIP if not may_true else FULL if not may_false else MIXED] += 1
    if name in ("docs", "window", "chunks"):
        assert decided[SKIP] and decided[FULL], decided     # the step decides tiles there


def test_documents_tiles_inside_one_document_are_decided():
    """doc[b, i] and doc[b, j] over the tile: FULL below the diagonal inside a document,
    SKIP between two documents, undecided where a tile straddles a boundary."""
    run = tile_truth(DOCS)
    doc = (np.arange(1024) // 300).astype(np.int32)[None, :]
    common = dict(B=1, H=1, M=1024, N=1024, b=0, h=0, doc=doc)
    tri = lambda i0, j0: tuple(run(**common, i_lo=i0, i_hi=i0 + 127, j_lo=j0, j_hi=j0 + 63))  # noqa: E731
    assert tri(128, 0) == (1, 0)            # rows 128..255, keys 0..63: document 0, below the diagonal
    assert tri(384, 0) == (0, 1)            # rows in document 1, keys in document 0
    assert tri(256, 0) == (1, 1)            # rows 256..383 straddle documents 0 and 1
    assert tri(128, 192) == (1, 1)          # the diagonal


def test_an_index_past_the_cap_gives_up():
    """lut[doc[b, i]] over a doc range longer than the cap: the read is TOP, so only the
    j <= i + 3 part decides (SKIP above the diagonal), never FULL."""
    source = MASKS["lookup"]
    run = tile_truth(source, cap=8)
    doc = np.arange(64, dtype=np.int32)[None, :] % 16
    lut = np.zeros(16, np.int32)             # every lut value equal: really FULL below the diagonal
    common = dict(B=1, H=1, M=64, N=64, b=0, h=0, doc=doc, lut=lut)
    assert run(**common, i_lo=32, i_hi=35, j_lo=0, j_hi=3) == [1, 0]      # 4 ids: under the cap
    assert run(**common, i_lo=32, i_hi=63, j_lo=0, j_hi=31) == [1, 1]     # 16 ids: TOP
    assert run(**common, i_lo=0, i_hi=7, j_lo=40, j_hi=63) == [0, 1]


# ---------------------------------------------------------------- Note [Conjuncts a tile holds]

# Masks with a row interval and a residual, and their two conjunct groups in numpy
# (doc, lut: int64 arrays; i, j: index grids; indices clamped as the kernel clamps them).
SPLIT = {
    "docs": (DOCS, lambda p, b, i, j: p["doc"][b, np.minimum(i, p["doc"].shape[1] - 1)] == p["doc"][b, j],
             lambda p, b, i, j: j <= i),
    "lookup": (MASKS["lookup"],
               lambda p, b, i, j: p["lut"][np.clip(p["doc"][b, np.minimum(i, p["doc"].shape[1] - 1)], 0, 15)]
               == p["lut"][np.clip(p["doc"][b, j], 0, 15)],
               lambda p, b, i, j: j <= i + 3),
    "band": (variant("not (doc[b, j] % 5 == 2) and j <= i and i - j < 40 and i > 3", "param doc: i32[B, N]"),
             lambda p, b, i, j: p["doc"][b, j] % 5 != 2,
             lambda p, b, i, j: (j <= i) & (i - j < 40) & (i > 3)),
}


@pytest.mark.parametrize("name", sorted(SPLIT))
def test_holds_bits_are_proofs(name):
    """Each RESIDUAL_HOLDS / INTERVAL_HOLDS bit over random tiles: that conjunct group is
    true on every element of the tile (sound); and the bits are set somewhere (the
    documents diagonal inside one document, a boundary tile below it)."""
    from attnc.backend.blockmap import INTERVAL_HOLDS, RESIDUAL_HOLDS

    source, residual, interval = SPLIT[name]
    result = compiled(source)
    assert blockmap_plan(result, 128, 64).holds
    run = tile_truth(source, holds=True)
    rng = np.random.default_rng(7 + sorted(SPLIT).index(name))
    seen = {RESIDUAL_HOLDS: 0, INTERVAL_HOLDS: 0}
    for trial in range(150):
        dims = {d: int(rng.integers(1, 4)) for d in result.variant.dims}
        dims.update(M=int(rng.integers(1, 300)), N=int(rng.integers(1, 300)))
        arrays = random_params(name if name != "band" else "docs", result.variant, dims, rng)
        b = int(rng.integers(0, dims["B"]))
        bm, bn = int(rng.choice([1, 16, 64, 128])), int(rng.choice([1, 16, 64]))
        m_lo = int(rng.integers(0, dims["M"])) // bm * bm
        n_lo = int(rng.integers(0, dims["N"])) // bn * bn
        m_hi, n_hi = min(m_lo + bm, dims["M"]), min(n_lo + bn, dims["N"])
        values = {**dims, "b": b, "h": 0, "i_lo": m_lo, "i_hi": m_hi - 1, "j_lo": n_lo, "j_hi": n_hi - 1}
        values.update({p.name: arrays[p.name] for p in result.variant.params})
        *_, bits = run(**values)
        ii, jj = np.meshgrid(np.arange(m_lo, m_hi), np.arange(n_lo, n_hi), indexing="ij")
        params = {k: v.astype(np.int64) for k, v in arrays.items()}
        where = (name, dims, b, (m_lo, m_hi), (n_lo, n_hi), bits)
        for bit, part in ((RESIDUAL_HOLDS, residual), (INTERVAL_HOLDS, interval)):
            if bits & bit:
                assert np.all(part(params, b, ii, jj)), where
                seen[bit] += 1
    assert all(seen.values()), seen


def test_documents_holds_bits_on_the_two_kinds_of_mixed_tile():
    from attnc.backend.blockmap import INTERVAL_HOLDS, RESIDUAL_HOLDS

    run = tile_truth(DOCS, holds=True)
    doc = (np.arange(1024) // 300).astype(np.int32)[None, :]
    common = dict(B=1, H=1, M=1024, N=1024, b=0, h=0, doc=doc)
    bits = lambda i0, j0: run(**common, i_lo=i0, i_hi=i0 + 127, j_lo=j0, j_hi=j0 + 63)[2]  # noqa: E731
    assert bits(128, 192) == RESIDUAL_HOLDS            # the diagonal inside document 0
    assert bits(256, 0) == INTERVAL_HOLDS              # rows straddle documents 0 and 1, below the diagonal
    assert bits(256, 256) == 0                         # both: the diagonal across a boundary
    assert bits(128, 0) == RESIDUAL_HOLDS | INTERVAL_HOLDS     # a FULL tile (the map stores it as FULL)


def test_a_ragged_key_block_holds_its_interval_on_its_keys_below_n():
    """M > N: rows past N read the last document id (clamped), so the last key block,
    ragged at N = 200, holds `j <= i` on its keys < N for rows 384..516 while its ids
    differ: INTERVAL_HOLDS. The kernel must still drop its keys >= N (ScoreMasker._split
    tests the residual alone only in a block wholly below N; tests/gpu runs docs_sink at
    M = 517, N = 200)."""
    from attnc.backend.blockmap import INTERVAL_HOLDS

    run = tile_truth(DOCS, holds=True)
    doc = (np.arange(200) >= 196).astype(np.int32)[None, :]
    may_true, may_false, bits = run(B=1, H=1, M=517, N=200, b=0, h=0, doc=doc,
                                    i_lo=384, i_hi=516, j_lo=192, j_hi=199)
    assert (may_true, may_false, bits) == (1, 1, INTERVAL_HOLDS)


# ---------------------------------------------------------------- the param walk, lane by lane

@functools.lru_cache(maxsize=None)
def walk_lane(lanes: int):
    """(lane, dims, box of tab[i, j] and doc[b, i]) -> each lane's [lo, hi] before the warp
    reduction, for tab: i32[T, 40] (two varying axes) and doc: i32[B, N] (one)."""
    result = compiled(variant("tab[i, j] > doc[b, i]", "param tab: i32[T, 40]\n  param doc: i32[B, N]"))
    names = MapNames(result.variant.params, blockmap_plan(result, 128, 64).never_empty)
    args = {"T": "i32", "B": "i32", "N": "i32", "lane": "i32", "b": "i32",
            "i_lo": "i32", "i_hi": "i32", "j_lo": "i32", "j_hi": "i32", "ptr:tab": "ptr", "ptr:doc": "ptr"}

    def body(e, a):
        ranges = I.WarpRange(e, names, a["lane"], lanes, lambda x, kind: x)
        i, j = I.Ival(a["i_lo"], a["i_hi"]), I.Ival(a["j_lo"], a["j_hi"])
        tab, doc = ranges(0, [i, j], [True, True]), ranges(1, [I.point(a["b"]), i], [False, True])
        return [tab.lo, tab.hi, doc.lo, doc.hi]

    with result.module.context:
        return host_function(args, body)


@pytest.mark.parametrize("lanes", [1, 3, 32])
def test_the_param_walk_covers_the_clamped_box(lanes):
    run, rng = walk_lane(lanes), np.random.default_rng(lanes)
    for _ in range(40):
        T, B, N = int(rng.integers(1, 30)), int(rng.integers(1, 4)), int(rng.integers(1, 400))
        tab = rng.integers(-1000, 1000, (T, 40)).astype(np.int32)
        doc = rng.integers(-1000, 1000, (B, N)).astype(np.int32)
        b = int(rng.integers(0, B))
        i_lo, j_lo = int(rng.integers(-5, 300)), int(rng.integers(-5, 50))
        i_hi, j_hi = i_lo + int(rng.integers(0, 200)), j_lo + int(rng.integers(0, 30))
        per_lane = [run(T=T, B=B, N=N, lane=lane, b=b, i_lo=i_lo, i_hi=i_hi, j_lo=j_lo, j_hi=j_hi,
                        tab=tab, doc=doc) for lane in range(lanes)]
        got = [min(r[0] for r in per_lane), max(r[1] for r in per_lane),
               min(r[2] for r in per_lane), max(r[3] for r in per_lane)]
        ci = lambda x, size: min(max(x, 0), size - 1)  # noqa: E731
        box = tab[ci(i_lo, T):ci(i_hi, T) + 1, ci(j_lo, 40):ci(j_hi, 40) + 1]
        rows = doc[b, ci(i_lo, N):ci(i_hi, N) + 1]
        count = box.size
        want_tab = [I32_MIN, I32_MAX] if count > I.PARAM_CAP else [int(box.min()), int(box.max())]
        assert got == want_tab + [int(rows.min()), int(rows.max())], (T, N, i_lo, i_hi, j_lo, j_hi)


# ---------------------------------------------------------------- which regions have the step

def test_documents_and_windows_have_the_interval_step_floats_do_not():
    assert blockmap_plan(compiled(DOCS), 128, 64).intervals
    assert blockmap_plan(compiled(WINDOW), 64, 128).intervals
    floats = compiled(variant("(t[b, j] + float(u[h % 4]) > 0.5 and ((j - i) // 7) % 3 != 1) or i == j",
                              "param t: f32[B, N]\n  param u: i32[4]"))
    assert not blockmap_plan(floats, 64, 64).intervals
    assert I.unsupported(region(floats), floats.variant.params).startswith("'attn.param' (tensor<?x?xf32>")
    divided = compiled(variant("i // n[b] == j // n[b]", "param n: i32[B]"))
    assert "floordivsi" in I.unsupported(region(divided), divided.variant.params)
    assert blockmap_plan(compiled(MASKS["negative"]), 64, 64).intervals       # -3 is a constant too


@pytest.mark.parametrize("source, block_m, block_n, walks", [
    (DOCS, 128, 64, True), (MASKS["table"], 128, 128, True), (MASKS["lookup"], 64, 64, True),
    (WINDOW, 64, 128, False),           # win[h] is one element: a plain load, no warp reduction
])
def test_kernels_with_the_step_assemble_without_spills(source, block_m, block_n, walks):
    result = compiled(source)
    plan = blockmap_plan(result, block_m, block_n)
    assert plan.intervals
    text = ptx.to_ptx(build_blockmap_module(plan, result), "sm_80")
    usage = cubin.resource_usage(text, "sm_80")[plan.symbol]
    assert not usage.spills and usage.stack_frame == 0, usage
    assert usage.registers <= 64, usage
    assert ("redux.sync.min.s32" in text and "redux.sync.max.s32" in text) == walks
    assert "vote.sync.any.pred" in text and "bar.red.or.pred" in text      # the element walk remains


# ---------------------------------------------------------------- the sampled elements

def test_sampled_elements_lie_in_the_tile_and_hold_its_corners():
    names = ("m_lo", "m_hi", "n_lo", "n_hi", "lane")
    with CTX:
        run = host_function({k: "i32" for k in names},
                            lambda e, a: list(sample_element(e, *(a[k] for k in names))))
    rng = np.random.default_rng(4)
    for _ in range(50):
        m_lo, n_lo = int(rng.integers(0, 10000)), int(rng.integers(0, 10000))
        m_hi, n_hi = m_lo + int(rng.integers(1, 129)), n_lo + int(rng.integers(1, 129))
        points = [tuple(run(m_lo=m_lo, m_hi=m_hi, n_lo=n_lo, n_hi=n_hi, lane=lane)) for lane in range(32)]
        assert all(m_lo <= i < m_hi and n_lo <= j < n_hi for i, j in points)
        corners = {(i, j) for i in (m_lo, m_hi - 1) for j in (n_lo, n_hi - 1)}
        assert corners <= set(points)
        rows, cols = {i for i, _ in points}, {j for _, j in points}
        assert len(rows) == min(8, m_hi - m_lo) and len(cols) == min(4, n_hi - n_lo)


# ---------------------------------------------------------------- the row scan of kv_range

@functools.lru_cache(maxsize=None)
def row_scan(lanes: int):
    def scan(e, a):
        row = GlobalPtr(e, a["ptr:row"], 8)

        def load_class(n):          # also keeps the largest block read in seen[0]
            seen = a["ptr:seen"]
            llvm.store(e.max(llvm.load(e.i32, seen), n), seen)
            return _load_class(e, row, n)

        return scan_row(e, load_class, a["lane"], lanes, a["n_blocks"])

    def answer(e, a):
        r = row_range(e, *(a[k] for k in ("lo", "hi", "flo", "fhi", "count")))
        return [r.lo, r.full_lo, r.full_hi, r.hi]

    with CTX:
        return (host_function({"ptr:row": "ptr", "ptr:seen": "ptr", "lane": "i32", "n_blocks": "i32"}, scan),
                host_function({k: "i32" for k in ("lo", "hi", "flo", "fhi", "count")}, answer))


@pytest.mark.parametrize("lanes", [1, 4, 32])
def test_row_scan_finds_the_full_run(lanes):
    scan, answer = row_scan(lanes)
    rng = np.random.default_rng(lanes)
    rows = [np.array(r, np.uint8) for r in ([], [0, 0], [2], [1, 2, 2, 2, 1, 0], [0, 2, 2, 1, 2, 0],
                                            [2, 2, 2], [0, 1, 1, 0], [0, 0, 2, 0, 0])]
    rows += [rng.integers(0, 3, int(rng.integers(0, 80))).astype(np.uint8) for _ in range(60)]
    rows += [np.concatenate([rng.integers(0, 2, int(rng.integers(0, 40))), np.full(int(rng.integers(1, 50)), 2),
                             rng.integers(0, 2, int(rng.integers(0, 40)))]).astype(np.uint8) for _ in range(30)]
    for row in rows:
        n = len(row)
        data = np.concatenate([row, [7]]).astype(np.uint8)
        seen = np.full(1, -1, dtype=np.int32)
        per_lane = [scan(row=data, seen=seen, lane=lane, n_blocks=n) for lane in range(lanes)]
        assert seen[0] < n, (row, seen)                         # never a read past the row
        reduced = dict(lo=min(r[0] for r in per_lane), hi=max(r[1] for r in per_lane),
                       flo=min(r[2] for r in per_lane), fhi=max(r[3] for r in per_lane),
                       count=sum(r[4] for r in per_lane))
        lo, full_lo, full_hi, hi = answer(**reduced)
        visit, full = np.nonzero(row != SKIP)[0], np.nonzero(row == FULL)[0]
        assert (lo, hi) == ((int(visit[0]), int(visit[-1]) + 1) if visit.size else (0, 0)), row
        assert lo <= full_lo <= full_hi <= hi, row
        assert (row[full_lo:full_hi] == FULL).all(), row
        one_run = full.size and full[-1] + 1 - full[0] == full.size
        assert (full_lo, full_hi) == ((int(full[0]), int(full[-1]) + 1) if one_run else (lo, lo)), row
