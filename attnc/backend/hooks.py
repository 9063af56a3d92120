"""The DSL hooks of one `attn.attention` compiled into a kernel: region -> kernel code.

A hook region (score_mod, mask_mod, sink; attnc/ir/attn.irdl.mlir) is cloned op by op
at the point where the kernel needs its value, its block arguments mapped to the
kernel's (s, b, h, i, j) values; every clone keeps its `.attn` location. Three ops
are not copied as they are:

* `attn.dim {name}` reads a kernel parameter: the kernel ABI's own M, N, H, HKV for the
  dims that are the variant's sequence and head counts, else an extra i32 parameter
  (`ExtraParam('dim', name)`, e.g. a prefix length P or the batch B);
* `attn.param(%t, idx...)` is a load from the param's device pointer (`ExtraParam('ptr',
  name)`) at the row-major offset of the indices, each clamped into [0, size - 1] of its
  axis (Note [Bounds-safe param reads]); params are contiguous (the runtime checks);
* `arith.floordivsi` is expanded (the LLVM lowering has no pattern for it), `math.absf`
  clears the sign bit (the GPU lowering would call libdevice);
* `arith.divf` by a power of two becomes a multiplication by its reciprocal, any other
  `arith.divf` the quotient rounded to nearest, from the reciprocal (`divide`, Note
  [Division]).

Note [Division]: dsl.md's float arithmetic is f32's, and the reference divides as IEEE
does. Earlier, a division by a constant c was a multiplication by f32(1/c) and
any other the approximate div.full.f32 (2 ulp), which a review found moving masks:
int(float(i) / 41.0) is 0 at i = 41 that way (41 * f32(1/41) = 0.99999994), so
`int(float(i) / 41.0) == int(float(j) / 41.0)` kept (40, 41); 204,570 of 4.19M exact
quotients q*d/d came out below q from div.full on an H100. A mask compares, and int(),
floor and ceil cut, so 1 ulp decides which keys are kept. Only a power of two's
reciprocal is exact; any other division is `divide`'s: the reciprocal (the constant's,
or rcp.approx), a Newton step and a choice among three neighbours, about ten FMA-pipe
instructions and no branch. IEEE's div.rn.f32 would give the same quotient, but its
slow path is a called subroutine: in relative_bias's score_mod (a division by
log(16)) it made the kernel spill 276 bytes. A score scaling s / c folded into the
score's own multiplication (Note [Score scalings]) stays folded: the score moves by
rounding, no decision does.

Note [Bias linear in j]: an affine score_mod s + a * float(L) (ALiBi: slopes[h] * (j - i))
whose a does not depend on j and whose i32 L is R + cj * j (cj a constant, R free of j) is
not evaluated per score: per accumulator row and key block the kernel computes a and
l = L at the row's first column j0 (an I2F per row), and per score a * (float(l) + cj * d)
(d: the column's constant offset from j0) as one FADD of an immediate and one FFMA. The
float sum is exact while |L| < 2^24, as the per-score conversion is.

Measured against one alternative (H200, M = N = 8192, ALiBi + causal, median of 5
interleaved rounds): adding only the bias of the lane's first row per column (an
IADD, an I2F and an FMUL per column, one FADD per score, each row's constant remainder
put back into its running max at the end) was slower, 3.774 against 3.656 ms on sm_80
and 2.922 against 2.786 on sm_90a at head dim 64 (results/variants_h200.md).

A float op whose operands are all constants (`log(128.0 / 8.0)` in a T5 bucket) is
evaluated here, in f32: a constant in the kernel rather than an instruction per score.
Transcendentals stay `math` ops: ptx.py lowers them to the approximate instructions.

Note [Score scalings]: a score_mod such as softcap, 30 * tanh(s / 30), scales s by a
constant on the way in and its result on the way out. Both fold into multiplications
the kernel does anyway: the raw score is multiplied by scale / 30 (one FMUL instead of
two) and the softmax's exp2 factor becomes 30 * log2(e) (the running max is then kept
in units of tanh), which changes the result by rounding only (dsl.md allows it).

Note [Saturating int]: `int(x)` of a float truncates toward zero and saturates at the i32
bounds, NaN giving 0 (README): LLVM's llvm.fptosi.sat, which NVPTX emits as the one
cvt.rzi.s32.f32 (saturating by PTX's definition). The hooks emit that intrinsic, not
arith.fptosi, whose LLVM fptosi is poison out of range: LLVM may fold a test such as
`int(x) == 2147483647` away. The reference, the IR interpreter and the exact-integer
ranges (exact_ints.py) take the same definition; before, the reference computed int64.

Note [Bounds-safe param reads]: an index is clamped as max(min(idx, size - 1), 0). The
loads are `!invariant.load` (params are read-only during the launch): LLVM then hoists
a load that does not depend on i, j out of the KV loop (`slopes[h]` once per CTA) and
NVPTX issues it through the read-only cache (ld.global.nc). A param whose shape uses a
dim that may be 0 while the hook runs (any dim but the batch, head and sequence
counts, which are >= 1 whenever a tile exists) is read under a guard: 0 when empty.
`load_param` is the one implementation: the block-map kernel (blockmap.py) reads the
mask's params through it too, so the map and this kernel read the same elements.

Note [Indices known in range]: where the kernel knows an index is in range, the clamp is
only instructions: a MIXED tile of documents + causal that tests only its residual
`doc[b, i] == doc[b, j]` (Note [Conjuncts a tile holds], blockmap.py) lies below N, so
each of its keys has 0 <= j < N. The caller says so (`in_range`: the index value and the
dim it is below), and an index that is that value, on an axis of that dim, is used
as it is; any other index (j + 1, or j on an axis of another dim) is still clamped.
With the key index built with `nsw` adds (ElementCoords), LLVM then folds each lane's
column offsets into the load's immediate: one load per column, where the clamp and its
64-bit address took five instructions.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, llvm, scf

from attnc.backend.exact_ints import I32, WIDTH_OPS, IntPlan, fits_i32
from attnc.backend.kernel_spec import ExtraParam
from attnc.backend.nvgpu_builders import Approx, Emit
from attnc.ir import DIM, PARAM, YIELD, cmpi_predicate, defining_op, depends_on, int_constant, yielded

_DYNAMIC = -2147483648      # LLVM::GEPOp::kDynamicIndex
_RETURNS = (YIELD, "func.return")


def size_dims(variant) -> frozenset[str]:
    """The dims that size q, k or v: B, H, HKV, M, N (never negative)."""
    return frozenset(getattr(variant, role) for role in ("batch", "heads", "heads_kv", "seq_q", "seq_k")
                     if isinstance(getattr(variant, role), str))


class KernelNames:
    """How the names a region reads resolve in a kernel: dims to the ABI's M, N, H, HKV
    or to extra parameters, param tensors (function arguments) to pointer parameters."""

    # The kernel ABI's dims, by the role the variant's dim plays (attnc/frontend/variant.py).
    ABI_DIMS = {"seq_q": "M", "seq_k": "N", "heads": "H", "heads_kv": "HKV"}

    def __init__(self, variant, op: ir.Operation, module: ir.Module | None = None):
        self.variant = variant
        self.abi_dims = {getattr(variant, role): abi for role, abi in self.ABI_DIMS.items()
                         if isinstance(getattr(variant, role), str)}
        self.size_dims = size_dims(variant)     # in [0, 2^30] (Note [Exact integers])
        self.params = {p.name: p for p in variant.params}
        self.param_order = [ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes["params"])]
        self.used_dims: list[str] = []
        self.used_params: list[str] = []
        # The hooks clone ops of this IR when a kernel is built, maybe after the compile
        # result is gone: the ir.Module must stay alive as long as they do (dropping it
        # destroys every block, whatever other handles to its ops exist).
        self.module = module

    # -- what a kernel must take
    def use_dim(self, name: str) -> None:
        if name not in self.abi_dims and name not in self.used_dims:
            self.used_dims.append(name)

    def use_param(self, name: str) -> None:
        if name not in self.used_params:
            self.used_params.append(name)
            for d in self.params[name].shape:
                if isinstance(d, str):
                    self.use_dim(d)

    def extra_params(self) -> tuple[ExtraParam, ...]:
        dims = [d for d in self.variant.dims if d in self.used_dims]
        params = [p for p in self.param_order if p in self.used_params]
        return tuple(ExtraParam("dim", d) for d in dims) + tuple(ExtraParam("ptr", p) for p in params)

    def scan(self, block: ir.Block) -> None:
        """Record the dims and params `block` reads."""
        for op in block.operations:
            if op.name == DIM:
                self.use_dim(ir.StringAttr(op.attributes["name"]).value)
            elif op.name == PARAM:
                self.use_param(self.param_of(op.operands[0]))

    def scan_function(self, fn, dim_names: Sequence[str], first_dim: int) -> None:
        """Record the dims an analysis function (attn-analyze-masks) really reads."""
        args = list(fn.regions[0].blocks[0].arguments)[first_dim:]
        for name, arg in zip(dim_names, args):
            if any(True for _ in arg.uses):
                self.use_dim(name)

    # -- reading them in a kernel
    def param_of(self, tensor: ir.Value) -> str:
        return self.param_order[ir.BlockArgument(tensor).arg_number - 3]

    def dim(self, e: Emit, name: str) -> ir.Value:
        return e.dim(self.abi_dims[name]) if name in self.abi_dims else e.arg(f"dim:{name}")

    def size(self, e: Emit, entry) -> ir.Value:
        return e.c32(entry) if isinstance(entry, int) else self.dim(e, entry)


class RegionCode:
    """One region (or single-block function) emitted at the current insertion point."""

    gpu_division = True     # False: arith.divf as it is (to run the code on a CPU in tests)
    ARGS: tuple[str, ...] = ("b", "h", "i", "j")     # what the block's arguments are, for `hoist`

    def __init__(self, block: ir.Block, names: KernelNames, never_empty: frozenset[str] = frozenset(),
                 exact_ints: bool = True):
        self.block = block
        self.names = names
        self.never_empty = never_empty      # dims that are >= 1 wherever this code runs
        self.exact_ints = exact_ints        # a hook's region (Note [Exact integers]); False: the
                                            # analysis' functions, whose i32 ops are as meant

    @functools.cached_property
    def ints(self) -> IntPlan | None:
        """Which integers are computed in i64 (Note [Exact integers], exact_ints.py)."""
        if not self.exact_ints:
            return None
        return IntPlan.of(self.block, self.names.size_dims)

    def __call__(self, e: Emit, *args, given: Mapping | None = None) -> ir.Value:
        return self.results(e, *args, given=given)[0]

    def __repr__(self) -> str:
        """What sets the emitted code apart (Sm80KernelSpec.cache_key): the ops, hashed."""
        text = "\n".join(str(op) for op in self.block.operations)
        return f"{type(self).__name__}({hashlib.sha256(text.encode()).hexdigest()[:16]})"

    def results(self, e: Emit, *args, given: Mapping | None = None) -> list[ir.Value]:
        env = self._run(e, self._start(args, given))
        return [env.get(v, v) for v in self._terminator().operands]

    def _start(self, args, given: Mapping | None) -> dict:
        """The values known before a call: those `given` (emitted by `hoist` for the same
        arguments) and the arguments."""
        env = dict(given) if given else {}
        env.update(zip(self.block.arguments, args))
        return env

    # Note [Hoisted hook values]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~
    # A hook is called once per score a thread holds (64 to 128 per tile), but most of
    # its values vary less: `w[h]`, `P - 1` or `N // 4` are the same for every score of
    # the CTA, `doc[b, i]` for a row's, `doc[b, j]` for a column's. Emitted per score,
    # a hook of 40 param reads became 10,240 loads that LLVM then had to fold back to 80,
    # and most of a compile's time. So the caller of a tile's scores (ScoreMasker,
    # sm80_masks.py) asks `hoist` for the values that depend on b and h only, then for
    # those of each row (i) and each column (j), each emitted once where the tile's
    # scores are computed, and calls the hook per score with them `given`: only the ops
    # that read s, or both i and j, are emitted per score. Each op is emitted as before,
    # on the same operands, in the same order of evaluation within its level: a value
    # moves only when none of its operands varies at the finer level, so nothing is
    # reassociated (`s + w0[h] + w1[h]` still adds per score, the loads do not). It is
    # the same block of code, before the scores' ops, so nothing runs that did not.
    @functools.cached_property
    def _reads(self) -> dict:
        """For each value of the block: the names (ARGS) of the arguments it is computed from."""
        reads = {a: frozenset({n}) for a, n in zip(self.block.arguments, self.ARGS)}
        for op in list(self.block.operations)[:-1]:
            names = frozenset().union(*(reads.get(v, frozenset()) for v in op.operands))
            reads.update((r, names) for r in op.results)
        return reads

    def hoist(self, e: Emit, given: Mapping, args: Mapping[str, ir.Value],
              in_range: Mapping | None = None) -> dict:
        """`given` and, emitted here, the values computed from the arguments `args` (by
        name, e.g. {"b": b, "h": h, "i": i}) alone (Note [Hoisted hook values]);
        `in_range` as `_run` takes it."""
        known = frozenset(args)
        later = frozenset(v for v, names in self._reads.items() if not names <= known)
        env = dict(given)
        env.update((a, args[n]) for a, n in zip(self.block.arguments, self.ARGS) if n in args)
        return self._run(e, env, later, in_range)

    def varies_alone(self, name: str) -> bool:
        """Whether an op of the region is computed from the argument `name` and no other
        but b and h: a value `hoist` computes once per row (i) or column (j)."""
        level = frozenset({"b", "h", name})
        return any(name in names and names <= level for v, names in self._reads.items()
                   if not isinstance(v, ir.BlockArgument))

    def known_in_range(self, j: ir.Value, j_below_n: bool) -> Mapping | None:
        """The `in_range` of a key index j known to lie in [0, N) (Note [Indices known in
        range]) when `j_below_n`, else None."""
        seq_k = self.names.variant.seq_k
        return {j: seq_k} if j_below_n and isinstance(seq_k, str) else None

    def _terminator(self) -> ir.Operation:
        ops = list(self.block.operations)
        if not ops or ops[-1].name not in _RETURNS:
            raise ValueError("the region has no terminator")
        return ops[-1]

    def _run(self, e: Emit, env: dict, skip=frozenset(), in_range: Mapping | None = None) -> dict:
        """Emit every op but the terminator, those whose result `env` already holds and
        those whose results are in `skip`; returns `env` with their values. `in_range`:
        values known to lie in [0, a dim) (Note [Indices known in range])."""
        for op in list(self.block.operations)[:-1]:
            if len(op.results) != 1:
                raise NotImplementedError(f"{op.name}: only ops with one result are compiled")
            if op.results[0] in env or op.results[0] in skip:
                continue
            with op.location:
                env[op.results[0]] = self._emit(e, op, [env.get(v, v) for v in op.operands], in_range)
        return env

    def _emit(self, e: Emit, op: ir.Operation, operands: list, in_range: Mapping | None = None) -> ir.Value:
        if op.name == DIM:
            return self.names.dim(e, ir.StringAttr(op.attributes["name"]).value)
        if op.name == PARAM:
            return load_param(e, self.names, self.names.param_of(op.operands[0]), operands[1:],
                              self.never_empty, in_range)
        if self.ints is not None and op.name in WIDTH_OPS:
            return self.ints.emit(e, op, operands)
        if op.name == "arith.floordivsi":
            return floordiv(e, *operands)
        if op.name == "arith.sitofp":
            return arith.sitofp(op.results[0].type, operands[0])      # of an i32 or a wide i64
        if op.name == "arith.fptosi":
            # Note [Saturating int]: int() saturates and takes NaN to 0; LLVM's fptosi is
            # poison out of range, its fptosi.sat is int() (cvt.rzi.s32.f32 on NVPTX).
            return llvm.call_intrinsic(e.i32, "llvm.fptosi.sat.i32.f32", operands, [], [])
        folded = _fold(op.name, operands)
        if folded is not None:
            return arith.constant(e.f32, folded)
        if op.name == "math.absf":
            return _fabs(e, operands[0])
        if op.name == "arith.divf":
            # Note [Division]: IEEE's quotient, as the reference computes it.
            x, y = operands
            reciprocal = _reciprocal(y)
            if reciprocal is not None and _power_of_two(reciprocal):
                return arith.mulf(x, arith.constant(x.type, reciprocal))
            if reciprocal is not None:
                return divide(e, x, y, arith.constant(x.type, reciprocal))
            if self.gpu_division:
                return divide(e, x, y, Approx(e).rcp(y))
        copy = op.clone()
        for k, v in enumerate(operands):
            copy.operands[k] = v
        return copy.results[0]


def load_param(e: Emit, names, name: str, indices: Sequence[ir.Value],
               never_empty: frozenset[str] = frozenset(), in_range: Mapping | None = None) -> ir.Value:
    """`attn.param(name, indices...)` as a kernel reads it (Note [Bounds-safe param reads]):
    the tensor `names.params[name]` is contiguous, so the i64 row-major offset of the
    indices, each clamped into [0, size - 1] of its axis, is read through the pointer
    parameter `e.arg("ptr:<name>")`; under a guard (0 when empty) when a dim of its shape
    that is not in `never_empty` may be 0. `names` resolves sizes (`names.size(e, entry)`):
    KernelNames in the attention kernel, blockmap.MapNames in the block-map kernel.
    `in_range` maps index values to the dim they are known to lie below (and >= 0): such
    an index on an axis of that dim is not clamped (Note [Indices known in range])."""
    tensor = names.params[name]
    sizes = [names.size(e, d) for d in tensor.shape]
    offset = None
    for idx, d, size in zip(indices, tensor.shape, sizes):
        known = in_range is not None and in_range.get(idx) == d
        last = e.sub(size, 1) if idx.type == e.i32 else e.to_i64(e.sub(size, 1))    # a wide index: i64
        clamped = e.to_i64(idx if known else e.max(e.min(idx, last), 0))
        offset = clamped if offset is None else e.add(e.mul(offset, e.to_i64(size)), clamped)
    element = e.f32 if tensor.dtype == "f32" else e.i32
    ptr = llvm.GEPOp(ir.Type.parse("!llvm.ptr<1>"), e.arg(f"ptr:{name}"), [offset or e.c64(0)],
                     [_DYNAMIC], element, 0).result
    maybe_empty = [s for d, s in zip(tensor.shape, sizes) if isinstance(d, str) and d not in never_empty]
    if not maybe_empty:
        return llvm.load(element, ptr, alignment=4, invariant=True)
    nonempty = e.true()
    for s in maybe_empty:
        nonempty = e.land(nonempty, e.gt(s, 0))
    guard = scf.IfOp(nonempty, [element], has_else=True)
    with ir.InsertionPoint(guard.then_block):
        scf.yield_([llvm.load(element, ptr, alignment=4, invariant=True)])
    with ir.InsertionPoint(guard.else_block):
        scf.yield_([arith.constant(element, 0.0 if tensor.dtype == "f32" else 0)])
    return guard.results[0]


def divide(e: Emit, x: ir.Value, y: ir.Value, r: ir.Value) -> ir.Value:
    """x / y rounded to nearest (Note [Division]), from r, 1/y within a few ulps (a
    constant's reciprocal, rcp.approx): q = x * r, one Newton step on the residual
    (q + r * (x - q * y), the FMA's residual exact), then whichever of q and its two
    neighbours leaves the smallest residual |x - q' * y|: the nearest, as no quotient of
    a y that is not a power of two lies halfway. Where x * r is zero or not finite it is
    the quotient (a signed zero, x / 0, infinities, NaN, overflow); subnormal divisors
    flush to zero, as rcp.approx.ftz does."""
    def residual(t):
        return e.fma(arith.negf(t), y, x)

    first = e.fmul(x, r)
    q = e.fma(residual(first), r, first)
    bits = arith.bitcast(e.i32, q)
    best, least = q, _fabs(e, residual(q))
    for step in (1, -1):
        near = arith.bitcast(e.f32, e.add(bits, step))
        off = _fabs(e, residual(near))
        closer = arith.cmpf(arith.CmpFPredicate.OLT, off, least)
        best, least = arith.select(closer, near, best), arith.select(closer, off, least)
    size = _fabs(e, first)
    ordinary = arith.andi(arith.cmpf(arith.CmpFPredicate.OLT, size, e.cf(float("inf"))),
                          arith.cmpf(arith.CmpFPredicate.OGT, size, e.cf(0.0)))
    return arith.select(ordinary, best, first)


def _fabs(e: Emit, x: ir.Value) -> ir.Value:
    """|x| by clearing the sign bit (the GPU lowering would send llvm.intr.fabs to libdevice)."""
    bits = arith.bitcast(e.i32, x)
    return arith.bitcast(e.f32, arith.andi(bits, arith.constant(e.i32, 0x7FFFFFFF)))


def floordiv(e: Emit, a: ir.Value, b: ir.Value) -> ir.Value:
    """Python's a // b on signed integers (0 when b == 0, as the region interpreter
    defines it): the truncating quotient, minus 1 when the remainder is non-zero and
    its sign differs from b's. By -1 it is -a, wrapping (the residue `%` needs: the
    smallest integer by -1 overflows, which a hardware division leaves undefined)."""
    zero = arith.constant(a.type, 0)
    minus_one = arith.constant(a.type, -1)
    b_zero = arith.cmpi(arith.CmpIPredicate.eq, b, zero)
    b_minus_one = arith.cmpi(arith.CmpIPredicate.eq, b, minus_one)
    divisor = arith.select(arith.ori(b_zero, b_minus_one), arith.constant(a.type, 1), b)
    q = arith.divsi(a, divisor)
    r = arith.subi(a, arith.muli(q, divisor))
    signs_differ = arith.cmpi(arith.CmpIPredicate.slt, arith.xori(r, divisor), zero)
    inexact = arith.cmpi(arith.CmpIPredicate.ne, r, zero)
    adjust = arith.extui(a.type, arith.andi(inexact, signs_differ))
    quotient = arith.select(b_minus_one, arith.subi(zero, a), arith.subi(q, adjust))
    return arith.select(b_zero, zero, quotient)


_F32_FOLDS = {
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply, "arith.divf": np.divide,
    "arith.negf": np.negative, "math.exp": np.exp, "math.exp2": np.exp2, "math.log": np.log,
    "math.log2": np.log2, "math.sqrt": np.sqrt, "math.rsqrt": lambda x: np.float32(1) / np.sqrt(x),
    "math.tanh": np.tanh, "math.absf": np.abs, "math.floor": np.floor, "math.ceil": np.ceil,
}


def _fold(name: str, operands) -> float | None:
    """The f32 value of a float op on constants only (finite results), else None."""
    if name not in _F32_FOLDS:
        return None
    values = [_f32_constant(v) for v in operands]
    if any(v is None for v in values):
        return None
    with np.errstate(all="ignore"):
        result = np.float32(_F32_FOLDS[name](*values))
    return float(result) if np.isfinite(result) else None


def _f32_constant(value: ir.Value) -> np.float32 | None:
    owner = defining_op(value)
    if owner is None or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    return np.float32(attr.value) if isinstance(attr, ir.FloatAttr) else None


def _power_of_two(x: float) -> bool:
    """Whether x is +-2^k: x * y is then exactly y / (1 / x) (both normal f32)."""
    return np.frexp(abs(x))[0] == 0.5


def _reciprocal(value: ir.Value) -> float | None:
    """1/c when `value` is an f32 constant c whose reciprocal is a normal f32, else None."""
    c = _f32_constant(value)
    if c is None or c == 0 or not np.isfinite(c):
        return None
    r = np.float32(1) / c
    return float(r) if np.isfinite(r) and abs(r) >= 2.0 ** -126 else None


def affine_bias(block: ir.Block) -> tuple[ir.Value, bool] | None:
    """For a score_mod region that returns s + f or f + s or s - f with f independent of s:
    (f, negate); else None."""
    tainted = depends_on(block, 0)
    s = block.arguments[0]
    top = defining_op(yielded(block))
    if top is None or top.name not in ("arith.addf", "arith.subf"):
        return None
    lhs, rhs = top.operands
    if lhs == s and rhs not in tainted:
        return rhs, top.name == "arith.subf"
    if rhs == s and lhs not in tainted and top.name == "arith.addf":
        return lhs, False
    return None


class BiasCode(RegionCode):
    """The f of an affine score_mod s + f, compiled alone (the ops that read s are left out)."""

    ARGS = ("s", "b", "h", "i", "j")

    def __init__(self, block: ir.Block, names: KernelNames, bias: ir.Value, negate: bool,
                 never_empty: frozenset[str] = frozenset()):
        super().__init__(block, names, never_empty)
        self.bias, self.negate = bias, negate
        self.tainted = depends_on(block, 0)

        self.j_linear = _j_linear_split(block, bias)

    def __call__(self, e: Emit, b, h, i, j, given: Mapping | None = None) -> ir.Value:
        env = dict(given) if given else {}
        env.update(zip(list(self.block.arguments)[1:], (b, h, i, j)))
        env = self._run(e, env, self.tainted)
        value = env.get(self.bias, self.bias)
        return arith.negf(value) if self.negate else value

    def row_terms(self, e: Emit, b, h, i, j0) -> tuple[ir.Value, ir.Value, int]:
        """Note [Bias linear in j]: (a, l, cj) with bias(i, j0 + d) = a * float(l + cj * d)
        (sign included); only when `j_linear` is set."""
        a, conv_in, cj = self.j_linear
        env = self._run(e, dict(zip(list(self.block.arguments)[1:], (b, h, i, j0))), self.tainted)
        a_value = e.cf(1.0) if a is None else env.get(a, a)
        if self.negate:
            a_value = arith.negf(a_value)
        return a_value, env.get(conv_in, conv_in), cj


def _once_per_value(walk):
    """`walk(value, *args, memo=...)`, a recursive walk over a region's values, computed
    once per value: a `let` used twice is one value, and a walk per use would be
    exponential in a chain of lets. A top-level call starts a memo (or shares the one it
    is given), and the walk passes `memo` on to its recursive calls."""

    @functools.wraps(walk)
    def once(value: ir.Value, *args, memo: dict | None = None):
        memo = {} if memo is None else memo
        if value not in memo:
            memo[value] = walk(value, *args, memo=memo)
        return memo[value]

    return once


def _j_coefficient(value: ir.Value, j: ir.Value, j_tainted: set) -> int | None:
    """c when the i32 `value` is R + c * j with R independent of j, else None. Each value
    of j_tainted under `value` once, operands before their users: no recursion on the
    depth of the expression (Note [Deep expressions] in attnc/frontend/depth.py)."""
    memo: dict = {}
    for v in _operands_first(value, j_tainted):
        memo[v] = _j_coefficient_of(v, j, j_tainted, memo)
    return memo.get(value, 0 if value not in j_tainted else None)


def _j_coefficient_of(value: ir.Value, j: ir.Value, j_tainted: set, memo: dict) -> int | None:
    """`_j_coefficient` of one value, that of its operands in `memo` (0: free of j)."""
    if value == j:
        return 1
    op = defining_op(value)
    if op is None:
        return None
    side = lambda v: memo[v] if v in j_tainted else 0  # noqa: E731
    if op.name in ("arith.addi", "arith.subi"):
        x, y = (side(v) for v in op.operands)
        if x is None or y is None:
            return None
        return x + y if op.name == "arith.addi" else x - y
    if op.name == "arith.muli":
        for v, w in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
            c = int_constant(w)
            if c is not None:
                x = side(v)
                return None if x is None else x * c
    return None


def _operands_first(value: ir.Value, within: set) -> list:
    """The values of `within` that `value` is computed from (itself included), each once,
    every one after the operands it has in `within`."""
    order: list = []
    done: set = set()
    stack = [(value, False)]
    while stack:
        v, expanded = stack.pop()
        if v in done or v not in within:
            continue
        op = defining_op(v)
        if expanded or op is None:
            done.add(v)
            order.append(v)
            continue
        stack.append((v, True))
        stack.extend((w, False) for w in reversed(list(op.operands)) if w not in done)
    return order


def _j_linear_split(block: ir.Block, bias: ir.Value):
    """Note [Bias linear in j]: (a or None for 1, L, cj) when `bias` is a * sitofp(L) (or
    sitofp(L)), a independent of j and L = R + cj * j an i32 with R independent of j."""
    j = block.arguments[4]
    j_tainted = depends_on(block, 4)
    op = defining_op(bias)
    if op is None:
        return None
    candidates = []
    if op.name == "arith.mulf":
        x, y = op.operands
        candidates = [(x, y), (y, x)]
    elif op.name == "arith.sitofp":
        candidates = [(None, bias)]
    for a, conv in candidates:
        if a is not None and a in j_tainted:
            continue
        conv_op = defining_op(conv)
        if conv_op is None or conv_op.name != "arith.sitofp":
            continue
        inner = conv_op.operands[0]
        if str(inner.type) != "i32":
            continue
        cj = _j_coefficient(inner, j, j_tainted)
        if cj is not None and cj != 0 and abs(cj) <= 1024:
            return a, inner, cj
    return None


class ScaledScoreCode(RegionCode):
    """A score_mod region with its constant scalings of s and of the result split off
    (Note [Score scalings]): called with s' = s * in_factor, returns score / out_factor."""

    ARGS = ("s", "b", "h", "i", "j")

    def __init__(self, block: ir.Block, names: KernelNames, never_empty: frozenset[str] = frozenset()):
        super().__init__(block, names, never_empty)
        self.scaled_inputs, self.in_factor = _input_scalings(block)
        self.inner, self.out_factor = _output_scaling(block)

    def bounds(self) -> tuple[float, float] | None:
        """(lo, hi) that every value of the returned g = score / out_factor lies in, for
        any s (Note [Bounded score_mod] in sm80_softmax.py), or None when unbounded."""
        return _interval(self.inner)

    def __call__(self, e: Emit, s, b, h, i, j, given: Mapping | None = None) -> ir.Value:
        env = self._start((s, b, h, i, j), given)
        env.update({v: s for v in self.scaled_inputs})
        env = self._run(e, env)
        return env.get(self.inner, self.inner)


