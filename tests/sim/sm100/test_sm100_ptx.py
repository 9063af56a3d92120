"""Spec tests of the sm_100a instructions: small hand-written PTX kernels (ptx/) that the emulator
runs as a launch does, each checking a behaviour the PTX ISA documents (the section is named in
the test), and planted-bug kernels (ptx/bug_*.ptx) the emulator must report, with the right kind
and PTX line, rather than run quietly or hang.

Section numbers are those of the PTX ISA 8.7/8.8 text: 9.7.16 is "TensorCore 5th Generation
Family Instructions" (tcgen05), 9.7.9.25 "Data Movement and Conversion Instructions: bulk and
tensor copies", 5.5 "Tensor Objects" (tensor maps).
"""
import numpy as np
import pytest

import sm100_harness as h
from attnc_sim import tma, tmem
from attnc_sim.smem_desc import SmemDesc, Swizzle, encode_tcgen05, write_matrix

F64 = np.float64


def line_of(name: str, statement: str) -> tuple[int, str]:
    """(1-based line, statement text) of the one line of kernel `name` holding `statement`."""
    lines = [(i + 1, ln.strip().rstrip(";")) for i, ln in enumerate((h.PTX / name).read_text().splitlines())
             if statement in ln and not ln.lstrip().startswith("//")]
    assert len(lines) == 1, (name, statement, lines)
    return lines[0]


def at_line(name: str, statement: str) -> str:
    line, text = line_of(name, statement)
    return f"PTX line {line}: {text.split('//')[0].strip().rstrip(';')}"


# tcgen05.mma, tcgen05.commit, tcgen05.ld.32x32b -------------------------------------------

A_DESC = SmemDesc(start=4096, lbo=16, sbo=1024, swizzle=Swizzle.B128)      # 128 rows of K = 16
B1_DESC = SmemDesc(start=20480, lbo=16, sbo=1024, swizzle=Swizzle.B128)
B2_DESC = SmemDesc(start=22528, lbo=16, sbo=1024, swizzle=Swizzle.B128)
B_TS = SmemDesc(start=4096, lbo=16, sbo=1024, swizzle=Swizzle.B128)


def mma_launch(kernel="mma_ld_32x32b.ptx", accumulate=0, seed=0, early=0.0, data_seed=0):
    rng = np.random.default_rng(data_seed)
    a = rng.standard_normal((128, 16)).astype(np.float16)
    b1, b2 = (rng.standard_normal((16, 16)).astype(np.float16) for _ in range(2))
    img, n = h.image(24576, lambda s: write_matrix(s, A_DESC, a, "K"), lambda s: write_matrix(s, B1_DESC, b1, "K"),
                     lambda s: write_matrix(s, B2_DESC, b2, "K"))
    mem = h.Memory()
    out = mem.zeros(128 * 16)
    params = dict(img=mem.place(img), img_bytes=n, out=out, a_desc=encode_tcgen05(A_DESC),
                  b1_desc=encode_tcgen05(B1_DESC), b2_desc=encode_tcgen05(B2_DESC),
                  idesc=tmem.InstrDesc(m=128, n=16).encode(), accumulate=accumulate)
    expected = a.astype(F64) @ (b1.astype(F64) + b2.astype(F64)).T + accumulate
    return mem, out, params, expected


@pytest.mark.parametrize("accumulate", [0, 1])
def test_mma_rows_of_d_land_in_lanes_and_enable_input_d(accumulate):
    """tcgen05.mma kind::f16 (9.7.16.10.9) computes D = A x B, plus D when enable-input-d is
    true; with M = 128 (cta_group::1) row r of D is in TMEM lane r (9.7.16.10.5 "Data path
    layout organization", layout D), so tcgen05.ld.32x32b (9.7.16.2.3.1.1) gives thread t of
    warp w row 32w + t, register j column j. D was pre-filled with 1.0 by tcgen05.st: the first
    MMA keeps it only with enable-input-d. tcgen05.commit (9.7.16.12.1) makes the MMAs' results
    visible once its mbarrier phase completes; tcgen05.alloc writes the address to shared memory."""
    mem, out, params, expected = mma_launch(accumulate=accumulate)
    launch, cta = h.run("mma_ld_32x32b.ptx", 128, params, mem, seed=3, early=0.3)
    got = mem.get_array(out, (128, 16), np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)
    assert launch.reports == []
    assert cta.__dict__["sm100"].tmem.leaks() == []


