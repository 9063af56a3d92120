"""The L3-L5 plan as the IR states it, read back as attnc/schedule's frozen values.

attn-warp-specialize leaves role regions (`attn.role`: name, warps, regs, rows) and channel
declarations (`attn.channel`) in the kernel's `attn.warp_specialize`; the alloc passes
put each channel's buffers on its op (`buffers`: one dictionary per buffer). The later
passes read them here as `Recipe`, `Channel` and `Buffer` values, never recomputing
them, so a plan edited in a dumped `.mlir` file is the plan they work on.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from attnc.errors import AttncError
from attnc.ir import error_at, get_int, get_str
from attnc.ir import roles as R
from attnc.ir.tiles import tile_parts
from attnc.schedule.alloc import Buffer, Tile
from attnc.schedule.recipes import SMEM_BYTES, Channel, Recipe, Role, consumer_rows
from attnc.schedule.walk import PAIRS, walk_order_of

TMEM_COLUMNS = {"sm_100a": 512}
_BUFFER_FIELDS = ("name", "space", "offset", "size", "stages", "align", "swizzle")


def require_roles(kernel: ir.Operation, pass_name: str) -> ir.Operation:
    """The kernel's attn.warp_specialize, or an error naming the pass that makes it."""
    ws = R.warp_specialize_of(kernel) if kernel.name == "attn.kernel" else None
    if ws is None:
        raise error_at(kernel, f"{pass_name} needs the role regions that attn-warp-specialize makes; "
                               f"run attn-warp-specialize first")
    return ws


def roles(kernel: ir.Operation) -> list[Role]:
    out = []
    for op in R.role_ops(kernel):
        a = R.attrs_of(op)
        out.append(Role(a["name"], tuple(a["warps"]), a["regs"] or None, (),
                        tuple(a["rows"]) if "rows" in a else None))
    return out


def channel(op: ir.Operation) -> Channel:
    a = R.attrs_of(op)
    for key in ("name", "producer", "consumer", "transport", "space", "stages", "tile"):
        if key not in a:
            raise error_at(op, f"attn.channel is missing its '{key}' attribute")
    return Channel(a["name"], a["producer"], a["consumer"], a["transport"], a["space"], a["stages"],
                   tuple(a["tile"]), bool(a.get("alternating", False)))


def channels(kernel: ir.Operation) -> list[Channel]:
    return [channel(op) for op in R.channel_ops(kernel)]


def kv_stages(kernel: ir.Operation) -> int:
    """The K/V stages of the plan: its K and V channels' (attn.kernel's `stages` is
    attn-tile's, until attn-warp-specialize moves it onto them: Note [Sizes the plan
    states] in attnc/passes/warp_specialize.py)."""
    return max(c.stages for c in channels(kernel) if {"k", "v"} & set(c.tile))


def launched_warps(kernel: ir.Operation) -> int:
    """The warps a CTA of the plan launches: up to its roles' last (attn.kernel's
    `num_warps` is attn-tile's, until the roles state them)."""
    return 1 + max(w for r in roles(kernel) for w in r.warps)


def buffers(kernel: ir.Operation) -> list[Buffer]:
    """Every channel's buffers (L4), in channel order."""
    out = []
    for op in R.channel_ops(kernel):
        if "buffers" not in op.attributes:
            continue
        for b in R.value_of(op.attributes["buffers"]):
            missing = [k for k in _BUFFER_FIELDS if k not in b]
            if missing:
                raise error_at(op, f"a buffer of channel '{R.name_of(op)}' has no {', '.join(missing)}")
            out.append(Buffer(b["name"], R.name_of(op), b["space"], b["offset"], b["size"], b["stages"],
                              b["align"], b["swizzle"], b.get("alias_of") or None, b.get("stride")))
    return out


def buffer_channels(kernel: ir.Operation) -> dict[str, ir.Operation]:
    """{buffer name: the channel op that holds it}: where an error about a buffer points."""
    return {b["name"]: op for op in R.channel_ops(kernel) if "buffers" in op.attributes
            for b in R.value_of(op.attributes["buffers"])}


