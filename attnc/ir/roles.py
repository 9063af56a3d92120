"""Builders and readers of the L3-L5 ops (attn.irdl.mlir, "L3-L5"): roles, channels,
buffers and synchronization on the tile program.

L3 (attn-warp-specialize): the kernel's program becomes one attn.warp_specialize whose
block declares the channels and holds one attn.role per role; a value crossing roles
goes through `attn.put` / `attn.get` on a channel:

    "attn.warp_specialize"() ({
      %kv = "attn.channel"() {name = "kv", producer = "producer", consumer = "consumer0",
                              transport = "cp.async.mbarrier", space = "smem", stages = 2,
                              tile = ["k", "v"], ...}
      "attn.role"() ({  scf.for ... { %k = attn.load ...; "attn.put"(%kv, %k) {tile = "k"} } })
                    {name = "producer", warps = [0, 1, 2, 3], regs = 24}
      "attn.role"() ({  scf.for ... { %k = "attn.get"(%kv) {tile = "k"}; attn.mma ... } })
                    {name = "consumer0", warps = [4, 5, 6, 7], regs = 240}
    })

L4 (attn-alloc-smem / -tmem): `buffers` on each channel op, one dictionary per buffer.
L5 (attn-insert-pipelines): attn.mbarrier_init values beside the channels; in the roles,
put/get replaced by mbarrier waits / arrives / expect_tx, cp.async arrivals on mbarriers,
slot writes and reads and cp.async groups, with each ring's (stage, phase) as i32 values
carried by the loops; with ping-pong, the consumers' named barriers around their GEMMs.
"""
from __future__ import annotations

from mlir import ir

WARP_SPECIALIZE = "attn.warp_specialize"
ROLE = "attn.role"
CHANNEL = "attn.channel"
PUT = "attn.put"
GET = "attn.get"
MBARRIER_INIT = "attn.mbarrier_init"
MBARRIER_WAIT = "attn.mbarrier_wait"
MBARRIER_ARRIVE = "attn.mbarrier_arrive"
MBARRIER_EXPECT_TX = "attn.mbarrier_expect_tx"
TCGEN05_COMMIT = "attn.tcgen05_commit"
CP_ASYNC_MBARRIER_ARRIVE = "attn.cp_async_mbarrier_arrive"
RING_ADVANCE = "attn.ring_advance"
SLOT_WRITE = "attn.slot_write"
SLOT_READ = "attn.slot_read"
CP_ASYNC_COMMIT = "attn.cp_async_commit"
CP_ASYNC_WAIT = "attn.cp_async_wait"
CTA_BARRIER = "attn.cta_barrier"
NAMED_BARRIER_ARRIVE = "attn.named_barrier_arrive"
NAMED_BARRIER_SYNC = "attn.named_barrier_sync"
FIRST_BLOCK_GUESS = "attn.first_block_guess"  # L5 (early_first): a cooperative role's first key block guessed
MMA_WAIT = "attn.mma_wait"      # L5 (sm_90a's overlapped consumers): async GEMMs landed
WALK_ROUNDS = "attn.walk_rounds"  # L3 (persistent CTAs): the rounds of the walk over query blocks
WALK_BLOCK = "attn.walk_block"    # L3 (persistent CTAs): a round's query block
YIELD = "gpu.yield"
PINGPONG = "pingpong"            # on attn.warp_specialize: the consumer warpgroups take turns
PERSISTENT = "persistent"        # on attn.warp_specialize: each CTA runs several query blocks
KV_WRITES = (PUT, SLOT_WRITE)    # where a role hands a tile to a channel (L3, L5)
RANGES = "ranges"                # on attn.warp_specialize: each role's range_digest as made
KEY_RANGE = "key_range"          # on attn.kernel (L2): its key_range_digest as made


def i64(x: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(x))


def attr(x) -> ir.Attribute:
    """A Python value (bool, int, str, tuple, dict) as an attribute."""
    if isinstance(x, ir.Attribute):
        return x
    if isinstance(x, bool):
        return ir.BoolAttr.get(x)
    if isinstance(x, int):
        return i64(x)
    if isinstance(x, str):
        return ir.StringAttr.get(x)
    if isinstance(x, (tuple, list)):
        return ir.ArrayAttr.get([attr(e) for e in x])
    if isinstance(x, dict):
        return ir.DictAttr.get({k: attr(v) for k, v in x.items()})
    raise TypeError(f"no attribute for {x!r}")


