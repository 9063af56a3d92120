"""The bounds of the KV loops and the tests of the branches are the key range the mask
analysis gives, which the kernels build as their own: an edit of them is refused at
every level, never built as the default (Note [The key range as made] in
attnc/ir/roles.py). Edits of what the lowerings do build op by op are tested beside
them (test_kv_steps.py, test_key_range_edits.py)."""
from __future__ import annotations

import re

import pytest

from attnc.driver import CompileOptions, compile_file, optimize_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops, to_text
from attnc.ir import roles as R
from attnc.passes.pipelines import CHOICES_PASS, format_pipeline, target_pipeline
from tests.passes.test_kv_steps import _compile, _lower, _pipeline


def _loops(text: str) -> list[re.Match]:
    return list(re.finditer(r"scf\.for %arg\d+ = (%[\w#]+) to (%[\w#]+) step", text))


def _drop_top_blocks(text: str) -> str:
    """The last KV loop runs from its lower bound to itself: the range's top blocks dropped."""
    last = _loops(text)[-1]
    return text[:last.start(2)] + last.group(1) + text[last.end(2):]


def _rest(target: str, after: str) -> str:
    names = format_pipeline(target_pipeline(target)).split(",")
    return ",".join(names[names.index(after) + 1:])


@pytest.mark.parametrize("example", ["sliding_window", "mha"])
def test_the_record_is_the_programs_and_each_roles(example):
    """attn-tile and attn-analyze-masks record the program's key range, attn-warp-specialize
    each role's; sm_80's one role runs the program's loops as they were."""
    result = _compile(example, _pipeline(until=CHOICES_PASS))
    kernel = attention_ops(result.module)[0]
    ranges = R.value_of(R.warp_specialize_of(kernel).attributes[R.RANGES])
    compute = next(r for r in R.role_ops(kernel) if R.name_of(r) == "compute")
    assert ranges == {"compute": R.range_digest(compute)}
    assert R.attrs_of(kernel)[R.KEY_RANGE] == ranges["compute"]


def test_an_sm80_bound_edited_at_l5_is_refused():
    """sm_80's role is otherwise built op by op as it stands, and its KV loops' bounds
    were not read: the top blocks of a sliding window dropped by hand built the whole
    window."""
    plan = _compile("sliding_window", _pipeline(until=CHOICES_PASS)).text
    with pytest.raises(AttncError) as info:
        _lower(_drop_top_blocks(plan))
    assert "the bounds of the KV loops and the tests of the branches of role 'compute'" in info.value.message
    assert info.value.span is not None


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_bound_edited_at_l2_is_refused_by_attn_warp_specialize(target):
    options = CompileOptions(arch=target, pass_pipeline="attn-tile,attn-analyze-masks,attn-hoist")
    text = compile_file("examples/sliding_window.attn", options).text
    rest = CompileOptions(arch=target, pass_pipeline=_rest(target, "attn-hoist"))
    optimize_mlir(text, "l2.mlir", rest)        # as made: it builds
    with pytest.raises(AttncError) as info:
        optimize_mlir(_drop_top_blocks(text), "l2.mlir", rest)
    assert "the bounds of the program's KV loops or the tests of its branches were edited" in info.value.message
    assert info.value.span is not None


def test_an_sm90a_bound_edited_at_l3_is_refused_at_the_lowering():
    """The consumers' KV loops are rotated by attn-overlap-gemms; an edit made before it
    stays one the lowering sees."""
    until = "attn-warp-specialize"
    names = format_pipeline(target_pipeline("sm_90a")).split(",")
    options = CompileOptions(arch="sm_90a", pass_pipeline=",".join(names[:names.index(until) + 1]))
    result = compile_file("examples/sliding_window.attn", options)
    kernel = attention_ops(result.module)[0]
    consumer = next(r for r in R.role_ops(kernel) if R.name_of(r) == "consumer0")
    with kernel.context:
        loop = [op for op in R.ops_in(R.role_block(consumer), ("scf.for",)) if "kv_blocks" in op.attributes][-1]
        loop.operands[1] = loop.operands[0]
    with pytest.raises(AttncError) as info:
        optimize_mlir(to_text(result.module), "l3.mlir",
                      CompileOptions(arch="sm_90a", pass_pipeline=_rest("sm_90a", until)))
    assert "the bounds of the KV loops and the tests of the branches of role 'consumer0'" in info.value.message