@pytest.mark.parametrize("seed", range(4))
def test_mma_result_independent_of_schedule(seed):
    """Whatever order the warps run in and the asynchronous operations complete in (within the
    ISA's guarantees), the kernel computes the same D and nothing is reported."""
    mem, out, params, expected = mma_launch(seed=seed, data_seed=seed)
    launch, _ = h.run("mma_ld_32x32b.ptx", 128, params, mem, seed=seed, early=0.5)
    np.testing.assert_allclose(mem.get_array(out, (128, 16), np.float32), expected, rtol=1e-6, atol=1e-5)
    assert launch.reports == []


def ts_launch(kernel):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    words = a.view(np.uint16).astype(np.uint32)
    packed = (words[:, 0::2] | words[:, 1::2] << 16).astype(np.uint32)     # lower k in the low half
    img, n = h.image(6144, lambda s: write_matrix(s, B_TS, b, "K"))
    mem = h.Memory()
    out = mem.zeros(128 * 16)
    params = dict(img=mem.place(img), img_bytes=n, a_rows=mem.place(packed), out=out,
                  b_desc=encode_tcgen05(B_TS), idesc=tmem.InstrDesc(m=128, n=16).encode())
    launch, _ = h.run(kernel, 128, params, mem, seed=1, early=0.3 if "bug" not in kernel else 0.0)
    return launch, mem.get_array(out, (128, 16), np.float32), a.astype(F64) @ b.astype(F64).T


def test_mma_with_a_in_tensor_memory():
    """tcgen05.mma [d], [a], b_desc (9.7.16.10.9: A may be in tensor memory, 9.7.16.10.5): A as
    tcgen05.st.32x32b (9.7.16.8.4) wrote it, row r in lane r, two 16-bit elements per column with
    the lower k in the low half; after tcgen05.wait::st (9.7.16.8.5) and a barrier the MMA reads it."""
    launch, got, expected = ts_launch("st_mma_ts.ptx")
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)
    assert launch.reports == []


# tcgen05.ld / tcgen05.st shapes ------------------------------------------------------------
# Which cell of tensor memory thread t's register i reaches (the fragments of 9.7.16.2.3.1, as
# CUTLASS's SM100_TMEM_LOAD_* copy traits lay them out), relative to the address's lane and
# column; `split` is 16x32bx2's immHalfSplitoff.

def fragment(shape: str, t: int, i: int, split: int = 0) -> tuple[int, int]:
    if shape == "32x32b":
        return t, i
    if shape == "16x64b":                      # one register per .num, two columns per repetition
        return t // 4 + 8 * (t % 2), 2 * i + (t // 2) % 2
    if shape == "16x128b":                     # two registers (rows r, r + 8) per .num, 4 columns
        return t // 4 + 8 * (i % 2), 4 * (i // 2) + t % 4
    if shape == "16x256b":                     # four registers per .num, 8 columns
        k = i % 4
        return t // 4 + 8 * (k // 2), 8 * (i // 4) + 2 * (t % 4) + k % 2
    assert shape == "16x32bx2"                 # half-warps: the second at +split columns
    return t % 16, i + (split if t >= 16 else 0)


def regs(first: int, count: int) -> str:
    return "{" + ", ".join(f"%r{first + i}" for i in range(count)) + "}"


SHAPES = [("32x32b", 1, 0), ("32x32b", 32, 0), ("16x64b", 2, 0), ("16x64b", 16, 16), ("16x128b", 1, 0),
          ("16x128b", 8, 16), ("16x256b", 1, 0), ("16x256b", 4, 16), ("16x32bx2", 2, 0), ("16x32bx2", 16, 0)]
PER_NUM = {"32x32b": 1, "16x64b": 1, "16x128b": 2, "16x256b": 4, "16x32bx2": 1}


def shape_op(op: str, shape: str, num: int, first: int) -> tuple[str, int]:
    """A tcgen05.ld / st line of `shape`.x`num` and 16x32bx2's split (half the columns)."""
    n = PER_NUM[shape] * num
    split = num if shape == "16x32bx2" else 0
    imm = f", {split}" if split else ""
    addr = "[%r69]" if op == "ld" else "[%r68]"
    if op == "ld":
        return f"tcgen05.ld.sync.aligned.{shape}.x{num}.b32 {regs(first, n)}, {addr}{imm};", split
    return f"tcgen05.st.sync.aligned.{shape}.x{num}.b32 {addr}{imm}, {regs(first, n)};", split