def value_of(a: ir.Attribute):
    """The Python value of an attribute `attr` makes (and of a TypeAttr: its text)."""
    if isinstance(a, ir.BoolAttr):
        return a.value
    if isinstance(a, ir.IntegerAttr):
        return a.value
    if isinstance(a, ir.StringAttr):
        return a.value
    if isinstance(a, ir.ArrayAttr):
        return tuple(value_of(e) for e in a)
    if isinstance(a, ir.DictAttr):
        return {a[i].name: value_of(a[i].attr) for i in range(len(a))}
    return str(a)


def attrs_of(op: ir.Operation) -> dict:
    return {name: value_of(op.attributes[name]) for name in op.attributes}


def create(name: str, results=(), operands=(), attributes=None, regions: int = 0) -> ir.Operation:
    return ir.Operation.create(name, results=list(results), operands=list(operands),
                               attributes={k: attr(v) for k, v in (attributes or {}).items()},
                               regions=regions)


def chan_type() -> ir.Type:
    return ir.Type.parse("!attn.chan")


def mbar_type() -> ir.Type:
    return ir.Type.parse("!attn.mbar")


def region_op(name: str, attributes=None) -> tuple[ir.Operation, ir.Block]:
    """An op with one region of one block (no arguments) ending in gpu.yield; its block."""
    op = create(name, attributes=attributes, regions=1)
    block = op.regions[0].blocks.append()
    with ir.InsertionPoint(block):
        create(YIELD)
    return op, block


# --- readers ------------------------------------------------------------------------
def warp_specialize_of(kernel: ir.Operation) -> ir.Operation | None:
    """The attn.warp_specialize of an attn.kernel (L3 and later), or None (L2)."""
    for op in kernel.regions[0].blocks[0].operations:
        if op.operation.name == WARP_SPECIALIZE:
            return op.operation
    return None


def is_persistent(kernel: ir.Operation) -> bool:
    """Whether the plan of an attn.kernel (L3 and later) has persistent CTAs: `persistent`
    on its attn.warp_specialize (Note [The walk over query blocks] in attnc/schedule/walk.py)."""
    return bool(attrs_of(warp_specialize_of(kernel)).get(PERSISTENT, False))


def _ops_named(kernel: ir.Operation, name: str) -> list[ir.Operation]:
    ws = warp_specialize_of(kernel)
    if ws is None:
        return []
    return [op.operation for op in ws.regions[0].blocks[0].operations if op.operation.name == name]


def role_ops(kernel: ir.Operation) -> list[ir.Operation]:
    return _ops_named(kernel, ROLE)


def channel_ops(kernel: ir.Operation) -> list[ir.Operation]:
    return _ops_named(kernel, CHANNEL)


def mbarrier_ops(kernel: ir.Operation) -> list[ir.Operation]:
    return _ops_named(kernel, MBARRIER_INIT)


def role_named(kernel: ir.Operation, name: str) -> ir.Operation:
    """The role `name` of `kernel`'s plan (StopIteration where it has none)."""
    return next(r for r in role_ops(kernel) if name_of(r) == name)


def channel_named(kernel: ir.Operation, name: str) -> ir.Operation:
    """The channel `name` of `kernel`'s plan (StopIteration where it has none)."""
    return next(c for c in channel_ops(kernel) if name_of(c) == name)


def name_of(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["name"]).value


def role_block(role: ir.Operation) -> ir.Block:
    return role.regions[0].blocks[0]


def body_block(role: ir.Operation) -> ir.Block:
    """The block holding the role's program for one query block: the role's, or with
    persistent CTAs the walk's branch (Note [The walk over query blocks] in
    attnc/schedule/walk.py)."""
    branch = walk_branch(role)
    return branch.regions[0].blocks[0] if branch is not None else role_block(role)


def walk_branch(role: ir.Operation) -> ir.Operation | None:
    """The scf.if over a round's query block of a persistent role, or None."""
    for op in role_block(role).operations:
        op = op.operation
        if op.name != "scf.for":
            continue
        for inner in op.regions[0].blocks[0].operations:
            inner = inner.operation
            if inner.name == "scf.if" and is_walk_branch(inner):
                return inner
    return None


def is_walk_branch(op: ir.Operation) -> bool:
    """Whether `op` is the scf.if over a round's query block (its test attn.walk_block's)."""
    test = op.operands[0].owner if op.name == "scf.if" and len(op.operands) else None
    return getattr(test, "name", "") == WALK_BLOCK


