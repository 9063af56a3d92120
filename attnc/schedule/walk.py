"""The walk over a CTA's query blocks, written into the roles (attn-warp-specialize):
persistent CTAs', and the cooperative role's pair of blocks.

Note [The walk over query blocks]: with `persistent` on attn.warp_specialize the grid has
at most one CTA per SM and each CTA runs several query blocks, one per round of the grid
(the kernel's order: Note [Persistent CTAs] in attnc/backend/sm90a_ws.py). Every role
runs its program once per block, so each role's program is wrapped in the walk:

    %rounds = "attn.walk_rounds"()
    scf.for %round = 0 to %rounds {
      %has, %b, %h, %m_block = "attn.walk_block"(%round) {order = "snake"}
      scf.if %has { the program, with %b, %h, %m_block for the kernel's arguments }
    }

The program's rings run on across blocks: attn-insert-pipelines carries each ring's
(stage, phase) through the loop and out of the branch (the round without a block
yields it unchanged), so the producer refills the slots where the consumers' last block
left them, and Q's one slot is waited for with the next phase each round (its empty
mbarrier: Q's release after a block's last QK^T). attn-verify-pipeline runs three rounds
(Note [Key blocks the check runs] in verify.py). attn-overlap-gemms moves the consumers'
epilogue to the next round where the kernel does (Note [The next block's first QK^T in
the IR] in walk_ahead.py). The lowering builds the walk as the kernel's own, checks its
order (`check_walk`) and the rest op by op: what the walk carries and where it starts,
the previous block's epilogue (Note [The walk followed in full] in
attnc/backend/role_shell.py).

Note [Two query blocks in the IR]: with `q_blocks_per_cta = 2` on attn-warp-specialize the
cooperative role of sm_80 runs two query blocks per CTA, nb - 1 - c and then c (nb =
cdiv(M, block_m), c = ctaid.x; one block where they meet: Note [Two query blocks per
CTA] in attnc/backend/forward.py). Its program stands in the walk above with the order
"pairs": `attn.walk_rounds` is 2 and round 1 has a block where c < nb - 1 - c.
attn-insert-pipelines starts the rings over in each round (every copy has landed and
every thread is past its reads by the round's end: a wait for every group and a CTA
barrier) and moves a block's epilogue into the next round, after that round's first
loads, as the kernel issues them (Note [The next block's loads in the IR] in
walk_pairs.py).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from attnc.ir import roles as R

# How the CTAs take the query blocks, round by round (G CTAs, c = ctaid.x): "snake", block
# rG + c in even rounds and rG + G - 1 - c in odd ones, so that a CTA that had a heavy block
# gets a light one next (the heaviest, last m_block, first); "linear", rG + c every round.
ORDERS = ("snake", "linear")
ORDER = ORDERS[0]
PAIRS = "pairs"         # Note [Two query blocks in the IR]


def walk_blocks(role: ir.Operation, kernel: ir.Operation, order: str = ORDER) -> None:
    """Note [The walk over query blocks], on `role` of `kernel` (L3), taking the blocks in
    `order` (one of ORDERS, or PAIRS)."""
    block = R.role_block(role)
    ops = [op.operation for op in block.operations][:-1]
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint.at_block_begin(block), role.location:
        zero = arith.ConstantOp(i32, 0).result
        one = arith.ConstantOp(i32, 1).result
        rounds = R.create(R.WALK_ROUNDS, [i32]).result
        loop = scf.ForOp(zero, rounds, one)
        with ir.InsertionPoint(loop.body):
            item = walk_block(loop.induction_variable, order)
            branch = scf.IfOp(item.results[0])
            with ir.InsertionPoint(branch.then_block):
                end = scf.YieldOp([])
            scf.YieldOp([])
    for op in ops:
        op.move_before(end)
    for arg, value in zip(kernel.regions[0].blocks[0].arguments, list(item.results)[1:]):
        for use in list(arg.uses):
            if inside(use.owner, role):
                use.owner.operands[use.operand_number] = value


def walk_block(rnd: ir.Value, order: str) -> ir.Operation:
    """attn.walk_block of round `rnd`, at the insertion point."""
    i32, i1 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(1)
    return R.create(R.WALK_BLOCK, [i1, i32, i32, i32], [rnd], {"order": order})


def inside(op, ancestor: ir.Operation) -> bool:
    """Whether `op` is `ancestor` or stands in its regions."""
    op = getattr(op, "operation", op)
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
        op = getattr(op, "operation", op) if op is not None else None
    return False


def walk_order(role: ir.Operation) -> str | None:
    """The order of `role`'s walk over query blocks, or None where it runs one block."""
    branch = R.walk_branch(role)
    return R.attrs_of(branch.operands[0].owner).get("order") if branch is not None else None


