"""The L2 part of the attn dialect: the !attn.tile type (parsed, built, refused) and the
tile ops' verification, and attnc/ir/kernel.py's view of the variant."""
import pytest
from mlir import ir

from attnc.ir import make_context, parse_module
from attnc.ir.tiles import tile_type

TILE = '!attn.tile<[128, 64], f32, "reg">'


def test_the_tile_type_round_trips():
    with make_context():
        t = tile_type([128, 64], "f32", "reg")
        assert str(t) == TILE
        assert t == ir.Type.parse(TILE)
        assert str(tile_type([64], "bf16", "smem")) == '!attn.tile<[64], bf16, "smem">'


def test_a_space_outside_the_four_is_refused_by_the_builder():
    with make_context(), pytest.raises(ValueError, match="tile space 'shared' is not one of global, smem, reg, tmem"):
        tile_type([1], "f32", "shared")


def test_the_tile_type_parameters_are_verified():
    with make_context(), pytest.raises(Exception, match="expected base attribute 'builtin.string'"):
        ir.Type.parse('!attn.tile<[128], f32, 3>')


def _program(body: str) -> str:
    return f"""
func.func @t(%s: {TILE}, %m: !attn.tile<[128], f32, "reg">) {{
  {body}
  return
}}"""


def test_tile_ops_verify():
    module = parse_module(_program(f"""
  %p, %m1, %l1, %f = "attn.softmax_step"(%s, %m, %m) : ({TILE}, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> ({TILE}, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">)
  %o = "attn.rescale"(%s, %f) : ({TILE}, !attn.tile<[128], f32, "reg">) -> {TILE}"""))
    assert module.operation.verify()


def test_a_tile_op_on_a_non_tile_is_refused():
    with pytest.raises(Exception, match="attn.rescale"):
        parse_module(_program(f"""
  %c = arith.constant 1.0 : f32
  %o = "attn.rescale"(%s, %c) : ({TILE}, f32) -> {TILE}""")).operation.verify()


def test_the_variant_is_read_from_the_kernel():
    """Note [The variant from the IR]: what the backend reads, from attributes and types."""
    from attnc.driver import CompileOptions, compile_file
    from attnc.ir import attention_ops
    from attnc.ir.kernel import kernel_variant

    module = compile_file("examples/alibi.attn", CompileOptions(arch="sm_80", pass_pipeline="attn-tile")).module
    v = kernel_variant(attention_ops(module)[0])
    assert (v.name, v.dtype, v.head_dim_qk, v.head_dim_v, v.scale) == ("alibi", "f16", 64, 64, 0.125)
    assert (v.batch, v.heads, v.heads_kv, v.seq_q, v.seq_k, v.dims) == ("B", "H", "H", "M", "N", ("B", "H", "M", "N"))
    assert [(p.name, p.dtype, p.shape) for p in v.params] == [("slopes", "f32", ("H",))]
    assert [(t.name, t.dtype, t.shape) for t in v.outputs] == [("o", "f16", ("B", "H", "M", 64))]
    assert not v.has_lse


@pytest.mark.parametrize("example", ["gemma2", "docs_sink", "mqa", "diff_head_dims", "relative_bias", "prefix_lm"])
def test_the_kernel_variant_agrees_with_the_frontend(example):
    """Every fact the backend reads of a variant, from the IR, equals the checked source's."""
    from attnc.driver import CompileOptions, compile_file
    from attnc.ir import attention_ops
    from attnc.ir.kernel import kernel_variant

    result = compile_file(f"examples/{example}.attn", CompileOptions(arch="sm_90a", pass_pipeline="attn-tile"))
    v, ours = result.variant, kernel_variant(attention_ops(result.module)[0])
    for field in ("name", "dtype", "head_dim_qk", "head_dim_v", "scale", "batch", "heads", "heads_kv",
                  "seq_q", "seq_k", "dims", "has_lse"):
        assert getattr(ours, field) == getattr(v, field), field
    for mine, theirs in ((ours.params, v.params), (ours.outputs, v.outputs), (ours.inputs, v.inputs)):
        assert [(t.name, t.role, t.dtype, tuple(t.shape)) for t in mine] == \
               [(t.name, t.role, t.dtype, tuple(t.shape)) for t in theirs]