def ops_in(block: ir.Block, names) -> list[ir.Operation]:
    """Every op named one of `names` in `block` and the regions under it, in program order."""
    found = []

    def visit(op):
        if op.name in names:
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    for op in block.operations:
        op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def pass_loc(pass_name: str, near: ir.Operation | ir.Location) -> ir.Location:
    """The location of an op `pass_name` creates for `near`: the pass's name around it."""
    loc = near if isinstance(near, ir.Location) else near.location
    return ir.Location.name(pass_name, childLoc=loc)


# Note [The key range as made]: the kernels build the bounds of their loops over key
# blocks and the tests of their branches as their own: from the key range attn-tile and
# attn-analyze-masks give (the mask's kv_range function, which the lowerings do read), cut
# into the loops of each tile class, rotated by attn-overlap-gemms. An edit of that index
# arithmetic is refused, at every level, rather than built as the default: attn-tile and
# attn-analyze-masks record the program's (`key_range` on attn.kernel), which
# attn-warp-specialize compares; attn-warp-specialize records each role's (`ranges` on
# attn.warp_specialize), which attn-overlap-gemms follows through its rotation and the
# lowerings compare -- sm_80's role too, whose ops are otherwise built as they stand. To
# take other key blocks, edit the mask (or kv_range) and run attn-analyze-masks again. A
# loop's bounds include the key block of its step where its body starts with one (Note
# [Key blocks top down] in attnc/passes/tile_program.py).
def _bounds(op: ir.Operation) -> str:
    """The bounds of a loop or the test of a branch as the index arithmetic that makes
    them; "" for another op."""
    from attnc.passes.tile_program import step_block_op

    if op.name not in ("scf.for", "scf.if"):
        return ""
    values = list(op.operands[:3] if op.name == "scf.for" else op.operands[:1])
    block = step_block_op(op) if op.name == "scf.for" else None
    if block is not None:
        values += list(block.results)       # a KV loop's block of its step
    return str([_expression(v, {}) for v in values])


def range_digest(role: ir.Operation) -> str:
    """The bounds of the role's loops and the tests of its branches (Note [The key range
    as made]), but for those the lowering builds op by op (`_steps`) and the walk's over
    query blocks (its loop, the branch over a round's block, an epilogue of a carried
    round's block: the lowerings check those as the walk's, Note [The walk over query
    blocks] in attnc/schedule/walk.py)."""
    return _digest(_steps(role, lambda op: f"{op.name} {_bounds(op)}"
                          if op.name in ("scf.for", "scf.if") and not _of_walk(op) else None))


def _of_walk(op: ir.Operation) -> bool:
    if op.name == "scf.for":
        return getattr(op.operands[1].owner, "name", "") == WALK_ROUNDS
    then = op.regions[0].blocks[0] if op.regions[0].blocks else None
    first = next(iter(then.operations), None) if then is not None else None
    return is_walk_branch(op) or getattr(first, "name", "") == WALK_BLOCK


def rewrite_range(role: ir.Operation, rewrite) -> None:
    """`rewrite()`, a pass's rewrite of `role`'s loops or branches; where the role's key
    range was the plan's (its digest as recorded), the digest follows the rewrite, so that
    an edit made before stays one the lowering sees (Note [The key range as made]). A
    digest not recorded is not compared."""
    ws = role.parent
    recorded = value_of(ws.attributes[RANGES]) if RANGES in ws.attributes else {}
    name = name_of(role)
    as_made = name in recorded and recorded[name] == range_digest(role)
    rewrite()
    if as_made:
        recorded[name] = range_digest(role)
        ws.attributes[RANGES] = ir.DictAttr.get({k: ir.StringAttr.get(v) for k, v in recorded.items()})


def key_range_digest(kernel: ir.Operation) -> str:
    """The bounds of the L2 program's loops and the tests of its branches (Note [The key
    range as made])."""
    out: list[str] = []

    def visit(op):
        if op.name in ("scf.for", "scf.if"):
            out.append(f"{op.name} {_bounds(op)}")
        return ir.WalkResult.ADVANCE

    for op in kernel.regions[0].blocks[0].operations:
        op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return _digest(out)


def record_key_range(kernel: ir.Operation) -> None:
    kernel.attributes[KEY_RANGE] = ir.StringAttr.get(key_range_digest(kernel), kernel.context)


