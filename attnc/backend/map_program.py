"""The block map's program as the lowerings read it (Note [The block map's program] in
attnc/passes/block_map.py): `read_map_program` checks the attn.map_kernel before an
attention kernel op by op and returns what the map kernel is built from; anything else
there is refused at its op, naming what the map kernel can build.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from attnc.ir import DIM, YIELD, error_at, get_bool, get_int, get_shape, get_str, int_constant
from attnc.ir.ops import defining_op
from attnc.ir.tiles import CLASSIFY, MAP_KERNEL, MAP_STORE, TILE_TABLE_READ

_INDEX = ("arith.constant", "arith.addi", "arith.subi", "arith.divsi", DIM)


@dataclass(frozen=True)
class MapProgram:
    groups: int
    intervals: bool
    samples: bool
    holds: bool
    table: str | None           # the param whose tile table the program reads, or None
    op: ir.Operation


def read_map_program(kernel: ir.Operation) -> MapProgram:
    """The attn.map_kernel that fills `kernel`'s block map, checked."""
    from attnc.passes.block_map import map_programs, step_choices

    programs = map_programs(kernel)
    if not programs:
        raise error_at(kernel, "this kernel reads a block map that no attn.map_kernel before it fills: "
                               "run attn-block-map after attn-analyze-masks")
    if len(programs) > 1:
        raise error_at(programs[1], f"a second {MAP_KERNEL} for one attn.kernel; one fills its map")
    program = programs[0]
    groups = get_int(program, "groups")
    if groups < 1:
        raise error_at(program, f"groups = {groups}: each CTA of the map kernel takes at least one group")
    body = program.regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    loops = [op for op in ops if op.name == "scf.for"]
    tables = [op for op in ops if op.name == TILE_TABLE_READ]
    for op in ops:
        if op.name not in (*_INDEX, TILE_TABLE_READ, "scf.for", YIELD):
            raise error_at(op, f"the map kernel's program holds its key blocks' loop and index arithmetic, "
                               f"not {op.name}")
    if len(loops) != 1 or len(tables) > 1 or ops[-1].name != YIELD:
        raise error_at(program, f"{MAP_KERNEL} holds one loop over the query tile's key blocks (and at "
                                f"most one attn.tile_table_read) before its gpu.yield")
    loop = loops[0]
    b, h, m_block = body.arguments
    for table in tables:
        if list(table.operands) != [b, h, m_block]:
            raise error_at(table, "the map kernel reads the tile table at its own (b, h, m_block)")
    lb, ub, step = list(loop.operands)[:3]
    if len(loop.operands) != 3 or int_constant(lb) != 0 or int_constant(step) != 1 \
            or not _block_count(ub, kernel):
        raise error_at(loop, f"the map kernel's loop runs over every key block of the tile: 0 to "
                             f"cdiv(N, {get_int(kernel, 'block_n')}) in steps of 1, carrying nothing")
    n = loop.regions[0].blocks[0].arguments[0]
    steps = [op.operation for op in loop.regions[0].blocks[0].operations]
    names = [op.name for op in steps]
    if names != [CLASSIFY, MAP_STORE, "scf.yield"]:
        raise error_at(steps[0] if steps[0].name != CLASSIFY else loop,
                       f"a key block of the map kernel is one {CLASSIFY} and one {MAP_STORE} of its byte")
    classify, store = steps[:2]
    if list(classify.operands) != [b, h, m_block, n]:
        raise error_at(classify, f"{CLASSIFY} classifies the loop's key block of the program's (b, h, m_block)")
    if list(store.operands) != [classify.result, b, h, m_block, n]:
        raise error_at(store, f"{MAP_STORE} stores the {CLASSIFY} byte of the loop's key block")
    choices = step_choices(kernel, *(get_bool(classify, k) for k in ("intervals", "samples", "holds")), at=classify)
    return MapProgram(groups, choices["intervals"], choices["samples"], choices["holds"],
                      get_str(tables[0], "param") if tables else None, program)


def _block_count(value: ir.Value, kernel: ir.Operation) -> bool:
    """Whether `value` is cdiv(N, block_n) as attn-tile writes it: (N + (block_n - 1)) / block_n."""
    block_n, seq_k = get_int(kernel, "block_n"), get_shape(kernel, "k_shape")[2]
    div = defining_op(value)
    if div is None or div.name != "arith.divsi" or int_constant(div.operands[1]) != block_n:
        return False
    add = defining_op(div.operands[0])
    if add is None or add.name != "arith.addi":
        return False
    size, less = add.operands
    sub = defining_op(less)
    if sub is None or sub.name != "arith.subi" or int_constant(sub.operands[0]) != block_n \
            or int_constant(sub.operands[1]) != 1:
        return False
    if isinstance(seq_k, int):
        return int_constant(size) == seq_k
    dim = defining_op(size)
    return dim is not None and dim.name == DIM and get_str(dim, "name") == seq_k
