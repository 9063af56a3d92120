"""Tensor memory: allocation, tcgen05.ld/st fragments, tcgen05.mma kind::f16 and tcgen05.cp.

Each test names the PTX ISA section (tcgen05 chapter, 9.7.16) it follows.
"""
import numpy as np
import pytest

from attnc_sim import tmem as tm
from attnc_sim.smem_desc import SmemDesc, Swizzle, write_matrix
from attnc_sim.tmem import InstrDesc, TensorMemory, TmemError


def bf16_bits(x):
    """Round-to-nearest-even float32 -> bf16 bit patterns."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def read_32x32b(t, addr_col, ncols, rows=128):
    """D as a warp group reads it with tcgen05.ld.32x32b.x<ncols>: warp w, thread i, register j."""
    out = np.zeros((rows, ncols), np.float32)
    for w in range(rows // 32):
        lanes, cols = tm.ld_st_cells("32x32b", ncols, w, tm.address(32 * w, addr_col))
        out[32 * w:32 * w + 32] = t.cells[lanes, cols].view(np.float32)
    return out


# allocation (9.7.16.7.1 tcgen05.alloc / dealloc / relinquish_alloc_permit) ----------------

def test_alloc_power_of_two_columns_aligned():
    """Allocations are powers of 2 of at least 32 columns; the address is lane 0, a column."""
    t = TensorMemory()
    assert t.try_alloc(32) == tm.address(0, 0)
    assert t.try_alloc(128) == tm.address(0, 128)
    assert t.try_alloc(64) == tm.address(0, 64)
    assert t.try_alloc(256) == tm.address(0, 256)
    assert t.try_alloc(32) == tm.address(0, 32)
    assert t.try_alloc(32) is None                      # full: the allocating warp waits
    t.dealloc(tm.address(0, 128), 128)
    assert t.try_alloc(128) == tm.address(0, 128)


def test_alloc_rules():
    t = TensorMemory()
    for bad in (16, 48, 1024):
        with pytest.raises(TmemError, match=f"alloc of {bad} columns: the count must be a power of 2 from 32 to 512"):
            t.try_alloc(bad)
    addr = t.try_alloc(512)
    with pytest.raises(TmemError, match=r"dealloc of 256 columns at lane 0 column 0 matches no allocation \(held: 512 at column 0\)"):
        t.dealloc(addr, 256)
    assert t.leaks() == [(0, 512)]
    t.dealloc(addr, 512)
    assert t.leaks() == []
    t.relinquish()
    with pytest.raises(TmemError, match="alloc after tcgen05.relinquish_alloc_permit"):
        t.try_alloc(32)


# tcgen05.ld / st fragments (9.7.16.2.3.1 Matrix fragments) -----------------------------

def test_32x32b_thread_is_lane_register_is_column():
    """32x32b: thread t of warp w reaches lane 32 * (w % 4) + t; register j is column base + j."""
    lanes, cols = tm.ld_st_cells("32x32b", 4, 6, tm.address(64, 40))
    assert lanes.shape == (32, 4)
    np.testing.assert_array_equal(lanes, np.repeat(np.arange(64, 96)[:, None], 4, 1))
    np.testing.assert_array_equal(cols, np.tile(np.arange(40, 44), (32, 1)))


def test_16x256b_is_the_mma_accumulator_pattern():
    """16x256b: 16 lanes x 8 columns per repetition; thread t's registers 4i..4i+3 are (t/4, c),
    (t/4, c+1), (t/4+8, c), (t/4+8, c+1) with c = 2(t%4) + 8i."""
    lanes, cols = tm.ld_st_cells("16x256b", 2, 1, tm.address(48, 0))
    for t in range(32):
        for r in range(8):
            i, v = divmod(r, 4)
            assert lanes[t, r] == 48 + t // 4 + 8 * (v // 2)
            assert cols[t, r] == 2 * (t % 4) + v % 2 + 8 * i


def test_16x128b_and_16x64b_fragments():
    """16x128b: registers 2i, 2i+1 are lanes t/4 and t/4+8 at column t%4 + 4i. 16x64b: register
    i is lane t/4 + 8 (t%2) at column (t/2)%2 + 2i."""
    lanes, cols = tm.ld_st_cells("16x128b", 2, 0, 0)
    for t in range(32):
        assert list(lanes[t]) == [t // 4, t // 4 + 8] * 2
        assert list(cols[t]) == [t % 4, t % 4, t % 4 + 4, t % 4 + 4]
    lanes, cols = tm.ld_st_cells("16x64b", 2, 0, 0)
    for t in range(32):
        assert list(lanes[t]) == [t // 4 + 8 * (t % 2)] * 2
        assert list(cols[t]) == [(t // 2) % 2, (t // 2) % 2 + 2]


def test_16x32bx2_half_split():
    """16x32bx2: threads 0-15 reach lanes 0-15 at the address's column, threads 16-31 the same
    lanes at column + immHalfSplitoff; register j adds j columns."""
    lanes, cols = tm.ld_st_cells("16x32bx2", 2, 3, tm.address(96 + 16, 8), half_split=64)
    np.testing.assert_array_equal(lanes[:, 0], 112 + np.arange(32) % 16)
    np.testing.assert_array_equal(cols[:16], np.tile([8, 9], (16, 1)))
    np.testing.assert_array_equal(cols[16:], np.tile([72, 73], (16, 1)))


@pytest.mark.parametrize("shape,lanes,span", [("32x32b", 32, 1), ("16x64b", 16, 2), ("16x128b", 16, 4),
                                              ("16x256b", 16, 8)])
@pytest.mark.parametrize("num", [1, 4, 32])
def test_each_shape_covers_its_block_once(shape, lanes, span, num):
    """A warp's access is `lanes` lanes x (span * num) columns, each cell exactly once."""
    ls, cs = tm.ld_st_cells(shape, num, 0, 0)
    assert ls.shape[1] == tm.registers_per_thread(shape, num)
    cells = set(zip(ls.ravel().tolist(), cs.ravel().tolist()))
    assert len(cells) == ls.size == lanes * span * num
    assert cells == {(l, c) for l in range(lanes) for c in range(span * num)}


