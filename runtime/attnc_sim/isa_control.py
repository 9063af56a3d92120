"""Control flow: bra (with divergence, Note [Reconvergence] in program.py), ret, exit."""
from __future__ import annotations

from attnc_sim import isa
from attnc_sim.ptx import Reg


@isa.register("bra")
def bra(ins, ctx):
    target = ctx.target(ins.operands[0])
    if ins.guard is None:
        def jump(w):
            w.pc = target
            return isa.JUMP
        return jump
    reg, negated = ins.guard
    guard = ctx.reader(Reg(("!" if negated else "") + reg.name), "pred")
    reconverge, uniform, fall = ctx.reconverge[ctx.pc], ins.opcode == "bra.uni", ctx.pc + 1

    def branch(w):
        taken = guard(w) & w.mask
        if not taken.any():
            return None
        if w.full and taken.all() or (taken == w.mask).all():
            w.pc = target
            return isa.JUMP
        if uniform:
            raise ctx_error(w, "bra.uni taken by some active lanes only")
        w.stack.append((reconverge, w.mask, w.rpc))
        w.stack.append((fall, w.mask & ~taken, reconverge))
        w.pc, w.rpc = target, reconverge
        w.set_mask(taken)
        return isa.JUMP

    def ctx_error(w, msg):
        return ctx_error_type(f"{w.name()}: {msg} at {ins.where()}")
    from attnc_sim.errors import SimError as ctx_error_type
    return branch


@isa.register("ret", "exit")
def ret(ins, ctx):
    return lambda w: isa.EXIT
