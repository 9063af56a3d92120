"""The sm_80 forward kernel (FlashAttention-2 style), built directly in upstream dialects.

One CTA per (m_block, h, b); `num_warps` warps, warp w owning rows
[w*block_m/num_warps, (w+1)*block_m/num_warps) of the Q tile in 16-row MMA tiles.

    load Q[m_block], K[n0]                      ─┐ cp.async group 0
    load V[n0], K[n1], ..., K[n_{S-1}]           ─┘ one group each (S = stages)
    for t, n in enumerate(hi-1 down to lo):     # partial blocks first (peeled), then full
        wait K[n]; bar.sync
        load V[n+S-1 steps] -> its slot; commit
        S = Q K[n]^T                            # ldmatrix.x4 + mma.m16n8k16, f32 acc
        [score_mod; keep/bound mask: partial blocks only]
        wait V[n]; bar.sync                     # also: every warp is done with K[n]'s slot
        load K[n+S steps] -> K[n]'s slot; commit
        online softmax (exp2, scale folded)     # quad shuffles, no smem
        O = O * alpha + P V[n]                  # P re-packed in registers as the A operand
    O /= l; store O (and lse = m*scale + ln l)

Note [P as A operand]: the m16n8k16 accumulator of rows g, g+8 and columns 2t, 2t+1 of
two adjacent n8 atoms is exactly the A fragment of a k16 step (rows g, g+8; k 2t, 2t+8),
so P needs no shuffle, only a cvt to f16x2/bf16x2 pairs (warps split rows only).

Note [cp.async group counting]: every step commits exactly one group even when it has
nothing to load (an empty group), so the K of step t is always followed by exactly
2S-2 younger groups when step t waits for it, and so is its V: `cp.async.wait_group
2S-2` is a constant. For S = 1 this is FA2's alternating K/V schedule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import gpu, llvm, nvvm, scf

from attnc.backend.kernel_spec import KvCtx, KvRange, Sm80KernelSpec, mask_hooks
from attnc.backend.nvgpu_builders import (Approx, CpAsync, CtaBarrier, Emit, GlobalPtr, LdMatrix,
                                          MmaSync, Quad, Smem)
from attnc.backend.sm80_softmax import OnlineSoftmax, SoftmaxState
from attnc.backend.sm80_tiles import FragmentReader, SwizzledTile, TileLoader

LOG2E = math.log2(math.e)
SMEM_SYMBOL = "attnc_dynamic_smem"
GPU_MODULE = "attnc_kernels"


@dataclass(frozen=True)
class KernelAbi:
    """How to launch the kernel: its parameters in order (manifest format, see
    runtime/attnc_runtime/manifest.py), block, dynamic shared memory and grid rule."""
    symbol: str
    params: tuple[dict, ...]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    grid: tuple[tuple, tuple, tuple]
    specialization: dict = field(default_factory=dict, compare=False)

    def manifest_kernel(self, name: str = "fwd") -> dict:
        return {"name": name, "symbol": self.symbol, "block": list(self.block),
                "dynamic_smem_bytes": self.dynamic_smem_bytes,
                "grid": [list(g) for g in self.grid], "params": [dict(p) for p in self.params]}


def kernel_abi(spec: Sm80KernelSpec) -> KernelAbi:
    tensors = ["q", "k", "v", "o"] + (["lse"] if spec.with_lse else [])
    params = [{"kind": "ptr", "tensor": t} for t in tensors]
    params += [{"kind": "dim", "name": d, "type": "i32"} for d in ("M", "N", "H", "HKV")]
    for t in tensors:
        params += [{"kind": "stride", "tensor": t, "axis": a, "type": "i64"}
                   for a in range(2 if t == "lse" else 3)]
    for x in spec.extra_params:
        params.append({"kind": x.kind, "name": x.name, "type": x.type} if x.kind == "dim"
                      else {"kind": "ptr", "tensor": x.name})
    specialization = {"dtype": spec.dtype, "out_dtype": spec.o_dtype, "head_dim_qk": spec.head_dim_qk,
                      "head_dim_v": spec.head_dim_v, "block_m": spec.block_m, "block_n": spec.block_n,
                      "num_warps": spec.num_warps, "stages": spec.stages, "mask": spec.mask,
                      "with_lse": spec.with_lse, "softmax_scale": spec.scale}
    return KernelAbi(spec.symbol, tuple(params), (spec.threads, 1, 1), spec.smem_bytes,
                     ((["cdiv", "M", spec.block_m],), ("H",), ("B",)), specialization)


def _param_name(p: dict) -> str:
    if p["kind"] == "stride":
        return f"stride_{p['tensor']}_{p['axis']}"
    return p.get("tensor") or p["name"]


def _param_type(p: dict) -> ir.Type:
    if p["kind"] == "ptr":
        return ir.Type.parse("!llvm.ptr<1>")
    return ir.IntegerType.get_signless(32 if p["type"] == "i32" else 64)


def build_sm80_module(spec: Sm80KernelSpec, context: ir.Context | None = None) -> tuple[ir.Module, KernelAbi]:
    """The kernel of `spec` as a `gpu.container_module` holding one `gpu.module`, and its ABI."""
    spec.check()
    abi = kernel_abi(spec)
    ctx = context or _current_context() or ir.Context()
    with ctx, ir.Location.name(spec.symbol):
        module = ir.Module.create()
        module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
        with ir.InsertionPoint(module.body):
            gpu_module = gpu.GPUModuleOp(GPU_MODULE)
            gpu_module.bodyRegion.blocks.append()
        with ir.InsertionPoint(gpu_module.bodyRegion.blocks[0]):
            Smem.declare(SMEM_SYMBOL)
            arg_types = [_param_type(p) for p in abi.params]
            func = gpu.GPUFuncOp(ir.TypeAttr.get(ir.FunctionType.get(arg_types, [])), spec.symbol,
                                 kernel=True, known_block_size=list(abi.block))
            entry = func.body.blocks.append(*arg_types)
        with ir.InsertionPoint(entry):
            args = {_param_name(p): a for p, a in zip(abi.params, entry.arguments)}
            _Sm80Forward(spec, args).emit()
            gpu.ReturnOp([])
        if not module.operation.verify():
            raise RuntimeError(f"the sm_80 kernel {spec.symbol} does not verify")
    return module, abi


def _current_context() -> ir.Context | None:
    try:
        return ir.Context.current
    except ValueError:
        return None


class _Sm80Forward:
    """Emits the kernel body at the current insertion point."""

    def __init__(self, spec: Sm80KernelSpec, args: dict[str, ir.Value]):
        self.spec = spec
        self.e = e = Emit(args)
        self.cp = CpAsync(e)
        self.bar = CtaBarrier()
        self.mma = MmaSync(e, spec.dtype)
        self.quad = Quad(e)
        self.approx = Approx(e)
        self.smem = Smem(e, SMEM_SYMBOL)
        self.kv_range_fn, self.keep_fn = mask_hooks(spec)
        scale_log2 = LOG2E if spec.score_mod else spec.scale * LOG2E
        self.softmax = OnlineSoftmax(e, self.approx, self.quad, scale_log2)
        self.q_tile = SwizzledTile(0, spec.block_m, spec.head_dim_qk)
        self.k_tile = SwizzledTile(spec.q_tile_bytes, spec.block_n, spec.head_dim_qk)
        self.v_tile = SwizzledTile(spec.q_tile_bytes + spec.k_tile_bytes, spec.block_n, spec.head_dim_v)
        self.slot_bytes = spec.k_tile_bytes + spec.v_tile_bytes

    # ------------------------------------------------------------ setup
    def _coordinates(self) -> None:
        e, s = self.e, self.spec
        tid = nvvm.read_ptx_sreg_tid_x(e.i32)
        self.tid = tid
        self.warp = e.shr(tid, 5)
        self.lane = e.and_(tid, 31)
        self.m_block = nvvm.read_ptx_sreg_ctaid_x(e.i32)
        self.h = nvvm.read_ptx_sreg_ctaid_y(e.i32)
        self.b = nvvm.read_ptx_sreg_ctaid_z(e.i32)
        self.kv_h = e.div(self.h, e.div(e.dim("H"), e.dim("HKV")))
        self.warp_row0 = e.mul(self.warp, s.rows_per_warp)
        # The accumulator rows/columns a lane holds: row g (+8), columns 2t, 2t+1 (+8 per atom).
        self.row0 = e.add(e.add(e.mul(self.m_block, s.block_m), self.warp_row0), e.shr(self.lane, 2))
        self.col0 = e.shl(e.and_(self.lane, 3), 1)
        self.loader = TileLoader(e, self.cp, self.smem, tid, s.threads)
        self.reader = rd = FragmentReader(e, LdMatrix(e), self.smem, self.lane)
        self.q_bases = rd.bases(self.q_tile, rd.A, row0=self.warp_row0)
        self.k_bases = rd.bases(self.k_tile, rd.B)
        self.v_bases = rd.bases(self.v_tile, rd.B_TRANS)

    def _tensor(self, name: str, b, h) -> GlobalPtr:
        e = self.e
        elems = e.add(e.mul(e.to_i64(b), e.arg(f"stride_{name}_0")), e.mul(e.to_i64(h), e.arg(f"stride_{name}_1")))
        bits = 32 if name == "lse" or (name == "o" and self.spec.o_dtype == "f32") else 16
        return GlobalPtr(e, e.arg(name), bits).offset(elems)

    def _kv_range(self) -> KvRange:
        e, s = self.e, self.spec
        ctx = KvCtx(self.m_block, self.b, self.h, e.dim("M"), e.dim("N"), s.block_m, s.block_n)
        r = self.kv_range_fn(e, ctx)
        as_value = lambda v: v if isinstance(v, ir.Value) else e.c32(v)
        lo, hi = as_value(r.lo), as_value(r.hi)
        hi = e.max(hi, lo)
        # Full blocks hold no row >= N whatever the hook says: their loads are unpredicated.
        full_hi = e.clamp(e.min(as_value(r.full_hi), e.div(e.dim("N"), s.block_n)), lo, hi)
        # A statically empty low partial range (lo == full_lo == a constant) needs no loop.
        static_low = not isinstance(r.lo, ir.Value) and not isinstance(r.full_lo, ir.Value) and r.lo == r.full_lo
        full_lo = None if static_low else e.clamp(as_value(r.full_lo), lo, full_hi)
        return KvRange(lo, full_lo, full_hi, hi)

    # ------------------------------------------------------------ loads
    def _load_q(self) -> None:
        e, s = self.e, self.spec
        q = self._tensor("q", self.b, self.h)
        first = e.mul(self.m_block, s.block_m)
        q = q.offset(e.mul(e.to_i64(first), e.arg("stride_q_2")))
        self.loader.load(self.q_tile, 0, q, e.arg("stride_q_2"), e.sub(e.dim("M"), first))

    def _load_kv(self, name: str, n_block, slot_offset, ragged: bool) -> None:
        """Load block n_block of K or V; `ragged`: the block may hold rows >= N."""
        e, s = self.e, self.spec
        first = e.mul(n_block, s.block_n)
        stride = e.arg(f"stride_{name}_2")
        src = self.kv_ptr[name].offset(e.mul(e.to_i64(first), stride))
        tile = self.k_tile if name == "k" else self.v_tile
        self.loader.load(tile, slot_offset, src, stride, e.sub(e.dim("N"), first) if ragged else None)

    def _load_kv_if(self, name: str, n_block, slot_offset, lo, ragged: bool) -> None:
        """Load when n_block >= lo, then commit a group either way (Note [cp.async group counting])."""
        guard = scf.IfOp(self.e.ge(n_block, lo))
        with ir.InsertionPoint(guard.then_block):
            self._load_kv(name, n_block, slot_offset, ragged)
            scf.yield_([])
        self.cp.commit()

    def _slot_offset(self, t_plus: int, t):
        """Byte offset of the K/V slot of step t + t_plus."""
        stages = self.spec.stages
        if stages == 1:
            return 0
        return self.e.mul(self.e.rem(self.e.add(t, t_plus), stages), self.slot_bytes)

    # ------------------------------------------------------------ the two GEMMs
    def _qk(self, slot):
        s, mma, rd = self.spec, self.mma, self.reader
        zero = self.e.cf(0.0)
        acc = [[[zero] * 4 for _ in range(s.block_n // 8)] for _ in range(s.m_atoms)]
        k_bases = rd.at_slot(self.k_bases, slot)
        for kk in range(s.head_dim_qk // 16):
            q = [rd.a_operand(self.q_tile, self.q_bases, mi, kk) for mi in range(s.m_atoms)]
            for n_pair in range(s.block_n // 16):
                k = rd.b_operand(self.k_tile, k_bases, n_pair, kk)
                for mi in range(s.m_atoms):
                    acc[mi][2 * n_pair] = mma(q[mi], k[0:2], acc[mi][2 * n_pair])
                    acc[mi][2 * n_pair + 1] = mma(q[mi], k[2:4], acc[mi][2 * n_pair + 1])
        return acc

    def _pack_p(self, probs):
        """P as A operands of m16n8k16, in place of S's registers (Note [P as A operand]):
        p[mi][kk] = the 4 registers of rows g, g+8 and keys 16kk + {2t, 2t+8}."""
        s, pack = self.spec, self.mma.pack
        out = []
        for mi in range(s.m_atoms):
            top, bottom = probs[2 * mi], probs[2 * mi + 1]
            out.append([[pack(top[c], top[c + 1]), pack(bottom[c], bottom[c + 1]),
                         pack(top[c + 2], top[c + 3]), pack(bottom[c + 2], bottom[c + 3])]
                        for c in range(0, len(top), 4)])
        return out

    def _pv(self, p, acc_o, slot):
        s, mma, rd = self.spec, self.mma, self.reader
        v_bases = rd.at_slot(self.v_bases, slot)
        for kk in range(s.block_n // 16):
            for d_pair in range(s.head_dim_v // 16):
                v = rd.b_operand_trans(self.v_tile, v_bases, d_pair, kk)
                for mi in range(s.m_atoms):
                    acc_o[mi][2 * d_pair] = mma(p[mi][kk], v[0:2], acc_o[mi][2 * d_pair])
                    acc_o[mi][2 * d_pair + 1] = mma(p[mi][kk], v[2:4], acc_o[mi][2 * d_pair + 1])
        return acc_o

    # ------------------------------------------------------------ score mods and masks
    def _rows(self, acc):
        """Accumulators by row: rows[2*mi + half][2*nj + e] = acc[mi][nj][2*half + e]."""
        return [[atom[2 * half + x] for atom in acc[mi] for x in (0, 1)]
                for mi in range(len(acc)) for half in (0, 1)]

    def _element_indices(self, r: int, c: int, n_block):
        e, s = self.e, self.spec
        mi, half = divmod(r, 2)
        nj, x = divmod(c, 2)
        i = e.add(self.row0, 16 * mi + 8 * half)
        j = e.add(e.add(e.mul(n_block, s.block_n), self.col0), 8 * nj + x)
        return i, j

    def _score_mod(self, rows, n_block):
        if not self.spec.score_mod:
            return rows
        e = self.e
        out = []
        for r, row in enumerate(rows):
            out.append([self.spec.score_mod(e, e.fmul(x, self.spec.scale), self.b, self.h,
                                            *self._element_indices(r, c, n_block))
                        for c, x in enumerate(row)])
        return out

    def _mask(self, rows, n_block):
        e = self.e
        out = []
        for r, row in enumerate(rows):
            masked = []
            for c, x in enumerate(row):
                i, j = self._element_indices(r, c, n_block)
                keep = e.lt(j, e.dim("N"))
                if self.keep_fn:
                    keep = e.land(keep, self.keep_fn(e, self.b, self.h, i, j))
                masked.append(e.select(keep, x, e.neg_inf()))
            out.append(masked)
        return out

    def _mask_if(self, rows, n_block, partial):
        flat = [x for row in rows for x in row]
        branch = scf.IfOp(partial, [x.type for x in flat], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.yield_([x for row in self._mask(rows, n_block) for x in row])
        with ir.InsertionPoint(branch.else_block):
            scf.yield_(flat)
        width = len(rows[0])
        res = list(branch.results)
        return [res[r * width:(r + 1) * width] for r in range(len(rows))]

    # ------------------------------------------------------------ one KV step
    def _step(self, t, lo, hi, acc_o, state: SoftmaxState, mode: str):
        """Step t visits n_block = hi-1-t. mode: 'partial' | 'full' | 'maybe' (ask tile_partial)."""
        e, s = self.e, self.spec
        n_block = e.sub(e.sub(hi, 1), t)
        pending = 2 * s.stages - 2
        self.cp.wait(pending)
        self.bar.sync()
        # Full steps only ever load blocks below full_hi <= N / block_n: no row predicates.
        ragged = mode != "full"
        if s.stages == 1:
            self._load_kv("v", n_block, 0, ragged)
            self.cp.commit()
        else:
            self._load_kv_if("v", e.sub(n_block, s.stages - 1), self._slot_offset(s.stages - 1, t), lo, ragged)
        slot = self._slot_offset(0, t)
        rows = self._score_mod(self._rows(self._qk(slot)), n_block)
        if mode == "partial":
            rows = self._mask(rows, n_block)
        elif mode == "maybe":
            rows = self._mask_if(rows, n_block, s.tile_partial(e, self._ctx(), n_block))
        self.cp.wait(pending)
        self.bar.sync()
        self._load_kv_if("k", e.sub(n_block, s.stages), slot, lo, ragged)
        probs, state, alpha = self.softmax.step(rows, state, check_inf=mode != "full")
        p = self._pack_p(probs)
        acc_o = [[[e.fmul(x, alpha[2 * mi + i // 2]) for i, x in enumerate(atom)]
                  for atom in acc_o[mi]] for mi in range(s.m_atoms)]
        return self._pv(p, acc_o, slot), state

    def _ctx(self) -> KvCtx:
        e, s = self.e, self.spec
        return KvCtx(self.m_block, self.b, self.h, e.dim("M"), e.dim("N"), s.block_m, s.block_n)

    def _loop(self, t_lo, t_hi, lo, hi, acc_o, state: SoftmaxState, mode: str):
        """scf.for over steps [t_lo, t_hi), carrying O, m and l."""
        s = self.spec
        n_o = s.m_atoms * (s.head_dim_v // 8) * 4
        carried = [x for mi in acc_o for atom in mi for x in atom] + state.m + state.l
        loop = scf.ForOp(t_lo, t_hi, self.e.c32(1), carried)
        with ir.InsertionPoint(loop.body):
            it = list(loop.inner_iter_args)
            acc, st = self._step(loop.induction_variable, lo, hi, self._unflatten(it[:n_o]),
                                 SoftmaxState(it[n_o:n_o + 2 * s.m_atoms], it[n_o + 2 * s.m_atoms:]), mode)
            scf.yield_([x for mi in acc for atom in mi for x in atom] + st.m + st.l)
        res = list(loop.results)
        return self._unflatten(res[:n_o]), SoftmaxState(res[n_o:n_o + 2 * s.m_atoms], res[n_o + 2 * s.m_atoms:])

    def _unflatten(self, flat):
        s = self.spec
        atoms = s.head_dim_v // 8
        return [[flat[(mi * atoms + a) * 4:(mi * atoms + a + 1) * 4] for a in range(atoms)]
                for mi in range(s.m_atoms)]

    # ------------------------------------------------------------ epilogue
    def _store(self, acc_o, state: SoftmaxState) -> None:
        e, s = self.e, self.spec
        inv, lse = self.softmax.finalize(state)
        o = self._tensor("o", self.b, self.h)
        lse_ptr = self._tensor("lse", self.b, self.h) if s.with_lse else None
        for mi in range(s.m_atoms):
            for half in (0, 1):
                r = 2 * mi + half
                row = e.add(self.row0, 16 * mi + 8 * half)
                guard = scf.IfOp(e.lt(row, e.dim("M")))
                with ir.InsertionPoint(guard.then_block):
                    row_ptr = o.offset(e.add(e.mul(e.to_i64(row), e.arg("stride_o_2")), e.to_i64(self.col0)))
                    for d in range(s.head_dim_v // 8):
                        lo_, hi_ = (e.fmul(acc_o[mi][d][2 * half + x], inv[r]) for x in (0, 1))
                        self._store_pair(row_ptr.offset(e.c64(8 * d)), lo_, hi_)
                    if lse_ptr is not None:
                        self._store_lse(lse_ptr, row, lse[r])
                    scf.yield_([])

    def _store_pair(self, ptr: GlobalPtr, lo, hi) -> None:
        e = self.e
        if self.spec.o_dtype == "f32":
            vt = ir.VectorType.get([2], e.f32)
            vec = llvm.insertelement(llvm.insertelement(llvm.mlir_undef(vt), lo, e.c32(0)), hi, e.c32(1))
            llvm.store(vec, ptr.ptr, alignment=8)
            return
        packer = self.mma if self.spec.o_dtype == self.spec.dtype else MmaSync(e, self.spec.o_dtype)
        llvm.store(packer.pack(lo, hi), ptr.ptr, alignment=4)

    def _store_lse(self, lse_ptr: GlobalPtr, row, value) -> None:
        e = self.e
        guard = scf.IfOp(e.eq(e.and_(self.lane, 3), 0))
        with ir.InsertionPoint(guard.then_block):
            llvm.store(value, lse_ptr.offset(e.to_i64(row)).ptr, alignment=4)
            scf.yield_([])

    # ------------------------------------------------------------ the kernel
    def emit(self) -> None:
        e, s = self.e, self.spec
        self._coordinates()
        self.kv_ptr = {n: self._tensor(n, self.b, self.kv_h) for n in ("k", "v")}
        rng = self._kv_range()
        # Prologue: groups {Q, K0}, V0, K1, ..., V_{S-2}, K_{S-1}.
        self._load_q()
        for i in range(s.stages):
            n_block = e.sub(e.sub(rng.hi, 1), i)
            self._load_kv_if("k", n_block, i * self.slot_bytes, rng.lo, True)
            if i < s.stages - 1:
                self._load_kv_if("v", n_block, i * self.slot_bytes, rng.lo, True)
        zero = e.cf(0.0)
        acc_o = [[[zero] * 4 for _ in range(s.head_dim_v // 8)] for _ in range(s.m_atoms)]
        state = self.softmax.initial(2 * s.m_atoms)
        t_full = e.sub(rng.hi, rng.full_hi)
        acc_o, state = self._loop(e.c32(0), t_full, rng.lo, rng.hi, acc_o, state, "partial")
        middle = "maybe" if s.tile_partial else "full"
        t_low = e.sub(rng.hi, rng.full_lo if rng.full_lo is not None else rng.lo)
        acc_o, state = self._loop(t_full, t_low, rng.lo, rng.hi, acc_o, state, middle)
        if rng.full_lo is not None:
            acc_o, state = self._loop(t_low, e.sub(rng.hi, rng.lo), rng.lo, rng.hi, acc_o, state, "partial")
        self.cp.wait(0)
        self._store(acc_o, state)
