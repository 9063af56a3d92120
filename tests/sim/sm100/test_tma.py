"""Tensor maps and TMA tile copies.

Rules from the CUDA driver API's cuTensorMapEncodeTiled (Tensor Map Object Management) and the
PTX ISA's cp.async.bulk.tensor (9.7.9.25.5.2) with its "Tensor" chapter (5.5: bounding box,
traversal stride, out-of-bound access filled with zero or NaN, swizzling modes 5.5.6).
"""
import numpy as np
import pytest

from attnc_sim import tma
from attnc_sim.smem_desc import SmemDesc, Swizzle, read_matrix
from attnc_sim.tma import DataType, OobFill, TensorMap, TmaError, TmaSwizzle

BASE = 0x7000_0000


class FlatMemory:
    """Global memory as one byte array starting at BASE."""

    def __init__(self, array: np.ndarray):
        self.bytes = np.frombuffer(np.ascontiguousarray(array).tobytes(), np.uint8).copy()

    def read(self, addresses, itemsize):
        return self.bytes[(addresses - BASE)[:, None] + np.arange(itemsize)]

    def write(self, addresses, data):
        self.bytes[(addresses - BASE)[:, None] + np.arange(data.shape[1])] = data

    def view(self, dtype, shape):
        return self.bytes.view(dtype).reshape(shape)


def matrix_map(rows, cols, box, dtype=DataType.FLOAT16, **kw):
    itemsize = dtype.itemsize
    return TensorMap(dtype, BASE, (cols, rows), (cols * itemsize,), box, **kw)


def test_load_box_lands_dense():
    """An unswizzled box lands densely, innermost dimension fastest."""
    a = np.arange(40 * 96, dtype=np.float16).reshape(40, 96)
    t = matrix_map(40, 96, (64, 16))
    smem = np.zeros(8192, np.uint8)
    moved = tma.load(t, (8, 3), FlatMemory(a), smem, 1024)
    assert moved == 64 * 16 * 2 == t.box_bytes
    got = smem[1024:1024 + moved].view(np.float16).reshape(16, 64)
    np.testing.assert_array_equal(got, a[3:19, 8:72])


def test_load_out_of_bounds_fills_zero():
    """Elements outside the tensor (negative coordinates or past globalDim) are zero, and the
    copy still counts the whole box's bytes."""
    a = np.arange(1, 1 + 20 * 40, dtype=np.float32).reshape(20, 40)
    t = matrix_map(20, 40, (16, 8), DataType.FLOAT32)
    smem = np.full(4096, 0xAB, np.uint8)
    assert tma.load(t, (32, -3), FlatMemory(a), smem, 0) == 16 * 8 * 4
    got = smem[:512].view(np.float32).reshape(8, 16)
    expected = np.zeros((8, 16), np.float32)
    expected[3:, :8] = a[0:5, 32:40]
    np.testing.assert_array_equal(got, expected)


def test_load_out_of_bounds_nan_fill():
    """OOB fill NAN_REQUEST_ZERO_FMA fills with NaN; in-bound elements are copied."""
    a = np.ones((10, 16), np.float16)
    t = matrix_map(10, 16, (16, 16), oob_fill=OobFill.NAN_REQUEST_ZERO_FMA)
    smem = np.zeros(1024, np.uint8)
    tma.load(t, (0, 0), FlatMemory(a), smem, 0)
    got = smem[:512].view(np.float16).reshape(16, 16)
    assert (got[:10] == 1).all() and np.isnan(got[10:]).all()


def test_element_strides_traverse_every_nth():
    """elementStrides[i] > 1 loads ceil(boxDim[i] / elementStrides[i]) elements along i, every
    elementStrides[i]-th one; dimension 0's element stride is ignored without interleave."""
    a = np.arange(32 * 16, dtype=np.float16).reshape(32, 16)
    t = matrix_map(32, 16, (8, 7), element_strides=(4, 3))
    assert t.box_shape == (3, 8) and t.box_bytes == 3 * 8 * 2
    smem = np.zeros(1024, np.uint8)
    tma.load(t, (8, 2), FlatMemory(a), smem, 0)
    np.testing.assert_array_equal(smem[:48].view(np.float16).reshape(3, 8), a[[2, 5, 8], 8:16])


