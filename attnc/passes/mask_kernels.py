"""`attn-mask-kernels`: the programs of the kernels a bundle launches before the attention
kernel to read its mask's params -- the block map's and the tile table's -- just before the
tile program that reads what they fill (L2 -> L2).

Targets: all. Expects the tile program after attn-analyze-masks (or later): an attn.kernel
whose program reads a block map (attn.block_map_read, which analyze-masks puts in the
mixed KV loops of a mask that reads params). Leaves before each such attn.kernel, in the
same block, an attn.map_kernel and, where the mask compares document ids (a conjunct
P[.., i] == P[.., j]: Note [Document-aligned tiles] in attnc/backend/qtiles.py), an
attn.table_kernel first; they replace those there from before (and go where the kernel
reads no map any more); other kernels are left as they are.

    before:  %o = "attn.kernel"(%q, %k, %v) ({ ... "attn.block_map_read"(%m_block, %n, %b, %h) ... })
    after:   "attn.table_kernel"() ({
             ^bb0(%b: i32, %h: i32):
               %aligned, %count = "attn.id_runs"(%b, %h) {param = "doc"}
               %used = scf.if %aligned -> (i32) {
                 "attn.table_runs"(%b, %h, %count)
                 "attn.table_order"(%b, %h, %count)
                 scf.yield %count : i32
               } else {
                 %grid = "attn.table_grid"(%b, %h)
                 scf.yield %grid : i32
               }
               "attn.table_rest"(%b, %h, %used)
               "gpu.yield"() : () -> ()
             }) : () -> ()
             "attn.map_kernel"() ({
             ^bb0(%b: i32, %h: i32, %m_block: i32):
               "attn.tile_table_read"(%b, %h, %m_block) {param = "doc"}
               %n_blocks = ... cdiv(N, block_n) ...
               scf.for %n = %c0 to %n_blocks step %c1 {
                 %byte = "attn.classify"(%b, %h, %m_block, %n) {holds = true, intervals = true, samples = true}
                 "attn.map_store"(%byte, %b, %h, %m_block, %n)
               }
               "gpu.yield"() : () -> ()
             }) {groups = 4 : i64}
             %o = "attn.kernel"(%q, %k, %v) ({ ...unchanged... })

Note [The block map's program]: the map (Note [Block map kernel] in
attnc/backend/blockmap_kernel.py says how its kernel works, blockmap.py what a byte holds)
is a kernel of its own, launched before the attention kernel. Its program says what that
kernel does for one query tile of one (b, h slot) -- the slot is h where the mask reads
h, else 0 -- and how: every key block of the tile classified and its byte stored, the
blocks of a CTA in `groups` groups of 4 (one a warp), each block by the steps its
attn.classify turns on. The attention kernel's mask_mod is the one classified (a map
that disagreed with the mask would drop kept keys), so attn.classify holds no region of
its own; on a tile table's tile (a documents mask with aligned tiles) the blocks count
from the tile's key origin, as in the attention kernel. The lowerings build the map
kernel from this program, checking it op by op (`read_map_program` in
attnc/backend/map_program.py), and refuse an attention kernel that reads a map no program
fills. Where the attention kernel takes its key ranges from a tile table's runs instead
(attn-kernel-choices' run_ranges), the bundle has no map and the program is not built.
A program asked for -- by an option given to this pass (recorded as `asked` on
attn.map_kernel: `asked = "holds=true"`), or by an edit that makes its steps or groups
differ from the pass's defaults -- is built: run_ranges' default then keeps the map, and
run_ranges = true beside it is refused, at its option where attn-kernel-choices is given
one, else at the program (`asked_steps` in attnc/backend/map_program.py).

Note [The tile table's program]: the table of document-aligned query tiles (Notes
[Document-aligned tiles] and [Tile table kernel] in attnc/backend/qtiles.py) is filled by
a kernel of one CTA per (b, h slot), whose steps are the program's ops: the runs of equal
ids and whether their tiles fit the table (attn.id_runs), then either those tiles' entries
(attn.table_runs) and the order of the grid's last ones (attn.table_order, by as many
waves as the attention kernel's tail_waves: Note [Longest tiles last]) or the grid's
(attn.table_grid), then the entries past the last tile (attn.table_rest). The lowerings
build it where the attention kernel takes its query tiles from the table
(attn-kernel-choices' aligned_tiles), from this program, checked op by
op (`read_table_program`); a program without attn.table_order is the table's in the
order found, which a kernel with tail_waves > 0 refuses.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnc.passes.registry import Pass, option_text

NAME = "attn-mask-kernels"
GROUPS = 4          # four groups a CTA ran fastest against one and eight (results/sm80_h200.md, "Block map kernel")


@dataclass(frozen=True)
class MaskKernels(Pass):
    """Write the programs of the mask kernels (block map, tile table) before the attention kernel that reads them."""

    name: ClassVar[str] = NAME
    groups: int = field(default=GROUPS, metadata={
        "doc": "groups of 4 key blocks (one a warp) each CTA of the map kernel classifies, one after "
               "the other (Note [Block map kernel] in attnc/backend/blockmap_kernel.py; default: 4)"})
    intervals: bool | None = field(default=None, metadata={
        "doc": "the map kernel classifies a tile the static class leaves mixed on its rows' and keys' "
               "intervals first (Note [Tile intervals]; default: where every op of the mask has an interval "
               "rule)"})
    samples: bool = field(default=True, metadata={
        "doc": "the map kernel then proves a tile mixed by 32 sampled elements before walking all of them "
               "(Note [Sampled elements]; default: on)"})
    holds: bool | None = field(default=None, metadata={
        "doc": "the map records in the byte of a tile the samples prove mixed the conjuncts the intervals prove it "
               "holds whole, for the attention kernel's split_mask (Note [Conjuncts a tile holds] in "
               "attnc/backend/blockmap.py; default: where both steps run and the mask has a row interval and "
               "another conjunct)"})

    def run(self, module) -> None:
        from attnc.errors import AttncError
        from attnc.ir import attention_ops

        if self.groups < 1:
            raise AttncError(f"groups={self.groups}: a CTA takes at least one group")
        kernels = [k for k in attention_ops(module) if k.name == "attn.kernel"]
        asked = [(k, v) for k, v in (("intervals", self.intervals), ("holds", self.holds)) if v is not None] + \
                [(k, v) for k, v, default in (("samples", self.samples, True), ("groups", self.groups, GROUPS))
                 if v != default]
        if asked and kernels and not any(reads_map(k) for k in kernels):
            name, value = asked[0]
            raise AttncError(f"{name}={int(value)}: an option of the block map's kernel, and no kernel here has "
                             f"one (its mask reads no params: the mask analysis gives its key ranges)")
        given = " ".join(f"{k}={option_text(v)}" for k, v in asked)
        for kernel in kernels:
            write_programs(kernel, self, given)


def reads_map(kernel) -> bool:
    """Whether `kernel`'s program (a role's too, from L3 on) reads a block map."""
    from attnc.ir import roles as R
    from attnc.ir import tiles
    return bool(R.ops_in(kernel.regions[0].blocks[0], (tiles.BLOCK_MAP_READ,)))


def programs_before(kernel, name: str) -> list:
    """The `name` ops (attn.map_kernel, attn.table_kernel) before `kernel` in its block,
    since the kernel before it."""
    from attnc.ir.tiles import KERNEL

    found = []
    for op in kernel.operation.block.operations:
        op = op.operation
        if op == kernel.operation:
            return found
        if op.name == KERNEL:
            found = []
        elif op.name == name:
            found.append(op)
    return found


def step_choices(kernel, intervals: bool | None, samples: bool, holds: bool | None, at=None,
                 who: str = "") -> dict[str, bool]:
    """The classify steps asked for, checked against `kernel`'s mask (an error located at
    `at`, else the kernel, starting with `who`, where the mask cannot take one), the
    defaults where one is None."""
    from attnc.backend.blockmap_intervals import unsupported
    from attnc.backend.hook_walks import MaskConjuncts
    from attnc.ir import MASK_MOD, error_at, region_block
    from attnc.ir.kernel import kernel_variant

    at = kernel if at is None else at
    block = region_block(kernel, MASK_MOD)
    missing = unsupported(block, list(kernel_variant(kernel).params))
    if intervals and missing is not None:
        raise error_at(at, f"{who}intervals = true, but the mask has {missing}, which the interval step does not "
                           f"model (Note [Interval transfer functions])")
    intervals = missing is None if intervals is None else intervals
    parts = MaskConjuncts.of(block)
    # the bits are the intervals' proofs, recorded on the tiles the samples prove mixed
    provable = intervals and samples and bool(parts.linear) and bool(parts.residual)
    if holds and not provable:
        raise error_at(at, f"{who}holds = true needs the interval and sample steps and a mask with a row interval "
                           "and another conjunct (Note [Conjuncts a tile holds])")
    return {"intervals": intervals, "samples": samples, "holds": provable if holds is None else holds}


def write_programs(kernel, options: MaskKernels, given: str = "") -> None:
    from mlir import ir

    from attnc.ir import roles as R
    from attnc.ir import tiles
    from attnc.passes.analyze_masks import table_ids

    for op in programs_before(kernel, tiles.MAP_KERNEL) + programs_before(kernel, tiles.TABLE_KERNEL):
        op.erase()
    if not reads_map(kernel):
        return
    steps = step_choices(kernel, options.intervals, options.samples, options.holds, who=f"{NAME}: ")
    ids = table_ids(kernel)
    with kernel.context, R.pass_loc(NAME, kernel), ir.InsertionPoint(kernel):
        if ids is not None:
            _table_program(ids)
        _map_program(kernel, ids, steps, options.groups, given)


def _map_program(kernel, ids: str | None, steps: dict, groups: int, given: str) -> None:
    from mlir import ir
    from mlir.dialects import arith, scf

    from attnc.ir import YIELD
    from attnc.ir import tiles
    from attnc.passes.tile_program import kv_block_count

    i32 = tiles.i32()
    attributes = {"groups": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), groups)}
    if given:           # the options given, which ask for the map (Note [The block map's program])
        attributes["asked"] = ir.StringAttr.get(given)
    program = ir.Operation.create(tiles.MAP_KERNEL, results=[], operands=[], regions=1, attributes=attributes)
    body = program.regions[0].blocks.append(i32, i32, i32)
    b, h, m_block = body.arguments
    with ir.InsertionPoint(body):
        if ids is not None:         # the map's tiles are the table's where the attention kernel's are
            tiles.tile_table_read(ids, b, h, m_block)
        zero, one = (arith.constant(i32, k) for k in (0, 1))
        loop = scf.ForOp(zero, kv_block_count(kernel), one)
        with ir.InsertionPoint(loop.body):
            n = loop.induction_variable
            tiles.map_store(tiles.classify(b, h, m_block, n, **steps), b, h, m_block, n)
            scf.YieldOp([])
        ir.Operation.create(YIELD, results=[], operands=[])


def _table_program(ids: str) -> None:
    from mlir import ir
    from mlir.dialects import scf

    from attnc.ir import YIELD
    from attnc.ir import tiles

    i32, i1 = tiles.i32(), ir.IntegerType.get_signless(1)
    program = ir.Operation.create(tiles.TABLE_KERNEL, results=[], operands=[], regions=1)
    body = program.regions[0].blocks.append(i32, i32)
    b, h = body.arguments
    with ir.InsertionPoint(body):
        aligned, count = tiles.table_step(tiles.ID_RUNS, [b, h], [i1, i32], param=ids)
        branch = scf.IfOp(aligned, [i32], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            tiles.table_step(tiles.TABLE_RUNS, [b, h, count])
            tiles.table_step(tiles.TABLE_ORDER, [b, h, count])
            scf.YieldOp([count])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp(tiles.table_step(tiles.TABLE_GRID, [b, h], [i32]))
        tiles.table_step(tiles.TABLE_REST, [b, h, branch.result])
        ir.Operation.create(YIELD, results=[], operands=[])
