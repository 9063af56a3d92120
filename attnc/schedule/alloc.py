"""Shared- and tensor-memory allocation for a recipe and a tile shape.

Every channel that lives in shared memory gets one buffer per tile it carries
(`sQ`, `sK`, `sV`, `sO`), each `stages` slots deep, 128-byte aligned (cp.async and
TMA need 16 bytes; 128 keeps every swizzle atom on its own bank period; sm_90a's
wgmma reads a swizzled tile from a whole swizzle pattern: 1024), with the XOR
swizzle that makes 16-byte row chunks conflict-free for ldmatrix/TMA.

Note [K/V slots]: a channel carrying K and V (sm_80, sm_90a) lays their stages out
`interleaved` by default: stage s holds K then V, side by side, and each buffer steps
`stride` = K's bytes + V's bytes from one stage to the next, so one slot offset serves
both tiles. `separate` gives each tile its own ring (all K stages, then all V stages;
`stride` = that tile's bytes). A buffer's stage k starts at offset + k * stride; where
`stride` is absent from the IR, its stages are contiguous (size / stages apart).
Tensor memory (sm_100a) gets S, O accumulators per Q tile with P aliased
inside S. Budgets are checked here and name the knob to change.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from attnc.errors import AttncError
from attnc.schedule.recipes import Recipe

ALIGN = 128
KV_LAYOUTS = ("interleaved", "separate")        # Note [K/V slots]
DTYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4}


@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    head_dim_qk: int
    head_dim_v: int
    dtype: str
    q_tiles: int = 1            # Q tiles per CTA (2 on sm_100a; the q channel's stages)
    out_dtype: str | None = None    # O's element type (None: dtype's)


@dataclass(frozen=True)
class Buffer:
    name: str                   # 'sQ', 'sK', 'tS0', ...
    channel: str
    space: str                  # 'smem' or 'tmem'
    offset: int                 # bytes (smem) or columns (tmem)
    size: int                   # bytes or columns, all stages together
    stages: int
    align: int
    swizzle: str                # e.g. 'xor128B' (8 rows x 128 B atom), 'xor64B', 'none'
    alias_of: str | None = None
    stride: int | None = None   # bytes from a stage's start to the next's (None: size / stages,
                                # the stages contiguous; Note [K/V slots])

    @property
    def stage_bytes(self) -> int:
        return self.size // self.stages

    @property
    def stage_stride(self) -> int:
        return self.stride if self.stride is not None else self.stage_bytes

    def stage_offset(self, k: int) -> int:
        return self.offset + k * self.stage_stride

    @property
    def end(self) -> int:
        """The byte (or column) after its last stage."""
        return self.stage_offset(self.stages - 1) + self.stage_bytes


def swizzle_for(row_elems: int, elem_bytes: int) -> str:
    """The widest XOR swizzle whose atom row divides a tile row (CuTe Swizzle<B,4,3>)."""
    row_bytes = row_elems * elem_bytes
    for atom in (128, 64, 32):
        if row_bytes % atom == 0:
            return f"xor{atom}B"
    return "none"


ROW_TILES = ("m", "l", "alpha", "lse")      # fp32 row vectors (sm_100a's softmax -> correction)


def _tile_rows_cols(tile: Tile, name: str) -> tuple[int, int]:
    if name in ROW_TILES:
        return (tile.block_m, 4 // DTYPE_BYTES[tile.dtype])     # 4 bytes a row, in elements
    shapes = {
        "q": (tile.block_m, tile.head_dim_qk),
        "k": (tile.block_n, tile.head_dim_qk),
        "v": (tile.block_n, tile.head_dim_v),
        "o": (tile.block_m, tile.head_dim_v),
    }
    if name not in shapes:
        raise AttncError(f"a channel holds tile '{name}' in shared memory, where the kernels keep only "
                         f"{', '.join([*shapes, *ROW_TILES])} (S and P stay in registers or tensor memory)")
    return shapes[name]


def alloc_smem(recipe: Recipe, tile: Tile, kv_layout: str = "interleaved") -> tuple[Buffer, ...]:
    """Lay out every shared-memory channel buffer; raise if the CTA budget is exceeded,
    counting the mbarriers and the tensor-memory address word that follow the buffers
    (`sync_bytes`)."""
    buffers, offset = lay_out_smem(recipe, tile, kv_layout)
    need = offset + sync_bytes(recipe, tile)
    if need > recipe.smem_bytes:
        placed = [b for b in buffers if b.alias_of is None]
        repeated = {b.name for b in placed if sum(c.name == b.name for c in placed) > 1}    # one per Q tile
        parts = ", ".join(f"{b.name}{f' ({b.channel})' if b.name in repeated else ''} {b.size}" for b in placed)
        parts += f", mbarriers {need - offset}" if need > offset else ""
        raise AttncError(f"shared memory plan needs {need} bytes ({parts}) but {recipe.target} "
                         f"allows {recipe.smem_bytes}; lower 'stages' or 'block_n'"
                         f"{' or q_tiles' if tile.q_tiles > 1 else ''} (attn-tile)")
    return buffers


MBARRIER_BYTES = 8


def sync_bytes(recipe: Recipe, tile: Tile) -> int:
    """The shared memory after the buffers: 8 bytes a slot of every mbarrier of the plan
    (attnc/schedule/sync.py) and, with tensor memory, 8 for the address tcgen05.alloc writes
    (Note [Mbarriers as planned] in attnc/backend/smem_layout.py)."""
    from attnc.schedule.sync import insert_pipelines

    slots = sum(b.stages for b in insert_pipelines(recipe, tile) if b.kind == "mbarrier")
    return MBARRIER_BYTES * slots + (MBARRIER_BYTES if recipe.tmem_columns else 0)


def lay_out_smem(recipe: Recipe, tile: Tile, kv_layout: str = "interleaved") -> tuple[tuple[Buffer, ...], int]:
    """Every shared-memory channel buffer and the bytes they span, budget unchecked (what
    attn-tile weighs tile choices with); `kv_layout`: Note [K/V slots]."""
    if kv_layout not in KV_LAYOUTS:
        raise AttncError(f"kv_layout = {kv_layout!r}: expected {' or '.join(KV_LAYOUTS)}")
    if kv_layout != "interleaved" and any(ch.alternating and ch.space == "smem" for ch in recipe.channels):
        raise AttncError(f"kv_layout={kv_layout}: {recipe.target}'s K and V take the slots of one ring in turn "
                         f"(alternating): there is no layout of the two to choose")
    elem = DTYPE_BYTES[tile.dtype]
    align = smem_align(recipe.target)
    buffers, offset = [], 0
    for ch in recipe.channels:
        if ch.space != "smem":
            continue
        if ch.alternating:
            # One ring for several tiles: every slot is as large as the largest.
            slot = max(_bytes(tile, t, elem) for t in ch.tile)
            offset = _align(offset, align)
            # one swizzle for every tile: the widest whose atom divides each tile's rows (K's
            # 96 columns and V's 128 take 64-byte blocks, not V's 128)
            cols = math.gcd(*(_tile_rows_cols(tile, t)[1] for t in ch.tile))
            name = "s" + "".join(t.upper() for t in ch.tile)
            buffers.append(Buffer(name, ch.name, "smem", offset, slot * ch.stages, ch.stages,
                                  align, swizzle_for(cols, elem)))
            offset += slot * ch.stages
            continue
        if kv_layout == "interleaved" and ch.stages > 1 and len(ch.tile) > 1 and "o" not in ch.tile:
            # Note [K/V slots]: stage s of every tile in one slot
            offset = _align(offset, align)
            sizes = [_bytes(tile, t, elem) for t in ch.tile]
            slot = sum(sizes)
            for t, size, start in zip(ch.tile, sizes, _prefix_sums(sizes)):
                cols = _tile_rows_cols(tile, t)[1]
                buffers.append(Buffer("s" + t.upper(), ch.name, "smem", offset + start, size * ch.stages,
                                      ch.stages, align, swizzle_for(cols, elem), stride=slot))
            offset += slot * ch.stages
            continue
        for t in ch.tile:
            rows, cols = _tile_rows_cols(tile, t)
            if t == "o" and ch.stages == 1 and tile.q_tiles == 1 and not recipe.persistent:
                # One O staging tile reuses Q's bytes once the KV loop is done; with two Q
                # tiles (sm_100a) one Q tile may still be in use while the other's O is
                # stored, and a persistent CTA loads the next block's Q meanwhile, so O
                # has its own.
                buffers.append(Buffer("sO", ch.name, "smem", _offset_of(buffers, "sQ"),
                                      rows * cols * elem, 1, align, swizzle_for(cols, elem), "sQ"))
                continue
            offset = _align(offset, align)
            # O staged for its store holds the output's elements (f32, f16 or bf16)
            own = DTYPE_BYTES[tile.out_dtype] if t == "o" and tile.out_dtype else elem
            size = rows * cols * own * ch.stages
            buffers.append(Buffer("s" + t.upper(), ch.name, "smem", offset, size, ch.stages,
                                  align, swizzle_for(cols, own)))
            offset += size
    return tuple(buffers), offset


def alloc_tmem(recipe: Recipe, tile: Tile) -> tuple[Buffer, ...]:
    """S and O accumulators per Q tile in TMEM columns (fp32, one column per element of a row).

    P lies in S's columns, as in FlashAttention-4: the next block's S = Q K^T writes them
    while the MMA warp's last P.V, issued before it, may still read P. What orders the two
    is the tensor pipe running one thread's MMAs in the order issued, which FlashAttention-4
    relies on and the emulator models (runtime/attnc_sim/isa_sm100.py); the PTX ISA 8.7 text
    states that order for MMAs of one accumulator only. No Blackwell GPU has run it here."""
    if recipe.tmem_columns == 0:
        return ()
    buffers, col = [], 0
    for q in range(tile.q_tiles):
        buffers.append(Buffer(f"tS{q}", f"s{q}", "tmem", col, tile.block_n, 1, 32, "none"))
        # P (16-bit) packs two elements per 32-bit column inside S's columns.
        buffers.append(Buffer(f"tP{q}", f"p{q}", "tmem", col + tile.block_n // 2,
                              tile.block_n // 2, 1, 32, "none", alias_of=f"tS{q}"))
        col += tile.block_n
    for q in range(tile.q_tiles):
        buffers.append(Buffer(f"tO{q}", "o", "tmem", col, tile.head_dim_v, 1, 32, "none"))
        col += tile.head_dim_v
    if col > recipe.tmem_columns:
        raise AttncError(f"tensor memory plan needs {col} columns (q_tiles x (block_n + V's head dim)) but "
                         f"{recipe.target} has {recipe.tmem_columns}; lower 'block_n' or 'q_tiles'")
    return tuple(buffers)


def _bytes(tile: Tile, t: str, elem: int) -> int:
    rows, cols = _tile_rows_cols(tile, t)
    return rows * cols * elem


def smem_align(target: str) -> int:
    """The alignment of a shared-memory buffer and of its stages: wgmma (sm_90a) reads a
    swizzled tile from whole swizzle patterns (8 rows of 128 bytes); else ALIGN."""
    return 1024 if target == "sm_90a" else ALIGN


def _prefix_sums(sizes: list[int]) -> list[int]:
    out, total = [], 0
    for size in sizes:
        out.append(total)
        total += size
    return out


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _offset_of(buffers, name: str) -> int:
    return next(b.offset for b in buffers if b.name == name)
