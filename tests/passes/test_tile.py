"""attn-tile: the table is buildable everywhere; the errors only IR can trigger.
(The choices per target and the option errors are FileCheck tests: tile.mlir,
tile_errors.mlir.)"""
import itertools
from pathlib import Path

import pytest

from attnc.errors import AttncError, Span
from attnc.ir import attention_ops, get_int, get_str, parse_module
from attnc.passes import lookup
from attnc.passes.tile import ProblemShape, Tile, TileError, choose_tile, smem_bytes
from attnc.passes.tile_table import TARGET_LIMITS, TILE_TABLE

ROOT = Path(__file__).resolve().parents[2]
HEAD_DIMS = (64, 96, 128, 256)


@pytest.mark.parametrize("target", TILE_TABLE)
def test_every_table_choice_is_buildable(target):
    """Every (head_dim_qk, head_dim_v) pair the language allows, masked or not,
    gets a tile that passes the target's checks (choose_tile raises otherwise)."""
    for qk, v, masked, params in itertools.product(HEAD_DIMS, HEAD_DIMS, (False, True), (False, True)):
        shape = ProblemShape(qk, v, "bf16", masked, params, mask_params=masked and params)
        config = choose_tile(target, shape, {})
        assert smem_bytes(target, shape, config) <= TARGET_LIMITS[target].smem_bytes


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("hd", HEAD_DIMS)
def test_attn_tile_weighs_the_layout_attn_alloc_smem_makes(target, hd):
    """The SMEM attn-tile accounts a table tile with is what attn-alloc-smem lays out
    (the two once disagreed: at head dim 256 on sm_100a the allocator gave O its own
    64 KB next to Q and refused the table's tile)."""
    from attnc.driver import CompileOptions, compile_mlir
    text = (f"attention t {{\n  q: bf16[B, H, M, {hd}]\n  k: bf16[B, H, N, {hd}]\n  v: bf16[B, H, N, {hd}]\n"
            f"  mask_mod(b, h, i, j) = j <= i\n  out o: bf16[B, H, M, {hd}]\n}}\n")
    from attnc.passes import plan_ir
    shape = ProblemShape(hd, hd, "bf16", True)
    result = compile_mlir(text, "t.attn", CompileOptions(arch=target))      # raised before the fix
    buffers = [b for b in plan_ir.buffers(attention_ops(result.module)[0]) if b.space == "smem"]
    end = max(b.end for b in buffers)
    assert end == smem_bytes(target, shape, choose_tile(target, shape, {})) <= TARGET_LIMITS[target].smem_bytes


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "sm_100a"])
@pytest.mark.parametrize("hd", HEAD_DIMS)
def test_every_stage_count_attn_tile_takes_fits_attn_alloc_smem(target, hd):
    """attn-tile counts the mbarriers attn-alloc-smem places after the buffers: a stage
    count it takes is one the allocator fits (sm_100a's 4 stages at head dim 128 passed
    attn-tile and failed attn-alloc-smem by 312 bytes of mbarriers)."""
    from attnc.schedule.alloc import alloc_smem
    from attnc.schedule.recipes import recipe
    from attnc.passes.tile import _alloc_tile
    shape = ProblemShape(hd, hd, "bf16", False)
    limits = TARGET_LIMITS[target]
    for stages in range(limits.min_stages, limits.max_stages + 1):
        try:
            c = choose_tile(target, shape, {"stages": stages})
        except TileError:
            continue
        alloc_smem(recipe(target, num_warps=c.num_warps, kv_stages=c.stages, q_tiles=c.q_tiles), _alloc_tile(shape, c))


