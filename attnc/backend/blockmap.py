"""The GPU block map of a mask that reads params: a small kernel, generated from the
same `mask_mod` region, that classifies every tile before the attention kernel runs.

    blockmap[b, h_m, m_block, n_block]  (u8)  0 = SKIP (nothing kept), 1 = MIXED, 2 = FULL
                                               (bits 0-1), a MIXED tile's holds bits 2-3

for every batch b, head slot h_m (one slot when the mask does not read h), query block
[m_block * block_m, +block_m) and key block [n_block * block_n, +block_n); rows >= M and
keys >= N do not count. With a tile table (`BlockMapPlan.qtiles`, Note [Document-aligned
tiles] in qtiles.py) m_block is the table's tile t instead, its rows the tile's [row0,
row_end) and its key blocks [key0 + n_block * block_n, +block_n): only the
cdiv(N - key0, block_n) blocks of such a row are written, and read.

Here `blockmap_plan` decides the shapes and the launch; `emit_blockmap_kernel`
(blockmap_kernel.py: Notes [Block map kernel], [Tile intervals] and [Sampled elements])
writes the kernel, and `blockmap_hooks` (blockmap_hooks.py: Note [Full range from the
map]) answers the attention kernel's mask questions (Note [Mask hooks] in mask_hooks.py)
from the map.

Note [Conjuncts a tile holds]: a mask with a row interval and a residual (Notes [Row
intervals] and [Residual conjuncts] in row_intervals.py: `doc[b, i] == doc[b, j] and j <= i`)
is tested in a MIXED tile as both, per score. But most MIXED tiles of such a mask are MIXED
for one of the two alone: a documents tile on the diagonal inside one document needs
only `j <= i`, one below the diagonal across a document start only the ids' compare
(112 and 168 of the 296 MIXED 128x64 tiles of a head at N = 8192, documents of 1000; 16
need both). So step 2 also evaluates each conjunct on the tile's intervals (the same
`TileIntervals` pass, `truths`) and a MIXED tile's byte gets RESIDUAL_HOLDS when every
residual conjunct may fail nowhere on the tile and INTERVAL_HOLDS when no free or linear
conjunct may (`BlockMapPlan.holds`: only masks with both parts and the interval step).
The bits are proofs over the tile's rows and keys clamped to M and N, and never set
otherwise (the element walk's tiles, the static class's): the attention kernel
(`blockmap_holds` here, `ScoreMasker._split` in score_masks.py) then tests only the other
part. It must still drop the keys >= N itself: a ragged last key block may hold its
interval part on its keys < N (rows past N that read the last document id, M > N), so
the residual alone is tested only in a block wholly below N. Every reader of the class
masks the byte with CLASS_BITS. Against the same kernels testing both parts (the same
outputs to the bit), documents + causal ran 3-4 % faster on sm_80 and 3 % on sm_90a at
head dim 128 (results/sm80_h200.md and sm90a_h200.md, "Conjuncts a tile holds").

Note [Block map ABI]: the runtime owns the map, a scratch buffer it passes by name to
every kernel that lists it. It does not zero it: the map kernel fills it ("fills" in the
manifest), writing every block of every query tile that the attention kernel may read
(Note [Filled scratch] in runtime/attnc_runtime/kernel.py). The attention kernel lists it
through the `ExtraParam('scratch', 'blockmap', bytes)` that `blockmap_hooks` returns, whose
manifest entry is exactly `plan.scratch` (the manifest parser refuses a scratch sized two
ways); the hooks read it with `e.arg(param.key)`, and `H` with `e.dim('H')` when the map
is per head. The block-map kernel's own parameters, in order: the scratch, every symbolic
dim of the variant (i32, `variant.dims` order), then the pointer of each param tensor the
mask reads. No strides: a param tensor is contiguous (the runtime checks), and the mask
reads it as the attention kernel does (`MapNames`, hooks.load_param), row-major from its
shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from mlir import ir
from mlir.dialects import nvvm

from attnc.backend.bundle import kernel_symbol
from attnc.backend.map_program import read_map_program
from attnc.backend.hooks import RegionCode
from attnc.backend.nvgpu_builders import Emit
from attnc.backend.qtiles import QTilesPlan, cdiv_factor
from attnc.errors import AttncError
from attnc.frontend.variant import Tensor
from attnc.ir import MASK_MOD, PARAM, attention_ops, error_at, get_bool, region_block

if TYPE_CHECKING:
    from attnc.backend.run_ranges import RunRest

SCRATCH = "blockmap"
SKIP, MIXED, FULL = 0, 1, 2
CLASS_BITS = 3               # a map byte's class; a MIXED tile's byte may add:
RESIDUAL_HOLDS = 4           # the residual conjuncts hold on the whole tile (Note [Conjuncts a tile holds])
INTERVAL_HOLDS = 8           # the free and linear conjuncts hold on the whole tile
THREADS = 128
TILES = THREADS // 32        # tiles per group: one per warp for the static and interval steps
UNROLL = 4                   # elements per thread between two warp votes

DimValue = str | int


@dataclass(frozen=True)
class BlockMapPlan:
    variant: str
    block_m: int
    block_n: int
    per_head: bool                   # whether mask_mod reads h (else one head slot)
    batch: DimValue
    heads: DimValue
    seq_q: DimValue
    seq_k: DimValue
    dims: tuple[str, ...]            # every symbolic dim, passed as i32 in this order
    params: tuple[Tensor, ...]       # the param tensors the mask reads (frontend Tensors)
    intervals: bool = False          # whether tiles go through Note [Tile intervals]
    holds: bool = False              # whether MIXED tiles record the conjuncts they hold (Note
                                     # [Conjuncts a tile holds])
    samples: bool = True             # whether step 2 samples elements (Note [Sampled elements])
    groups: int = 4                  # groups of TILES key blocks per CTA, one after the other
    qtiles: Optional[QTilesPlan] = None  # the query tiles of a tile table (Note [Document-aligned
                                     # tiles], qtiles.py); None: the fixed grid
    runs: Optional["RunRest"] = None  # no map is built, the table's runs give the ranges
                                     # (Note [Ranges from the runs], run_ranges.py)

    @property
    def built(self) -> bool:
        """Whether the bundle builds the map (else only the tile table: `runs`)."""
        return self.runs is None

    @property
    def symbol(self) -> str:
        return kernel_symbol(self.variant, "blockmap")

    @property
    def head_slots(self) -> DimValue:
        return self.heads if self.per_head else 1

    @property
    def query_tiles(self) -> list:
        """The query tiles of a (b, h_m), as manifest factors: the grid's query blocks, or
        the tile table's length."""
        return self.qtiles.tiles if self.qtiles else [cdiv_factor(self.seq_q, self.block_m)]

    @property
    def scratch(self) -> dict:
        """The scratch param, exactly as every kernel reading the map must list it."""
        return {"kind": "scratch", "name": SCRATCH,
                "bytes": [self.batch, self.head_slots, *self.query_tiles, cdiv_factor(self.seq_k, self.block_n)]}

    @property
    def never_empty(self) -> frozenset[str]:
        """The dims >= 1 wherever the block-map kernel evaluates the mask: those of its
        grid (a launch with an empty grid is skipped)."""
        sizes = (self.batch, self.seq_q, self.seq_k) + ((self.heads,) if self.per_head else ())
        return frozenset(d for d in sizes if isinstance(d, str))

    @property
    def kernel_params(self) -> list[dict]:
        return ([self.scratch] + ([self.qtiles.scratch] if self.qtiles else [])
                + [{"kind": "dim", "name": d, "type": "i32"} for d in self.dims]
                + [{"kind": "ptr", "tensor": p.name} for p in self.params])

    @property
    def kernel(self) -> dict:
        """The manifest's kernel entry (launch it before the attention kernel)."""
        z = [self.batch] + ([self.heads] if self.per_head else [])
        return {"name": "blockmap", "symbol": self.symbol, "block": [THREADS, 1, 1],
                "dynamic_smem_bytes": 0,
                "grid": [[cdiv_factor(self.seq_k, self.block_n * TILES * self.groups)], self.query_tiles, z],
                "params": self.kernel_params,
                "role": "mask", "fills": [SCRATCH]}     # the runtime may keep the map (Note [Reused masks], kernel.py)


