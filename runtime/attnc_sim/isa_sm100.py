"""The sm_100a tcgen05 family: tensor-memory allocation, tcgen05.mma (kind::f16), tcgen05.cp,
tcgen05.commit, tcgen05.ld / st with their waits, and the tcgen05 fences. TMA, bulk copies and
elect.sync are isa_bulk's (imported here, so loading this family loads both).

The semantics live in `tmem.py` (tensor memory, fragments, MMA, cp); this module decides when
they happen. Every asynchronous instruction is an `AsyncOp` the scheduler may complete early;
the instruction the PTX ISA makes the completion point completes what is still pending
(PTX ISA 9.7.16.6 "Memory Consistency Model for 5th generation of TensorCore operations"):

    tcgen05.mma / tcgen05.cp    in issue order (one tensor-core pipe per CTA); complete at the
                                latest when a tcgen05.commit that tracks them arrives
    tcgen05.commit              arrives once on its mbarrier after the issuing thread's earlier
                                MMAs and copies completed
    tcgen05.ld / tcgen05.st     complete at the warp's tcgen05.wait::ld / wait::st

Hazards reported (`launch.report`): reading or writing a register of a tcgen05.ld before its
wait::ld ('read-before-complete' / 'write-before-complete', by the core's register accessors:
Note [Pending registers] in state.py); a tcgen05.ld of TMEM an in-flight MMA or copy still
writes (the commit's mbarrier not waited); a tcgen05.st into TMEM an in-flight MMA reads or
writes; an MMA reading TMEM a tcgen05.st has not finished (no wait::st) or shared memory a copy
has not landed; a shared-memory write into an in-flight MMA's operands (races.py); tensor memory
still allocated when the CTA ends ('tensor-memory', from `check_exit`, which the engine runs);
tensor memory one warp accesses after another without the tcgen05 fences around the
synchronization between them ('tcgen05-fence': Note [tcgen05 fences] in tmem_order.py).

Per-CTA state is `cta.__dict__["sm100"]` (an `_Sm100State`).
"""
from __future__ import annotations

import re

import numpy as np

from attnc_sim import isa, proxies, smem_desc, tmem, tmem_order
from attnc_sim.errors import SimError
from attnc_sim.isa_bulk import arrive, lane_state, report, uniform
from attnc_sim.ptx import Addr
from attnc_sim.scheduler import AsyncOp

_TMEM_SHAPE = (tmem.LANES, tmem.COLUMNS)


class _Sm100State:
    def __init__(self):
        self.tmem = tmem.TensorMemory()
        self.alloc_where: dict[int, str] = {}                # first column -> the tcgen05.alloc
        self.alloc_waiters: list = []
        self.pipe: list = []                                 # tcgen05.mma / cp in issue order
        self.mma_writes = np.zeros(_TMEM_SHAPE, np.int16)    # in-flight MMA / cp writes
        self.mma_reads = np.zeros(_TMEM_SHAPE, np.int16)     # in-flight MMA reads (A in TMEM)
        self.st_writes = np.zeros(_TMEM_SHAPE, np.int16)     # tcgen05.st not yet waited


def _state(w) -> _Sm100State:
    s = w.cta.__dict__.get("sm100")
    if s is None:
        s = w.cta.__dict__["sm100"] = _Sm100State()
    return s


def _collective(w, ins) -> None:
    if not w.wfull:
        raise SimError(f"{w.name()}: {ins.opcode.split('.')[0]}.{ins.parts[1]} is .sync.aligned and "
                       f"needs every lane of the warp converged at {ins.where()}")


# tensor-memory allocation -------------------------------------------------------------------

@isa.register("tcgen05.alloc")
def tcgen05_alloc(ins, ctx):
    _cta_group_1(ins, ctx)
    dst, ncols = ctx.address(ins.operands[0]), ctx.reader(ins.operands[1], "u32")

    def run(w):
        _collective(w, ins)
        s = _state(w)
        try:
            addr = s.tmem.try_alloc(uniform(ncols(w), w, ins, "column count"))
        except tmem.TmemError as e:
            raise SimError(f"{w.name()}: {e} at {ins.where()}") from None
        if addr is None:
            w.waiting = "free tensor-memory columns"
            s.alloc_waiters.append(w)
            return isa.BLOCK
        s.alloc_where[tmem.split(addr)[1]] = ins.where()
        at = uniform(dst(w), w, ins, "destination")
        w.cta.smem[w.cta.smem_offsets(np.array([at]), 4, ins.where())[0]:][:4] = \
            np.frombuffer(np.uint32(addr).tobytes(), np.uint8)
        return None
    return run