def test_the_documented_choices():
    shape = lambda hd, masked=False: ProblemShape(hd, hd, "bf16", masked)  # noqa: E731
    pick = lambda t, s: tuple(vars(choose_tile(t, s, {})).values())  # noqa: E731
    # (block_m, block_n, stages, num_warps, q_tiles)
    # FA2's 128x128 at head dim 64 (spill-free here), 128x64 at 96 and 128.
    assert pick("sm_80", shape(64)) == (128, 128, 2, 4, 1)
    assert pick("sm_80", shape(96)) == (128, 64, 2, 4, 1)
    assert pick("sm_80", shape(128)) == (128, 64, 2, 4, 1)
    assert pick("sm_80", shape(256)) == (64, 64, 2, 4, 1)
    # Hooks reading param tensors: 64-key blocks at head dim 64 (128 spills), others unchanged.
    assert pick("sm_80", ProblemShape(64, 64, "bf16", True, params=True)) == (128, 64, 2, 4, 1)
    assert pick("sm_80", ProblemShape(128, 128, "bf16", False, params=True)) == (128, 64, 2, 4, 1)
    # A mask reading params (documents): 64-row query blocks at head dim 64 only.
    assert pick("sm_80", ProblemShape(64, 64, "bf16", True, True, mask_params=True)) == (64, 64, 2, 4, 1)
    assert pick("sm_80", ProblemShape(128, 128, "bf16", True, True, mask_params=True)) == (128, 64, 2, 4, 1)
    # sm_90a (attn-lower-sm90a): three 64-row consumer warpgroups per CTA at head dim 64
    # (192x96), one for a score_mod of i and j score by score (ALiBi), two at 128;
    # a mask reading params (documents): 64x64, one warpgroup; so is a band (sliding
    # window) at head dim 64; at 128 the band takes the producer warpgroup's tile (its
    # CTAs persistent: attn-warp-specialize's `persistent`, on by default for a band).
    assert pick("sm_90a", shape(64)) == (192, 96, 2, 16, 1)
    assert pick("sm_90a", shape(64, masked=True)) == (192, 96, 2, 16, 1)
    assert pick("sm_90a", ProblemShape(64, 64, "bf16", True, positional=True)) == (64, 128, 2, 8, 1)
    assert pick("sm_90a", ProblemShape(64, 64, "bf16", True, positional=True, banded=True)) == (64, 64, 2, 8, 1)
    assert pick("sm_90a", ProblemShape(128, 128, "bf16", True, positional=True)) == (128, 128, 3, 12, 1)
    assert pick("sm_90a", shape(128)) == (128, 128, 3, 12, 1)
    assert pick("sm_90a", shape(128, masked=True)) == (128, 128, 3, 12, 1)
    assert pick("sm_90a", ProblemShape(64, 64, "bf16", True, banded=True)) == (64, 64, 2, 8, 1)
    assert pick("sm_90a", ProblemShape(128, 128, "bf16", True, banded=True)) == (128, 128, 3, 12, 1)
    for hd in (64, 128):
        assert pick("sm_90a", ProblemShape(hd, hd, "bf16", True, True, mask_params=True)) == (64, 64, 2, 8, 1)
    assert pick("sm_80", ProblemShape(64, 64, "bf16", True, banded=True)) == (128, 128, 2, 4, 1)
    assert pick("sm_90a", shape(256)) == (128, 80, 2, 12, 1)
    # sm_100a: a K/V ring of three slots at head dim 128, two beside an f32 O (three would
    # leave no room for the mbarriers), unless the stages are asked for.
    assert pick("sm_100a", shape(128)) == (128, 128, 3, 16, 2)
    f32_out = ProblemShape(128, 128, "bf16", False, out_dtype="f32")
    assert pick("sm_100a", f32_out) == (128, 128, 2, 16, 2)
    with pytest.raises(TileError, match="shared memory"):
        choose_tile("sm_100a", f32_out, {"stages": 4})
    assert pick("sm_100a", shape(256)) == (128, 128, 2, 16, 1)


def _module(dtype="bf16", hd=128):
    text = (ROOT / "tests/passes/tile.mlir").read_text()
    body = text[text.index("func.func @hd128_unmasked("):text.index("func.func @hd64_masked(")]
    body = body.replace('dtype = "bf16"', f'dtype = "{dtype}"')
    body = body.replace("head_dim_qk = 128", f"head_dim_qk = {hd}").replace(
        "head_dim_v = 128", f"head_dim_v = {hd}")
    return parse_module(body)


def _error(module, **options) -> AttncError:
    with pytest.raises(AttncError) as info:
        Tile(**options)(module.operation)
    return info.value


def test_tile_records_its_choice_on_the_op():
    module = _module()
    Tile(target="sm_100a", stages=2)(module.operation)
    (op,) = attention_ops(module)
    assert get_str(op, "target") == "sm_100a"
    assert [get_int(op, k) for k in ("block_m", "block_n", "stages", "num_warps", "q_tiles")] == \
        [128, 128, 2, 16, 2]
    assert module.operation.verify()


def test_error_a_dtype_without_tiles():
    e = _error(_module(dtype="f32"), target="sm_80")
    assert (e.message, e.span, e.filename) == (
        "attn-tile cannot tile dtype 'f32'; expected bf16 or f16", Span(2, 1), "tile.attn")


def test_error_head_dims_without_a_tile():
    e = _error(_module(hd=192), target="sm_90a")
    assert (e.message, e.span) == (
        "no tile for head dims (192, 192) on sm_90a; head dims with a tile: 64, 96, 128, 256",
        Span(2, 1))


def test_error_no_target():
    e = _error(_module())
    assert e.message == "attn-tile needs a target: pass -arch, or target=sm_80|sm_90a|sm_100a"


def test_error_no_attention_op():
    module = parse_module("func.func @f() { return }")
    e = _error(module, target="sm_80")
    assert e.message == "attn-tile found no attn.attention op to tile"


