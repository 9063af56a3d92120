"""The parameters of an sm_100a kernel as its manifest lists them (the runtime passes
them in this order: attnc_runtime/params.py)."""
from __future__ import annotations

from mlir import ir

from attnc.backend.sm100a_ops import out_bytes
from attnc.backend.sm100a_values import channel_of, swizzle_bytes
from attnc.ir import DIM, get_int
from attnc.ir import roles as R
from attnc.ir.tiles import KV_RANGE


def read_dims(kernel, variant, module) -> list[str]:
    """The dims a shape, a hook or the mask analysis' range function reads: a `dim`
    declared and never used is not a parameter, so a launch need not pass it (as on the
    other targets). The function takes every dim the mask may name (attn.kv_range passes
    them all); KernelNames.scan_function records those it reads."""
    from attnc.analysis.tile_classes import KV_ARGS
    from attnc.backend.hooks import KernelNames
    from attnc.passes.analyze_masks import mask_functions

    names = KernelNames(variant, kernel, module)
    if "kv_range_fn" in kernel.attributes:
        analysis = mask_functions(kernel)
        names.scan_function(analysis.kv_range, analysis.dims, len(KV_ARGS))

    def collect(op):
        if op.name == DIM and any(use.owner.name != KV_RANGE for use in op.result.uses):
            names.use_dim(ir.StringAttr(op.attributes["name"]).value)
        return ir.WalkResult.ADVANCE

    kernel.walk(collect)
    shapes = {d for t in (*variant.inputs, *variant.outputs) for d in t.shape if isinstance(d, str)}
    return [d for d in variant.dims if d in shapes or d in names.used_dims]


def kernel_params(kernel, variant, module, blockmap=None) -> list[dict]:
    """The kernel's parameters: the tensor maps of q, k, v and o (Note [O through TMA] in
    sm100a.py), the lse with its strides (and o with its strides, with a tile table), the
    dims it reads, the hooks' tensors, the block map's scratch and the tile table's."""
    i32, i64, ptr = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64), ir.Type.parse("!llvm.ptr")
    block_m, block_n = get_int(kernel, "block_m"), get_int(kernel, "block_n")
    out = []
    swizzles = {R.name_of(c): swizzle_bytes(channel_of(c)) for c in R.channel_ops(kernel)
                if R.name_of(c) in ("q", "kv", "o")}
    for name, rows, chan, size in (("q", block_m, "q", 2), ("k", block_n, "kv", 2), ("v", block_n, "kv", 2),
                                   ("o", block_m, "o", out_bytes(kernel))):
        box = [1, 1, rows, swizzles[chan] // size]
        out.append({"key": f"tmap:{name}", "type": ptr,
                    "abi": {"kind": "tensor_map", "tensor": name, "box": box, "swizzle": swizzles[chan]}})
    table = blockmap is not None and blockmap.qtiles is not None
    for spec in variant.outputs:
        if spec.name == "o" and not table:  # O's rows through threads too (Note [Tile table on sm_100a])
            continue
        out.append({"key": f"ptr:{spec.name}", "type": ptr, "abi": {"kind": "ptr", "tensor": spec.name}})
        for axis in range(len(spec.shape) - 1):
            out.append({"key": f"stride:{spec.name}:{axis}", "type": i64,
                        "abi": {"kind": "stride", "tensor": spec.name, "axis": axis, "type": "i64"}})
    for d in read_dims(kernel, variant, module):
        out.append({"key": f"dim:{d}", "type": i32, "abi": {"kind": "dim", "name": d, "type": "i32"}})
    for t in variant.params:             # the hooks' tensors (hooks.load_param)
        out.append({"key": f"ptr:{t.name}", "type": ir.Type.parse("!llvm.ptr<1>"), "abi": {"kind": "ptr", "tensor": t.name}})
    if blockmap is not None and blockmap.built:        # Note [Block map ABI] in blockmap.py
        from attnc.backend.blockmap_hooks import blockmap_param
        out.append({"key": blockmap_param(blockmap).key, "type": ir.Type.parse("!llvm.ptr<1>"),
                    "abi": blockmap.scratch})
    if table:
        from attnc.backend.qtiles import qtiles_param
        out.append({"key": qtiles_param().key, "type": ir.Type.parse("!llvm.ptr<1>"),
                    "abi": blockmap.qtiles.scratch})
    return out
