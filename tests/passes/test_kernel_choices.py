"""Note [Kernel choices] (attnc/passes/kernel_choices.py): the kernel the lowering builds
is the one the choice attributes describe -- the defaults attn-kernel-choices writes are
the kernel a pipeline without it gets, an edited attribute gives the kernel its option
gives, and attributes the lowering cannot follow are refused at their op."""
from __future__ import annotations

import json
import re

import pytest
from mlir import ir

from attnc.backend.lowering import build
from attnc.driver import CompileOptions, compile_file, optimize_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.passes.lower_kernel import KERNELS_ATTR, SPECIALIZATION_ATTR, compile_result_of, lowered_gpu_module
from attnc.passes.pipelines import CHOICES_PASS as CHOICES, LOWERING, format_pipeline, pipeline_with, target_pipeline


def _kernel(example: str, arch: str, pipeline: str) -> str:
    """The gpu.module the pipeline leaves, as text."""
    module = compile_file(f"examples/{example}.attn", CompileOptions(arch=arch, pass_pipeline=pipeline)).module
    return str(lowered_gpu_module(module))


def _plan(example: str, arch: str, options: dict | None = None) -> str:
    """The IR after attn-kernel-choices, as a dump holds it."""
    pipeline = pipeline_with(arch, {CHOICES: options or {}}).rsplit(",", 1)[0]
    return compile_file(f"examples/{example}.attn", CompileOptions(arch=arch, pass_pipeline=pipeline)).text


def _lower(plan: str, arch: str):
    return optimize_mlir(plan, "plan.mlir", CompileOptions(arch=arch, pass_pipeline=LOWERING[arch]))


def _lowered(module, attribute: str = SPECIALIZATION_ATTR):
    """What the lowering recorded on its gpu.module for the manifest: the specialization
    (every choice, resolved), or with KERNELS_ATTR the kernels' launch entries."""
    return json.loads(ir.StringAttr(lowered_gpu_module(module).attributes[attribute]).value)


# A kernel of each kind of default: row sums and the small grid's kernel (ALiBi, sm_80),
# aligned tiles with ranges from the runs (documents, sm_80), the register bound kept
# where the kernel does not spill (softcap, sm_90a), persistent CTAs (window, sm_90a),
# and the FMA exp2 of the producer's kernel (gemma2, sm_90a).
@pytest.mark.parametrize("example, arch", [("alibi", "sm_80"), ("docs_sink", "sm_80"), ("softcap", "sm_90a"),
                                           ("sliding_window", "sm_90a"), ("gemma2", "sm_90a")])
def test_the_written_defaults_are_the_kernel_without_them(example, arch):
    specs = target_pipeline(arch)
    assert [s.name for s in specs[-2:]] == [CHOICES, LOWERING[arch]]
    without = format_pipeline([s for s in specs if s.name != CHOICES])
    assert _kernel(example, arch, format_pipeline(specs)) == _kernel(example, arch, without)


def test_an_edited_choice_is_the_kernel_of_its_option():
    plan = _plan("alibi", "sm_80")
    assert plan.count("row_sum = true") >= 2 and plan.count("staged = true") == 1
    edited = plan.replace("row_sum = true", "row_sum = false").replace("staged = true", "staged = false")
    by_option = _plan("alibi", "sm_80", {"mma_row_sum": 0, "staged_o": 0})
    art = build(compile_result_of(_lower(edited, "sm_80")))
    assert art.ptx == build(compile_result_of(_lower(by_option, "sm_80"))).ptx
    assert art.ptx != build(compile_result_of(_lower(plan, "sm_80"))).ptx
    chosen = art.manifest["specialization"]
    assert not chosen["mma_row_sum"] and not chosen["staged_o"]


def test_an_edited_unroll_is_the_kernel_of_its_option():
    """The QK^T k-steps of ALiBi (head dim 64: rolled, one step a trip, by default) fully
    unrolled by an edit of the QK^T mma's `unroll`: the option's kernel, without the
    loop's nounroll pragma."""
    plan = _plan("alibi", "sm_80")
    assert plan.count('kind = "qk", unroll = 1 : i64') >= 2
    edited = plan.replace('kind = "qk", unroll = 1 : i64', 'kind = "qk", unroll = 0 : i64')
    ptx = build(compile_result_of(_lower(edited, "sm_80"))).ptx
    assert ptx == build(compile_result_of(_lower(_plan("alibi", "sm_80", {"qk_unroll": 0}), "sm_80"))).ptx
    rolled = build(compile_result_of(_lower(plan, "sm_80"))).ptx
    assert '.pragma "nounroll"' in rolled and '.pragma "nounroll"' not in ptx


