"""Builders of the L2 tile program (attn.irdl.mlir, "L2, the tile program"): the tile
type and one function per tile op, each inserting at the current insertion point with
the current location.

    t = tile_type([128, 64], "f32", "reg")            # !attn.tile<[128, 64], f32, "reg">
    q_tile = load(q, "q", [b, h, m_block], tile_type([128, 128], "bf16", "smem"))
    s = mma(q_tile, k_tile, "qk", tile_type([128, 64], "f32", "reg"))

IRDL ops have no Python classes: each is `Operation.create` by name, so the op names
and operand orders here are the dialect's, stated once.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from mlir import ir

KERNEL = "attn.kernel"
LOAD = "attn.load"
FILL = "attn.fill"
MMA = "attn.mma"
SCORE_MOD_OP = "attn.score_mod"
MASK_OP = "attn.mask"
SOFTMAX_STEP = "attn.softmax_step"
RESCALE = "attn.rescale"
FINALIZE = "attn.finalize"
STORE = "attn.store"
KV_RANGE = "attn.kv_range"
BLOCK_MAP_RANGE = "attn.block_map_range"
BLOCK_MAP_READ = "attn.block_map_read"
TILE_TABLE_READ = "attn.tile_table_read"
MAP_KERNEL = "attn.map_kernel"
CLASSIFY = "attn.classify"
MAP_STORE = "attn.map_store"
TABLE_KERNEL = "attn.table_kernel"
ID_RUNS = "attn.id_runs"
TABLE_RUNS = "attn.table_runs"
TABLE_ORDER = "attn.table_order"
TABLE_GRID = "attn.table_grid"
TABLE_REST = "attn.table_rest"
SPACES = ("global", "smem", "reg", "tmem")

_ELEMENT = {"bf16": ir.BF16Type.get, "f16": ir.F16Type.get, "f32": ir.F32Type.get,
            "i32": lambda: ir.IntegerType.get_signless(32)}


def tile_type(shape: Sequence[int], element: str, space: str) -> ir.Type:
    """`!attn.tile<[shape], element, "space">` (in the current context)."""
    if space not in SPACES:
        raise ValueError(f"tile space '{space}' is not one of {', '.join(SPACES)}")
    dims = ", ".join(str(int(d)) for d in shape)
    return ir.Type.parse(f'!attn.tile<[{dims}], {_ELEMENT[element]()}, "{space}">')


def tile_parts(t: ir.Type) -> tuple[list[int], str, str] | None:
    """(shape, element, space) of a `!attn.tile` type, or None for any other type."""
    text = str(t)
    if not text.startswith("!attn.tile<["):
        return None
    shape = text[text.index("[") + 1:text.index("]")]
    element, space = (x.strip() for x in text[text.index("]") + 1:text.rindex(">")].split(",")[1:3])
    return [int(x) for x in shape.split(",") if x.strip()], element, space.strip('"')


def i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


Q_TILE = "q_tile"
_q_tile: list[int | None] = [None]


@contextmanager
def for_q_tile(t: int | None) -> Iterator[None]:
    """The ops built inside work on Q tile `t` of a CTA of several (sm_100a's two): they
    carry `q_tile = t`, rows [(m_block q_tiles + t) block_m, + block_m) of the query
    block; None: the CTA's one Q tile, no attribute."""
    _q_tile.append(t)
    try:
        yield
    finally:
        _q_tile.pop()


def _create(name: str, results, operands, attributes=None, regions: int = 0) -> ir.Operation:
    attributes = dict(attributes or {})
    if _q_tile[-1] is not None:
        attributes[Q_TILE] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), _q_tile[-1])
    return ir.Operation.create(name, results=list(results), operands=list(operands),
                               attributes=attributes, regions=regions)


def load(source: ir.Value, operand: str, coords: Sequence[ir.Value], tile: ir.Type) -> ir.Value:
    return _create(LOAD, [tile], [source, *coords], {"operand": ir.StringAttr.get(operand)}).result


def fill(value: float, tile: ir.Type) -> ir.Value:
    return _create(FILL, [tile], [], {"value": ir.FloatAttr.get(ir.F32Type.get(), value)}).result


