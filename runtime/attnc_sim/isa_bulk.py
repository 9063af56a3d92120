"""The sm_90a/sm_100a bulk-copy family: TMA tile copies (cp.async.bulk.tensor), non-tensor bulk
copies (cp.async.bulk), their bulk groups (commit_group / wait_group(.read)), and elect.sync;
with the mbarrier and lane helpers the tcgen05 family (isa_sm100) shares.

The copies' semantics live in `tma.py` (tensor maps, boxes, swizzle, out-of-bounds fill); this
module decides when they happen. Each copy is an `AsyncOp` the scheduler may complete early:

    load  (global -> shared)    completes at the latest when its mbarrier's phase is waited on:
                                it performs complete_tx of the bytes moved (PTX ISA 9.7.9.25.4.1
                                cp.async.bulk, 9.7.9.25.5.2 cp.async.bulk.tensor: the
                                .mbarrier::complete_tx::bytes completion mechanism)
    store (shared -> global)    joins the thread's open bulk group; completes at
                                cp.async.bulk.wait_group(.read) N once at most N younger groups
                                remain (9.7.9.25.6.1 commit_group, 9.7.9.25.6.2 wait_group)

Hazards reported: a bulk store whose shared source an asynchronous copy has not landed yet; a
write of shared memory an in-flight store still reads (races.py, by the core's st.shared).
A tensor operand is `[tmap, {c0, ...}]`, parsed as `ptx.Addr(base, 0, coords)`; `tmap` is a
kernel parameter (a `.param .align 64 .b8 [128]`) or a register holding a global address.
"""
from __future__ import annotations

import numpy as np

from attnc_sim import isa, proxies, tma
from attnc_sim.errors import SimError
from attnc_sim.isa_mem import PARAM_WINDOW, WINDOW
from attnc_sim.ptx import Addr, Reg
from attnc_sim.scheduler import AsyncOp


# helpers shared with isa_sm100 ------------------------------------------------------------

def lane_state(w, key: str, lane: int) -> list:
    """Per-thread asynchronous state (bulk groups, uncommitted tcgen05 operations)."""
    return w.async_state.setdefault(key, {}).setdefault(lane, [])


def uniform(values: np.ndarray, w, ins, what: str) -> int:
    """The value every active lane gives (a warp-wide operand of a .sync.aligned instruction)."""
    active = values[w.wmask]
    if (active != active[0]).any():
        raise SimError(f"{w.name()}: the {what} of {ins.opcode} differs between lanes at {ins.where()}")
    return int(active[0])


def report(w, kind: str, ins, message: str) -> None:
    w.cta.launch.report(kind, w, ins.where(), message)


def _mbarrier(w, addr: int, ins):
    bar = w.cta.mbarriers.get(int(addr))
    if bar is None:
        report(w, "mbarrier", ins, f"no initialized mbarrier at shared address {int(addr):#x}")
    return bar


def complete_tx(w, addr: int, nbytes: int, ins) -> None:
    """complete_tx of `nbytes` on the core's mbarrier at shared `addr` (isa_sync.MBarrier)."""
    bar = _mbarrier(w, addr, ins)
    if bar is not None:
        bar.complete_tx(w, nbytes, ins.where())


def arrive(w, addr: int, ins) -> None:
    """One arrival on the mbarrier at shared `addr`."""
    bar = _mbarrier(w, addr, ins)
    if bar is not None:
        bar.arrive(w, 1, ins.where())


# TMA: cp.async.bulk.tensor ------------------------------------------------------------------

class _GlobalBytes:
    """tma's memory protocol over the core's GlobalMemory."""

    def __init__(self, memory, where):
        self.memory, self.where = memory, where

    def read(self, addresses, itemsize):
        offs = self.memory.offsets(addresses, itemsize, self.where)
        return self.memory.data[offs[:, None] + np.arange(itemsize)]

    def write(self, addresses, data):
        offs = self.memory.offsets(addresses, data.shape[1], self.where)
        self.memory.data[offs[:, None] + np.arange(data.shape[1])] = data


def _tensor_operand(ins, ctx):
    """(tensor map address of the warp, coordinate readers) of the `[tmap, {c0, ...}]` operand:
    a register holding a generic address, of global memory or of a kernel parameter
    (cvta.param). A parameter's name in its place is refused, as ptxas refuses it ("state
    space mismatch"): PTX takes the tensor map's generic address."""
    op = next((o for o in ins.operands if isinstance(o, Addr) and o.coords is not None), None)
    if op is None:
        raise ctx.error(f"{ins.opcode}: no [tensorMap, {{coordinates}}] operand")
    coords = [ctx.reader(c, "s32") for c in op.coords]
    if not isinstance(op.base, Reg):
        raise ctx.error(f"{ins.opcode}: the tensor map is a register holding its generic address "
                        f"(cvta.param of a parameter's), not {op.base}")
    return ctx.reader(op.base, "u64"), coords