@_once_per_value
def _interval(value: ir.Value, depth: int = 0, *, memo: dict) -> tuple[float, float] | None:
    """A finite interval holding every value `value` takes, from its ops: constants,
    tanh, sums, differences, negations and products by constants; else None."""
    c = _f32_constant(value)
    if c is not None:
        return (float(c), float(c)) if np.isfinite(c) else None
    op = defining_op(value)
    if op is None or depth > 32:
        return None
    if op.name == "math.tanh":
        return (-1.0, 1.0)
    if op.name == "arith.negf":
        x = _interval(op.operands[0], depth + 1, memo=memo)
        return None if x is None else (-x[1], -x[0])
    if op.name in ("arith.addf", "arith.subf", "arith.mulf"):
        x, y = (_interval(v, depth + 1, memo=memo) for v in op.operands)
        if x is None or y is None:
            return None
        if op.name == "arith.addf":
            return (x[0] + y[0], x[1] + y[1])
        if op.name == "arith.subf":
            return (x[0] - y[1], x[1] - y[0])
        if x[0] == x[1] or y[0] == y[1]:
            ends = [a * b for a in x for b in y]
            return (min(ends), max(ends))
    return None


def _constant_operand(op: ir.Operation, other: ir.Value) -> np.float32 | None:
    """The f32 constant among the two operands of `op` that is not `other`."""
    values = [v for v in op.operands if v != other]
    return _f32_constant(values[0]) if len(values) == 1 else None


