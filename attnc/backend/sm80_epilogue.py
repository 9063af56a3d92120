"""The sm_80 kernel's epilogue: O / l written in the output dtype, and the LSE.

Each lane stores its own accumulator pairs (columns 2t, 2t+1 of every n8 atom) straight
from registers, 4 bytes (f16/bf16) or 8 bytes (f32) at a time, for rows < M; the lane
with t = 0 stores the row's LSE. (A shared-memory staged 16-byte store is a possible
refinement; the O write is one pass over M x d_v against N/block_n K/V tiles read.)
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import llvm, scf

from attnc.backend.nvgpu_builders import Emit, GlobalPtr, MmaSync
from attnc.backend.sm80_softmax import OnlineSoftmax, SoftmaxState


class Epilogue:
    def __init__(self, e: Emit, softmax: OnlineSoftmax, out_dtype: str, first_row, first_col, lane):
        self.e, self.softmax = e, softmax
        self.out_dtype = out_dtype
        self.first_row, self.first_col, self.lane = first_row, first_col, lane

    def store(self, acc_o, state: SoftmaxState, o: GlobalPtr, o_row_stride, lse: GlobalPtr | None,
              sink=None) -> None:
        """acc_o[mi][dj][2*half + x] / l -> o[row, 8*dj + 2t + x], row = first_row + 16mi + 8half.
        `sink`: the sink logit in raw score units (Note [Sinks] in sm80_softmax.py)."""
        e = self.e
        inv, lse_values = self.softmax.finalize(state, sink)
        for mi in range(len(acc_o)):
            for half in (0, 1):
                r = 2 * mi + half
                row = e.add(self.first_row, 16 * mi + 8 * half)
                guard = scf.IfOp(e.lt(row, e.dim("M")))
                with ir.InsertionPoint(guard.then_block):
                    row_ptr = o.offset(e.add(e.mul(e.to_i64(row), o_row_stride), e.to_i64(self.first_col)))
                    for dj, atom in enumerate(acc_o[mi]):
                        lo, hi = (e.fmul(atom[2 * half + x], inv[r]) for x in (0, 1))
                        self._store_pair(row_ptr.offset(e.c64(8 * dj)), lo, hi)
                    if lse is not None:
                        self._store_lse(lse, row, lse_values[r])
                    scf.yield_([])

    def _store_pair(self, ptr: GlobalPtr, lo, hi) -> None:
        e = self.e
        if self.out_dtype == "f32":
            vt = ir.VectorType.get([2], e.f32)
            vec = llvm.insertelement(llvm.insertelement(llvm.mlir_undef(vt), lo, e.c32(0)), hi, e.c32(1))
            llvm.store(vec, ptr.ptr, alignment=8)
            return
        llvm.store(MmaSync(e, self.out_dtype).pack(lo, hi), ptr.ptr, alignment=4)

    def _store_lse(self, lse: GlobalPtr, row, value) -> None:
        e = self.e
        guard = scf.IfOp(e.eq(e.and_(self.lane, 3), 0))
        with ir.InsertionPoint(guard.then_block):
            llvm.store(value, lse.offset(e.to_i64(row)).ptr, alignment=4)
            scf.yield_([])