def set_buffers(op: ir.Operation, placed: list[Buffer]) -> None:
    """Add `placed` to the `buffers` of channel `op`."""
    old = list(ir.ArrayAttr(op.attributes["buffers"])) if "buffers" in op.attributes else []
    new = [R.attr({**{k: getattr(b, k) for k in _BUFFER_FIELDS},
                   **({"alias_of": b.alias_of} if b.alias_of else {}),
                   **({"stride": b.stride} if b.stride is not None else {})}) for b in placed]
    op.attributes["buffers"] = ir.ArrayAttr.get(old + new)


def recipe_of(kernel: ir.Operation, pass_name: str) -> Recipe:
    """The recipe as the IR states it: roles and channels from L3, budgets from the target."""
    target = required_attr(kernel, "target", pass_name)
    ws = require_roles(kernel, pass_name)
    found = roles(kernel)
    names = {r.name for r in found}
    chans = []
    for op in R.channel_ops(kernel):
        c = channel(op)
        for end in ("producer", "consumer"):
            if getattr(c, end) not in names:
                raise error_at(op, f"{pass_name}: channel '{c.name}' has {end} = \"{getattr(c, end)}\", which is no "
                                   f"role of this plan ({', '.join(sorted(names))})")
        chans.append(c)
    return Recipe(target, tuple(found), tuple(chans), SMEM_BYTES[target],
                  TMEM_COLUMNS.get(target, 0), _flag(ws, R.PERSISTENT), _flag(ws, R.PINGPONG),
                  loads_ahead=[r.name for r in found] == ["compute"])


def _flag(ws: ir.Operation, name: str) -> bool:
    """A boolean choice recorded on attn.warp_specialize (absent: false)."""
    return name in ws.attributes and bool(R.value_of(ws.attributes[name]))


@dataclass(frozen=True)
class FollowedPlan:
    """What of the L3-L5 plan the lowerings build as the IR states it (Note [The plan the
    lowerings follow] in lower_kernel.py)."""
    target: str
    stages: int                 # the K/V channel's
    warps: int                  # the computing warps: the cooperative role's, or the consumers'
    consumers: int              # sm_90a: consumer warpgroups (the cooperative role's warpgroups)
    producer: bool              # sm_90a: a role named `producer`
    pingpong: bool              # sm_90a: `pingpong` on attn.warp_specialize
    regs: tuple[tuple[str, int], ...]   # each role's setmaxnreg budget (0: none)
    persistent: bool = False    # sm_90a: `persistent` on attn.warp_specialize (Note [Persistent
                                # CTAs] in sm90a_ws.py): Q's slot has an empty mbarrier
    walk: str = "snake"         # the order of the roles' walk over query blocks (Notes [The walk over
                                # query blocks] and [Two query blocks in the IR] in attnc/schedule/walk.py)

    @property
    def q_blocks_per_cta(self) -> int:
        """2 where the cooperative role walks a pair of query blocks, else 1."""
        return 2 if self.walk == PAIRS else 1

    @property
    def producer_regs(self) -> int | None:
        """The producer's setmaxnreg budget (None: none, or no producer)."""
        return dict(self.regs).get("producer") or None

    @property
    def consumer_regs(self) -> int | None:
        """Each consumer warpgroup's setmaxnreg budget (None: none, or no consumers)."""
        return dict(self.regs).get("consumer0") or None


