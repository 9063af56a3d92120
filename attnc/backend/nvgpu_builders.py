"""Small emitters for the hardware resources of the sm_80 and sm_90a kernels, each
producing only its own ops.

`Emit` is the scalar arithmetic every other emitter (and every DSL hook) builds on;
`Smem` is the dynamic shared-memory window; `CpAsync`, `LdMatrix`, `MmaSync`, `Quad`,
`Approx` and (sm_90a) `Wgmma` wrap one family of PTX instructions each. They emit upstream ops only
(`arith`, `llvm`, `nvvm`) at the current insertion point and location.

Note [32-bit shared addresses]: LLVM's NVPTX backend keeps `ptr addrspace(3)` 64 bits
wide unless the global `-nvptx-short-ptr` option is set, which the in-process MLIR
serializer gives no way to pass. Every hoisted ldmatrix/cp.async address then costs two
registers, which spilled the hdim-128 kernel. So shared memory is addressed with i32
values (CUTLASS's `cvta_to_shared_u32`), and `ldmatrix`/`cp.async` are `llvm.inline_asm`
with "r" operands; mma, shuffles, commit/wait and barriers stay NVVM ops. The constant
part of each address goes into the instruction text ([reg+imm]), so that a whole tile
is read from a handful of base registers instead of one hoisted register per access.
"""
from __future__ import annotations

from typing import Sequence, Union

from mlir import ir
from mlir.dialects import arith, llvm, math, nvvm, scf

Num = Union[ir.Value, int, float]
_DYNAMIC = -2147483648      # LLVM::GEPOp::kDynamicIndex


def _nsw() -> ir.Attribute:
    """The `nsw` overflow flag of arith's integer ops (in the current context)."""
    return ir.Attribute.parse("#arith.overflow<nsw>")


def _op(name: str, results, operands, attrs: dict[str, str] | None = None) -> ir.Operation:
    attributes = {k: ir.Attribute.parse(v) for k, v in (attrs or {}).items()}
    return ir.Operation.create(name, results=results, operands=operands, attributes=attributes)