def test_ld_st_rules():
    """A warp reaches only its quarter (warp id % 4); .num is a power of 2 up to the shape's max."""
    with pytest.raises(TmemError, match=r"warp 5 reaches lanes 32-63 only \(warp id % 4 = 1\); "
                                        r"tcgen05.ld/st.32x32b at lane 0 touches lanes 0-31"):
        tm.ld_st_cells("32x32b", 1, 5, 0)
    with pytest.raises(TmemError, match="touches lanes 24-39"):
        tm.ld_st_cells("16x64b", 1, 0, tm.address(24, 0))
    with pytest.raises(TmemError, match=r"16x256b takes .num x1 to x32 \(powers of 2\), not x64"):
        tm.ld_st_cells("16x256b", 64, 0, 0)
    with pytest.raises(TmemError, match="has no shape 16x512b"):
        tm.ld_st_cells("16x512b", 1, 0, 0)


# instruction descriptor (9.7.16.4.2) -------------------------------------------------------

def test_instruction_descriptor_fields():
    """dtype bits 4-5, atype 7-9, btype 10-12, negate 13/14, transpose 15/16, N>>3 at 17, M>>4 at 24."""
    value = 1 << 4 | 1 << 7 | 1 << 10 | 1 << 14 | 1 << 16 | (256 >> 3) << 17 | (128 >> 4) << 24
    d = InstrDesc.decode(value)
    assert d == InstrDesc(m=128, n=256, a_type="bf16", b_type="bf16", negate_b=True, b_mn_major=True)
    assert d.encode() == value
    with pytest.raises(TmemError, match="sparse MMA is not modelled"):
        InstrDesc.decode(value | 1 << 2)
    with pytest.raises(TmemError, match="sets a reserved bit"):
        InstrDesc.decode(value | 1 << 23)
    with pytest.raises(TmemError, match="no shape M=128 N=24"):
        InstrDesc(m=128, n=24).check()
    InstrDesc(m=64, n=24).check()


# tcgen05.mma kind::f16 (9.7.16.10.9) --------------------------------------------------------

def mma_setup(m, n, seed, a_swizzle=Swizzle.B128, b_swizzle=Swizzle.B128, b_major="K"):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, 16)).astype(np.float16)
    b = rng.standard_normal((n, 16)).astype(np.float16)       # B as N rows of K
    smem = np.zeros(96 * 1024, np.uint8)
    a_desc = SmemDesc(start=0, lbo=16, sbo=1024, swizzle=a_swizzle)
    if a_swizzle is Swizzle.NONE:
        a_desc = SmemDesc(start=0, lbo=m * 16, sbo=128)
    write_matrix(smem, a_desc, a, "K")
    if b_major == "K":
        b_desc = SmemDesc(start=32768, lbo=16, sbo=1024, swizzle=b_swizzle)
    else:                                   # N-major 128B: atoms of 64 N x 8 K, 1024 bytes each
        b_desc = SmemDesc(start=32768, lbo=1024 * 2, sbo=1024, swizzle=b_swizzle)
    write_matrix(smem, b_desc, b, b_major)
    return a, b, smem, a_desc, b_desc