@pytest.mark.parametrize("mode,width", [(TmaSwizzle.B32, 32), (TmaSwizzle.B64, 64), (TmaSwizzle.B128, 128)])
def test_swizzled_box_lands_where_the_swizzle_says(mode, width):
    """5.5.6 Swizzling modes: in the n-th `width`-byte row of the box (shared address 1024-aligned),
    16-byte chunk c of the row sits at chunk c XOR ((n * width / 128) mod (width / 16))."""
    cols = width // 2
    a = np.random.default_rng(0).standard_normal((64, cols)).astype(np.float16)
    t = matrix_map(64, cols, (cols, 32), swizzle=mode)
    smem = np.zeros(8192, np.uint8)
    tma.load(t, (0, 16), FlatMemory(a), smem, 2048)
    for n in range(32):
        for c in range(cols):
            chunk, within = divmod(c * 2, 16)
            at = 2048 + n * width + (chunk ^ ((n * width // 128) % (width // 16))) * 16 + within
            assert smem[at:at + 2].view(np.float16)[0] == a[16 + n, c]


def test_tma_tile_reads_back_through_an_mma_descriptor():
    """A 128B-swizzled K-major tile written by TMA is the tile a tcgen05/wgmma descriptor with
    the same swizzle (SBO = 1024: 8 rows of 128 bytes) reads, for each 16-wide K step."""
    a = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float16)
    t = matrix_map(128, 64, (64, 128), swizzle=TmaSwizzle.B128)
    smem = np.zeros(32768, np.uint8)
    tma.load(t, (0, 0), FlatMemory(a), smem, 8192)
    for k in range(4):
        desc = SmemDesc(start=8192 + 32 * k, lbo=16, sbo=1024, swizzle=Swizzle.B128)
        np.testing.assert_array_equal(read_matrix(smem, desc, 128, 16, np.float16, "K"), a[:, 16 * k:16 * k + 16])


def test_store_clips_out_of_bounds():
    """A store writes only the box's elements inside the tensor; the rest of global is untouched."""
    out = np.full((20, 24), -1, np.float32)
    t = matrix_map(20, 24, (16, 8), DataType.FLOAT32, swizzle=TmaSwizzle.B64)
    box = np.arange(128, dtype=np.float32).reshape(8, 16)
    smem = np.zeros(4096, np.uint8)
    staging = TensorMap(DataType.FLOAT32, BASE, (16, 8), (64,), (16, 8), swizzle=TmaSwizzle.B64)
    tma.load(staging, (0, 0), FlatMemory(box), smem, 1024)
    memory = FlatMemory(out)
    tma.store(t, (16, 15), memory, smem, 1024)
    expected = np.full((20, 24), -1, np.float32)
    expected[15:20, 16:24] = box[:5, :8]
    np.testing.assert_array_equal(memory.view(np.float32, (20, 24)), expected)


def test_three_dim_map_with_padded_strides():
    """globalStrides carry padding: dim 1 stride 256 bytes for 100 f16 columns, dim 2 stride 4096."""
    raw = np.zeros(4 * 4096 // 2, np.float16)
    view = np.lib.stride_tricks.as_strided(raw, (4, 16, 100), (4096, 256, 2))
    view[...] = np.random.default_rng(5).standard_normal((4, 16, 100))
    t = TensorMap(DataType.FLOAT16, BASE, (100, 16, 4), (256, 4096), (32, 4, 2))
    smem = np.zeros(1024, np.uint8)
    tma.load(t, (80, 12, 2), FlatMemory(raw), smem, 0)
    got = smem[:512].view(np.float16).reshape(2, 4, 32)
    expected = np.zeros((2, 4, 32), np.float16)
    expected[:, :, :20] = view[2:4, 12:16, 80:100]
    np.testing.assert_array_equal(got, expected)


def test_pack_round_trip():
    """The 128-byte parameter object holds every field."""
    t = TensorMap(DataType.BFLOAT16, BASE + 256, (128, 333, 2), (256, 256 * 333), (64, 128, 1),
                  (1, 1, 1), swizzle=TmaSwizzle.B128, l2_promotion=2, oob_fill=OobFill.NAN_REQUEST_ZERO_FMA)
    raw = t.pack()
    assert len(raw) == 128
    assert TensorMap.unpack(raw) == t
    with pytest.raises(TmaError, match="does not hold a tensor map"):
        TensorMap.unpack(bytes(128))


@pytest.mark.parametrize("kwargs,message", [
    (dict(box=(64, 300)), r"boxDim \(64, 300\) must be non-zero and at most 256"),
    (dict(box=(12, 8)), "boxDim\\[0\\] \\* element size = 24 bytes must be a multiple of 16"),
    (dict(box=(128, 8), swizzle=TmaSwizzle.B128), "swizzle B128 requires the box's inner dimension to be at most 128 bytes, not 256"),
    (dict(box=(64, 8), element_strides=(1, 9)), r"elementStrides \(1, 9\) must be non-zero and at most 8"),
    (dict(box=(64, 8), swizzle=TmaSwizzle.B128_ATOM_64B), "swizzle B128_ATOM_64B is not modelled"),
])
def test_encode_checks(kwargs, message):
    """cuTensorMapEncodeTiled's requirements on boxDim, elementStrides and swizzle."""
    with pytest.raises(TmaError, match=message):
        matrix_map(64, 256, **kwargs)


def test_encode_checks_address_strides_and_fill():
    with pytest.raises(TmaError, match="globalAddress 0x70000008 must be 16-byte aligned"):
        TensorMap(DataType.FLOAT16, BASE + 8, (64, 8), (128,), (64, 8))
    with pytest.raises(TmaError, match=r"globalStrides \(136,\) must be multiples of 16"):
        TensorMap(DataType.FLOAT16, BASE, (68, 8), (136,), (64, 8))
    with pytest.raises(TmaError, match="NaN out-of-bounds fill needs a floating-point type, not INT32"):
        TensorMap(DataType.INT32, BASE, (64, 8), (256,), (64, 8), oob_fill=OobFill.NAN_REQUEST_ZERO_FMA)


def test_copy_checks():
    t = matrix_map(16, 64, (64, 16))
    with pytest.raises(TmaError, match="takes 2 coordinates, not 3"):
        tma.load(t, (0, 0, 0), FlatMemory(np.zeros((16, 64), np.float16)), np.zeros(4096, np.uint8), 0)
    with pytest.raises(TmaError, match="0x40 must be 128-byte aligned"):
        tma.load(t, (0, 0), FlatMemory(np.zeros((16, 64), np.float16)), np.zeros(4096, np.uint8), 64)
    with pytest.raises(TmaError, match="reaches shared address 0x800, past the 0x400 bytes"):
        tma.load(t, (0, 0), FlatMemory(np.zeros((16, 64), np.float16)), np.zeros(1024, np.uint8), 0)
