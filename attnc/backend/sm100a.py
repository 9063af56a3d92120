"""attn-lower-sm100a's kernel: the L5 plan of attn.kernel lowered op by op (design.md §3, L6).

Note [The sm_100a kernel, op by op]: the kernel is the roles of attn.warp_specialize, each
run by its warps (`warps` on attn.role), every op of its region lowered in the order it
stands by a pattern (`PATTERNS`: one attn op -> PTX through the builders of tcgen05.py and
nvgpu_builders.py), `scf.for` / `scf.if` rebuilt around the lowered ops and arith copied.
Nothing of the plan is taken from elsewhere: the shared-memory and tensor-memory buffers are
the channels' `buffers`, the mbarriers the attn.mbarrier_init ops (counts, stages), the
(stage, phase) of each ring the values the loops carry. What runs before the roles is the
CTA's setup: the mbarriers initialized, tensor memory allocated (all 512 columns, by the
MMA role's warp, which frees them once every role is done) and every O accumulator zeroed
(Note [Accumulators start at zero]).

A value is lowered to what its consumers need, not always at its op (the patterns and
these values: sm100a_ops.py, sm100a_values.py): a tile read from a channel (`attn.slot_read`) is its slot
(`Slot`), which an MMA takes as a descriptor or a tensor-memory address and the softmax
loads; a load (`attn.load`) is issued as TMA by the slot write that takes it; S = Q K^T
(`attn.mma` qk) is issued at its op into the tensor memory of the slot its result is
written to (Note [MMAs into their slot] in attnc/schedule/sync_ir.py); P.V accumulates into
the tensor memory of its O operand; the rescaled and the final O are computed where they
are written (Note [O in chunks]). The softmax's max, sum and P and the rescale factors are
lowered at their op.

Register layouts: a softmax or correction warpgroup's thread owns one row of its Q tile, row
32 (warp % 4) + lane, the tensor-memory lane it reaches (PTX ISA 9.7.16.8.1); its row of S or
O is a tcgen05.ld.32x32b of that lane. The MMA role's warp and the load role's issue from
lane 0.

Note [O in chunks]: the correction warpgroup's budget (64 registers, which the softmax
warpgroups' 200 leave) holds no whole row of O (128 floats at head dim 128). So a rescale
and the final O / l are lowered where their result is written: O's row read in chunks of 16
columns (as FlashAttention-4's correction reads it), scaled, written to the slot (its
tensor memory for the rescaled O, the thread's shared-memory row for the final one). O is read after the arrival that releases its
accumulator channel (o_acc) then; no MMA writes that tensor memory before the write is
published (o_scaled's full barrier: the P.V that accumulates into it waits for it), which
attn-verify-pipeline checks of the plan. The factor (alpha, 1 / l) is read at its op.

Note [Registers per warpgroup]: see `_warpgroups`.

Note [O through TMA]: the final O leaves as FlashAttention-4's does. Each correction thread
writes its row of O / l into the o channel's slot in the layout a TMA store reads: column
blocks of the slot's swizzle width (128 bytes; 64 where the row does not fill 128-byte
blocks), block c at c x block_m x width, a row's 16-byte units permuted by the swizzle (the
XOR of the unit index with address bits 7 and up). So the 32 threads of a warp, each on its
own row, spread a 16-byte store over all the banks, where row after row the same four banks
would take them in turn. A `fence.proxy.async` then orders the writes before the async
proxy's reads. The epilogue warp's lane 0, once the slot is full, issues one
`cp.async.bulk.tensor` store a column block through O's tensor map (rows past M lie outside
the tensor and are not written), and waits until they have read the slot
(`cp.async.bulk.wait_group.read`) before the slot's release lets the next O in. (A tile
table's tile that ends inside a Q tile stores that Q tile's rows otherwise: Note [Tile
table on sm_100a] in sm100a_tiles.py.)

Note [Addresses at their MMA]: an MMA's operand addresses -- the tensor-memory columns of
S, O and P, the shared-memory bases its descriptors are made from -- are computed at the
MMA, from an opaque copy (`Emit.opaque`) of their base. Where a slot has one stage they are
loop-invariant, and LLVM hoisted every K-step's address and descriptor out of the KV loop:
about 40 values live through it in the MMA warp's 48 registers, which spilled 484 bytes
(mha) and 936 (gemma2). Made at the MMA, they cost an add each and spill nothing.

Note [Block map on sm_100a]: a mask that reads params (mask_kind "runtime") leaves its
blocks' classes to the block map (blockmap.py), which the bundle's first kernel computes on
the GPU at the CTA's tiles (mask_block_m = block_m x q_tiles rows, block_n keys), as on the
other targets, where the mask analysis gives one segment (else the analysis' ranges stand,
`reads_map_range` in analyze_masks.py). Every role's `attn.block_map_range` reads the CTA's
row of the map, a scan by each warp (Note [Full range from the map] in blockmap_hooks.py):
the key blocks from the first
to the last that keep anything, and as the full range (run without the mask) the FULL ones
where they are one run. So the load, MMA, softmax and correction roles walk the same blocks,
and a documents mask visits a query block's documents only. In the mixed loops a block's
class (`attn.block_map_read`) is taken as MIXED: the mask applies per element, which drops
a SKIP block's keys and keeps a FULL one's. With a tile table (Note [Tile table on
sm_100a] in sm100a_tiles.py) the map's rows are the table's tiles, and with its runs
(`run_ranges`) there is no map: each warp scans the blocks of its tile's run instead.

Note [Lazy rescale on sm_100a]: a rescale of O here is a round trip of the correction
thread's row through tensor memory (tcgen05.ld, FMULs, tcgen05.st, its wait) which the next
P.V waits for (o_scaled), as in FlashAttention-4. With `lazy` on attn.rescale (the default:
Note [Choices on sm_100a] in attnc/passes/kernel_choices.py) the softmax steps keep a row's
max until a block's scores exceed it by 2^8 (Note [Lazy rescale] in softmax.py), its factor
then exactly 1, and a correction warp skips the round trip where every row of its 32 has
a factor of 1 (vote.any of factor != 1, warp-uniform as tcgen05.ld needs), still arriving on
o_scaled. O times 1 is O, so the skip changes no bit; the stale max changes the result only
by rounding, which the final 1 / l and the LSE (m + log l) cancel. The first block's factor
is 0 (the max leaves -inf), so a row is rescaled there unless it kept nothing yet.

Note [Accumulators start at zero]: the MMA role starts each O from a fill of zeros that
lives in tensor memory, where its warp reaches one lane quarter only; the CTA's first four
warps zero every O buffer before the roles start, and every P.V accumulates. With persistent
CTAs the next query block starts from the same tensor memory: the correction warpgroup, which
reads each row of the final O (as it writes the row to O's shared-memory slot), writes the
row's zeros back, waited for. What keeps the MMA role off those columns until then is the
o_scaled channel, not o_acc (whose release comes before the final O is read, as the fill the
MMA role then writes to it lowers to nothing): the next block's first P.V waits for the
correction's first rescale of that block, which follows the zeros in the same threads. The
first rescale does not clear a stale O by itself: its factor is 0, and a stale infinity
times 0 is NaN (an infinite V in one head made the next head's O NaN in the emulator
without the zeros).

Note [Persistent CTAs on sm_100a]: with `persistent` on attn.warp_specialize every role's
program stands in the walk over query blocks (Note [The walk over query blocks] in
attnc/schedule/walk.py): the grid is at most one CTA per SM (`min_sms` in the manifest), and
each role takes the CTA's blocks round by round (block_walk.py, the order of
attn.walk_block), its rings' stages and phases running on from block to block as the plan
carries them; the tensor memory stays allocated across the walk. O's staging tile keeps
shared memory of its own even with one Q tile a CTA (where a CTA of one query block puts
it in Q's), as the load warp brings the next block's Q meanwhile: at head dim 256 the plan
then fits with block_n = 64. Off by default: no
Blackwell GPU has timed it (the emulator runs it against the reference:
tests/sim/test_walk_sm100a_sim.py), and under FlashAttention-4's register budgets the walk's
state costs spills in the kernels of two KV loops (the bundle's assembler, with the lazy
rescale: gemma2 84 bytes, sliding_window 96, docs_sink 104 stored and 124 loaded; mha and
relative_bias none).
Softmax warpgroups of 184 registers, for 80 in the MMA warp's warpgroup, spilled more
(gemma2 272, and 80 without the walk). Fewer carried values did not help either: the
rings of one slot advance in lockstep, and carrying one (stage, phase) pair for all of
them (an optimistic congruence of the loops' carried values: the MMA warp's walk then
carries 8 values, not 20) moved the spills rather than removing them -- gemma2 84 bytes,
sliding_window 152, docs_sink 84 stored and 104 loaded, and mha 20 where it had none.
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import gpu, nvvm, scf

from attnc.backend.hooks import KernelNames
from attnc.backend.nvgpu_builders import Approx, Emit, MBarrier, Smem, _asm, set_max_registers
from attnc.backend.sm100a_ops import PATTERNS, SKELETON_PATTERNS
from attnc.backend.sm100a_scores import raw_scores
from attnc.backend.sm100a_params import kernel_params
from attnc.backend.sm100a_values import Lowering, channel_of
from attnc.backend.sm100a_tiles import q_tile_has_rows, q_tile_of, read_tile, table_blockmap
from attnc.backend.smem_layout import Mbarrier, barriers_end, place_mbarriers
from attnc.backend.softmax import OnlineSoftmax
from attnc.backend.tcgen05 import Tmem
from attnc.errors import AttncError
from attnc.ir import error_at, get_bool, get_int, get_shape
from attnc.ir import roles as R
from attnc.ir.ops import int_constant
from attnc.passes import plan_ir
from attnc.passes.kernel_choices import sm100a_choices
from attnc.passes.tile_program import KV_LOOP, kv_block_op
from attnc.schedule.recipes import register_share

SMEM_SYMBOL = "attnc_smem"
LOG2E = 1.4426950408889634


# --- the kernel ------------------------------------------------------------------------------
def lower_sm100a(kernel: ir.Operation, variant, symbol: str, block: ir.Block, module, choices: dict,
                 blockmap=None) -> dict:
    """The sm_100a kernel of `kernel` (L5, in `module`) as a gpu.func at the end of `block`
    (a gpu.module's body), with its `choices` (`sm100a_choices`), reading `blockmap` (a
    BlockMapPlan: Note [Block map on sm_100a]) where given; returns its manifest entry."""
    from attnc.passes.hoist import check_levels

    check_levels(kernel)        # the copies of each hook alike (the kernel compiles the first)
    params = kernel_params(kernel, variant, module, blockmap)
    smem_bytes, barriers = _layout(kernel)
    with ir.InsertionPoint(block):
        types = [p["type"] for p in params]
        func = gpu.GPUFuncOp(ir.TypeAttr.get(ir.FunctionType.get(types, [])), symbol, kernel=True,
                             known_block_size=[32 * _warps(kernel), 1, 1])
        # one CTA per SM: ptxas keeps setmaxnreg only so (Note [Registers per warpgroup])
        func.operation.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1)
        # Note [Tensor-map arguments] in ptx.py
        maps = [k for k, p in enumerate(params) if p["abi"]["kind"] == "tensor_map"]
        i64 = ir.IntegerType.get_signless(64)
        func.operation.attributes["attn.tensor_maps"] = ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k) for k in maps])
        func.operation.attributes["arg_attrs"] = ir.ArrayAttr.get(
            [ir.DictAttr.get({"llvm.align": ir.IntegerAttr.get(i64, 64)} if k in maps else {})
             for k in range(len(params))])
        entry = func.body.blocks.append(*types)
    with ir.InsertionPoint(entry):
        args = {p["key"]: a for p, a in zip(params, entry.arguments)}
        # the hooks name the sequence and head counts by their roles (hooks.KernelNames)
        args.update({abi: args[f"dim:{getattr(variant, role)}"] for role, abi in KernelNames.ABI_DIMS.items()
                     if isinstance(getattr(variant, role), str)})
        e = Emit(args)
        # and a size the variant fixes is a constant of that name (the block map's hooks read M, N, H)
        e.args.update({abi: e.c32(getattr(variant, role)) for role, abi in KernelNames.ABI_DIMS.items()
                       if not isinstance(getattr(variant, role), str)})
        cx = Lowering(kernel, e, Smem(e, SMEM_SYMBOL), args, barriers=barriers,
                      names=KernelNames(variant, kernel, module), module=module.operation, blockmap=blockmap)
        if cx.table is None:
            _emit(cx, choices["lazy_rescale"])
        else:                   # Note [Tile table on sm_100a]: a CTA past the table's tiles does nothing
            b, h, _ = _block_coords(e)
            inside = scf.IfOp(e.lt(read_tile(e, cx.table, b, h).row0, e.dim("M")))
            with ir.InsertionPoint(inside.then_block):
                _emit(cx, choices["lazy_rescale"])
                scf.yield_([])
        gpu.ReturnOp([])
    return _manifest_entry(kernel, variant, symbol, params, smem_bytes, cx.table)


def _warps(kernel) -> int:
    return plan_ir.launched_warps(kernel)


def _layout(kernel) -> tuple[int, dict]:
    """The bytes of shared memory the kernel takes and each mbarrier's (offset, stages):
    after the channels' buffers, 8 bytes a slot; then 8 for tcgen05.alloc's address."""
    end = 0
    for chan in R.channel_ops(kernel):
        for buf in R.attrs_of(chan).get("buffers", []):
            if buf["space"] == "smem":
                stage = buf["size"] // buf["stages"]
                end = max(end, buf["offset"] + buf.get("stride", stage) * (buf["stages"] - 1) + stage)
    placed = place_mbarriers(end, [Mbarrier.of(R.attrs_of(b)) for b in R.mbarrier_ops(kernel)])
    barriers = {b.name: (b.offset, b.stages) for b in placed}
    offset = barriers_end(-(-end // 8) * 8, placed)
    barriers[_TMEM_SLOT] = (offset, 1)
    return offset + 8, barriers


_TMEM_SLOT = "tmem address"


def _emit(cx: Lowering, lazy: bool) -> None:
    e, kernel = cx.e, cx.kernel
    tid = nvvm.read_ptx_sreg_tid_x(e.i32)
    cx.warp, cx.lane = e.shr(tid, 5), e.and_(tid, 31)
    cx.row = e.add(e.shl(e.and_(cx.warp, 3), 5), cx.lane)
    ws = R.warp_specialize_of(kernel)
    block = ws.regions[0].blocks[0]
    for op in block.operations:
        op = op.operation
        if op.name == R.CHANNEL:
            cx.channels[op.result] = channel_of(op)
    roles = R.role_ops(kernel)
    mma_warp = next(R.attrs_of(r)["warps"][0] for r in roles if R.name_of(r) == "mma")
    tmem, mbar = Tmem(e), MBarrier(e)
    first = scf.IfOp(e.eq(tid, 0))
    with ir.InsertionPoint(first.then_block):
        for bar in R.mbarrier_ops(kernel):
            a = R.attrs_of(bar)
            for stage in range(a["stages"]):
                mbar.init(cx.smem.address(cx.barriers[a["name"]][0] + 8 * stage), a["count"])
        _asm([], [], "fence.mbarrier_init.release.cluster;", "")
        scf.yield_([])
    slot = cx.smem.address(cx.barriers[_TMEM_SLOT][0])
    _on_warp(e, cx.warp, mma_warp, lambda: tmem.alloc(slot))
    _sync(cx)
    cx.tmem_base = _ld_shared_u32(slot)
    # Note [Accumulators start at zero]
    first_four = scf.IfOp(e.lt(cx.warp, 4))
    with ir.InsertionPoint(first_four.then_block):
        for chan in cx.channels.values():
            for tile, buf in chan.buffers.items():
                if buf["space"] == "tmem" and buf["name"].startswith("tO"):
                    base = tmem.lane_address(e.add(cx.tmem_base, e.c32(buf["offset"])), cx.warp)
                    for col in range(0, buf["size"], 32):
                        tmem.store(e.add(base, col), [e.c32(0)] * 32)
        scf.yield_([])
    _sync(cx)
    # Note [Folded scale] (softmax.py): a score_mod takes scaled scores, the softmax then natural
    # ones, but for an affine one's (Note [Affine scores on sm_100a] in sm100a_scores.py)
    cx.scale = ir.FloatAttr(kernel.attributes["scale"]).value
    cx.units = cx.scale if raw_scores(kernel) else 1.0
    # Note [Lazy rescale on sm_100a]
    cx.softmax = OnlineSoftmax(e, Approx(e), _OwnRow(), cx.units * LOG2E, lazy=lazy)
    # Note [Registers per warpgroup]: a warpgroup's branch sets its registers, then runs its roles
    launch = register_share(32 * _warps(kernel))
    for group, members in _warpgroups(roles).items():
        # each test reads its own opaque copy of the warp index: LLVM would turn tests of one
        # value into a jump table (brx.idx), which the emulator does not run
        branch = scf.IfOp(e.eq(e.shr(e.opaque(cx.warp), 2), group))
        with ir.InsertionPoint(branch.then_block):
            regs = max(R.attrs_of(role)["regs"] for role in members)
            if regs and regs != launch:
                set_max_registers(regs, increase=regs > launch)
            # the CTA's coordinates read here, not live across setmaxnreg (ptxas spilled them)
            coords = _block_coords(e)
            if cx.table is not None:        # Note [Tile table on sm_100a]
                cx.tile = read_tile(e, cx.table, *coords[:2])
                coords[2] = cx.tile.index
            cx.env.update(zip(kernel.regions[0].blocks[0].arguments, coords))
            for role in members:
                warps = list(R.attrs_of(role)["warps"])
                mine = scf.IfOp(e.and_(e.ge(cx.warp, warps[0]), e.le(cx.warp, warps[-1])))
                with ir.InsertionPoint(mine.then_block):
                    cx.role, cx.walk, cx.m_block = R.name_of(role), None, coords[2]
                    _lower_role(cx, role)
                    scf.yield_([])
            scf.yield_([])
    _sync(cx)
    _on_warp(e, cx.warp, mma_warp, lambda: tmem.dealloc(cx.tmem_base))


def _warpgroups(roles: list) -> dict[int, list]:
    """Note [Registers per warpgroup]: setmaxnreg is run by every warp of a warpgroup alike,
    and ptxas gives the code after it that budget: each warpgroup's roles run in one branch
    that sets the registers first, the largest budget of its roles (the MMA, load and
    epilogue warps and the idle one share a warpgroup). The launch gives each thread
    attnc/schedule/recipes.py's register_share of the CTA's threads."""
    groups: dict[int, list] = {}
    for role in roles:
        warps = list(R.attrs_of(role)["warps"])
        if len({w // 4 for w in warps}) != 1:
            raise error_at(role, f"attn-lower-sm100a runs a role within one warpgroup, not warps {warps}")
        groups.setdefault(warps[0] // 4, []).append(role)
    return groups


class _OwnRow:
    """A thread owns its whole row: a row's max and sum need no shuffle."""

    @staticmethod
    def allreduce(x, combine):
        return x


