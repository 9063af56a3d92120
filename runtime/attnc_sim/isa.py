"""The instruction registry and the operand accessors handlers are built from.

A handler family registers a factory for an opcode prefix (its first dot-separated
components):

    from attnc_sim import isa

    @isa.register("tcgen05.mma")
    def tcgen05_mma(ins: Instruction, ctx: isa.Context):
        d = ctx.writer(ins.operands[0], "b32")     # decode once...
        def run(w: Warp):                          # ...execute many times: one call
            ...
        return run

`lookup` picks the factory of the longest registered prefix of an opcode
(`cp.async.bulk.tensor` before `cp.async`). The factory runs once per instruction
when a kernel is decoded and returns `run(warp)`, which returns None to go on to the
next instruction, or one of the control codes below. A handler writes results only
in the lanes of `w.wmask` (`ctx.writer` does that).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from attnc_sim.errors import SimError
from attnc_sim.ptx import Addr, Imm, Instruction, Kernel, Reg, Sink, Sym, Vec
from attnc_sim.state import DTYPE, VIEW, WARP, WIDTH, RegLayout, Warp

# control codes a handler's run(w) may return
JUMP = 1        # the handler set w.pc itself
BLOCK = 2       # the warp cannot go on now (a barrier, an mbarrier wait): run others, retry later
EXIT = 3        # the active lanes exited

Handler = Callable[[Warp], "int | None"]
Factory = Callable[[Instruction, "Context"], Handler]

_REGISTRY: dict[str, Factory] = {}


def register(*prefixes: str):
    """Decorator: the factory handles opcodes that start with any of `prefixes`
    (whole components: "mma.sync" matches "mma.sync.aligned...", not "mma.syncx")."""
    def wrap(factory: Factory) -> Factory:
        for p in prefixes:
            if p in _REGISTRY and _REGISTRY[p] is not factory:
                raise SimError(f"two handlers registered for {p!r}")
            _REGISTRY[p] = factory
        return factory
    return wrap


def lookup(ins: Instruction) -> Factory:
    parts = ins.opcode.split(".")
    for n in range(len(parts), 0, -1):
        factory = _REGISTRY.get(".".join(parts[:n]))
        if factory is not None:
            return factory
    raise SimError(f"unsupported instruction {ins.opcode!r} at {ins.where()}")


def registered() -> list[str]:
    return sorted(_REGISTRY)


class Context:
    """What a handler factory may ask about the kernel it decodes: operand accessors,
    branch targets, addresses of parameters and shared variables."""

    def __init__(self, kernel: Kernel, layout: RegLayout, shared_addrs: dict[str, int],
                 param_offsets: dict[str, int], pc_of: dict[str, int]):
        self.kernel, self.layout = kernel, layout
        self.shared_addrs, self.param_offsets, self.pc_of = shared_addrs, param_offsets, pc_of
        self.ins: Instruction | None = None     # the instruction being decoded
        self.pc = 0

    def error(self, msg: str) -> SimError:
        return SimError(f"{msg} at {self.ins.where()}" if self.ins else msg)

    # -- registers ---------------------------------------------------------------

    def reg(self, op) -> tuple:
        """(register file, row) of a register operand."""
        if not isinstance(op, Reg) or op.name not in self.layout.rows:
            raise self.error(f"expected a declared register, got {op}")
        return self.layout.rows[op.name]

    def reader(self, op, ty: str) -> Callable[[Warp], np.ndarray]:
        """A function of the warp giving the operand's 32 lanes as the numpy dtype of `ty`."""
        dtype = DTYPE[ty]
        if isinstance(op, Imm):
            const = np.full(WARP, _imm_value(op, ty), dtype)
            return lambda w: const
        if isinstance(op, Reg) and op.name.startswith("!"):
            inner = self.reader(Reg(op.name[1:]), "pred")
            return lambda w: ~inner(w)
        if isinstance(op, Reg) and op.name not in self.layout.rows:
            return self._special(op.name, ty)
        if isinstance(op, Sym):
            value = self.symbol_value(op.name)
            const = np.full(WARP, value, dtype)
            return lambda w: const
        cls, row = self.reg(op)
        if cls == "pred" or ty == "pred":
            if cls != ty:
                raise self.error(f"{op.name} read as .{ty}")
            return lambda w: w.pred[row]
        key, check = (cls, row), self.pending_check([op], reading=True)
        if WIDTH[ty] == cls:
            attr = VIEW[ty]

            def read(w):
                if w.pending_regs and key in w.pending_regs:
                    check(w)
                return getattr(w, attr)[row]
            return read
        # a register of another width than the type: PTX's relaxed rules truncate or extend
        src = {16: "b16", 32: "b32", 64: "b64"}[cls]

        def read_cast(w):
            if w.pending_regs and key in w.pending_regs:
                check(w)
            return getattr(w, src)[row].astype(dtype)
        return read_cast

    def writer(self, op, ty: str) -> Callable[[Warp, np.ndarray], None]:
        """A function (warp, value) storing `value` (of `ty`'s dtype or castable to it) into
        the operand register's lanes in `w.wmask`."""
        if isinstance(op, Sink):
            return lambda w, v: None
        cls, row = self.reg(op)
        key, check = (cls, row), self.pending_check([op], reading=False)
        if cls == "pred":
            if ty != "pred":
                raise self.error(f"{op.name} written as .{ty}")
            attr = "pred"
        elif WIDTH[ty] == cls:
            attr = VIEW[ty]
        else:
            attr = None
        if attr is not None:
            def put(w, v):
                if w.pending_regs and key in w.pending_regs:
                    check(w)
                if w.wfull:
                    getattr(w, attr)[row] = v
                else:
                    np.copyto(getattr(w, attr)[row], v, where=w.wmask, casting="unsafe")
            return put
        # narrower type into a wider register: sign-extend signed types, zero-extend others
        dst = {16: ("b16", "s16"), 32: ("b32", "s32"), 64: ("b64", "s64")}[cls][ty.startswith("s")]
        dtype = DTYPE[ty]

        def put_ext(w, v):
            if w.pending_regs and key in w.pending_regs:
                check(w)
            v = np.asarray(v).astype(dtype, copy=False)
            if w.wfull:
                getattr(w, dst)[row] = v
            else:
                np.copyto(getattr(w, dst)[row], v, where=w.wmask, casting="unsafe")
        return put_ext

    def pending_check(self, ops, reading: bool) -> Callable[[Warp], None]:
        """A function of the warp reporting an access to any register of `ops` that an
        in-flight asynchronous operation still writes (Note [Pending registers] in
        state.py). Handlers that index register rows directly (mma.sync, wgmma) call it
        themselves; `reader` and `writer` call it for every register they touch."""
        regs = [(self.reg(op), op.name) for op in ops if isinstance(op, Reg) and op.name in self.layout.rows]
        ins = self.ins
        kind, verb = ("read-before-complete", "reads") if reading else ("write-before-complete", "writes")

        def check(w):
            if not w.pending_regs:
                return
            for key, name in regs:
                op = w.pending_regs.get(key)
                if op is None or op.done:       # done: the operation is writing its results now
                    continue
                where = ins.where() if ins is not None else "?"
                w.cta.launch.report(kind, w, where, f"{verb} {name} before the asynchronous operation "
                                                    f"writing it completed (issued at {op.where})")
                op.complete()
        return check

    def pair(self, op) -> tuple:
        """The two destinations of `d|p` (setp, shfl.sync), or (op, None)."""
        if isinstance(op, Reg) and "|" in op.name:
            first, second = op.name.split("|")
            return Reg(first.strip()), Reg(second.strip())
        return op, None

    def vec(self, op) -> list:
        return list(op.items) if isinstance(op, Vec) else [op]

    def _special(self, name: str, ty: str):
        dtype = DTYPE[ty]
        key = name.lstrip("%")

        def read(w):
            v = w.special.get(key)
            if v is None:
                v = w.cta.launch.special_value(w, key, self.ins_where_for(name))
            return v.astype(dtype, copy=False)
        if key not in SPECIALS:
            raise self.error(f"unknown register {name}")
        return read

    def ins_where_for(self, name: str) -> str:
        return name

    # -- addresses ---------------------------------------------------------------

    def address(self, op) -> Callable[[Warp], np.ndarray]:
        """A function of the warp giving the 32 lanes' addresses (int64) of an [address] operand."""
        if not isinstance(op, Addr):
            op = Addr(op, 0) if isinstance(op, (Reg, Sym)) else op
        if not isinstance(op, Addr):
            raise self.error(f"expected an address, got {op}")
        off = op.offset
        if op.base is None:
            const = np.full(WARP, off, np.int64)
            return lambda w: const
        if isinstance(op.base, Sym):
            const = np.full(WARP, self.symbol_value(op.base.name) + off, np.int64)
            return lambda w: const
        cls, row = self.reg(op.base)
        attr = {32: "b32", 64: "s64"}[cls]
        if off == 0:
            return lambda w: getattr(w, attr)[row].astype(np.int64)
        return lambda w: getattr(w, attr)[row].astype(np.int64) + off

    def symbol_value(self, name: str) -> int:
        """A symbol as a value: a shared variable's shared address, a parameter's offset."""
        if name in self.shared_addrs:
            return self.shared_addrs[name]
        if name in self.param_offsets:
            return self.param_offsets[name]
        raise self.error(f"unknown symbol {name}")

    def target(self, op) -> int:
        name = getattr(op, "name", None)
        if name not in self.pc_of:
            raise self.error(f"unknown branch target {op}")
        return self.pc_of[name]


SPECIALS = {f"{r}.{c}" for r in ("tid", "ntid", "ctaid", "nctaid") for c in "xyz"} | {
    "laneid", "warpid", "nwarpid", "smid", "nsmid", "gridid", "globaltimer", "globaltimer_lo", "clock",
    "clock64", "dynamic_smem_size", "total_smem_size", "lanemask_eq", "lanemask_lt", "lanemask_le",
    "lanemask_gt", "lanemask_ge"}


def _row_reader(attr: str, row: int):
    return lambda w: getattr(w, attr)[row]


def _imm_value(op: Imm, ty: str):
    if ty in ("f32", "f64", "f16"):
        return op.value
    if op.is_float and op.bits is not None:            # 0fXXXXXXXX used as bits (mov.b32 %r, 0f3F800000)
        return op.bits
    if op.is_float:
        raise SimError(f"float immediate {op.value} used as .{ty}")
    if ty == "pred":
        return bool(op.value)
    width = WIDTH[ty]
    value = op.value & ((1 << width) - 1)
    if ty.startswith("s") and value >> (width - 1):
        value -= 1 << width
    return value