class Emit:
    """Typed scalar arithmetic on i1/i32/i64/f32 values; Python numbers become constants
    of the other operand's type. Also the handle DSL hooks receive (`dim`, `arg`)."""

    def __init__(self, args: dict[str, ir.Value] | None = None):
        self.i1 = ir.IntegerType.get_signless(1)
        self.i16 = ir.IntegerType.get_signless(16)
        self.i32 = ir.IntegerType.get_signless(32)
        self.i64 = ir.IntegerType.get_signless(64)
        self.f32 = ir.F32Type.get()
        self.f16 = ir.F16Type.get()
        self.bf16 = ir.BF16Type.get()
        self.args = dict(args or {})

    # -- kernel arguments, for hooks
    def arg(self, name: str) -> ir.Value:
        return self.args[name]

    def dim(self, name: str) -> ir.Value:
        return self.args[name]

    # -- constants and coercion
    def c32(self, v: int) -> ir.Value:
        return arith.constant(self.i32, int(v))

    def c64(self, v: int) -> ir.Value:
        return arith.constant(self.i64, int(v))

    def cf(self, v: float) -> ir.Value:
        return arith.constant(self.f32, float(v))

    def true(self) -> ir.Value:
        return arith.constant(self.i1, 1)

    def false(self) -> ir.Value:
        return arith.constant(self.i1, 0)

    def _pair(self, a: Num, b: Num) -> tuple[ir.Value, ir.Value]:
        if isinstance(a, ir.Value) and not isinstance(b, ir.Value):
            b = arith.constant(a.type, b)
        elif isinstance(b, ir.Value) and not isinstance(a, ir.Value):
            a = arith.constant(b.type, a)
        elif not isinstance(a, ir.Value):
            a, b = self.c32(a), self.c32(b)
        return a, b

    # -- integers
    def add(self, a, b): return arith.addi(*self._pair(a, b))
    def add_nsw(self, a, b): return arith.addi(*self._pair(a, b), overflow_flags=_nsw())
    def sub(self, a, b): return arith.subi(*self._pair(a, b))
    def mul(self, a, b): return arith.muli(*self._pair(a, b))
    def div(self, a, b): return arith.divsi(*self._pair(a, b))
    def rem(self, a, b): return arith.remsi(*self._pair(a, b))
    def and_(self, a, b): return arith.andi(*self._pair(a, b))
    def or_(self, a, b): return arith.ori(*self._pair(a, b))
    def xor(self, a, b): return arith.xori(*self._pair(a, b))
    def shl(self, a, b): return arith.shli(*self._pair(a, b))
    def shr(self, a, b): return arith.shrui(*self._pair(a, b))
    def min(self, a, b): return arith.minsi(*self._pair(a, b))
    def max(self, a, b): return arith.maxsi(*self._pair(a, b))

    def bitcast_i32(self, a):
        """A 32-bit register (i32, or two 16-bit values) as i32."""
        return a if a.type == self.i32 else llvm.bitcast(self.i32, a)

    def opaque(self, a):
        """`a` (i32 or i64) through an `asm volatile` move: LLVM cannot hoist what is computed
        from the result out of the loop the move is in (e.g. addresses that would then
        stay live in registers across a whole loop)."""
        wide = ir.IntegerType(a.type).width == 64
        return _asm([a.type], [a], f"mov.b{64 if wide else 32} $0, $1;", "=l,l" if wide else "=r,r").result

    def cdiv(self, a, b: int):
        """ceil(a / b) for a >= 0 and a positive constant b."""
        return self.div(self.add(a, b - 1), b)

    def _cmp(self, pred, a, b):
        return arith.cmpi(pred, *self._pair(a, b))

    def lt(self, a, b): return self._cmp(arith.CmpIPredicate.slt, a, b)
    def le(self, a, b): return self._cmp(arith.CmpIPredicate.sle, a, b)
    def gt(self, a, b): return self._cmp(arith.CmpIPredicate.sgt, a, b)
    def ge(self, a, b): return self._cmp(arith.CmpIPredicate.sge, a, b)
    def eq(self, a, b): return self._cmp(arith.CmpIPredicate.eq, a, b)
    def ne(self, a, b): return self._cmp(arith.CmpIPredicate.ne, a, b)
    def ult(self, a, b): return self._cmp(arith.CmpIPredicate.ult, a, b)
    def land(self, a, b): return arith.andi(a, b)

    def select(self, c, a, b):
        a, b = self._pair(a, b)
        return arith.select(c, a, b)

    def shfl_idx(self, x: ir.Value, lane: ir.Value) -> ir.Value:
        """The i32 or f32 `x` of lane `lane` (an i32) of the warp, every lane taking part."""
        return _op("nvvm.shfl.sync", [x.type], [self.c32(-1), x, lane, self.c32(31)],
                   {"kind": "#nvvm<shfl_kind idx>"}).result

    def to_i64(self, a):
        if not isinstance(a, ir.Value):
            return self.c64(a)
        return a if a.type == self.i64 else arith.extsi(self.i64, a)

    def clamp(self, a, lo, hi):
        return self.min(self.max(a, lo), hi)

    # -- f32
    def fadd(self, a, b): return arith.addf(*self._pair(a, b))
    def fsub(self, a, b): return arith.subf(*self._pair(a, b))
    def fmul(self, a, b): return arith.mulf(*self._pair(a, b))
    def fmax(self, a, b): return arith.maxnumf(*self._pair(a, b))
    def fma(self, a, b, c): return math.fma(a, b, c)

    def fmul_down(self, a, b):
        """a * b rounded toward -inf (mul.rm.f32)."""
        return llvm.call_intrinsic(self.f32, "llvm.nvvm.mul.rm.f", list(self._pair(a, b)), [], [])

    def fma_down(self, a, b, c):
        """a * b + c rounded toward -inf (fma.rm.f32)."""
        return llvm.call_intrinsic(self.f32, "llvm.nvvm.fma.rm.f", [a, b, c], [], [])

    def feq(self, a, b):
        return arith.cmpf(arith.CmpFPredicate.OEQ, *self._pair(a, b))

    def neg_inf(self) -> ir.Value:
        return self.cf(float("-inf"))


