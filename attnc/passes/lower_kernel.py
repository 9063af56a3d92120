"""What `attn-lower-sm80` and `attn-lower-sm90a` share: the pass base `LowerKernel`,
`lower_kernel` (the L5 plan -> the target's kernel in upstream dialects, L6, inserted as a
`gpu.module`), the check of the plan they follow (Note [The plan the lowerings follow]),
and where they leave the kernels (`lowered_gpu_module`). The passes are lower_sm80.py
and lower_sm90a.py; the kernels are attnc/backend's (lowering.py, forward.py, sm80.py,
sm90a.py, sm90a_ws.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

from attnc.passes.registry import Pass

KERNELS_ATTR = "attn.kernels"
SPECIALIZATION_ATTR = "attn.specialization"


@dataclass(frozen=True)
class LowerKernel(Pass):
    """What attn-lower-sm80 and attn-lower-sm90a share: no options (the kernel's choices are
    the IR's: the plan, and attn-kernel-choices' attributes, Note [Kernel choices])."""

    target: ClassVar[str]

    def run(self, module) -> None:
        lower_kernel(module, pass_target=self.target)


def lower_kernel(module, pass_target: str | None = None) -> None:
    """Lower the plan of `module` to its target's kernel; `pass_target`: the target
    the calling pass builds for, which the plan must have."""
    from mlir import ir

    from attnc.backend.lowering import kernel_module_for
    from attnc.ir import attention_ops, error_at, get_str
    from attnc.passes import plan_ir
    from attnc.passes.pipelines import LOWERING

    ops = attention_ops(module)
    planned_target = get_str(ops[0], "target") if ops and "target" in ops[0].attributes else None
    pass_name = LOWERING.get(pass_target or planned_target, LOWERING["sm_80"])
    if lowered_gpu_module(module) is not None:
        raise error_at(ops[0] if ops else module, f"{pass_name} ran twice on this module")
    for op in ops:
        planned = get_str(op, "target") if "target" in op.attributes else None
        if pass_target is not None and planned is not None and planned != pass_target:
            instead = f"use {LOWERING[planned]}" if planned in LOWERING else "it has no lowering yet"
            raise error_at(op, f"{pass_name} lowers {pass_target} plans; this one is for {planned}: {instead}")
    result = compile_result_of(module, pass_name)      # first: attributes that contradict the types
    if planned_target == "sm_100a":
        # Note [The sm_100a kernel, op by op]: every op built as it stands, once verified
        from attnc.backend.sm100a import kernel_module_sm100a
        from attnc.ir import roles as R
        from attnc.passes.verify_pipeline import verify_pipeline
        from attnc.schedule.walk import check_walk
        for op in ops:
            plan_ir.require_roles(op, pass_name)
        if not R.verified_as_is(ops[0]):
            verify_pipeline(module)
        for op in ops:
            check_walk(op, pass_name)       # every role walks the blocks alike, or none does
        kernel_module, kernels, specialization = kernel_module_sm100a(result)
    else:
        _check_plan(module, pass_name)
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
    """The gpu.module attn-lower-sm80 or attn-lower-sm90a added, or None."""
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
    attn-lower-sm90a follow the L3-L5 IR. What they take from it as it stands:
    * the roles (plan_ir.followed_plan) -- sm_90a's producer warpgroup or none, its
      consumer warpgroups, each role's warps and setmaxnreg budget (`regs`), ping-pong and
      persistent CTAs (`pingpong`, `persistent` on attn.warp_specialize);
    * the K/V channel's stages, the buffers' places (Note [Buffers as placed] in
      attnc/backend/smem_layout.py), the mbarriers' places and counts (Note [Mbarriers as
      planned] there) and ping-pong's named barriers (Note [Turns as planned] in
      attnc/backend/wgmma_steps.py);
    * on sm_80 the whole role, in its order, synchronization included (Notes [Steps op by
      op] and [The role op by op] in attnc/backend/kv_steps.py and role_prologue.py), and
      on sm_90a the trips of the producer's and the consumers' KV loops likewise (Notes [Loads op by op] in
      attnc/backend/load_steps.py and [Overlapped steps op by op] in
      attnc/backend/wgmma_steps.py), with what stands around them -- persistent CTAs'
      walk over query blocks included -- checked op by op (Note [Roles followed in full]
      in attnc/ir/roles.py), once attn-verify-pipeline found them sound.
    Those come from the plan passes' options (attn-tile, attn-warp-specialize), from a
    user pass, or from a dump edited by hand. What the kernels build as their own is
    checked, so that an edit there is refused at the op rather than silently built
    otherwise: each channel's fields (its tiles, transport, space, roles: what the
    target's kernel moves: plan_ir.check_channels), the walk's order (`check_walk`) and
    the key range (Note [The key range as made]). The kernel's other choices are
    attn-kernel-choices' attributes (Note [Kernel choices])."""
    from attnc.ir import attention_ops, error_at
    from attnc.ir import roles as R
    from attnc.backend.wgmma_steps import turns_of
    from attnc.passes.plan_ir import check_channels, followed_plan, tile_of
    from attnc.schedule.walk import check_walk

    for kernel in attention_ops(module):
        tile = tile_of(kernel, pass_name)       # a tile no pass can plan, named as the lowering's
        plan = followed_plan(kernel, pass_name)
        ws = R.warp_specialize_of(kernel)
        ranges = R.value_of(ws.attributes[R.RANGES]) if R.RANGES in ws.attributes else {}
        _check_overlapped(kernel, pass_name)
        check_channels(kernel, tile, plan, pass_name)      # (refuses a plan no recipe makes)
        if not plan.pingpong:
            turns_of(kernel, False)             # Note [Turns as planned]: no stray named barriers
        check_walk(kernel, pass_name)           # Note [The walk over query blocks]
        for role in R.role_ops(kernel):         # Note [The key range as made]
            name = R.name_of(role)
            if name in ranges and ranges[name] != R.range_digest(role):
                raise error_at(role, f"{pass_name} builds the bounds of the KV loops and the tests of the branches "
                                     f"of role '{name}' as the key range attn-analyze-masks gives, and they were "
                                     f"edited since: edit the mask (or its kv_range function) instead (Note [The "
                                     f"key range as made] in attnc/ir/roles.py)")
        op_by_op = any(R.built_op_by_op(role) or R.trips_op_by_op(role) for role in R.role_ops(kernel))
        if op_by_op and not R.verified_as_is(kernel):
            # Notes [Steps op by op] and [Overlapped steps op by op]: the ops are built as
            # they stand, once the verifier has found their synchronization sound (Note
            # [Verified as it stands]).
            from attnc.passes.verify_pipeline import verify_pipeline
            verify_pipeline(module)


