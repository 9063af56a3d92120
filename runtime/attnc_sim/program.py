"""Decode a parsed kernel once: a handler per instruction, and the reconvergence point of
every branch (the immediate post-dominator of its basic block, Note [Reconvergence])."""
from __future__ import annotations

from dataclasses import dataclass

from attnc_sim import isa
from attnc_sim.errors import SimError
from attnc_sim.ptx import Instruction, Kernel, Reg, collector_paused
from attnc_sim.state import RegLayout

BRANCHES = ("bra",)
EXITS = ("ret", "exit")


@dataclass
class Program:
    kernel: Kernel
    layout: RegLayout
    ops: list               # ops[pc]: run(warp) -> control code or None
    guards: list            # guards[pc]: None, or a function of the warp giving the guard predicate's lanes
    body: list[Instruction]
    reconverge: dict[int, int]      # pc of a branch -> pc where its paths reconverge
    shared_addrs: dict[str, int]
    static_smem: int
    param_offsets: dict[str, int]
    param_size: int
    local_addrs: dict | None = None     # .local variable -> its offset in each thread's local memory
    local_size: int = 0


@collector_paused
def decode(kernel: Kernel) -> Program:
    """Every instruction's handler (raises SimError naming an unsupported one and its line)."""
    import attnc_sim.families  # noqa: F401  (registers the handler families)
    layout = RegLayout.of(kernel.regs)
    shared_addrs, static = _shared_layout(kernel)
    param_offsets, param_size = _param_layout(kernel)
    local_addrs, local_size = _local_layout(kernel)
    ctx = isa.Context(kernel, layout, {**shared_addrs, **local_addrs}, param_offsets, kernel.labels)
    reconverge = _reconvergence(kernel)
    ops, guards = [], []
    ctx.reconverge = reconverge
    for pc, ins in enumerate(kernel.body):
        ctx.ins, ctx.pc = ins, pc
        ops.append(isa.lookup(ins)(ins, ctx))
        if ins.guard is None or ins.opcode.split(".")[0] in BRANCHES:
            guards.append(None)
        else:
            reg, negated = ins.guard
            guards.append(ctx.reader(Reg(("!" if negated else "") + reg.name), "pred"))
    ctx.ins = None
    return Program(kernel, layout, ops, guards, kernel.body, reconverge, shared_addrs, static,
                   param_offsets, param_size, local_addrs, local_size)


def _shared_layout(kernel: Kernel) -> tuple[dict[str, int], int]:
    """Static shared variables first, then the dynamic shared memory (every `.extern
    .shared` names it) at the largest alignment any of them asks for."""
    addrs, top = {}, 0
    for var in kernel.shared:
        if not var.extern:
            top = -(-top // var.align) * var.align
            addrs[var.name] = top
            top += var.size
    static = top
    align = max([v.align for v in kernel.shared if v.extern] + [16])
    dyn = -(-top // align) * align
    for var in kernel.shared:
        if var.extern:
            addrs[var.name] = dyn
    return addrs, static


def _local_layout(kernel: Kernel) -> tuple[dict[str, int], int]:
    """Each .local variable's offset in a thread's local memory (the local window's bytes)."""
    addrs, top = {}, 0
    for var in kernel.local:
        top = -(-top // var.align) * var.align
        addrs[var.name] = top
        top += var.size
    return addrs, top


def _param_layout(kernel: Kernel) -> tuple[dict[str, int], int]:
    offs, top = {}, 0
    for p in kernel.params:
        align = max(p.align, min(p.size, 8))
        top = -(-top // align) * align
        offs[p.name] = top
        top += p.size
    return offs, top


# Note [Reconvergence]: a warp whose lanes take different ways at a branch runs one way
# with the lanes that took it, then the other, and runs on with all of them from the
# branch's immediate post-dominator: the first instruction every path from the branch
# to the kernel's exit passes. The SIMT stack (engine.py) holds the way not yet run and
# the reconvergence entry; a path whose pc reaches its reconvergence pc pops the stack.

def _reconvergence(kernel: Kernel) -> dict[int, int]:
    body, n = kernel.body, len(kernel.body)
    if n == 0:
        return {}
    leaders = {0}
    for pc, ins in enumerate(body):
        head = ins.opcode.split(".")[0]
        if head in BRANCHES:
            leaders.add(kernel.labels[ins.operands[0].name] if hasattr(ins.operands[0], "name") else pc + 1)
            leaders.add(pc + 1)
        elif head in EXITS:
            leaders.add(pc + 1)
    leaders = sorted(x for x in leaders if x < n)
    block_of, starts = {}, leaders
    for b, start in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else n
        for pc in range(start, end):
            block_of[pc] = b
    exit_node = len(starts)
    succ = [set() for _ in range(len(starts) + 1)]
    for b, start in enumerate(starts):
        last = (starts[b + 1] if b + 1 < len(starts) else n) - 1
        ins = body[last]
        head = ins.opcode.split(".")[0]
        if head in BRANCHES:
            target = kernel.labels.get(ins.operands[0].name)
            if target is None:
                raise SimError(f"unknown branch target at {ins.where()}")
            succ[b].add(block_of.get(target, exit_node))
            if ins.guard is not None:
                succ[b].add(block_of.get(last + 1, exit_node))
        elif head in EXITS and ins.guard is None:
            succ[b].add(exit_node)
        else:
            succ[b].add(block_of.get(last + 1, exit_node))
            if head in EXITS:
                succ[b].add(exit_node)
    ipdom = _immediate_post_dominators(succ, exit_node)
    result = {}
    for pc, ins in enumerate(body):
        if ins.opcode.split(".")[0] in BRANCHES:
            p = ipdom[block_of[pc]]
            result[pc] = n if p is None or p == exit_node else starts[p]
    return result


def _immediate_post_dominators(succ: list[set], exit_node: int) -> list:
    """Cooper, Harvey and Kennedy's iterative dominator algorithm on the reversed CFG."""
    nodes = len(succ)
    pred_rev = succ                                  # successors are the reverse graph's predecessors
    # reverse postorder of the reverse graph from exit
    preds = [[] for _ in range(nodes)]
    for b, ss in enumerate(succ):
        for s in ss:
            preds[s].append(b)
    order, seen = [], set()
    stack = [(exit_node, iter(preds[exit_node]))]
    seen.add(exit_node)
    while stack:
        node, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            stack.pop()
            order.append(node)
        elif nxt not in seen:
            seen.add(nxt)
            stack.append((nxt, iter(preds[nxt])))
    rpo = list(reversed(order))
    index = {b: i for i, b in enumerate(rpo)}
    idom = [None] * nodes
    idom[exit_node] = exit_node
    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            new = None
            for p in pred_rev[b]:
                if idom[p] is None:
                    continue
                new = p if new is None else _intersect(p, new, idom, index)
            if new is not None and idom[b] != new:
                idom[b] = new
                changed = True
    return idom


def _intersect(a, b, idom, index):
    while a != b:
        while index[a] > index[b]:
            a = idom[a]
        while index[b] > index[a]:
            b = idom[b]
    return a