def _block_coords(e: Emit) -> list:
    """(b, h, m_block) of the CTA: the grid is (query blocks, heads, batches) -- with a tile
    table, (its entries, heads, batches), m_block then replaced by the entry's index
    (Note [Tile table on sm_100a])."""
    return [nvvm.read_ptx_sreg_ctaid_z(e.i32), nvvm.read_ptx_sreg_ctaid_y(e.i32), nvvm.read_ptx_sreg_ctaid_x(e.i32)]


def _on_warp(e: Emit, warp, index: int, body) -> None:
    branch = scf.IfOp(e.eq(warp, index))
    with ir.InsertionPoint(branch.then_block):
        body()
        scf.yield_([])


def _sync(cx: Lowering) -> None:
    tmem = Tmem(cx.e)
    tmem.fence_before()
    _asm([], [], "bar.sync 0;", "")
    tmem.fence_after()


def _ld_shared_u32(addr) -> ir.Value:
    return _asm([ir.IntegerType.get_signless(32)], [addr], "ld.shared.u32 $0, [$1];", "=r,r").result


# --- the walk over a role's ops --------------------------------------------------------------
def _lower_role(cx: Lowering, role) -> None:
    """The role's program; a softmax role of a Q tile past the first as well as its skeleton,
    run where the CTA's query block has no row in that Q tile (Note [Q tiles without rows])."""
    ops = [op.operation for op in R.role_block(role).operations]
    tile = _softmax_q_tile(role)
    if not tile:
        _lower_ops(cx, ops)
        return
    # what precedes the KV loops (the key range, the statistics' fills) is the same in both
    first = next((k for k, op in enumerate(ops) if op.name == "scf.for"), len(ops))
    _lower_ops(cx, ops[:first])
    branch = scf.IfOp(q_tile_has_rows(cx, role, tile), has_else=True)
    with ir.InsertionPoint(branch.then_block):
        _lower_ops(cx, ops[first:])
        scf.yield_([])
    with ir.InsertionPoint(branch.else_block):
        cx.skeleton = True
        try:
            _lower_ops(cx, ops[first:])
        finally:
            cx.skeleton = False
        scf.yield_([])