def mma(a: ir.Value, b: ir.Value, kind: str, tile: ir.Type, acc: ir.Value | None = None) -> ir.Value:
    operands = [a, b] + ([acc] if acc is not None else [])
    return _create(MMA, [tile], operands, {"kind": ir.StringAttr.get(kind)}).result


def hook_op(name: str, s: ir.Value, coords: Sequence[ir.Value], hook: ir.Block) -> ir.Value:
    """attn.score_mod or attn.mask on the tile `s`, taking the hook's block (moved
    from where it was: the L1 op's region, or another hook op's)."""
    op = _create(name, [s.type], [s, *coords], regions=1)
    hook.append_to(op.regions[0])
    return op.result


def softmax_step(s: ir.Value, row_max: ir.Value, row_sum: ir.Value, p: ir.Type) -> list[ir.Value]:
    """(p, new max, new sum, factor)."""
    rows = row_max.type
    return list(_create(SOFTMAX_STEP, [p, rows, rows, rows], [s, row_max, row_sum]).results)


def rescale(acc: ir.Value, factor: ir.Value) -> ir.Value:
    return _create(RESCALE, [acc.type], [acc, factor]).result


def finalize(acc: ir.Value, row_max: ir.Value, row_sum: ir.Value, h: ir.Value, o: ir.Type,
             sink: ir.Block) -> list[ir.Value]:
    """(o tile, lse tile); the sink's block moves onto the op."""
    op = _create(FINALIZE, [o, row_max.type], [acc, row_max, row_sum, h], regions=1)
    sink.append_to(op.regions[0])
    return list(op.results)


def store(tile: ir.Value, operand: str, coords: Sequence[ir.Value]) -> None:
    _create(STORE, [], [tile, *coords], {"operand": ir.StringAttr.get(operand)})


def kv_range(fn: str, args: Sequence[ir.Value], results: int) -> list[ir.Value]:
    op = _create(KV_RANGE, [i32()] * results, args, {"fn": ir.FlatSymbolRefAttr.get(fn)})
    return list(op.results)


def block_map_range(m_block: ir.Value, b: ir.Value, h: ir.Value) -> list[ir.Value]:
    """(lo, hi, full_start, full_end) of the block map's row of the query block."""
    return list(_create(BLOCK_MAP_RANGE, [i32()] * 4, [m_block, b, h]).results)


def block_map_read(m_block: ir.Value, n_block: ir.Value, b: ir.Value, h: ir.Value) -> ir.Value:
    return _create(BLOCK_MAP_READ, [i32()], [m_block, n_block, b, h]).result


def classify(b: ir.Value, h: ir.Value, m_block: ir.Value, n_block: ir.Value, *, intervals: bool,
             samples: bool, holds: bool) -> ir.Value:
    """The map byte of the tile (Note [The block map's program] in attnc/passes/mask_kernels.py)."""
    steps = {"intervals": intervals, "samples": samples, "holds": holds}
    return _create(CLASSIFY, [i32()], [b, h, m_block, n_block],
                   {k: ir.BoolAttr.get(v) for k, v in steps.items()}).result


def map_store(byte: ir.Value, b: ir.Value, h: ir.Value, m_block: ir.Value, n_block: ir.Value) -> None:
    _create(MAP_STORE, [], [byte, b, h, m_block, n_block])


def table_step(name: str, args: Sequence[ir.Value], results: Sequence[ir.Type] = (), **attributes) -> list[ir.Value]:
    """A step of the tile table's program (attn.irdl.mlir, "attn.table_kernel"): ID_RUNS,
    TABLE_RUNS, TABLE_ORDER, TABLE_GRID or TABLE_REST; string attributes."""
    op = _create(name, results, args, {k: ir.StringAttr.get(v) for k, v in attributes.items()})
    return list(op.results)


def tile_table_read(param: str, b: ir.Value, h: ir.Value, m_block: ir.Value) -> list[ir.Value]:
    """(first row, rows) of the query tile."""
    op = _create(TILE_TABLE_READ, [i32(), i32()], [b, h, m_block], {"param": ir.StringAttr.get(param)})
    return list(op.results)
