"""The feasibility checks of a kernel spec (`ForwardSpec.check` in kernel_spec.py), done
before anything is built: each failure is a `SpecError` that names the knob to change.
`check_spec` runs them in a fixed order, so that a spec with several faults always
reports the same one: its values, then its tiles and target, then the options that
need a kind of kernel, then its registers and shared memory.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from attnc.backend.mask_hooks import MASK_MODES

if TYPE_CHECKING:
    from attnc.backend.kernel_spec import ForwardSpec

DTYPES = ("f16", "bf16")
OUT_DTYPES = ("f16", "bf16", "f32")
HEAD_DIMS = (64, 96, 128, 256)
INTERVAL_TESTS = ("range", "pair", "bits")  # Note [One compare per score] in score_masks.py
# The instruction set the kernel's two GEMMs use: mma.sync (sm_80, runs on every GPU
# since) or wgmma from swizzled shared memory (sm_90a, Note [wgmma steps] in sm90a.py).
KERNEL_TARGETS = ("sm_80", "sm_90a")
MAX_ACC_REGS = 192                  # f32 accumulators (S + O) per thread before spilling


class SpecError(ValueError):
    """A specialization that cannot be built, with the knob to change; `part`, the part
    of the IR the failed check read, where the lowering locates it (`_require`)."""

    def __init__(self, message: str, part: str | None = None):
        super().__init__(message)
        self.part = part


def check_spec(spec: ForwardSpec) -> ForwardSpec:
    """Raise SpecError unless `spec` can be built; return it."""
    _check_read(spec)
    _check_values(spec)
    _check_tiles(spec)
    _check_options(spec)
    _check_resources(spec)
    return spec


def _check_read(spec: ForwardSpec) -> None:
    """What only the IR gives (lowering.py reads it): the buffers as placed and every
    kernel choice (attnc/passes/choice_defaults.py). The steps of the target's roles
    are checked where the kernel is built (`steps_read`): attn-kernel-choices chooses
    before attn-overlap-gemms writes sm_90a's."""
    from attnc.backend.kernel_spec import CHOICES
    missing = [name for name in CHOICES if getattr(spec.choices, name) is None]
    if spec.smem is None:
        missing.insert(0, "smem")
    _require(not missing, f"{', '.join(missing)} not read from the IR: the kernel is built from the L5 IR "
                          f"(attnc/backend/lowering.py)")


def steps_read(spec: ForwardSpec) -> ForwardSpec:
    """Raise SpecError unless the steps of `spec`'s roles were read from the IR; return it."""
    missing = spec.steps.missing(spec.target, spec.plan.producer)
    _require(not missing, f"the steps ({', '.join(missing)}) not read from the IR: the kernel's steps are the L5 IR's "
                          f"(attnc/backend/lowering.py)")
    return spec


def choice_value_error(option: str, value) -> str | None:
    """Why no kernel takes `value` of the choice of its own `option`, or None."""
    if option == "exp2_fma" and not 0 <= value <= 8:
        return f"exp2_fma={value}: expected 0 to 8 (of every 8 scores of a row, those whose exp2 runs on the FMA pipe)"
    if option == "interval_test" and value not in INTERVAL_TESTS:
        return f"interval_test={value!r}: expected one of {INTERVAL_TESTS}"
    if option == "kv_loops" and value not in (1, 2, 3):
        return (f"kv_loops={value}: expected 1 (every step of a key range in one loop), 2 (the far edge's "
                f"mixed blocks in the full blocks' loop) or 3 (a loop per kind of block)")
    if option == "qk_unroll" and value < 0:
        return f"qk_unroll={value}: expected 0 or more"
    if option == "tail_waves":
        from attnc.backend.qtiles import MAX_TAIL_WAVES
        if not 0 <= value <= MAX_TAIL_WAVES:
            return f"tail_waves={value}: expected 0 (off) to {MAX_TAIL_WAVES}"
    return None


def op_choice_error(spec: ForwardSpec | None, option: str, value) -> str | None:
    """Why an op of `spec`'s kernel cannot hold `value` of the choice of its own `option`
    (Note [Choices op by op] in attnc/passes/kernel_choices.py), or None; without a spec
    (sm_100a's lowering has none), only what no kernel takes (`choice_value_error`)."""
    problem = choice_value_error(option, value)
    if problem or spec is None:
        return problem
    if option == "interval_test" and spec.hooks.row_interval is None:
        return ("interval_test chooses how a row interval's scores are tested, and this kernel's mask has none: "
                "it tests each score with its predicate (a built-in causal mask, or a mask_mod that is no "
                "interval of keys per query row: Note [Row intervals] in row_intervals.py)")
    if option == "interval_test" and value == "bits" and spec.block_n > 128:
        return (f"interval_test='bits' needs block_n <= 128 (32 scores per row and lane), not {spec.block_n}: "
                f"use 'range' or 'pair'")
    if option == "split_mask" and value and spec.hooks.tile_holds is None:
        return ("split_mask needs a mask read from a block map whose MIXED tiles record the conjuncts they hold "
                "(a row interval and a residual, Note [Conjuncts a tile holds]; attn.classify's holds, "
                "attn-mask-kernels{holds=true})")
    if option == "staged_o" and value and not spec.can_stage_o:
        return ("staged_o needs a kernel with one query block per CTA, no producer warpgroup and a 16-bit O "
                "that fits in its tiles' shared memory")
    if option == "qk_unroll" and value and spec.target != "sm_80":
        return (f"qk_unroll={value}: it rolls sm_80's QK^T k16 steps into a loop; {spec.target} issues "
                f"QK^T as one wgmma group (0 there)")
    half_page = spec.page_width(spec.variant.head_dim_qk) // 16 if option == "qk_unroll" else 0
    if option == "qk_unroll" and value and half_page % value:
        return f"qk_unroll={value} must divide {half_page} (k16 steps per smem page), or be 0"
    return None