def _softmax_q_tile(role) -> int:
    """The Q tile of a softmax role that works on one Q tile and one query block (not a walk
    over them), 0 for every other role."""
    ops = R.ops_in(R.role_block(role), ("attn.softmax_step", "attn.mask", "attn.score_mod"))
    if not any(op.name == "attn.softmax_step" for op in ops) or R.walk_branch(role) is not None:
        return 0
    tiles = {q_tile_of(op) for op in ops}
    return tiles.pop() if len(tiles) == 1 else 0


def _lower_block(cx: Lowering, block: ir.Block, skip: ir.Operation | None = None) -> None:
    _lower_ops(cx, [op.operation for op in block.operations], skip)


def _lower_ops(cx: Lowering, ops: list, skip: ir.Operation | None = None) -> None:
    patterns = SKELETON_PATTERNS if cx.skeleton else PATTERNS
    for op in ops:
        name = op.name
        if name in ("scf.yield", "gpu.yield") or (skip is not None and op == skip):
            continue
        if name == "scf.for":
            _for(cx, op)
        elif name == "scf.if":
            _if(cx, op)
        elif name.startswith("arith.") and not op.regions:
            _copy(cx, op)
        elif name in patterns:
            results = patterns[name](cx, op)
            if results is not None:
                cx.env.update(zip(op.results, results))
        else:
            raise error_at(op, f"attn-lower-sm100a has no pattern for {name} (role '{cx.role}')")