def _check_overlapped(kernel, pass_name: str) -> None:
    """sm_90a's consumer warpgroups fed by a producer, and its cooperative role, run their
    steps overlapped, as attn-overlap-gemms writes them (Notes [Overlapped steps in the
    IR] in attnc/schedule/overlap.py and [Overlapped cooperative steps in the IR] in
    overlap_coop.py); the lowering builds no other steps for them."""
    from attnc.ir import error_at
    from attnc.ir import roles as R

    target = R.attrs_of(kernel).get("target")
    for role in R.role_ops(kernel):
        name = R.name_of(role)
        computes = (R.trips_op_by_op(role) and name != "producer") or (target == "sm_90a" and name == "compute")
        if computes and not R.ops_in(R.role_block(role), (R.MMA_WAIT,)):
            raise error_at(role, f"{pass_name} builds the KV steps of sm_90a's consumer warpgroups and of its "
                                 f"cooperative role with their GEMMs overlapped, as attn-overlap-gemms writes "
                                 f"them (Notes [Overlapped steps in the IR] in attnc/schedule/overlap.py and "
                                 f"[Overlapped cooperative steps in the IR] in overlap_coop.py), and role "
                                 f"'{name}' has them one after the other: run attn-overlap-gemms after "
                                 f"attn-insert-pipelines")


def _module_op(module):
    return getattr(module, "operation", module)


def _module_body(module):
    return _module_op(module).regions[0].blocks[0]