def test_tile_is_registered_with_its_options():
    info = lookup("attn-tile")
    assert info.cls is Tile and info.origin == "built-in"
    assert [o.name for o in info.options] == ["target", "block_m", "block_n", "stages",
                                              "num_warps", "q_tiles"]
    assert info.summary.startswith("Choose block_m, block_n, stages and warps")


@pytest.mark.parametrize("mask, banded", [
    ("j <= i and i - j < 1024", True),           # a sliding window: 17 of 128 blocks
    ("abs(i - j) < 256", True),                  # two-sided
    ("j <= i", False),
    ("j < P or j <= i", False),                  # prefix-LM: the prefix is unbounded
    ("j <= i and i - j < 4096", False),          # half the causal work
    ("i // 1024 == j // 1024", True),            # block-diagonal chunks
])
def test_banded_mask_from_the_analysis(mask, banded):
    from attnc.driver import CompileOptions, compile_mlir
    from attnc.ir import attention_ops
    from attnc.passes.tile import banded_mask

    src = ("attention t {\n  q: bf16[B, H, M, 64]\n  k: bf16[B, H, N, 64]\n  v: bf16[B, H, N, 64]\n"
           f"  dim P\n  mask_mod(b, h, i, j) = {mask}\n  out o: bf16[B, H, M, 64]\n}}\n")
    result = compile_mlir(src, "t.attn", CompileOptions(arch="sm_90a", pass_pipeline=""))
    assert banded_mask(attention_ops(result.module)[0]) is banded



@pytest.mark.parametrize("score_mod, positional", [
    ("s + slopes[h] * float(j - i)", True),      # ALiBi: a value a score
    ("s + slopes[h] * float(i)", True),          # of the query row alone
    ("30.0 * tanh(s / 30.0)", False),            # softcap: of s alone
    ("s * slopes[h]", False),                    # of the head alone
    ("s + where(j - i > 64, 1.0, 0.0)", False),  # flat beyond 64 diagonals: a value a tile there
    (None, False),
])
def test_scores_by_position(score_mod, positional):
    from attnc.driver import CompileOptions, compile_mlir
    from attnc.ir import attention_ops, get_int
    from attnc.passes.tile import scores_by_position

    hook = f"  score_mod(s, b, h, i, j) = {score_mod}\n" if score_mod else ""
    src = ("attention t {\n  q: bf16[B, H, M, 64]\n  k: bf16[B, H, N, 64]\n  v: bf16[B, H, N, 64]\n"
           f"  param slopes: f32[H]\n{hook}  mask_mod(b, h, i, j) = j <= i\n  out o: bf16[B, H, M, 64]\n}}\n")
    result = compile_mlir(src, "t.attn", CompileOptions(arch="sm_90a", pass_pipeline=""))
    assert scores_by_position(attention_ops(result.module)[0]) is positional
    tiled = compile_mlir(src, "t.attn", CompileOptions(arch="sm_90a", pass_pipeline="attn-tile"))
    assert get_int(attention_ops(tiled.module)[0], "block_m") == (64 if positional else 192)

T5_BUCKET = ("let d = j - i in let n = abs(d) in "
             "where(n < 8, n, min(8 + int(log(float(n) / 8.0) / log(16.0) * 8.0), 15)) + where(d > 0, 16, 0)")


@pytest.mark.parametrize("score_mod, block_n", [
    (f"s + bias[h, {T5_BUCKET}]", 128),      # flat beyond 128 keys of the diagonal: read once per far tile
    ("s + bias[h, (j - i) % 32]", 64),        # periodic in d, never flat
    ("s + bias[h, j % 32]", 64),              # per key
    ("s + bias[h, 0]", 128),                  # per head: once per CTA
])
def test_sm80_tiles_at_head_dim_64_count_the_params_read_per_score(score_mod, block_n):
    """The table's block_n_params (64 keys where the score tile loads params) counts the
    reads a hook makes per score: not those indexed by b and h alone, nor the values of a
    diagonal with flat diagonals, which the tiles beyond them read once."""
    from attnc.driver import CompileOptions, compile_mlir

    src = ("attention t {\n  q: bf16[B, H, M, 64]\n  k: bf16[B, H, N, 64]\n  v: bf16[B, H, N, 64]\n"
           f"  param bias: f32[H, 32]\n  score_mod(s, b, h, i, j) = {score_mod}\n"
           "  mask_mod(b, h, i, j) = j <= i\n  out o: bf16[B, H, M, 64]\n}\n")
    result = compile_mlir(src, "t.attn", CompileOptions(arch="sm_80", pass_pipeline="attn-tile"))
    assert get_int(attention_ops(result.module)[0], "block_n") == block_n
