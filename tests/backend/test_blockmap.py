"""The block map without a GPU: its plan (scratch, launch, ABI) for the variants that need
one, the manifest and launch plan the runtime makes of it, the kernel assembled for sm_80
with nvJitLink (no spills, the votes and CTA reductions of Note [Block map kernel]), the
mask region cloned into code, and the attention kernels that read the map.
(The map's values are checked on a GPU: test_blockmap_gpu.py.)"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from mlir import ir
from mlir.dialects import func

from attnc.backend import cubin, ptx
from attnc.backend.blockmap import BlockMapPlan, MapNames, blockmap_plan, emit_mask
from attnc.backend.blockmap_hooks import blockmap_skip
from attnc.backend.blockmap_intervals import RANGE_UNROLL
from attnc.backend.blockmap_kernel import build_blockmap_module
from attnc.backend.bundle import code_files, variant_manifest
from attnc.backend.mask_hooks import KvCtx
from attnc.backend.nvgpu_builders import Emit
from attnc.driver import compile_mlir
from attnc.errors import AttncError
from attnc.ir import MASK_MOD, attention_ops, region_block
from attnc.testing import build_with
from attnc.testing import kernel_ptx as entry_ptx
from attnc_runtime import Bundle, Kernel
from attnc_runtime.errors import ManifestError
from attnc_runtime.testing import FakePlatform, FakeTensor

ROOT = Path(__file__).resolve().parents[2]
DOCS_SINK = (ROOT / "examples" / "docs_sink.attn").read_text()


def variant(mask: str, params: str, q_seq: str = "M", k_seq: str = "N") -> str:
    return f"""attention v {{
  q: f16[B, H, {q_seq}, 64]
  k: f16[B, H, {k_seq}, 64]
  v: f16[B, H, {k_seq}, 64]
  {params}
  mask_mod(b, h, i, j) = {mask}
  out o: f16[B, H, {q_seq}, 64]
}}"""


PER_HEAD = variant("j <= i and i - j < win[h]", "param sinks: f32[H]\n  param win: i32[H]")
FLOATS = variant("(t[b, j] + float(u[h % 4]) > 0.5 and ((j - i) // 7) % 3 != 1) or i == j",
                 "param t: f32[B, N]\n  param u: i32[4]")


@functools.lru_cache(maxsize=None)
def compiled(source: str):
    return compile_mlir(source, "v.attn")


def scratch(*bytes_) -> dict:
    return {"kind": "scratch", "name": "blockmap", "bytes": list(bytes_)}


# ---------------------------------------------------------------- the plan

def test_docs_sink_plan_has_one_head_slot_and_reads_doc_only():
    plan = blockmap_plan(compiled(DOCS_SINK), 128, 64)
    assert not plan.per_head and plan.head_slots == 1
    assert plan.scratch == scratch("B", 1, ["cdiv", "M", 128], ["cdiv", "N", 64])
    assert plan.kernel == {
        "name": "blockmap", "symbol": "attnc_docs_sink_blockmap", "block": [128, 1, 1],
        "dynamic_smem_bytes": 0,
        "grid": [[["cdiv", "N", 1024]], [["cdiv", "M", 128]], ["B"]],       # 4 x 4 key blocks a CTA
        "params": [plan.scratch,
                   {"kind": "dim", "name": "B", "type": "i32"}, {"kind": "dim", "name": "H", "type": "i32"},
                   {"kind": "dim", "name": "M", "type": "i32"}, {"kind": "dim", "name": "N", "type": "i32"},
                   {"kind": "ptr", "tensor": "doc"}],                  # no strides: doc is contiguous
        "role": "mask", "fills": ["blockmap"]}      # the runtime may keep the map (Note [Reused masks])


def test_a_mask_reading_h_gets_a_slot_per_head():
    plan = blockmap_plan(compiled(PER_HEAD), 64, 128)
    assert plan.per_head and plan.head_slots == "H"
    assert plan.scratch == scratch("B", "H", ["cdiv", "M", 64], ["cdiv", "N", 128])
    assert plan.kernel["grid"][2] == ["B", "H"]
    assert [p.name for p in plan.params] == ["win"]           # sinks is not read by the mask


def test_fixed_sequence_lengths_give_constant_factors():
    plan = blockmap_plan(compiled(variant("doc[b, i] == doc[b, j]", "param doc: i32[B, 1500]",
                                          q_seq="1000", k_seq="1500")), 128, 64)
    assert plan.scratch == scratch("B", 1, 8, 24)
    assert plan.kernel["grid"][:2] == [[2], [8]]                  # 24 key blocks, 16 a CTA


def test_refusals():
    with pytest.raises(AttncError, match="needs a mask_mod"):
        blockmap_plan(compiled((ROOT / "examples" / "mha.attn").read_text()), 128, 64)
    with pytest.raises(AttncError, match="cannot be walked"):
        blockmap_plan(compiled(DOCS_SINK), 16, 16)


# ---------------------------------------------------------------- manifest and runtime

def attention_kernel(scratch_param: dict) -> dict:
    """A kernel that reads the map as the attention kernel must (Note [Block map ABI])."""
    return {"name": "attn_fwd", "symbol": "attn", "block": [128, 1, 1], "dynamic_smem_bytes": 0,
            "grid": [[["cdiv", "M", 128]], ["H"], ["B"]],
            "params": [{"kind": "ptr", "tensor": "q"}, scratch_param]}


def bundle_kernel(result, kernels) -> Kernel:
    blobs = {"cubin": b"\0", "ptx": b"//\n"}
    manifest = variant_manifest(result.variant, target="sm_80", kernels=kernels,
                                code=code_files("attn_fwd", "sm_80"), blobs=blobs)
    files = {manifest["code"][kind]: blob for kind, blob in blobs.items()}
    return Kernel(Bundle.from_files(manifest, files), FakePlatform())


def test_the_runtime_sizes_the_scratch_and_launches_the_map_first():
    result = compiled(DOCS_SINK)
    plan = blockmap_plan(result, 128, 64)
    kernel = bundle_kernel(result, [plan.kernel, attention_kernel(plan.scratch)])
    B, H, M, N = 3, 4, 1000, 1000
    launch = kernel.plan(q=FakeTensor((B, H, M, 64), "bf16"), k=FakeTensor((B, H, N, 64), "bf16"),
                         v=FakeTensor((B, H, N, 64), "bf16"), doc=FakeTensor((B, N), "i32"),
                         sinks=FakeTensor((H,), "f32"))
    assert launch.scratch == {"blockmap": B * 1 * 8 * 16}
    assert launch.grids == ((1, 8, B), (8, H, B))                 # 16 key blocks, 16 a CTA


def test_a_scratch_sized_differently_by_the_attention_kernel_is_refused():
    result = compiled(DOCS_SINK)
    plan = blockmap_plan(result, 128, 64)
    wrong = blockmap_plan(result, 128, 128).scratch
    with pytest.raises(ManifestError, match="scratch 'blockmap' is sized differently"):
        bundle_kernel(result, [plan.kernel, attention_kernel(wrong)])


# ---------------------------------------------------------------- the kernel

@functools.lru_cache(maxsize=None)
def kernel_ptx(source: str, block_m: int, block_n: int) -> tuple[str, cubin.ResourceUsage]:
    result = compiled(source)
    plan = blockmap_plan(result, block_m, block_n)
    text = ptx.to_ptx(build_blockmap_module(plan, result), "sm_80")
    return text, cubin.resource_usage(text, "sm_80")[plan.symbol]


@pytest.mark.parametrize("source, block_m, block_n", [
    (DOCS_SINK, 128, 64), (DOCS_SINK, 128, 128), (PER_HEAD, 64, 128),
    (FLOATS, 64, 48),                         # 48 does not divide 128: the flat element walk
])
def test_kernel_assembles_for_sm80_without_spills(source, block_m, block_n):
    text, usage = kernel_ptx(source, block_m, block_n)
    assert not usage.spills and usage.stack_frame == 0, usage
    assert usage.registers <= 64, usage
    for needle in ("vote.sync.any.pred", "vote.sync.all.pred", "bar.red.or.pred", "bar.red.and.pred",
                   "st.global.b8"):
        assert needle in text, needle
    assert "__nv_" not in text


def test_doc_of_the_key_column_is_loaded_once_per_thread():
    """Thread t holds key column t % 64: doc[b, j] is hoisted out of the tile walk, so the
    loop loads doc[b, i] only, UNROLL = 4 times per pass. (Before it, each warp's step 2
    loads doc[b, i] and doc[b, j] at its sampled element, and walks both over the tile:
    RANGE_UNROLL loads in the first trip of each, straight-line, and as many in each
    one's loop of further trips.) Every param load is hooks.load_param's invariant one,
    issued through the read-only cache as in the attention kernel."""
    text, _ = kernel_ptx(DOCS_SINK, 128, 64)
    loops = re.findall(r"\$L__BB0_\d+:\n(.*?)bra", text, re.S)
    walk = [body for body in loops if "vote.sync.all" in body]
    assert len(walk) == 1 and walk[0].count("ld.global.nc.b32") == 4
    assert text.count("ld.global.nc.b32") == 5 + 2 + 4 * RANGE_UNROLL
    assert "ld.global.b32" not in text


def test_the_static_tile_class_comes_first():
    """attn-analyze-masks' tile class (whose ops carry the names it gave them) is inlined
    into the kernel, to settle the tiles it can prove (the causal part of documents)."""
    result = compiled(DOCS_SINK)
    plan = blockmap_plan(result, 128, 64)
    text = build_blockmap_module(plan, result).operation.get_asm(enable_debug_info=True)
    assert 'loc("may_keep"' in text and 'loc("tile_class"' in text


def emit_mask_text(source: str, never_empty: frozenset[str]) -> str:
    """The mask region of `source` emitted into a function of (b, h, i, j, dims..., pointers...)."""
    result = compiled(source)
    block = region_block(attention_ops(result.module)[0], MASK_MOD)
    names = MapNames(result.variant.params, never_empty)
    return emit_i1_function(result, list(result.variant.dims),
                            lambda e, b, h, i, j: emit_mask(e, block, [b, h, i, j], names))


def emit_i1_function(result, dim_keys: list[str], body) -> str:
    """A function of (b, h, i, j, dims..., pointers...) returning `body(e, b, h, i, j)`,
    an i1; `e` reads the dims as `dim_keys` name them and pointers as `ptr:<param>`."""
    keys = dim_keys + [f"ptr:{p.name}" for p in result.variant.params]
    with result.module.context, ir.Location.unknown():
        module = ir.Module.create()
        i32, ptr = ir.IntegerType.get_signless(32), ir.Type.parse("!llvm.ptr<1>")
        types = [i32] * 4 + [ptr if k.startswith("ptr:") else i32 for k in keys]
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("keep", ir.FunctionType.get(types, [ir.IntegerType.get_signless(1)]))
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            b, h, i, j, *rest = entry.arguments
            func.ReturnOp([body(Emit(dict(zip(keys, rest))), b, h, i, j)])
        assert module.operation.verify()
        return str(module)


def test_emit_mask_clones_the_region():
    text = emit_mask_text(FLOATS, blockmap_plan(compiled(FLOATS), 64, 48).never_empty)
    assert "attn." not in text and "floordivsi" not in text
    assert text.count("llvm.load") == 2 and text.count("invariant") == 2    # hooks.load_param's loads
    assert "scf.if" not in text                           # t: f32[B, N], u: i32[4]: never empty there
    assert text.count("arith.divsi") == 3                  # h % 4, (j - i) // 7, ... % 3: floor-corrected
    assert text.count("arith.minsi") == 3 and text.count("arith.maxsi") == 3     # 3 clamped indices


def test_emit_mask_guards_a_param_that_may_be_empty():
    """A dim outside the block-map grid's (P here) may be 0: its param is read under a
    guard, as in the attention kernel (Note [Bounds-safe param reads] in hooks.py)."""
    source = variant("j <= i + w[b % P]", "param w: i32[P]")
    plan = blockmap_plan(compiled(source), 128, 64)
    assert plan.never_empty == {"B", "M", "N"}
    text = emit_mask_text(source, plan.never_empty)
    assert text.count("scf.if") == 1 and text.count("llvm.load") == 1


# ---------------------------------------------------------------- the attention kernel's hooks

@functools.lru_cache(maxsize=None)
def map_bundle(arch: str, block_m: int, block_n: int, **options):
    """DOCS_SINK's bundle whose attention kernel reads the block map on the grid's query
    blocks (no tile table), at block_m x block_n tiles."""
    art = build_with(DOCS_SINK, "docs_sink.attn", arch, aligned_tiles=False, block_m=block_m, block_n=block_n,
                     **options)
    assert [k["name"] for k in art.manifest["kernels"]] == ["blockmap", "attn_fwd"]
    spec = art.manifest["specialization"]
    assert (spec["block_m"], spec["block_n"]) == (block_m, block_n) and spec["blockmap"]
    return art


def test_hooks_build_into_the_sm80_kernel():
    art = map_bundle("sm_80", 128, 64)
    attention = art.manifest["kernels"][-1]
    plan = blockmap_plan(compiled(DOCS_SINK), 128, 64)
    assert art.manifest["kernels"][0]["params"][0] == plan.scratch
    assert plan.scratch in attention["params"]
    usage = cubin.resource_usage(art.ptx, "sm_80")[attention["symbol"]]
    assert not usage.spills, usage
    text = entry_ptx(art.ptx, attention["symbol"])
    assert "redux.sync.min.s32" in text and "redux.sync.max.s32" in text
    assert "redux.sync.add.s32" in text                    # the count of FULL blocks (the full range)
    assert "ld.global.nc.b8" in text                       # the row scan, and tile_partial in the loop (invariant)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_q_is_in_flight_while_the_map_row_is_read(target):
    """Note [Q before the range] (forward_loads.py): Q's copies are issued and committed as a group
    before the map's row is read, so they fly while the range is computed (on sm_80 without
    the first K/V block's copies, which early_first issues there too)."""
    art = map_bundle(target, 64, 64, **({"early_first": False} if target == "sm_80" else {}))
    attention = art.manifest["kernels"][-1]
    text = entry_ptx(art.ptx, attention["symbol"])
    before = text[text.index(".entry"):text.index("ld.global.nc.b8")]
    threads = attention["block"][0]
    assert before.count("cp.async.cg.shared.global") == 64 * 64 * 2 // 16 // threads     # all of Q
    assert before.rindex("cp.async.cg.shared.global") < before.rindex("cp.async.commit_group")


def test_hooks_refuse_other_tile_sizes():
    plan = blockmap_plan(compiled(DOCS_SINK), 128, 64)
    skip = blockmap_skip(plan)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.create()
        i32 = ir.IntegerType.get_signless(32)
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("f", ir.FunctionType.get([i32] * 5 + [ir.Type.parse("!llvm.ptr<1>")], []))
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            m_block, b, h, M, N, blockmap = entry.arguments
            e = Emit({"scratch:blockmap": blockmap})
            with pytest.raises(AttncError, match="128x64 tiles, the attention kernel 128x128"):
                skip(e, KvCtx(m_block, b, h, M, N, 128, 128), m_block)


def test_plan_is_a_frozen_value():
    plan = blockmap_plan(compiled(DOCS_SINK), 128, 64)
    assert isinstance(plan, BlockMapPlan) and hash(plan) == hash(blockmap_plan(compiled(DOCS_SINK), 128, 64))


def test_the_gpu_test_reads_the_map_bytes_as_defined():
    from attnc.backend import blockmap
    from tests.backend import test_blockmap_gpu as gpu

    assert (gpu.CLASS_BITS, gpu.RESIDUAL_HOLDS, gpu.INTERVAL_HOLDS) == \
        (blockmap.CLASS_BITS, blockmap.RESIDUAL_HOLDS, blockmap.INTERVAL_HOLDS)
