"""Spec tests of the sm_100a instructions: small hand-written PTX kernels (ptx/) run by the
emulator's engine, each checking a behaviour the PTX ISA documents; and planted-bug kernels
(ptx/bug_*.ptx) the emulator must report rather than run quietly or hang.

The kernels load their inputs with the harness's `harness.set` (sm100_harness.py); mbarriers
are recording stand-ins, so these tests check what the sm_100a instructions deliver to an
mbarrier (arrivals, transaction bytes), not the mbarrier's phase rules.
"""
import numpy as np
import pytest

import sm100_harness as h
from attnc_sim import tma, tmem
from attnc_sim.errors import SimError
from attnc_sim.smem_desc import SmemDesc, Swizzle, encode_tcgen05, write_matrix
from attnc_sim.state import GlobalMemory

A_AT, B_AT, MBAR = 4096, 32768, 64         # A: 128 rows of 128 bytes (128B swizzle)
D_REGS = [f"%r{i}" for i in range(8, 24)]


def mma_inputs(n=16, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((128, 16)).astype(np.float16)
    b = rng.standard_normal((n, 16)).astype(np.float16)
    a_desc = SmemDesc(start=A_AT, lbo=16, sbo=1024, swizzle=Swizzle.B128)
    b_desc = SmemDesc(start=B_AT, lbo=16, sbo=1024, swizzle=Swizzle.B128)

    def setup(cta):
        write_matrix(cta.smem, a_desc, a, "K")
        write_matrix(cta.smem, b_desc, b, "K")
    values = {"%r0": h.const(0), "%r1": h.const(tmem.InstrDesc(m=128, n=n).encode()), "%r2": h.const(MBAR),
              "%r4": h.const(0), "%r5": lambda w: np.full(32, (32 * w) << 16, np.uint32),
              "%rd0": h.const(encode_tcgen05(a_desc), np.uint64), "%rd1": h.const(encode_tcgen05(b_desc), np.uint64),
              "%p0": h.lane_is(0, 0), "%p1": h.const(False, bool), "%p2": lambda w: np.full(32, w == 0)}
    return a, b, values, setup


def test_mma_rows_of_d_land_in_lanes():
    """tcgen05.mma (9.7.16.10.9) then tcgen05.ld.32x32b (9.7.16.8.3, Matrix fragments for
    .32x32b): D = A x B with row r of D in TMEM lane r, so thread t of warp w reads row 32w + t,
    register j column j. tcgen05.alloc writes the address to shared memory; the commit arrives
    once on its mbarrier (9.7.16.12.1)."""
    a, b, values, setup = mma_inputs()
    launch, cta, bars = h.run("mma_ld_32x32b.ptx", 128, values, mbarriers=[MBAR], setup=setup, seed=3, early=0.3)
    expected = (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float32)
    for w in range(4):
        got = h.registers(cta, launch, D_REGS, w).view(np.float32)
        np.testing.assert_allclose(got, expected[32 * w:32 * w + 32], rtol=1e-6, atol=1e-6)
    assert cta.smem[:4].view(np.uint32)[0] == 0
    assert len(bars[MBAR].arrivals) == 1
    assert launch.reports == []
    assert cta.__dict__["sm100"].tmem.leaks() == []


@pytest.mark.parametrize("seed", range(4))
def test_mma_result_independent_of_schedule(seed):
    """Whatever order the scheduler completes the asynchronous operations in, the rows agree."""
    a, b, values, setup = mma_inputs(seed=seed)
    launch, cta, _ = h.run("mma_ld_32x32b.ptx", 128, values, mbarriers=[MBAR], setup=setup, seed=seed, early=0.5)
    got = np.vstack([h.registers(cta, launch, D_REGS, w) for w in range(4)]).view(np.float32)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64).T, rtol=1e-6, atol=1e-6)
    assert launch.reports == []


