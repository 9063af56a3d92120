"""attn-lower-sm100a's patterns: one attn op of a role's region -> PTX (Note [The sm_100a
kernel, op by op] in sm100a.py), over the values they pass on and the state they share
(sm100a_values.py)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm, scf

from attnc.backend.block_walk import BlockWalk
from attnc.backend.nvgpu_builders import MBarrier, _asm, warp_sync, warp_vote
from attnc.backend.sm100a_tiles import (block_map_range, block_map_read, first_key, first_row, kv_range, o_rows,
                                        q_tile_has_rows, q_tile_of, rows_end, store_o_rows)
from attnc.backend.sm100a_scores import SCORE_PATTERNS, SKELETON_SCORE_PATTERNS, pack_pair
from attnc.backend.sm100a_values import (Gemm, InTmem, LoadTile, Lowering, Rows, Scaled, Slot, channel_error,
                                         swizzle_bytes)
from attnc.backend.softmax import SoftmaxState
from attnc.backend.tcgen05 import MMA_K, Tmem, Umma, bulk_wait_read, expect_tx, param_address, tma_load, tma_store
from attnc.ir import error_at, get_bool, get_int, get_shape, get_str
from attnc.ir import roles as R
from attnc.passes.tile import TMEM_CHUNK
from attnc.ir.tiles import tile_parts
from attnc.schedule.walk import walk_order

# --- the patterns ----------------------------------------------------------------------------
def _dim(cx: Lowering, op):
    name = get_str(op, "name")
    if f"dim:{name}" not in cx.params:      # no parameter: only an analysis function ignoring it takes it (read_dims)
        return [cx.e.c32(0)]
    return [cx.size(name)]


def _fill(cx: Lowering, op):
    shape = tile_parts(op.results[0].type)[0]
    if len(shape) == 1:                     # a row statistic: this thread's row's
        return [cx.e.cf(ir.FloatAttr(op.attributes["value"]).value)]
    return [InTmem()]                       # O (Note [Accumulators start at zero])


def _walk_rounds(cx: Lowering, op):
    """Note [The walk over query blocks] (attnc/schedule/walk.py): the role's rounds, the
    kernel's query blocks (of block_m x q_tiles rows) over the grid's CTAs."""
    e, kernel = cx.e, cx.kernel
    batches, heads, rows = (cx.size(n) for n in get_shape(kernel, "q_shape")[:3])
    m_blocks = e.cdiv(rows, get_int(kernel, "block_m") * get_int(kernel, "q_tiles"))
    # the role's order, one of walk.ORDERS and every role's (check_walk, before the lowering)
    cx.walk = BlockWalk(e, m_blocks, heads, batches, walk_order(op.parent))
    return [cx.walk.rounds]


def _walk_block(cx: Lowering, op):
    if cx.walk is None:
        raise error_at(op, f"attn-lower-sm100a takes a query block of the role's walk: {R.WALK_BLOCK} in the "
                           f"scf.for over {R.WALK_ROUNDS} (Note [The walk over query blocks] in "
                           f"attnc/schedule/walk.py)")
    has, (m_block, h, b) = cx.walk.item(cx.value(op.operands[0]))
    cx.m_block = m_block
    return [has, b, h, m_block]


def _wait(cx: Lowering, op):
    bar, stage, parity = op.operands
    MBarrier(cx.e).wait(cx.mbar(bar, stage), cx.value(parity))
    Tmem(cx.e).fence_after()


def _arrive(cx: Lowering, op):
    """One arrival per warp (`per = "warp"`), by lane 0 once every lane's writes before it
    (shared memory, tensor memory) are ordered before it."""
    bar, stage = op.operands
    Tmem(cx.e).fence_before()
    warp_sync()
    MBarrier(cx.e).arrive(cx.mbar(bar, stage), only=cx.first_lane)


def _expect_tx(cx: Lowering, op):
    bar, stage = op.operands
    expect_tx(cx.e, cx.first_lane, cx.mbar(bar, stage), get_int(op, "bytes"))


def _commit(cx: Lowering, op):
    bar, stage = op.operands
    Umma(cx.e, "bf16").commit(cx.first_lane, cx.mbar(bar, stage))


def _ring_advance(cx: Lowering, op):
    e = cx.e
    stage, phase = (cx.value(v) for v in op.operands)
    following = e.add(stage, 1)
    wraps = e.eq(following, get_int(op, "stages"))
    return [e.select(wraps, e.c32(0), following), e.select(wraps, e.xor(phase, 1), phase)]


def _load(cx: Lowering, op):
    q_tile = q_tile_of(op)
    return [LoadTile(get_str(op, "operand"), [cx.value(v) for v in list(op.operands)[1:]], q_tile)]


def _slot_read(cx: Lowering, op):
    chan, stage = op.operands
    return [Slot(cx.channels[chan], cx.value(stage), get_str(op, "tile"))]


def _slot_write(cx: Lowering, op):
    chan, stage, value = list(op.operands)[:3]
    slot = Slot(cx.channels[chan], cx.value(stage), get_str(op, "tile"))
    v = cx.value(value)
    if isinstance(v, LoadTile):
        _tma(cx, op, slot, v, cx.mbar(op.operands[3], stage))
    elif isinstance(v, InTmem):
        pass                                # S or O, where its MMA put it
    elif isinstance(v, Scaled):             # the rescaled or the final O
        _write_scaled(cx, op, slot, v)
    elif isinstance(v, Rows):               # P: this thread's row into tensor memory
        base = cx.tmem_address(slot, True)
        for k in range(0, len(v.values), TMEM_CHUNK):
            Tmem(cx.e).store(cx.e.add(base, k), v.values[k:k + TMEM_CHUNK])
    else:                                   # a row statistic
        _asm([], [cx.e.add(cx.slot_address(slot), cx.e.shl(cx.row, 2)), v], "st.shared.f32 [$0], $1;", "r,f")


def _tma(cx: Lowering, op, slot: Slot, load: LoadTile, mbar) -> None:
    """The tile's copies (issued at `op`, its slot write): one per 64-column block of its
    128B-swizzled rows."""
    e, kernel = cx.e, cx.kernel
    b, h, index = load.coords
    rows = get_int(kernel, "block_m" if load.operand == "q" else "block_n")
    if load.operand == "q":
        first = first_row(cx, op, index, load.q_tile)
        head = h
    else:
        first = first_key(cx, index)
        shape = get_shape(kernel, "q_shape")
        kv_heads = get_shape(kernel, "k_shape")[1]
        head = e.div(h, e.div(cx.size(shape[1]), cx.size(kv_heads)))
    cols = get_int(kernel, "head_dim_qk" if load.operand != "v" else "head_dim_v")
    tmap = param_address(e, cx.params[f"tmap:{load.operand}"])
    dst = cx.slot_address(slot)
    swizzle = swizzle_bytes(slot.channel)
    for c in range(cols * 2 // swizzle):
        tma_load(e, cx.first_lane, e.add(dst, c * rows * swizzle), tmap,
                 [e.c32(c * swizzle // 2), first, head, b], mbar)


def _k_major_desc(cx: Lowering, slot: Slot, base, rows: int, k: int) -> ir.Value:
    """The descriptor of K-step k of a K-major 128B-swizzled tile at `base`: column block
    k // 4, 32 bytes a step inside its rows."""
    swizzle = swizzle_bytes(slot.channel)
    per_block = swizzle // 2 // MMA_K
    addr = cx.e.add(base, (k // per_block) * rows * swizzle + (k % per_block) * 2 * MMA_K)
    return Umma(cx.e, "bf16").smem_desc(addr, 16, 8 * swizzle, swizzle)


def _gemm(cx: Lowering, head_dim: str) -> tuple:
    """(emitter, Umma, block_m, block_n, the head dim named) of the kernel's GEMMs."""
    kernel = cx.kernel
    umma = Umma(cx.e, get_str(kernel, "dtype"))
    return cx.e, umma, get_int(kernel, "block_m"), get_int(kernel, "block_n"), get_int(kernel, head_dim)


def _gemm_qk(cx: Lowering, issue: ir.Value, slot: Slot, g: Gemm) -> None:
    e, umma, block_m, block_n, d = _gemm(cx, "head_dim_qk")
    idesc = umma.instr_desc(block_m, block_n, umma.dtype, b_mn_major=False)
    # Note [Addresses at their MMA]
    d_tmem = e.opaque(cx.tmem_address(slot, False))
    a_base, b_base = (e.opaque(cx.slot_address(t)) for t in (g.a, g.b))
    for k in range(d // MMA_K):
        umma.mma(issue, d_tmem, _k_major_desc(cx, g.a, a_base, block_m, k),
                 _k_major_desc(cx, g.b, b_base, block_n, k), idesc, e.true() if k else e.false(), a_in_tmem=False)


def _mma(cx: Lowering, op):
    kind = get_str(op, "kind")
    a, b = cx.value(op.operands[0]), cx.value(op.operands[1])
    # Note [Q tiles without rows]
    rows = q_tile_has_rows(cx, op, q_tile_of(op))
    issue = cx.first_lane if rows is None else cx.e.land(cx.first_lane, rows)
    if kind == "qk":
        # Note [MMAs into their slot] (sync_ir.py): issued here, into the slot it is written to
        writes = [u.owner for u in op.result.uses if u.owner.name == R.SLOT_WRITE]
        if len(writes) != 1:
            raise error_at(op, "attn-lower-sm100a issues S = Q K^T into the tensor memory of the one slot "
                               "its result is written to (Note [MMAs into their slot])")
        w = writes[0]
        slot = Slot(cx.channels[w.operands[0]], cx.value(w.operands[1]), get_str(w, "tile"))
        _gemm_qk(cx, issue, slot, Gemm(a, b))
        return [InTmem()]
    acc = cx.value(op.operands[2])
    e, umma, block_m, block_n, d = _gemm(cx, "head_dim_v")
    idesc = umma.instr_desc(block_m, d, umma.dtype, b_mn_major=True)
    d_tmem = e.opaque(cx.tmem_address(acc, False))        # Note [Addresses at their MMA]
    p_tmem = e.opaque(cx.tmem_address(a, False))
    v_base = e.opaque(cx.slot_address(b))
    for k in range(block_n // MMA_K):
        # V is K x N with N contiguous (MN-major): 8-key groups 1024 bytes apart, N's 64-column
        # blocks block_n rows apart
        swizzle = swizzle_bytes(b.channel)
        desc = umma.smem_desc(e.add(v_base, k * MMA_K * swizzle), block_n * swizzle, 8 * swizzle, swizzle)
        umma.mma(issue, d_tmem, e.add(p_tmem, k * MMA_K // 2), desc, idesc, e.true(), a_in_tmem=True)
    return [InTmem()]


def _row_statistic(cx: Lowering, value) -> ir.Value:
    """A row statistic: a register, or this thread's row of a shared-memory slot."""
    if not isinstance(value, Slot):
        return value
    addr = cx.e.add(cx.slot_address(value), cx.e.shl(cx.row, 2))
    return _asm([cx.e.f32], [addr], "ld.shared.f32 $0, [$1];", "=f,r").result


def _rescale(cx: Lowering, op):
    return [Scaled(cx.value(op.operands[0]), _row_statistic(cx, cx.value(op.operands[1])))]


def _finalize(cx: Lowering, op):
    e = cx.e
    o = cx.value(op.operands[0])
    m, l = (_row_statistic(cx, cx.value(v)) for v in list(op.operands)[1:3])
    sink = None
    if get_bool(cx.kernel, "has_sink"):         # in the running max's units (Note [Sinks] in softmax.py)
        from attnc.backend.hooks import RegionCode, role_dims
        from attnc.backend.variant_hooks import _SINK_ROLES
        code = RegionCode(op.regions[0].blocks[0], cx.names, role_dims(cx.names.variant, _SINK_ROLES))
        sink = e.fmul(code(e, cx.value(op.operands[3])), 1.0 / cx.units)
    (inv,), (lse,) = cx.softmax.finalize(SoftmaxState([m], [l]), sink)
    return [Scaled(o, inv, out_dtype(cx.kernel), q_tile_of(op)), lse]


CHUNK = 16          # O's columns a correction thread holds at a time (Note [O in chunks])


def _write_scaled(cx: Lowering, op, slot: Slot, v: Scaled) -> None:
    """Note [O in chunks]: O's row chunk by chunk, times the factor, into the slot: tensor
    memory (the rescaled O), or shared memory in the output's type as TMA stores it (the
    final O: Note [O through TMA]; none of a Q tile without rows, which is never stored)."""
    chunks = _scaled_chunks(cx, v)
    if slot.channel.space != "tmem":
        rows = q_tile_has_rows(cx, op, v.q_tile)
        if rows is None:
            _write_o_row(cx, slot, v, chunks)
        else:
            branch = scf.IfOp(rows)
            with ir.InsertionPoint(branch.then_block):
                _write_o_row(cx, slot, v, chunks)
                scf.yield_([])
        if cx.walk is not None:         # Note [Accumulators start at zero] in sm100a.py
            zero_row(cx, v.o)
        return
    dst = cx.tmem_address(slot, True)

    def rescale():
        for col, values in chunks:
            Tmem(cx.e).store(cx.e.add(dst, col), values)

    if not cx.softmax.lazy:
        rescale()
        return
    # Note [Lazy rescale on sm_100a] in sm100a.py: the warp's rows kept their max
    moved = warp_vote(cx.e, arith.cmpf(arith.CmpFPredicate.UNE, v.factor, cx.e.cf(1.0)), "any")
    branch = scf.IfOp(moved)
    with ir.InsertionPoint(branch.then_block):
        rescale()
        scf.yield_([])


def _scaled_chunks(cx: Lowering, v: Scaled):
    """(first column, values) of O's row times the factor, CHUNK columns at a time, each read
    from tensor memory when its turn comes (Note [O in chunks]); the row's address now."""
    e = cx.e
    src = cx.tmem_address(v.o, True)
    return ((col, [e.fmul(x, v.factor) for x in Tmem(e).load(e.add(src, col), CHUNK)])
            for col in range(0, get_int(cx.kernel, "head_dim_v"), CHUNK))


def zero_row(cx: Lowering, o: Slot) -> None:
    """This thread's row of O's tensor memory set to zeros, waited for: the next query block's
    accumulator (Note [Accumulators start at zero] in sm100a.py)."""
    e, d = cx.e, get_int(cx.kernel, "head_dim_v")
    row = cx.tmem_address(o, True)
    for col in range(0, d, 32):
        Tmem(e).store(e.add(row, col), [e.c32(0)] * min(32, d - col), wait=col + 32 >= d)


def _write_o_row(cx: Lowering, slot: Slot, v: Scaled, chunks) -> None:
    """Note [O through TMA]: this thread's row of the final O (`chunks`: _scaled_chunks) into
    the slot, 16 bytes a store, each at its swizzled place; then the fence that orders the
    writes before TMA reads them."""
    e = cx.e
    size, d = out_bytes(cx.kernel), get_int(cx.kernel, "head_dim_v")
    swizzle, rows = swizzle_bytes(slot.channel), get_int(cx.kernel, "block_m")
    if (size * d) % swizzle:
        raise channel_error(slot.channel, f"attn-lower-sm100a: O's rows of {size * d} bytes do not fill its "
                                         f"{swizzle}-byte swizzled blocks")
    # the row's base has no bits below the swizzle's width: XOR places each 16-byte unit
    row_base = e.add(cx.slot_address(slot), e.mul(cx.row, swizzle))
    phase = e.shl(e.and_(e.shr(e.mul(cx.row, swizzle), 7), swizzle // 16 - 1), 4)
    row_base = e.xor(row_base, phase)
    for col, values in chunks:
        if v.pack == "f32":
            words = [arith.bitcast(e.i32, x) for x in values]
        else:
            words = [pack_pair(e, v.pack, lo, hi) for lo, hi in zip(values[::2], values[1::2])]
        for k in range(0, len(words), 4):
            block, within = divmod(size * col + 4 * k, swizzle)
            _asm([], [e.xor(row_base, within), *words[k:k + 4]],
                 f"st.shared.v4.b32 [$0+{block * rows * swizzle}], {{$1, $2, $3, $4}};", "r,r,r,r,r")
    _asm([], [], "fence.proxy.async.shared::cta;", "")


def out_bytes(kernel: ir.Operation) -> int:
    """Bytes of an element of O, the output (f32, f16 or bf16)."""
    return 4 if out_dtype(kernel) == "f32" else 2


def out_dtype(kernel: ir.Operation) -> str:
    return str(ir.RankedTensorType(kernel.results[0].type).element_type)


def _store(cx: Lowering, op):
    e, kernel = cx.e, cx.kernel
    operand = get_str(op, "operand")
    value = cx.value(op.operands[0])
    b, h, m_block = (cx.value(v) for v in list(op.operands)[1:4])
    q_tile = q_tile_of(op)
    block_m = get_int(kernel, "block_m")
    first = first_row(cx, op, m_block, q_tile)
    if operand == "lse":            # this thread's row, from its register
        row = e.add(first, cx.row)
        inside = scf.IfOp(e.lt(row, rows_end(cx, op, m_block, cx.size(get_shape(kernel, "q_shape")[2]))))
        with ir.InsertionPoint(inside.then_block):
            _st_global(cx, "lse", [b, h, row], value, "f32")
            scf.yield_([])
        return None
    # O (Note [O through TMA]): one TMA store a swizzled column block, rows past M not written
    d, size = get_int(kernel, "head_dim_v"), out_bytes(kernel)
    swizzle = swizzle_bytes(value.channel)
    src = cx.slot_address(value)

    def by_tma():
        tmap = param_address(e, cx.params["tmap:o"])
        for c in range(size * d // swizzle):
            tma_store(e, cx.first_lane, e.add(src, c * block_m * swizzle), tmap,
                      [e.c32(c * swizzle // size), first, h, b])
        bulk_wait_read(e, cx.first_lane)    # the slot is read before its release lets it be written

    count = o_rows(cx, op, m_block, first)
    if count is None:
        by_tma()
        return None
    # Note [Tile table on sm_100a]: a tile that ends inside the Q tile's rows, by the lanes
    whole = scf.IfOp(e.eq(count, block_m), has_else=True)
    with ir.InsertionPoint(whole.then_block):
        by_tma()
        scf.yield_([])
    with ir.InsertionPoint(whole.else_block):
        store_o_rows(cx, src, swizzle, size, first, count, b, h)
        scf.yield_([])
    return None


def element_address(cx: Lowering, tensor: str, index: list, last, itemsize: int) -> ir.Value:
    """The global address of tensor[index..., last] (strides from the parameters)."""
    e = cx.e
    offset = e.to_i64(last)
    for axis, i in enumerate(index):
        offset = e.add(offset, e.mul(e.to_i64(i), cx.params[f"stride:{tensor}:{axis}"]))
    base = llvm.ptrtoint(e.i64, cx.params[f"ptr:{tensor}"])
    return e.add(base, e.mul(offset, itemsize))


def _st_global(cx: Lowering, tensor: str, index: list, value, kind: str) -> None:
    addr = element_address(cx, tensor, index[:-1], index[-1], 4)
    _asm([], [addr, value], f"st.global.{kind} [$0], $1;", "l,f")


PATTERNS = {
    "attn.dim": _dim, "attn.fill": _fill, R.WALK_ROUNDS: _walk_rounds, R.WALK_BLOCK: _walk_block,
    R.MBARRIER_WAIT: _wait, R.MBARRIER_ARRIVE: _arrive,
    R.MBARRIER_EXPECT_TX: _expect_tx, R.TCGEN05_COMMIT: _commit, R.RING_ADVANCE: _ring_advance,
    "attn.load": _load, R.SLOT_READ: _slot_read, R.SLOT_WRITE: _slot_write, "attn.mma": _mma,
    "attn.rescale": _rescale, "attn.finalize": _finalize, "attn.store": _store, "attn.kv_range": kv_range,
    "attn.block_map_range": block_map_range, "attn.block_map_read": block_map_read, **SCORE_PATTERNS,
}
# Note [Q tiles without rows]: a softmax role's protocol without its computation
SKELETON_PATTERNS = {**PATTERNS, **SKELETON_SCORE_PATTERNS}


