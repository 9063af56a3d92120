"""attn-hoist (attnc/passes/hoist.py): the levels it writes are where the kernel computes
each hook value -- the default ones are the kernel a pipeline without the pass gets,
`hoist=false` computes every value per score, and a level coarser than an op's operands
is refused at the op."""
from __future__ import annotations

import re

import pytest

from attnc.backend.lowering import build
from attnc.driver import CompileOptions, compile_file, compile_mlir, optimize_mlir
from attnc.errors import AttncError
from attnc.passes.lower_kernel import compile_result_of, lowered_gpu_module
from attnc.passes.pipelines import format_pipeline, pipeline_with, target_pipeline

PARAMS = 3
READS = "\n".join(["attention reads {", "  q: f16[B, H, M, 64]", "  k: f16[B, H, N, 64]", "  v: f16[B, H, N, 64]",
                   *(f"  param w{k}: f32[H]" for k in range(PARAMS)),
                   "  score_mod(s, b, h, i, j) = s + " + " + ".join(f"w{k}[h]" for k in range(PARAMS)),
                   "  out o: f16[B, H, M, 64]", "}"]) + "\n"


def _loads(arch: str, hoisted: bool) -> int:
    """llvm.load ops of the kernel module (before LLVM folds anything)."""
    pipeline = pipeline_with(arch, {"attn-hoist": {"hoist": str(hoisted).lower()}})
    result = compile_mlir(READS, "reads.attn", CompileOptions(arch=arch, pass_pipeline=pipeline))
    return len(re.findall(r"= llvm\.load ", str(lowered_gpu_module(result.module))))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_without_hoisting_every_score_loads_its_params(arch):
    hoisted, per_score = _loads(arch, True), _loads(arch, False)
    assert PARAMS <= hoisted <= 16 * PARAMS
    assert per_score >= 32 * hoisted            # a thread's 64 to 128 scores of a tile, per site


def test_without_hoisting_alibi_computes_its_bias_per_score():
    """Note [Bias linear in j] in attnc/backend/score_forms.py: ALiBi's bias takes an I2F
    per row and key block in its own form, and, with its values placed per score, one per
    diagonal of the tile's scores."""
    def conversions(hoisted: bool) -> int:
        pipeline = pipeline_with("sm_80", {"attn-hoist": {"hoist": str(hoisted).lower()}})
        ptx = build(compile_file("examples/alibi.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline))).ptx
        return ptx.count("cvt.rn.f32.s32")
    assert conversions(False) >= 4 * conversions(True)


@pytest.mark.parametrize("example, arch", [("docs_sink", "sm_80"), ("relative_bias", "sm_90a")])
def test_the_default_levels_are_the_kernel_without_the_pass(example, arch):
    specs = target_pipeline(arch)
    without = format_pipeline([s for s in specs if s.name != "attn-hoist"])
    ptx = [build(compile_file(f"examples/{example}.attn", CompileOptions(arch=arch, pass_pipeline=p))).ptx
           for p in (format_pipeline(specs), without)]
    assert ptx[0] == ptx[1]


def test_a_level_coarser_than_its_operands_is_refused_at_the_op():
    specs = target_pipeline("sm_80")
    plan = compile_file("examples/docs_sink.attn", CompileOptions(
        arch="sm_80", pass_pipeline=format_pipeline(specs[:-1]))).text
    row = '{attn.level = "row"}'
    assert plan.count(row) >= 1
    with pytest.raises(AttncError) as info:
        build(compile_result_of(optimize_mlir(plan.replace(row, '{attn.level = "cta"}'), "plan.mlir",
                                              CompileOptions(arch="sm_80", pass_pipeline=specs[-1].name))))
    assert info.value.render().startswith(
        'examples/docs_sink.attn:8:26: error: attn.level = "cta" computes this attn.param once per CTA, but its '
        'operands vary per query row: it reads i')


@pytest.mark.parametrize("edit, message", [
    (('{attn.level = "row"}', '{attn.level = "rows"}', 1), 'attn.level = "rows": expected one of cta, row, col, score'),
    # the second copy of the mask (another KV loop) placed unlike the first
    (('{attn.level = "col"}', '{attn.level = "score"}', 2), 'attn.level = "score" here, "col" on the same value in '
                                                         'the first attn.mask'),
])
def test_levels_the_kernel_cannot_follow_are_refused(edit, message):
    specs = target_pipeline("sm_80")
    plan = compile_file("examples/docs_sink.attn", CompileOptions(
        arch="sm_80", pass_pipeline=format_pipeline(specs[:-1]))).text
    old, new, nth = edit
    assert plan.count(old) >= nth
    head, _, tail = plan.partition(old) if nth == 1 else (plan[:plan.index(old, plan.index(old) + 1)], old,
                                                           plan[plan.index(old, plan.index(old) + 1) + len(old):])
    with pytest.raises(AttncError, match=re.escape(message)):
        build(compile_result_of(optimize_mlir(head + new + tail, "plan.mlir",
                                              CompileOptions(arch="sm_80", pass_pipeline=specs[-1].name))))