@isa.register("tcgen05.dealloc")
def tcgen05_dealloc(ins, ctx):
    _cta_group_1(ins, ctx)
    taddr, ncols = ctx.reader(ins.operands[0], "u32"), ctx.reader(ins.operands[1], "u32")

    def run(w):
        _collective(w, ins)
        s = _state(w)
        addr, n = uniform(taddr(w), w, ins, "address"), uniform(ncols(w), w, ins, "column count")
        cols = slice(tmem.split(addr)[1], tmem.split(addr)[1] + n)
        if s.mma_writes[:, cols].any() or s.mma_reads[:, cols].any() or s.st_writes[:, cols].any():
            report(w, "write-while-read", ins, "tcgen05.dealloc frees tensor memory an in-flight tcgen05.mma, "
                   "tcgen05.cp or tcgen05.st still uses (its commit or wait not yet observed)")
        try:
            s.tmem.dealloc(addr, n)
        except tmem.TmemError as e:
            raise SimError(f"{w.name()}: {e} at {ins.where()}") from None
        for waiter in s.alloc_waiters:
            waiter.blocked = False
        s.alloc_waiters.clear()
        return None
    return run


@isa.register("tcgen05.relinquish_alloc_permit")
def tcgen05_relinquish(ins, ctx):
    _cta_group_1(ins, ctx)

    def run(w):
        _collective(w, ins)
        _state(w).tmem.relinquish()
    return run


def _cta_group_1(ins, ctx) -> None:
    if "cta_group::2" in ins.parts:
        raise ctx.error("tcgen05 with .cta_group::2 (CTA pairs) is not modelled")


def check_exit(cta) -> list[tuple[str, str]]:
    """Tensor memory a CTA still holds when it ends, as ('tensor-memory', message) reports: every
    allocation must be deallocated before the CTA exits (PTX ISA 9.7.16.7.1, tcgen05.alloc)."""
    s = cta.__dict__.get("sm100")
    if s is None:
        return []
    return [("tensor-memory", f"{ncols} tensor-memory columns from column {start} are still allocated "
                              f"when the CTA exits (allocated at {s.alloc_where.get(start, '?')})")
            for start, ncols in s.tmem.leaks()]


# tcgen05.mma / tcgen05.cp / tcgen05.commit --------------------------------------------------

class _PipeOp(AsyncOp):
    """A tcgen05.mma or tcgen05.cp: runs after every earlier one of the CTA."""

    def __init__(self, state: _Sm100State, where: str, effect, writes, reads, smem_bytes, cta):
        self.state, self.where, self.effect = state, where, effect
        self.writes, self.reads, self.smem_bytes, self.cta = writes, reads, smem_bytes, cta
        state.pipe.append(self)
        state.mma_writes[writes] += 1
        if reads is not None:
            state.mma_reads[reads] += 1
        cta.inflight_reads[smem_bytes] += 1
        cta.n_inflight += 1

    def _run(self):
        pipe = self.state.pipe
        while pipe and pipe[0] is not self:
            pipe[0].complete()
        if pipe and pipe[0] is self:
            pipe.pop(0)
        self.state.mma_writes[self.writes] -= 1
        if self.reads is not None:
            self.state.mma_reads[self.reads] -= 1
        self.cta.inflight_reads[self.smem_bytes] -= 1
        self.cta.n_inflight -= 1
        try:
            self.effect()
        except tmem.TmemError as e:         # e.g. the columns were deallocated while it was in flight
            self.cta.launch.report("tensor-memory", None, self.where, f"the in-flight operation failed: {e}")