def _expression(value: ir.Value, memo: dict, depth: int = 0) -> str:
    """`value` as the ops that compute it from the role's arguments, constants, dims and
    key ranges (Note [The key range as made]): arith ops by name and attributes, a block argument
    by its number."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return f"arg{ir.BlockArgument(value).arg_number}"
    if value in memo:
        return memo[value]
    op = owner.operation
    if depth > 32 or op.regions:
        text = f"{op.name}#{ir.OpResult(value).result_number}"
    else:
        attrs = sorted((k, str(v)) for k, v in attrs_of(op).items())
        args = ",".join(_expression(v, memo, depth + 1) for v in op.operands)
        text = f"{op.name}{attrs}({args})#{ir.OpResult(value).result_number}"
    memo[value] = text
    return text


def _steps(role: ir.Operation, step) -> list[str]:
    """`step(op)` of every op of the role (pre-order) for which it is not None; of a role
    whose trips the lowering builds op by op, not those of its KV loops' bodies."""
    from attnc.passes.tile_program import KV_LOOP

    out: list[str] = []
    shell = trips_op_by_op(role)

    def visit(op):
        text = step(op)
        if text is not None:
            out.append(text)
        if shell and op.name == "scf.for" and KV_LOOP in op.attributes:
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    for op in role_block(role).operations:
        op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return out


# Note [Roles followed in full]: every op of a role is the kernel's, built op by op or
# checked op by op -- sm_80's cooperative role built in the order its ops stand (Note [The
# role op by op] in attnc/backend/kv_steps.py); of sm_90a's roles the trips of their KV
# loops and the steps before and after them in the scf.if over the key range built by the
# target's patterns, and what stands around those checked op by op
# (attnc/backend/role_shell.py): nothing but index arithmetic between the loops and the
# starting values' yield in the else branch, a consumer warpgroup's wait for Q, the
# epilogue (the cooperative role's wait for every copy, the finalize of the range's O, m
# and l, O's and the LSE's stores at the block), nothing after the producer's loads,
# ping-pong's turns outside the range and, with persistent CTAs, the walk over query
# blocks and what it carries (Note [The walk followed in full] there). So an edit is
# built as it stands, once attn-verify-pipeline found it sound, or refused at its op;
# no role is compared with a digest of the plan, but for the bounds of its loops and the
# tests of its branches (Note [The key range as made]).


def built_op_by_op(role: ir.Operation) -> bool:
    """Whether the lowering of `role`'s kernel builds the role op by op, in the order its
    ops stand (sm_80's cooperative role: Notes [Steps op by op] and [The role op by op] in
    attnc/backend/kv_steps.py and role_prologue.py)."""
    kernel = role.parent.parent if role.parent is not None else None
    target = attrs_of(kernel).get("target") if kernel is not None else None
    return target == "sm_80" and name_of(role) == "compute"


def trips_op_by_op(role: ir.Operation) -> bool:
    """Whether the lowering builds the trips of `role`'s KV loops op by op, in the order
    their ops stand (sm_90a's producer and the consumer warpgroups it feeds, and its
    cooperative role: Notes [Loads op by op] in attnc/backend/load_steps.py, [Overlapped
    steps op by op] in attnc/backend/wgmma_steps.py and [Cooperative steps op by op] in
    attnc/backend/coop_steps.py); its range digest leaves those loops' bodies out (Note
    [The key range as made])."""
    kernel = role.parent.parent if role.parent is not None else None
    if kernel is None or attrs_of(kernel).get("target") != "sm_90a":
        return False
    name = name_of(role)
    return name in ("producer", "compute") or (name.startswith("consumer")
                                               and any(name_of(r) == "producer" for r in _ops_named(kernel, ROLE)))


# Note [Verified as it stands]: attn-verify-pipeline remembers, for the process, a digest
# of each kernel it found sound -- its roles, channels and mbarriers as printed -- and a
# lowering that builds ops as they stand, and must know them sound, runs the check again
# only for a kernel whose digest it does not remember: one edited since, or one read from
# a file. attn-kernel-choices, which only adds attributes, has the kernel it annotates
# remembered afresh. The IR is not changed. A check that runs beside the later passes
# (Note [The check beside the lowering] in attnc/schedule/beside.py) is remembered as it
# starts, so one that then fails forgets every digest (`forget_verified`): the passes after
# it may have remembered the kernels they made of it.
_VERIFIED: set[str] = set()


def contents_digest(kernel: ir.Operation) -> str:
    ws = warp_specialize_of(kernel)
    # printed whole, not op by op: each op printed alone numbers the module's values again
    text = str(ws) if ws is not None else ""
    return _digest([text, str(kernel.attributes["block_n"]) if "block_n" in kernel.attributes else ""])


def remember_verified(kernel: ir.Operation) -> None:
    _VERIFIED.add(contents_digest(kernel))


def verified_as_is(kernel: ir.Operation) -> bool:
    return contents_digest(kernel) in _VERIFIED


def forget_verified() -> None:
    _VERIFIED.clear()


def _digest(seq: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(seq).encode()).hexdigest()[:16]