def shape_launch(store: str, load: str, src: np.ndarray, st_lane=0, ld_lane=0):
    mem = h.Memory()
    out = mem.zeros(128 * 32)
    text = h.kernel_text("ld_st_shape.ptx", STORE=store, LOAD=load)
    launch, _ = h.run("ld_st_shape.ptx", 128, dict(src=mem.place(src), out=out, st_lane=st_lane, ld_lane=ld_lane),
                      mem, text=text, seed=2, early=0.3)
    assert launch.reports == []
    return mem.get_array(out, (128, 32), np.uint32)


@pytest.mark.parametrize("shape,num,lane", SHAPES)
def test_tcgen05_ld_fragment(shape, num, lane):
    """tcgen05.ld.<shape>.x<num> (9.7.16.8.3; fragments 9.7.16.2.3.1): tensor memory holds each
    cell's own address (lane << 16 | column, written by tcgen05.st.32x32b.x32); thread t of warp
    w finds in register i the cell the fragment figure puts there, in its warp's lanes from the
    address's lane (`lane`), with .num repeating the pattern along the columns."""
    cells = np.array([[(lane_ << 16) | col for col in range(32)] for lane_ in range(128)], np.uint32)
    store, _ = shape_op("st", "32x32b", 32, 0)
    load, split = shape_op("ld", shape, num, 32)
    got = shape_launch(store, load, cells, ld_lane=lane)
    for w in range(4):
        for t in range(32):
            for i in range(PER_NUM[shape] * num):
                row, col = fragment(shape, t, i, split)
                assert got[32 * w + t, i] == ((32 * w + lane + row) << 16 | col), (w, t, i)


@pytest.mark.parametrize("shape,num,lane", SHAPES)
def test_tcgen05_st_fragment(shape, num, lane):
    """tcgen05.st.<shape>.x<num> (9.7.16.8.4) writes register i of thread t to the cell of the
    same fragment; read back with tcgen05.ld.32x32b.x32, every cell holds the (warp, thread,
    register) that maps to it and the cells no register maps to keep what the allocation left
    there (Note [Stale tensor memory] in attnc_sim/tmem.py)."""
    values = (np.arange(128)[:, None] * 64 + np.arange(32)[None, :] + 1).astype(np.uint32)
    store, split = shape_op("st", shape, num, 0)
    load, _ = shape_op("ld", "32x32b", 32, 32)
    got = shape_launch(store, load, values, st_lane=lane)
    expected = np.full((128, 32), tmem.STALE, np.uint32)
    for w in range(4):
        for t in range(32):
            for i in range(PER_NUM[shape] * num):
                row, col = fragment(shape, t, i, split)
                expected[32 * w + lane + row, col] = values[32 * w + t, i]
    np.testing.assert_array_equal(got, expected)


def test_ld_outside_the_warps_lanes_is_an_error():
    """A warp reaches only the 32 lanes of its quarter, warp id % 4 (9.7.16.8.1 "Access
    restrictions"): 16x64b at lane offset 24 would touch lanes 24..39 of warp 0's quarter."""
    store, _ = shape_op("st", "32x32b", 32, 0)
    load, _ = shape_op("ld", "16x64b", 1, 32)
    with pytest.raises(h.SimError) as caught:
        shape_launch(store, load, np.zeros((128, 32), np.uint32), ld_lane=24)
    w = int(str(caught.value).split("warp ")[1].split(":")[0])       # the first warp to get there
    lane = 32 * w + 24
    assert str(caught.value) == (
        f"CTA (0, 0, 0) warp {w}: warp {w} reaches lanes {32 * w}-{32 * w + 31} only (warp id % 4 = {w}); "
        f"tcgen05.ld/st.16x64b at lane {lane} touches lanes {lane}-{lane + 15} at "
        f"PTX line 81: {load.rstrip(';')}")


# tcgen05.cp ----------------------------------------------------------------------------------