class Approx:
    """The SFU's approximate instructions (Note [No libdevice] in ptx.py)."""

    def __init__(self, e: Emit):
        self.e = e

    def _call(self, name, x):
        return llvm.call_intrinsic(self.e.f32, name, [x], [], [])

    def exp2(self, x): return self._call("llvm.nvvm.ex2.approx.ftz.f", x)
    def log2(self, x): return self._call("llvm.nvvm.lg2.approx.ftz.f", x)
    def rcp(self, x): return self._call("llvm.nvvm.rcp.approx.ftz.f", x)
    def rsqrt(self, x): return self._call("llvm.nvvm.rsqrt.approx.ftz.f", x)


# 2^f on [0, 1) (FlashAttention-4's degree-3 fit), lowest degree first after the 1.
EXP2_POLY = (0.695146143436431884765625, 0.227564394474029541015625, 0.077119089663028717041015625)
EXP2_SHIFTER = 12582912.0     # 0x4B400000 = 2^23 + 2^22: its ulp is 1 for the sums below


def exp2_fma(e: Emit, x: ir.Value) -> ir.Value:
    """2^x for f32 x <= 8 (above 0 only under a lazy max, Note [Lazy rescale]) without
    the SFU (Note [Exponentials on the FMA pipe] in softmax.py): x clamped at -127 (so -inf gives 0); r = x + shifter rounded
    down holds floor(x) in its low mantissa bits; f = x - floor(x) in [0, 1);
    p = 2^f by the cubic EXP2_POLY (three FMAs); floor(x) is added to p's exponent
    as an integer (r << 23 leaves floor(x) << 23: the shifter's bits shift out)."""
    x = e.fmax(x, -127.0)
    shifter = e.cf(EXP2_SHIFTER)
    r = llvm.call_intrinsic(e.f32, "llvm.nvvm.add.rm.f", [x, shifter], [], [])
    f = e.fsub(x, e.fsub(r, shifter))
    p = e.cf(EXP2_POLY[2])
    for c in (EXP2_POLY[1], EXP2_POLY[0], 1.0):
        p = e.fma(p, f, e.cf(c))
    bits = e.add(llvm.bitcast(e.i32, p), e.shl(llvm.bitcast(e.i32, r), 23))
    return llvm.bitcast(e.f32, bits)


class Smem:
    """The kernel's dynamic shared memory: one 128-byte aligned byte array, addressed by
    32-bit shared-window addresses (Note [32-bit shared addresses])."""

    ALIGN = 128

    def __init__(self, e: Emit, symbol: str):
        self.e = e
        base = llvm.mlir_addressof(ir.Type.parse("!llvm.ptr<3>"), symbol)
        self.base = llvm.ptrtoint(e.i32, base)

    @staticmethod
    def declare(symbol: str, alignment: int = ALIGN) -> None:
        """The `llvm.mlir.global` to place in the gpu.module body (before the kernel)."""
        llvm.GlobalOp(ir.Type.parse("!llvm.array<0 x i8>"), symbol,
                      ir.Attribute.parse("#llvm.linkage<external>"), alignment=alignment, addr_space=3)

    def address(self, byte_offset: Num) -> ir.Value:
        return self.e.add(self.base, byte_offset)


class GlobalPtr:
    """Address arithmetic on a global tensor of 16-bit or 32-bit elements, indexed in
    elements with i64 offsets."""

    def __init__(self, e: Emit, ptr: ir.Value, elem_bits: int):
        self.e = e
        self.ptr = ptr
        self.ptr_type = ir.Type.parse("!llvm.ptr<1>")
        self.elem = ir.IntegerType.get_signless(elem_bits)

    def offset(self, elems: ir.Value) -> "GlobalPtr":
        p = llvm.GEPOp(self.ptr_type, self.ptr, [elems], [_DYNAMIC], self.elem, 0).result
        return GlobalPtr(self.e, p, self.elem.width)