def test_ops_that_disagree_are_refused_at_the_second():
    plan = _plan("alibi", "sm_80")
    assert plan.count("{lazy = false}") >= 2
    edited = plan.replace("{lazy = false}", "{lazy = true}", 1)
    with pytest.raises(AttncError) as info:
        _lower(edited, "sm_80")
    assert re.search(r"error: lazy = false on this attn\.rescale, true on an earlier one: the kernel lowers every "
                     r"attn\.rescale of a kernel one way", info.value.render())


def test_a_choice_of_the_wrong_type_is_refused():
    plan = _plan("alibi", "sm_80")
    with pytest.raises(AttncError, match=re.escape('exp2_fma on attn.softmax_step must be an integer, got "two"')):
        _lower(plan.replace("exp2_fma = 0 : i64", 'exp2_fma = "two"'), "sm_80")


@pytest.mark.parametrize("option, message", [
    ("interval_test=foo", "interval_test='foo': expected one of ('range', 'pair', 'bits')"),
    ("exp2_fma=9", "exp2_fma=9: expected 0 to 8"),
    ("qk_unroll=-1", "qk_unroll=-1: expected 0 or more"),
    ("tail_waves=65", "tail_waves=65: expected 0 (off) to 64"),
    ("kv_loops=4", "kv_loops=4: expected 1 (every step of a key range in one loop), 2 (the far edge's mixed "
                   "blocks in the full blocks' loop) or 3 (a loop per kind of block)"),
])
def test_a_value_no_kernel_takes_is_refused_at_its_option(option, message):
    """Also where the variant has no op to hold the choice (mha has no attn.mask): refused at
    the option in the pipeline text, not accepted unread."""
    pipeline = format_pipeline(target_pipeline("sm_80")).replace(CHOICES, f"{CHOICES}{{{option}}}")
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline))
    assert info.value.filename == "--pass-pipeline" and message in info.value.message


def test_a_choice_the_kernel_cannot_take_names_its_condition():
    """The small grid's kernel, edited in, against a plan of two query blocks per CTA:
    refused at the kernel's .attn location, naming the condition."""
    pipeline = pipeline_with("sm_80", {"attn-warp-specialize": {"q_blocks_per_cta": 2}}).rsplit(",", 1)[0]
    plan = compile_file("examples/alibi.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline)).text
    assert plan.count("small_grid = false") == 1
    with pytest.raises(AttncError) as info:
        _lower(plan.replace("small_grid = false", "small_grid = true"), "sm_80")
    assert info.value.render().startswith(
        "examples/alibi.attn:2:1: error: the sm_80 kernel cannot be built: small_grid adds the kernel with "
        "tiles_last: it needs a kernel with one query block per CTA")


def test_persistent_ctas_are_the_plans():
    """`persistent` is attn-warp-specialize's (it changes the plan: Q's empty mbarrier);
    the lowering builds the CTAs the plan states."""
    def persistent(options: dict):
        pipeline = pipeline_with("sm_90a", {"attn-warp-specialize": options})
        module = compile_file("examples/mha.attn", CompileOptions(arch="sm_90a", pass_pipeline=pipeline)).module
        return "mbar_q_empty" in str(attention_ops(module)[0]), _lowered(module)["persistent"]

    assert persistent({}) == (False, False)
    assert persistent({"persistent": 1}) == (True, True)
    with pytest.raises(AttncError, match=re.escape("persistent=1: persistent CTAs are the producer warpgroup's "
                                                   "kernel; this plan has none (producer=0; producer=1 asks for one)")):
        persistent({"persistent": 1, "producer": 0})
    with pytest.raises(AttncError, match=re.escape("persistent=1: persistent CTAs are sm_90a's producer kernel's and sm_100a's")):
        compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline_with(
            "sm_80", {"attn-warp-specialize": {"persistent": 1}})))


def test_persistent_edited_without_its_walk_is_refused():
    """`persistent` set by hand on a plan made without it: no role walks the query blocks
    (Note [The walk over query blocks] in attnc/schedule/walk.py)."""
    plan = _plan("mha", "sm_90a")
    assert plan.count("}) {ranges = {") == 1
    with pytest.raises(AttncError, match=re.escape("persistent = true on attn.warp_specialize, and role "
                                                   "'producer' has no walk over query blocks")):
        _lower(plan.replace("}) {ranges = {", "}) {persistent = true, ranges = {"), "sm_90a")


def test_a_second_run_chooses_afresh_what_it_is_not_given():
    """On a dump whose choices are all written, the option alone changes the kernel: the
    defaults that depend on it (the small grid's kernel, there only where no grid order is
    given) follow."""
    plan = _plan("alibi", "sm_80")
    assert "small_grid = true" in plan and "small_grid" in _lowered(_lower(plan, "sm_80"), KERNELS_ATTR)[-1]
    rerun = optimize_mlir(plan, "plan.mlir", CompileOptions(arch="sm_80", pass_pipeline=(
        f"{CHOICES}{{tiles_last=1}},{LOWERING['sm_80']}")))
    assert _lowered(rerun)["tiles_last"] is True
    assert "small_grid" not in _lowered(rerun, KERNELS_ATTR)[-1]


