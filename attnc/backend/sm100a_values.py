"""The values attn-lower-sm100a's patterns (sm100a_ops.py) pass on, and what they share: a
channel (`Channel`) and its slot (`Slot`), a load the slot write issues (`LoadTile`), an
MMA's operands (`Gemm`), an accumulator in tensor memory (`InTmem`), O scaled on its way out
(`Scaled`), a thread's row in registers (`Rows`); `Lowering`, the kernel's IR, the emitter
and the CTA's resources."""
from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from attnc.backend.nvgpu_builders import Emit, Smem
from attnc.backend.softmax import OnlineSoftmax
from attnc.backend.tcgen05 import Tmem
from attnc.errors import AttncError
from attnc.ir import error_at
from attnc.ir import roles as R

SWIZZLES = {"xor128B": 128, "xor64B": 64, "xor32B": 32}


def swizzle_bytes(channel: "Channel") -> int:
    """The swizzle of a channel's shared-memory slots (its buffer's, attn-alloc-smem's choice):
    Q, K and V land in column blocks of that many bytes a row, each block swizzled (TMA's
    boxes and the MMAs' descriptors alike)."""
    buf = next(iter(channel.buffers.values()))
    if buf["swizzle"] not in SWIZZLES:
        raise channel_error(channel, f"attn-lower-sm100a: channel '{channel.name}' has swizzle {buf['swizzle']}; "
                                    f"its tiles land through TMA in swizzled rows ({', '.join(SWIZZLES)})")
    return SWIZZLES[buf["swizzle"]]


@dataclass
class Channel:
    name: str
    transport: str
    space: str
    stages: int
    tiles: tuple[str, ...]
    buffers: dict[str, dict]            # tile -> its buffer ({offset, size, stages, ...})
    op: ir.Operation | None = field(default=None, repr=False, compare=False)   # its attn.channel

    def buffer(self, tile: str) -> dict:
        return self.buffers[tile]


def channel_of(op) -> Channel:
    """The Channel of an attn.channel op: each tile's buffer (a tile's own where the
    channel's name numbers it, as tO1 for o1_acc)."""
    a = R.attrs_of(op)
    tiles = tuple(a["tile"])
    bufs = [b for b in a.get("buffers", []) if b["space"] == a["space"]]
    digits = [ch for ch in a["name"] if ch.isdigit()]
    if len(bufs) > 1 and digits:
        bufs = [b for b in bufs if b["name"].endswith(digits[0])] or bufs
    by_tile = {t: bufs[min(k, len(bufs) - 1)] for k, t in enumerate(tiles)} if bufs else {}
    return Channel(a["name"], a["transport"], a["space"], a["stages"], tiles, by_tile, op)


def channel_error(channel: Channel, message: str) -> AttncError:
    """An error about `channel`, at its attn.channel where the channel has one."""
    return error_at(channel.op, message) if channel.op is not None else AttncError(message)


@dataclass
class Slot:
    """A slot of a channel: what attn.slot_read gives its consumers."""
    channel: Channel
    stage: ir.Value
    tile: str


@dataclass
class LoadTile:
    operand: str
    coords: list            # b, h, block index
    q_tile: int


@dataclass
class Gemm:
    """S = A B^T of two shared-memory slots (issued at its attn.mma: Note [MMAs into their slot])."""
    a: Slot
    b: Slot


@dataclass
class InTmem:
    """An accumulator that lives in its tensor-memory buffer (no register copy)."""


@dataclass
class Scaled:
    """O's row times `factor` (f32), read from its tensor memory in column chunks where it is
    written (Note [O in chunks] in sm100a.py); `pack`: the output's element type it is
    written in (None: f32 back into tensor memory, the rescaled O); `q_tile`: a final O's
    Q tile, written only where the query block has rows in it (Note [Q tiles without
    rows] in sm100a_tiles.py)."""
    o: "Slot"
    factor: ir.Value
    pack: str | None = None
    q_tile: int = 0


@dataclass
class Rows:
    """Registers of this thread's row: `values` (f32 or packed i32 words); scores may
    have `offsets`, one per equal part of the row, that the softmax adds to them (Note
    [Affine scores on sm_100a] in sm100a_scores.py)."""
    values: list
    offsets: list | None = None


@dataclass
class Lowering:
    """What the patterns share: the kernel's IR, the emitter, the CTA's resources."""
    kernel: ir.Operation
    e: Emit
    smem: Smem
    params: dict
    tmem_base: ir.Value = None
    warp: ir.Value = None
    lane: ir.Value = None
    row: ir.Value = None
    env: dict = field(default_factory=dict)
    channels: dict = field(default_factory=dict)
    barriers: dict = field(default_factory=dict)        # name -> (offset, stages)
    loops: list = field(default_factory=list)           # the enclosing loops of the L5 IR
    softmax: OnlineSoftmax = None
    role: str = ""
    names: object = None                # hooks.KernelNames: the hooks' dims and params
    module: ir.Operation = None         # the module whose functions attn.kv_range calls
    blockmap: object = None             # the BlockMapPlan the ranges are read from, if any
    scale: float = 1.0                  # what scores are multiplied by before a score_mod
    units: float = 1.0                  # the softmax's scores in natural units times this: the scale
                                        # where they stay raw (sm100a_scores.raw_scores), else 1
    walk: object = None                 # block_walk.BlockWalk of the role's rounds (persistent CTAs)
    tile: object = None                 # with a `table`, sm100a_tiles.TableTile: the CTA's, as the role read it
    m_block: ir.Value = None            # the role's query block: the CTA's, or its walk's current one
    skeleton: bool = False              # lowering a role's protocol alone (Note [Q tiles without rows])
    runs: object = None                 # run_ranges.RunHooks, where the table's runs give the key ranges

    @property
    def table(self):
        """The QTilesPlan of the CTAs' tiles, if any (Note [Tile table on sm_100a])."""
        return self.blockmap.qtiles if self.blockmap is not None else None

    @property
    def first_lane(self) -> ir.Value:
        return self.e.eq(self.lane, 0)

    def value(self, v: ir.Value):
        if v not in self.env:
            raise error_at(v.owner if isinstance(v.owner, ir.Operation) else self.kernel,
                           f"attn-lower-sm100a: a value of role '{self.role}' has no lowering")
        return self.env[v]

    def mbar(self, v: ir.Value, stage) -> ir.Value:
        name = R.name_of(v.owner)
        offset, _ = self.barriers[name]
        return self.smem.address(self.e.add(self.e.c32(offset), self.e.mul(self.value(stage), 8)))

    def slot_address(self, slot: Slot) -> ir.Value:
        buf = slot.channel.buffer(slot.tile)
        stride = buf.get("stride", buf["size"] // buf["stages"])       # Note [K/V slots] in alloc.py
        return self.smem.address(self.e.add(self.e.c32(buf["offset"]), self.e.mul(slot.stage, stride)))

    def tmem_address(self, slot: Slot, lane_of_warp: bool) -> ir.Value:
        col = self.e.add(self.tmem_base, self.e.c32(slot.channel.buffer(slot.tile)["offset"]))
        return Tmem(self.e).lane_address(col, self.warp) if lane_of_warp else col

    def size(self, entry) -> ir.Value:
        return self.e.c32(entry) if isinstance(entry, int) else self.params[f"dim:{entry}"]