def followed_plan(kernel: ir.Operation, pass_name: str) -> FollowedPlan:
    """The choices of the L3-L5 IR the lowering follows, read from the roles and channels."""
    ws = require_roles(kernel, pass_name)
    target = required_attr(kernel, "target", pass_name)
    kv = [c for c in channels(kernel) if c.name == "kv"]
    if not kv:
        raise error_at(ws, f"{pass_name}: the plan has no K/V channel ('kv')")
    found = roles(kernel)
    names = [r.name for r in found]
    producer = "producer" in names
    consumers = [r for r in found if r.name.startswith("consumer")]
    if producer:
        if not consumers or len(names) != 1 + len(consumers):
            raise error_at(ws, f"{pass_name}: a producer plan has the roles producer, consumer0, ...; this one "
                               f"has {', '.join(names)}")
        warps = sum(len(r.warps) for r in consumers)
    elif names == ["compute"]:
        warps = len(found[0].warps)
    else:
        raise error_at(ws, f"{pass_name}: {target} builds a cooperative role 'compute' or (sm_90a) a producer "
                           f"and consumer warpgroups; this plan has the roles {', '.join(names)}")
    expected = ["producer", *(f"consumer{k}" for k in range(len(consumers)))] if producer else ["compute"]
    if names != expected:
        raise error_at(ws, f"{pass_name}: the {target} kernel's roles stand in the order {', '.join(expected)}; "
                           f"this plan has {', '.join(names)}")
    first = 0
    for role, op in zip(found, R.role_ops(kernel)):
        want = list(range(first, first + (4 if producer else len(role.warps))))    # a warpgroup each
        if list(role.warps) != want:
            raise error_at(op, f"{pass_name}: role '{role.name}' has warps {list(role.warps)}; the {target} kernel "
                               f"runs it on warps {want}" + (" (the producer warpgroup first, then each consumer "
                                                             "warpgroup in order)" if producer else ""))
        first += len(want)
        rows = consumer_rows(int(role.name[len("consumer"):])) if role.name.startswith("consumer") else None
        if role.rows != rows:
            have = f"rows = {list(role.rows)}" if role.rows else "no rows"
            raise error_at(op, f"{pass_name}: role '{role.name}' has {have}; the {target} kernel runs it on "
                               + (f"the query rows [{rows[0]}, {rows[1]}) of the block, 64 a consumer warpgroup "
                                  f"in order (Note [Consumer rows] in attnc/schedule/partition.py)" if rows else
                                  "every row of the block (no rows attribute)"))
        if rows:
            _check_rows(op, rows[1] - rows[0], pass_name)
    persistent = _flag(ws, R.PERSISTENT)
    if persistent and not producer:
        raise error_at(ws, f"{pass_name}: persistent = true on attn.warp_specialize; persistent CTAs are the "
                           f"producer warpgroup's kernel, and this plan has no producer role")
    return FollowedPlan(target, kv[0].stages, warps, max(1, warps // 4), producer, _flag(ws, R.PINGPONG),
                        tuple((r.name, r.regs or 0) for r in found), persistent, walk_order_of(kernel))


# The ops whose tiles a consumer holds rows of (other ops, an attn.load there say, are
# refused where the lowering follows the role)
_ROW_OPS = (R.GET, R.SLOT_READ, R.MMA_WAIT, "attn.fill", "attn.mma", "attn.score_mod", "attn.mask",
            "attn.softmax_step", "attn.rescale", "attn.finalize")


def _check_rows(role: ir.Operation, count: int, pass_name: str) -> None:
    """Every tile of a role of `count` query rows has that many, but K and V (Note [Consumer
    rows] in attnc/schedule/partition.py): a tile edited to other rows is refused, not
    built as the role's rows."""
    def visit(op):
        name = op.name
        whole = name in (R.GET, R.SLOT_READ) and R.attrs_of(op).get("tile") in ("k", "v")
        for result in [] if whole or name not in _ROW_OPS else op.results:
            parts = tile_parts(result.type)
            if parts is not None and parts[0][0] != count:
                found.append((op, parts[0]))
        return ir.WalkResult.INTERRUPT if found else ir.WalkResult.ADVANCE

    found: list = []
    role.walk(visit, ir.WalkOrder.PRE_ORDER)
    if found:
        op, shape = found[0]
        raise error_at(op, f"{pass_name}: a tile of role '{R.name_of(role)}' has {shape[0]} rows ({shape}); the "
                           f"role runs {count} query rows, the rows of each of its tiles but K and V (Note "
                           f"[Consumer rows] in attnc/schedule/partition.py)")


def check_channels(kernel: ir.Operation, tile: Tile, plan: FollowedPlan, pass_name: str) -> None:
    """The channels are the ones the target's kernel moves for `plan`'s choices -- their
    tiles, transport, space and roles as attn-warp-specialize writes them, the stages of
    all but K/V's (which the kernel follows) -- refused at the first field that differs;
    a plan whose buffers no recipe has room for is refused with attn-alloc-smem's error."""
    from attnc.schedule.alloc import alloc_smem, alloc_tmem
    from attnc.schedule.recipes import recipe

    r = recipe(plan.target, num_warps=plan.warps, kv_stages=plan.stages, q_tiles=tile.q_tiles,
               consumers=plan.consumers, producer=plan.producer, persistent=plan.persistent,
               pingpong=plan.pingpong)
    try:
        alloc_smem(r, tile)         # their budgets
        alloc_tmem(r, tile)
    except AttncError as e:
        raise error_at(R.warp_specialize_of(kernel), f"{pass_name}: {e.message}") from None
    ops = {R.name_of(op): op for op in R.channel_ops(kernel)}
    built = {c.name: _channel_fields(c) for c in r.channels}
    for name, op in ops.items():
        if name not in built:
            raise error_at(op, f"{pass_name}: channel '{name}' is none the {plan.target} kernel moves "
                               f"({', '.join(built)})")
        mine = _channel_fields(channel(op))
        for key, value in built[name].items():
            if mine[key] != value:
                raise error_at(op, f"{pass_name}: channel '{name}' has {key} = {_text(mine[key])}; the "
                                   f"{plan.target} kernel's is {_text(value)}, as attn-warp-specialize writes it "
                                   f"(Note [The plan the lowerings follow])")
    missing = [name for name in built if name not in ops]
    if missing:
        raise error_at(R.warp_specialize_of(kernel), f"{pass_name}: the {plan.target} kernel moves channel "
                                                     f"'{missing[0]}', which the plan lacks: run "
                                                     f"attn-warp-specialize")


def _channel_fields(c: Channel) -> dict:
    return {"tile": tuple(c.tile), "transport": c.transport, "space": c.space, "producer": c.producer,
            "consumer": c.consumer, "stages": c.stages}


def _text(value) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)