def _copy(cx: Lowering, op) -> None:
    new = op.clone()
    for i, v in enumerate(op.operands):
        new.operands[i] = cx.value(v)
    cx.env.update(zip(op.results, new.results))


def _carried(v) -> bool:
    return isinstance(v, ir.Value)


def _for(cx: Lowering, op) -> None:
    if KV_LOOP in op.attributes:
        return _kv_for(cx, op)
    lb, ub, step = (cx.value(v) for v in list(op.operands)[:3])
    inits, kept = _carried_inits(cx, op)
    loop = scf.ForOp(lb, ub, step, [inits[k] for k in kept])
    with ir.InsertionPoint(loop.body):
        cx.env[op.regions[0].blocks[0].arguments[0]] = loop.induction_variable
        scf.yield_(_lower_trip(cx, op, inits, kept, loop.inner_iter_args))
    _bind_results(cx, op, inits, kept, loop.results)


def _kv_for(cx: Lowering, op) -> None:
    """A KV loop over steps [lo, hi) as a loop counting its key block down, from top - lo
    while above top - hi (Note [Key blocks top down] in attnc/passes/tile_program.py): the
    block is the loop's one counter, as a loop over blocks has it."""
    e = cx.e
    block_op = kv_block_op(op)
    top = cx.value(block_op.operands[0])
    start, stop = (e.sub(top, cx.value(v)) for v in list(op.operands)[:2])
    if int_constant(op.operands[2]) != 1:
        raise error_at(op, "attn-lower-sm100a steps a KV loop one key block at a time")
    inits, kept = _carried_inits(cx, op)
    types = [start.type] + [inits[k].type for k in kept]
    loop = scf.WhileOp(types, [start] + [inits[k] for k in kept])
    before = loop.before.blocks.append(*types)
    with ir.InsertionPoint(before):
        scf.ConditionOp(e.gt(before.arguments[0], stop), list(before.arguments))
    after = loop.after.blocks.append(*types)
    step = op.regions[0].blocks[0].arguments[0]
    with ir.InsertionPoint(after):
        n = after.arguments[0]
        cx.env[block_op.result] = n
        if len(list(step.uses)) > 1:
            cx.env[step] = e.sub(top, n)
        yielded = _lower_trip(cx, op, inits, kept, list(after.arguments)[1:], skip=block_op)
        scf.YieldOp([e.sub(n, 1)] + yielded)
    _bind_results(cx, op, inits, kept, list(loop.results)[1:])


