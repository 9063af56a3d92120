"""The attn dialect: loading (once per context), what IRDL verifies, locations."""
import pytest
from mlir import ir

from attnc.errors import AttncError, Span
from attnc.ir import (ATTENTION, YIELD, attention_ops, error_at, load_attn_dialect, make_context,
                      parse_module, span_of)

ATTENTION_ATTRS = ('variant = "t", dtype = "bf16", head_dim_qk = 64 : i64, head_dim_v = 64 : i64, '
                   'scale = 1.0 : f32, dims = ["B"], q_shape = ["B", 64], k_shape = [], v_shape = [], '
                   'params = [], param_shapes = [], param_dtypes = [], outputs = ["o"], gqa = false, '
                   'has_score_mod = false, has_mask_mod = false, has_sink = false')
T = "tensor<?x?x?x64xbf16>"


def attention(regions: str, attrs: str = ATTENTION_ATTRS, loc: str = 'loc("t.attn":3:1)') -> str:
    return f"""
func.func @t(%q: {T}, %k: {T}, %v: {T}, %p: tensor<?xf32>) -> {T} {{
  %o = "attn.attention"(%q, %k, %v) ({regions}) {{{attrs}}} : ({T}, {T}, {T}) -> {T} {loc}
  return %o : {T}
}}"""


GOOD_REGIONS = """{
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    %x = "attn.param"(%p, %h) : (tensor<?xf32>, i32) -> f32
    gpu.yield %x : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %n = "attn.dim"() {name = "N"} : () -> i32 loc("t.attn":5:7)
    %keep = arith.cmpi slt, %j, %n : i32
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }"""


def test_the_dialect_loads_once_per_context():
    ctx = make_context()
    assert ctx.is_registered_operation(ATTENTION)
    load_attn_dialect(ctx)          # a second load would abort the process; this is a no-op
    load_attn_dialect(ctx)
    other = ir.Context()
    assert not other.is_registered_operation(ATTENTION)
    load_attn_dialect(other)
    assert other.is_registered_operation(ATTENTION)
    assert other.is_registered_operation("attn.dim") and other.is_registered_operation("attn.param")


def test_valid_l1_verifies():
    module = parse_module(attention(GOOD_REGIONS))
    assert module.operation.verify()
    (op,) = attention_ops(module)
    assert [list(op.regions[r].blocks[0].operations)[-1].name for r in range(3)] == [YIELD] * 3


@pytest.mark.parametrize("bad, message", [
    # a missing region
    (GOOD_REGIONS.rsplit(", {", 1)[0], "unexpected number of regions: expected 3 but got 2"),
    # the score_mod region with a wrong argument type
    (GOOD_REGIONS.replace("%s: f32", "%s: f16", 1), "expected 'f32' but got 'f16'"),
    # attn.param indices are i32
    (GOOD_REGIONS.replace('(%p, %h) : (tensor<?xf32>, i32)', '(%p, %s) : (tensor<?xf32>, f32)'),
     "expected 'i32' but got 'f32'"),
    # attn.dim needs its name
    (GOOD_REGIONS.replace(' {name = "N"}', ""), 'attribute "name" is expected but not provided'),
])
def test_irdl_rejects_malformed_ops(bad, message):
    with pytest.raises(ir.MLIRError) as info:
        parse_module(attention(bad))
    assert message in str(info.value)


def test_irdl_requires_the_l1_attributes():
    attrs = ATTENTION_ATTRS.replace('head_dim_v = 64 : i64, ', "")
    with pytest.raises(ir.MLIRError, match='attribute "head_dim_v" is expected but not provided'):
        parse_module(attention(GOOD_REGIONS, attrs))


def test_hook_regions_need_a_terminator():
    # Note [Region terminators]: why the regions end in gpu.yield, not an attn op.
    no_yield = GOOD_REGIONS.replace("    gpu.yield %none : f32\n", "")
    with pytest.raises(ir.MLIRError):
        parse_module(attention(no_yield))


def test_span_of_reads_the_dsl_location_of_an_op():
    module = parse_module(attention(GOOD_REGIONS))
    (op,) = attention_ops(module)
    assert span_of(op) == Span(3, 1)
    dim = list(op.regions[1].blocks[0].operations)[0]
    assert span_of(dim) == Span(5, 7)
    # an op without a file location (one a pass built) answers with its nearest
    # located ancestor
    block = op.regions[1].blocks[0]
    with module.context, ir.InsertionPoint.at_block_begin(block):
        built = ir.Operation.create("arith.constant", results=[ir.IntegerType.get_signless(32)],
                                    attributes={"value": ir.IntegerAttr.get(
                                        ir.IntegerType.get_signless(32), 1)},
                                    loc=ir.Location.unknown())
    assert span_of(built) == Span(3, 1)


def test_span_of_looks_through_fused_and_named_locations():
    with make_context():
        inner = ir.Location.file("a.attn", 4, 2)
        assert span_of(ir.Location.fused([ir.Location.unknown(), inner])) == Span(4, 2)
        assert span_of(ir.Location.name("x", childLoc=inner)) == Span(4, 2)
        assert span_of(ir.Location.unknown()) is None


def test_error_at_renders_with_the_attn_file():
    module = parse_module(attention(GOOD_REGIONS))
    (op,) = attention_ops(module)
    error = error_at(op, "something is wrong")
    assert isinstance(error, AttncError)
    source = "\n\nattention t {\n"
    assert error.located("t.attn", source).render() == (
        "t.attn:3:1: error: something is wrong\nattention t {\n^")


def test_an_attn_op_finds_its_dialect_module_once():
    """Note [Dialect modules] in attnc/ir/context.py: no import is tried again per op access."""
    import sys

    tried = []

    class Watch:
        def find_spec(self, name, path=None, target=None):
            tried.append(name)
            return None

    module = parse_module(attention(GOOD_REGIONS))
    attention_ops(module)
    sys.meta_path.insert(0, Watch())
    try:
        for _ in range(3):
            (op,) = attention_ops(module)
            assert [o.name for o in op.regions[1].blocks[0].operations][0] == "attn.dim"
    finally:
        sys.meta_path.pop(0)
    assert tried == []


def test_attention_ops_leave_the_kernels_gpu_module_out():
    """The walk does not enter a gpu.module (the lowering's kernels, thousands of ops and no
    variant): a variant op put in one, as no pass does, is not found."""
    outer = attention(GOOD_REGIONS)
    inner = attention(GOOD_REGIONS).replace("func.func @t", "gpu.func @t").replace(f") -> {T} {{", ") {")
    inner = inner.replace(f"return %o : {T}", "gpu.return")
    module = parse_module(f"module attributes {{gpu.container_module}} {{ {outer} gpu.module @k {{ {inner} }} }}")
    ops = attention_ops(module)
    assert len(ops) == 1 and ops[0].parent.name == "func.func"
