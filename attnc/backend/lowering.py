"""`attn-lower-sm80` and `attn-lower-sm90a` as a backend step: the L5 plan of one
attn.kernel -> a `ForwardSpec` -> kernel module (forward.py with sm80.py's or sm90a.py's
GEMMs and steps) -> PTX -> cubin -> bundle.

The spec is read from the IR, never from the source: tile sizes and warps from the
attributes attn-tile recorded, the K/V stage count from the `kv` channel that
attn-warp-specialize wrote, the hooks from the regions and from what
attn-analyze-masks recorded (variant_hooks.py), the kernel choices from the attributes
attn-kernel-choices recorded (a choice the IR lacks: its default, by the same rules:
attnc/passes/choice_defaults.py). A mask that is exactly no mask, causal
(`j <= i`) or bottom-right causal (`j <= i + (N - M)`) keeps the kernel's built-in
mask code; every other one runs through the analysis' tile classes and the mask_mod
region, and one that reads params (mask_kind "runtime") through a block map: a second
kernel in the same bundle, launched first, classifies every tile on the GPU
(blockmap.py) and the attention kernel reads it through a scratch buffer. A documents
mask gets document-aligned tiles from a tile table (qtiles.py), and where its other
conjuncts read only indices mostly no map: the table's runs give the ranges (Note
[Ranges from the runs] in run_ranges.py says where).
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from attnc.backend.bundle import kernel_symbol
from attnc.errors import AttncError
from attnc.ir import MASK_MOD, attention_ops, error_at, get_bool, get_int, get_str, region_block
from attnc.passes import plan_ir
from attnc.backend.variant_hooks import variant_hooks

@dataclass(frozen=True)
class BundleArtifacts:
    result: object          # the CompileResult the bundle was built from
    ptx: str
    cubin: bytes | None     # None: built without (build's `cubin`)
    manifest: dict
    files: dict[str, bytes]


@dataclass(frozen=True)
class ForwardLowering:
    spec: object            # ForwardSpec
    blockmap: object        # blockmap.BlockMapPlan, for a mask that reads params; else None
    tail_waves: int = 0     # Note [Longest tiles last] (qtiles.py): on the aligned tiles


def lowering_from_ir(result) -> ForwardLowering:
    try:
        return _lowering_from_ir(result)
    except AttncError as e:
        raise e.located(result.variant.filename, result.variant.source) from None


def _lowering_from_ir(result) -> ForwardLowering:
    from dataclasses import replace

    from attnc.backend.blockmap import blockmap_plan
    from attnc.backend.map_program import asked_steps, check_map_reads_table, refuse_asked_map, table_program_of
    from attnc.backend.kernel_abi import SMALL_GRID_CTAS_PER_SM
    from attnc.backend.kernel_spec import ForwardSpec, KernelChoices
    from attnc.backend.role_steps import role_steps
    from attnc.backend.qtiles import qtiles_plan, segment_conjunct
    from attnc.backend.run_ranges import run_rest
    from attnc.backend.spec_checks import KERNEL_TARGETS, SpecError
    from attnc.ir import roles as R
    from attnc.passes import kernel_choices
    from attnc.passes import choice_defaults as defaults
    from attnc.passes.hoist import check_levels
    from attnc.passes.analyze_masks import far_edge, mask_functions
    from attnc.passes.pipelines import LOWERING
    from attnc.passes.warp_specialize import banded
    from attnc.schedule.recipes import check_producer_registers

    variant = result.variant
    ops = attention_ops(result.module)
    if len(ops) != 1:
        raise AttncError(f"the backend builds one attn.kernel per module, found {len(ops)}")
    op = ops[0]
    kv = [c for c in plan_ir.channels(op) if c.name == "kv"] if op.name == "attn.kernel" else []
    target = get_str(op, "target") if "target" in op.attributes else None
    if not kv or target not in KERNEL_TARGETS:
        raise error_at(op, f"this backend builds {' and '.join(KERNEL_TARGETS)} kernels from their plan "
                           f"(attn-tile, attn-warp-specialize, ...), which the pipeline did not make: run "
                           f"the target's passes (`attnc passes` lists them), or --emit mlir for the IR")
    block_m, block_n = get_int(op, "block_m"), get_int(op, "block_n")
    # Note [The plan the lowerings follow] (lower_kernel.py): the roles, stages, budgets,
    # ping-pong and persistent CTAs are the IR's.
    plan = plan_ir.followed_plan(op, LOWERING[target])
    regs = dict(plan.regs)
    if plan.producer:
        consumer_regs = {regs[name] for name in regs if name.startswith("consumer")}
        if len(consumer_regs) != 1:
            other = next(name for name in regs if name.startswith("consumer") and regs[name] != regs["consumer0"])
            raise error_at(R.role_named(op, other), f"the consumer roles have different register budgets "
                                                    f"({sorted(consumer_regs)}); setmaxnreg gives every "
                                                    f"consumer warpgroup one")
        try:
            check_producer_registers(regs["producer"], consumer_regs.pop(), plan.consumers)
        except AttncError as e:
            raise error_at(R.role_named(op, "producer"), e.message) from None
    if target != "sm_90a" and plan.pingpong:
        raise error_at(R.warp_specialize_of(op), f"pingpong on attn.warp_specialize: {target} has no consumer "
                                                 f"warpgroups to take turns")
    if not plan.producer and regs.get("compute"):
        raise error_at(R.role_named(op, "compute"), f"the cooperative role 'compute' has a register budget "
                                                    f"(regs = {regs['compute']}); setmaxnreg moves registers "
                                                    f"between a producer and its consumers, so it must be 0")
    check_levels(op)            # attn-hoist's, on every copy of the hooks
    smem = _smem_layout(op, target, plan)
    steps = role_steps(op, target, plan.producer)
    mode = mask_mode(op, variant)
    runtime = mode is None and mask_functions(op).kind == "runtime"
    _check_map_range(op, runtime)
    blockmap = blockmap_plan(result, block_m, block_n) if runtime else None
    choices = kernel_choices.read(op)       # Note [Kernel choices]
    # Note [Ranges from the runs]: the map's record is unread where every mask says split = false
    split_given = choices.get("split_mask")
    for choice in kernel_choices.PER_OP:    # Note [Choices op by op]: read from each op
        choices.pop(choice.option, None)
    aligned = choices.pop("aligned_tiles", None)
    runs_asked = choices.pop("run_ranges", None)
    tail_waves = choices.pop("tail_waves", None)

    band, edge = banded(op), far_edge(op)       # the mask's, once for every lowering below

    def lowering(blockmap, waves: int = 0, check: bool = True) -> ForwardLowering:
        hooks = variant_hooks(op, variant, mode, blockmap, result.module)
        tiles = blockmap is not None and blockmap.qtiles is not None
        spec = ForwardSpec(
            variant=variant, target=target, block_m=block_m, block_n=block_n, plan=plan,
            symbol=kernel_symbol(variant.name, "fwd"),
            banded=band, far_edge=edge, blockmap=blockmap is not None,
            aligned_tiles=tiles, tiles_per_head=tiles and blockmap.per_head, steps=steps, smem=smem,
            hooks=hooks, choices=KernelChoices(**choices))
        try:
            spec = defaults.resolve(spec).check()
        except SpecError as e:
            at = part_op(op, e.part)
            raise error_at(at, f"the {target} kernel cannot be built: {e}", _part_note(at, e.part)) from None
        # Note [Choices op by op]: checked at each op that holds one, the default where none
        if check:
            kernel_choices.check_op_choices(op, spec)
        return ForwardLowering(replace(spec, steps=spec.steps.with_defaults(defaults.op_defaults(spec))),
                               blockmap, waves)

    # Note [Document-aligned tiles] (qtiles.py); the defaults of aligned_tiles, tail_waves and
    # run_ranges are choice_defaults.py's.
    found = segment_conjunct(region_block(op, MASK_MOD), list(variant.params)) if runtime else None
    # The plain lowering decides whether the table applies; built here only where it may,
    # and its ops' choices checked only where it is the kernel (the table's may differ: a
    # split test from the runs where the map records none).
    plain = None if found is None and not aligned and not runs_asked else lowering(blockmap, check=False)
    possible = plain is not None and found is not None and plain.spec.takes_tile_table
    if (aligned or runs_asked) and not possible:
        raise error_at(op, f"{'aligned_tiles' if aligned else 'run_ranges'} needs a kernel with one query block "
                           f"per CTA and no producer warpgroup, whose mask has a conjunct P[.., i] == P[.., j] "
                           f"(an i32 param, the same other indices) and reads a param (a block map)")
    if tail_waves and (not possible or aligned is False):
        raise error_at(op, "tail_waves orders the query tiles of a tile table, which this kernel does not "
                           "take (Note [Document-aligned tiles]: aligned_tiles)")
    if not (aligned if aligned is not None else defaults.aligned_tiles(possible)):
        if runs_asked:
            raise error_at(op, "run_ranges needs the aligned tiles (aligned_tiles is off)")
        if plain is None:
            return lowering(blockmap)
        kernel_choices.check_op_choices(op, plain.spec)
        return plain
    conjunct, ids = found
    if tail_waves and not plain.spec.choices.heads_first:
        raise error_at(op, "tail_waves orders the last query tiles of the heads-first grid (heads_first), "
                           "which this kernel does not run")
    table = table_program_of(op, ids.param)
    if tail_waves and not table.order:
        raise error_at(table.op, f"tail_waves = {tail_waves} orders the table's last tiles at attn.table_order, "
                                 f"which this program has not")
    waves = (defaults.tail_waves(plain.spec) if table.order else 0) if tail_waves is None else tail_waves
    small = SMALL_GRID_CTAS_PER_SM if plain.spec.choices.small_grid else 0
    tiles = replace(blockmap, qtiles=qtiles_plan(variant, block_m, ids, blockmap.per_head,
                                                 waves * plain.spec.resident_ctas, small))
    # Note [Ranges from the runs] (run_ranges.py)
    wanted = runs_asked if runs_asked is not None else defaults.run_ranges(plain.spec) and asked_steps(op) is None
    runs = run_rest(op, conjunct) if wanted else None
    if runs_asked and runs is None:
        raise error_at(op, "run_ranges needs a mask whose other conjuncts read no param and no float")
    if runs_asked:
        refuse_asked_map(op)
    if runs_asked is None and runs is not None and \
            not defaults.keeps_run_ranges(runs, blockmap.holds, split_given):
        runs = None
    if runs is None:
        check_map_reads_table(op, ids.param)
    return lowering(replace(tiles, runs=runs), waves)


def part_op(kernel, part: str | None):
    """The op of `kernel`'s L5 IR that holds `part` (a SpecError's, spec_checks.py's
    `_require`), where a failed check of it is located: the computing roles' first for
    their warps, the K/V channel for its stages, attn.warp_specialize for its flags, the
    first op holding a choice; the kernel for the rest."""
    from attnc.ir import roles as R
    from attnc.passes import kernel_choices

    if part == "warps":
        return next(r for r in R.role_ops(kernel) if R.name_of(r) != "producer")
    if part == "stages":
        return R.channel_named(kernel, "kv")
    if part in ("producer", "pingpong", "persistent"):
        return R.warp_specialize_of(kernel)
    choice = kernel_choices.BY_OPTION.get(part)
    if choice is None:
        return kernel
    return next((o for o in kernel_choices.choice_sites(kernel)[part] if choice.attr in o.attributes), kernel)


def _part_note(op, part: str | None) -> str | None:
    """Which op `op` is and the choice `part` it holds, where `part` is a choice (else
    None: error_at's note)."""
    from attnc.passes import kernel_choices

    choice = kernel_choices.BY_OPTION.get(part)
    if choice is None or choice.attr not in op.attributes:
        return None
    return kernel_choices.held_note(op, choice.attr)


def _check_map_range(op, runtime: bool) -> None:
    """The kernel walks the key blocks its block map's row keeps where the mask reads
    params, and the program reads its key range where the kernel does: from the map
    (attn.block_map_range) or from the mask analysis' function (attn.kv_range)."""
    from attnc.ir import roles as R
    from attnc.ir.tiles import BLOCK_MAP_RANGE

    reads = R.ops_in(op.regions[0].blocks[0], (BLOCK_MAP_RANGE,))
    if reads and not runtime:
        raise error_at(reads[0], f"{BLOCK_MAP_RANGE}: this kernel has no block map (its mask reads no params); "
                                 f"its key range is the mask analysis' (attn.kv_range)")
    if runtime and not reads:
        raise error_at(op, f"the kernel walks the key blocks its block map's row keeps, and its program reads no "
                           f"{BLOCK_MAP_RANGE} (run attn-analyze-masks again)")


def _smem_layout(op, target: str, plan):
    """The tiles as attn-alloc-smem placed them (Note [Buffers as placed] in
    smem_layout.py) and the mbarriers after them (Note [Mbarriers as planned])."""
    from attnc.backend.kernel_spec import producer_barriers
    from attnc.backend.smem_layout import LayoutError, Mbarrier, layout_of
    from attnc.ir import roles as R
    from attnc.passes.pipelines import LOWERING
    from attnc.schedule.alloc import lay_out_smem

    wanted, _ = lay_out_smem(plan_ir.recipe_of(op, LOWERING[target]), plan_ir.tile_of(op, LOWERING[target]))
    inits = {R.name_of(b): b for b in R.mbarrier_ops(op)}
    barriers = [Mbarrier.of(R.attrs_of(b)) for b in inits.values()]
    stages = {t: c.stages for c in plan_ir.channels(op) for t in c.tile}
    needed = producer_barriers(plan.persistent) if plan.producer else ()
    try:
        return layout_of(plan_ir.buffers(op), list(wanted), target, plan.stages, barriers, needed, stages)
    except LayoutError as e:
        at = inits.get(e.buffer) or plan_ir.buffer_channels(op).get(e.buffer) or \
            next((c for c in R.channel_ops(op) if e.buffer in R.attrs_of(c).get("tile", ())), op)
        raise error_at(at, e.message) from None


def kernel_module_for(result):
    """The kernel module of a compiled (L5) module, the manifest entries of its kernels
    in launch order, and the specialization record; what attn-lower-sm80 inserts."""
    from attnc.backend.blockmap_kernel import emit_blockmap_kernel
    from attnc.backend.qtiles import emit_qtiles_kernel
    from attnc.backend.kernel_module import add_small_grid_kernel, build_kernel_module
    from attnc.backend.forward import SMEM_SYMBOL

    lowered = lowering_from_ir(result)
    spec, blockmap = lowered.spec, lowered.blockmap
    with result.module.context:
        kernel_module, abi = build_kernel_module(spec, result.module.context)
        # Note [Small grids] (kernel_abi.py); an sm_80 kernel has no default register bound to drop.
        small = add_small_grid_kernel(kernel_module, spec) if spec.choices.small_grid else None
        if blockmap is not None:
            gpu_module = next(o for o in kernel_module.body.operations if o.operation.name == "gpu.module")
            if blockmap.built:
                emit_blockmap_kernel(blockmap, result, ir.InsertionPoint(gpu_module.regions[0].blocks[0]))
            if blockmap.qtiles is not None:
                emit_qtiles_kernel(blockmap.qtiles, result, ir.InsertionPoint(gpu_module.regions[0].blocks[0]),
                                   SMEM_SYMBOL)
    kernel = abi.manifest_kernel("attn_fwd")
    kernel["params"] = [_bind_dim(p, result.variant) for p in kernel["params"]]
    kernel["grid"] = [[_bind_factor(f, result.variant) for f in g] for g in kernel["grid"]]
    if small is not None:
        kernel["small_grid"] = {**small, "grid": [[_bind_factor(f, result.variant) for f in g]
                                                  for g in small["grid"]]}
    table = blockmap.qtiles if blockmap is not None else None
    masks = [blockmap.kernel] if blockmap is not None and blockmap.built else []
    if table is not None:
        masks.insert(0, table.kernel)         # the table, then the map over its tiles
    kernels = masks + [kernel]
    specialization = {**abi.specialization, "blockmap": blockmap is not None and blockmap.built,
                      "run_ranges": blockmap is not None and not blockmap.built,
                      "tail_per_sm": table.tail_per_sm if table is not None else 0}
    return kernel_module, kernels, specialization


def require_plan(module) -> None:
    """Code asked of a module whose pipeline stopped before the plan (no target, no K/V
    channel): say so, rather than what the lowering would find missing first."""
    for op in attention_ops(module):
        if "target" not in op.attributes or op.name != "attn.kernel" or not plan_ir.channels(op):
            raise error_at(op, "the pass pipeline stops before the plan (attn-warp-specialize and the passes "
                               "after it) and has no lowering, so there is no kernel to emit: --emit mlir "
                               "shows the IR where it stops; for code, end it with the target's passes "
                               "(`attnc passes` lists them)")


def build(result, *, cubin: bool = True) -> BundleArtifacts:
    """Everything a bundle holds, from the gpu.module the target's lowering pass put in the
    module (running the plan's lowering first if the pipeline did not); without
    `cubin`, the PTX alone (`--emit ptx`, a bundle the runtime JITs: ptxas runs only for a
    register bound's trial, Note [The bound the assembler decides] in register_bound.py)."""
    import json

    from attnc.backend.bundle import code_files, variant_manifest
    from attnc.backend.register_bound import bounded_code
    from attnc.passes.lower_kernel import (KERNELS_ATTR, SPECIALIZATION_ATTR, lower_kernel,
                                         lowered_gpu_module)

    try:
        if lowered_gpu_module(result.module) is None:
            require_plan(result.module)
            lower_kernel(result.module)
    except AttncError as e:
        raise e.located(result.variant.filename, result.variant.source) from None
    gpu_module = lowered_gpu_module(result.module)
    kernels = json.loads(ir.StringAttr(gpu_module.attributes[KERNELS_ATTR]).value)
    specialization = json.loads(ir.StringAttr(gpu_module.attributes[SPECIALIZATION_ATTR]).value)
    with result.module.context, ir.Location.unknown():      # a copy, not the text printed and parsed
        kernel_module = ir.Module.create()
        kernel_module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
        gpu_module.clone(ip=ir.InsertionPoint(kernel_module.body))
    target = specialization["target"]
    ptx, specialization = bounded_code(kernel_module, target, kernels[-1]["symbol"], specialization)
    if cubin:
        from attnc.passes.hoist import lanes_shared
        assembled = _assembled(ptx, target, specialization, kernels[-1], lanes_shared(result.module))
        blobs = {"cubin": assembled.cubin}
        kernels = _with_resources(kernels, assembled.info_log)
    else:
        blobs = {}
    blobs["ptx"] = ptx.encode()
    names = {kind: name for kind, name in code_files("attn_fwd", target).items() if kind in blobs}
    manifest = variant_manifest(result.variant, target=target, kernels=kernels, code=names,
                                blobs=blobs, specialization=specialization)
    files = {names[kind]: blob for kind, blob in blobs.items()}
    return BundleArtifacts(result, ptx, blobs.get("cubin"), manifest, files)


def _assembled(ptx: str, target: str, specialization: dict, kernel: dict, spills_expected: bool = False):
    """The cubin of `ptx` with the assembler's log (a CubinResult); `spills_expected`:
    nvJitLink is expected to spill it (Note [The assembly that spills less] in cubin.py). A
    register bound the assembler cannot meet (a min_ctas_per_sm given to
    attn-kernel-choices: every default assembles) is the option's refusal."""
    from attnc.backend.cubin import CubinError, ptx_to_cubin
    from attnc.schedule.recipes import REGISTER_FILE
    try:
        return ptx_to_cubin(ptx, target, spills_expected=spills_expected)
    except CubinError as e:
        ctas = specialization.get("min_ctas_per_sm") or 0
        if ctas <= 1:
            raise
        threads = kernel["block"][0] * kernel["block"][1] * kernel["block"][2]
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        said = next((line for line in lines if "register" in line.lower()), lines[-1] if lines else "")
        raise AttncError(f"min_ctas_per_sm={ctas}: the assembler cannot fit the kernel into the "
                         f"{REGISTER_FILE // (ctas * threads)} registers a thread that {ctas} CTAs of {threads} threads "
                         f"leave on an SM ({said[:200]}): lower min_ctas_per_sm (attn-kernel-choices)",
                         filename="attnc") from None


def _with_resources(kernels: list[dict], log: str) -> list[dict]:
    """The manifest's kernels, each with what the assembler's log reports for it in the
    cubin (`resources`: registers, spilled bytes, stack frame)."""
    from attnc.backend.cubin import parse_resource_usage
    from attnc_runtime.manifest_schema import RESOURCE_FIELDS
    usage = parse_resource_usage(log)
    return [{**k, "resources": {name: getattr(u, name) for name in RESOURCE_FIELDS}}
            if (u := usage.get(k["symbol"])) is not None else k for k in kernels]


# The kernel's ABI names the roles of the dims; the variant names them its own way
# (or fixes them, as MQA's `1`).
_ROLE_OF = {"B": "batch", "M": "seq_q", "N": "seq_k", "H": "heads", "HKV": "heads_kv"}


def _bind_factor(f, variant):
    """A grid factor of the ABI (int, dim role, ["cdiv", role, n] or ["min_sms", factor,
    ...]) in the variant's names, folded to an int where the variant fixes the size (but
    for min_sms, which the device decides)."""
    if isinstance(f, int):
        return f
    if isinstance(f, str):
        return _dim_value(f, variant)
    if f[0] == "min_sms":
        return ["min_sms"] + [_bind_factor(g, variant) for g in f[1:]]
    _, role, n = f
    value = _dim_value(role, variant)
    return -(-value // n) if isinstance(value, int) else ["cdiv", value, n]


def _dim_value(role: str, variant):
    return getattr(variant, _ROLE_OF[role])


def _bind_dim(p: dict, variant) -> dict:
    if p["kind"] != "dim" or p["name"] not in _ROLE_OF:
        return p
    value = getattr(variant, _ROLE_OF[p["name"]])
    if isinstance(value, int):
        return {"kind": "const", "value": value, "type": p["type"]}
    return {**p, "name": value}


# --- mask recognition: exact, on the affine form of the mask_mod region ------------------
def mask_mode(op, variant) -> str | None:
    """'none', 'causal' or 'causal_bottom_right', from the mask region's affine form;
    None for any other mask (compiled from the region and the mask analysis)."""
    if not get_bool(op, "has_mask_mod"):
        return "none"
    form = _affine_comparison(region_block(op, MASK_MOD))
    causal = {"j": 1, "i": -1}
    bottom_right = _add(causal, _add({variant.seq_k: -1}, {variant.seq_q: 1}))
    if form == causal:
        return "causal"
    if form == bottom_right:
        return "causal_bottom_right"
    return None


def _affine_comparison(block) -> dict | None:
    """The mask as `E <= 0` with E an affine form {symbol: coeff} over i, j and the dims,
    or None when the region is anything else (one integer comparison of affine values)."""
    names = ("b", "h", "i", "j")
    env = {arg: {names[k]: 1} for k, arg in enumerate(block.arguments)}
    ops = list(block.operations)
    for o in ops[:-2]:
        value = _affine_op(o, env)
        if value is None:
            return None
        env[o.results[0]] = value
    cmp, terminator = ops[-2], ops[-1]
    if cmp.name != "arith.cmpi" or terminator.operands[0] != cmp.results[0]:
        return None
    a, b = (env.get(v) for v in cmp.operands)
    if a is None or b is None:
        return None
    pred = str(cmp.attributes["predicate"]).split(":")[0].strip()
    forms = {"3": _add(a, _neg(b)),                          # sle: a - b <= 0
             "2": _add(_add(a, _neg(b)), {1: 1}),            # slt: a - b + 1 <= 0
             "5": _add(b, _neg(a)),                          # sge: b - a <= 0
             "4": _add(_add(b, _neg(a)), {1: 1})}            # sgt: b - a + 1 <= 0
    return _clean(forms[pred]) if pred in forms else None


def _affine_op(o, env):
    name = o.name
    if name == "arith.constant":
        attr = o.attributes["value"]
        return {1: ir.IntegerAttr(attr).value} if isinstance(attr, ir.IntegerAttr) else None
    if name == "attn.dim":
        return {ir.StringAttr(o.attributes["name"]).value: 1}
    args = [env.get(v) for v in o.operands]
    if any(a is None for a in args):
        return None
    if name == "arith.addi":
        return _add(*args)
    if name == "arith.subi":
        return _add(args[0], _neg(args[1]))
    if name == "arith.muli":
        consts = [a for a in args if set(a) <= {1}]
        if not consts:
            return None
        other = args[1] if args[0] is consts[0] else args[0]
        return {k: v * consts[0].get(1, 0) for k, v in other.items()}
    return None


def _add(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return _clean(out)


def _neg(a: dict) -> dict:
    return {k: -v for k, v in a.items()}


def _clean(a: dict) -> dict:
    return {k: v for k, v in a.items() if v != 0}