def test_persistent_edited_into_a_plan_without_a_producer_is_refused():
    pipeline = pipeline_with("sm_90a", {"attn-warp-specialize": {"producer": 0}}).rsplit(",", 1)[0]
    plan = compile_file("examples/mha.attn", CompileOptions(arch="sm_90a", pass_pipeline=pipeline)).text
    assert plan.count("}) {ranges = {") == 1
    with pytest.raises(AttncError, match=re.escape("attn-lower-sm90a: persistent = true on attn.warp_specialize; "
                                                   "persistent CTAs are the producer warpgroup's kernel")):
        _lower(plan.replace("}) {ranges = {", "}) {persistent = true, ranges = {"), "sm_90a")


def _edit_nth(text: str, old: str, new: str, indices) -> str:
    """`text` with the occurrences `indices` (0-based) of `old` replaced by `new`."""
    parts = text.split(old)
    return "".join(part + ((new if k in indices else old) if k < len(parts) - 1 else "")
                   for k, part in enumerate(parts))


def _ex2_count(ptx: str) -> int:
    return len(re.findall(r"\bex2\.approx", ptx))


def test_a_choice_of_its_own_is_the_code_of_its_op_alone():
    """Note [Choices op by op]: exp2_fma = 4 edited on the softmax step of one of the
    window's three sm_80 KV loops (built apart: Note [Key loops]) moves that loop's
    exponentials to the FMA pipe and no other's -- fewer ex2.approx than with every step
    at 0, more than with every step at 4 -- and the manifest records both values."""
    plan = _plan("sliding_window", "sm_80", {"kv_loops": 3})
    zero = "exp2_fma = 0 : i64"
    assert plan.count(zero) == 3
    one = build(compile_result_of(_lower(_edit_nth(plan, zero, "exp2_fma = 4 : i64", {0}), "sm_80")))
    none = build(compile_result_of(_lower(plan, "sm_80")))
    every = build(compile_result_of(_lower(plan.replace(zero, "exp2_fma = 4 : i64"), "sm_80")))
    assert _ex2_count(none.ptx) > _ex2_count(one.ptx) > _ex2_count(every.ptx)
    assert one.manifest["specialization"]["exp2_fma"] == [0, 4]
    assert every.manifest["specialization"]["exp2_fma"] == 4


def test_an_interval_test_of_one_mask_op():
    """The window's partial KV loops (built apart: Note [Key loops]) test their row
    interval by kept bits by default; an edit of one mask op to "range" is the kernel of
    that loop alone: another PTX than every mask at either test."""
    plan = _plan("sliding_window", "sm_80", {"kv_loops": 3})
    bits = 'interval_test = "bits"'
    assert plan.count(bits) == 2
    ptx = {name: build(compile_result_of(_lower(text, "sm_80"))).ptx for name, text in (
        ("bits", plan), ("range", plan.replace(bits, 'interval_test = "range"')),
        ("one", _edit_nth(plan, bits, 'interval_test = "range"', {1})))}
    assert len(set(ptx.values())) == 3


def test_the_consumers_hold_the_same_choices():
    """sm_90a's two consumer warpgroups run one program: an exp2_fma edited in one
    consumer's first step only is refused at that consumer; edited in both, it builds."""
    plan = _plan("sliding_window", "sm_90a")
    zero = "exp2_fma = 0 : i64"
    assert plan.count(zero) == 8            # per consumer: the first step and three KV loops
    with pytest.raises(AttncError, match="the consumer warpgroups run one program"):
        _lower(_edit_nth(plan, zero, "exp2_fma = 2 : i64", {0}), "sm_90a")
    both = build(compile_result_of(_lower(_edit_nth(plan, zero, "exp2_fma = 2 : i64", {0, 4}), "sm_90a")))
    assert both.manifest["specialization"]["exp2_fma"] == [0, 2]


def _refusal(plan: str, arch: str) -> str:
    """The located error the lowering of `plan` raises, as the CLI prints it."""
    with pytest.raises(AttncError) as info:
        _lower(plan, arch)
    return info.value.render()


def test_a_choice_of_its_own_the_kernel_cannot_take_is_refused_at_its_op():
    """unroll = 3 on one QK^T of ALiBi at head dim 64 (4 k16 steps a 64-column page):
    refused at that mma (its location, and the note naming it), naming the condition."""
    plan = _plan("alibi", "sm_80")
    message = _refusal(_edit_nth(plan, 'kind = "qk", unroll = 1 : i64', 'kind = "qk", unroll = 3 : i64', {1}), "sm_80")
    assert re.match(r"\S+:\d+:\d+: error: the sm_80 kernel cannot be built: qk_unroll=3 must divide 4 \(k16 steps "
                    r"per smem page\), or be 0", message), message
    assert message.endswith(': note: at attn.mma (kind = "qk"), which holds unroll = 3 : i64'), message


