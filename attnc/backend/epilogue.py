"""The sm_80 kernel's epilogue: O / l written in the output dtype, and the LSE.

Two ways to write O, for rows < M; either way the lane with t = 0 stores its rows' LSE:

* direct: each lane stores its own accumulator pairs (columns 2t, 2t+1 of every n8 atom)
  straight from registers, 4 bytes (f16/bf16) or 8 bytes (f32) at a time;
* staged (Note [Staged O]): through shared memory, then 16 bytes per lane, a warp
  writing whole rows.

Note [Staged O]: a direct 4-byte store of a warp covers 8 rows, 16 bytes of each: eight
128-byte lines for 128 bytes of data, so the O of a 128-row block at head dim 64 costs
1024 line accesses of the SM's load/store unit, which it shares with the other CTA's
copies and ldmatrix (without any O store the window at head dim 64 ran about 4 % faster,
causal 2.5 %: results/sm80_h200.md, "Staged O"). Staged, each warp writes its
own rows_per_warp rows (bf16/f16 pairs, one 4-byte st.shared each) into shared memory
the tiles no longer need, then reads them back 16 bytes per lane, consecutive lanes
along a row, and stores those: 4 lines per instruction, every byte used. The row
r's 16-byte chunk c sits at chunk c ^ (r mod S) of its row, S the largest power of two
up to 8 that divides the chunks per row: the 8 rows of one accumulator store (rows g,
chunks dj) then fall in 8 different groups of 4 banks, and the 16-byte reads of a row
in distinct ones too. The kernel syncs the CTA once before (no warp still reads Q or
K/V, every copy has landed); a warp reads back only what it wrote, after bar.warp.sync.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import llvm, scf

from attnc.backend.nvgpu_builders import Emit, GlobalPtr, MmaSync, ld_shared_v4, st_shared_b32, warp_sync
from attnc.backend.softmax import OnlineSoftmax, SoftmaxState


@dataclass(frozen=True)
class StagedRows:
    """Where a warp stages its O rows: `base`, the i32 shared address of its region
    (rows x head_dim_v 16-bit values, row-major, chunks swizzled), and `first_row`, the
    global index of its first row."""
    base: ir.Value
    first_row: ir.Value
    rows: int
    atom_rows: int = 16     # global rows from one of the warp's 16-row tiles to its next

    def global_row(self, e: Emit, row):
        """The global index of staged row `row` (its 16-row tile row // 16)."""
        if self.atom_rows == 16:
            return e.add(self.first_row, row)
        return e.add(self.first_row, e.add(row, e.mul(e.shr(row, 4), self.atom_rows - 16)))


class Epilogue:
    def __init__(self, e: Emit, softmax: OnlineSoftmax, out_dtype: str, first_row, first_col, lane,
                 stage: StagedRows | None = None, row_end=None, atom_rows: int = 16):
        self.e, self.softmax = e, softmax
        self.atom_rows = atom_rows      # rows from one 16-row tile of the warp to its next
        self.out_dtype = out_dtype
        self.first_row, self.first_col, self.lane = first_row, first_col, lane
        self.stage = stage
        self.row_end = e.dim("M") if row_end is None else row_end     # rows >= row_end are not stored

    def store(self, acc_o, state: SoftmaxState, o: GlobalPtr, o_row_stride, lse: GlobalPtr | None,
              sink=None) -> None:
        """acc_o[mi][dj][2*half + x] / l -> o[row, 8*dj + 2t + x], row = first_row + atom_rows mi + 8half.
        `sink`: the sink logit in raw score units (Note [Sinks] in softmax.py)."""
        inv, lse_values = self.softmax.finalize(state, sink)
        if self.stage is not None:
            self._stage(acc_o, inv)
        if self.stage is None or lse is not None:
            self._store_rows(acc_o, inv, o, o_row_stride, lse, lse_values)
        if self.stage is not None:
            self._write_back(len(acc_o[0]), o, o_row_stride)

    def _store_rows(self, acc_o, inv, o: GlobalPtr, o_row_stride, lse: GlobalPtr | None, lse_values) -> None:
        """Row by row, for rows below row_end (M, or a table tile's end): the lane's O pairs
        (direct) and the row's LSE."""
        e = self.e
        for mi in range(len(acc_o)):
            for half in (0, 1):
                r = 2 * mi + half
                row = e.add(self.first_row, self.atom_rows * mi + 8 * half)
                guard = scf.IfOp(e.lt(row, self.row_end))
                with ir.InsertionPoint(guard.then_block):
                    if self.stage is None:
                        row_ptr = o.offset(e.add(e.mul(e.to_i64(row), o_row_stride), e.to_i64(self.first_col)))
                        for dj, atom in enumerate(acc_o[mi]):
                            lo, hi = (e.fmul(atom[2 * half + x], inv[r]) for x in (0, 1))
                            self._store_pair(row_ptr.offset(e.c64(8 * dj)), lo, hi)
                    if lse is not None:
                        self._store_lse(lse, row, lse_values[r])
                    scf.yield_([])

    # ------------------------------------------------------------ Note [Staged O]
    @staticmethod
    def _swizzle(chunks: int) -> int:
        return min(8, chunks & -chunks)

    def _stage(self, acc_o, inv) -> None:
        """Each lane's pairs / l into its warp's rows: row 16mi + 8half + g, chunk dj ^ (g
        mod S), word t."""
        e, st = self.e, self.stage
        chunks = len(acc_o[0])
        row_bytes, swz = 16 * chunks, self._swizzle(chunks)
        g, t = e.shr(self.lane, 2), e.and_(self.lane, 3)
        lane_base = e.add(st.base, e.add(e.mul(g, row_bytes), e.shl(t, 2)))
        twist = e.shl(e.and_(g, swz - 1), 4)
        # One address per chunk within a swizzle group; the rest are immediates.
        addrs = [e.add(lane_base, e.xor(twist, 16 * c)) for c in range(swz)]
        pack = MmaSync(e, self.out_dtype).pack
        for mi in range(len(acc_o)):
            for half in (0, 1):
                r = 2 * mi + half
                for dj, atom in enumerate(acc_o[mi]):
                    lo, hi = (e.fmul(atom[2 * half + x], inv[r]) for x in (0, 1))
                    offset = (16 * mi + 8 * half) * row_bytes + 16 * (dj - dj % swz)
                    st_shared_b32(addrs[dj % swz], pack(lo, hi), offset)
        warp_sync()

    def _write_back(self, chunks: int, o: GlobalPtr, o_row_stride) -> None:
        """The warp's staged rows to O, 16 bytes per lane, consecutive lanes along a row."""
        e, st = self.e, self.stage
        row_bytes, swz = 16 * chunks, self._swizzle(chunks)
        total = st.rows * chunks
        for k in range(-(-total // 32)):
            q = e.add(self.lane, 32 * k)
            row, chunk = e.div(q, chunks), e.rem(q, chunks)
            slot = e.xor(chunk, e.and_(row, swz - 1))
            value = ld_shared_v4(e, e.add(st.base, e.add(e.mul(row, row_bytes), e.shl(slot, 4))))
            global_row = st.global_row(e, row)
            inside = e.lt(global_row, self.row_end)
            if 32 * (k + 1) > total:
                inside = e.land(inside, e.lt(q, total))
            guard = scf.IfOp(inside)
            with ir.InsertionPoint(guard.then_block):
                ptr = o.offset(e.add(e.mul(e.to_i64(global_row), o_row_stride), e.to_i64(e.shl(chunk, 3))))
                llvm.store(value, ptr.ptr, alignment=16)
                scf.yield_([])

    # ------------------------------------------------------------ direct
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
