"""The hooks a kernel is built with (`KernelHooks`, which variant_hooks.py reads from the
IR's hook regions): what they read (`KvCtx`), what a mask answers (`KvRange`), their
signatures, the parameters they add to the kernel (`ExtraParam`), and the hooks of the
built-in masks (`mask_hooks`).

Note [Mask hooks]: the kernel asks a mask these questions, each answered by emitting
i32/i1 arithmetic at the point of use (so a runtime block map or a DSL `mask_mod` can
answer them later):

* `kv_range(e, ctx) -> KvRange`: for the CTA's m_block, the key blocks to visit,
  [lo, hi), and inside it the blocks that need no per-element predicate, [full_lo,
  full_hi). The kernel visits hi-1 down to lo, so the partial blocks at the top
  (diagonal, ragged N edge) are peeled first; blocks outside [lo, hi) are never loaded.
  `KvRange.segments` (optional): the blocks to visit are the union of these sorted,
  disjoint [start, end) ranges inside [lo, hi) (a mask with holes, e.g. global tokens
  and a window); the loop then walks the union downwards, loading nothing in the holes.
* `kv_hint(e, ctx) -> KvRange` (optional, with a block map's kv_range): the static
  analysis' hull of the same mask, whose top block the kernel loads before the map is
  read (Note [First block before the map] in forward_loads.py).
* `tile_partial(e, ctx, n_block) -> i1` (optional): whether a block outside the full
  range [full_lo, full_hi) needs the predicate after all (the kernel adds the ragged
  last block itself); without it every such block is masked. Blocks inside the full
  range are never asked: give an empty full range to have every block asked (a block
  map).
* `tile_skip(e, ctx, n_block) -> i1` (optional): a block outside [full_lo, full_hi)
  that keeps nothing: it is neither loaded nor computed. It must be false inside the
  full range (a skipped block is not full).
* `keep(e, b, h, i, j) -> i1`: the element predicate applied in partial blocks, with
  i, j the global query/key indices (i32). The bound j < N is always added by the kernel.
* `row_interval(e, b, h, i) -> (lo, hi)` (optional): keep(b, h, i, j) holds exactly when
  lo <= j <= hi (i32, inclusive; lo None: no lower bound) and, if given,
  `row_residual(e, b, h, i, j, j_below_n) -> i1` (j_below_n: the kernel knows 0 <= j <
  N, Note [Indices known in range] in hooks.py); partial blocks then test each score's column
  against the row's bounds (and the residual) instead of calling keep (Notes [Row
  intervals] and [Residual conjuncts] in row_intervals.py, Note [One compare per score]
  in score_masks.py).
* `tile_holds(e, ctx, n_block) -> (interval, residual)` (optional, with row_interval
  and row_residual): i1s that say the row interval's conjuncts, or the residual's, hold
  on every element of block n_block (rows < M, keys < N); a partial block then tests
  only the other part, and the kernel still drops keys >= N itself (Note [Conjuncts a
  tile holds] in blockmap.py).

and on scores, on every visited block (natural-log units, as dsl.md defines them):

* `score_mod(e, s, b, h, i, j) -> f32` rewrites the scaled score of every element
  (then the softmax uses base-2 exponent scale log2(e) instead of scale*log2(e)); with
  `score_mod_in` it is given the raw score times that factor instead of times the
  scale, and with `score_mod_out` its result times that factor is the score (both fold
  constant scalings of a score_mod into multiplications the kernel does anyway);
* or `score_bias(e, b, h, i, j) -> f32`, a score_mod that is s + bias: the kernel keeps
  the raw score and the folded scale, adding bias/scale with one FMA (Note [Folded
  scale] in softmax.py);
* `sink(e, h) -> f32`: the sink logit of head h, folded into the row sum at the end.

`e` is the kernel's `Emit` (nvgpu_builders.py); hooks may also call `arith`/`math`
directly: an insertion point and location are active.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from attnc.backend.kernel_spec import ForwardSpec

# "mask_mod": a DSL mask compiled into the hooks (kv_range and keep given by KernelHooks).
MASK_MODES = ("none", "causal", "causal_bottom_right", "mask_mod")


@dataclass(frozen=True)
class KvCtx:
    """What the mask hooks may read: all i32 values but the block sizes. On the fixed
    grid query block m_block holds the rows [m_block * block_m, +block_m) and key block n
    the keys [n * block_n, +block_n). With a tile table (`aligned`, Note [Document-aligned
    tiles] in qtiles.py) m_block is the table's tile, its rows [row0, row_end), and its key
    blocks start at the tile's key origin key0: `n_keys` keys lie past it (N - key0, at
    least 0); key_end is the table's (the end of the tile's run, or -1). Hooks that work
    on grid coordinates (the static analysis' kv_range) refuse such a context."""
    m_block: Any
    b: Any
    h: Any
    M: Any
    N: Any
    block_m: int
    block_n: int
    aligned: bool = False
    n_keys: Any = None
    row0: Any = None
    row_end: Any = None
    key0: Any = None
    key_end: Any = None

    def grid_only(self, what: str) -> None:
        assert not self.aligned, f"{what} reads grid blocks, not a tile table's tiles"


@dataclass(frozen=True)
class KvRange:
    """The key blocks a query block visits, [lo, hi), those of them that need no
    per-element predicate, [full_lo, full_hi), and the segments of a mask with holes
    (Note [Mask hooks]: kv_range)."""
    lo: Any
    full_lo: Any
    full_hi: Any
    hi: Any
    segments: tuple[tuple[Any, Any], ...] = ()    # () : the whole [lo, hi)


KvRangeFn = Callable[[Any, KvCtx], KvRange]
TilePartialFn = Callable[[Any, KvCtx, Any], Any]
TileHoldsFn = Callable[[Any, KvCtx, Any], tuple[Any, Any]]
KeepFn = Callable[[Any, Any, Any, Any, Any], Any]
ScoreModFn = Callable[[Any, Any, Any, Any, Any, Any], Any]
ScoreBiasFn = Callable[[Any, Any, Any, Any, Any], Any]
SinkFn = Callable[[Any, Any], Any]
RowIntervalFn = Callable[[Any, Any, Any, Any], tuple[Any, Any]]


@dataclass(frozen=True)
class ExtraParam:
    """A kernel parameter a hook reads (`e.arg(name)`, or `e.arg(key)` which no ABI name
    can shadow), appended to the ABI: kind 'dim' (an int), 'ptr' (a tensor's device
    pointer) or 'scratch' (a buffer of `bytes` (manifest factors) that the runtime
    allocates and zeroes before the launch)."""
    kind: str
    name: str
    type: str = "i32"
    bytes: tuple = ()

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    def manifest(self) -> dict:
        if self.kind == "dim":
            return {"kind": "dim", "name": self.name, "type": self.type}
        if self.kind == "scratch":
            return {"kind": "scratch", "name": self.name, "bytes": list(self.bytes)}
        return {"kind": "ptr", "tensor": self.name}


# ---------------------------------------------------------------- built-in masks

def dense_kv_range(e, c: KvCtx) -> KvRange:
    """Every key block; only the ragged last one (N % block_n != 0) is partial."""
    return KvRange(lo=0, full_lo=0, full_hi=e.div(c.N, c.block_n), hi=e.cdiv(c.N, c.block_n))


def _causal_offset(e, c: KvCtx, bottom_right: bool):
    return e.sub(c.N, c.M) if bottom_right else e.c32(0)


def _causal_kv_range(bottom_right: bool) -> KvRangeFn:
    def kv_range(e, c: KvCtx) -> KvRange:
        c.grid_only("the causal key range")
        offset = _causal_offset(e, c, bottom_right)
        n_blocks = e.cdiv(c.N, c.block_n)
        last_row = e.min(e.mul(e.add(c.m_block, 1), c.block_m), c.M)        # exclusive
        hi = e.clamp(e.cdiv(e.add(last_row, offset), c.block_n), 0, n_blocks)
        # Block n is full when its last key (n+1)*block_n - 1 <= first row + offset, and < N.
        first_keep = e.add(e.add(e.mul(c.m_block, c.block_m), offset), 1)
        full_hi = e.min(e.div(e.max(first_keep, 0), c.block_n), e.div(c.N, c.block_n))
        return KvRange(lo=0, full_lo=0, full_hi=full_hi, hi=hi)
    return kv_range


def _causal_keep(bottom_right: bool) -> KeepFn:
    def keep(e, b, h, i, j):
        offset = e.sub(e.dim("N"), e.dim("M")) if bottom_right else 0
        return e.le(j, e.add(i, offset))
    return keep


_MASK_HOOKS = {
    "none": (dense_kv_range, None),
    "causal": (_causal_kv_range(False), _causal_keep(False)),
    "causal_bottom_right": (_causal_kv_range(True), _causal_keep(True)),
    "mask_mod": (dense_kv_range, None),
}


@dataclass(frozen=True)
class KernelHooks:
    """The hooks of one kernel, Note [Mask hooks]: its mask's questions and its score's
    rewrites, as variant_hooks.py compiles them from the kernel's hook regions and what
    attn-analyze-masks recorded (None: the kernel's default)."""
    mask: str = "none"                     # one of MASK_MODES
    kv_range: Optional[KvRangeFn] = None   # default: from `mask`
    kv_hint: Optional[KvRangeFn] = None    # a block map's static hull: its top guesses the first block
    tile_partial: Optional[TilePartialFn] = None
    tile_skip: Optional[TilePartialFn] = None
    tile_holds: Optional[TileHoldsFn] = None
    keep: Optional[KeepFn] = None          # default: from `mask`
    row_interval: Optional[RowIntervalFn] = None   # keep as a per-row key range, when it is one
    row_residual: Optional[KeepFn] = None  # with row_interval: keep's other conjuncts, tested per score
    score_mod: Optional[ScoreModFn] = None
    score_mod_in: Optional[float] = None   # raw score factor before score_mod (default: scale)
    score_mod_out: float = 1.0             # score_mod's result times this: natural units
    score_bias: Optional[ScoreBiasFn] = None
    sink: Optional[SinkFn] = None
    extra_params: tuple[ExtraParam, ...] = ()


def mask_hooks(spec: ForwardSpec) -> tuple[KvRangeFn, Optional[KeepFn]]:
    """The (kv_range, keep) hooks of `spec`: its own, else those of its mask mode. The
    built-in causal masks have no row interval (they keep their compare per score): as
    [-inf, i] they measured no faster, and slower next to a score_mod
    (results/sm80_h200.md, "Built-in causal mask")."""
    kv_range, keep = _MASK_HOOKS[spec.hooks.mask]
    return spec.hooks.kv_range or kv_range, spec.hooks.keep or keep
