"""sm_100a's resource builders (attn-lower-sm100a, sm100a.py): tensor memory (`Tmem`), the
fifth-generation tensor-core MMA (`Umma`) and its descriptors, and TMA tile loads (`tma_load`).
Each is inline PTX, as the PTX ISA writes it (sections 9.7.16 "TensorCore 5th Generation" and
9.7.9.25 "cp.async.bulk.tensor"); the emulator runs the same instructions (runtime/attnc_sim,
isa_sm100.py, isa_bulk.py).

Note [Tensor-memory reads and their wait]: a `tcgen05.ld` returns its registers only at the
warp's `tcgen05.wait::ld`, and nothing may read them before. The load and its wait are one
inline-asm statement here, so LLVM cannot place a use of a result between the two; likewise a
`tcgen05.st` whose data another role reads next is waited for (`wait::st`) in its own statement.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm

from attnc.backend.nvgpu_builders import Emit, _asm
from attnc.errors import AttncError

TMEM_COLUMNS = 512
MMA_K = 16                  # elements of K one kind::f16 MMA takes
SWIZZLE_CODES = {0: 0, 32: 6, 64: 4, 128: 2}        # swizzle bytes -> descriptor bits 61-63


def _pred(e: Emit, cond) -> ir.Value:
    return arith.extui(e.i32, cond)


def _guarded(text: str) -> str:
    """`text` run where the i32 operand $0 is non-zero."""
    return "{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n" + "\n".join(f"@p {line}" for line in text.split("\n")) + "\n}"


class Tmem:
    """Tensor memory: 128 lanes x 512 columns of 32 bits a CTA. An address is lane << 16 |
    column; a warp reaches the 32 lanes of quarter warp_id % 4 (PTX ISA 9.7.16.8.1)."""

    def __init__(self, e: Emit):
        self.e = e

    def alloc(self, slot, columns: int = TMEM_COLUMNS) -> None:
        """The warp's collective allocation; the address lands in shared memory at `slot`."""
        _asm([], [slot], f"tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [$0], {columns};\n"
                         "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;", "r")

    def dealloc(self, address, columns: int = TMEM_COLUMNS) -> None:
        _asm([], [address], f"tcgen05.dealloc.cta_group::1.sync.aligned.b32 $0, {columns};", "r")

    def fence_before(self) -> None:
        _asm([], [], "tcgen05.fence::before_thread_sync;", "")

    def fence_after(self) -> None:
        _asm([], [], "tcgen05.fence::after_thread_sync;", "")

    def load(self, address, count: int, as_float: bool = True) -> list:
        """`count` columns (32x32b: this thread's lane) from `address`, waited for (Note
        [Tensor-memory reads and their wait])."""
        _check_columns("tcgen05.ld", count)
        e = self.e
        regs = ", ".join(f"${i}" for i in range(count))
        op = _asm([e.i32] * count, [address],
                  f"tcgen05.ld.sync.aligned.32x32b.x{count}.b32 {{{regs}}}, [${count}];\n"
                  "tcgen05.wait::ld.sync.aligned;", ",".join(["=r"] * count) + ",r")
        words = [llvm.extractvalue(e.i32, op.result, [i]) for i in range(count)] if count > 1 else [op.result]
        return [arith.bitcast(e.f32, w) for w in words] if as_float else words

    def store(self, address, values: list, wait: bool = True) -> None:
        """`len(values)` 32-bit columns of this thread's lane at `address`; `wait`: then
        tcgen05.wait::st, so that a thread sync after it publishes them."""
        e = self.e
        words = [v if v.type == e.i32 else arith.bitcast(e.i32, v) for v in values]
        count = len(words)
        _check_columns("tcgen05.st", count)
        regs = ", ".join(f"${i + 1}" for i in range(count))
        text = f"tcgen05.st.sync.aligned.32x32b.x{count}.b32 [$0], {{{regs}}};"
        if wait:
            text += "\ntcgen05.wait::st.sync.aligned;"
        _asm([], [address, *words], text, ",".join(["r"] * (count + 1)))

    def lane_address(self, base, warp) -> ir.Value:
        """`base` at the first lane of this warp's quarter."""
        e = self.e
        return e.add(base, e.shl(e.and_(warp, 3), 21))        # (32 * (warp % 4)) << 16