def _issue_pipe_op(w, ins, lane, effect, writes, reads, smem_bytes) -> None:
    s = _state(w)
    if (w.cta.inflight_writes[smem_bytes] > 0).any():
        report(w, "read-before-complete", ins,
                "the instruction reads shared memory an asynchronous copy has not landed yet")
    name = f"{ins.parts[0]}.{ins.parts[1]}"
    proxies.check_async_read(w, smem_bytes, ins.where(), name, lane)
    if reads is not None:
        tmem_order.access(w, reads, False, name, ins.where())
    tmem_order.access(w, writes, True, name, ins.where())
    if (s.st_writes[writes] > 0).any():
        report(w, "read-before-complete", ins, f"{ins.parts[0]}.{ins.parts[1]} writes tensor memory a "
               "tcgen05.st has not finished (no tcgen05.wait::st)")
    if reads is not None and (s.st_writes[reads] > 0).any():
        report(w, "read-before-complete", ins,
                "tcgen05.mma reads tensor memory a tcgen05.st has not finished (no tcgen05.wait::st)")
    op = _PipeOp(s, ins.where(), effect, writes, reads, smem_bytes, w.cta)
    lane_state(w, "tcgen05_issued", lane).append(op)
    w.cta.launch.scheduler.issue(op)


@isa.register("tcgen05.mma")
def tcgen05_mma(ins, ctx):
    _cta_group_1(ins, ctx)
    if "ws" in ins.parts or "kind::f16" not in ins.parts:
        raise ctx.error(f"{ins.opcode}: only tcgen05.mma.cta_group::1.kind::f16 is modelled")
    if len(ins.operands) != 5:
        raise ctx.error("tcgen05.mma with a disable-output-lane mask or scale-input-d is not modelled")
    d_op, a_op, b_op, i_op, acc_op = ins.operands
    d = ctx.address(d_op)
    a_tmem = isinstance(a_op, Addr)
    a = ctx.address(a_op) if a_tmem else ctx.reader(a_op, "b64")
    b, idesc = ctx.reader(b_op, "b64"), ctx.reader(i_op, "b32")
    acc = ctx.reader(acc_op, "pred")

    def run(w):
        for lane in np.flatnonzero(w.wmask):        # a single-thread instruction: each lane issues one
            _issue_mma(w, ins, int(lane), int(d(w)[lane]), int(a(w)[lane]), int(b(w)[lane]),
                       int(idesc(w)[lane]), bool(acc(w)[lane]), a_tmem)
    return run


