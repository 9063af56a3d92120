"""Warp-level matrix instructions: ldmatrix, stmatrix and mma.sync (m16n8k16, m16n8k8).

Fragment layouts follow the PTX ISA's "Matrix Fragments for mma.m16n8k16" (groupID =
lane / 4, threadID_in_group = lane % 4): each is a table (register, lane, half) ->
(row, col), built once, so a handler gathers a whole matrix with one fancy index.
Products accumulate in float32 (numpy's matmul); the hardware's order of the k-sum
is unspecified, so results may differ from a GPU's in the last bits.
"""
from __future__ import annotations

import numpy as np

from attnc_sim import isa, races
from attnc_sim.isa_cvt import bf16_bits_to_f32, f32_to_bf16_bits
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
        d = (a @ b + c).astype(np.float32).reshape(-1)[C_IDX]
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
        cta.smem_view(np.uint16)[(offs // 2)[:, None] + k] = m.reshape(8 * n, 8)
    return run