def _input_scalings(block: ir.Block) -> tuple[list, float]:
    """(the results of s * c / c * s / s / c, the factor f with each equal to s * f) when
    every use of s is one of them with the same f; else ([], 1)."""
    s = block.arguments[0]
    users, factors = [], set()
    for op in block.operations:
        if s not in list(op.operands):
            continue
        c = _constant_operand(op, s)
        if op.name == "arith.mulf" and c is not None and np.isfinite(c) and c != 0:
            factors.add(float(c))
        elif op.name == "arith.divf" and op.operands[0] == s and _reciprocal(op.operands[1]) is not None:
            factors.add(_reciprocal(op.operands[1]))
        else:
            return [], 1.0
        users.append(op.results[0])
    return (users, factors.pop()) if len(factors) == 1 else ([], 1.0)


def _output_scaling(block: ir.Block) -> tuple[ir.Value, float]:
    """(g, a) when the region yields a * g or g * a with a positive f32 constant a; else
    (the yielded value, 1)."""
    result = yielded(block)
    top = defining_op(result)
    if top is not None and top.name == "arith.mulf":
        for value, other in ((top.operands[0], top.operands[1]), (top.operands[1], top.operands[0])):
            a = _f32_constant(value)
            if a is not None and np.isfinite(a) and a > 0 and _f32_constant(other) is None:
                return other, float(a)
    return result, 1.0


