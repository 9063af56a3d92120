"""Memory instructions: ld, st (param, global, shared, local, generic; vectors), atom, red,
cvta, and cp.async with its groups and its mbarrier arrive.

Only the active lanes (`w.wmask`) touch memory; a misaligned address or one outside every
allocation (global), the CTA's shared memory or the thread's local memory is a SimError
naming the line. A shared memory read of bytes an in-flight operation will still write, or
a write of bytes one still reads or writes, is a race report (races.py).

Generic addresses (PTX ISA 5.1.7, "Generic addressing"): the shared and local state spaces
appear in the generic space as windows, `SHARED_WINDOW + offset` and `LOCAL_WINDOW + offset`;
every other generic address is a global one. cvta converts between them; an ld, st, atom or
red without a state space sorts each lane's address into its window. Local memory is each
thread's own bytes (`Warp.local`, sized by the kernel's .local variables).
"""
from __future__ import annotations

import numpy as np

from attnc_sim import isa, proxies, races
from attnc_sim.scheduler import AsyncOp
from attnc_sim.errors import SimError
from attnc_sim.state import DTYPE, LANES, WARP

_SPACES = ("param", "global", "shared", "local", "const")
SHARED_WINDOW = 1 << 44
LOCAL_WINDOW = 1 << 45
PARAM_WINDOW = 1 << 46          # a kernel parameter's generic address (cvta.param): a tensor map's
WINDOW = 1 << 32                # each window's size
_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
          "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8}


def _space(ins, ctx) -> str:
    space = next((p.split("::")[0] for p in ins.parts if p.split("::")[0] in _SPACES), "generic")
    if space == "const":
        raise ctx.error(f"{ins.opcode}: .const memory is not supported")
    return space


def _local_memory(w) -> np.ndarray:
    if w.local is None:
        w.local = np.zeros((WARP, max(w.cta.launch.program.local_size, 16)), np.uint8)
    return w.local


def _split(space: str, a: np.ndarray) -> list:
    """(space, lane selector, addresses in that space) for the active lanes' addresses `a`."""
    if space != "generic":
        return [(space, slice(None), a)]
    shared = (a >= SHARED_WINDOW) & (a < SHARED_WINDOW + WINDOW)
    local = (a >= LOCAL_WINDOW) & (a < LOCAL_WINDOW + WINDOW)
    if not shared.any() and not local.any():
        return [("global", slice(None), a)]
    out = [("global", ~(shared | local), a)]
    if shared.any():
        out.append(("shared", shared, a - SHARED_WINDOW))
    if local.any():
        out.append(("local", local, a - LOCAL_WINDOW))
    return out


def _local_index(w, lanes: np.ndarray, offs: np.ndarray, width: int, size: int, where: str) -> np.ndarray:
    """Flat element indices (of `size`-byte elements) of local offsets `offs` of threads `lanes`."""
    mem = _local_memory(w)
    if offs.size and ((offs & (width - 1)).any() or offs.min() < 0 or offs.max() + width > mem.shape[1]):
        bad = int(offs[((offs & (width - 1)) != 0) | (offs < 0) | (offs + width > mem.shape[1])][0])
        raise SimError(f"{w.name()}: local access at {bad:#x} ({width} bytes) outside the thread's "
                       f"{mem.shape[1]} bytes of local memory or misaligned: {where}")
    return (lanes * mem.shape[1] + offs) // size