def _check_values(spec: ForwardSpec) -> None:
    """Element types, head dims, the mask and the score hooks."""
    _require(spec.variant.dtype in DTYPES, f"dtype {spec.variant.dtype!r}: expected one of {DTYPES}")
    _require(spec.o_dtype in OUT_DTYPES, f"out_dtype {spec.o_dtype!r}: expected one of {OUT_DTYPES}")
    for name in ("head_dim_qk", "head_dim_v"):
        _require(getattr(spec.variant, name) in HEAD_DIMS,
                 f"{name}={getattr(spec.variant, name)}: supported head dims are {HEAD_DIMS}")
    _require(spec.hooks.mask in MASK_MODES, f"mask {spec.hooks.mask!r}: expected one of {MASK_MODES}")
    _require(spec.hooks.mask != "mask_mod" or (spec.hooks.kv_range is not None and spec.hooks.keep is not None),
             "mask 'mask_mod' needs the kv_range and keep hooks")
    _require(spec.hooks.score_mod_out > 0, f"score_mod_out={spec.hooks.score_mod_out}: must be positive")
    _require(spec.hooks.score_mod is None or spec.hooks.score_bias is None,
             "give score_mod or score_bias (an affine score_mod), not both")
    _require(all(x.kind in ("dim", "ptr", "scratch") for x in spec.hooks.extra_params),
             "extra_params: kind must be 'dim', 'ptr' or 'scratch'")


def _check_tiles(spec: ForwardSpec) -> None:
    """Warps, tile shapes, stages and the per-tile knobs, against the target."""
    warps = (4, 8, 12, 16) if spec.target == "sm_90a" else (1, 2, 4, 8)
    _require(spec.plan.warps in warps, f"num_warps={spec.plan.warps}: expected one of {warps} on {spec.target}",
             "warps")
    _require(spec.block_m % (16 * spec.plan.warps) == 0,
             f"block_m={spec.block_m} must be a multiple of 16*num_warps={16 * spec.plan.warps}")
    _require(spec.block_n % 16 == 0 and spec.block_n >= 16,
             f"block_n={spec.block_n} must be a positive multiple of 16")
    _require(spec.plan.stages in (1, 2, 3, 4), f"stages={spec.plan.stages}: expected 1 to 4", "stages")
    _require(spec.choices.min_ctas_per_sm is None or 0 <= spec.choices.min_ctas_per_sm <= 32,
             f"min_ctas_per_sm={spec.choices.min_ctas_per_sm}: expected 0 to 32", "min_ctas_per_sm")
    _require(spec.scale > 0, f"softmax_scale={spec.scale}: must be positive")
    for d in {spec.variant.head_dim_qk, spec.variant.head_dim_v}:
        per_pass = spec.loader_threads * 8 // spec.page_width(d)
        _require(per_pass % 8 == 0,
                 f"{spec.loader_threads} threads copy rows of head dim {d} in passes of {per_pass} rows, "
                 f"which breaks the 8-row swizzle: raise num_warps", "warps")
    _require(spec.target in KERNEL_TARGETS, f"target {spec.target!r}: expected one of {KERNEL_TARGETS}")
    _require(not spec.choices.mma_row_sum or spec.target == "sm_80",
             f"mma_row_sum sums P on mma.sync, an sm_80 kernel's P.V, not {spec.target}'s", "mma_row_sum")
    _require(not (spec.choices.mma_row_sum and spec.variant.has_lse),
             f"mma_row_sum sums P as rounded to {spec.variant.dtype} for P.V, which the variant's LSE output "
             f"would keep (up to 2^-8 of l in bf16, 2^-11 in f16): drop mma_row_sum to sum in f32", "mma_row_sum")
    if spec.target == "sm_90a":
        _check_sm90a(spec)


def _check_sm90a(spec: ForwardSpec) -> None:
    """Warpgroups of 64 rows, and wgmma's N."""
    _require(spec.plan.warps % 4 == 0 and spec.rows_per_warp == 16,
             f"sm_90a runs warpgroups of 4 warps and 64 rows: block_m={spec.block_m} with "
             f"num_warps={spec.plan.warps} gives {spec.rows_per_warp} rows per warp, not 16", "warps")
    _require(spec.block_n <= 256 and spec.variant.head_dim_v <= 256,
             f"wgmma's N is at most 256: block_n={spec.block_n}, head_dim_v={spec.variant.head_dim_v}")