def role_dims(variant, roles: Sequence[str]) -> frozenset[str]:
    """The variant's names of the dims playing `roles` ('batch', 'heads', ...), when symbolic."""
    return frozenset(getattr(variant, r) for r in roles if isinstance(getattr(variant, r), str))


# Note [Row intervals]: a mask_mod that is a conjunction (`and`) of comparisons, each
# either free of j or of two i32 values whose difference is d0 + k * j with k = +1 or
# -1 and d0 free of j (`j <= i`, `i - j < W`, `j >= i - W + 1`, `j == i`, `not (j > i + 5)`),
# keeps, for each row, exactly the keys of one interval [lo(b, h, i), hi(b, h, i)]. In a
# partial tile the kernel then computes lo and hi once per accumulator row (the region
# evaluated at j = 0 gives each d0) and tests each score's column, a constant offset
# from the tile's first one, against them (Note [One compare per score], sm80_masks.py),
# instead of the region's ops (and the j < N test) per score.
#
# Note [Residual conjuncts]: the other conjuncts that depend on j (`or`, `!=`, a j
# coefficient other than +-1, j inside a param index or a division; and a negated `and`
# or an `or` whole, even with a linear comparison inside) are the residual:
# with at least one comparison linear in j, the row interval still bounds the keys and
# only the residual is evaluated per score, ANDed with the interval's test. Documents +
# causal (`doc[b, i] == doc[b, j] and j <= i`) then cost per score one compare of the two
# ids, the interval's bit test and two selects, where the whole region cost two to three
# compares and three selects (SASS of the sm_90a partial step at 64x64 tiles, d = 128:
# 135 ISETP, LOP3 and FSEL per thread and tile, was 178; documents d = 128 on an H200:
# 0.483 -> 0.462-0.470 ms). A mask with no linear comparison keeps the per-element region.
# With a block map, a tile that the map proves to hold either part whole tests only the
# other (Note [Conjuncts a tile holds] in blockmap.py; `MaskConjuncts` is the split).
_NEGATED = {"slt": "sge", "sle": "sgt", "sgt": "sle", "sge": "slt"}
_FAR = 1 << 30              # beyond any key: hi without an upper bound, lo of a dropped row,
                            # and the clamp of every bound


