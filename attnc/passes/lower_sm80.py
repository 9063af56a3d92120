"""`attn-lower-sm80` and `attn-lower-sm90a`: the L5 plan -> the kernel in upstream
dialects (L6).

Targets: sm_80 (attn-lower-sm80), sm_90a (attn-lower-sm90a, lower_sm90a.py: the same
kernel with its two GEMMs on wgmma). Expects L5 (tile attributes, mask analysis, role regions, channels with
their buffers, mbarriers) on one attn.kernel; what the kernel is built from is the op's attributes,
its hook ops' regions and the function's types (Note [The variant from the IR] in
attnc/ir/kernel.py), never the `.attn` source. Leaves the module with a `gpu.module`
holding the FlashAttention-2-style kernel (and, for masks that read params, the
block-map kernel) in gpu/nvvm/llvm/scf/arith ops -- cp.async commit groups and
waits, ldmatrix, mma.sync, the online softmax, the hooks' code -- and the launch
ABI as a JSON attribute `attn.kernels` on it:

    before:  func.func @mha(...) { "attn.kernel"(...) ({ "attn.warp_specialize"() ({...}) }) }
    after:   module attributes {gpu.container_module, ...} {
               func.func @mha(...) { ...unchanged... }
               gpu.module @attnc_kernels attributes {attn.kernels = "[...]"} {
                 gpu.func @attnc_mha_fwd(...) kernel { ... nvvm.mma.sync ... }
               }
             }

`attnc compile --emit ptx|cubin|bundle` takes the gpu.module from here to PTX
(MLIR's NVPTX), cubin (nvJitLink) and the bundle manifest.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import ClassVar

from attnc.passes.registry import Pass

KERNELS_ATTR = "attn.kernels"
SPECIALIZATION_ATTR = "attn.specialization"


# Kernel choices the options record on attn.kernel, read back by lowering.py: each
# option's name is its ForwardSpec field's, with the attribute and the value's type.
KERNEL_CHOICES: dict[str, tuple[str, type]] = {
    "q_blocks_per_cta": ("kernel.q_blocks_per_cta", int),
    "interval_test": ("kernel.interval_test", str),
    "min_ctas_per_sm": ("kernel.min_ctas_per_sm", int),
    "persistent": ("kernel.persistent", bool),
    "exp2_fma": ("kernel.exp2_fma", int),
    "heads_first": ("kernel.heads_first", bool),
    "tiles_last": ("kernel.tiles_last", bool),
    "staged_o": ("kernel.staged_o", bool),
    "lean_loads": ("kernel.lean_loads", bool),
    "split_mask": ("kernel.split_mask", bool),
    "early_first": ("kernel.early_first", bool),
    "aligned_tiles": ("kernel.aligned_tiles", bool),
    "run_ranges": ("kernel.run_ranges", bool),
    "lazy_rescale": ("kernel.lazy_rescale", bool),
    "mma_row_sum": ("kernel.mma_row_sum", bool),
    "tail_waves": ("kernel.tail_waves", int),
    "dead_rows": ("kernel.dead_rows", bool),
}


def record_choices(op, choices: dict) -> None:
    """Record the options given (not None) on `op`; bools as 0/1 integers."""
    from attnc.ir import error_at, set_int, set_str

    for name, value in choices.items():
        if value is not None:
            attr, kind = KERNEL_CHOICES[name]
            if kind is str:
                set_str(op, attr, value)
            elif not -(1 << 63) <= int(value) < 1 << 63:
                raise error_at(op, f"option {name} = {value} is out of range")
            else:
                set_int(op, attr, int(value))


def recorded_choices(op) -> dict:
    """The ForwardSpec fields `record_choices` left on `op` (the others keep the spec's defaults)."""
    from attnc.ir import get_int, get_str

    return {name: get_str(op, attr) if kind is str else kind(get_int(op, attr))
            for name, (attr, kind) in KERNEL_CHOICES.items() if attr in op.attributes}


@dataclass(frozen=True)
class LowerKernel(Pass):
    """The options attn-lower-sm80 and attn-lower-sm90a share; each adds its own."""

    target: ClassVar[str]
    q_blocks_per_cta: int | None = field(default=None, metadata={
        "doc": "query blocks each CTA runs in turn, 1 or 2 (Note [Two query blocks per CTA] in sm80.py; "
               "default on sm_80: 2 where the softmax max is a constant -- a bf16 score_mod bounded within "
               "64 -- at 128-key tiles, else 1; on sm_90a: 1)"})
    interval_test: str | None = field(default=None, metadata={
        "doc": "a row-interval mask's test per score: bits, range or pair (default: bits up "
               "to 128-key tiles, else range)"})
    min_ctas_per_sm: int | None = field(default=None, metadata={
        "doc": "CTAs the kernel's registers must leave room for on one SM (PTX .minnctapersm; 0: no "
               "bound; Note [CTAs per SM] in kernel_spec.py; default: none on sm_80 and for a producer "
               "warpgroup; on sm_90a the CTAs its shared memory holds, at most down to 128 registers a "
               "thread, dropped where the kernel would then spill)"})
    exp2_fma: int | None = field(default=None, metadata={
        "doc": "of every 8 scores of a softmax row, how many take their exp2 on the FMA pipe (a cubic "
               "and exponent bits) instead of the SFU, 0 to 8 (Note [Exponentials on the FMA pipe]; "
               "default: ForwardSpec.exp2_on_fma: 2 in sm_90a's one-warpgroup softcap kernels, 1 in its "
               "producer warpgroup's kernels with a score_mod, else 0)"})

    heads_first: bool | None = field(default=None, metadata={
        "doc": "order the grid's CTAs by head first, query block second (Note [Heads first]; default: "
               "ForwardSpec.grid_heads_first: on sm_80 for a band or a block map)"})
    tiles_last: bool | None = field(default=None, metadata={
        "doc": "order the grid's CTAs by head, then batch, then query block, so that every (b, h) starts "
               "its heaviest query block before any starts its next (Note [Tiles last] in kernel_abi.py; "
               "default: off)"})
    split_mask: bool | None = field(default=None, metadata={
        "doc": "in a block map's MIXED tiles, test only the conjuncts (row interval or residual) the map "
               "does not prove to hold on the whole tile (Note [Conjuncts a tile holds]; default: on wherever "
               "the map records them -- a mask with a row interval and a residual)"})
    aligned_tiles: bool | None = field(default=None, metadata={
        "doc": "for a block map whose mask has a conjunct P[.., i] == P[.., j] (document ids), query tiles "
               "and key blocks that start where the ids' runs start, from a table a third kernel fills at "
               "run time; unsorted ids fall back to the grid (Note [Document-aligned tiles] in qtiles.py; "
               "default: wherever the mask has that conjunct and a CTA runs one query block without a "
               "producer warpgroup, on sm_80 and sm_90a)"})
    run_ranges: bool | None = field(default=None, metadata={
        "doc": "on the aligned tiles, compute each key block's class from the tile's run of equal ids and "
               "the static analysis of the rest of the mask, with no block map kernel (Note [Ranges from the "
               "runs] in run_ranges.py; default: wherever the tiles are aligned and the mask's other "
               "conjuncts read no param and no float, but for a kernel at the 128-register floor of "
               "its CTAs per SM (sm_90a at head dim 64) and a mask with another residual conjunct "
               "beside the ids' whose map records what a tile holds)"})
    lazy_rescale: bool | None = field(default=None, metadata={
        "doc": "keep a softmax row's running max until a block's scores exceed it by more than a factor of 2^8, "
               "and skip a warp's rescale of O where no row of it moved (Note [Lazy rescale] in "
               "softmax.py; default: ForwardSpec.rescale_lazily: on above head dim 64 wherever the max "
               "is not a constant, but for sm_90a's persistent CTAs)"})
    tail_waves: int | None = field(default=None, metadata={
        "doc": "on the aligned tiles with the heads-first grid, the last this many resident grids' worth of CTAs "
               "start their query tiles longest first (Note [Longest tiles last] in qtiles.py; 0: off, at most 64; "
               "default: 2 there)"})
    staged_o: bool | None = field(default=None, metadata={
        "doc": "write O through shared memory in coalesced 16-byte stores instead of 4-byte stores "
               "from the accumulators (Note [Staged O]; default: ForwardSpec.o_staged: where it can -- one query "
               "block per CTA, no producer warpgroup, a 16-bit O -- on sm_80, and on sm_90a for a band or a "
               "block map)"})

    def run(self, module) -> None:
        # Every option is a keyword of lower_sm80.
        lower_sm80(module, pass_target=self.target, **{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class LowerSm80(LowerKernel):
    """Generate the sm_80 kernel (gpu.module) from the plan of attn.kernel."""

    name: ClassVar[str] = "attn-lower-sm80"
    target: ClassVar[str] = "sm_80"
    lean_loads: bool | None = field(default=None, metadata={
        "doc": "in the KV steps, load later key blocks without row predicates, and for a band do not "
               "ask tile_skip (Note [Lean step loads]; only for a block map or a band; default: "
               "ForwardSpec.step_loads_lean: on sm_80 for both)"})
    early_first: bool | None = field(default=None, metadata={
        "doc": "for a block map, load the first key block the static mask analysis puts on top before "
               "the map's row is read, and reload it only where the map's range starts elsewhere (Note "
               "[First block before the map]; default: ForwardSpec.first_before_map: on sm_80 for a block map)"})
    mma_row_sum: bool | None = field(default=None, metadata={
        "doc": "sum each softmax row's probabilities on the tensor cores, as one more n8 column of the P.V "
               "GEMM whose B operand is all ones, instead of FADDs per score (Note [Row sums on the tensor "
               "cores] in softmax.py; default: ForwardSpec.row_sum_on_mma: for an affine score_mod, "
               "such as ALiBi's, in a kernel without an LSE output; refused with one: the LSE would keep "
               "the rounding of P)"})
    dead_rows: bool | None = field(default=None, metadata={
        "doc": "interleave the warps' 16-row tiles of the query block (warp w owns rows 16w + 16 num_warps k) "
               "and, in the first key step, skip the MMAs of a tile whose rows keep none of its keys (Note [Dead "
               "rows] in sm80.py; default: ForwardSpec.skips_dead_rows: wherever it can be -- two or more tiles "
               "per warp, two or more K/V stages and a mask with a row interval -- and key blocks are shorter "
               "than query blocks)"})


def lower_sm80(module, pass_target: str | None = None, **choices) -> None:
    """Lower the plan of `module` to its target's kernel; `pass_target`: the target
    the calling pass builds for, which the plan must have; `choices`: options named in
    KERNEL_CHOICES (None: the default), `persistent` attn-lower-sm90a's (Note [Persistent
    CTAs] in sm90_ws.py)."""
    from mlir import ir

    from attnc.backend.lowering import kernel_module_for
    from attnc.ir import attention_ops, error_at, get_str
    from attnc.passes.pipelines import LOWERING

    ops = attention_ops(module)
    pass_name = LOWERING[pass_target or "sm_80"]
    if lowered_gpu_module(module) is not None:
        raise error_at(ops[0] if ops else module, f"{pass_name} ran twice on this module")
    for op in ops:
        planned = get_str(op, "target") if "target" in op.attributes else None
        if pass_target is not None and planned is not None and planned != pass_target:
            instead = f"use {LOWERING[planned]}" if planned in LOWERING else "it has no lowering yet"
            raise error_at(op, f"{pass_name} lowers {pass_target} plans; this one is for {planned}: {instead}")
    unknown = set(choices) - set(KERNEL_CHOICES)
    if unknown:
        raise TypeError(f"lower_sm80: no option {', '.join(sorted(unknown))}")
    result = compile_result_of(module, pass_name)      # first: attributes that contradict the types
    _check_plan(module, pass_name)
    for op in ops:
        record_choices(op, choices)
    kernel_module, kernels, specialization = kernel_module_for(result)
    with _module_op(module).context:
        gpu_module = next(o.operation for o in kernel_module.body.operations
                          if o.operation.name == "gpu.module")
        gpu_module.attributes[KERNELS_ATTR] = ir.StringAttr.get(json.dumps(kernels))
        gpu_module.attributes[SPECIALIZATION_ATTR] = ir.StringAttr.get(json.dumps(specialization))
        gpu_module.detach_from_parent()
        ir.InsertionPoint(_module_body(module)).insert(gpu_module)
        _module_op(module).attributes["gpu.container_module"] = ir.UnitAttr.get()


def lowered_gpu_module(module):
    """The gpu.module attn-lower-sm80 added, or None."""
    for op in _module_body(module).operations:
        if op.operation.name == "gpu.module" and KERNELS_ATTR in op.operation.attributes:
            return op.operation
    return None


def compile_result_of(module, pass_name: str = "attn-lower-sm80"):
    """The (variant, module) pair the backend works on, the variant read from the op's
    attributes and types (Note [The variant from the IR] in attnc/ir/kernel.py); the
    `.attn` text the module may carry only locates errors; `pass_name`: the pass that
    needs it, for the error."""
    from mlir import ir

    from attnc.driver import CompileResult
    from attnc.errors import AttncError
    from attnc.ir import attention_ops
    from attnc.ir.kernel import kernel_variant

    ops = attention_ops(module)
    if len(ops) != 1:
        raise AttncError(f"{pass_name} builds one attn.kernel per module, found {len(ops)}")
    attrs = _module_op(module).attributes
    source = ir.StringAttr(attrs["attn.source"]).value if "attn.source" in attrs else ""
    filename = ir.StringAttr(attrs["attn.filename"]).value if "attn.filename" in attrs else "<input>"
    return CompileResult(kernel_variant(ops[0], source, filename), _module_op(module))


# The passes between the mask analysis and the verifier: what they write is the plan.
PLAN_PASSES = ("attn-warp-specialize", "attn-alloc-smem", "attn-alloc-tmem", "attn-insert-pipelines")


def _check_plan(module, pass_name: str) -> None:
    """Note [The plan the lowerings follow]: the kernels of attn-lower-sm80 and
    attn-lower-sm90a follow these choices of the L3-L5 IR (plan_ir.followed_plan): the
    roles -- sm_90a's producer warpgroup or none, its consumer warpgroups, each role's
    setmaxnreg budget (`regs`), ping-pong (`pingpong` on attn.warp_specialize) -- the K/V
    channel's stages, and the order in which the producer's KV loops put K and V. Those
    come from the plan passes' options (attn-tile, attn-warp-specialize), from a user pass,
    or from a dump edited by hand. The rest of the plan -- buffer placement, barrier
    counts, where the synchronization ops stand, the order of the other ops -- the
    lowering builds as the plan passes make it for those choices; a plan that differs
    there would be silently built as that one, so it is refused, naming the first
    difference, and a role whose ops moved since attn-warp-specialize is refused at the
    role (Note [Role programs] in attnc/ir/roles.py). The plan is summed up from the IR (roles, channels with their buffers,
    mbarriers, named barriers) and compared with the summary of the plan for the
    followed choices (attnc/schedule: recipe, alloc, sync)."""
    from attnc.ir import attention_ops, error_at
    from attnc.ir import roles as R
    from attnc.passes.plan_ir import followed_plan, plan_summary, planned_summary, tile_of

    for kernel in attention_ops(module):
        tile = tile_of(kernel, pass_name)       # a tile no pass can plan, named as the lowering's
        plan = followed_plan(kernel, pass_name)
        ws = R.warp_specialize_of(kernel)
        made = R.value_of(ws.attributes[R.PROGRAMS]) if R.PROGRAMS in ws.attributes else {}
        for role in R.role_ops(kernel):         # Note [Role programs]
            if R.name_of(role) in made and made[R.name_of(role)] != R.program_digest(role):
                raise error_at(role, f"{pass_name} builds the ops of role '{R.name_of(role)}' in the order "
                                     f"attn-warp-specialize made them (of an op order it follows only which of "
                                     f"K and V the producer puts first), and this role's ops were reordered, "
                                     f"added or removed since (Note [The plan the lowerings follow])")
        ours, theirs = plan_summary(kernel), planned_summary(kernel, tile, plan)
        for kind in theirs:
            if ours.get(kind) == theirs[kind]:
                continue
            why = _first_difference(kind, ours.get(kind, []), theirs[kind])
            raise error_at(kernel, f"{pass_name} follows the plan's roles, stages, register budgets, ping-pong "
                                   f"and the producer's K/V order, and builds the rest as the plan passes make "
                                   f"it for them; this plan differs there: {why} (Note [The plan the lowerings "
                                   f"follow])")


def _first_difference(kind: str, ours: list[dict], theirs: list[dict]) -> str:
    if len(ours) != len(theirs):
        return f"it has {len(ours)} {kind} ops, the plan {len(theirs)}"
    for mine, default in zip(ours, theirs):
        for key in sorted(mine.keys() | default.keys()):
            if mine.get(key) != default.get(key):
                label = mine.get("name", default.get("name", ""))
                return (f"{kind} \"{label}\" has {key} = {_text(mine.get(key, '(none)'))}, the plan "
                        f"{_text(default.get(key, '(none)'))}")
    return f"its {kind} ops are in another order"


def _text(value) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)


def _module_op(module):
    return getattr(module, "operation", module)


def _module_body(module):
    return _module_op(module).regions[0].blocks[0]