def _carried_inits(cx: Lowering, op) -> tuple[list, list[int]]:
    """The starting values of what IR loop `op` carries, and the positions of those the
    lowered loop carries (values of the IR; the others are passed around it as they are)."""
    inits = [cx.value(v) for v in list(op.operands)[3:]]
    return inits, [k for k, v in enumerate(inits) if _carried(v)]


def _lower_trip(cx: Lowering, op, inits: list, kept: list[int], inner, skip=None) -> list:
    """One trip of IR loop `op` at the insertion point, the kept carried values from
    `inner` and the others as they start; what it yields of the kept ones."""
    body = op.regions[0].blocks[0]
    inner = iter(inner)
    for k, (arg, init) in enumerate(zip(list(body.arguments)[1:], inits)):
        cx.env[arg] = next(inner) if k in kept else init
    cx.loops.append(op)
    _lower_block(cx, body, skip=skip)
    cx.loops.pop()
    yielded = [cx.value(v) for v in list(body.operations)[-1].operands]
    return [yielded[k] for k in kept]


def _bind_results(cx: Lowering, op, inits: list, kept: list[int], results) -> None:
    results = iter(results)
    for k, (res, init) in enumerate(zip(op.results, inits)):
        cx.env[res] = next(results) if k in kept else init


def _if(cx: Lowering, op) -> None:
    """An scf.if, its results integers (the rings' stages and phases a round of the walk
    yields: Note [The walk over query blocks] in attnc/schedule/walk.py)."""
    cond = cx.value(op.operands[0])
    types = [r.type for r in op.results]
    if any(not isinstance(t, ir.IntegerType) for t in types):
        raise error_at(op, "attn-lower-sm100a lowers an scf.if whose results are integers only")
    has_else = len(op.regions[1].blocks) > 0
    branch = scf.IfOp(cond, types, has_else=has_else)
    for region, block in zip(op.regions, [branch.then_block] + ([branch.else_block] if has_else else [])):
        with ir.InsertionPoint(block):
            _lower_block(cx, region.blocks[0])
            scf.yield_([cx.value(v) for v in list(region.blocks[0].operations)[-1].operands])
    cx.env.update(zip(op.results, branch.results))