def walk_order_of(kernel: ir.Operation) -> str:
    """The order of the kernel's walk (as check_walk found it), or the default."""
    walks = R.ops_in(kernel.regions[0].blocks[0], (R.WALK_BLOCK,))
    return R.attrs_of(walks[0])["order"] if walks else ORDER


def check_walk(kernel: ir.Operation, pass_name: str) -> str | None:
    """The walk a lowering builds as its kernel's: in every role of a persistent plan,
    taking the blocks in one of ORDERS, the same; in the one role of a cooperative plan
    the pair of Note [Two query blocks in the IR]; in no role of another. Returns the
    order (None: no walk)."""
    from attnc.ir import error_at

    persistent = R.is_persistent(kernel)
    roles = R.role_ops(kernel)
    orders: dict[str, ir.Operation] = {}
    for role in roles:
        name = R.name_of(role)
        walks = R.ops_in(R.role_block(role), (R.WALK_BLOCK,))
        if persistent and R.walk_branch(role) is None:
            raise error_at(role, f"{pass_name}: persistent = true on attn.warp_specialize, and role '{name}' has no "
                                 f"walk over query blocks (Note [The walk over query blocks] in "
                                 f"attnc/schedule/walk.py)")
        for walk in walks:
            order = R.attrs_of(walk).get("order")
            if persistent and order not in ORDERS:
                raise error_at(walk, f"{pass_name} walks the query blocks in one of the orders "
                                     f"{', '.join(ORDERS)} (Note [Persistent CTAs] in attnc/backend/sm90a_ws.py), "
                                     f"and this {R.WALK_BLOCK} asks for {order!r}")
            if not persistent and order != PAIRS:
                raise error_at(walk, f"{pass_name}: role '{name}' walks query blocks in the order {order!r}, and "
                                     f"attn.warp_specialize is not persistent = true; without it a walk is the "
                                     f"cooperative role's pair of blocks, order {PAIRS!r} (Notes [The walk over "
                                     f"query blocks] and [Two query blocks in the IR] in attnc/schedule/walk.py)")
            if order == PAIRS and len(roles) > 1:
                raise error_at(walk, f"{pass_name}: two query blocks per CTA are the cooperative role's (Note [Two "
                                     f"query blocks in the IR] in attnc/schedule/walk.py), and this plan has "
                                     f"{len(roles)} roles")
            if order == PAIRS and R.walk_branch(role) is None:
                raise error_at(walk, f"{pass_name}: the pair of query blocks is walked by an scf.for over "
                                     f"{R.WALK_ROUNDS} holding {R.WALK_BLOCK} and the scf.if over its block (Note "
                                     f"[The walk over query blocks] in attnc/schedule/walk.py)")
            orders.setdefault(order, walk)
            if len(orders) > 1:
                raise error_at(walk, f"{pass_name}: every role of a CTA walks the query blocks in one order, and "
                                     f"this {R.WALK_BLOCK} takes them {order!r}, another {next(iter(orders))!r}")
    return next(iter(orders), None)
