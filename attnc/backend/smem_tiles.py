"""Swizzled shared-memory tiles: the one layout that the cp.async writer and the
ldmatrix readers of the sm_80 kernel share.

Note [Swizzled tile layout]: a tile of `rows x cols` 16-bit elements is stored as
`cols / W` pages of `rows x W` (W = 64, or 32 when 64 does not divide cols; FA2's
kBlockKSmem), each page row-major. Within a row, the 16-byte chunk c (8 elements) is
stored at chunk c ^ swz(row), swz(row) = row mod 8 for W = 64 and (row >> 1) mod 4
for W = 32 (CuTe's Swizzle<3,3,3> / <2,3,3>). Then the
8 rows x 16 bytes that one 8x8 `ldmatrix` matrix or 8 threads of a `cp.async` row
touch fall in 8 distinct 16-byte bank groups: no bank conflicts.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import llvm, scf

from attnc.backend.nvgpu_builders import CpAsync, Emit, GlobalPtr, LdMatrix, Smem


@dataclass(frozen=True)
class SwizzledTile:
    """Where a tile lives in shared memory and how it is laid out (Note [Swizzled tile layout])."""
    offset: int         # bytes from the start of dynamic shared memory
    rows: int
    cols: int

    @property
    def page_width(self) -> int:
        return 64 if self.cols % 64 == 0 else 32

    @property
    def chunks_per_row(self) -> int:
        return self.page_width // 8

    @property
    def row_bytes(self) -> int:
        return self.page_width * 2

    @property
    def page_bytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def bytes(self) -> int:
        return self.rows * self.cols * 2

    def swizzle(self, e: Emit, row):
        """The XOR mask of a row; depends on row mod 8 only."""
        shift = 0 if self.chunks_per_row == 8 else 1
        return e.and_(e.shr(row, shift), self.chunks_per_row - 1)

    def chunk_address(self, e: Emit, row, chunk_in_page, page: int, swizzle=None):
        """Byte offset (i32, from the tile start) of chunk `chunk_in_page` of `row` in `page`;
        `swizzle` may be given when known from a row congruent to `row` mod 8."""
        physical = e.xor(chunk_in_page, self.swizzle(e, row) if swizzle is None else swizzle)
        return e.add(e.add(e.mul(row, self.row_bytes), e.shl(physical, 4)), page * self.page_bytes)


class TileLoader:
    """Copies a `rows x cols` tile from global memory into a SwizzledTile with 16-byte
    cp.async, `threads` threads laid out as (threads / chunks_per_row) rows x
    chunks_per_row (one 128-byte row segment per 8 threads), in passes of that many
    rows (the last one partial when they do not divide the tile's rows). With
    `valid_rows`, rows at or beyond it are zero-filled rather than read."""

    def __init__(self, e: Emit, cp: CpAsync, smem: Smem, tid, threads: int):
        self.e, self.cp, self.smem = e, cp, smem
        self.threads = threads
        self.tid = tid

    def _thread_layout(self, tile: SwizzledTile):
        e, cpr = self.e, tile.chunks_per_row
        rows_per_pass = self.threads // cpr
        if rows_per_pass % 8:
            raise ValueError(f"{self.threads} threads copy {rows_per_pass} rows per pass; need a multiple of 8")
        return rows_per_pass, e.div(self.tid, cpr), e.rem(self.tid, cpr)

    def load(self, tile: SwizzledTile, slot_offset, src: GlobalPtr, row_stride, valid_rows=None,
             valid=None) -> None:
        """Copy the tile's rows from `src`; `valid_rows`: how many rows exist (the rest are
        zero-filled), or `valid`: whether all of them do (an i1 the same for every copy:
        all or nothing read)."""
        e = self.e
        rows_per_pass, thread_row, chunk = self._thread_layout(tile)
        # Every pass's destination is the thread's pass-0 chunk plus a constant: the pass
        # rows are multiples of 8, so the swizzle is the same.
        dst = self.smem.address(e.add(tile.chunk_address(e, thread_row, chunk, 0), slot_offset))
        pass_stride = e.mul(row_stride, rows_per_pass)
        ptr = src.offset(e.add(e.mul(e.to_i64(thread_row), row_stride), e.to_i64(e.mul(chunk, 8))))
        rows_left = e.sub(valid_rows, thread_row) if valid_rows is not None else None
        for pass_row in range(0, tile.rows, rows_per_pass):
            if pass_row + rows_per_pass <= tile.rows:
                self._copy_pass(tile, dst, src, ptr, rows_left, pass_row, valid)
            else:       # a last, partial pass: the threads past the tile's end copy nothing
                inside = scf.IfOp(e.lt(thread_row, tile.rows - pass_row))
                with ir.InsertionPoint(inside.then_block):
                    self._copy_pass(tile, dst, src, ptr, rows_left, pass_row, valid)
                    scf.yield_([])
            ptr = ptr.offset(pass_stride)

    def _copy_pass(self, tile: SwizzledTile, dst, src: GlobalPtr, ptr: GlobalPtr, rows_left, pass_row: int,
                   valid=None) -> None:
        e = self.e
        row_ptr = ptr.ptr       # in bounds when `valid` (or no predicate) is given
        if rows_left is not None:
            valid = e.gt(rows_left, pass_row)
            # An invalid row reads nothing; point it at the tile's first row, in bounds.
            row_ptr = llvm.select(valid, ptr.ptr, src.ptr)
        for page in range(tile.cols // tile.page_width):
            self.cp.copy16(dst, row_ptr, valid,
                           dst_offset=tile.offset + page * tile.page_bytes + pass_row * tile.row_bytes,
                           src_offset=page * tile.page_width * 2)


class FragmentReader:
    """ldmatrix.x4 reads of MMA operand fragments from a SwizzledTile.

    `a_operand` (Q, row-major A, m16 x k16), `b_operand` (K as the col-major B of QK^T,
    two n8 atoms x k16) and `b_operand_trans` (V as the B of PV through .trans, k16 x two
    n8 atoms) each cover one x4 load; lane l addresses row l % 8 of matrix l / 8.

    A lane's address is its base (the lane's chunk of the tile's first 16 columns) XOR
    (c0 << 4) plus a constant, c0 = the (even) first chunk of the 16 columns mod
    chunks_per_row: phys chunk = (lane_chunk | c0) ^ swz = (lane_chunk ^ swz) ^ c0, and
    nothing below the chunk bits is added (rows, pages, tiles, slots and the shared
    base are multiples of 128 bytes, Smem.ALIGN). So one register per operand and slot,
    and the row/page part as the instruction's immediate.
    """

    A, B, B_TRANS = "a", "b", "b_trans"

    def __init__(self, e: Emit, ldsm: LdMatrix, smem: Smem, lane):
        self.e, self.ldsm, self.smem = e, ldsm, smem
        l8, q = e.and_(lane, 7), e.shr(lane, 3)
        # (row within the 16-row block, chunk within the 16-column block) per lane; matrices:
        self.lanes = {
            self.A: (e.and_(lane, 15), e.shr(lane, 4)),                         # (r0,c0) (r8,c0) (r0,c8) (r8,c8)
            self.B: (e.add(e.shl(e.shr(lane, 4), 3), l8), e.and_(q, 1)),       # (n0,k0) (n0,k8) (n8,k0) (n8,k8)
            self.B_TRANS: (e.add(e.shl(e.and_(q, 1), 3), l8), e.shr(lane, 4)),  # (k0,n0) (k8,n0) (k0,n8) (k8,n8)
        }

    def base(self, tile: SwizzledTile, kind: str, row0=None):
        """The lane's base address; `row0`: a runtime row offset, a multiple of 8."""
        e = self.e
        lane_row, lane_chunk = self.lanes[kind]
        row = lane_row if row0 is None else e.add(lane_row, row0)
        return self.smem.address(tile.chunk_address(e, row, lane_chunk, 0, tile.swizzle(e, lane_row)))

    def at_slot(self, base, slot_offset):
        if isinstance(slot_offset, int) and slot_offset == 0:
            return base
        return self.e.add(base, slot_offset)

    def k_group_base(self, tile: SwizzledTile, base, group, steps: int):
        """The base for k16 steps [steps*group, steps*(group+1)) (group: runtime i32),
        so that step steps*group + u reads as step u (u < steps, steps | chunks_per_row/2)."""
        e = self.e
        chunk0 = e.mul(group, 2 * steps)
        c0 = e.shl(e.and_(chunk0, tile.chunks_per_row - 1), 4)
        page = e.shr(chunk0, tile.chunks_per_row.bit_length() - 1)
        return e.add(e.xor(base, c0), e.mul(page, tile.page_bytes))

    def _x4(self, tile: SwizzledTile, base, row0: int, chunk0: int, trans: bool):
        page, c0 = divmod(chunk0, tile.chunks_per_row)
        offset = tile.offset + page * tile.page_bytes + row0 * tile.row_bytes
        addr = base if c0 == 0 else self.e.xor(base, c0 << 4)
        return self.ldsm.x4(addr, offset, trans=trans)

    def a_operand(self, tile, base, m_atom: int, k_step: int, atom_rows: int = 16):
        """`atom_rows`: the rows from one of the warp's 16-row tiles to its next."""
        return self._x4(tile, base, atom_rows * m_atom, 2 * k_step, False)

    def b_operand(self, tile, base, n_pair: int, k_step: int):
        return self._x4(tile, base, 16 * n_pair, 2 * k_step, False)

    def b_operand_trans(self, tile, base, n_pair: int, k_step: int):
        return self._x4(tile, base, 16 * k_step, 2 * n_pair, True)
