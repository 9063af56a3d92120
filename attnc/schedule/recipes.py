"""Per-target warp roles and channels (design.md section 4), as data.

A recipe names who does what inside one CTA:

* a `Role` is a set of warps with a register budget (`setmaxnreg`, or None when
  the target does not rebalance registers) and the tile ops it runs;
* a `Channel` is a value that crosses from a producer role to a consumer role
  through a buffer with `stages` slots, and says how it is moved (`cp.async` in
  commit groups, `cp.async.mbarrier`: cp.async whose landing each thread reports on an
  mbarrier, `tma`, `tcgen05` commit or `st.shared`) and where the buffer lives (`smem`
  or `tmem`).

The sm_80 recipe is one cooperative role whose K/V channel is a cp.async queue;
sm_90a adds a producer warpgroup and one to three consumer warpgroups on mbarrier rings
the producer fills with cp.async; sm_100a is FlashAttention-4's 16-warp layout with
TMA and TMEM. The same passes handle all three.
"""
from __future__ import annotations

from dataclasses import dataclass

from attnc.errors import AttncError, spelled

REGISTER_FILE = 65536          # 32-bit registers per SM (sm_80 .. sm_100a)
CONSUMER_ROWS = 64             # sm_90a: the query rows of a consumer warpgroup (wgmma's M)


@dataclass(frozen=True)
class Role:
    name: str
    warps: tuple[int, ...]
    regs: int | None            # per-thread register budget set with setmaxnreg
    ops: tuple[str, ...]        # tile ops the role runs, in program order
    rows: tuple[int, int] | None = None     # the query rows [first, end) of the CTA's block it
                                            # runs, where it runs part of them (Note [Consumer rows])

    @property
    def threads(self) -> int:
        return 32 * len(self.warps)


@dataclass(frozen=True)
class Channel:
    name: str                   # 'q', 'kv', 's0', 'p0', 'o', ...
    producer: str
    consumer: str
    transport: str              # 'cp.async', 'cp.async.mbarrier', 'tma', 'tcgen05', 'st.shared'
    space: str                  # 'smem', 'tmem'
    stages: int
    tile: tuple[str, ...]       # which tiles one slot holds, e.g. ('k', 'v')
    alternating: bool = False   # a slot holds one of `tile` at a time (K, V, K, ... in one ring)


@dataclass(frozen=True)
class Recipe:
    target: str
    roles: tuple[Role, ...]
    channels: tuple[Channel, ...]
    smem_bytes: int             # dynamic shared memory a CTA may use
    tmem_columns: int = 0       # tensor memory columns (sm_100a)
    persistent: bool = False    # sm_90a's producer plan: each CTA runs several query blocks
                                # (Note [Persistent CTAs] in attnc/backend/sm90a_ws.py)
    pingpong: bool = False      # sm_90a's two consumer warpgroups take turns at the GEMMs
                                # (Note [Ping-pong turns] in sync.py)
    loads_ahead: bool = False   # the cooperative role (sm_80, sm_90a) loads K and V stages - 1
                                # steps ahead (Note [cp.async prefetch] in prefetch.py)

    @property
    def num_warps(self) -> int:
        return sum(len(r.warps) for r in self.roles)

    def role(self, name: str) -> Role:
        return next(r for r in self.roles if r.name == name)


SMEM_BYTES = {"sm_80": 166912, "sm_90a": 232448, "sm_100a": 232448}
CP_ASYNC_MBARRIER = "cp.async.mbarrier"     # cp.async, each thread's landing reported on an mbarrier


SM90A_CONSUMERS = (1, 2, 3)      # sm_90a's consumer warpgroups, 64 query rows each
SM90A_BLOCK_M = tuple(CONSUMER_ROWS * c for c in SM90A_CONSUMERS)     # the Q tiles they make


