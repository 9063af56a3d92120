"""Note [The plan the lowerings follow] (attnc/passes/lower_kernel.py): attn-lower-sm80 and
attn-lower-sm90a build the kernel an L5 plan states, and attn-kernel-choices builds the
same lowering to choose its defaults. A plan edited into one they cannot build is refused
at the kernel's location with the rule it breaks: the spec's checks
(attnc/backend/spec_checks.py, as "the <target> kernel cannot be built: ..."), the
buffers and mbarriers as placed (Notes [Buffers as placed] and [Mbarriers as planned] in
attnc/backend/smem_layout.py), the channels the kernel moves (plan_ir.check_channels) and
a plan without the K/V channel, which attn-kernel-choices refuses as the lowering does.

Each case edits the text of a dump (the IR after attn-kernel-choices; for a one-stage
cooperative sm_90a kernel, the IR after attn-tile) and runs the lowering, or
attn-kernel-choices where the lowering's own checks of the plan (the verifier, the walk
over query blocks, the K/V channel) refuse the edit before the kernel is built."""
from __future__ import annotations

import functools
import re

import pytest

from attnc.driver import CompileOptions, compile_file, optimize_mlir
from attnc.errors import AttncError
from attnc.passes.pipelines import CHOICES_PASS, LOWERING, pipeline_with

LOCATED = re.compile(r"[^\s:]+:\d+:\d+: error: ")

# The plans edited: (target, example, ((pass, ((option, value), ...)), ...)).
SM80 = ("sm_80", "mha", ())
SM80_BLOCK_M_64 = ("sm_80", "mha", (("attn-tile", (("block_m", 64),)),))
SM80_DIFF_HEAD_DIMS = ("sm_80", "diff_head_dims", ())
SM90A = ("sm_90a", "mha", ())
SM90A_BLOCK_N_64 = ("sm_90a", "mha", (("attn-tile", (("block_n", 64),)),))
SM90A_COOPERATIVE = ("sm_90a", "mha", (("attn-warp-specialize", (("producer", 0),)),))


def _options(options: tuple) -> dict:
    return {name: dict(values) for name, values in options}


@functools.lru_cache(maxsize=None)
def _plan(base: tuple) -> str:
    """The IR after attn-kernel-choices (every pass of the target but the lowering), as a
    dump holds it."""
    arch, example, options = base
    pipeline = pipeline_with(arch, _options(options)).rsplit(",", 1)[0]
    return compile_file(f"examples/{example}.attn", CompileOptions(arch=arch, pass_pipeline=pipeline)).text


def _run(text: str, arch: str, pipeline: str, filename: str = "plan.mlir"):
    return optimize_mlir(text, filename, CompileOptions(arch=arch, pass_pipeline=pipeline))


def _refused(text: str, arch: str, pipeline: str, message: str, filename: str = "plan.mlir") -> AttncError:
    """`pipeline` on `text` raises `message`, located (file:line:col: error:); the error."""
    with pytest.raises(AttncError, match=re.escape(message)) as err:
        _run(text, arch, pipeline, filename)
    assert LOCATED.match(err.value.render()), err.value.render()
    return err.value


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, (old, text.count(old))
    return text.replace(old, new)