# --- the module and the manifest --------------------------------------------------------------
def kernel_module_sm100a(result):
    """(the kernel module, its manifest kernels, the specialization) of a compiled L5 module."""
    from attnc.backend.bundle import kernel_symbol
    from attnc.backend.kernel_module import empty_kernel_module
    from attnc.ir import attention_ops

    kernel = attention_ops(result.module)[0]
    symbol = kernel_symbol(result.variant.name, "fwd")
    choices = sm100a_choices(kernel)
    blockmap = _blockmap(result, kernel)
    if choices["aligned_tiles"]:            # Note [Tile table on sm_100a]
        blockmap = table_blockmap(result, kernel, blockmap, choices["run_ranges"])
    with result.module.context, ir.Location.name(symbol):
        module, body = empty_kernel_module(SMEM_SYMBOL, 1024)     # 128B-swizzled tiles repeat every 1024 bytes
        entry = lower_sm100a(kernel, result.variant, symbol, body, result.module, choices, blockmap)
        kernels = [entry]
        if blockmap is not None and blockmap.built:
            from attnc.backend.blockmap_kernel import emit_blockmap_kernel
            emit_blockmap_kernel(blockmap, result, ir.InsertionPoint(body))
            kernels.insert(0, blockmap.kernel)      # launched first: it fills the map
        if choices["aligned_tiles"]:                # the table first, then the map over its tiles
            from attnc.backend.qtiles import emit_qtiles_kernel
            emit_qtiles_kernel(blockmap.qtiles, result, ir.InsertionPoint(body), SMEM_SYMBOL)
            kernels.insert(0, blockmap.qtiles.kernel)
        if not module.operation.verify():
            raise AttncError(f"the sm_100a kernel {symbol} does not verify")
    specialization = {"target": "sm_100a", "block_m": get_int(kernel, "block_m"),
                      "block_n": get_int(kernel, "block_n"), "stages": plan_ir.kv_stages(kernel),
                      "q_tiles": get_int(kernel, "q_tiles"), "warps": _warps(kernel),
                      "blockmap": blockmap is not None and blockmap.built, **choices}
    return module, kernels, specialization