def test_planted_ld_before_commit_is_reported():
    """PLANTED BUG: the warps read D with tcgen05.ld before the commit of the MMA that writes it
    arrived (9.7.16.6.4: the MMA's results are visible after the commit's mbarrier completes)."""
    _, _, values, setup = mma_inputs()
    launch, _, _ = h.run("bug_ld_before_commit.ptx", 128, values, mbarriers=[MBAR], setup=setup)
    assert [r.kind for r in launch.reports][:1] == ["read-before-complete"]
    first = launch.reports[0]
    assert "tcgen05.ld reads tensor memory an in-flight tcgen05.mma" in first.message
    assert "PTX line 31: tcgen05.ld.sync.aligned.32x32b.x16.b32" in first.where


def test_planted_missing_wait_ld_leaves_registers_pending():
    """PLANTED BUG: registers of a tcgen05.ld read with no tcgen05.wait::ld (9.7.16.8.5: the
    destination registers are valid after wait::ld). The emulator keeps them in the warp's
    pending registers until the load completes; with the fix they are not pending."""
    _, _, values, setup = mma_inputs()
    _, bug, _ = h.run("bug_missing_wait_ld.ptx", 128, values, mbarriers=[MBAR], setup=setup)
    assert bug.__dict__["harness_use"] == {0: True, 1: True, 2: True, 3: True}


