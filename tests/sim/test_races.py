"""Race and protocol reports: each planted bug must come out as its report kind, at the warp and
the PTX line that commit it, not as a hang or a silent wrong answer. Hand-written kernels
(run with `early=0`, so no asynchronous operation lands before the instruction that
guarantees it) and one edit of a real sm_80 kernel's PTX."""
from __future__ import annotations

import numpy as np

from attnc_sim.smem_desc import SmemDesc, encode_wgmma
from tests.sim.ptx_harness import kernel, line_of, run_kernel

SMEM = ".shared .align 128 .b8 smem[8192];\n.shared .align 8 .b64 bar[2];"


def _run(body: str, threads: int, nparams: int = 1, **options):
    text = kernel(body, nparams, extra=SMEM)
    arrays = [np.arange(threads * 4, dtype=np.uint32) for _ in range(nparams)]
    return text, run_kernel(text, arrays, threads=threads, early=0.0, **options)


_CP_ASYNC = """
    ld.param.u64 %rd1, [p0];
    mul.wide.u32 %rd2, %tid, 16;
    add.s64 %rd1, %rd1, %rd2;
    mov.u32 %r1, smem;
    mul.lo.u32 %r2, %tid, 16;
    add.u32 %r1, %r1, %r2;
    cp.async.cg.shared.global [%r1], [%rd1], 16;
    cp.async.commit_group;
    cp.async.wait_group {keep};
    ld.shared.b32 %r3, [%r1];
    st.global.b32 [%a0], %r3;"""


def test_cp_async_read_before_wait_group():
    """cp.async.wait_group 1 leaves the only group in flight: the ld.shared of its bytes
    reads before the copy completed (PTX ISA 9.7.9.25.3.3, cp.async.wait_group)."""
    text, res = _run(_CP_ASYNC.replace("{keep}", "1"), 32)
    assert [(r.kind, r.warp) for r in res.reports] == [("read-before-complete", "CTA (0, 0, 0) warp 0")]
    assert res.reports[0].where.startswith(f"PTX line {line_of(text, 'ld.shared.b32')}:")
    text, res = _run(_CP_ASYNC.replace("{keep}", "0"), 32)
    assert res.reports == [] and res.arrays[0][:32].tolist() == (np.arange(32) * 4).tolist()


_WGMMA = """
    mov.b64 %rd1, {a_desc};
    mov.b64 %rd2, {b_desc};
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4}, %rd1, %rd2, 0, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
    {wait}
    setp.lt.u32 %p1, %tid, 32;
    setp.ge.u32 %p2, %tid, 32;
    setp.lt.u32 %p3, %tid, 64;
    and.pred %p2, %p2, %p3;
    @%p2 st.shared.b32 [smem+4096], %tid;
    @%p1 mov.f32 %f10, %f1;
    wgmma.wait_group.sync.aligned 0;"""


def _wgmma_body(wait: bool) -> str:
    a = encode_wgmma(SmemDesc(start=0, lbo=128, sbo=256))
    b = encode_wgmma(SmemDesc(start=4096, lbo=128, sbo=256))
    return _WGMMA.replace("{a_desc}", str(a)).replace("{b_desc}", str(b)) \
                 .replace("{wait}", "wgmma.wait_group.sync.aligned 0;\n    bar.sync 0;" if wait else "")


def test_wgmma_operands_and_accumulators_before_wait_group():
    """Until wgmma.wait_group covers its group, a wgmma still reads its shared-memory operands
    and writes its accumulators (PTX ISA 9.7.15.7, wgmma.wait_group): warp 1's st.shared into
    B is a write-while-read, warp 0's read of an accumulator a read-before-complete. The
    warps that issue their part of the wgmma after that store also read a generic write no
    fence.proxy.async made visible to the async proxy: 'proxy' reports naming warp 1. With
    the wait and a CTA barrier after it (every warp's part issued and done before the store)
    nothing is reported."""
    text, res = _run(_wgmma_body(wait=False), 128, quantum=0)
    proxy = [r for r in res.reports if r.kind == "proxy"]
    assert proxy and all("of warp 1 wrote it through the generic proxy" in r.message for r in proxy)
    got = sorted((r.kind, r.warp, r.where.split(":")[0]) for r in res.reports if r.kind != "proxy")
    assert got == [("read-before-complete", "CTA (0, 0, 0) warp 0", f"PTX line {line_of(text, 'mov.f32 %f10')}"),
                   ("write-while-read", "CTA (0, 0, 0) warp 1", f"PTX line {line_of(text, 'st.shared.b32')}")]
    assert "issued at PTX line" in next(r.message for r in res.reports if r.kind == "read-before-complete")
    _, res = _run(_wgmma_body(wait=True), 128, quantum=0)
    assert res.reports == []


_MBAR = """
    mov.u32 %r1, bar;
    setp.eq.u32 %p1, %tid, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r1], {count};
    bar.sync 0;
    {arrive}
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], 0;"""


