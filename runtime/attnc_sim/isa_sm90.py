"""sm_90a warpgroup MMA: wgmma.mma_async with shared-memory descriptors (smem_desc.py, every
swizzle mode) or A from registers, and wgmma.fence / commit_group / wait_group.

    wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16}
        d, a-desc | {a regs}, b-desc, scale-d, imm-scale-a, imm-scale-b[, imm-trans-a], imm-trans-b

D (64 x N, f32) is spread over the warpgroup's 128 threads: warp w of the group holds rows
16w..16w+15 in the layout of mma.m16n8's accumulator repeated over N/8 column tiles (PTX ISA
"Register Fragments and Shared Memory Matrix Layouts" for wgmma). Each warp computes its
own 16 rows, so the four warps need not meet.

Arithmetic: each D element is formed by isa_mma.tensor_core_mma, the model of mma.sync
m16n8k16 fitted bit for bit to an H200 (Note [Tensor-core accumulation]), with the
accumulator registers as C (C = 0 for scale-d false). That wgmma's k = 16 runs through
the same datapath as one mma.sync m16n8k16 (16 products and C in one block, truncated
alignment, rounding toward zero) is a hypothesis, not measured: the attention-level
comparison with the GPU (tools/sim_vs_gpu.py) tests it.

Asynchrony (Note [wgmma in flight]): the operation runs when its group is waited for
(wgmma.wait_group) or earlier where the scheduler picks; until then its shared-memory
operands are marked as read by an in-flight operation (a write to them is a report) and
its accumulator registers as written by one (a read by any other instruction is a report).
"""
from __future__ import annotations

import numpy as np

from attnc_sim import isa, proxies, races, smem_desc
from attnc_sim.isa_cvt import bf16_bits_to_f32
from attnc_sim.isa_mma import A_INV, halves_to_f32, tensor_core_mma
from attnc_sim.isa_warp import require_converged
from attnc_sim.ptx import Vec
from attnc_sim.scheduler import AsyncOp
from attnc_sim.state import WARP

_LANE = np.arange(WARP)
_G, _T = _LANE // 4, _LANE % 4


