"""Large and deep hooks compile, in time linear in their size (Notes [Hoisted hook values]
in attnc/backend/hooks.py and [Deep expressions] in attnc/frontend/depth.py).

No timing is asserted: what makes a compile grow faster than its hooks is checked as a
count instead. A score_mod of 150 per-head param reads emits each param's load once per
kernel and site, not once per score (before, 10,240 loads for 40 params reached LLVM);
a mask of 150 nested `where`s, deeper than Python's default recursion allows, and an
`or` of 150 equalities compile for both targets, the `or` as per-row bit masks (Note
[Row bit masks] in attnc/backend/row_bits.py; tests/backend/test_row_bits.py checks
the keys they keep), and with mask analysis functions of a few ops, which the kernel
inlines at each site (Notes [Many disjuncts] and [Answer budget] in
attnc/analysis/tile_classes.py; before, 14,000 ops for the `or`, 30,000 for the
`where`s). A flat sum of 250 terms compiles; one past MAX_HOOK_DEPTH is refused where
it starts, by `attnc check` and `attnc compile` alike.
"""
from __future__ import annotations

import re

import pytest

from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.frontend import load
from attnc.frontend.depth import MAX_HOOK_DEPTH

TARGETS = ("sm_80", "sm_90a")
TERMS = 150


def variant(name: str, *, params: int = 0, score: str | None = None, mask: str | None = None) -> str:
    lines = [f"attention {name} {{", "  q: f16[B, H, M, 64]", "  k: f16[B, H, N, 64]", "  v: f16[B, H, N, 64]"]
    lines += [f"  param w{k}: f32[H]" for k in range(params)]
    if score:
        lines.append(f"  score_mod(s, b, h, i, j) = {score}")
    if mask:
        lines.append(f"  mask_mod(b, h, i, j) = {mask}")
    return "\n".join(lines + ["  out o: f16[B, H, M, 64]", "}"]) + "\n"


PARAM_READS = variant("reads", params=TERMS, score="s + " + " + ".join(f"w{k}[h]" for k in range(TERMS)))
OR_MASK = variant("ors", mask=" or ".join(f"i - j == {k}" for k in range(TERMS)))


def nested_wheres(depth: int) -> str:
    e = "j <= i"
    for k in range(depth):
        e = f"where(i - j == {k}, j >= i, {e})"
    return e


def _llvm_loads(text: str) -> int:
    return len(re.findall(r"= llvm\.load ", text))


def ptx_of(source: str, arch: str) -> str:
    """The PTX of `source` for `arch` (what a bundle holds, without assembling it)."""
    from mlir import ir

    from attnc.backend.ptx import to_ptx
    from attnc.passes.lower_kernel import lowered_gpu_module

    result = compile_mlir(source, f"{arch}.attn", CompileOptions(arch=arch))
    gpu_module = lowered_gpu_module(result.module)
    kernels = ir.Module.parse(f"module attributes {{gpu.container_module}} {{\n{gpu_module}\n}}",
                              result.module.context)
    return to_ptx(kernels, arch, in_place=True)


@pytest.mark.parametrize("arch", (*TARGETS, "sm_100a"))
def test_param_reads_are_loaded_once_per_site_not_per_score(arch):
    """150 per-head params: every load in the PTX is one of them, at most twice each
    (two kernels in the sm_80 bundle, two Q tiles' softmax roles on sm_100a), where a load
    per score would be 128 times more (Note [Hoisted values of a row] in
    attnc/backend/sm100a_scores.py: on sm_100a it took minutes to reach PTX)."""
    ptx = ptx_of(PARAM_READS, arch)
    loads = len(re.findall(r"\bld\.global(\.nc)?\.[a-z0-9]+\b", ptx))
    assert TERMS <= loads <= 2 * TERMS, loads


def test_the_hook_lowering_emits_each_param_read_once_per_tile():
    """Before LLVM: the lowered kernel holds a param's load a few times per kernel (one
    per place the scores of a tile are computed), not once per score a thread holds."""
    from attnc.backend.lowering import kernel_module_for
    result = compile_mlir(PARAM_READS, "reads.attn", CompileOptions(arch="sm_80"))
    text = str(kernel_module_for(result)[0])
    loads = _llvm_loads(text)
    assert TERMS <= loads <= 16 * TERMS, loads