def _asm(results: list[ir.Type], operands, text: str, constraints: str) -> ir.Operation:
    """`asm volatile`: the side effect keeps LLVM from moving shared-memory reads across
    barriers or hoisting them out of the KV loop (ptxas still schedules them)."""
    res = results[0] if len(results) == 1 else (
        ir.Type.parse(f"!llvm.struct<({', '.join(str(t) for t in results)})>") if results
        else ir.Type.parse("!llvm.void"))
    return llvm.InlineAsmOp(res if results else None, operands, text, constraints,
                            has_side_effects=True).operation


def st_shared_b32(addr: ir.Value, value: ir.Value, offset: int = 0) -> None:
    """Store the i32 `value` at shared address `addr + offset`."""
    _asm([], [addr, value], f"st.shared.b32 [$0+{offset}], $1;", "r,r")


def ld_shared_v4(e: Emit, addr: ir.Value) -> ir.Value:
    """16 bytes from shared address `addr` (16-byte aligned), as a vector<4xi32>."""
    op = _asm([e.i32] * 4, [addr], "ld.shared.v4.b32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,r")
    vec = llvm.mlir_undef(ir.VectorType.get([4], e.i32))
    for i in range(4):
        vec = llvm.insertelement(vec, llvm.extractvalue(e.i32, op.result, [i]), e.c32(i))
    return vec


def warp_sync() -> None:
    """`bar.warp.sync` of the whole warp: its lanes' shared-memory writes before it are
    visible to its lanes' reads after it."""
    _asm([], [], "bar.warp.sync -1;", "")


class CpAsync:
    """16-byte `cp.async.cg` global->shared copies and their commit groups."""

    def __init__(self, e: Emit):
        self.e = e

    def copy16(self, dst: ir.Value, src: ir.Value, valid: ir.Value | None = None, *,
               dst_offset: int = 0, src_offset: int = 0) -> None:
        """Copy 16 bytes from global `src + src_offset` to shared `dst + dst_offset` (i32;
        offsets in bytes, folded into the instruction); when `valid` is false, read
        nothing and zero-fill the 16 bytes."""
        addrs = f"[$0+{dst_offset}], [$1+{src_offset}], 16"
        if valid is None:
            _asm([], [dst, src], f"cp.async.cg.shared.global {addrs};", "r,l")
            return
        size = self.e.select(valid, 16, self.e.c32(0))
        _asm([], [dst, src, size], f"cp.async.cg.shared.global {addrs}, $2;", "r,l,r")

    def commit(self) -> None:
        nvvm.cp_async_commit_group()

    def wait(self, pending: int) -> None:
        """Wait until at most `pending` committed groups are still in flight."""
        nvvm.cp_async_wait_group(pending)


class CtaBarrier:
    def sync(self) -> None:
        nvvm.barrier0()


class NamedBarrier:
    """`bar.sync` / `bar.arrive` on hardware barrier `index` (1..15; 0 is the CTA's) for
    `threads` threads, a multiple of 32: the warps that sync wait until that many
    threads have arrived or synced."""

    def __init__(self, e: Emit, index: int, threads: int):
        if not 1 <= index <= 15 or threads % 32:
            raise ValueError(f"named barrier {index} for {threads} threads")
        self.e, self.index, self.threads = e, index, threads

    def sync(self) -> None:
        _asm([], [], f"bar.sync {self.index}, {self.threads};", "")

    def arrive(self) -> None:
        _asm([], [], f"bar.arrive {self.index}, {self.threads};", "")


