"""tcgen05 fences around the synchronization between warps that share tensor memory (Note
[tcgen05 fences] in runtime/attnc_sim/tmem_order.py; PTX ISA 9.7.16.6): mma_ld_32x32b.ptx
pre-fills D with the warps' tcgen05.st, fences them before a CTA barrier and after it, lets
thread 0 issue the MMAs and commit them, and has every warp wait for the commit's mbarrier
and fence after it before loading D. Each planted bug takes one fence away and must come out
as a 'tcgen05-fence' report at the access that is no longer ordered."""
from __future__ import annotations

import pytest

import sm100_harness as h
from test_sm100_ptx import mma_launch

KERNEL = "mma_ld_32x32b.ptx"


def _without(line_no: int) -> str:
    """The kernel's text without its line `line_no` (1-based), which must be a tcgen05 fence."""
    lines = h.kernel_text(KERNEL).splitlines(keepends=True)
    assert lines[line_no - 1].strip().startswith("tcgen05.fence::"), lines[line_no - 1]
    return "".join(lines[:line_no - 1] + lines[line_no:])


def _line(text: str, statement: str) -> int:
    (n,) = [i for i, line in enumerate(text.splitlines(), 1) if line.strip().startswith(statement)]
    return n


def _fence_line(statement: str, after: str) -> int:
    """The line of the first `statement` after the line starting with `after`."""
    lines = h.kernel_text(KERNEL).splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(after))
    return next(i for i, line in enumerate(lines[start:], start + 1) if line.strip() == statement)


def test_the_kernel_with_its_fences_is_not_reported():
    mem, _, params, _ = mma_launch()
    launch, _ = h.run(KERNEL, 128, params, mem, seed=3, early=0.3)
    assert launch.reports == []


BEFORE, AFTER = "tcgen05.fence::before_thread_sync;", "tcgen05.fence::after_thread_sync;"
FIRST_MMA = "tcgen05.mma.cta_group::1.kind::f16 [%r9], %rd2, %rd3"
COMMIT_WAIT = "mbarrier.try_wait.parity.shared::cta.b64 %p6"


@pytest.mark.parametrize("fence, after, reported", [
    # the warps' tcgen05.st of D, not released before the barrier: the MMA's write of D
    (BEFORE, "tcgen05.st.sync.aligned", FIRST_MMA),
    # thread 0's side of the same barrier: nothing orders its MMAs after the stores
    (AFTER, "tcgen05.st.sync.aligned", FIRST_MMA),
    # the warps' wait for the commit: their loads of D are not ordered after the MMAs
    (AFTER, COMMIT_WAIT, "tcgen05.ld.sync.aligned"),
], ids=["before-sync-after-st", "after-sync-before-mma", "after-sync-before-ld"])
def test_planted_missing_tcgen05_fence_is_reported(fence, after, reported):
    """PLANTED BUG: one tcgen05 fence of the kernel taken away."""
    text = _without(_fence_line(fence, after))
    mem, _, params, _ = mma_launch()
    launch, _ = h.run(KERNEL, 128, params, mem, text=text)
    got = [r for r in launch.reports if r.kind == "tcgen05-fence"]
    assert got and got == launch.reports
    assert {r.where.split(":")[0] for r in got} == {f"PTX line {_line(text, reported)}"}
    assert got[0].message.endswith("with no tcgen05.fence::before_thread_sync of that warp after its access "
                                   "and tcgen05.fence::after_thread_sync of this one after the synchronization "
                                   "between them")
