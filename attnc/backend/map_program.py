"""The mask kernels' programs as the lowerings read them (Notes [The block map's program]
and [The tile table's program] in attnc/passes/mask_kernels.py): `read_map_program` and
`read_table_program` check the attn.map_kernel and the attn.table_kernel before an
attention kernel op by op and return what that kernel is built from; anything else there
is refused at its op, naming what the kernel can build.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from attnc.ir import DIM, YIELD, error_at, get_bool, get_int, get_shape, get_str, int_constant
from attnc.ir.ops import defining_op
from attnc.ir.tiles import (CLASSIFY, ID_RUNS, MAP_KERNEL, MAP_STORE, TABLE_GRID, TABLE_KERNEL, TABLE_ORDER,
                            TABLE_REST, TABLE_RUNS, TILE_TABLE_READ)

_INDEX = ("arith.constant", "arith.addi", "arith.subi", "arith.divsi", DIM)


@dataclass(frozen=True)
class MapProgram:
    groups: int
    intervals: bool
    samples: bool
    holds: bool
    table: str | None           # the param whose tile table the program reads, or None
    op: ir.Operation
    asked: str = ""             # the attn-mask-kernels options given, as the pass recorded them


def read_map_program(kernel: ir.Operation) -> MapProgram:
    """The attn.map_kernel that fills `kernel`'s block map, checked."""
    from attnc.passes.mask_kernels import step_choices

    program = _program(kernel, MAP_KERNEL, "reads a block map", "map")
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
    asked = get_str(program, "asked") if "asked" in program.attributes else ""
    return MapProgram(groups, choices["intervals"], choices["samples"], choices["holds"],
                      get_str(tables[0], "param") if tables else None, program, asked)


def asked_steps(kernel: ir.Operation, program: MapProgram | None = None) -> str | None:
    """How the program filling `kernel`'s block map (`program`, read here where not given)
    was asked for, or None: the options attn-mask-kernels was given (its `asked`), else
    the steps and groups an edit made differ from the pass's defaults. A map asked for is
    built, where attn-kernel-choices' run_ranges would leave it out (Note [The block map's
    program] in attnc/passes/mask_kernels.py)."""
    from attnc.passes.mask_kernels import GROUPS, NAME, step_choices
    from attnc.passes.registry import option_text

    program = program or read_map_program(kernel)
    if program.asked:
        return f"{NAME}{{{program.asked}}}"
    default = {**step_choices(kernel, None, True, None), "groups": GROUPS}
    mine = {"intervals": program.intervals, "samples": program.samples, "holds": program.holds,
            "groups": program.groups}
    edited = [f"{k} = {option_text(v)}" for k, v in mine.items() if v != default[k]]
    return f"{', '.join(edited)} in the program, unlike the defaults of {NAME}" if edited else None


def refuse_asked_map(kernel: ir.Operation) -> None:
    """run_ranges = true, where the map's program was asked for (`asked_steps`): refused
    at the program (attn-kernel-choices moves it to its option where it was given one),
    as the bundle would not build the map."""
    program = read_map_program(kernel)
    asked = asked_steps(kernel, program)
    if asked is not None:
        raise error_at(program.op, f"run_ranges takes the key ranges from the tile table's runs, with no block map, "
                                   f"and this map's program was asked for ({asked}): give up one or the other")


@dataclass(frozen=True)
class TableProgram:
    param: str                  # the ids' param
    order: bool                 # whether the aligned tiles' branch orders the last ones (attn.table_order)
    op: ir.Operation


def read_table_program(kernel: ir.Operation) -> TableProgram:
    """The attn.table_kernel that fills the tile table `kernel` takes its query tiles
    from, checked: the steps of Note [The tile table's program], attn.table_order optional."""
    program = _program(kernel, TABLE_KERNEL, "takes its query tiles from a tile table (aligned_tiles)", "table")
    body = program.regions[0].blocks[0]
    b, h = body.arguments
    ops = [op.operation for op in body.operations]
    shape = f"{TABLE_KERNEL} runs {ID_RUNS}, an scf.if on its first result, then {TABLE_REST}"
    if [op.name for op in ops] != [ID_RUNS, "scf.if", TABLE_REST, YIELD]:
        raise error_at(next((op for op in ops if op.name not in (ID_RUNS, "scf.if", TABLE_REST)), program), shape)
    runs, branch, rest = ops[:3]
    aligned, count = runs.results
    if list(runs.operands) != [b, h] or branch.operands[0] != aligned or len(branch.results) != 1:
        raise error_at(branch if list(runs.operands) == [b, h] else runs, shape)
    then_ops = [op.operation for op in branch.regions[0].blocks[0].operations]
    else_ops = [op.operation for op in branch.regions[1].blocks[0].operations]
    order = [op.name for op in then_ops] == [TABLE_RUNS, TABLE_ORDER, "scf.yield"]
    if not order and [op.name for op in then_ops] != [TABLE_RUNS, "scf.yield"]:
        raise error_at(then_ops[0], f"where the ids' runs fit, the table's steps are {TABLE_RUNS} (and "
                                    f"{TABLE_ORDER}) on the count {ID_RUNS} gives")
    for op in then_ops[:-1]:
        if list(op.operands) != [b, h, count]:
            raise error_at(op, f"{op.name} takes the program's (b, h) and the count {ID_RUNS} gives")
    if list(then_ops[-1].operands) != [count]:
        raise error_at(then_ops[-1], f"the aligned tiles' branch yields the count {ID_RUNS} gives")
    grid = else_ops[0]
    if [op.name for op in else_ops] != [TABLE_GRID, "scf.yield"] or list(grid.operands) != [b, h] \
            or list(else_ops[1].operands) != [grid.result]:
        raise error_at(grid, f"where they do not, {TABLE_GRID} of the program's (b, h) and its count")
    if list(rest.operands) != [b, h, branch.results[0]]:
        raise error_at(rest, f"{TABLE_REST} takes the program's (b, h) and the count the scf.if yields")
    return TableProgram(get_str(runs, "param"), order, program)


def table_program_of(kernel: ir.Operation, param: str) -> TableProgram:
    """The program of the tile table of `param`'s ids (those the mask compares), checked to
    read them (Note [The tile table's program])."""
    table = read_table_program(kernel)
    if table.param != param:
        raise error_at(table.op, f"the table's program reads the runs of '{table.param}', the mask compares "
                                 f"'{param}'")
    return table


def check_map_reads_table(kernel: ir.Operation, param: str) -> None:
    """The block map's program reads the tile table of `param`, over whose tiles it runs."""
    program = read_map_program(kernel)
    if program.table != param:
        raise error_at(program.op, f"the attention kernel's query tiles come from the tile table of '{param}' "
                                   f"(aligned_tiles), which the map kernel's program does not read "
                                   f"(attn.tile_table_read {{param = \"{param}\"}})")


def _program(kernel: ir.Operation, name: str, reads: str, what: str) -> ir.Operation:
    """The one `name` op before `kernel` (programs_before), or a located error."""
    from attnc.passes.mask_kernels import programs_before

    programs = programs_before(kernel, name)
    if not programs:
        raise error_at(kernel, f"this kernel {reads} that no {name} before it fills: run attn-mask-kernels "
                               f"after attn-analyze-masks")
    if len(programs) > 1:
        raise error_at(programs[1], f"a second {name} for one attn.kernel; one fills its {what}")
    return programs[0]


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