class MBarrier:
    """sm_90 shared-memory mbarriers (8 bytes each) at i32 shared addresses: `init` with
    an expected arrival count, arrivals by threads or by the completion of a thread's
    cp.async copies, and a wait for the completion of the phase of a given parity.
    A fresh barrier is in phase 0, so waiting for parity 1 returns at once (the
    "previous" phase counts as complete): a producer waits for an empty slot with
    parity (use & 1) ^ 1 from its first use on."""

    def __init__(self, e: Emit):
        self.e = e

    def init(self, addr, count: int) -> None:
        _asm([], [addr], f"mbarrier.init.shared::cta.b64 [$0], {count};", "r")

    def arrive(self, addr, only=None) -> None:
        """One arrival; with the i1 `only`, by the threads where it holds."""
        if only is None:
            _asm([], [addr], "mbarrier.arrive.shared::cta.b64 _, [$0];", "r")
            return
        _asm([], [addr, arith.extui(self.e.i32, only)],
             "{\n.reg .pred p;\nsetp.ne.b32 p, $1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [$0];\n}", "r,r")

    def arrive_on_copies(self, addr) -> None:
        """An arrival once every cp.async this thread issued before has landed (.noinc:
        it is one of the `count` the barrier expects)."""
        _asm([], [addr], "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$0];", "r")

    def wait(self, addr, parity) -> None:
        """Block until the phase of parity `parity` (i32, 0 or 1) has completed."""
        _asm([], [addr, parity],
             "{\n.reg .pred done;\nwait_${:uid}:\n"
             "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
             "@!done bra wait_${:uid};\n}", "r,r")


def set_max_registers(count: int, increase: bool) -> None:
    """`setmaxnreg`: this warpgroup's registers per thread from here on (24..256, a
    multiple of 8); every warp of the warpgroup must run it."""
    if not 24 <= count <= 256 or count % 8:
        raise ValueError(f"setmaxnreg {count}: expected a multiple of 8 in 24..256")
    _asm([], [], f"setmaxnreg.{'inc' if increase else 'dec'}.sync.aligned.u32 {count};", "")


def fence_async_proxy() -> None:
    """Order this thread's generic-proxy view of shared memory before its later
    async-proxy accesses (wgmma's operand reads)."""
    _asm([], [], "fence.proxy.async.shared::cta;", "")


class LdMatrix:
    """`ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16`: four 8x8 b16 matrices, lane
    8q+r giving the (i32 shared) address of row r of matrix q; returns four i32 registers."""

    def __init__(self, e: Emit):
        self.e = e

    def x4(self, addr: ir.Value, offset: int = 0, trans: bool = False) -> list[ir.Value]:
        """Load from shared address `addr + offset` (the constant folded into the instruction)."""
        suffix = ".trans" if trans else ""
        op = _asm([self.e.i32] * 4, [addr],
                  f"ldmatrix.sync.aligned.m8n8.x4{suffix}.shared.b16 {{$0, $1, $2, $3}}, [$4+{offset}];",
                  "=r,=r,=r,=r,r")
        return [llvm.extractvalue(self.e.i32, op.result, [i]) for i in range(4)]


class MmaSync:
    """`mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`.

    Fragments (g = lane/4, t = lane%4): A = 4 x i32 (pairs at rows g, g+8 and k 2t, 2t+8),
    B = 2 x i32 (k 2t and 2t+8 at column g), C/D = 4 x f32 at (g, 2t..2t+1), (g+8, 2t..2t+1).
    """

    def __init__(self, e: Emit, dtype: str):
        self.e = e
        self.dtype = dtype
        self.struct = ir.Type.parse("!llvm.struct<(f32, f32, f32, f32)>")

    def __call__(self, a: Sequence[ir.Value], b: Sequence[ir.Value],
                 c: Sequence[ir.Value]) -> list[ir.Value]:
        op = _op("nvvm.mma.sync", [self.struct], [*map(self.operand, a), *map(self.operand, b), *c], {
            "layoutA": "#nvvm.mma_layout<row>", "layoutB": "#nvvm.mma_layout<col>",
            "shape": "#nvvm.shape<m = 16, n = 8, k = 16>",
            "multiplicandAPtxType": f"#nvvm.mma_type<{self.dtype}>",
            "multiplicandBPtxType": f"#nvvm.mma_type<{self.dtype}>",
            "operandSegmentSizes": "array<i32: 4, 2, 4>"})
        return [llvm.extractvalue(self.e.f32, op.result, [i]) for i in range(4)]

    @property
    def pair_type(self) -> ir.Type:
        """The type NVVM wants for a 32-bit register of two 16-bit operands."""
        return ir.VectorType.get([2], self.e.f16) if self.dtype == "f16" else self.e.i32

    def operand(self, reg: ir.Value) -> ir.Value:
        return reg if reg.type == self.pair_type else llvm.bitcast(self.pair_type, reg)

    def pack(self, lo: ir.Value, hi: ir.Value) -> ir.Value:
        """Two f32 -> one 32-bit register holding (lo, hi) as f16x2/bf16x2, round to nearest."""
        vt = ir.VectorType.get([2], self.e.f16 if self.dtype == "f16" else self.e.bf16)
        name = "nvvm.convert.f32x2.to.f16x2" if self.dtype == "f16" else "nvvm.convert.f32x2.to.bf16x2"
        # The op's operands are (hi, lo): the first goes to the upper half.
        v = _op(name, [vt], [hi, lo], {"rnd": "#nvvm.fp_rnd_mode<rn>"}).result
        return self.operand(v) if self.dtype == "f16" else llvm.bitcast(self.e.i32, v)