def _edit_all(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def _buffer_entry(text: str, name: str) -> str:
    found = re.findall(r'\{[^{}]*name = "%s"[^{}]*\}' % name, text)
    assert len(found) == 1, (name, found)
    return found[0]


def _buffer(text: str, name: str, **fields) -> str:
    """`text` with fields of buffer `name` set: offset, size, stride (bytes), swizzle."""
    entry = new = _buffer_entry(text, name)
    for key, value in fields.items():
        pattern, value = (r'swizzle = "\w+"', f'swizzle = "{value}"') if key == "swizzle" else \
            (rf"\b{key} = \d+ : i64", f"{key} = {value} : i64")
        assert re.search(pattern, new), (name, key)
        new = re.sub(pattern, value, new)
    return _edit(text, entry, new)


def _scaled_buffers(text: str, factor: int) -> str:
    """Every buffer's offset, size and stride times `factor`: the placement of elements
    `factor` times as wide."""
    for name in ("sQ", "sK", "sV"):
        entry = _buffer_entry(text, name)
        fields = {key: int(v) * factor for key, v in re.findall(r"\b(offset|size|stride) = (\d+) : i64", entry)}
        text = _buffer(text, name, **fields)
    return text


# --- the spec's checks ---------------------------------------------------------------------
def _warps(plan: str, old: str, new: str) -> str:
    return _edit(plan, f"warps = [{old}]", f"warps = [{new}]")


def _f32_operands(plan: str) -> str:
    """q, k, v (and o) of f32, in buffers of twice the bytes."""
    return _edit_all(_scaled_buffers(plan, 2), "bf16", "f32")


def _f64_output(plan: str) -> str:
    bf16, f64 = "tensor<?x?x?x128xbf16>", "tensor<?x?x?x128xf64>"
    plan = _edit(plan, f") -> {bf16} {{", f") -> {f64} {{")         # the function's result
    plan = _edit(plan, f"{bf16}) -> {bf16} loc", f"{bf16}) -> {f64} loc")      # the kernel's
    return _edit(plan, f"return %0 : {bf16}", f"return %0 : {f64}")


def _v_head_dim_32(plan: str) -> str:
    """diff_head_dims' V (and O) 32 wide instead of 64: sV of 64 x 32 bf16 a stage."""
    plan = _edit_all(plan, "x64xbf16", "x32xbf16")
    plan = _edit(plan, "head_dim_v = 64 : i64", "head_dim_v = 32 : i64")
    plan = _edit(plan, 'v_shape = ["B", "HKV", "N", 64]', 'v_shape = ["B", "HKV", "N", 32]')
    return _buffer(plan, "sV", size=2 * 64 * 32 * 2, swizzle="xor64B")


def _block_n_72(plan: str) -> str:
    """block_n 72, its K and V tiles (72 x 128 bf16: 18432 bytes a stage) side by side."""
    plan = _edit(plan, ", block_n = 64 : i64", ", block_n = 72 : i64")
    plan = _buffer(plan, "sK", size=2 * 18432, stride=2 * 18432)
    return _buffer(plan, "sV", offset=32768 + 18432, size=2 * 18432, stride=2 * 18432)


def _kv_stages(stages: int):
    """The producer plan of block_n=64 (16384 bytes a K or V tile) with `stages` K/V
    stages: its channel, buffers and mbarriers."""
    def edit(plan: str) -> str:
        plan = _edit_all(plan, "stages = 3 : i64", f"stages = {stages} : i64")
        return _buffer(_buffer(plan, "sK", size=stages * 16384), "sV", size=stages * 16384)
    return edit


def _block_n_320(plan: str) -> str:
    """block_n 320 (81920 bytes a K or V tile), one stage to fit."""
    plan = _edit_all(plan, "stages = 3 : i64", "stages = 1 : i64")
    plan = _edit(plan, ", block_n = 128 : i64", ", block_n = 320 : i64")
    return _buffer(_buffer(plan, "sK", offset=32768, size=81920), "sV", offset=32768 + 81920, size=81920)


def _built(target: str) -> str:
    return f"the {target} kernel cannot be built: "


SPEC_CASES = {
    "block_m_not_a_multiple_of_the_warps_rows": (
        SM80_BLOCK_M_64, lambda p: _warps(p, "0, 1, 2, 3", "0, 1, 2, 3, 4, 5, 6, 7"), LOWERING["sm_80"],
        _built("sm_80") + "block_m=64 must be a multiple of 16*num_warps=128"),
    "a_negative_softmax_scale": (
        SM80, lambda p: _edit(p, "scale = 0.0883883461 : f32", "scale = -1.250000e-01 : f32"), LOWERING["sm_80"],
        _built("sm_80") + "softmax_scale=-0.125: must be positive"),
    "copies_that_break_the_8_row_swizzle": (
        SM80, lambda p: _warps(p, "0, 1, 2, 3", "0"), LOWERING["sm_80"],
        _built("sm_80") + "32 threads copy rows of head dim 128 in passes of 4 rows, which breaks the 8-row "
                          "swizzle: raise num_warps"),
    "more_accumulators_than_registers": (
        SM80, lambda p: _warps(p, "0, 1, 2, 3", "0, 1"), LOWERING["sm_80"],
        _built("sm_80") + "384 f32 accumulator registers per thread (S 64 wide, O 128 wide, 4 row tiles per "
                          "warp) exceed 192: lower block_n or block_m, or raise num_warps"),
    "more_shared_memory_than_the_target_has": (
        SM80, lambda p: _buffer(p, "sQ", offset=163840), LOWERING["sm_80"],
        _built("sm_80") + "196608 bytes of shared memory exceed 166912: lower stages, block_n or block_m"),
    "an_operand_dtype_without_mma": (
        SM80_BLOCK_M_64, _f32_operands, LOWERING["sm_80"],
        _built("sm_80") + "dtype 'f32': expected one of ('f16', 'bf16')"),
    "an_output_dtype_it_cannot_store": (
        SM80, _f64_output, LOWERING["sm_80"],
        _built("sm_80") + "out_dtype 'f64': expected one of ('f16', 'bf16', 'f32')"),
    "an_unsupported_head_dim": (
        SM80_DIFF_HEAD_DIMS, _v_head_dim_32, LOWERING["sm_80"],
        _built("sm_80") + "head_dim_v=32: supported head dims are (64, 96, 128, 256)"),
    "block_n_not_a_multiple_of_16": (
        SM80, _block_n_72, LOWERING["sm_80"],
        _built("sm_80") + "block_n=72 must be a positive multiple of 16"),
    "a_warpgroup_of_more_than_64_rows": (
        SM90A_COOPERATIVE, lambda p: _warps(p, "0, 1, 2, 3, 4, 5, 6, 7", "0, 1, 2, 3"), LOWERING["sm_90a"],
        _built("sm_90a") + "sm_90a runs warpgroups of 4 warps and 64 rows: block_m=128 with num_warps=4 gives "
                           "32 rows per warp, not 16"),
    "pingpong_without_a_producer": (
        SM90A_COOPERATIVE, lambda p: _edit(p, "}) {ranges = {compute", "}) {pingpong = true, ranges = {compute"),
        LOWERING["sm_90a"],
        _built("sm_90a") + "pingpong takes turns between two consumer warpgroups (block_m=128) and needs the "
                           "producer warpgroup: block_m=128, producer=0"),
    # The lowering's verifier refuses these edits of the stages first (one stage
    # deadlocks, five are past its states): attn-kernel-choices builds the kernel without it.
    "five_kv_stages": (
        SM90A_BLOCK_N_64, _kv_stages(5), CHOICES_PASS,
        _built("sm_90a") + "stages=5: expected 1 to 4"),
    "a_producer_with_one_kv_stage": (
        SM90A_BLOCK_N_64, _kv_stages(1), CHOICES_PASS,
        _built("sm_90a") + "a producer warpgroup needs at least two K/V stages"),
    "a_wgmma_n_past_256": (
        SM90A, _block_n_320, CHOICES_PASS,
        _built("sm_90a") + "wgmma's N is at most 256: block_n=320, head_dim_v=128"),
}


# Where each refusal of SPEC_CASES is located: the op of the part of the IR its check
# read (lowering.py's `part_op`), which the error's note names -- the roles' warps at
# the first computing role, the stages and the buffers' bytes at the K/V channel, a flag
# of attn.warp_specialize there -- or at the attn.kernel, whose line tells it (no note).
KERNEL, COMPUTE = None, 'at attn.role (name = "compute"), made by attn-warp-specialize'
KV = 'at attn.channel (name = "kv"), made by attn-warp-specialize'
SPEC_NOTES = {
    "block_m_not_a_multiple_of_the_warps_rows": KERNEL,
    "a_negative_softmax_scale": KERNEL,
    "copies_that_break_the_8_row_swizzle": COMPUTE,
    "more_accumulators_than_registers": KERNEL,
    "more_shared_memory_than_the_target_has": KV,
    "an_operand_dtype_without_mma": KERNEL,
    "an_output_dtype_it_cannot_store": KERNEL,
    "an_unsupported_head_dim": KERNEL,
    "block_n_not_a_multiple_of_16": KERNEL,
    "a_warpgroup_of_more_than_64_rows": COMPUTE,
    "pingpong_without_a_producer": "at attn.warp_specialize, made by attn-warp-specialize",
    "five_kv_stages": KV,
    "a_producer_with_one_kv_stage": KV,
    "a_wgmma_n_past_256": KERNEL,
}


@pytest.mark.parametrize("case", SPEC_CASES)
def test_a_kernel_the_spec_cannot_build_is_refused(case):
    base, edit, pipeline, message = SPEC_CASES[case]
    error = _refused(edit(_plan(base)), base[0], pipeline, message)
    assert error.note == SPEC_NOTES[case]
    place = f"{error.filename}:{error.span.line}:{error.span.col}"
    assert (f"{place}: note:" in error.render()) == (error.note is not None), error.render()
    assert error.note is None or error.render().endswith(f"\n{place}: note: {error.note}"), error.render()


@pytest.mark.parametrize("old, new, message, note", [
    pytest.param('kind = "pv", row_sum = false', 'kind = "pv", row_sum = true',
                 "mma_row_sum sums P on mma.sync, an sm_80 kernel's P.V, not sm_90a's",
                 'at attn.mma (kind = "pv"), which holds row_sum = true', id="row-sum"),
    pytest.param('lean = false', 'lean = true',
                 "lean_loads needs an sm_80 kernel whose key ranges come from a block map or a band",
                 'at attn.load (operand = "k"), which holds lean = true', id="lean"),
])
def test_a_choice_the_kernel_cannot_take_is_refused_at_its_op(old, new, message, note):
    """A choice edited on every op that holds it, in sm_90a's plan: the error's note names
    the op and what it holds, which its line (the attention's, as every op's) does not."""
    error = _refused(_edit_all(_plan(SM90A), old, new), "sm_90a", LOWERING["sm_90a"], _built("sm_90a") + message)
    assert error.note == note


def test_a_cooperative_sm90a_kernel_of_one_kv_stage_is_refused():
    """attn-tile's stages edited to 1 in the IR after attn-tile, the plan passes run on it
    but attn-overlap-gemms (which refuses one stage), then attn-kernel-choices: the
    kernel's own check of its stages."""
    arch, example, options = SM90A_COOPERATIVE
    tiled = compile_file(f"examples/{example}.attn", CompileOptions(arch=arch, pass_pipeline="attn-tile")).text
    passes = pipeline_with(arch, _options(options)).split(",")
    assert passes[0] == "attn-tile" and passes[-2:] == [CHOICES_PASS, LOWERING[arch]]
    rest = ",".join(p for p in passes[1:-1] if p != "attn-overlap-gemms")
    _run(tiled, arch, rest, "tiled.mlir")           # three stages: built
    _refused(_edit(tiled, "stages = 3 : i64", "stages = 1 : i64"), arch, rest,
             _built(arch) + "sm_90a's kernel needs two or more K/V stages", "tiled.mlir")


# --- buffers, mbarriers and channels -------------------------------------------------------
def _a_buffer_of_no_tile(plan: str) -> str:
    entry = _buffer_entry(plan, "sQ")
    extra = ('{align = 128 : i64, name = "sX", offset = 98304 : i64, size = 128 : i64, space = "smem", '
             'stages = 1 : i64, swizzle = "none"}')
    return _edit(plan, f"[{entry}]", f"[{entry}, {extra}]")


def _q_channel_removed(plan: str) -> str:
    """The q channel's op gone, Q's slot ops moved onto the kv channel's value (%2)."""
    line = next(x for x in plan.splitlines(keepends=True) if 'name = "q", producer' in x)
    assert line.lstrip().startswith('%1 = "attn.channel"')
    return _edit_all(_edit(plan, line, ""), "(%1, ", "(%2, ")


PLAN_CASES = {
    # The lowering refuses persistent CTAs without the walk over query blocks first.
    "an_mbarrier_the_plan_lacks": (
        SM90A, lambda p: _edit(p, "}) {ranges = {consumer0", "}) {persistent = true, ranges = {consumer0"),
        CHOICES_PASS,
        "the sm_90a kernel waits on or arrives at mbarrier 'q_empty', which the plan has no "
        "attn.mbarrier_init for: run attn-insert-pipelines"),
    "a_channel_without_its_buffer": (
        SM80, lambda p: _edit(p, f"[{_buffer_entry(p, 'sQ')}]", "[]"), LOWERING["sm_80"],
        "the sm_80 kernel needs buffer sQ (channel 'q'), and the plan has none: run attn-alloc-smem"),
    "a_buffer_of_no_tile": (
        SM80, _a_buffer_of_no_tile, LOWERING["sm_80"],
        "buffer sX is none of the sm_80 kernel's (sQ, sK, sV)"),
    "a_channel_the_kernel_does_not_move": (
        SM80, lambda p: _edit(p, 'name = "q", producer', 'name = "q2", producer'), LOWERING["sm_80"],
        "attn-lower-sm80: channel 'q2' is none the sm_80 kernel moves (q, kv)"),
    "a_plan_without_a_channel_the_kernel_moves": (
        SM80, _q_channel_removed, LOWERING["sm_80"],
        "attn-lower-sm80: the sm_80 kernel moves channel 'q', which the plan lacks: run attn-warp-specialize"),
    # attn-kernel-choices checks the channels before it reads its defaults off the plan
    "a_channel_the_kernel_does_not_move_before_its_choices": (
        SM80, lambda p: _edit(p, 'name = "q", producer', 'name = "q2", producer'), CHOICES_PASS,
        "attn-kernel-choices: channel 'q2' is none the sm_80 kernel moves (q, kv)"),
    "a_plan_without_a_channel_the_kernel_moves_before_its_choices": (
        SM80, _q_channel_removed, CHOICES_PASS,
        "attn-kernel-choices: the sm_80 kernel moves channel 'q', which the plan lacks: run attn-warp-specialize"),
    "a_plan_without_the_kv_channel": (
        SM80, lambda p: _edit(p, 'name = "kv", producer', 'name = "kv2", producer'), CHOICES_PASS,
        "attn-kernel-choices: the plan has no K/V channel ('kv')"),
}


@pytest.mark.parametrize("case", PLAN_CASES)
def test_a_plan_the_kernel_cannot_take_is_refused(case):
    base, edit, pipeline, message = PLAN_CASES[case]
    _refused(edit(_plan(base)), base[0], pipeline, message)


@pytest.mark.parametrize("base, pipeline", sorted({(case[0], case[2]) for case in
                                                    [*SPEC_CASES.values(), *PLAN_CASES.values()]}))
def test_the_unedited_plans_are_built(base, pipeline):
    """The plans edited above go through the same passes: each refusal is its edit's."""
    _run(_plan(base), base[0], pipeline)