def _tensor_map(w, value: int, ins) -> tma.TensorMap:
    launch = w.cta.launch
    if PARAM_WINDOW <= value < PARAM_WINDOW + WINDOW:      # a kernel parameter (cvta.param)
        raw = bytes(launch.params[value - PARAM_WINDOW:][:tma.PACKED_SIZE])
    else:                                           # a tensor map in global memory
        raw = bytes(launch.memory.get(value, tma.PACKED_SIZE))
    try:
        return tma.TensorMap.unpack(raw)
    except tma.TmaError as e:
        raise SimError(f"{w.name()}: {e} at {ins.where()}") from None


def _box_bytes(tmap, at: int) -> np.ndarray:
    return (tma.shared_addresses(tmap, at).reshape(-1, 1) + np.arange(tmap.dtype.itemsize)).reshape(-1)


class _TmaLoadOp(AsyncOp):
    def __init__(self, w, ins, tmap, coords, smem_addr, mbar):
        self.w, self.ins, self.tmap, self.coords, self.smem_addr, self.mbar = w, ins, tmap, coords, smem_addr, mbar
        self.where = ins.where()
        self.bytes = _box_bytes(tmap, smem_addr)
        w.cta.inflight_writes[self.bytes] += 1
        w.cta.n_inflight += 1

    def _run(self):
        cta = self.w.cta
        cta.inflight_writes[self.bytes] -= 1
        cta.n_inflight -= 1
        moved = tma.load(self.tmap, self.coords, _GlobalBytes(cta.launch.memory, self.where),
                         cta.smem, self.smem_addr)
        proxies.async_write(cta, self.bytes)
        complete_tx(self.w, self.mbar, moved, self.ins)


class _BulkStoreOp(AsyncOp):
    def __init__(self, w, ins, smem_bytes, action):
        self.w, self.where, self.smem_bytes, self.action = w, ins.where(), smem_bytes, action
        w.cta.inflight_reads[smem_bytes] += 1
        w.cta.n_inflight += 1

    def _run(self):
        self.w.cta.inflight_reads[self.smem_bytes] -= 1
        self.w.cta.n_inflight -= 1
        self.action()


@isa.register("cp.async.bulk.tensor")
def cp_async_bulk_tensor(ins, ctx):
    tmap_of, coord_readers = _tensor_operand(ins, ctx)
    load = "mbarrier::complete_tx::bytes" in ins.parts
    if not load and "bulk_group" not in ins.parts:
        raise ctx.error(f"{ins.opcode}: a load completes on an mbarrier, a store in a bulk group")
    if "im2col" in ins.parts or any(p.startswith("multicast") for p in ins.parts):
        raise ctx.error(f"{ins.opcode}: im2col and multicast TMA are not modelled")
    plain = [op for op in ins.operands if isinstance(op, Addr) and op.coords is None]
    if len(plain) != (2 if load else 1):
        raise ctx.error(f"{ins.opcode}: expected [dst], [tensorMap, {{...}}], [mbar] (load) "
                        "or [tensorMap, {...}], [src] (store)")
    smem = ctx.address(plain[0])
    mbar = ctx.address(plain[1]) if load else None

    def run(w):
        for lane in np.flatnonzero(w.wmask):        # each active thread issues one copy
            lane = int(lane)
            tmap = _tensor_map(w, int(tmap_of(w)[lane]), ins)
            coords = [int(c(w)[lane]) for c in coord_readers]
            at = int(smem(w)[lane])
            try:
                if load:
                    w.cta.launch.scheduler.issue(_TmaLoadOp(w, ins, tmap, coords, at, int(mbar(w)[lane])))
                else:
                    _issue_tma_store(w, ins, lane, tmap, coords, at)
            except tma.TmaError as e:
                raise SimError(f"{w.name()}: {e} at {ins.where()}") from None
    return run


def _issue_tma_store(w, ins, lane, tmap, coords, at) -> None:
    nbytes = _box_bytes(tmap, at)
    if (w.cta.inflight_writes[nbytes] > 0).any():
        report(w, "read-before-complete", ins, "a bulk store reads shared memory an asynchronous copy has not landed")
    proxies.check_async_read(w, nbytes, ins.where(), "the tensor store", lane)
    memory = _GlobalBytes(w.cta.launch.memory, ins.where())
    op = _BulkStoreOp(w, ins, nbytes, lambda: tma.store(tmap, coords, memory, w.cta.smem, at))
    lane_state(w, "bulk_open", lane).append(op)
    w.cta.launch.scheduler.issue(op)


# bulk groups --------------------------------------------------------------------------------