def warp_vote(e: Emit, pred: ir.Value, kind: str) -> ir.Value:
    """Warp-uniform vote.sync.{any,all} over the full warp: i1."""
    return nvvm.VoteSyncOp(e.i1, e.c32(-1), pred, getattr(nvvm.VoteSyncKind, kind)).result


def values_if(cond: ir.Value, then, values: list) -> list:
    """`then()` (a list like `values`) where `cond` holds, else `values`: a branch (scf.if
    yielding the list), so that the other side runs no instruction of `then`."""
    return branches(cond, then, lambda: values, [x.type for x in values])


def branches(cond: ir.Value, then, otherwise, types: list) -> list:
    """`then()` where `cond` holds, else `otherwise()`: lists of values of `types`, each
    emitted in its own side of an scf.if yielding it."""
    branch = scf.IfOp(cond, types, has_else=True)
    for block, side in ((branch.then_block, then), (branch.else_block, otherwise)):
        with ir.InsertionPoint(block):
            scf.yield_(side())
    return list(branch.results)


class Quad:
    """Reductions across the 4 lanes of a quad (the lanes holding one accumulator row)."""

    def __init__(self, e: Emit):
        self.e = e

    def shfl_xor(self, x: ir.Value, lane_mask: int) -> ir.Value:
        return _op("nvvm.shfl.sync", [x.type],
                   [self.e.c32(-1), x, self.e.c32(lane_mask), self.e.c32(31)],
                   {"kind": "#nvvm<shfl_kind bfly>"}).result

    def allreduce(self, x: ir.Value, combine) -> ir.Value:
        x = combine(x, self.shfl_xor(x, 2))
        return combine(x, self.shfl_xor(x, 1))