def test_a_split_of_one_mask_op():
    """The documents example's block map records the conjunct a MIXED tile holds, and
    every mask op tests only the other by default (split); an edit of one mask op to
    split = false is the kernel of that loop alone: another PTX than every mask either
    way, and the manifest records both values."""
    plan = _plan("docs_sink", "sm_80", {"run_ranges": False})
    split = "split = true"
    count = plan.count(split)
    assert count >= 2
    built = {name: build(compile_result_of(_lower(text, "sm_80"))) for name, text in (
        ("split", plan), ("whole", plan.replace(split, "split = false")),
        ("one", _edit_nth(plan, split, "split = false", {count - 1})))}
    assert len({b.ptx for b in built.values()}) == 3
    assert [built[name].manifest["specialization"]["split_mask"] for name in built] == [True, False, [False, True]]


def _edit_is_the_option(example: str, old: str, new: str, option: dict):
    """`example`'s sm_80 plan, and its bundle with `old` edited to `new` on its one op,
    checked to be the kernel of the pass `option` and not the plan's own."""
    plan = _plan(example, "sm_80")
    assert plan.count(old) == 1, old
    edited = build(compile_result_of(_lower(plan.replace(old, new), "sm_80")))
    by_option = build(compile_result_of(_lower(_plan(example, "sm_80", option), "sm_80")))
    assert edited.ptx == by_option.ptx != build(compile_result_of(_lower(plan, "sm_80"))).ptx
    return plan, edited


def test_staged_o_is_read_from_the_store_and_refused_there():
    """O's store holds `staged`: the mha example's sm_80 store edited to false is the
    kernel of staged_o=false, and the window's sm_90a producer kernel (whose producer may
    still load while the consumers store) refuses staged = true at the store it was
    edited on."""
    _, edited = _edit_is_the_option("mha", "staged = true", "staged = false", {"staged_o": False})
    assert edited.manifest["specialization"]["staged_o"] is False
    windows = _plan("sliding_window", "sm_90a")
    assert windows.count("staged = false") >= 2         # O's stores of the consumers' walks
    message = _refusal(_edit_nth(windows, "staged = false", "staged = true", {1}), "sm_90a")
    assert re.match(r"\S+:\d+:\d+: error: the sm_90a kernel cannot be built: staged_o needs a kernel with one "
                    r"query block per CTA, no producer warpgroup", message), message


@pytest.mark.parametrize("example, old, new, message", [
    ("docs_sink", '{operand = "q"}', '{lean = true, operand = "q"}',
     "lean sits on the K and V attn.load only, not on this attn.load"),
    ("gemma2", '{operand = "lse"}', '{operand = "lse", staged = true}',
     "staged sits on O's attn.store only, not on this attn.store"),
    ("alibi", '{kind = "qk", unroll = 1 : i64}', '{kind = "qk", row_sum = true, unroll = 1 : i64}',
     "row_sum sits on the P.V attn.mma only, not on this attn.mma"),
    ("mha", '{exp2_fma = 0 : i64}', '{exp2_fma = 0 : i64, lazy = true}',
     "lazy sits on attn.rescale only, not on this attn.softmax_step"),
])
def test_a_choice_on_an_op_it_does_not_sit_on_is_refused(example, old, new, message):
    """Note [Kernel choices]: no lowering reads a choice written where it does not sit, so
    the lowering refuses it at that op rather than build a kernel without it."""
    plan = _plan(example, "sm_80")
    assert plan.count(old) >= 1, old
    rendered = _refusal(plan.replace(old, new, 1), "sm_80")
    assert re.match(r"\S+:\d+:\d+: error: " + re.escape(message), rendered), rendered


@pytest.mark.parametrize("plan", [{}, {"producer": 0}], ids=["producer", "cooperative"])
def test_a_register_bound_the_assembler_cannot_meet_is_the_options_refusal(plan):
    """min_ctas_per_sm=2 on sm_90a at head dim 128: 85 registers a thread (a producer's
    three warpgroups) or 128 (the cooperative kernel's two) are too few for its wgmma
    accumulators. The assembler's failure is said as the option's, not as a compiler error."""
    pipeline = pipeline_with("sm_90a", {"attn-warp-specialize": plan, CHOICES: {"min_ctas_per_sm": 2}})
    result = compile_file("examples/mha.attn", CompileOptions(arch="sm_90a", pass_pipeline=pipeline))
    with pytest.raises(AttncError, match=r"min_ctas_per_sm=2: the assembler cannot fit the kernel into the "
                                         r"(85|128) registers a thread .* lower min_ctas_per_sm"):
        build(result)