def tile_of(attention: ir.Operation, pass_name: str) -> Tile:
    for key in ("block_m", "block_n"):
        required_attr(attention, key, pass_name, integer=True)
    sizes = {key: get_int(attention, key) for key in ("block_m", "block_n", "head_dim_qk", "head_dim_v")}
    sizes["q_tiles"] = get_int(attention, "q_tiles") if "q_tiles" in _names(attention) else 1
    for key, value in sizes.items():
        if value < 1:
            # an edited dump: name the value, not what the passes would make of it
            raise error_at(attention, f"{pass_name}: the tile has {key} = {value}; it must be at least 1")
    out = str(ir.RankedTensorType(attention.results[0].type).element_type) if len(attention.results) else None
    dtype, q = get_str(attention, "dtype"), str(ir.RankedTensorType(attention.operands[0].type).element_type)
    if dtype != q:
        raise error_at(attention, f"{pass_name}: attribute dtype = \"{dtype}\" but q is a tensor of {q}: they must "
                                  f"agree")
    return Tile(sizes["block_m"], sizes["block_n"], sizes["head_dim_qk"], sizes["head_dim_v"], dtype,
                sizes["q_tiles"], out)


def _names(op: ir.Operation) -> set[str]:
    return set(op.attributes)


def required_attr(attention, key: str, pass_name: str, integer: bool = False):
    """An attribute attn-tile records on `attention`, or an error naming the pass that needs it."""
    if key not in _names(attention):
        raise error_at(attention, f"{pass_name} needs the '{key}' attribute that attn-tile "
                                  f"records; run attn-tile first")
    return get_int(attention, key) if integer else get_str(attention, key)