def blockmap_plan(result, block_m: int, block_n: int) -> BlockMapPlan:
    """The block map of the (single) attn.kernel of a compile result, at the attention
    kernel's tile sizes, as its program says (Note [The block map's program] in
    attnc/passes/mask_kernels.py; `read_map_program`). Meant for masks that read params
    (`mask_kind = "runtime"`), it is right for any mask_mod."""
    op, variant = _attention(result), result.variant
    if not get_bool(op, "has_mask_mod"):
        raise error_at(op, "a block map needs a mask_mod")
    if (block_m * block_n) % (THREADS * UNROLL):
        raise error_at(op, f"a {block_m}x{block_n} tile cannot be walked by {THREADS} threads "
                           f"{UNROLL} elements at a time")
    block = region_block(op, MASK_MOD)
    read = {_param_index(o.operands[0]) for o in _ops(block) if o.name == PARAM}
    params = tuple(p for k, p in enumerate(variant.params) if k in read)
    program = read_map_program(op)
    return BlockMapPlan(variant.name, block_m, block_n, _uses(block, block.arguments[1]),
                        variant.batch, variant.heads, variant.seq_q, variant.seq_k,
                        tuple(variant.dims), params, program.intervals, program.holds, program.samples,
                        program.groups)


def _attention(result) -> ir.Operation:
    ops = attention_ops(result.module)
    if len(ops) != 1:
        raise AttncError(f"a block map is built for one attn.kernel, found {len(ops)}")
    return ops[0]


