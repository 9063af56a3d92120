"""Warp-level matrix instructions: ldmatrix, stmatrix and mma.sync (m16n8k16, m16n8k8).

Fragment layouts follow the PTX ISA's "Matrix Fragments for mma.m16n8k16" (groupID =
lane / 4, threadID_in_group = lane % 4): each is a table (register, lane, half) ->
(row, col), built once, so a handler gathers a whole matrix with one fancy index.
Each D element is formed as the sm_90 tensor core forms it (`tensor_core_mma`, Note
[Tensor-core accumulation]), not as a float32 sum in some order.
"""
from __future__ import annotations

import numpy as np

from attnc_sim import isa, proxies, races
from attnc_sim.isa_cvt import bf16_bits_to_f32
from attnc_sim.isa_warp import require_converged
from attnc_sim.state import WARP

_LANE = np.arange(WARP)
_G, _T = _LANE // 4, _LANE % 4


def _a_layout_m16k16():
    """(row, col) of A's 8 halves per lane: reg i holds halves 2i, 2i+1."""
    rows = np.zeros((4, WARP, 2), np.int64)
    cols = np.zeros((4, WARP, 2), np.int64)
    for i in range(4):
        for h in range(2):
            rows[i, :, h] = _G + 8 * (i % 2)
            cols[i, :, h] = _T * 2 + h + 8 * (i // 2)
    return rows, cols


def _b_layout_k16n8():
    rows = np.zeros((2, WARP, 2), np.int64)
    cols = np.zeros((2, WARP, 2), np.int64)
    for i in range(2):
        for h in range(2):
            rows[i, :, h] = _T * 2 + h + 8 * i
            cols[i, :, h] = _G
    return rows, cols


def _c_layout_m16n8():
    rows = np.zeros((4, WARP), np.int64)
    cols = np.zeros((4, WARP), np.int64)
    for i in range(4):
        rows[i] = _G + 8 * (i // 2)
        cols[i] = _T * 2 + i % 2
    return rows, cols


A16, B16, C16 = _a_layout_m16k16(), _b_layout_k16n8(), _c_layout_m16n8()


def _scatter_index(rows, cols, shape):
    """For a fragment layout, the flat matrix index of each (reg, lane[, half])."""
    return rows * shape[1] + cols


A_IDX = _scatter_index(*A16, (16, 16))
B_IDX = _scatter_index(*B16, (16, 8))
C_IDX = _scatter_index(*C16, (16, 8))
# inverses: for each matrix element, the flat (reg, lane[, half]) position holding it
A_INV = np.argsort(A_IDX.reshape(-1))
B_INV = np.argsort(B_IDX.reshape(-1))
C_INV = np.argsort(C_IDX.reshape(-1))


def halves_to_f32(regs: np.ndarray, ty: str) -> np.ndarray:
    """(n, 32) packed b32 registers -> (n, 32, 2) float32 of their low and high halves."""
    h = regs.view(np.uint16).reshape(regs.shape[0], WARP, 2)
    if ty == "bf16":
        return bf16_bits_to_f32(h)
    return h.view(np.float16).astype(np.float32)


# Note [Tensor-core accumulation]: how an sm_90 tensor core forms D = A B + C with 16-bit
# (bf16 or f16) A, B and f32 C, D, for k = 16. The model is the parametrised one of Fasi,
# Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores" (PeerJ Computer
# Science, 2021) and of Khattak and Mikaitis, "Accurate models of NVIDIA tensor cores"
# (arXiv:2512.07004, 2025), with its parameters fitted to an H200's results: it reproduces
# every one of the 2^19 bf16 and 2^19 f16 D elements of tools/sim_isa_vs_gpu.py's mma
# cases bit for bit (tests/sim/data/mma_h200_sample.npz keeps a sample). For each element:
#
#   1. the 16 products a_k b_k are exact; a product's reference exponent is ea + eb, the
#      exponents of its factors (its significand lies in [1, 4)); C's is its own exponent;
#   2. C joins the products in one block of 17 terms, and e is the largest reference
#      exponent of a nonzero term;
#   3. each term is truncated toward zero (sign and magnitude) to a multiple of 2^(e - 25),
#      two bits below the last of 23 fraction bits at weight 2^e;
#   4. the truncated terms are summed exactly;
#   5. the sum is rounded to f32 toward zero.
#
# Each alternative the data can tell apart fails on between 10% and 78% of the elements:
# 24 or 26 bits below 2^e, a reference exponent taken from the exact product instead of
# ea + eb, truncation toward minus infinity (two's complement), blocks of 8 products,
# rounding to nearest at the end, and C added to the rounded sum of the products.
#
# At the formats' edges (the mma.*.edge sweeps, 2^17 elements per type, all reproduced bit
# for bit): a subnormal input keeps its value and has its format's smallest normal exponent
# as reference exponent; an Inf or NaN term gives the float sum's Inf or NaN, and every NaN
# result is the canonical 0x7FFFFFFF; a sum past FLT_MAX is Inf (not FLT_MAX, despite the
# rounding toward zero). Not covered yet (no such result in the data), so modelled as below
# until a GPU says otherwise (the mma.*.zeros sweeps ask): a zero sum is +0, and a
# subnormal result is truncated to a multiple of 2^-149, not flushed.

_EMIN = {"bf16": -126, "f16": -14, "f32": -126}
_KEPT_BITS = 25
_NO_TERM = -1 << 20                            # reference exponent of a zero: below any other
_F32_TRUNCATE = np.uint64((1 << 64) - (1 << 29))   # keeps float64's sign, exponent and 23 fraction bits
_F32_TINY = float(np.finfo(np.float32).tiny)
_CANONICAL_NAN = np.uint32(0x7FFFFFFF).view(np.float32)


def _reference_exponent(x: np.ndarray, ty: str) -> np.ndarray:
    """The exponent of each float32 `x` holding a `ty` value: subnormals at the format's
    smallest normal exponent, zeros at _NO_TERM."""
    e = ((x.view(np.int32) >> 23) & 0xFF) - 127
    return np.where(x == 0, _NO_TERM, np.maximum(e, _EMIN[ty]))


def tensor_core_mma(a: np.ndarray, b: np.ndarray, c: np.ndarray, ty: str) -> np.ndarray:
    """D = A B + C as an sm_90 tensor core forms it for k = 16 (Note [Tensor-core accumulation]).

    a: (M, 16) and b: (16, N) float32 arrays of `ty` ("bf16" or "f16") values, c: (M, N)
    float32. Returns D, (M, N) float32."""
    bt = b.T
    ref = _reference_exponent(a, ty)[:, None, :] + _reference_exponent(bt, ty)[None, :, :]
    e = np.maximum(ref.max(axis=2), _reference_exponent(c, "f32"))              # (M, N)
    scale = np.ldexp(1.0, np.where(e < _NO_TERM // 2, 0, _KEPT_BITS - e))     # all zero: any scale
    with np.errstate(invalid="ignore", over="ignore"):         # Inf * 0 is NaN, as in a float sum
        terms = a.astype(np.float64)[:, None, :] * bt.astype(np.float64)[None, :, :]   # (M, N, K), exact
        terms *= scale[:, :, None]
        # a scaled term is below 2^27 in magnitude: whole numbers, summed exactly in float64
        kept = np.trunc(terms, out=terms).sum(axis=2) + np.trunc(c * scale)
        exact = kept / scale
        if (np.abs(exact) < _F32_TINY).any():
            exact = np.where(np.abs(exact) < _F32_TINY, np.trunc(np.ldexp(exact, 149)) * 2.0 ** -149, exact)
        d = (exact.view(np.uint64) & _F32_TRUNCATE).view(np.float64).astype(np.float32) + np.float32(0)
    nan = np.isnan(d)
    return np.where(nan, _CANONICAL_NAN, d) if nan.any() else d


@isa.register("mma.sync")
def mma_sync(ins, ctx):
    parts = ins.parts
    shape = next(p for p in parts if p.startswith("m16"))
    if shape != "m16n8k16" or "row" not in parts or "col" not in parts:
        raise ctx.error(f"{ins.opcode}: only m16n8k16.row.col is supported")
    dt, at, bt, ct = parts[-4:]
    if dt != "f32" or ct != "f32" or at not in ("bf16", "f16") or bt != at:
        raise ctx.error(f"{ins.opcode}: only f16/bf16 inputs with f32 accumulators are supported")
    d_ops, a_ops, b_ops, c_ops = (ctx.vec(op) for op in ins.operands)
    rows = lambda ops: [ctx.reg(op)[1] for op in ops]
    d_rows, a_rows, b_rows = rows(d_ops), rows(a_ops), rows(b_ops)
    c_read = [ctx.reader(op, "f32") for op in c_ops]
    d_write = [ctx.writer(op, "f32") for op in d_ops]
    where = ins.where()
    reads = ctx.pending_check(a_ops + b_ops, reading=True)
    writes = ctx.pending_check(d_ops, reading=False)

    def run(w):
        require_converged(w, None, where)
        if w.pending_regs:
            reads(w)
            writes(w)
        a = halves_to_f32(w.b32[a_rows], at).reshape(-1)[A_INV].reshape(16, 16)
        b = halves_to_f32(w.b32[b_rows], at).reshape(-1)[B_INV].reshape(16, 8)
        c = np.stack([r(w) for r in c_read]).reshape(-1)[C_INV].reshape(16, 8)
        d = tensor_core_mma(a, b, c, at).reshape(-1)[C_IDX]
        if w.wfull:
            w.f32[d_rows] = d
        else:
            for i, wr in enumerate(d_write):
                wr(w, d[i])
    return run


@isa.register("ldmatrix.sync")
def ldmatrix(ins, ctx):
    parts = ins.parts
    n = {"x1": 1, "x2": 2, "x4": 4}[next(p for p in parts if p in ("x1", "x2", "x4"))]
    trans = "trans" in parts
    if "m8n8" not in parts or parts[-1] != "b16":
        raise ctx.error(f"{ins.opcode}: only m8n8 b16 is supported")
    dests = [ctx.reg(op)[1] for op in ctx.vec(ins.operands[0])]
    writers = [ctx.writer(op, "b32") for op in ctx.vec(ins.operands[0])]
    addr = ctx.address(ins.operands[1])
    where = ins.where()
    k = np.arange(8)
    writes = ctx.pending_check(ctx.vec(ins.operands[0]), reading=False)

    def run(w):
        require_converged(w, None, where)
        if w.pending_regs:
            writes(w)
        cta = w.cta
        rows_addr = addr(w)[:8 * n]                       # lane 8i+r gives row r of matrix i
        offs = cta.smem_offsets(rows_addr, 16, where)
        if cta.n_inflight:
            races.check_read(w, offs, 16, where)
        m = cta.smem_view(np.uint16)[(offs // 2)[:, None] + k].reshape(n, 8, 8)   # [matrix, row, col]
        if trans:
            m = m.transpose(0, 2, 1)
        # lane l gets row l/4, cols 2(l%4), 2(l%4)+1 of each matrix
        frag = m[:, _G][:, :, None, :].reshape(n, WARP, 8)
        pair = np.stack([frag[:, _LANE, 2 * _T], frag[:, _LANE, 2 * _T + 1]], axis=-1)   # (n, 32, 2)
        vals = pair.astype(np.uint16).view(np.uint32).reshape(n, WARP)
        if w.wfull:
            w.b32[dests] = vals
        else:
            for i, wr in enumerate(writers):
                wr(w, vals[i])
    return run


@isa.register("stmatrix.sync")
def stmatrix(ins, ctx):
    parts = ins.parts
    n = {"x1": 1, "x2": 2, "x4": 4}[next(p for p in parts if p in ("x1", "x2", "x4"))]
    trans = "trans" in parts
    addr = ctx.address(ins.operands[0])
    srcs = [ctx.reader(op, "b32") for op in ctx.vec(ins.operands[1])]
    where = ins.where()
    k = np.arange(8)

    def run(w):
        require_converged(w, None, where)
        cta = w.cta
        vals = np.stack([s(w) for s in srcs]).view(np.uint16).reshape(n, WARP, 2)
        m = np.zeros((n, 8, 8), np.uint16)
        m[:, _G, 2 * _T] = vals[:, :, 0]
        m[:, _G, 2 * _T + 1] = vals[:, :, 1]
        if trans:
            m = m.transpose(0, 2, 1)
        offs = cta.smem_offsets(addr(w)[:8 * n], 16, where)
        if cta.n_inflight:
            races.check_write(w, offs, 16, where)
        proxies.generic_write(w, np.arange(8 * n), offs, 16)     # lane i gave row i's address
        cta.smem_view(np.uint16)[(offs // 2)[:, None] + k] = m.reshape(8 * n, 8)
    return run