class Wgmma:
    """sm_90a warpgroup MMA: `wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}` with
    f32 accumulators, B (and A) read through shared-memory matrix descriptors, or A from
    registers.

    Accumulators (Note [wgmma accumulators]): warp w of the warpgroup holds rows
    16w + g and 16w + g + 8 (g = lane/4, t = lane%4); register 4j + x is column
    8j + 2t + (x & 1) of row 16w + g + 8 (x >> 1): per warp, the layout of `MmaSync`'s
    C fragments of N/8 adjacent n8 atoms. A register operand is `MmaSync`'s A fragment.

    The instructions are asynchronous: `mma` issues, `commit` closes the group, and
    `wait` returns the accumulators. Every accumulator passes through `wait`'s asm as
    a tied operand, so nothing reads them before the wait; `fence` must precede the
    first `mma` whose registers other instructions wrote.
    """

    SWIZZLE_MODES = {128: 1, 64: 2, 32: 3}      # swizzle width in bytes -> descriptor bits 62-63

    def __init__(self, e: Emit, dtype: str):
        self.e = e
        self.dtype = dtype

    def descriptor(self, addr: ir.Value, swizzle_bytes: int, leading_bytes: int, stride_bytes: int) -> ir.Value:
        """The i64 descriptor of an operand at shared address `addr` (i32) swizzled in
        rows of `swizzle_bytes` (its 8-row atoms aligned to 8 * swizzle_bytes): start
        address, leading and stride byte offsets in 16-byte units, swizzle mode."""
        e = self.e
        start = arith.extui(e.i64, e.and_(e.shr(addr, 4), 0x3FFF))
        fixed = ((leading_bytes >> 4) << 16) | ((stride_bytes >> 4) << 32) | (self.SWIZZLE_MODES[swizzle_bytes] << 62)
        return e.or_(start, e.c64(fixed - (1 << 64) if fixed >> 63 else fixed))     # as a signed i64

    def advance(self, desc: ir.Value, byte_offset: int) -> ir.Value:
        """The descriptor `byte_offset` bytes further (a multiple of 16; the start
        address field does not overflow inside 228 KB of shared memory)."""
        return desc if byte_offset == 0 else self.e.add(desc, self.e.c64(byte_offset >> 4))

    def fence(self) -> None:
        _asm([], [], "wgmma.fence.sync.aligned;", "")

    def commit(self) -> None:
        _asm([], [], "wgmma.commit_group.sync.aligned;", "")

    def wait(self, acc: Sequence[ir.Value], pending: int = 0, through: Sequence[ir.Value] = ()) -> list[ir.Value]:
        """Wait until at most `pending` groups are in flight: the accumulators, readable,
        followed by `through` (f32 or i32 values) passed through the wait. Passing a
        value through keeps its register untouched until the wait (the A registers of an
        mma in flight, which the hardware reads asynchronously), and a computation on
        it after the wait (so that ptxas sees no register of an mma in flight redefined,
        which makes it serialize every wgmma of the kernel)."""
        values = [*acc, *through]
        kinds = ["=f" if v.type == self.e.f32 else "=r" for v in values]     # f32, or 32-bit pairs
        constraints = ",".join(kinds + [str(i) for i in range(len(values))])
        op = _asm([v.type for v in values], values, f"wgmma.wait_group.sync.aligned {pending};", constraints)
        return [llvm.extractvalue(v.type, op.result, [i]) for i, v in enumerate(values)]

    def mma(self, acc: Sequence[ir.Value] | None, n: int, b_desc: ir.Value, *, a_desc: ir.Value | None = None,
            a_regs: Sequence[ir.Value] | None = None, trans_b: bool = False) -> list[ir.Value]:
        """D = A B (+ D when `acc` is given; None: the accumulators are overwritten) for
        an m64 x n x k16 step; A from `a_desc` (K-major) or the four registers `a_regs`;
        B K-major, or N-major with `trans_b`."""
        e = self.e
        if (a_desc is None) == (a_regs is None):
            raise ValueError("give the A operand either as a descriptor or as registers")
        regs = n // 2
        scale_d = e.c32(0 if acc is None else 1)
        acc = [] if acc is None else list(acc)     # overwritten: outputs only
        if acc and len(acc) != regs:
            raise ValueError(f"m64n{n} has {regs} accumulators per thread, got {len(acc)}")
        out = ", ".join(f"${i}" for i in range(regs))
        if a_desc is not None:
            a_ops, a_text, a_cons, trans = [a_desc], f"${regs}", ["l"], f"0, {int(trans_b)}"
        else:
            a_ops = list(a_regs)
            a_text = "{" + ", ".join(f"${regs + i}" for i in range(4)) + "}"
            a_cons, trans = ["r"] * 4, f"{int(trans_b)}"
        b_index = regs + len(a_ops)
        text = ("{\n.reg .pred p;\n"
                f"setp.ne.b32 p, ${b_index + 1}, 0;\n"
                f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{self.dtype}.{self.dtype} "
                f"{{{out}}}, {a_text}, ${b_index}, p, 1, 1, {trans};\n}}")
        constraints = ",".join(["=f"] * regs + a_cons + ["l", "r"] + [str(i) for i in range(len(acc))])
        op = _asm([e.f32] * regs, [*a_ops, b_desc, scale_d, *acc], text, constraints)
        return [llvm.extractvalue(e.f32, op.result, [i]) for i in range(regs)]