def _ops(block: ir.Block):
    return list(block.operations)


def _uses(block: ir.Block, value: ir.Value) -> bool:
    return any(value == v for o in _ops(block) for v in o.operands)


def _param_index(tensor: ir.Value) -> int:
    """Params are the function arguments after q, k and v (attn.irdl.mlir)."""
    return ir.BlockArgument(tensor).arg_number - 3


# ---------------------------------------------------------------- mask_mod as code

def emit_mask(e: Emit, block: ir.Block, args, names: MapNames) -> ir.Value:
    """The i1 the mask region yields for `args` (b, h, i, j), compiled at the insertion
    point exactly as the attention kernel's keep() is (hooks.RegionCode: floor division
    expanded, float constants folded, the same division, params read by hooks.load_param),
    so that the map and the kernel never disagree about an element; the names resolve
    through `names` (a MapNames)."""
    return RegionCode(block, names, names.never_empty)(e, *args)


class MapNames:
    """How the mask region's names resolve in the block-map kernel, as hooks.KernelNames
    resolves them in the attention kernel (the part RegionCode and hooks.load_param read):
    every dim is the kernel's own i32 parameter of that name (`e.dim(name)`), a param
    tensor is known by its name (`params`: the variant's param tensors, in the order of
    the `params` attribute) and read through its pointer parameter `e.arg("ptr:<name>")`.
    `never_empty`: the dims that are >= 1 wherever the code runs (BlockMapPlan.never_empty);
    a param read whose shape has any other symbolic dim is guarded."""

    def __init__(self, params, never_empty: frozenset[str] = frozenset(), size_dims: frozenset[str] = frozenset()):
        self.params = {p.name: p for p in params}
        self.param_order = [p.name for p in params]
        self.never_empty = never_empty
        self.size_dims = size_dims      # dims in [0, 2^30] (hooks.size_dims; Note [Exact integers])

    def param_of(self, tensor: ir.Value) -> str:
        return self.param_order[_param_index(tensor)]

    def dim(self, e: Emit, name: str) -> ir.Value:
        return e.dim(name)

    def size(self, e: Emit, entry: DimValue) -> ir.Value:
        return e.c32(entry) if isinstance(entry, int) else self.dim(e, entry)


def _arg_key(p: dict) -> str:
    if p["kind"] == "ptr":
        return f"ptr:{p['tensor']}"   # what hooks.load_param reads (`e.arg`)
    return p["name"]                 # a dim (what `e.dim` reads), or the scratch


def _arg_type(p: dict) -> ir.Type:
    if p["kind"] in ("ptr", "scratch"):
        return ir.Type.parse("!llvm.ptr<1>")
    return ir.IntegerType.get_signless(32)     # a dim


def _i8() -> ir.Type:
    return ir.IntegerType.get_signless(8)


def _redux(e: Emit, x: ir.Value, kind) -> ir.Value:
    return nvvm.ReduxOp(e.i32, x, kind, e.c32(-1)).result