def test_mma_row_r_of_d_in_lane_r():
    """M=128: D = A B lands with row r in lane r, column n at the address's column + n; read
    back by four warps with tcgen05.ld.32x32b it is A @ B^T."""
    a, b, smem, a_desc, b_desc = mma_setup(128, 64, 0)
    t = TensorMemory()
    d = t.try_alloc(128)
    idesc = InstrDesc(m=128, n=64)
    tm.mma_f16(t, smem, d + 32, a_desc, b_desc, idesc, accumulate=False)
    expected = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(read_32x32b(t, 32, 64), expected, rtol=1e-6, atol=1e-6)


def test_mma_accumulate_flag():
    """enable-input-d true adds to D; false overwrites whatever D held."""
    a, b, smem, a_desc, b_desc = mma_setup(128, 32, 1, Swizzle.NONE)
    t = TensorMemory()
    t.try_alloc(32)
    t.cells[:, :32] = np.float32(1000.0).view(np.uint32)
    idesc = InstrDesc(m=128, n=32)
    expected = a.astype(np.float64) @ b.astype(np.float64).T
    tm.mma_f16(t, smem, 0, a_desc, b_desc, idesc, accumulate=False)
    np.testing.assert_allclose(read_32x32b(t, 0, 32), expected, rtol=1e-6, atol=1e-6)
    tm.mma_f16(t, smem, 0, a_desc, b_desc, idesc, accumulate=True)
    np.testing.assert_allclose(read_32x32b(t, 0, 32), 2 * expected, rtol=1e-6, atol=1e-5)


def test_alloc_hands_out_stale_columns():
    """Note [Stale tensor memory]: tcgen05.alloc does not clear its columns; every allocation
    (the first one and one after a dealloc) fills them with STALE, NaN as an f32 and as both
    16-bit halves, and leaves the other columns alone."""
    t = TensorMemory()
    first = t.try_alloc(64)
    assert (t.cells[:, :64] == tm.STALE).all() and not t.cells[:, 64:].any()
    t.cells[:, :64] = 7
    second = t.try_alloc(32)
    assert (t.cells[:, 64:96] == tm.STALE).all() and (t.cells[:, :64] == 7).all()
    t.dealloc(first, 64)
    assert t.try_alloc(64) == first and (t.cells[:, :64] == tm.STALE).all() and (t.cells[:, 64:96] == tm.STALE).all()
    assert np.isnan(t.cells[:1, :1].view(np.float32)).all() and np.isnan(t.cells[:1, :1].view(np.float16)).all()
    t.dealloc(second, 32)


def test_mma_m64_uses_sixteen_lanes_per_quarter():
    """M=64: row r in lane 32 (r // 16) + r % 16; each warp reads its 16 rows with 16x256b."""
    a, b, smem, a_desc, b_desc = mma_setup(64, 16, 2)
    t = TensorMemory()
    t.try_alloc(32)
    tm.mma_f16(t, smem, 0, a_desc, b_desc, InstrDesc(m=64, n=16), accumulate=False)
    expected = (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float32)
    for w in range(4):
        lanes, cols = tm.ld_st_cells("16x256b", 2, w, tm.address(32 * w, 0))
        got = t.cells[lanes, cols].view(np.float32)
        for th in range(32):
            for r in range(8):
                row = 16 * w + lanes[th, r] - 32 * w
                assert got[th, r] == expected[row, cols[th, r]]
    assert (t.cells[16:32, :32] == tm.STALE).all() and (t.cells[48:64, :32] == tm.STALE).all()