def _check_options(spec: ForwardSpec) -> None:
    """The options that only a kind of kernel has (a producer warpgroup, a grid order, a
    block map, ...)."""
    _require(not spec.plan.producer or spec.target == "sm_90a",
             f"a producer warpgroup is an sm_90a kernel's (mbarriers), not {spec.target}'s", "producer")
    _require(not spec.plan.pingpong or (spec.plan.producer and spec.consumer_warpgroups == 2),
             f"pingpong takes turns between two consumer warpgroups (block_m=128) and needs the "
             f"producer warpgroup: block_m={spec.block_m}, producer={int(spec.plan.producer)}", "pingpong")
    # where the plan's pair of query blocks is what stands in the way, the option that drops it
    pair = ("; this plan runs two query blocks per CTA (attn-warp-specialize{q_blocks_per_cta=1} runs one)"
            if spec.plan.q_blocks_per_cta == 2 else "")
    _require(not spec.choices.tiles_last or (spec.plan.q_blocks_per_cta == 1 and not spec.plan.producer
                                           and not spec.plan.persistent),
             "tiles_last needs a kernel with one query block per CTA, no producer warpgroup and no "
             "persistent CTAs" + pair)
    _require(not spec.choices.small_grid or (spec.plan.q_blocks_per_cta == 1 and not spec.plan.producer
                                                 and not spec.plan.persistent and not spec.choices.tiles_last),
             "small_grid adds the kernel with tiles_last: it needs a kernel with one query block per CTA, no "
             "producer warpgroup, no persistent CTAs, and not tiles_last itself" + pair)
    _require(not (spec.choices.tiles_last and spec.choices.heads_first),
             "tiles_last and heads_first are two orders of the grid: give one")
    _require(not spec.choices.heads_first or (spec.plan.q_blocks_per_cta == 1 and not spec.plan.producer),
             "heads_first needs a kernel with one query block per CTA and no producer warpgroup" + pair)
    _require(not spec.choices.lean_loads or spec.can_lean_loads,
             "lean_loads needs an sm_80 kernel whose key ranges come from a block map or a band", "lean_loads")
    _require(not spec.aligned_tiles or (spec.blockmap and spec.takes_tile_table),
             "aligned_tiles needs a kernel whose key ranges are found at run time (a block map or the "
             "table's runs), one query block per CTA and no producer warpgroup")
    _require(not spec.choices.dead_rows or spec.can_skip_dead_rows,
             "dead_rows needs an sm_80 kernel without a producer warpgroup, with two or more 16-row tiles "
             "per warp, two or more K/V stages, a mask that keeps an interval of keys per row, and the KV "
             "steps' ops in the order the plan passes make (its first step is built in that order)")
    hooks = spec.hooks
    _require(hooks.tile_holds is None or (hooks.row_interval is not None and hooks.row_residual is not None),
             "tile_holds needs row_interval and row_residual")
    _require(not spec.plan.persistent or spec.plan.producer,
             "persistent CTAs are the producer warpgroup's kernel: a plan with a producer role "
             "(attn-warp-specialize{producer=1})", "persistent")
    _require(not spec.plan.producer or spec.plan.stages >= 2,
             "a producer warpgroup needs at least two K/V stages", "stages")
    _require(spec.target != "sm_90a" or spec.plan.stages >= 2,
             "sm_90a's kernel needs two or more K/V stages: its steps overlap one step's QK^T with the "
             "last one's P.V (Note [wgmma overlap])", "stages")


def _check_resources(spec: ForwardSpec) -> None:
    """Accumulator registers, shared memory and the symbol."""
    _require(spec.acc_registers <= MAX_ACC_REGS,
             f"{spec.acc_registers} f32 accumulator registers per thread (S {spec.block_n} wide, "
             f"O {spec.variant.head_dim_v} wide, {spec.m_atoms} row tiles per warp) exceed {MAX_ACC_REGS}: "
             f"lower block_n or block_m, or raise num_warps")
    _require(spec.smem_bytes <= spec.max_smem_bytes,
             f"{spec.smem_bytes} bytes of shared memory exceed {spec.max_smem_bytes}: "
             f"lower stages, block_n or block_m", "stages")
    _require(spec.symbol.isidentifier(), f"symbol {spec.symbol!r} is not an identifier")


def _require(cond: bool, message: str, part: str | None = None) -> None:
    """Raise SpecError(message) about `part` of the L5 IR unless `cond`: "warps" (the
    computing roles'), "stages" (the K/V channel's), "producer", "pingpong" or
    "persistent" (attn.warp_specialize's flags), a kernel choice's option (the op holding
    it), or None (the attn.kernel); lowering.py's `part_op` finds the op."""
    if not cond:
        raise SpecError(message, part)