CP_CASES = [
    ("128x256b", 128, 8, lambda lane: lane),
    ("128x128b", 128, 4, lambda lane: lane),
    ("4x256b", 4, 8, lambda lane: lane),
    ("32x128b.warpx4", 32, 4, lambda lane: lane % 32),
    ("64x128b.warpx2::02_13", 64, 4, lambda lane: lane % 32 + 32 * ((lane // 32) % 2)),
    ("64x128b.warpx2::01_23", 64, 4, lambda lane: lane % 32 + 32 * (lane // 64)),
]


@pytest.mark.parametrize("qualifiers,rows,cols,lanes_of", CP_CASES)
def test_tcgen05_cp(qualifiers, rows, cols, lanes_of):
    """tcgen05.cp (9.7.16.9.1) copies a rows x (cols x 32 bit) matrix from shared memory (read
    through its descriptor, 9.7.16.4.1) into tensor memory, row r in lane r; .warpx4 copies the
    32 rows to each warp's quarter, .warpx2::02_13 rows 0-31 to quarters 0 and 2 and rows 32-63
    to 1 and 3, .warpx2::01_23 rows 0-31 to quarters 0 and 1 (9.7.16.2.3 "Data Movement Shape").
    The commit that tracks it arrives after it landed; the cells it does not reach keep what
    the allocation left there."""
    desc = SmemDesc(start=4096, lbo=128, sbo=256, swizzle=Swizzle.NONE)
    matrix = (np.arange(rows)[:, None] * 100 + np.arange(cols)[None, :] + 1).astype(np.uint32)
    img, n = h.image(4096 + 256 * 16, lambda s: write_matrix(s, desc, matrix, "K"))
    mem = h.Memory()
    out = mem.zeros(128 * 8)
    text = h.kernel_text("cp.ptx", CP=qualifiers)
    launch, _ = h.run("cp.ptx", 128, dict(img=mem.place(img), img_bytes=n, out=out, s_desc=encode_tcgen05(desc)),
                      mem, text=text, seed=4, early=0.3)
    got = mem.get_array(out, (128, 8), np.uint32)
    expected = np.full((128, 8), tmem.STALE, np.uint32)     # Note [Stale tensor memory]
    reached = 128 if "warpx" in qualifiers else rows
    for lane in range(reached):
        expected[lane, :cols] = matrix[lanes_of(lane)]
    np.testing.assert_array_equal(got, expected)
    assert launch.reports == []


# allocation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_alloc_blocks_until_columns_are_free(seed):
    """tcgen05.alloc (9.7.16.7.1) writes the address of its columns (lane 0) to shared memory;
    two live allocations never overlap; an allocation the free columns cannot hold blocks until
    a tcgen05.dealloc frees them (here all 512 columns, after warp 0 frees its 32 + 64)."""
    mem = h.Memory()
    out = mem.zeros(4)
    launch, cta = h.run("alloc.ptx", 64, dict(out=out), mem, seed=seed, early=0.3)
    first, second, whole = (tmem.split(int(v)) for v in mem.get_array(out, (3,), np.uint32))
    assert first[0] == second[0] == whole[0] == 0
    assert first[1] + 32 <= second[1] or second[1] + 64 <= first[1]
    assert whole == (0, 0)
    assert launch.reports == [] and cta.__dict__["sm100"].tmem.leaks() == []


def test_alloc_after_relinquish_is_an_error():
    """tcgen05.relinquish_alloc_permit (9.7.16.7.1): no thread of the CTA may allocate after it."""
    text = (h.PTX / "alloc.ptx").read_text().replace(
        "  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [smem+4], 64;\n",
        "  tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n"
        "  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [smem+4], 64;\n")
    mem = h.Memory()
    with pytest.raises(h.SimError, match="tcgen05.alloc after tcgen05.relinquish_alloc_permit"):
        h.run("alloc.ptx", 64, dict(out=mem.zeros(4)), mem, text=text)


# TMA and bulk copies -------------------------------------------------------------------------

def tma_load_launch(box_bytes=64 * 16 * 2, y=32):
    mem = h.Memory()
    src = np.arange(40 * 64, dtype=np.float16).reshape(40, 64)
    tmap = tma.TensorMap(tma.DataType.FLOAT16, mem.place(src), (64, 40), (128,), (64, 16), swizzle=tma.TmaSwizzle.B128)
    out = mem.zeros(512)
    return mem, src, out, dict(tmap=tmap.pack(), x=0, y=y, box_bytes=box_bytes, out=out)


def test_tma_load_swizzled_box_lands_where_the_swizzle_says():
    """cp.async.bulk.tensor.2d load (9.7.9.25.5.2) with a 128B-swizzled tensor map (5.5.6
    "Tensor swizzling modes"): row n of the box, 16-byte chunk c, lands at chunk c ^ (n % 8) of
    its 128-byte row; rows past the tensor's 40 are filled with zeros (5.5.4 "Out of bounds
    access"); the bytes count toward the mbarrier's transaction count, so the phase completes
    only once the box landed (9.7.13.15.2 "mbarrier: expect-tx and complete-tx")."""
    mem, src, out, params = tma_load_launch()
    launch, _ = h.run("tma_load.ptx", 32, params, mem, seed=5, early=0.3)
    got = mem.get_array(out, (16, 128), np.uint8)
    for n in range(16):
        row = src[32 + n] if 32 + n < 40 else np.zeros(64, np.float16)
        for c in range(8):
            chunk = got[n, 16 * (c ^ (n % 8)):][:16].view(np.float16)
            np.testing.assert_array_equal(chunk, row[8 * c:8 * c + 8])
    assert launch.reports == []


def test_a_tensor_map_named_by_its_parameter_is_refused_as_ptxas_refuses_it():
    """ptxas takes the tensor map's generic address in a register (cvta.param of the
    parameter's), not the parameter's name: "state space mismatch"."""
    text = (h.PTX / "tma_load.ptx").read_text().replace("[%tm, {%r1, %r2}]", "[tmap, {%r1, %r2}]")
    mem, _, _, params = tma_load_launch()
    with pytest.raises(Exception) as err:
        h.run("tma_load.ptx", 32, params, mem, text=text)
    assert "the tensor map is a register holding its generic address" in str(err.value)


def test_tma_coordinates_in_an_inline_asm_scope():
    """The coordinates of `[%tm, {%r1, %r2}]` are the registers of the enclosing scope: inside
    `{ .reg .b32 %r1, %r2; ... }` (as inline asm emits it) they are the scope's, not the
    kernel's %r1, %r2 (which stay 0 here, and would load rows 0..15)."""
    text = (h.PTX / "tma_load.ptx").read_text()
    first, last = "  ld.param.u32 %r1, [x];\n", "[%tm, {%r1, %r2}], [smem+8];\n"
    i, j = text.index(first), text.index(last) + len(last)
    text = text[:i] + "  {\n  .reg .b32 %r1, %r2;\n" + text[i:j] + "  }\n" + text[j:]
    mem, src, out, params = tma_load_launch()
    launch, _ = h.run("tma_load.ptx", 32, params, mem, text=text)
    got = mem.get_array(out, (16, 128), np.uint8)
    np.testing.assert_array_equal(got[0, :16].view(np.float16), src[32, :8])
    assert launch.reports == []


def test_tma_load_with_too_small_expect_tx_is_reported():
    """An mbarrier must not receive more transaction bytes than expected (9.7.13.15.2): arming it
    for 1024 bytes and loading a 2048-byte box is an mbarrier error at the copy's PTX line."""
    mem, _, _, params = tma_load_launch(box_bytes=1024)
    launch, _ = h.run("tma_load.ptx", 32, params, mem)
    assert [r.kind for r in launch.reports] == ["mbarrier"]
    assert launch.reports[0].message == "mbarrier at shared 0x8: 1024 more transaction bytes completed than expected"
    assert launch.reports[0].where == at_line("tma_load.ptx", "cp.async.bulk.tensor.2d")


def tma_store_launch(kernel, **kw):
    mem = h.Memory()
    base = mem.place(np.full((20, 32), -1, np.float32))
    tmap = tma.TensorMap(tma.DataType.FLOAT32, base, (32, 20), (128,), (32, 8))
    box = np.arange(256, dtype=np.float32).reshape(8, 32)
    img, n = h.image(2048, lambda s: s.__setitem__(slice(1024, 2048), box.view(np.uint8).reshape(-1)))
    launch, cta = h.run(kernel, 32, dict(tmap=tmap.pack(), x=0, y=16, img=mem.place(img), img_bytes=n), mem, **kw)
    return launch, cta, mem.get_array(base, (20, 32), np.float32), box


def test_tma_store_is_clipped_and_its_source_free_after_wait_group_read():
    """cp.async.bulk.tensor.2d store in a bulk group (9.7.9.25.5.2): the box at rows 16..23 of a
    20-row tensor writes rows 16..19 only (5.5.4); after cp.async.bulk.commit_group and
    cp.async.bulk.wait_group.read 0 (9.7.9.25.6.1, 9.7.9.25.6.2) its shared source may be
    overwritten: nothing is reported, and global memory holds the box as it was."""
    launch, cta, tensor, box = tma_store_launch("tma_store.ptx")
    expected = np.full((20, 32), -1, np.float32)
    expected[16:20] = box[:4]
    np.testing.assert_array_equal(tensor, expected)
    assert launch.reports == []
    assert not cta.smem[1024:2048].any()


def test_bulk_copy_round_trip():
    """cp.async.bulk global -> shared with complete_tx on an mbarrier, then shared -> global in a
    bulk group waited with cp.async.bulk.wait_group 0 (9.7.9.25.4.1, 9.7.9.25.6.2)."""
    mem = h.Memory()
    data = np.random.default_rng(3).integers(0, 2**32, 128, dtype=np.uint32)
    dst = mem.zeros(128)
    launch, _ = h.run("bulk_copy.ptx", 32, dict(src=mem.place(data), dst=dst, nbytes=512), mem, seed=1, early=0.3)
    np.testing.assert_array_equal(mem.get_array(dst, (128,), np.uint32), data)
    assert launch.reports == []


def test_bulk_instructions_are_handled_by_this_family():
    """No other family registers a handler that would shadow the bulk copies' (the registry
    refuses two handlers for one prefix; a longer one elsewhere would win silently)."""
    import attnc_sim.families  # noqa: F401
    from attnc_sim import isa
    from attnc_sim.ptx import Instruction
    for opcode in ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                   "cp.async.bulk.global.shared::cta.bulk_group", "cp.async.bulk.commit_group",
                   "cp.async.bulk.wait_group.read", "elect.sync"):
        factory = isa.lookup(Instruction(opcode, (), None, 1, opcode))
        assert factory.__module__ == "attnc_sim.isa_bulk", opcode


# elect.sync ----------------------------------------------------------------------------------

@pytest.mark.parametrize("active,members", [(1 << 5 | 1 << 9 | 1 << 30, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
                                            (0xF0F0, 0xF0F0)])
def test_elect_sync_one_leader(active, members):
    """elect.sync d|p, membermask (9.7.13.12 "elect.sync"): exactly one leader among the active
    member lanes, p true in it only, d its lane id in every participating lane; the same leader
    for the same mask (the emulator picks the lowest)."""
    mem = h.Memory()
    out = mem.zeros(64)
    launch, _ = h.run("elect.ptx", 32, dict(active=active, members=members, out=out), mem)
    got = mem.get_array(out, (32, 2), np.uint32)
    lanes = [i for i in range(32) if active >> i & 1]
    leader = min(i for i in lanes if members >> i & 1)
    for i in range(32):
        assert tuple(got[i]) == ((leader, int(i == leader)) if i in lanes else (0xFFFFFFFF, 0)), i


# planted bugs --------------------------------------------------------------------------------

def test_planted_missing_wait_ld_is_reported_at_the_read():
    """PLANTED BUG: the registers of tcgen05.ld are read with no tcgen05.wait::ld (9.7.16.8.5:
    they are valid only after it). Each warp's first read is reported, naming the load."""
    mem, _, params, _ = mma_launch()
    launch, _ = h.run("bug_missing_wait_ld.ptx", 128, params, mem)
    ld = at_line("bug_missing_wait_ld.ptx", "tcgen05.ld.sync.aligned.32x32b.x16")
    assert sorted(r.warp for r in launch.reports) == [f"CTA (0, 0, 0) warp {w}" for w in range(4)]
    for r in launch.reports:
        assert r.kind == "read-before-complete"
        assert r.where == at_line("bug_missing_wait_ld.ptx", "st.global.v4.b32 [%rd5], {%r16")
        assert r.message == f"reads %r16 before the asynchronous operation writing it completed (issued at {ld})"


def test_planted_ld_before_commit_is_reported():
    """PLANTED BUG: the warps read D with tcgen05.ld before the commit of the MMAs that write it
    arrived (9.7.16.6: the MMA's results are visible once the commit's mbarrier phase completes);
    warp 0 then frees the columns the MMAs still write. Nothing orders the loads and the MMAs
    either way (Note [tcgen05 fences]): whichever of the two comes second is a 'tcgen05-fence'
    report."""
    mem, _, params, _ = mma_launch()
    launch, _ = h.run("bug_ld_before_commit.ptx", 128, params, mem)
    first = next(r for r in launch.reports if r.kind == "read-before-complete")
    unordered = {r.where for r in launch.reports if r.kind == "tcgen05-fence"}
    assert unordered and unordered <= {at_line("bug_ld_before_commit.ptx", s) for s in (
        "tcgen05.ld.sync.aligned.32x32b.x16", "tcgen05.mma.cta_group::1.kind::f16 [%r9], %rd2, %rd3",
        "tcgen05.mma.cta_group::1.kind::f16 [%r9], %rd2, %rd4")}
    assert first.message == ("tcgen05.ld reads tensor memory an in-flight tcgen05.mma or tcgen05.cp still "
                             "writes (its tcgen05.commit not yet observed)")
    assert first.where == at_line("bug_ld_before_commit.ptx", "tcgen05.ld.sync.aligned.32x32b.x16")
    dealloc = [r for r in launch.reports if r.where == at_line("bug_ld_before_commit.ptx", "tcgen05.dealloc")]
    assert [r.kind for r in dealloc] == ["write-while-read"]


def test_planted_arrival_count_one_short_is_reported_not_hung():
    """PLANTED BUG: tmem_free expects 5 arrivals and gets 4 (9.7.13.15: a phase completes when
    the pending arrival count reaches zero). Warp 0 would wait forever; the emulator reports the
    deadlock with the mbarrier's pending count and the waiting PTX line, and stops."""
    mem, _, params, _ = mma_launch()
    launch, error = h.run_until_error("bug_arrive_one_short.ptx", 128, params, mem)
    wait = at_line("bug_arrive_one_short.ptx", "mbarrier.try_wait.parity.shared::cta.b64 %p7")
    assert [r.kind for r in launch.reports] == ["deadlock"]
    assert "warp 0 waits for mbarrier at shared 0x10 (parity 0, 1 arrivals and 0 tx bytes pending)" in launch.reports[0].message
    assert launch.reports[0].message.endswith(f"at {wait}")
    assert str(error).startswith("deadlock in CTA (0, 0, 0): warp 0 waits for mbarrier at shared 0x10")


def test_planted_tmem_not_deallocated_is_reported_at_exit():
    """PLANTED BUG: the kernel never deallocates its tensor memory (9.7.16.7.1: all of it must be
    deallocated before the kernel exits); the engine's exit check reports it with the line of
    the tcgen05.alloc."""
    mem, _, params, _ = mma_launch()
    launch, _ = h.run("bug_tmem_leak.ptx", 128, params, mem)
    alloc = at_line("bug_tmem_leak.ptx", "tcgen05.alloc")
    assert [(r.kind, r.where, r.message) for r in launch.reports] == [
        ("tensor-memory", "CTA (0, 0, 0) at exit",
         f"32 tensor-memory columns from column 0 are still allocated when the CTA exits (allocated at {alloc})")]


def test_planted_mma_before_wait_st_is_reported():
    """PLANTED BUG: the MMA reads A that the warps' tcgen05.st have not finished writing: no
    tcgen05.wait::st before the barrier (9.7.16.8.5)."""
    launch, _, _ = ts_launch("bug_mma_before_wait_st.ptx")
    first = launch.reports[0]
    assert (first.kind, first.where) == ("read-before-complete", at_line("bug_mma_before_wait_st.ptx", "tcgen05.mma.cta_group"))
    assert first.message == "tcgen05.mma reads tensor memory a tcgen05.st has not finished (no tcgen05.wait::st)"


def test_planted_store_source_overwritten_is_reported():
    """PLANTED BUG: the box in shared memory is overwritten with no cp.async.bulk.wait_group.read
    after the bulk store that reads it (9.7.9.25.6.2)."""
    launch, _, _, _ = tma_store_launch("bug_store_overwritten.ptx")
    first = launch.reports[0]
    assert (first.kind, first.where) == ("write-while-read", at_line("bug_store_overwritten.ptx",
                                                                     "st.shared.v4.b32 [%r9], {"))
    assert first.message == "writes shared byte 0x400 that an in-flight asynchronous operation still reads"