def test_mbarrier_arrival_count_too_large():
    """Every lane of a warp arrives on an mbarrier initialized for one arrival: 31 more
    arrivals than the phase has pending (PTX ISA 9.7.13.15.13, mbarrier.arrive)."""
    body = _MBAR.replace("{count}", "1").replace("{arrive}", "mbarrier.arrive.shared::cta.b64 %rd1, [%r1];")
    text, res = _run(body, 32)
    assert [(r.kind, r.warp) for r in res.reports] == [("mbarrier", "CTA (0, 0, 0) warp 0")]
    assert res.reports[0].where.startswith(f"PTX line {line_of(text, 'mbarrier.arrive')}:")
    assert "32 arrivals where 1 were pending" in res.reports[0].message


def test_mbarrier_arrival_count_too_small_is_a_deadlock():
    """Init count 2, one arrival: the phase never completes and the waiting warp is reported
    as a deadlock at its try_wait, not hung."""
    arrive = "@%p1 mbarrier.arrive.shared::cta.b64 %rd1, [%r1];"
    text, res = _run(_MBAR.replace("{count}", "2").replace("{arrive}", arrive), 32)
    assert [r.kind for r in res.reports] == ["deadlock"]
    assert "warp 0 waits for mbarrier at shared" in res.reports[0].message
    assert f"PTX line {line_of(text, 'mbarrier.try_wait')}:" in res.reports[0].message
    assert "deadlock in CTA (0, 0, 0)" in str(res.error)


_PARITY = """
    mov.u32 %r1, bar;
    mov.u32 %r5, smem;
    setp.eq.u32 %p1, %tid, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r1], 32;
    bar.sync 0;
    setp.lt.u32 %p3, %tid, 32;
    @!%p3 bra CONSUMER;
    ld.param.u64 %rd1, [p0];
    mul.wide.u32 %rd2, %tid, 16;
    add.s64 %rd1, %rd1, %rd2;
    mul.lo.u32 %r2, %tid, 16;
    add.u32 %r2, %r5, %r2;
    cp.async.cg.shared.global [%r2], [%rd1], 16;
    cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r1];
    bar.sync 1, 64;
    bra DONE;
CONSUMER:
    bar.sync 1, 64;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], {parity};
    @!%p2 bra WAIT;
    ld.shared.b32 %r3, [%r5+4];
    st.global.b32 [%a0], %r3;
DONE:"""


def test_try_wait_on_the_wrong_parity():
    """A consumer waiting on parity 1 of a fresh mbarrier passes at once (the phase before the
    first counts as complete, PTX ISA 9.7.13.15.16): its read of the cp.async data is a
    read-before-complete in warp 1; parity 0 waits for the copies."""
    text, res = _run(_PARITY.replace("{parity}", "1"), 64)
    assert [(r.kind, r.warp) for r in res.reports] == [("read-before-complete", "CTA (0, 0, 0) warp 1")]
    assert res.reports[0].where.startswith(f"PTX line {line_of(text, 'ld.shared.b32')}:")
    text, res = _run(_PARITY.replace("{parity}", "0"), 64)
    assert res.reports == [] and res.error is None and res.arrays[0][32] == 1


_NAMED = """
    setp.lt.u32 %p1, %tid, 32;
    @!%p1 bra SECOND;
    bar.arrive 2, 64;
    bar.sync 1, 64;
    bra DONE;
SECOND:
    bar.sync 2, 64;
    bar.sync 1, {count};
DONE:"""


def test_named_barrier_count_mismatch():
    """Warps meeting at bar.sync 1 with thread counts 64 and 96 (PTX ISA 9.7.13.1: the count
    must be the same for every thread of a phase): reported at the second warp's bar.sync."""
    text, res = _run(_NAMED.replace("{count}", "96"), 64, quantum=0)
    assert [(r.kind, r.warp) for r in res.reports][:1] == [("barrier", "CTA (0, 0, 0) warp 1")]
    assert res.reports[0].where.startswith(f"PTX line {line_of(text, 'bar.sync 1, 96')}:")
    assert "expects 96 threads here but 64" in res.reports[0].message
    _, res = _run(_NAMED.replace("{count}", "64"), 64, quantum=0)
    assert res.reports == [] and res.error is None


def test_deadlock_names_every_waiting_warp():
    """Two warps each wait at a barrier the other never reaches."""
    body = """
    setp.lt.u32 %p1, %tid, 32;
    @%p1 bar.sync 1, 64;
    @!%p1 bar.sync 2, 64;"""
    text, res = _run(body, 64, quantum=0)
    assert [r.kind for r in res.reports] == ["deadlock"]
    msg = res.reports[0].message
    assert f"warp 0 waits for named barrier 1 at PTX line {line_of(text, 'bar.sync 1, 64')}" in msg
    assert f"warp 1 waits for named barrier 2 at PTX line {line_of(text, 'bar.sync 2, 64')}" in msg


def test_pending_register_write_is_reported():
    """Writing an accumulator register an in-flight wgmma will still write."""
    body = _wgmma_body(wait=False).replace("@%p1 mov.f32 %f10, %f1;", "@%p1 mov.f32 %f1, 0f00000000;")
    text, res = _run(body, 128, quantum=0)
    assert ("write-before-complete", "CTA (0, 0, 0) warp 0") in [(r.kind, r.warp) for r in res.reports]