def recipe(target: str, *, num_warps: int, kv_stages: int, q_tiles: int = 1,
           consumers: int = 2, producer: bool = True, persistent: bool = False,
           pingpong: bool = False) -> Recipe:
    """The recipe for `target` with the tile choices made by attn-tile.

    sm_90a: `consumers` warpgroups of 64 query rows (1, 2 or 3) and, with `producer`, a
    warpgroup that only loads (Note [Producer warpgroup] in attnc/backend/sm90a_ws.py),
    its CTAs `persistent` or not, its consumers taking turns at the GEMMs with
    `pingpong` (which only two consumer warpgroups do; attn-warp-specialize refuses it
    elsewhere); without it the consumers load for themselves, one cooperative role as on
    sm_80.
    """
    build = _RECIPES.get(target)
    if build is None:
        raise AttncError(f"unknown target '{target}'; targets are {', '.join(_RECIPES)}")
    if target == "sm_90a" and consumers not in SM90A_CONSUMERS:
        raise AttncError(f"consumers={consumers}: sm_90a has {spelled(SM90A_CONSUMERS)} consumer warpgroups")
    if persistent and not (target in ("sm_90a", "sm_100a") and producer):
        raise AttncError("persistent CTAs are sm_90a's producer warpgroup's kernel and sm_100a's: a plan with a "
                         "producer role")
    return build(num_warps=num_warps, kv_stages=kv_stages, q_tiles=q_tiles, consumers=consumers,
                 producer=producer, persistent=persistent, pingpong=pingpong)


_COOPERATIVE_OPS = ("load_q", "load_kv", "mma_qk", "score_mod", "mask", "softmax", "mma_pv", "finalize",
                    "store_o")


def _cooperative(target: str, num_warps: int, kv_stages: int) -> Recipe:
    """One role of `num_warps` warps that loads through cp.async, its loads ahead of their
    steps (Note [cp.async prefetch] in prefetch.py), and computes."""
    compute = Role("compute", tuple(range(num_warps)), None, _COOPERATIVE_OPS)
    return Recipe(target, (compute,), (
        Channel("q", "compute", "compute", "cp.async", "smem", 1, ("q",)),
        Channel("kv", "compute", "compute", "cp.async", "smem", kv_stages, ("k", "v")),
    ), SMEM_BYTES[target], loads_ahead=True)


def _sm80(*, num_warps: int, kv_stages: int, **_) -> Recipe:
    return _cooperative("sm_80", num_warps, kv_stages)


# sm_90a's warpgroups and register file (setmaxnreg moves registers between them).
WARPGROUP_THREADS = 128
PRODUCER_REGISTERS = 24
MAX_PRODUCER_REGISTERS = 56
MAX_CONSUMER_REGISTERS = 240


def default_producer(consumers: int, kv_stages: int, head_dims: tuple[int, int]) -> bool:
    """Where sm_90a gets a producer warpgroup by default: two consumer warpgroups sharing
    a 128-row Q tile (a CTA alone on its SM), a ring of two or more stages, head dim 128:
    causal, softcap and ALiBi 14-22 % faster. Not with one consumer warpgroup (64-row
    tiles, several CTAs per SM, which overlap each other already), nor at head dim 64 on
    128-row tiles, where it measured slower (results/sm90a_h200.md, "Producer
    warpgroup"). Three consumer warpgroups (192-row tiles, FlashAttention-3's shape and
    attn-tile's at head dim 64: tile_table.py) get it too, with 160 registers
    each after setmaxnreg; without it they load for themselves, 168 registers each
    (results/sm90a_h200.md, "Tiles", "Producer warpgroup")."""
    if consumers == 3:
        return kv_stages >= 2
    return consumers == 2 and kv_stages >= 2 and max(head_dims) == 128


def default_persistent(target: str, producer: bool, banded: bool) -> bool:
    """Where the producer warpgroup's CTAs are persistent by default: for a band (a
    sliding window), where every query block is the same few steps, so that its prologue
    and epilogue weigh most: window 1024 at head dim 128 about 10 % faster than at the
    64x64 tiles it had, with the consumers storing O under the next block's first QK^T
    (Note [The next block's first QK^T] in attnc/backend/sm90a_ws.py). Not for the others:
    causal ran as fast as without, softcap and ALiBi 4 % slower (their persistent
    consumers spill), documents + causal slower than at its 64x64 tiles
    (results/sm90a_h200.md, "Persistent CTAs")."""
    return target == "sm_90a" and producer and banded


def register_share(threads: int) -> int:
    """A thread's registers at launch in a CTA of `threads` that is one per SM: the register
    file over its threads, rounded down to a multiple of 8 (ptxas's count, as .minnctapersm 1
    lets it take them all), which setmaxnreg budgets are planned from."""
    return REGISTER_FILE // threads // 8 * 8


def launch_pool(consumers: int) -> int:
    """A producer CTA's registers at launch (register_share of its threads)."""
    threads = WARPGROUP_THREADS * (1 + consumers)
    return threads * register_share(threads)


