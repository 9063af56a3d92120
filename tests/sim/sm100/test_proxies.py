"""Generic writes the async proxy reads (Note [Generic writes the async proxy reads] in
runtime/attnc_sim/proxies.py; PTX ISA 8.6 "Proxies", 9.7.12.4 fence.proxy.async): the
hand-written kernels of ptx/ copy their operands into shared memory with st.shared and fence
them before the barrier after which tcgen05.mma or a TMA store reads them. Each planted bug
takes a fence away, or narrows it, and must come out as a 'proxy' report at the reading
instruction, naming a thread whose write was not fenced; a fence moved to the reading
thread after the barrier is as good as the writers' own."""
from __future__ import annotations

import pytest

import sm100_harness as h
from test_sm100_ptx import mma_launch, tma_store_launch

FENCE = "  fence.proxy.async.shared::cta;"


def _lines_of(text: str, statement: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1) if line.strip().startswith(statement)]


def _fence_edited(name: str, edit: str) -> str:
    """The kernel's text with its one fence of the copied image removed, narrowed, or moved
    after the barrier that follows it (where every thread, the issuing one included, runs it)."""
    lines = h.kernel_text(name).splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith(FENCE))
    assert all(not line.startswith(FENCE) for line in lines[at + 1:])
    lines[at] = {"none": "",
                 "global": "  fence.proxy.async.global;\n",
                 "thread 0": "  setp.eq.u32 %p0, %r0, 0;\n  @%p0 fence.proxy.async.shared::cta;\n",
                 "after the barrier": "  bar.sync 0;\n  fence.proxy.async.shared::cta;\n"}[edit]
    return "".join(lines)


@pytest.mark.parametrize("edit", ["none", "global", "thread 0"])
def test_planted_unfenced_mma_operand_is_reported(edit):
    """PLANTED BUG: tcgen05.mma reads A and B that the threads wrote with st.shared, with no
    fence.proxy.async of shared memory after the writes: none at all, one over global memory
    only, or thread 0's alone, before the barrier (a fence orders its thread's own writes,
    and for its thread's reads those before a synchronization it passed: here none)."""
    text = _fence_edited("mma_ld_32x32b.ptx", edit)
    mem, _, params, _ = mma_launch()
    launch, _ = h.run("mma_ld_32x32b.ptx", 128, params, mem, text=text)
    proxy = [r for r in launch.reports if r.kind == "proxy"]
    assert proxy and proxy == launch.reports
    mmas = {f"PTX line {i}" for i in _lines_of(text, "tcgen05.mma.cta_group")}
    assert len(mmas) == 2 and {r.where.split(":")[0] for r in proxy} == mmas
    assert proxy[0].message.startswith("tcgen05.mma reads shared byte 0x")
    assert proxy[0].message.endswith("wrote it through the generic proxy with no fence.proxy.async between "
                                     "the write and this read (the writer's, or this thread's after a "
                                     "synchronization that follows the write)")
    if edit == "thread 0":
        assert all("thread 0 of warp 0 wrote" not in r.message for r in proxy)


def test_planted_unfenced_store_source_is_reported():
    """PLANTED BUG: the TMA store reads the box the warp wrote with st.shared, with no
    fence.proxy.async between the writes and the barrier before the store. The store still
    writes the box (the emulator has one copy of shared memory); the report is what shows the
    bug."""
    text = _fence_edited("tma_store.ptx", "none")
    launch, _, _, _ = tma_store_launch("tma_store.ptx", text=text)
    (store,) = _lines_of(text, "cp.async.bulk.tensor.2d")
    assert [(r.kind, r.where.split(":")[0]) for r in launch.reports] == [("proxy", f"PTX line {store}")]
    message = launch.reports[0].message
    assert message.startswith("the tensor store reads shared byte 0x400 through the async proxy; "
                              "thread 0 of warp 0 wrote it")


@pytest.mark.parametrize("kernel", ["mma_ld_32x32b.ptx", "tma_store.ptx"])
def test_a_fence_of_the_reading_thread_after_the_barrier_also_orders_the_writes(kernel):
    """The proxy fence may stand anywhere on the causality path from the write to the read:
    run by the thread that issues the MMA or the store after the barrier that makes the other
    threads' writes visible to it, it orders them for its async-proxy read (the writers'
    own bytes stay recorded, and are not reported)."""
    text = _fence_edited(kernel, "after the barrier")
    if kernel == "tma_store.ptx":
        launch, _, _, _ = tma_store_launch(kernel, text=text)
    else:
        mem, _, params, _ = mma_launch()
        launch, _ = h.run(kernel, 128, params, mem, text=text)
    assert launch.reports == []