def test_a_from_tensor_memory_after_st():
    """tcgen05.st.32x32b.x8 (9.7.16.8.4) writes A into TMEM (two f16 per column, lower K in the
    low half); after tcgen05.wait::st and a barrier, tcgen05.mma [d], [a_tmem], b_desc computes
    D = A x B (9.7.16.10.9: A may come from tensor memory)."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    b_desc = SmemDesc(start=B_AT, lbo=16, sbo=1024, swizzle=Swizzle.B128)
    words = a.view(np.uint16).astype(np.uint32)
    packed = (words[:, 0::2] | words[:, 1::2] << 16).astype(np.uint32)
    values = {"%r0": h.const(0), "%r1": h.const(tmem.InstrDesc(m=128, n=16).encode()), "%r2": h.const(MBAR),
              "%r4": h.const(0), "%r5": lambda w: np.full(32, (32 * w) << 16, np.uint32),
              "%r6": lambda w: np.full(32, (32 * w) << 16 | 32, np.uint32), "%r7": h.const(32),
              "%rd1": h.const(encode_tcgen05(b_desc), np.uint64), "%p0": h.lane_is(0, 0),
              "%p1": h.const(False, bool), "%p2": lambda w: np.full(32, w == 0)}
    for j in range(8):
        values[f"%r{8 + j}"] = lambda w, j=j: packed[32 * w:32 * w + 32, j]
    setup = lambda cta: write_matrix(cta.smem, b_desc, b, "K")  # noqa: E731
    launch, cta, _ = h.run("st_mma_ts.ptx", 128, values, mbarriers=[MBAR], setup=setup, seed=1, early=0.3)
    got = np.vstack([h.registers(cta, launch, [f"%r{i}" for i in range(16, 32)], w) for w in range(4)])
    np.testing.assert_allclose(got.view(np.float32), a.astype(np.float64) @ b.astype(np.float64).T,
                               rtol=1e-6, atol=1e-6)
    assert launch.reports == []
    bug, _, _ = h.run("bug_mma_before_wait_st.ptx", 128, values, mbarriers=[MBAR], setup=setup)
    assert bug.reports and bug.reports[0].kind == "read-before-complete"
    assert "tcgen05.mma reads tensor memory a tcgen05.st has not finished (no tcgen05.wait::st)" in bug.reports[0].message


def tensor_map_param(tmap):
    return tmap.pack()


def test_tma_load_swizzled_box_lands_where_the_swizzle_says():
    """cp.async.bulk.tensor (9.7.9.25.5.2) with a 128B-swizzled tensor map (5.5.6): row n of the
    box, chunk c lands at chunk c ^ (n % 8) of its 128-byte row; the mbarrier receives
    complete_tx of the whole box (out-of-bounds rows filled with zeros count too)."""
    memory = GlobalMemory()
    src = np.arange(40 * 64, dtype=np.float16).reshape(40, 64)
    base = memory.alloc(src.nbytes)
    memory.put(base, src)
    tmap = tma.TensorMap(tma.DataType.FLOAT16, base, (64, 40), (128,), (64, 16), swizzle=tma.TmaSwizzle.B128)
    values = {"%r0": h.const(2048), "%r1": h.const(MBAR), "%r2": h.const(0), "%r3": h.const(32),
              "%p0": h.lane_is(0, 0)}
    launch, cta, bars = h.run("tma_load.ptx", 32, values, mbarriers=[MBAR], params=tensor_map_param(tmap),
                              memory=memory)
    assert bars[MBAR].tx == 64 * 16 * 2
    for n in range(16):
        row = src[32 + n] if 32 + n < 40 else np.zeros(64, np.float16)
        for c in range(8):
            at = 2048 + n * 128 + (c ^ (n % 8)) * 16
            np.testing.assert_array_equal(cta.smem[at:at + 16].view(np.float16), row[8 * c:8 * c + 8])
    assert launch.reports == []


def test_tma_store_complete_at_wait_group():
    """cp.async.bulk.tensor store with .bulk_group (9.7.9.25.5.2) and cp.async.bulk.wait_group.read
    (9.7.9.25.6.2): after the wait the box is in global memory, clipped to the tensor."""
    memory = GlobalMemory()
    base = memory.alloc(20 * 32 * 4)
    memory.put(base, np.full((20, 32), -1, np.float32))
    tmap = tma.TensorMap(tma.DataType.FLOAT32, base, (32, 20), (128,), (32, 8))
    box = np.arange(256, dtype=np.float32).reshape(8, 32)
    values = {"%r0": h.const(1024), "%r2": h.const(0), "%r3": h.const(16), "%p0": h.lane_is(0, 0)}
    setup = lambda cta: cta.smem.__setitem__(slice(1024, 2048), box.view(np.uint8).reshape(-1))  # noqa: E731
    launch, cta, _ = h.run("tma_store.ptx", 32, values, params=tmap.pack(), memory=memory, setup=setup)
    at = base - GlobalMemory.BASE
    snapshot = cta.__dict__["harness_mark"][at:at + 20 * 32 * 4].view(np.float32).reshape(20, 32)
    expected = np.full((20, 32), -1, np.float32)
    expected[16:20] = box[:4]
    np.testing.assert_array_equal(snapshot, expected)


def test_elect_sync_picks_the_lowest_active_lane():
    """elect.sync d|p, membermask (9.7.13.x elect.sync): one leader among the active member lanes;
    every participating lane gets its lane id in d, and p is true in the leader only."""
    active = np.zeros(32, bool)
    active[[5, 9, 30]] = True
    launch, cta, _ = h.run("elect.ptx", 32, {"%p1": lambda w: active})
    w = cta.warps[0]
    r0 = w.b32[launch.program.layout.rows["%r0"][1]]
    p0 = w.pred[launch.program.layout.rows["%p0"][1]]
    assert (r0[active] == 5).all() and (r0[~active] == 0).all()
    assert list(np.flatnonzero(p0)) == [5]


def test_alloc_after_relinquish_is_an_error():
    """tcgen05.relinquish_alloc_permit (9.7.16.7.1): the CTA may not allocate again."""
    a, b, values, setup = mma_inputs()
    module_text = (h.PTX / "mma_ld_32x32b.ptx").read_text()
    extra = module_text.replace("  harness.bar;\n  tcgen05.fence::after_thread_sync;\n  @%p0",
                                "  @%p2 tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r0], 64;\n"
                                "  harness.bar;\n  tcgen05.fence::after_thread_sync;\n  @%p0", 1)
    path = h.PTX.parent / "generated_relinquish.ptx"
    (h.PTX / "generated_relinquish.ptx").write_text(extra)
    try:
        with pytest.raises(SimError, match="tcgen05.alloc after tcgen05.relinquish_alloc_permit"):
            h.run("generated_relinquish.ptx", 128, values, mbarriers=[MBAR], setup=setup)
    finally:
        (h.PTX / "generated_relinquish.ptx").unlink()
    del path