@isa.register("cp.async.bulk.commit_group")
def bulk_commit(ins, ctx):
    def run(w):
        for lane in np.flatnonzero(w.wmask):
            open_ops = lane_state(w, "bulk_open", int(lane))
            lane_state(w, "bulk_groups", int(lane)).append(list(open_ops))
            open_ops.clear()
    return run


@isa.register("cp.async.bulk.wait_group")
def bulk_wait(ins, ctx):
    allowed = int(ins.operands[0].value)

    def run(w):
        for lane in np.flatnonzero(w.wmask):
            groups = lane_state(w, "bulk_groups", int(lane))
            while len(groups) > allowed:
                for op in groups.pop(0):
                    op.complete()
    return run


# non-tensor bulk copies ---------------------------------------------------------------------

@isa.register("cp.async.bulk")
def cp_async_bulk(ins, ctx):
    """global -> shared on an mbarrier, shared -> global in a bulk group."""
    dst, src = ctx.address(ins.operands[0]), ctx.address(ins.operands[1])
    size = ctx.reader(ins.operands[2], "u32")
    to_shared = ins.parts[3].startswith("shared")          # cp.async.bulk.<dst>.<src>...
    if to_shared and len(ins.operands) != 4:
        raise ctx.error(f"{ins.opcode}: a load into shared memory completes on an mbarrier operand")
    mbar = ctx.address(ins.operands[3]) if to_shared else None

    def run(w):
        for lane in np.flatnonzero(w.wmask):
            lane = int(lane)
            d, s, n = int(dst(w)[lane]), int(src(w)[lane]), int(size(w)[lane])
            if n % 16 or d % 16 or s % 16:
                raise SimError(f"{w.name()}: cp.async.bulk needs 16-byte aligned addresses and size at {ins.where()}")
            if to_shared:
                w.cta.launch.scheduler.issue(_BulkLoadOp(w, ins, d, s, n, int(mbar(w)[lane])))
                continue
            smem_bytes = s + np.arange(n)
            if (w.cta.inflight_writes[smem_bytes] > 0).any():
                report(w, "read-before-complete", ins,
                       "a bulk store reads shared memory an asynchronous copy has not landed")
            proxies.check_async_read(w, smem_bytes, ins.where(), "the bulk store", lane)
            memory = w.cta.launch.memory
            memory.offsets(np.array([d]), 1, ins.where())
            op = _BulkStoreOp(w, ins, smem_bytes, lambda d=d, s=s, n=n: memory.put(d, w.cta.smem[s:s + n]))
            lane_state(w, "bulk_open", lane).append(op)
            w.cta.launch.scheduler.issue(op)
    return run


class _BulkLoadOp(AsyncOp):
    def __init__(self, w, ins, dst, src, n, mbar):
        self.w, self.ins, self.dst, self.src, self.n, self.mbar = w, ins, dst, src, n, mbar
        self.where = ins.where()
        w.cta.smem_offsets(np.array([dst, dst + n - 16]), 16, self.where)
        w.cta.launch.memory.offsets(np.array([src, src + n - 16]), 16, self.where)
        w.cta.inflight_writes[dst + np.arange(n)] += 1
        w.cta.n_inflight += 1

    def _run(self):
        cta = self.w.cta
        cta.inflight_writes[self.dst + np.arange(self.n)] -= 1
        cta.n_inflight -= 1
        cta.smem[self.dst:self.dst + self.n] = cta.launch.memory.get(self.src, self.n)
        proxies.async_write(cta, self.dst + np.arange(self.n))
        complete_tx(self.w, self.mbar, self.n, self.ins)


# elect.sync ---------------------------------------------------------------------------------

@isa.register("elect.sync")
def elect_sync(ins, ctx):
    """elect.sync d|p, membermask (PTX ISA, "Parallel Synchronization and Communication
    Instructions: elect.sync"): one leader among the active lanes of the member mask, the same
    for the same mask every time; d gets its lane id, p is true in the leader only. Which lane
    leads is not documented: the emulator takes the lowest, as the hardware is observed to."""
    names = getattr(ins.operands[0], "name", "").split("|")       # `_|%p` parses as a symbol
    if len(names) != 2:
        raise ctx.error("elect.sync takes d|p, membermask")
    put_lane = ctx.writer(Reg(names[0]), "b32") if names[0] != "_" else (lambda w, v: None)
    put_pred = ctx.writer(Reg(names[1]), "pred")
    members = ctx.reader(ins.operands[1], "b32")

    def run(w):
        mask = uniform(members(w), w, ins, "membermask")
        lanes = np.flatnonzero(w.wmask & (np.uint32(mask) >> np.arange(32, dtype=np.uint32) & 1).astype(bool))
        if lanes.size == 0:
            raise SimError(f"{w.name()}: elect.sync with no active lane in its membermask at {ins.where()}")
        leader = int(lanes[0])
        put_lane(w, np.full(32, leader, np.uint32))
        put_pred(w, np.arange(32) == leader)
    return run
