"""Variants that fix B, H or M to numbers and hooks whose expressions are integers:
the manifest's grid and ABI use constants where the variant fixes a size, and the
L1 regions of score_mod and sink return f32 whatever the expression's type."""
from attnc.backend.blockmap import TILES
from attnc.passes.mask_kernels import GROUPS
from attnc.driver import CompileOptions, compile_mlir
from attnc.ir import SCORE_MOD, SINK, attention_ops, region_block, yielded
from attnc.testing import build_with
from attnc_runtime.manifest import parse_manifest

FIXED = """attention fixed {
  q: f16[2, 4, 100, 64]
  k: f16[2, 2, N, 64]
  v: f16[2, 2, N, 64]
  param doc: i32[2, N]
  score_mod(s, b, h, i, j) = s + (i - j) % 3
  mask_mod(b, h, i, j) = doc[b, i] == doc[b, j]
  sink(h) = h % 3
  out o: bf16[2, 4, 100, 64]
}
"""


def test_integer_hooks_yield_f32():
    result = compile_mlir(FIXED, "fixed.attn", CompileOptions(arch="sm_80", pass_pipeline=""))
    op = attention_ops(result.module)[0]
    for region in (SCORE_MOD, SINK):
        assert str(yielded(region_block(op, region)).type) == "f32"


def test_fixed_sizes_become_constants_in_grid_and_abi():
    art = build_with(FIXED, "fixed.attn", "sm_80", cubin=False)
    manifest = parse_manifest(art.manifest)
    table, attention = art.manifest["kernels"]      # the table's runs give the ranges: no map
    mapped = build_with(FIXED, "fixed.attn", "sm_80", run_ranges="false", cubin=False)
    blockmap = mapped.manifest["kernels"][1]
    assert parse_manifest(mapped.manifest).dims == ("N",)
    # H, the tile table's length, B: a block map's kernel takes its heads first (Note [Heads
    # first]); the table holds 5 * cdiv(M, 4 * block_m) tiles (Note [Document-aligned tiles])
    block_m = art.manifest["specialization"]["block_m"]
    assert attention["grid"] == [[4], [5, -(-100 // (4 * block_m))], [2]]
    assert table["grid"] == [[1], [1], [2]]
    consts = [p for p in attention["params"] if p["kind"] == "const"]
    assert [p["value"] for p in consts] == [100, 4, 2]              # M, H, HKV
    # Note [Block map kernel]: one CTA per GROUPS (attn-mask-kernels's default) groups of TILES consecutive key blocks
    block_n = mapped.manifest["specialization"]["block_n"]
    assert blockmap["grid"][0] == [["cdiv", "N", block_n * TILES * GROUPS]]
    assert manifest.dims == ("N",)
