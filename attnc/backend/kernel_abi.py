"""How a forward kernel is launched: `KernelAbi`, its parameters in the manifest's terms,
block, dynamic shared memory and grid, as `kernel_abi` derives them from a
`ForwardSpec` (every target's kernels: sm80.py, sm90a.py, sm90a_ws.py), and the grid's
order (Notes [Heads first] and [Tiles last], read back by `KernelState.grid_item` in forward.py) with
the second kernel of small grids (Note [Small grids]; kernel_module.add_small_grid_kernel
builds it).

Note [Heads first]: the grid is (query blocks, H, B) with the query blocks fastest, so
that the CTAs resident at once work on a few heads and share their keys in L2; with
`heads_first` it is (H, query blocks, B): the hardware starts the heaviest query block
of every head before the next heaviest of any, so the light blocks (the first ones of a
band or a causal mask) run last, where they fill the tail that equal blocks leave
ragged, at the price of the CTAs of all heads at once reading their own keys. Where
that is the default: `heads_first` in attnc/passes/choice_defaults.py.

Note [Tiles last]: with `tiles_last` the grid is (H, B, query blocks): the hardware
starts the heaviest query block of every (b, h) before the next heaviest of any (under a
causal mask, the longest-first order a list scheduler would pick; a tile table's entries
go the same way, each (b, h)'s from its last, Note [Document-aligned tiles] in
qtiles.py). In the default orders the last batch's heaviest blocks start last, so a
launch of a few waves ends on them. The query blocks on z are at most 65535 (M up to
8.4M at 128-row blocks, about 6.7M on a tile table). At M = N = 1024 to 4096 the
attention kernels of causal, ALiBi and documents ran 14-25 % shorter so (H100). Not the
default: at 8192, 15-31 waves of two CTAs an SM, the CTAs resident together read the keys
of every (b, h) at once, and the kernels at head dim 64 ran 4-6 % slower; on sm_90a
documents ran slower from M = 2048 on. Choosing in the kernel by the grid's waves (its
CTAs against %nsmid) cost up to 2.6 % at 8192, where it kept the default order (selects
in place of the ctaid reads ptxas recomputes where it needs them; the window's kernel at
head dim 64 then spilled). Hence Note [Small grids]. The numbers: results/sm80_h200.md,
"Tiles last and small grids".

Note [Small grids]: an sm_80 kernel of one query block per CTA whose blocks' work differs
(a mask, not a band; neither grid order given: `small_grid` in choice_defaults.py) is
in the bundle's module twice: as is, and with tiles_last under the symbol
`<symbol>_tiles_last` (the first's gpu.func with its grid reads moved to tiles_last's
axes: `add_small_grid_kernel` in kernel_module.py). Its manifest entry names the second
as its `small_grid`, with `up_to_ctas_per_sm` = SMALL_GRID_CTAS_PER_SM: the runtime
launches it where the first's grid has at most that many CTAs per SM of the device, and
at least one (runtime/attnc_runtime/checks.py). That is 10 waves of the two CTAs an SM
most of these kernels run (those of 64-row tiles run more, and reach the bound in fewer
waves): every measured gain of Note [Tiles last] is at or below it (causal at 128 at
4096: 15.5 CTAs an SM; documents at 128: 19.4), and every kernel slower with tiles_last
above it (at 8192: 31 at head dim 64, 38.8 for documents at 128). Each launch runs one
kernel, of the same computation to the bit, so the default order's code is unchanged
where it runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from attnc.backend.kernel_spec import ForwardSpec
from attnc.backend.qtiles import table_factors

SMALL_GRID_CTAS_PER_SM = 20     # Note [Small grids]


@dataclass(frozen=True)
class KernelAbi:
    """How to launch the kernel: its parameters in order (manifest format, see
    runtime/attnc_runtime/manifest.py), block, dynamic shared memory and grid rule."""
    symbol: str
    params: tuple[dict, ...]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    grid: tuple[tuple, tuple, tuple]
    specialization: dict = field(default_factory=dict, compare=False)

    def manifest_kernel(self, name: str = "fwd") -> dict:
        return {"name": name, "symbol": self.symbol, "block": list(self.block),
                "dynamic_smem_bytes": self.dynamic_smem_bytes,
                "grid": [list(g) for g in self.grid], "params": [dict(p) for p in self.params]}


def kernel_abi(spec: ForwardSpec) -> KernelAbi:
    tensors = ["q", "k", "v", "o"] + (["lse"] if spec.variant.has_lse else [])
    params = [{"kind": "ptr", "tensor": t} for t in tensors]
    dims = ("M", "N", "H", "HKV") + (("B",) if spec.plan.persistent else ())
    params += [{"kind": "dim", "name": d, "type": "i32"} for d in dims]
    for t in tensors:
        params += [{"kind": "stride", "tensor": t, "axis": a, "type": "i64"}
                   for a in range(2 if t == "lse" else 3)]
    params += [x.manifest() for x in spec.hooks.extra_params]
    v, plan, choices = spec.variant, spec.plan, spec.choices
    specialization = {"target": spec.target, "dtype": v.dtype, "out_dtype": spec.o_dtype,
                      "head_dim_qk": v.head_dim_qk, "head_dim_v": v.head_dim_v,
                      "block_m": spec.block_m, "block_n": spec.block_n,
                      "num_warps": plan.warps, "stages": plan.stages, "qk_unroll": spec.own_choice("unroll"),
                      "mask": spec.hooks.mask, "score_mod": _score_kind(spec), "sink": spec.hooks.sink is not None,
                      "with_lse": v.has_lse, "softmax_scale": spec.scale,
                      "q_blocks_per_cta": plan.q_blocks_per_cta, "min_ctas_per_sm": choices.min_ctas_per_sm,
                      # the bound kept only where the kernel assembles without spills (Note
                      # [The bound the assembler decides] in register_bound.py)
                      "min_ctas_unless_spills": bool(choices.min_ctas_unless_spills and choices.min_ctas_per_sm),
                      "producer_warpgroup": plan.producer, "pingpong": plan.pingpong,
                      "persistent": plan.persistent, "heads_first": choices.heads_first,
                      "tiles_last": choices.tiles_last,
                      # false where no op the lowering reads holds one (no mask; a producer
                      # kernel's stores, which never stage)
                      "staged_o": spec.own_choice("staged", False), "lean_loads": choices.lean_loads,
                      "split_mask": spec.own_choice("split", False),
                      "early_first": spec.steps.guesses_first_block, "aligned_tiles": spec.aligned_tiles,
                      "exp2_fma": spec.own_choice("exp2_fma"), "lazy_rescale": choices.lazy_rescale,
                      "mma_row_sum": choices.mma_row_sum, "dead_rows": choices.dead_rows,
                      "kv_loops": choices.kv_loops,
                      "interval_test": (spec.own_choice("interval_test")
                                        if spec.hooks.row_interval is not None else None)}
    # Note [Document-aligned tiles] (qtiles.py): a CTA per entry of the tile table.
    m_blocks = (tuple(table_factors("M", spec.block_m)) if spec.aligned_tiles
                else (["cdiv", "M", spec.block_m * spec.plan.q_blocks_per_cta],))
    # Note [Persistent CTAs] (sm90a_ws.py): a CTA per SM at most, each looping over blocks.
    if spec.plan.persistent:
        grid = ((["min_sms", *m_blocks, "H", "B"],), (1,), (1,))
    else:
        factors, axes = {"block": m_blocks, "head": ("H",), "batch": ("B",)}, grid_axes(spec)
        grid = tuple(factors[role] for role in sorted(axes, key=axes.get))
    return KernelAbi(spec.symbol, tuple(params), (spec.threads, 1, 1), spec.smem_bytes, grid, specialization)


def grid_axes(spec: ForwardSpec) -> dict[str, str]:
    """The grid's axis of the query block, the head and the batch of a CTA that runs one
    query block (Notes [Heads first] and [Tiles last])."""
    if spec.choices.tiles_last:
        return {"block": "z", "head": "x", "batch": "y"}
    if spec.choices.heads_first:
        return {"block": "y", "head": "x", "batch": "z"}
    return {"block": "x", "head": "y", "batch": "z"}


def _score_kind(spec: ForwardSpec) -> str:
    return "bias" if spec.hooks.score_bias else "mod" if spec.hooks.score_mod else "none"