def _blockmap(result, kernel):
    """The block map of a mask that reads params (Note [Block map on sm_100a]), at the tiles
    the mask analysis classified: the CTA's query rows and the kernel's key blocks."""
    from attnc.backend.blockmap import blockmap_plan
    from attnc.passes.analyze_masks import mask_functions
    if not get_bool(kernel, "has_mask_mod") or mask_functions(kernel).kind != "runtime" \
            or get_int(kernel, "kv_segments") != 1:     # segments: the analysis' ranges, as before
        return None
    return blockmap_plan(result, get_int(kernel, "mask_block_m"), get_int(kernel, "mask_block_n"))


# --- the manifest ----------------------------------------------------------------------------
def _manifest_entry(kernel, variant, symbol: str, params: list[dict], smem_bytes: int, table=None) -> dict:
    q_shape = get_shape(kernel, "q_shape")
    rows = get_int(kernel, "block_m") * get_int(kernel, "q_tiles")
    blocks = ["cdiv", q_shape[2], rows] if isinstance(q_shape[2], str) else math.ceil(q_shape[2] / rows)
    grid = [[blocks], [q_shape[1]], [q_shape[0]]]
    if table is not None:                   # Note [Tile table on sm_100a]: a CTA an entry
        grid = [list(table.tiles), [q_shape[1]], [q_shape[0]]]
    if R.is_persistent(kernel):            # Note [Persistent CTAs on sm_100a]
        grid = [[["min_sms", blocks, q_shape[1], q_shape[0]]], [1], [1]]
    return {"name": "attn_fwd", "symbol": symbol, "block": [32 * _warps(kernel), 1, 1],
            "dynamic_smem_bytes": smem_bytes, "grid": grid, "params": [p["abi"] for p in params]}