@pytest.mark.parametrize("arch", TARGETS)
def test_an_or_of_150_equalities_compiles(arch):
    ptx = ptx_of(OR_MASK, arch)
    assert ".entry" in ptx


def test_100_nested_wheres_compile():
    """Deeper than Python's default recursion limit allows the analyses to walk."""
    source = variant("wheres", mask=nested_wheres(100))
    load(source, "wheres.attn")                    # attnc check
    result = compile_mlir(source, "wheres.attn", CompileOptions(arch="sm_80"))
    assert "attn.attention" in result.text or "gpu.module" in result.text


@pytest.mark.parametrize("arch", TARGETS)
def test_150_nested_wheres_compile(arch):
    source = variant("wheres", mask=nested_wheres(TERMS))
    load(source, "wheres.attn")                    # attnc check
    assert ".entry" in ptx_of(source, arch)


@pytest.mark.parametrize("source", [OR_MASK, variant("wheres", mask=nested_wheres(TERMS))],
                         ids=["or", "wheres"])
def test_the_mask_analysis_of_150_comparisons_emits_a_few_ops(source):
    """The kv_range and tile_class functions attn-analyze-masks emits, which the kernel
    inlines at each of its sites: a few ops each, not thousands."""
    from attnc.ir import attention_ops
    from attnc.passes.analyze_masks import mask_functions

    result = compile_mlir(source, "mask.attn", CompileOptions(arch="sm_80",
                                                              pass_pipeline="attn-tile,attn-analyze-masks"))
    found = mask_functions(attention_ops(result.module)[0])
    sizes = [len(list(fn.regions[0].blocks[0].operations)) for fn in (found.kv_range, found.tile_class)]
    assert sum(sizes) <= 40, sizes


def let_chain(lets: int, terms: int) -> str:
    """A mask whose `let`s add `terms` constants each: as deep as all of them together."""
    chain = " ".join(f"let a{n + 1} = a{n} " + " ".join(f"+ {k % 3}" for k in range(terms)) + " in"
                     for n in range(lets))
    return f"let a0 = i - j in {chain} a{lets} <= 1000"


def test_a_let_chain_within_the_limit_compiles():
    source = variant("chain", mask=let_chain(6, 150))          # 900 levels
    compile_mlir(source, "chain.attn", CompileOptions(arch="sm_80"))


def test_a_hook_deeper_than_the_limit_is_refused_at_check_where_it_passes_the_limit():
    """The limit counts a `let` name as deep as its value; the error points at the
    operator whose depth first passes it."""
    source = variant("chain", mask=let_chain(7, 150))          # 1050 levels
    with pytest.raises(AttncError) as info:
        load(source, "chain.attn")
    e = info.value
    line = source.splitlines()[e.span.line - 1]
    assert (e.span.line, line[e.span.col - 1:e.span.col + 6]) == (5, "a6 + 0 ")
    assert str(e).startswith(f"chain.attn:5:{e.span.col}: error: expression too deep: more than "
                             f"{MAX_HOOK_DEPTH} levels of operations, counting each use of a `let` name as "
                             f"deep as its value")


def flat_sum(terms: int) -> str:
    return "s + float(" + " + ".join(["i"] * (terms - 1)) + ")"


def test_a_flat_sum_of_250_terms_compiles():
    source = variant("sum", score=flat_sum(250))
    load(source, "sum.attn")
    result = compile_mlir(source, "sum.attn", CompileOptions(arch="sm_80"))
    assert "gpu.module" in result.text


def test_a_sum_deeper_than_the_limit_is_refused_by_check_and_compile_alike():
    """1001 levels: `float(...)` of 999 terms under `s + `, refused by the parser at the
    whole expression, with the limit."""
    source = variant("sum", score=flat_sum(MAX_HOOK_DEPTH))
    col = source.splitlines()[4].index("s + float(") + 1
    message = (f"sum.attn:5:{col}: error: expression too deep: more than {MAX_HOOK_DEPTH} levels of "
               f"operations (split a long chain into independent parts, e.g. a sum into sums of fewer terms)")
    for stage in (lambda: load(source, "sum.attn"),
                  lambda: compile_mlir(source, "sum.attn", CompileOptions(arch="sm_80"))):
        with pytest.raises(AttncError) as info:
            stage()
        assert str(info.value).split("\n")[0] == message
