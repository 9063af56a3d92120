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
  `arith.divf` the quotient rounded to nearest, from the reciprocal (`divide` in
  hook_arith.py, Note [Division]).

Here: `KernelNames` (what a region's names are in a kernel), `RegionCode` (a region
emitted at the insertion point, Note [Hoisted hook values]) and `load_param`. Beside it:
the forms some hooks compile to, score_forms.py (Notes [Bias linear in j] and [Score
scalings]) and row_intervals.py (Notes [Row intervals], [Residual conjuncts] and [Exact
bounds]); the walks that read a region's values, hook_walks.py; the arithmetic the
lowering lacks, hook_arith.py.

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
score's own multiplication (Note [Score scalings] in score_forms.py) stays folded:
the score moves by rounding, no decision does.

Note [Square root]: dsl.md's sqrt is f32's, rounded to nearest as the reference's.
PTX's sqrt.rn.f32 is that, but ptxas builds it with a called subroutine for its slow
path (zeros, subnormals, the ends of the range), and a call in a kernel serializes every
wgmma in it (ptxas's C7509) and spills around the call: a score_mod with sqrt(s * s + 1.0)
spilled 3,312 bytes on sm_90a. So sqrt is `square_root`'s, rsqrt.approx and about twenty
FMA-pipe instructions, no branch: y = x * r, one Newton step, then a step to the
neighbour where the exact residual x - y^2 places the root past a midpoint. Over every x
of [1, 4) (every fraction at both exponent parities, so every normal x, as the steps
scale by powers of 2) these steps, run in numpy, gave IEEE's root bit for bit from
rsqrt.approx.ftz as an sm_90 GPU computes it (attnc_sim's model) and from that result up
to 8 ulps off either way (one Newton step alone missed 2 to 179 of those 16.8M roots at 1
to 8 ulps off); tests/backend/test_square_root.py runs the emitted code on such roots. x
below 2^-64 or above 2^64 is scaled by an even power of 2 first (its subnormals included).

A float op whose operands are all constants (`log(128.0 / 8.0)` in a T5 bucket) is
evaluated here, in f32: a constant in the kernel rather than an instruction per score.
Transcendentals stay `math` ops: ptx.py lowers them to the approximate instructions.

Note [Saturating int]: `int(x)` of a float truncates toward zero and saturates at the i32
bounds, NaN giving 0 (README): LLVM's llvm.fptosi.sat, which is PTX's one cvt.rzi.s32.f32
(saturating by PTX's definition; LLVM 22's NVPTX expands it into seven instructions, which
ptx.py undoes on sm_100a: Note [One cvt for int()]). The hooks emit that intrinsic, not
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
from typing import Mapping, Sequence

from mlir import ir
from mlir.dialects import arith, llvm, scf

from attnc.backend.exact_ints import WIDTH_OPS, IntPlan
from attnc.backend.hook_arith import _fabs, _fold, _power_of_two, _reciprocal, divide, floordiv, square_root
from attnc.backend.mask_hooks import ExtraParam
from attnc.backend.nvgpu_builders import Approx, Emit
from attnc.ir import DIM, PARAM, YIELD, error_at
from attnc.ir.diagonals import ABOVE, BELOW, diagonal_values, flat_bounds, flat_holds

_DYNAMIC = -2147483648      # LLVM::GEPOp::kDynamicIndex
_RETURNS = (YIELD, "func.return")


def size_dims(variant) -> frozenset[str]:
    """The dims that size q, k or v: B, H, HKV, M, N (never negative)."""
    return frozenset(getattr(variant, role) for role in ("batch", "heads", "heads_kv", "seq_q", "seq_k")
                     if isinstance(getattr(variant, role), str))


def role_dims(variant, roles: Sequence[str]) -> frozenset[str]:
    """The variant's names of the dims playing `roles` ('batch', 'heads', ...), when symbolic."""
    return frozenset(getattr(variant, r) for r in roles if isinstance(getattr(variant, r), str))


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


# Integer ops that cost no more than holding their result (Note [Values of a diagonal])
_CHEAP_INT_OPS = frozenset({"arith.addi", "arith.subi", "arith.muli", "arith.cmpi", "arith.select", "arith.andi",
                            "arith.ori", "arith.xori", "arith.minsi", "arith.maxsi", "math.absi", "arith.constant",
                            "arith.extui", "arith.extsi", "arith.trunci"})


class RegionCode:
    """One region (or single-block function) emitted at the current insertion point."""

    gpu_arith = True        # False: arith.divf and math.sqrt as they are (to run the code on a CPU in tests)
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

    def results(self, e: Emit, *args, given: Mapping | None = None) -> list[ir.Value]:
        env = self._run(e, self._start(args, given))
        return [env.get(v, v) for v in self._returned]

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
    # score_masks.py) asks `hoist` for the values that depend on b and h only, then for
    # those of each row (i) and each column (j), each emitted once where the tile's
    # scores are computed, and calls the hook per score with them `given`: only the ops
    # that read s, or both i and j, are emitted per score. Each op is emitted as before,
    # on the same operands, in the same order of evaluation within its level: a value
    # moves only when none of its operands varies at the finer level, so nothing is
    # reassociated (`s + w0[h] + w1[h]` still adds per score, the loads do not). It is
    # the same block of code, before the scores' ops, so nothing runs that did not.
    # Where each value goes is attn-hoist's `attn.level` on its op, when the pass ran.
    @functools.cached_property
    def _placed(self) -> dict:
        """For each value of the block: the arguments (ARGS) of the level it is computed at:
        its op's `attn.level` (attn-hoist, attnc/passes/hoist.py), else the level of what it
        reads."""
        from attnc.passes.hoist import LEVELS, placed_levels

        placed = {a: frozenset({n}) for a, n in zip(self.block.arguments, self.ARGS)}
        for op, level in placed_levels(self.block, self.ARGS):
            placed.update((r, LEVELS[level] & frozenset(self.ARGS)) for r in op.results)
        return placed

    def hoist(self, e: Emit, given: Mapping, args: Mapping[str, ir.Value],
              in_range: Mapping | None = None) -> dict:
        """`given` and, emitted here, the values placed at the level of the arguments `args`
        (by name, e.g. {"b": b, "h": h, "i": i}) or above (Note [Hoisted hook values]);
        `in_range` as `_run` takes it."""
        known = frozenset(args)
        later = frozenset(v for v, names in self._placed.items() if not names <= known)
        env = dict(given)
        env.update((a, args[n]) for a, n in zip(self.block.arguments, self.ARGS) if n in args)
        return self._run(e, env, later, in_range)

    @functools.cached_property
    def placed_finer(self) -> bool:
        """Whether an op's `attn.level` is finer than what it reads (attn-hoist{hoist=false},
        or an edit): a form that computes such a value once per row is then not taken
        (Note [Bias linear in j] in score_forms.py)."""
        from attnc.passes.hoist import placed_levels

        return any(mine != coarsest for (_, mine), (_, coarsest) in
                   zip(placed_levels(self.block, self.ARGS), placed_levels(self.block, self.ARGS, given=False)))

    def hoist_tile(self, e: Emit, b, h, rows: int, row_i, cols: int, col_j, in_range=None) -> tuple:
        """(the values placed per CTA, [those of each row r < `rows` with them], [those of
        each column c < `cols`]), each emitted here once (Note [Hoisted hook values]);
        `row_i(r)` and `col_j(c)` give the row's i and the column's j, asked only where a
        value is placed per row or column; `in_range(j)`: `_run`'s in_range for a column."""
        outer = self.hoist(e, {}, {"b": b, "h": h})
        row_values, col_values = [outer] * rows, [{}] * cols
        if self.varies_alone("i"):
            row_values = [self.hoist(e, outer, {"b": b, "h": h, "i": row_i(r)}) for r in range(rows)]
        if self.varies_alone("j"):
            keys = [col_j(c) for c in range(cols)]
            col_values = [self.hoist(e, outer, {"b": b, "h": h, "j": j}, in_range(j) if in_range else None)
                          for j in keys]
        return outer, row_values, col_values

    def varies_alone(self, name: str) -> bool:
        """Whether an op of the region is computed from the argument `name` and no other
        but b and h: a value `hoist` computes once per row (i) or column (j)."""
        level = frozenset({"b", "h", name})
        return any(name in names and names <= level for v, names in self._placed.items()
                   if not isinstance(v, ir.BlockArgument))

    # Note [Values of a diagonal]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # A relative position bias reads i and j only as their difference, d = j - i (or i - j),
    # and what it computes from d -- T5's bucket, a log, an int(), a param read -- is the
    # same for every score on one diagonal. The scores a thread holds of an mma.sync or
    # wgmma tile lie on few diagonals: rows g and g + 8 (+ 16 per row tile), columns 2t and
    # 2t + 1 (+ 8 per atom), so row g + 8's column c + 8 is row g's column c. Such values
    # (`diagonal`: those computed from d, b and h alone, d among them) are emitted once per
    # diagonal of the tile's scores (HookGrid in score_masks.py): at head dim 64 a sm_90a
    # warpgroup's 64 scores a thread are on 34 diagonals, sm_80's 64 on 22. Only where one
    # of them costs more than an integer op (a param read, float arithmetic): a compare of
    # d alone is as cheap as holding its result. d is computed as the hook computes it, at
    # its width (Note [Exact integers]); i and j never wrap (Note [Indices known in
    # range]), so every score of a diagonal has the same d. Where those values stop
    # changing, a tile beyond computes them once (`far_test`, Note [Flat diagonals] in
    # attnc/ir/diagonals.py), and a tile near them shares them across the warp's lanes
    # (Note [Diagonals across the warp] in warp_diagonals.py).
    @functools.cached_property
    def diagonal(self) -> tuple[ir.Operation, frozenset] | None:
        """(the op d = j - i or i - j, the block's other values: all but those computed from
        d, b and h alone, d among them) where one of those costs more than an integer op,
        else None."""
        found = diagonal_values(self.block, self.ARGS)
        if found is None:
            return None
        root, on = found
        costly = any(v.owner.name not in _CHEAP_INT_OPS for v in on if v != root.results[0])
        return (root, frozenset(v for v in self._placed if v not in on)) if costly else None

    def hoist_diagonal(self, e: Emit, given: Mapping, i: ir.Value, j: ir.Value) -> dict:
        """`given` and, emitted here, the values of `diagonal` on the diagonal of (i, j)."""
        return self.hoist_at(e, given, self.d_at(e, i, j))

    def hoist_at(self, e: Emit, given: Mapping, d: ir.Value) -> dict:
        """`given` and, emitted here, the values of `diagonal` where its op d is `d`."""
        root, off = self.diagonal
        # A value of b, h and constants alone placed finer than the CTA (attn-hoist{hoist=false}
        # puts every value per score) is not among `given`: made here, for the values of the
        # diagonal that read it (`w[h]` in `w[h] * tanh(float(j - i))`).
        made_here = {v for v in self._of_cta if v in off and v not in given}
        return self._run(e, {**given, root.results[0]: d}, off - made_here)

    @functools.cached_property
    def _of_cta(self) -> frozenset:
        """The block's values computed from b, h and constants alone."""
        varies = {a for a, n in zip(self.block.arguments, self.ARGS) if n not in ("b", "h")}
        found: set = set()
        for op in self.block.operations:
            if op.regions or any(v in varies for v in op.operands):
                varies.update(op.results)
            else:
                found.update(op.results)
        return frozenset(found)

    def d_at(self, e: Emit, i: ir.Value, j: ir.Value) -> ir.Value:
        """The op d of `diagonal` (j - i or i - j) on (i, j), at the hook's width."""
        root, i_arg = self.diagonal[0], self.block.arguments[self.ARGS.index("i")]
        return self._emit(e, root, [i if v == i_arg else j for v in root.operands])

    def far_test(self, e: Emit, spots: Mapping, row_i, col_j, across=None) -> tuple[ir.Value, ir.Value] | None:
        """(an i1: every diagonal of a tile's scores lies beyond the flat diagonals, Note
        [Flat diagonals] in attnc/ir/diagonals.py; d at spot (0, 0), from which `hoist_at`
        computes the tile's values there once); None where the hook has none. `spots` maps
        each diagonal's key (its j - i less that of spot (0, 0)) to a (row, column) on it,
        `row_i` and `col_j` give their i and j. `across` (the lane's first j - i less its
        warp's least, the most that is): the test of the warp's scores, the same in its
        every lane, and d where that first j - i is the warp's least (Note [Diagonals
        across the warp])."""
        bounds = self.flat_diagonals
        if bounds is None:
            return None
        first, last = min(spots), max(spots)
        j0 = col_j(0)
        if across is not None:
            offset, spread = across
            j0, last = e.sub(j0, offset), last + spread
        d0 = self.d_at(e, row_i(0), j0)
        if self.diagonal[0].operands[0] == self.block.arguments[self.ARGS.index("i")]:     # d = i - j
            first, last = -last, -first
        below, above = bounds
        far = e.false()
        if below is not None:
            far = arith.ori(far, e.le(e.add(d0, last), below))
        if above is not None:
            far = arith.ori(far, e.ge(e.add(d0, first), above))
        return far, d0

    @functools.cached_property
    def on_diagonal(self) -> frozenset:
        """The values of `diagonal`: computed from d, b and h alone, d among them."""
        return frozenset(v for v in self._placed if v not in self.diagonal[1])

    @functools.cached_property
    def flat_diagonals(self) -> tuple[int | None, int | None] | None:
        """(below, above) of Note [Flat diagonals] as attn-hoist recorded them on the op d,
        checked, or as it would where it did not run (no attn.level on d); None where
        neither is."""
        from attnc.passes.hoist import LEVEL

        if self.diagonal is None:
            return None
        root = self.diagonal[0]
        if LEVEL not in root.attributes:
            bounds = flat_bounds(self.block, self.ARGS)
            return None if bounds == (None, None) else bounds
        bounds = tuple(ir.IntegerAttr(root.attributes[a]).value if a in root.attributes else None
                       for a in (BELOW, ABOVE))
        if bounds == (None, None):
            return None
        if not flat_holds(self.block, self.ARGS, *bounds):
            shown = flat_bounds(self.block, self.ARGS)
            said = ", ".join(f"{a} = {b}" for a, b in zip((BELOW, ABOVE), bounds) if b is not None)
            raise error_at(root, f"{said}: the values this hook computes from d are not shown the same beyond "
                                 f"there (attn-hoist finds {BELOW} = {shown[0]}, {ABOVE} = {shown[1]}; None: "
                                 f"no such bound); a bound may be edited farther from the diagonal, not nearer")
        return bounds

    def known_in_range(self, j: ir.Value, j_below_n: bool) -> Mapping | None:
        """The `in_range` of a key index j known to lie in [0, N) (Note [Indices known in
        range]) when `j_below_n`, else None."""
        seq_k = self.names.variant.seq_k
        return {j: seq_k} if j_below_n and isinstance(seq_k, str) else None

    @functools.cached_property
    def _returned(self) -> list[ir.Value]:
        """The values the region's terminator returns, read once (as `_program`)."""
        ops = list(self.block.operations)
        if not ops or ops[-1].name not in _RETURNS:
            raise ValueError("the region has no terminator")
        return list(ops[-1].operands)

    @functools.cached_property
    def _program(self) -> list[tuple[ir.Operation, ir.Value, list[ir.Value]]]:
        """(op, its result, its operands) of every op but the terminator, read from the
        region once: a hook is emitted many times (per score, diagonal, loop)."""
        program = []
        for op in list(self.block.operations)[:-1]:
            if len(op.results) != 1:
                raise error_at(op, f"{op.name} in a hook region: a hook computes values, each op of it one")
            program.append((op, op.results[0], list(op.operands)))
        return program

    def _run(self, e: Emit, env: dict, skip=frozenset(), in_range: Mapping | None = None) -> dict:
        """Emit every op but the terminator, those whose result `env` already holds and
        those whose results are in `skip`; returns `env` with their values. `in_range`:
        values known to lie in [0, a dim) (Note [Indices known in range])."""
        for op, result, operands in self._program:
            if result in env or result in skip:
                continue
            with op.location:
                env[result] = self._emit(e, op, [env.get(v, v) for v in operands], in_range)
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
            if self.gpu_arith:
                return divide(e, x, y, Approx(e).rcp(y))
        if op.name == "math.sqrt" and self.gpu_arith:
            return square_root(e, operands[0], Approx(e).rsqrt)     # Note [Square root]
        copy = op.clone()
        for k, v in enumerate(operands):
            copy.operands[k] = v
        if "attn.level" in copy.attributes:         # attn-hoist's, said by where the copy stands
            del copy.attributes["attn.level"]
        return copy.results[0]


class ScoreCode(RegionCode):
    """A score_mod region, whose arguments are the score's s, b, h, i and j."""

    ARGS = ("s", "b", "h", "i", "j")


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