def _issue_mma(w, ins, lane, d_addr, a_val, b_val, i_val, accumulate, a_tmem) -> None:
    s = _state(w)
    try:
        idesc = tmem.InstrDesc.decode(i_val)
        idesc.check()
        b_desc = smem_desc.decode_tcgen05(b_val)
        a_desc = None if a_tmem else smem_desc.decode_tcgen05(a_val)
        smem = smem_desc.element_bytes(b_desc, idesc.n, tmem.MMA_K, 2, "MN" if idesc.b_mn_major else "K")
        if a_desc is not None:
            smem = np.concatenate([smem, smem_desc.element_bytes(a_desc, idesc.m, tmem.MMA_K, 2,
                                                     "MN" if idesc.a_mn_major else "K")])
        # where D (and A) lie, from a dry run's shapes, before the MMA itself runs
        lane0, col0 = tmem.split(d_addr)
        rows = tmem.rows_to_lanes(idesc.m, lane0, "tcgen05.mma's D")
        writes = np.ix_(rows, col0 + np.arange(idesc.n))
        s.tmem.check_allocated(rows, col0 + np.arange(idesc.n), "tcgen05.mma's D")
        reads = None
        if a_tmem:
            a_lane0, a_col0 = tmem.split(a_val)
            a_rows = tmem.rows_to_lanes(idesc.m, a_lane0, "tcgen05.mma's A in tensor memory")
            reads = np.ix_(a_rows, a_col0 + np.arange(tmem.MMA_K // 2))
    except (tmem.TmemError, smem_desc.DescriptorError) as e:
        raise SimError(f"{w.name()}: {e} at {ins.where()}") from None
    a = a_val if a_tmem else a_desc

    def effect():
        tmem.mma_f16(s.tmem, w.cta.smem, d_addr, a, b_desc, idesc, accumulate)
    _issue_pipe_op(w, ins, lane, effect, writes, reads, smem)


@isa.register("tcgen05.cp")
def tcgen05_cp(ins, ctx):
    _cta_group_1(ins, ctx)
    shape = next((p for p in ins.parts if p in tmem.CP_SHAPES), None)
    multicast = next((p for p in ins.parts if p.startswith("warpx")), None)
    if shape is None:
        raise ctx.error(f"{ins.opcode}: no tcgen05.cp shape")
    if any(p.startswith("b8x16") or p.startswith("b6x16") or p.startswith("b4x16") for p in ins.parts):
        raise ctx.error("tcgen05.cp with a decompression format is not modelled")
    taddr, desc = ctx.address(ins.operands[0]), ctx.reader(ins.operands[1], "b64")

    def run(w):
        for lane in np.flatnonzero(w.wmask):
            _issue_cp(w, ins, int(lane), int(taddr(w)[lane]), int(desc(w)[lane]), shape, multicast)
    return run


def _issue_cp(w, ins, lane, addr, desc_val, shape, multicast) -> None:
    s = _state(w)
    try:
        desc = smem_desc.decode_tcgen05(desc_val)
        sources, cols = tmem.cp_cells(shape, multicast)
        rows = tmem.CP_SHAPES[shape][0]
        lane0, col0 = tmem.split(addr)
        lanes, columns = lane0 + np.arange(sources.size), col0 + np.arange(cols)
        s.tmem.check_allocated(lanes, columns, f"tcgen05.cp.{shape}")
        smem = smem_desc.element_bytes(desc, rows, cols, 4, "K")
    except (tmem.TmemError, smem_desc.DescriptorError) as e:
        raise SimError(f"{w.name()}: {e} at {ins.where()}") from None

    def effect():
        tmem.cp(s.tmem, w.cta.smem, addr, desc, shape, multicast)
    _issue_pipe_op(w, ins, lane, effect, np.ix_(lanes, columns), None, smem)


class _CommitOp(AsyncOp):
    def __init__(self, w, ins, tracked, mbar):
        self.w, self.ins, self.tracked, self.mbar, self.where = w, ins, tracked, mbar, ins.where()

    def _run(self):
        for op in self.tracked:
            op.complete()
        arrive(self.w, self.mbar, self.ins)


@isa.register("tcgen05.commit")
def tcgen05_commit(ins, ctx):
    _cta_group_1(ins, ctx)
    if "multicast::cluster" in ins.parts:
        raise ctx.error("tcgen05.commit with .multicast::cluster is not modelled")
    mbar = ctx.address(ins.operands[0])

    def run(w):
        tmem_order.release(w)           # a commit is the before-fence of what it tracks (9.7.16.6.4.2)
        for lane in np.flatnonzero(w.wmask):
            # every earlier MMA and copy of the thread still running, committed before or not
            # (PTX ISA 9.7.16.7.1: "all prior asynchronous tcgen05 operations ... initiated by
            # the executing thread"): two commits after one MMA both wait for it
            issued = lane_state(w, "tcgen05_issued", int(lane))
            issued[:] = [op for op in issued if not op.done]
            w.cta.launch.scheduler.issue(_CommitOp(w, ins, list(issued), int(mbar(w)[lane])))
    return run


@isa.register("tcgen05.fence::before_thread_sync", "tcgen05.fence::after_thread_sync")
def tcgen05_fence(ins, ctx):
    """The fences order tcgen05 operations around thread synchronization (9.7.16.6.2); the
    emulator runs each warp in program order and completes asynchronous work only at the points
    of the module docstring, so they change nothing it computes: tmem_order.py checks that
    they stand where they must (Note [tcgen05 fences])."""
    return tmem_order.release if "fence::before_thread_sync" in ins.parts else tmem_order.after_sync


# tcgen05.ld / tcgen05.st / tcgen05.wait ----------------------------------------------------

def _ld_st_form(ins, ctx, regs) -> tuple[str, int]:
    """The shape and .num of a tcgen05.ld / st, checked against its register vector."""
    shape = next((p for p in ins.parts if p in tmem.LD_ST_SHAPES), None)
    num = next((int(p[1:]) for p in ins.parts if re.fullmatch(r"x\d+", p)), None)
    if shape is None or num is None:
        raise ctx.error(f"{ins.opcode}: needs a shape and a .num")
    if "pack::16b" in ins.parts or "unpack::16b" in ins.parts:
        raise ctx.error(f"{ins.opcode}: .pack::16b / .unpack::16b is not modelled")
    if len(regs) != tmem.registers_per_thread(shape, num):
        raise ctx.error(f"{ins.parts[0]}.{ins.parts[1]}.{shape}.x{num} takes "
                        f"{tmem.registers_per_thread(shape, num)} registers, not {len(regs)}")
    return shape, num


def _ld_st_cells(w, ins, s: _Sm100State, shape: str, num: int, addr: int, split: int):
    try:
        lanes, cols = tmem.ld_st_cells(shape, num, w.index, addr, split)
        s.tmem.check_allocated(lanes, cols, f"{ins.parts[0]}.{ins.parts[1]}.{shape}")
    except tmem.TmemError as e:
        raise SimError(f"{w.name()}: {e} at {ins.where()}") from None
    return lanes, cols


class _LdOp(AsyncOp):
    """A tcgen05.ld: its destination registers are pending until tcgen05.wait::ld."""

    def __init__(self, w, values, writers, keys, where):
        self.w, self.values, self.writers, self.keys, self.where = w, values, writers, keys, where
        w.mark_pending(keys, self)

    def _run(self):
        w = self.w
        w.release_pending(self.keys, self)
        saved = w.wmask, w.wfull
        w.wmask, w.wfull = np.ones(32, bool), True
        for j, put in enumerate(self.writers):
            put(w, self.values[:, j])
        w.wmask, w.wfull = saved


@isa.register("tcgen05.ld")
def tcgen05_ld(ins, ctx):
    regs = ctx.vec(ins.operands[0])
    shape, num = _ld_st_form(ins, ctx, regs)
    writers = [ctx.writer(r, "b32") for r in regs]
    keys = [ctx.reg(r) for r in regs]
    overwrite = ctx.pending_check(regs, reading=False)     # an earlier load into them still pending
    taddr = ctx.address(ins.operands[1])
    split = int(ins.operands[2].value) if len(ins.operands) > 2 else 0

    def run(w):
        _collective(w, ins)
        s = _state(w)
        lanes, cols = _ld_st_cells(w, ins, s, shape, num, uniform(taddr(w), w, ins, "tensor-memory address"), split)
        if (s.mma_writes[lanes, cols] > 0).any():
            report(w, "read-before-complete", ins, "tcgen05.ld reads tensor memory an in-flight "
                    "tcgen05.mma or tcgen05.cp still writes (its tcgen05.commit not yet observed)")
        overwrite(w)
        tmem_order.access(w, (lanes, cols), False, "tcgen05.ld", ins.where())
        op = _LdOp(w, s.tmem.cells[lanes, cols].copy(), writers, keys, ins.where())
        w.async_state.setdefault("tcgen05_ld", []).append(op)
        w.cta.launch.scheduler.issue(op)
    return run


class _StOp(AsyncOp):
    def __init__(self, state, cells, values, where):
        self.state, self.cells, self.values, self.where = state, cells, values, where
        state.st_writes[cells] += 1

    def _run(self):
        self.state.st_writes[self.cells] -= 1
        self.state.tmem.cells[self.cells] = self.values


@isa.register("tcgen05.st")
def tcgen05_st(ins, ctx):
    regs = ctx.vec(ins.operands[-1])
    shape, num = _ld_st_form(ins, ctx, regs)
    taddr = ctx.address(ins.operands[0])
    split = int(ins.operands[1].value) if len(ins.operands) > 2 else 0
    readers = [ctx.reader(r, "b32") for r in regs]

    def run(w):
        _collective(w, ins)
        s = _state(w)
        lanes, cols = _ld_st_cells(w, ins, s, shape, num, uniform(taddr(w), w, ins, "tensor-memory address"), split)
        if (s.mma_writes[lanes, cols] > 0).any() or (s.mma_reads[lanes, cols] > 0).any():
            report(w, "write-while-read", ins, "tcgen05.st writes tensor memory an in-flight "
                    "tcgen05.mma still reads or writes")
        values = np.stack([r(w) for r in readers], axis=1).astype(np.uint32)
        tmem_order.access(w, (lanes, cols), True, "tcgen05.st", ins.where())
        op = _StOp(s, (lanes, cols), values, ins.where())
        w.async_state.setdefault("tcgen05_st", []).append(op)
        w.cta.launch.scheduler.issue(op)
    return run


@isa.register("tcgen05.wait::ld", "tcgen05.wait::st")
def tcgen05_wait(ins, ctx):
    key = "tcgen05_ld" if ins.parts[1] == "wait::ld" else "tcgen05_st"

    def run(w):
        _collective(w, ins)
        for op in w.async_state.pop(key, []):
            op.complete()
    return run