# Note [Exact bounds]
# ~~~~~~~~~~~~~~~~~~~
# RowInterval.bounds solves `x <pred> y` for j: x - y = d0 + k * j, then t = -d0 or d0,
# and t - 1 or t + 1 for a strict comparison. Each of these may leave i32 where x and y
# do not (j - i < W with W = 2^31 - 1: d0 = -i - W; j > s[b, i] with s = 2^31 - 1:
# t + 1), and a bound far below -2^30 would wrap when the kernel subtracts the tile's
# first key from it. So a term is computed in i64 (clamped to [-_FAR, _FAR], then i32)
# unless `_int_range` shows that its sides keep x - y and the +-1 inside i32, and each
# bound is clamped on each side that its range can leave [-_FAR, _FAR]. A term of i and
# constants (causal, windows) stays in i32 with the clamps it had (a window's lo = i -
# 1023 needs only its upper one), where i64 min/max per row cost 0.5 % (window1024 at
# d = 64 on sm_80) to 1.5 % (sm_90a); a param or a dim in the term (i + N may leave i32)
# makes it i64.


def _sub(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    return (x[0] - y[1], x[1] - y[0])


def _clamp_far(e: Emit, bound: ir.Value, r: tuple[int, int] = I32) -> ir.Value:
    """`bound` (i32 or i64) clamped to [-_FAR, _FAR], as i32; `r`: a range known to hold
    it, whose sides inside [-_FAR, _FAR] need no clamp."""
    if r[1] > _FAR:
        bound = e.min(bound, _FAR)
    if r[0] < -_FAR:
        bound = e.max(bound, -_FAR)
    return arith.trunci(e.i32, bound) if bound.type != e.i32 else bound


def _reduce(emit_pick, pick, bounds: list) -> tuple[ir.Value, tuple[int, int]]:
    """The min or max (`emit_pick`: Emit.min or Emit.max; `pick`: min or max) of
    (bound, range) pairs, with its range."""
    return (functools.reduce(emit_pick, [v for v, _ in bounds]),
            (pick(r[0] for _, r in bounds), pick(r[1] for _, r in bounds)))


@_once_per_value
def _int_range(value: ir.Value, abi_dims: frozenset, depth: int = 0, *, memo: dict) -> tuple[int, int]:
    """Bounds on the i32 `value` of a mask region where j = 0: b, h and i in [0, 2^31),
    the ABI's dims (`abi_dims`) too, any other dim and every param anywhere in i32; sums,
    differences, products, min, max and selects by interval arithmetic; anything else any
    i32. A value that may leave i32 gets I32 too: a term with such a side never fits with
    the margin, so RowInterval.bounds solves it in i64, exactly (the kernel computes the
    value itself in i64: Note [Exact integers]). Unlike IntPlan's ranges these hold at
    j = 0, the point each row's bounds are solved at."""
    c = int_constant(value)
    if c is not None:
        return (c, c)
    op = defining_op(value)
    if op is None:
        return (0, 0) if ir.BlockArgument(value).arg_number == 3 else (0, I32[1])
    if depth > 32:
        return I32
    if op.name == DIM:
        return (0, I32[1]) if ir.StringAttr(op.attributes["name"]).value in abi_dims else I32
    sides = lambda: [_int_range(v, abi_dims, depth + 1, memo=memo) for v in op.operands]  # noqa: E731
    if op.name == "arith.select":
        _, x, y = sides()
        return (min(x[0], y[0]), max(x[1], y[1]))
    if op.name not in ("arith.addi", "arith.subi", "arith.muli", "arith.minsi", "arith.maxsi"):
        return I32
    x, y = sides()
    if op.name == "arith.addi":
        r = (x[0] + y[0], x[1] + y[1])
    elif op.name == "arith.subi":
        r = _sub(x, y)
    elif op.name == "arith.muli":
        ends = [a * b for a in x for b in y]
        r = (min(ends), max(ends))
    else:
        pick = min if op.name == "arith.minsi" else max
        r = (pick(x[0], y[0]), pick(x[1], y[1]))
    return r if fits_i32(r) else I32


def solve_term(e: Emit, term: tuple, r: tuple[int, int], value) -> tuple[str, ir.Value, tuple[int, int], bool]:
    """`a - b <pred> 0` with a - b = d0 + k * j (`term` = (pred, k, a, b); `r`: the range
    of a - b at j = 0, `value`: a and b as emitted at j = 0) solved for j: (side, v, its
    range, wide) with j == v (side "eq"), j <= v ("hi") or j >= v ("lo"); v is an i64
    when `wide` (Note [Exact bounds]: unless the range keeps x - y and its +-1 in i32)."""
    kind, k, x, y = term
    x, y = value(x), value(y)
    wide = not fits_i32(r, margin=1) or x.type != e.i32 or y.type != e.i32   # (Note [Exact integers])
    d0 = e.sub(e.to_i64(x), e.to_i64(y)) if wide else e.sub(x, y)
    # d0 + k * j  <pred>  0, solved for j (k = +1 or -1)
    t, r = (e.sub(0, d0), (-r[1], -r[0])) if k == 1 else (d0, r)
    strict = int(kind in ("slt", "sgt"))
    if kind == "eq":
        side, step = "eq", 0
    elif (kind in ("slt", "sle")) == (k == 1):        # an upper bound on j
        side, step = "hi", -strict
    else:                                              # a lower bound on j
        side, step = "lo", strict
    v = e.add(t, 1) if step > 0 else e.sub(t, 1) if step < 0 else t
    return side, v, (r[0] + step, r[1] + step), wide


def _linear_term(op: ir.Operation, j: ir.Value, tainted, negated: bool):
    """(predicate, k, a, b) when `op` (negated or not) is `a - b <pred> 0` with a - b =
    d0 + k * j, k = +-1 and d0 free of j (Note [Row intervals]); else None."""
    pred = cmpi_predicate(op) if op.name == "arith.cmpi" else None
    if pred not in ("eq", *_NEGATED):
        return None
    if negated:
        if pred not in _NEGATED:
            return None
        pred = _NEGATED[pred]
    a, b = op.operands
    ka, kb = _j_coefficient(a, j, tainted), _j_coefficient(b, j, tainted)
    if ka is None or kb is None or ka - kb not in (1, -1):
        return None
    return pred, ka - kb, a, b


def _conjunct_operands(op: ir.Operation | None, negated: bool) -> list | None:
    """The (value, negated) conjuncts `op`'s result stands for when it is an `and` (not
    negated) or a `not` (xor with true), else None."""
    if op is not None and op.name == "arith.andi" and not negated:
        return [(v, False) for v in op.operands]
    if op is not None and op.name == "arith.xori":
        x, y = op.operands
        for v, w in ((x, y), (y, x)):
            if str(w.type) == "i1" and int_constant(w) == 1:
                return [(v, not negated)]
    return None


def _truth(e: Emit, env: dict, value: ir.Value, negated: bool) -> ir.Value:
    """A conjunct of the region as emitted (`env`), negated when it stands under a `not`."""
    v = env.get(value, value)
    return e.xor(v, e.true()) if negated else v


@dataclass(frozen=True)
class MaskConjuncts:
    """The top-level conjuncts of a mask region (Notes [Row intervals] and [Residual
    conjuncts]), each an i1 of the region with whether it stands under a `not`:

        free      (value, negated)        free of j
        linear    (value, negated, term)  term = (predicate, k, a, b): `a - b <pred> 0`
                                          with a - b = d0 + k * j
        residual  (value, negated)        the other conjuncts that depend on j

    The mask holds exactly when every conjunct does (the region yields their `and`)."""
    free: tuple
    linear: tuple
    residual: tuple

    @classmethod
    def of(cls, block: ir.Block) -> "MaskConjuncts":
        j = block.arguments[3]
        tainted = depends_on(block, 3)
        free: list = []
        linear: list = []
        residual: list = []
        seen: set = set()       # `c and c` is c: a conjunct reached twice is taken once

        # Left to right, with a stack rather than recursion (an `and` chain may be deep).
        stack = [(yielded(block), False)]
        while stack:
            value, negated = stack.pop()
            if (value, negated) in seen:
                continue
            seen.add((value, negated))
            if value not in tainted:
                free.append((value, negated))
                continue
            op = defining_op(value)
            inner = _conjunct_operands(op, negated)
            if inner is not None:
                stack.extend(reversed(inner))
                continue
            term = _linear_term(op, j, tainted, negated) if op is not None else None
            if term is not None:
                linear.append((value, negated, term))
            else:
                residual.append((value, negated))
        return cls(tuple(free), tuple(linear), tuple(residual))

    @property
    def interval(self) -> tuple:
        """(value, negated) of the conjuncts a row interval stands for: free and linear."""
        return self.free + tuple((v, n) for v, n, _ in self.linear)


class RowInterval(RegionCode):
    """Note [Row intervals]: `bounds(e, b, h, i)` -> (lo, hi), inclusive, with keep(b, h,
    i, j) exactly when lo <= j <= hi (lo None when nothing bounds j below) and, when the
    mask has a residual, `residual_keep(e, b, h, i, j)` (Note [Residual conjuncts]);
    build with `RowInterval.of` (None when no top-level conjunct of the mask is a
    comparison linear in j)."""

    def __init__(self, block: ir.Block, names: KernelNames, free: Sequence, linear: Sequence,
                 never_empty: frozenset[str], residual: Sequence = ()):
        super().__init__(block, names, never_empty)
        self.free = free            # (i1 free of j, negated)
        self.linear = linear        # (predicate, k, a, b): `a - b <pred> 0` with a - b = d0 + k * j
        self.residual = list(residual)      # (i1 of j outside that form, negated): Note [Residual conjuncts]
        # Note [Exact bounds]: the range of each term's a - b at j = 0, from the region once.
        abi_dims, memo = frozenset(names.abi_dims), {}
        self.ranges = [_sub(_int_range(a, abi_dims, memo=memo), _int_range(b, abi_dims, memo=memo))
                       for _, _, a, b in linear]

    @classmethod
    def of(cls, block: ir.Block, names: KernelNames,
           never_empty: frozenset[str] = frozenset()) -> "RowInterval | None":
        parts = MaskConjuncts.of(block)
        if not parts.linear:
            return None
        return cls(block, names, parts.free, [term for _, _, term in parts.linear], never_empty, parts.residual)

    def __repr__(self) -> str:
        return f"RowInterval({super().__repr__()})"

    def residual_keep(self, e: Emit, b, h, i, j, j_below_n: bool = False,
                      given: Mapping | None = None) -> ir.Value:
        """The residual conjuncts at (b, h, i, j) (i1; Note [Residual conjuncts]); true
        when there are none. `j_below_n`: the caller knows 0 <= j < N (Note [Indices
        known in range])."""
        if not self.residual:
            return e.true()
        env = self._run(e, self._start((b, h, i, j), given), in_range=self.known_in_range(j, j_below_n))
        return functools.reduce(e.land, (_truth(e, env, value, negated) for value, negated in self.residual))

    def bounds(self, e: Emit, b, h, i) -> tuple[ir.Value, ir.Value]:
        env = self._run(e, dict(zip(self.block.arguments, (b, h, i, e.c32(0)))))
        value = lambda v: env.get(v, v)  # noqa: E731
        alive = e.true()
        for keep, negated in self.free:
            alive = e.land(alive, _truth(e, env, keep, negated))
        lows, highs = [], []          # (bound, its range)
        for term, r in zip(self.linear, self.ranges):
            side, v, r, wide = solve_term(e, term, r, value)
            for bounds in {"eq": (lows, highs), "hi": (highs,), "lo": (lows,)}[side]:
                bounds.append((_clamp_far(e, v), (-_FAR, _FAR)) if wide else (v, r))
        hi = _clamp_far(e, *_reduce(e.min, min, highs)) if highs else e.c32(_FAR)
        if not lows and not self.free:
            return None, hi          # no lower bound (Note [One compare per score], sm80_masks.py)
        lo = _clamp_far(e, *_reduce(e.max, max, lows)) if lows else e.c32(-_FAR)
        return e.select(alive, lo, e.c32(_FAR)), hi