def consumer_registers(consumers: int) -> int:
    """Registers per consumer thread after setmaxnreg: what the producer's 24 leave of
    the launch pool, a multiple of 8, at most 240. setmaxnreg.inc waits until the CTA's
    pool holds what it asks for: asking for more than the producer freed hangs."""
    free = launch_pool(consumers) - WARPGROUP_THREADS * PRODUCER_REGISTERS
    return min(MAX_CONSUMER_REGISTERS, free // (WARPGROUP_THREADS * consumers) // 8 * 8)


def producer_registers(consumers: int) -> int:
    """What the consumers' share leaves the producer, a multiple of 8 from 24 to 56:
    24 with two consumer warpgroups (240 each), 32 with three (160 each), whose share
    rounded down to a multiple of 8 would otherwise leave 8 per producer thread unused."""
    left = launch_pool(consumers) - WARPGROUP_THREADS * consumers * consumer_registers(consumers)
    return max(PRODUCER_REGISTERS, min(MAX_PRODUCER_REGISTERS, left // WARPGROUP_THREADS // 8 * 8))


def check_producer_registers(producer_regs: int, consumer_regs: int, consumers: int) -> None:
    """The producer plan's setmaxnreg budgets (regs 0: none). Only a CTA that is one per SM
    (two consumer warpgroups) rebalances; the consumers' raise must fit what the producer
    gives back, or setmaxnreg.inc waits for ever."""
    if consumers < 2:
        if producer_regs or consumer_regs:
            raise AttncError(f"setmaxnreg budgets (regs = {producer_regs}, {consumer_regs}) need two consumer "
                             f"warpgroups, a CTA alone on its SM; with {consumers} the roles' regs must be 0")
        return
    for role, regs in (("producer", producer_regs), ("consumer", consumer_regs)):
        if regs % 8 or not 24 <= regs <= 256:
            raise AttncError(f"the {role} role's register budget {regs} must be a multiple of 8 in [24, 256] "
                             f"(setmaxnreg)")
    need = WARPGROUP_THREADS * (producer_regs + consumers * consumer_regs)
    if need > launch_pool(consumers):
        raise AttncError(f"the roles' register budgets take {need} registers, more than the "
                         f"{launch_pool(consumers)} the CTA starts with (setmaxnreg.inc would wait for ever): "
                         f"lower a consumer role's or the producer's regs")


def _sm90a(*, num_warps: int, kv_stages: int, consumers: int, producer: bool, persistent: bool,
           pingpong: bool, **_) -> Recipe:
    if not producer:
        return _cooperative("sm_90a", 4 * consumers, kv_stages)
    sets = consumers >= 2           # Note [Producer warpgroup]: setmaxnreg only one CTA per SM
    producer_role = Role("producer", (0, 1, 2, 3), producer_registers(consumers) if sets else None,
                         ("load_q", "load_kv"))
    # Each consumer warpgroup runs 64 query rows and stores its own rows of O (and the
    # LSE) from its registers (Note [Consumer rows] in attnc/schedule/partition.py).
    consumer_roles = tuple(
        Role(f"consumer{c}", tuple(range(4 * (c + 1), 4 * (c + 2))), consumer_registers(consumers) if sets else None,
             ("mma_qk", "score_mod", "mask", "softmax", "mma_pv", "finalize", "store_o"),
             consumer_rows(c))
        for c in range(consumers))
    # The producer's threads copy Q, K and V with cp.async and report each tile's landing
    # on its own mbarrier (Note [Barriers per tile] in sync.py).
    return Recipe("sm_90a", (producer_role, *consumer_roles), (
        Channel("q", "producer", "consumer0", CP_ASYNC_MBARRIER, "smem", 1, ("q",)),
        Channel("kv", "producer", "consumer0", CP_ASYNC_MBARRIER, "smem", kv_stages, ("k", "v")),
    ), SMEM_BYTES["sm_90a"], persistent=persistent, pingpong=pingpong and consumers == 2)


def consumer_rows(c: int) -> tuple[int, int]:
    """The query rows [first, end) of the block that sm_90a's consumer warpgroup c runs."""
    return CONSUMER_ROWS * c, CONSUMER_ROWS * (c + 1)


def _sm100a(*, kv_stages: int, q_tiles: int, **_) -> Recipe:
    # With one Q tile (large head dims) the second softmax warpgroup has nothing to run.
    # FlashAttention-4's budgets: a softmax thread holds its row of S (128 f32 at 128-key
    # blocks) and the hooks' values in 200 registers; at 192 (and 80 for the correction)
    # ALiBi spilled 40 bytes there.
    softmax = ("score_mod", "mask", "softmax")
    roles = (
        Role("softmax0", (0, 1, 2, 3), 200, softmax),
        Role("softmax1", (4, 5, 6, 7), 200, softmax if q_tiles > 1 else ()),
        Role("correction", (8, 9, 10, 11), 64, ("rescale", "finalize")),
        Role("mma", (12,), 48, ("mma_qk", "mma_pv")),
        Role("load", (13,), 48, ("load_q", "load_kv")),
        Role("epilogue", (14,), 48, ("store_o",)),
        Role("empty", (15,), 24, ()),
    )
    channels = (
        Channel("q", "load", "mma", "tma", "smem", q_tiles, ("q",)),
        Channel("kv", "load", "mma", "tma", "smem", kv_stages, ("k", "v"), alternating=True),
        Channel("s0", "mma", "softmax0", "tcgen05", "tmem", 1, ("s",)),
        Channel("s1", "mma", "softmax1", "tcgen05", "tmem", 1, ("s",)),
        Channel("p0", "softmax0", "mma", "tcgen05", "tmem", 1, ("p",)),
        Channel("p1", "softmax1", "mma", "tcgen05", "tmem", 1, ("p",)),
        # One O tile at a time to the epilogue warp: two would not fit beside Q and K/V
        # for an f32 O at head dim 128.
        Channel("o", "correction", "epilogue", "st.shared", "smem", 1, ("o",)),
    )
    # Per Q tile: the softmax's rescale factor each block and its row max and sum at the
    # end, to the correction warpgroup through shared memory; O, accumulated in TMEM by
    # the MMA warp and rescaled there by the correction warpgroup.
    for q in range(2):
        channels += (
            Channel(f"alpha{q}", f"softmax{q}", "correction", "st.shared", "smem", 1, ("alpha",)),
            Channel(f"row{q}", f"softmax{q}", "correction", "st.shared", "smem", 1, ("m", "l")),
            Channel(f"o{q}_acc", "mma", "correction", "tcgen05", "tmem", 1, ("o",)),
            Channel(f"o{q}_scaled", "correction", "mma", "tcgen05", "tmem", 1, ("o",)),
        )
    # With one Q tile (large head dims) the second softmax's and O's channels have no ends.
    channels = tuple(c for c in channels if _q_tile_of(c.name) < q_tiles)
    return Recipe("sm_100a", roles, channels, SMEM_BYTES["sm_100a"], tmem_columns=512)


def _q_tile_of(channel: str) -> int:
    """The Q tile a per-tile channel serves (the digit in its name: s1, o0_acc), else 0."""
    digits = [ch for ch in channel if ch.isdigit()]
    return int(digits[0]) if digits else 0


_RECIPES = {"sm_80": _sm80, "sm_90a": _sm90a, "sm_100a": _sm100a}


def check_register_budget(r: Recipe) -> None:
    """setmaxnreg budgets must be multiples of 8 in [24, 256] and fit the register file.
    setmaxnreg is run by the four warps of a warpgroup alike, at the largest budget of the
    warpgroup's roles (Note [Registers per warpgroup] in attnc/backend/sm100a.py), and a
    warpgroup whose roles set none keeps the launch's registers: so the budgets are summed
    by warpgroup, not by role (the MMA, load and epilogue warps of sm_100a share one)."""
    budgeted = [role for role in r.roles if role.regs is not None]
    for role in budgeted:
        if role.regs % 8 or not 24 <= role.regs <= 256:
            raise AttncError(f"role '{role.name}': register budget {role.regs} must be a multiple "
                             f"of 8 in [24, 256] (setmaxnreg)")
    if not budgeted:
        return
    groups: dict[int, list[Role]] = {}
    for role in r.roles:
        for g in sorted({w // 4 for w in role.warps}):
            groups.setdefault(g, []).append(role)
    count = max(groups) + 1
    launch = register_share(WARPGROUP_THREADS * count)
    regs = {g: max((role.regs for role in groups.get(g, ()) if role.regs is not None), default=launch)
            for g in range(count)}
    total = WARPGROUP_THREADS * sum(regs.values())
    if total > REGISTER_FILE:
        names = {g: ", ".join(role.name for role in groups.get(g, ())) or "no role" for g in range(count)}
        each = "; ".join(f"warpgroup {g}: {regs[g]} ({names[g]})" for g in range(count))
        raise AttncError(f"register budgets of the warpgroups sum to {total} registers, more than the "
                         f"{REGISTER_FILE} of the register file (setmaxnreg sets the four warps of a "
                         f"warpgroup alike, to the largest budget of its roles: {each}); lower a role's 'regs'")