def _gather(w, space, a, lanes, size, n, dtype, where) -> np.ndarray:
    """(lanes, n) elements read at addresses `a` of `space` (not generic)."""
    k = np.arange(n)
    if space == "global":
        mem = w.cta.launch.memory
        return mem.view(dtype)[(mem.offsets(a, size * n, where) // size)[:, None] + k]
    if space == "shared":
        cta = w.cta
        offs = cta.smem_offsets(a, size * n, where)
        if cta.n_inflight:
            races.check_read(w, offs, size * n, where)
        return cta.smem_view(dtype)[(offs // size)[:, None] + k]
    idx = _local_index(w, lanes, a, size * n, size, where)
    return w.local.reshape(-1).view(dtype)[idx[:, None] + k]


def _scatter(w, space, a, lanes, size, n, dtype, vals, where) -> None:
    k = np.arange(n)
    if space == "global":
        mem = w.cta.launch.memory
        mem.view(dtype)[(mem.offsets(a, size * n, where) // size)[:, None] + k] = vals
    elif space == "shared":
        cta = w.cta
        offs = cta.smem_offsets(a, size * n, where)
        if cta.n_inflight:
            races.check_write(w, offs, size * n, where)
        proxies.generic_write(w, lanes, offs, size * n)
        cta.smem_view(dtype)[(offs // size)[:, None] + k] = vals
    else:
        idx = _local_index(w, lanes, a, size * n, size, where)
        w.local.reshape(-1).view(dtype)[idx[:, None] + k] = vals


def _vector(ins) -> int:
    return next((int(p[1:]) for p in ins.parts if p in ("v2", "v4", "v8")), 1)


def lane_addresses(w, addr):
    """The active lanes' addresses and the active mask."""
    a = addr(w)
    return (a, None) if w.wfull else (a[w.wmask], w.wmask)


@isa.register("ld")
def ld(ins, ctx):
    ty = ins.parts[-1]
    space, n = _space(ins, ctx), _vector(ins)
    size = _BYTES[ty]
    dtype = DTYPE[ty] if ty not in ("bf16",) else np.uint16
    dests = [ctx.writer(op, ty) for op in ctx.vec(ins.operands[0])]
    addr = ctx.address(ins.operands[1])
    where = ins.where()
    if len(dests) != n:
        raise ctx.error(f"{ins.opcode} with {len(dests)} destinations")
    if space == "param":
        def ld_param(w):
            off = int(addr(w)[0])
            vals = w.cta.launch.params[off:off + size * n].view(dtype)
            for j, d in enumerate(dests):
                d(w, vals[j])
        return ld_param

    def load(w):
        a, m = lane_addresses(w, addr)
        lanes = LANES if m is None else LANES[m]
        parts = _split(space, a)
        if len(parts) == 1:
            vals = _gather(w, parts[0][0], a if space != "generic" else parts[0][2], lanes, size, n, dtype, where)
        else:
            vals = np.zeros((a.size, n), dtype)
            for sp, sel, aa in parts:
                vals[sel] = _gather(w, sp, aa[sel], lanes[sel], size, n, dtype, where)
        for j, d in enumerate(dests):
            if m is None:
                d(w, vals[:, j])
            else:
                full = np.zeros(WARP, dtype)
                full[m] = vals[:, j]
                d(w, full)
    return load


@isa.register("st")
def st(ins, ctx):
    ty = ins.parts[-1]
    space, n = _space(ins, ctx), _vector(ins)
    size = _BYTES[ty]
    dtype = DTYPE[ty] if ty not in ("bf16",) else np.uint16
    addr = ctx.address(ins.operands[0])
    srcs = [ctx.reader(op, ty) for op in ctx.vec(ins.operands[1])]
    where = ins.where()
    if space == "param":
        raise ctx.error("st.param is not supported")

    def store(w):
        a, m = lane_addresses(w, addr)
        vals = np.stack([s(w) for s in srcs], axis=1)
        lanes = LANES
        if m is not None:
            vals, lanes = vals[m], LANES[m]
        for sp, sel, aa in _split(space, a):
            if isinstance(sel, slice):
                _scatter(w, sp, aa, lanes, size, n, dtype, vals, where)
            else:
                _scatter(w, sp, aa[sel], lanes[sel], size, n, dtype, vals[sel], where)
    return store


_ATOM = {"add": lambda old, v, c: old + v, "min": lambda old, v, c: min(old, v), "max": lambda old, v, c: max(old, v),
         "exch": lambda old, v, c: v, "and": lambda old, v, c: old & v, "or": lambda old, v, c: old | v,
         "xor": lambda old, v, c: old ^ v, "cas": lambda old, v, c: c if old == v else old,
         "inc": lambda old, v, c: 0 if old >= v else old + 1}


@isa.register("atom", "red")
def atom(ins, ctx):
    """One lane after another in lane order: a legal serialization of the lanes' atomics."""
    ty = ins.parts[-1]
    space = _space(ins, ctx)
    op = next((p for p in ins.parts[1:] if p in _ATOM), None)
    if op is None or ty not in DTYPE or _vector(ins) != 1:
        raise ctx.error(f"{ins.opcode} is not supported")
    is_red = ins.parts[0] == "red"
    d = None if is_red else ctx.writer(ins.operands[0], ty)
    rest = ins.operands[0:] if is_red else ins.operands[1:]
    addr = ctx.address(rest[0])
    b = ctx.reader(rest[1], ty)
    c = ctx.reader(rest[2], ty) if op == "cas" else (lambda w: b(w))
    size, dtype, where, fn = _BYTES[ty], DTYPE[ty], ins.where(), _ATOM[op]

    def run(w):
        a, bv, cv = addr(w), b(w), c(w)
        old = np.zeros(WARP, dtype)
        with np.errstate(over="ignore"):
            for lane in np.flatnonzero(w.wmask):
                view, i = _element(w, space, int(a[lane]), int(lane), size, dtype, where)
                old[lane] = view[i]
                view[i] = dtype(fn(view[i], bv[lane], cv[lane]))
        if d is not None:
            d(w, old)
    return run


def _element(w, space: str, a: int, lane: int, size: int, dtype, where: str):
    """(a typed view, the index in it) of the element at address `a` of `space` for one lane."""
    space, _, (a,) = _split(space, np.array([a], np.int64))[-1] if space == "generic" else (space, 0, (a,))
    if space == "global":
        mem = w.cta.launch.memory
        return mem.view(dtype), int(mem.offsets(np.array([a]), size, where)[0]) // size
    if space == "shared":
        return w.cta.smem_view(dtype), int(w.cta.smem_offsets(np.array([a]), size, where)[0]) // size
    idx = _local_index(w, np.array([lane]), np.array([a]), size, size, where)
    return w.local.reshape(-1).view(dtype), int(idx[0])


@isa.register("cvta")
def cvta(ins, ctx):
    """cvta.space.size d, a (a state-space address to a generic one) and cvta.to.space.size
    (a generic address to the space's own); .global addresses are generic addresses. A
    kernel parameter's generic address (cvta.param, PTX ISA 9.7.9.18) is what a TMA
    instruction takes for a tensor map passed as a parameter; no ld or st reads it."""
    parts = ins.parts
    to = "to" in parts
    spaces = ("global", "shared", "local") if to else ("global", "shared", "local", "param")
    space = next((p.split("::")[0] for p in parts if p.split("::")[0] in spaces), None)
    if space is None:
        raise ctx.error(f"{ins.opcode}: only .global, .shared, .local (and to a generic address .param) "
                        f"addresses convert")
    ty = parts[-1]
    a, d = ctx.reader(ins.operands[1], "u64"), ctx.writer(ins.operands[0], ty)
    base = {"global": 0, "shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "param": PARAM_WINDOW}[space]
    where = ins.where()
    if not to:
        return lambda w: d(w, (a(w) + np.uint64(base)).astype(DTYPE[ty]))

    def run(w):
        v = a(w)
        if base:
            inside = (v >= base) & (v < base + WINDOW)
            if not inside[w.wmask].all():
                bad = int(v[w.wmask & ~inside][0])
                raise SimError(f"{w.name()}: cvta.to.{space} of {bad:#x}, not a generic {space} address, at {where}")
        d(w, (v - np.uint64(base)).astype(DTYPE[ty]))
    return run


# --- cp.async ---------------------------------------------------------------------

class CpAsync(AsyncOp):
    """One warp's cp.async: `cp` bytes per active lane from global to shared; bytes past
    a lane's `src_size` are zero-filled."""

    def __init__(self, w, dst, src, src_size, cp, where):
        self.cta, self.warp, self.dst, self.src, self.src_size, self.cp, self.where = \
            w.cta, w, dst, src, src_size, cp, where
        races.begin_write(self.cta, dst, cp)

    def _run(self):
        cta, cp = self.cta, self.cp
        races.end_write(cta, self.dst, cp)
        if cta.n_inflight:
            races.check_write(self.warp, self.dst, cp, self.where, by_async=True)
        proxies.async_write(cta, races.byte_span(self.dst, cp))
        mem = cta.launch.memory
        k = np.arange(cp)
        full = self.src_size is None or (self.src_size >= cp).all()
        if full and cp % 4 == 0:
            offs = mem.offsets(self.src, cp, self.where) if self.src.size else self.src
            w4 = np.arange(cp // 4)
            cta.smem_view(np.uint32)[(self.dst // 4)[:, None] + w4] = mem.view(np.uint32)[(offs // 4)[:, None] + w4]
            return
        n = np.minimum(self.src_size, cp)
        data = np.zeros((self.dst.size, cp), np.uint8)
        reads = n > 0
        if reads.any():
            mem.offsets(self.src[reads], 1, self.where)
            idx = (self.src - mem.BASE)[:, None] + k
            take = k[None, :] < n[:, None]
            data[take] = mem.data[idx[take]]
        cta.smem[self.dst[:, None] + k] = data


def _cp_state(w):
    st = w.async_state.get("cp.async")
    if st is None:
        st = w.async_state["cp.async"] = {"open": [], "groups": []}
    return st


@isa.register("cp.async.ca", "cp.async.cg")
def cp_async(ins, ctx):
    ops = ins.operands
    dst, src = ctx.address(ops[0]), ctx.address(ops[1])
    cp = ops[2].value
    src_size = ctx.reader(ops[3], "u32") if len(ops) > 3 and not _is_hint(ops[3]) else None
    where = ins.where()
    if cp not in (4, 8, 16):
        raise ctx.error(f"cp.async of {cp} bytes")

    def run(w):
        cta = w.cta
        d, m = lane_addresses(w, dst)
        s = src(w) if m is None else src(w)[m]
        n = None if src_size is None else (src_size(w) if m is None else src_size(w)[m])
        d = cta.smem_offsets(d, cp, where)
        op = CpAsync(w, d, s, n, cp, where)
        _cp_state(w)["open"].append(op)
        cta.launch.scheduler.issue(op)
    return run


def _is_hint(op) -> bool:
    return False


@isa.register("cp.async.commit_group")
def cp_async_commit(ins, ctx):
    def run(w):
        st = _cp_state(w)
        st["groups"].append(st["open"])
        st["open"] = []
    return run


@isa.register("cp.async.wait_group", "cp.async.wait_all")
def cp_async_wait(ins, ctx):
    keep = ins.operands[0].value if ins.operands else 0
    wait_all = ins.opcode == "cp.async.wait_all"

    def run(w):
        st = _cp_state(w)
        if wait_all:
            st["groups"].append(st["open"])
            st["open"] = []
        groups = st["groups"]
        done = groups[:len(groups) - keep] if keep else groups
        for group in done:
            for op in group:
                op.complete()
        st["groups"] = groups[len(groups) - keep:] if keep else []
    return run


class CpAsyncArrive(AsyncOp):
    """cp.async.mbarrier.arrive: an arrive-on the mbarrier once every cp.async the lanes
    issued before it has completed."""

    def __init__(self, w, ops, addrs, counts, noinc, where):
        self.warp, self.ops, self.addrs, self.counts, self.noinc, self.where = w, ops, addrs, counts, noinc, where

    def _run(self):
        from attnc_sim.isa_sync import mbarrier_at
        for op in self.ops:
            op.complete()
        for addr, count in zip(self.addrs, self.counts):
            mbarrier_at(self.warp, addr, self.where).arrive(self.warp, count, self.where,
                                                            pending_only=not self.noinc)


@isa.register("cp.async.mbarrier.arrive")
def cp_async_mbarrier_arrive(ins, ctx):
    addr = ctx.address(ins.operands[0])
    noinc, where = "noinc" in ins.parts, ins.where()

    def run(w):
        from attnc_sim.isa_sync import mbarrier_at
        st = _cp_state(w)
        ops = [op for g in st["groups"] for op in g if not op.done] + [op for op in st["open"] if not op.done]
        a, m = lane_addresses(w, addr)
        addrs, counts = np.unique(a, return_counts=True)
        if not noinc:
            for x, c in zip(addrs, counts):
                mbarrier_at(w, int(x), where).add_pending(w, int(c), where)
        event = CpAsyncArrive(w, ops, [int(x) for x in addrs], [int(c) for c in counts], noinc, where)
        w.cta.launch.scheduler.issue(event)
    return run