def accumulator_layout(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row within the warp's 16, col) of accumulator register i of each lane: (N/2, 32) each."""
    i = np.arange(n // 2)[:, None]
    j = i % 4
    return _G + 8 * (j // 2), 8 * (i // 4) + 2 * _T + (j % 2)


# Note [wgmma in flight]: PTX lets a warpgroup go on after wgmma.mma_async and guarantees
# its results only after a wgmma.wait_group that covers its group; reading the accumulator
# registers, or writing the shared memory it reads, before then is undefined. The
# emulator runs the product late -- at that wait, or at a scheduling point the seeded
# scheduler picks -- so a kernel relying on an early result computes with stale data, and
# the bookkeeping below reports the access instead of letting it pass silently.

class Wgmma(AsyncOp):
    def __init__(self, w, shape_n, dtype, a, a_desc, b_desc, scale_d, neg_a, neg_b, trans_a, trans_b,
                 d_rows, where):
        self.warp, self.cta, self.n, self.dtype, self.where = w, w.cta, shape_n, dtype, where
        self.a, self.a_desc, self.b_desc = a, a_desc, b_desc
        self.scale_d, self.neg_a, self.neg_b, self.trans_a, self.trans_b = scale_d, neg_a, neg_b, trans_a, trans_b
        self.d_rows = d_rows
        self.spans = []
        for desc, rows, major in ((a_desc, 64, trans_a), (b_desc, shape_n, trans_b)):
            if desc is None:
                continue
            span = smem_desc.element_bytes(desc, rows, 16, 2, "MN" if major else "K")
            if w.cta.n_inflight:
                races.check_read_bytes(w, span, where)
            proxies.check_async_read(w, span, where, "wgmma")
            races.begin_read(w.cta, span)
            self.spans.append(span)
        self.d_keys = [(32, int(row)) for row in d_rows]
        w.mark_pending(self.d_keys, self)

    def _matrix(self, desc, rows, trans):
        smem = self.cta.smem
        raw = smem_desc.read_matrix(smem, desc, rows, 16, np.uint16, "MN" if trans else "K")
        return bf16_bits_to_f32(raw) if self.dtype == "bf16" else raw.view(np.float16).astype(np.float32)

    def _run(self):
        w = self.warp
        # a warp's wgmmas complete in issue order: a chain accumulating into the same
        # registers (the first with scale-d 0) sums in that order
        issued = _wg_state(w)["issued"]
        while issued and issued[0] is not self:
            issued[0].complete()
        if issued and issued[0] is self:
            issued.pop(0)
        for span in self.spans:
            races.end_read(self.cta, span)
        w.release_pending(self.d_keys, self)
        sub = w.index % 4
        if self.a_desc is not None:
            a = self._matrix(self.a_desc, 64, self.trans_a)[16 * sub:16 * sub + 16]
        else:
            a = self.a
        b = self._matrix(self.b_desc, self.n, self.trans_b)      # (N, K)
        if self.neg_a:
            a = -a
        if self.neg_b:
            b = -b
        rows, cols = accumulator_layout(self.n)                   # (N/2, 32) each
        c = np.zeros((16, self.n), np.float32)
        if self.scale_d:
            c[rows, cols] = w.f32[self.d_rows]
        w.f32[self.d_rows] = tensor_core_mma(a, b.T, c, self.dtype)[rows, cols]


def _wg_state(w):
    st = w.async_state.get("wgmma")
    if st is None:
        st = w.async_state["wgmma"] = {"open": [], "groups": [], "issued": []}
    return st


@isa.register("wgmma.mma_async")
def wgmma_mma_async(ins, ctx):
    parts = ins.parts
    shape = next(p for p in parts if p.startswith("m64"))
    n = int(shape[4:shape.index("k")])
    dt, at, bt = parts[-3:]
    if dt != "f32" or at not in ("bf16", "f16") or bt != at or not shape.endswith("k16"):
        raise ctx.error(f"{ins.opcode}: only m64nNk16 with f16/bf16 inputs and f32 accumulators is supported")
    ops = ins.operands
    d_rows = np.array([ctx.reg(op)[1] for op in ctx.vec(ops[0])])
    if len(d_rows) != n // 2:
        raise ctx.error(f"{ins.opcode}: {len(d_rows)} accumulator registers, expected {n // 2}")
    reg_a = isinstance(ops[1], Vec)
    a_rows = [ctx.reg(op)[1] for op in ctx.vec(ops[1])] if reg_a else None
    a_desc = None if reg_a else ctx.reader(ops[1], "b64")
    b_desc = ctx.reader(ops[2], "b64")
    scale_d = ctx.reader(ops[3], "pred")
    imms = [op.value for op in ops[4:]]
    neg_a, neg_b = imms[0] == -1, imms[1] == -1
    trans_a, trans_b = (0, imms[2]) if reg_a else (imms[2], imms[3])
    where = ins.where()
    # the accumulators are this instruction's own: a wgmma chain accumulating into the
    # registers in flight is the ISA's pattern; A in registers is read now
    a_pending = ctx.pending_check(ctx.vec(ops[1]), reading=True) if reg_a else None

    def run(w):
        require_converged(w, None, where)
        lane0 = 0
        a = None
        if reg_a:
            a_pending(w)
            a = halves_to_f32(w.b32[a_rows], at).reshape(-1)[A_INV].reshape(16, 16)
        ad = None if reg_a else smem_desc.decode_wgmma(int(a_desc(w)[lane0]))
        bd = smem_desc.decode_wgmma(int(b_desc(w)[lane0]))
        op = Wgmma(w, n, at, a, ad, bd, bool(scale_d(w)[lane0]), neg_a, neg_b, trans_a, trans_b, d_rows, where)
        st = _wg_state(w)
        st["open"].append(op)
        st["issued"].append(op)
        w.cta.launch.scheduler.issue(op)
    return run


@isa.register("wgmma.fence")
def wgmma_fence(ins, ctx):
    where = ins.where()
    return lambda w: require_converged(w, None, where)


@isa.register("wgmma.commit_group")
def wgmma_commit(ins, ctx):
    where = ins.where()

    def run(w):
        require_converged(w, None, where)
        st = _wg_state(w)
        if st["open"]:
            st["groups"].append(st["open"])
        st["open"] = []
    return run


@isa.register("wgmma.wait_group")
def wgmma_wait(ins, ctx):
    keep = ins.operands[0].value
    where = ins.where()

    def run(w):
        require_converged(w, None, where)
        st = _wg_state(w)
        groups = st["groups"]
        cut = max(len(groups) - keep, 0)
        for group in groups[:cut]:
            for op in group:
                op.complete()
        st["groups"] = groups[cut:]
    return run
