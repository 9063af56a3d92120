"""The sm_90a forward kernel: sm80.py's kernel with its two GEMMs on wgmma.

Everything but the GEMMs is the sm_80 kernel's: the CTA's cp.async loads into the
swizzled tiles (sm80_tiles.py), the K/V stages and their waits, the mask hooks, the
online softmax and the epilogue. `num_warps` warps form num_warps/4 warpgroups of 64
query rows each; warp w still owns rows [16w, 16w + 16), which is where a wgmma m64
accumulator puts them (Note [wgmma accumulators] in nvgpu_builders.py), so the
softmax and the masks see the registers they see on sm_80 with one m16 tile per warp.

Note [wgmma operands]: the swizzled tile layout of sm80_tiles.py -- pages of rows x W
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

Note [wgmma steps]: each GEMM is issued as one group and waited for at once (wait_group
0): QK^T (head_dim_qk/16 instructions of m64 x block_n x k16), the softmax, then P.V
(block_n/16 of m64 x head_dim_v x k16). Overlap between a warpgroup's GEMMs and its
own softmax comes from the other warpgroups of the SM, not from the schedule: this
kernel is not yet FA3's producer/consumer one (TMA into an mbarrier ring, ping-pong
between consumer warpgroups) that attn-warp-specialize plans for sm_90a.
"""
from __future__ import annotations

from attnc.backend.nvgpu_builders import Wgmma
from attnc.backend.sm80 import _Sm80Forward

WARPGROUP_ROWS = 64


class Sm90Forward(_Sm80Forward):
    """Emits the sm_90a kernel body at the current insertion point."""

    def __init__(self, spec, args):
        super().__init__(spec, args)
        self.wgmma = Wgmma(self.e, spec.dtype)

    def _coordinates(self) -> None:
        super()._coordinates()
        e = self.e
        warpgroup = e.shr(self.warp, 2)
        q_rows = e.mul(warpgroup, WARPGROUP_ROWS * self.q_tile.row_bytes)
        self.q_desc = self._desc(self.q_tile, 0, q_rows)

    def _desc(self, tile, slot, rows_offset=0, leading_bytes: int = 16):
        """The descriptor of `tile` in K/V slot `slot` (bytes), `rows_offset` bytes in
        (Note [wgmma operands]); K-major operands ignore the leading byte offset."""
        e = self.e
        addr = self.smem.address(e.add(e.add(e.c32(tile.offset), slot), rows_offset))
        return self.wgmma.descriptor(addr, tile.row_bytes, leading_bytes, 8 * tile.row_bytes)

    def _k_major_step(self, desc, tile, kk: int):
        """The descriptor of k16 step kk of a K-major tile."""
        page, within = divmod(kk, tile.page_width // 16)
        return self.wgmma.advance(desc, page * tile.page_bytes + within * 32)

    def _qk(self, slot):
        s, mma = self.spec, self.wgmma
        k_desc = self._desc(self.k_tile, slot)
        acc = None
        mma.fence()
        for kk in range(s.head_dim_qk // 16):
            acc = mma.mma(acc, s.block_n, self._k_major_step(k_desc, self.k_tile, kk),
                          a_desc=self._k_major_step(self.q_desc, self.q_tile, kk))
        mma.commit()
        return self._unflatten(mma.wait(acc), s.block_n // 8)

    def _pv(self, p, acc_o, slot):
        s, mma, tile = self.spec, self.wgmma, self.v_tile
        v_desc = self._desc(tile, slot, leading_bytes=tile.page_bytes)
        acc = self._flat(acc_o)
        mma.fence()
        for kk in range(s.block_n // 16):
            acc = mma.mma(acc, s.head_dim_v, mma.advance(v_desc, kk * 16 * tile.row_bytes),
                          a_regs=p[0][kk], trans_b=True)
        mma.commit()
        return self._unflatten(mma.wait(acc))