def test_mma_bf16_negate_and_n_major_b():
    """atype/btype bf16, negate A, and B transposed (N-major, 128B swizzle)."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 16)).astype(np.float32)
    b = rng.standard_normal((128, 16)).astype(np.float32)
    a_bits, b_bits = bf16_bits(a), bf16_bits(b)
    smem = np.zeros(96 * 1024, np.uint8)
    a_desc = SmemDesc(start=0, lbo=16, sbo=1024, swizzle=Swizzle.B128)
    b_desc = SmemDesc(start=32768, lbo=2048, sbo=1024, swizzle=Swizzle.B128)
    write_matrix(smem, a_desc, a_bits, "K")
    write_matrix(smem, b_desc, b_bits, "MN")
    t = TensorMemory()
    t.try_alloc(128)
    idesc = InstrDesc(m=128, n=128, a_type="bf16", b_type="bf16", negate_a=True, b_mn_major=True)
    tm.mma_f16(t, smem, 0, a_desc, b_desc, InstrDesc.decode(idesc.encode()), accumulate=False)
    a_val = (a_bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    b_val = (b_bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    np.testing.assert_allclose(read_32x32b(t, 0, 128), -(a_val @ b_val.T), rtol=1e-6, atol=1e-5)


def test_mma_a_from_tensor_memory():
    """A in TMEM: row m in lane m, two 16-bit elements per column (lower K in the low half),
    written with tcgen05.st.32x32b.x8 by four warps."""
    a, b, smem, _, b_desc = mma_setup(128, 32, 5)
    t = TensorMemory()
    t.try_alloc(64)
    words = a.view(np.uint16).astype(np.uint32)
    packed = words[:, 0::2] | words[:, 1::2] << 16                 # 128 x 8 columns
    for w in range(4):
        lanes, cols = tm.ld_st_cells("32x32b", 8, w, tm.address(32 * w, 32))
        t.cells[lanes, cols] = packed[32 * w:32 * w + 32]
    tm.mma_f16(t, smem, 0, tm.address(0, 32), b_desc, InstrDesc(m=128, n=32), accumulate=False)
    expected = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(read_32x32b(t, 0, 32), expected, rtol=1e-6, atol=1e-6)


def test_mma_rules():
    """D and A must lie in allocated columns; M=128's D starts at lane 0."""
    a, b, smem, a_desc, b_desc = mma_setup(128, 64, 6)
    t = TensorMemory()
    t.try_alloc(32)
    with pytest.raises(TmemError, match="tcgen05.mma's D touches column 32, which is not allocated"):
        tm.mma_f16(t, smem, 0, a_desc, b_desc, InstrDesc(m=128, n=64), accumulate=False)
    with pytest.raises(TmemError, match="with M=128 must start at lane 0, not lane 32"):
        tm.mma_f16(t, smem, tm.address(32, 0), a_desc, b_desc, InstrDesc(m=128, n=16), accumulate=False)


# tcgen05.cp (9.7.16.9.1) -------------------------------------------------------------------

def cp_source(rows, cols, seed):
    words = np.random.default_rng(seed).integers(0, 2**32, (rows, cols), dtype=np.uint64).astype(np.uint32)
    smem = np.zeros(16384, np.uint8)
    desc = SmemDesc(start=1024, lbo=rows * 16, sbo=128)           # 8-row core matrices
    write_matrix(smem, desc, words, "K")
    return words, smem, desc


def test_cp_128x256b_row_to_lane():
    """128x256b: source row r (256 bits) lands in lane r, 8 columns from the address's column."""
    words, smem, desc = cp_source(128, 8, 7)
    t = TensorMemory()
    t.try_alloc(32)
    tm.cp(t, smem, tm.address(0, 8), desc, "128x256b")
    np.testing.assert_array_equal(t.cells[:, 8:16], words)
    assert (t.cells[:, :8] == tm.STALE).all() and (t.cells[:, 16:32] == tm.STALE).all()
    assert not t.cells[:, 32:].any()            # never allocated


def test_cp_multicast():
    """32x128b.warpx4 copies the 32 rows into every quarter; 64x128b.warpx2::02_13 puts rows
    0-31 in quarters 0 and 2 and rows 32-63 in quarters 1 and 3; ::01_23 in 0, 1 and 2, 3."""
    words, smem, desc = cp_source(32, 4, 8)
    t = TensorMemory()
    t.try_alloc(32)
    tm.cp(t, smem, 0, desc, "32x128b", "warpx4")
    for q in range(4):
        np.testing.assert_array_equal(t.cells[32 * q:32 * q + 32, :4], words)
    words, smem, desc = cp_source(64, 4, 9)
    tm.cp(t, smem, 0, desc, "64x128b", "warpx2::02_13")
    for q, half in enumerate([0, 1, 0, 1]):
        np.testing.assert_array_equal(t.cells[32 * q:32 * q + 32, :4], words[32 * half:32 * half + 32])
    tm.cp(t, smem, 0, desc, "64x128b", "warpx2::01_23")
    for q, half in enumerate([0, 0, 1, 1]):
        np.testing.assert_array_equal(t.cells[32 * q:32 * q + 32, :4], words[32 * half:32 * half + 32])
    with pytest.raises(TmemError, match=r"tcgen05.cp.64x128b takes warpx2::01_23 or warpx2::02_13, not no multicast"):
        tm.cp(t, smem, 0, desc, "64x128b")
