"""Shared-memory matrix descriptors: the bit fields, the swizzles and the matrix an MMA reads.

The expected addresses here are written from the layout figures of the PTX ISA, "Shared Memory
Matrix Layout" (wgmma, 9.7.15.5.1.2, figures of K-major and MN-major tiles for each swizzle
mode) and tcgen05's "Shared Memory Descriptor" (9.7.16.4.1), not from the canonical CuTe
formulas `smem_desc` uses: an operand is a grid of swizzle atoms, an atom is 8 rows of `W`
bytes (W = 16, 32, 64, 128), and in row `r` of an atom the 16-byte chunk `c` sits at position
`c XOR ((r * W / 128) mod (W / 16))`.
"""
import numpy as np
import pytest

from attnc_sim.smem_desc import (DescriptorError, SmemDesc, Swizzle, decode_tcgen05, decode_wgmma,
                                 encode_tcgen05, encode_wgmma, read_matrix, swizzle_address,
                                 write_matrix)

SWIZZLES = [Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128]


def figure_address(start, r, k, itemsize, major, width, lbo, sbo):
    """Byte address of element (r = M/N index, k = K index) from the ISA's atom figures.

    K-major: an atom is 8 M rows x `width` bytes of K; atoms step by SBO along M and (unswizzled
    only, where an atom is one 16-byte chunk wide) by LBO along K. MN-major: an atom is 8 K rows x
    `width` bytes of M; atoms step by SBO along K, and along M by LBO when swizzled, by SBO when
    not (the unswizzled MN-major layout swaps the two offsets' roles).
    """
    chunks = width // 16
    if major == "K":
        atom_row, byte_in_row = r % 8, k * itemsize
        atom_start = (r // 8) * sbo
        if width == 16:
            atom_start += (byte_in_row // 16) * lbo
            byte_in_row %= 16
    else:
        atom_row, byte_in_row = k % 8, (r * itemsize) % width
        along_mn, along_k = (lbo, sbo) if width > 16 else (sbo, lbo)
        atom_start = (k // 8) * along_k + (r * itemsize // width) * along_mn
    chunk, within = divmod(byte_in_row, 16)
    position = chunk ^ ((atom_row * width // 128) % chunks)
    return start + atom_start + atom_row * width + position * 16 + within


def lay_out(smem, start, matrix, major, width, lbo, sbo):
    rows, cols = matrix.shape
    size = matrix.itemsize
    for r in range(rows):
        for k in range(cols):
            a = figure_address(start, r, k, size, major, width, lbo, sbo)
            smem[a:a + size] = np.frombuffer(matrix[r, k].tobytes(), np.uint8)


def test_wgmma_descriptor_fields():
    """PTX ISA 9.7.15.5.1.2.2 Matrix Descriptor Format: start 0-13, LBO 16-29, SBO 32-45,
    base offset 49-51, swizzle 62-63 with 1 = 128B, 2 = 64B, 3 = 32B; addresses are >> 4."""
    value = (0x4A0 >> 4) | (32 >> 4) << 16 | (1024 >> 4) << 32 | 5 << 49 | 1 << 62
    desc = decode_wgmma(value)
    assert desc == SmemDesc(start=0x4A0, lbo=32, sbo=1024, base_offset=5, swizzle=Swizzle.B128)
    assert encode_wgmma(desc) == value
    assert decode_wgmma(3 << 62).swizzle is Swizzle.B32
    assert decode_wgmma(2 << 62).swizzle is Swizzle.B64


def test_tcgen05_descriptor_fields():
    """PTX ISA 9.7.16.4.1 Shared Memory Descriptor: bits 46-48 hold 0b001, swizzle in 61-63
    (0 none, 1 128B with 32B atoms, 2 128B, 4 64B, 6 32B), LBO mode in bit 52."""
    value = (0x8000 >> 4) | (16 >> 4) << 16 | (1024 >> 4) << 32 | 1 << 46 | 2 << 61
    desc = decode_tcgen05(value)
    assert desc == SmemDesc(start=0x8000, lbo=16, sbo=1024, swizzle=Swizzle.B128)
    assert encode_tcgen05(desc) == value
    expected = {1: Swizzle.B128_ATOM32, 4: Swizzle.B64, 6: Swizzle.B32, 0: Swizzle.NONE}
    for code, mode in expected.items():
        assert decode_tcgen05(1 << 46 | code << 61).swizzle is mode
    assert decode_tcgen05(1 << 46 | 1 << 52).lbo_absolute


def test_tcgen05_descriptor_rejects_bad_fields():
    """The fixed constant (46-48 = 0b001), the zero field 53-60 and the invalid modes 3, 5, 7."""
    with pytest.raises(DescriptorError, match=r"bits 46-48 are 0b000, must be the constant 0b001"):
        decode_tcgen05(0)
    with pytest.raises(DescriptorError, match="bits 53-60 must be zero"):
        decode_tcgen05(1 << 46 | 1 << 55)
    for code in (3, 5, 7):
        with pytest.raises(DescriptorError, match=f"swizzle mode {code} is invalid"):
            decode_tcgen05(1 << 46 | code << 61)


def test_swizzle_128b_pattern():
    """128B swizzle: in the n-th 128-byte row of a 1024-byte pattern, chunk c moves to c ^ n."""
    for n in range(8):
        for c in range(8):
            assert swizzle_address(2048 + n * 128 + c * 16 + 3, Swizzle.B128) == 2048 + n * 128 + (c ^ n) * 16 + 3


def test_swizzle_32b_and_64b_patterns():
    """32B: rows 4-7 of each 256-byte pattern swap their two chunks; 64B: chunk c of row n of a
    512-byte pattern sits at c ^ (n // 2)."""
    assert [swizzle_address(r * 32, Swizzle.B32) for r in range(8)] == [0, 32, 64, 96, 144, 176, 208, 240]
    assert [swizzle_address(r * 64 + 16, Swizzle.B64) // 16 for r in range(8)] == [
        r * 4 + (1 ^ (r // 2)) for r in range(8)]


def test_swizzle_128b_32b_atoms():
    """128B swizzle with 32B atomicity permutes 32-byte units: unit u of row n goes to u ^ (n % 4)."""
    for n in range(8):
        for u in range(4):
            assert swizzle_address(n * 128 + u * 32 + 17, Swizzle.B128_ATOM32) == n * 128 + (u ^ (n % 4)) * 32 + 17


@pytest.mark.parametrize("swizzle", SWIZZLES, ids=lambda s: s.name)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.uint8], ids=lambda d: np.dtype(d).name)
def test_k_major_read_matches_figures(swizzle, dtype):
    """K-major operand of 64 rows and one MMA's K (32 bytes: f16 K=16, tf32 K=8, 8-bit K=32)."""
    itemsize = np.dtype(dtype).itemsize
    rows, cols = 64, 32 // itemsize
    width = swizzle.width
    lbo, sbo = (64 * 16, 128) if swizzle is Swizzle.NONE else (0, 8 * width)
    matrix = np.random.default_rng(1).integers(0, 250, (rows, cols)).astype(dtype)
    smem = np.zeros(16384, np.uint8)
    lay_out(smem, 1024, matrix, "K", width, lbo, sbo)
    desc = SmemDesc(start=1024, lbo=lbo, sbo=sbo, swizzle=swizzle)
    np.testing.assert_array_equal(read_matrix(smem, desc, rows, cols, dtype, "K"), matrix)
    fresh = np.zeros_like(smem)
    write_matrix(fresh, desc, matrix, "K")
    np.testing.assert_array_equal(fresh, smem)


@pytest.mark.parametrize("swizzle", SWIZZLES, ids=lambda s: s.name)
@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=lambda d: np.dtype(d).name)
def test_mn_major_read_matches_figures(swizzle, dtype):
    """MN-major operand: 128 M/N rows by K = 16 (two 8-row K groups)."""
    itemsize = np.dtype(dtype).itemsize
    rows, cols = 128, 16
    width = swizzle.width
    if swizzle is Swizzle.NONE:        # core matrices 128 bytes apart along M/N, then along K
        lbo, sbo = rows * itemsize // 16 * 128, 128
    else:                              # atoms 8 * width apart along M/N, then along K
        lbo, sbo = 8 * width, 8 * width * (rows * itemsize // width)
    matrix = np.random.default_rng(2).standard_normal((rows, cols)).astype(dtype)
    smem = np.zeros(32768, np.uint8)
    lay_out(smem, 2048, matrix, "MN", width, lbo, sbo)
    desc = SmemDesc(start=2048, lbo=lbo, sbo=sbo, swizzle=swizzle)
    np.testing.assert_array_equal(read_matrix(smem, desc, rows, cols, dtype, "MN"), matrix)


def test_k_step_inside_128b_row():
    """Stepping K by one MMA inside a 128B-swizzled tile moves the start address by 32 bytes; the
    swizzle on absolute addresses then reads columns 16-31 of a 64-wide f16 tile."""
    tile = np.arange(128 * 64, dtype=np.float16).reshape(128, 64)
    smem = np.zeros(32768, np.uint8)
    lay_out(smem, 0, tile, "K", 128, 0, 1024)
    for step in range(4):
        desc = SmemDesc(start=step * 32, lbo=0, sbo=1024, swizzle=Swizzle.B128)
        got = read_matrix(smem, desc, 128, 16, np.float16, "K")
        np.testing.assert_array_equal(got, tile[:, step * 16:(step + 1) * 16])


def test_base_offset_for_pattern_off_its_boundary():
    """A 128B pattern starting 384 bytes past a 1024-byte boundary needs base offset
    (start >> 7) & 7 = 3; with it the operand reads back as laid out from its own start."""
    tile = np.arange(8 * 64, dtype=np.float16).reshape(8, 64)
    smem = np.zeros(8192, np.uint8)
    start = 1024 + 384
    for r in range(8):
        for k in range(64):
            chunk = (k * 2) // 16
            a = start + r * 128 + (chunk ^ r) * 16 + (k * 2) % 16
            smem[a:a + 2] = np.frombuffer(tile[r, k].tobytes(), np.uint8)
    desc = SmemDesc(start=start, lbo=0, sbo=1024, base_offset=3, swizzle=Swizzle.B128)
    np.testing.assert_array_equal(read_matrix(smem, desc, 8, 16, np.float16, "K"), tile[:, :16])


def test_layout_errors():
    """A swizzled K-major operand cannot hold more K than one row; reads stay inside shared memory."""
    smem = np.zeros(1024, np.uint8)
    with pytest.raises(DescriptorError, match="K-major B32 operand holds at most 32 bytes of K, not 64"):
        read_matrix(smem, SmemDesc(0, 0, 256, swizzle=Swizzle.B32), 8, 32, np.float16, "K")
    with pytest.raises(DescriptorError, match="reaches shared address 0x800, past the 0x400 bytes"):
        read_matrix(smem, SmemDesc(0, 0, 1024, swizzle=Swizzle.B128), 16, 64, np.float16, "K")
    with pytest.raises(DescriptorError, match="sm_103a only"):
        read_matrix(smem, SmemDesc(0, 16, 128, lbo_absolute=True), 8, 8, np.float16, "K")