class Umma:
    """`tcgen05.mma.cta_group::1.kind::f16`: D (f32, tensor memory) = A x B (+ D), A from a
    shared-memory descriptor or tensor memory, B from a descriptor; issued by one thread."""

    def __init__(self, e: Emit, dtype: str):
        self.e = e
        self.dtype = dtype

    @staticmethod
    def instr_desc(m: int, n: int, dtype: str, b_mn_major: bool) -> int:
        """The instruction descriptor (PTX ISA 9.7.16.4.2): f32 D, A and B of `dtype`, A
        K-major, B K-major or MN-major, N >> 3 at bit 17, M >> 4 at bit 24."""
        code = {"f16": 0, "bf16": 1}[dtype]
        return 1 << 4 | code << 7 | code << 10 | int(b_mn_major) << 16 | (n >> 3) << 17 | (m >> 4) << 24

    def smem_desc(self, address, leading_bytes: int, stride_bytes: int, swizzle: int) -> ir.Value:
        """The i64 shared-memory descriptor (PTX ISA 9.7.16.4.1) of an operand at shared
        address `address` (i32): start, leading and stride byte offsets (16-byte units), the
        constant 0b001 at bit 46, the swizzle mode at bits 61-63."""
        e = self.e
        start = arith.extui(e.i64, e.and_(e.shr(address, 4), 0x3FFF))
        fixed = ((leading_bytes >> 4) & 0x3FFF) << 16 | ((stride_bytes >> 4) & 0x3FFF) << 32 | 1 << 46 \
            | SWIZZLE_CODES[swizzle] << 61
        return e.or_(start, e.c64(fixed - (1 << 64) if fixed >> 63 else fixed))

    def mma(self, issue, d_tmem, a, b_desc, idesc: int, accumulate, a_in_tmem: bool) -> None:
        """One MMA, by the threads where the i1 `issue` holds; `a`: a descriptor (i64) or
        a tensor-memory address (i32); `accumulate` (i1): D += A x B, else D = A x B."""
        e = self.e
        a_operand = "[$2]" if a_in_tmem else "$2"
        text = ("{\n.reg .pred p, acc;\nsetp.ne.b32 p, $0, 0;\nsetp.ne.b32 acc, $5, 0;\n"
                f"@p tcgen05.mma.cta_group::1.kind::f16 [$1], {a_operand}, $3, $4, acc;\n}}")
        _asm([], [_pred(e, issue), d_tmem, a, b_desc, e.c32(idesc), _pred(e, accumulate)], text,
             f"r,r,{'r' if a_in_tmem else 'l'},l,r,r")

    def commit(self, issue, mbar) -> None:
        """The mbarrier at `mbar` gets one arrival once every MMA the issuing thread issued
        before has completed."""
        _asm([], [_pred(self.e, issue), mbar],
             _guarded("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [$1];"), "r,r")


def tma_load(e: Emit, issue, dst, tmap, coords: list, mbar) -> None:
    """`cp.async.bulk.tensor` of the box at `coords` (innermost first, i32) of the tensor map at
    generic address `tmap` (i64) into shared memory at `dst`, completing its bytes on `mbar`;
    by the threads where `issue` holds."""
    rank = len(coords)
    places = ", ".join(f"${i + 4}" for i in range(rank))
    text = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
            f"[$1], [$2, {{{places}}}], [$3];")
    _asm([], [_pred(e, issue), dst, tmap, mbar, *coords], _guarded(text), "r,r,l,r" + ",r" * rank)


def tma_store(e: Emit, issue, src, tmap, coords: list) -> None:
    """`cp.async.bulk.tensor` of shared memory at `src` to the box at `coords` (innermost first,
    i32) of the tensor map at generic address `tmap` (i64), in the issuing thread's open bulk
    group; elements outside the tensor are not written. By the threads where `issue` holds."""
    rank = len(coords)
    places = ", ".join(f"${i + 3}" for i in range(rank))
    text = f"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group [$1, {{{places}}}], [$2];"
    _asm([], [_pred(e, issue), tmap, src, *coords], _guarded(text), "r,l,r" + ",r" * rank)


def bulk_wait_read(e: Emit, issue) -> None:
    """Close the issuing thread's bulk group and wait until every bulk copy it issued has
    read its shared memory (which may then be written again)."""
    _asm([], [_pred(e, issue)], _guarded("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;"), "r")


def expect_tx(e: Emit, issue, mbar, nbytes: int) -> None:
    """One arrival on `mbar` that also expects `nbytes` more bytes this phase."""
    _asm([], [_pred(e, issue), mbar],
         _guarded(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [$1], {nbytes};"), "r,r")


def param_address(e: Emit, param) -> ir.Value:
    """The generic address (i64) of a kernel parameter passed by value (a tensor map's):
    `cvta.param` of the pointer LLVM gives the byval argument (Note [Tensor maps] in
    attnc_runtime/params.py; the kernel marks it nvvm.grid_constant, ptx.py)."""
    return llvm.ptrtoint(e.i64, param)


def _check_columns(instruction: str, count: int) -> None:
    """A 32x32b tcgen05.ld or .st moves 1, 2, 4, ... or 128 columns (its .num)."""
    if count not in (1, 2, 4, 8, 16, 32, 64, 128):
        raise AttncError(f"{instruction}.32x32b moves 1, 2, 4, ... or 128 columns a thread, not {count}")
