"""Note [The plan the lowerings follow] (lower_kernel.py): the lowering builds the roles,
stages, register budgets, ping-pong, persistent CTAs and the KV loops' trips the IR
states, and refuses a plan that differs elsewhere rather than silently building another."""
from __future__ import annotations

import json
import re

import pytest
from mlir import ir

from attnc.backend.lowering import build
from attnc.driver import CompileOptions, compile_file, optimize_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir import roles as R
from attnc.passes.lower_kernel import SPECIALIZATION_ATTR, compile_result_of, lowered_gpu_module
from attnc.passes.pipelines import format_pipeline, pipeline_with, target_pipeline


def _plan(tmp_path, example: str, arch: str, options: dict | None = None) -> str:
    """The IR after every pass of `arch` but the lowering, as --dump-dir writes it."""
    specs = target_pipeline(arch)
    pipeline = pipeline_with(arch, options or {}).rsplit(",", 1)[0]
    dump = tmp_path / "dump"
    compile_file(f"examples/{example}.attn", CompileOptions(arch=arch, pass_pipeline=pipeline, dump_dir=str(dump)))
    assert len(list(dump.glob("*.mlir"))) == len(specs)
    return sorted(dump.glob("*.mlir"))[-1].read_text()


def _lowered(plan: str, arch: str):
    lowering = target_pipeline(arch)[-1].name
    return build(compile_result_of(optimize_mlir(plan, "plan.mlir", CompileOptions(arch=arch,
                                                                                   pass_pipeline=lowering))))


def _specialization(plan: str, arch: str) -> dict:
    """Every choice of the kernel the lowering builds from `plan`, resolved, as the
    manifest records it (the lowering alone: no PTX)."""
    lowering = target_pipeline(arch)[-1].name
    module = optimize_mlir(plan, "plan.mlir", CompileOptions(arch=arch, pass_pipeline=lowering))
    return json.loads(ir.StringAttr(lowered_gpu_module(module).attributes[SPECIALIZATION_ATTR]).value)


def test_consumers_must_cover_the_tile():
    pipeline = pipeline_with("sm_90a", {"attn-warp-specialize": {"consumers": 1}})
    with pytest.raises(AttncError, match=re.escape("consumers=1 runs 64 query rows (64 a warpgroup), and the tile "
                                                   "has block_m=128: set attn-tile{block_m=64}")):
        compile_file("examples/mha.attn", CompileOptions(arch="sm_90a", pass_pipeline=pipeline))


@pytest.mark.parametrize("edit, difference, note", [
    (("stages = 2 : i64, tile = [\"k\", \"v\"]", "stages = 3 : i64, tile = [\"k\", \"v\"]"),
     "buffer sK has 2 stages and its channel 'kv' 3: run attn-alloc-smem again after editing the channel",
     'at attn.channel (name = "kv"), made by attn-warp-specialize'),
    # a cooperative role sets no registers, and sm_80 has no consumers to take turns:
    # neither edit may be silently dropped; each is refused at the op edited, which the note names
    (('name = "compute", regs = 0 : i64', 'name = "compute", regs = 200 : i64'),
     "the cooperative role 'compute' has a register budget (regs = 200)",
     'at attn.role (name = "compute"), made by attn-warp-specialize'),
    (("}) {ranges = {", "}) {pingpong = true, ranges = {"),
     "pingpong on attn.warp_specialize: sm_80 has no consumer warpgroups to take turns",
     "at attn.warp_specialize, made by attn-warp-specialize"),
])
def test_a_plan_edited_where_the_lowering_does_not_follow_is_refused(tmp_path, edit, difference, note):
    plan = _plan(tmp_path, "mha", "sm_80")
    assert plan.count(edit[0]) == 1
    with pytest.raises(AttncError, match=re.escape(difference)) as error:
        _lowered(plan.replace(*edit), "sm_80")
    assert error.value.note == note


def test_edited_buffers_are_placed_as_edited(tmp_path):
    """Note [Buffers as placed] (smem_layout.py): Q moved past the K/V slots is read and
    written there, and the kernel's shared memory runs to its end."""
    plan = _plan(tmp_path, "mha", "sm_80")
    old, new = 'name = "sQ", offset = 0 :', 'name = "sQ", offset = 98304 :'
    assert plan.count(old) == 1
    plain, moved = _lowered(plan, "sm_80"), _lowered(plan.replace(old, new), "sm_80")
    assert plain.manifest["kernels"][-1]["dynamic_smem_bytes"] == 98304
    assert moved.manifest["kernels"][-1]["dynamic_smem_bytes"] == 98304 + 32768
    assert moved.ptx != plain.ptx


@pytest.mark.parametrize("edit, error", [
    (('name = "sK", offset = 32768', 'name = "sK", offset = 0'),
     "stage 0 of buffer sQ (from byte 0) overlaps stage 0 of sK (bytes 0 to 16384)"),
    (('name = "sQ", offset = 0', 'name = "sQ", offset = 64'),
     "buffer sQ has offset 64; the sm_80 kernel places tiles and their stages at multiples of 128 bytes"),
    (('name = "sV", offset = 49152 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, stride = 32768',
      'name = "sV", offset = 98304 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, stride = 16384'),
     "the sm_80 kernel steps K and V by one slot offset (stage x stride), and sK's stride is 32768, sV's 16384"),
    (('name = "sK", offset = 32768 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, stride = 32768',
      'name = "sK", offset = 32768 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, stride = 8192'),
     "buffer sK has stride 8192, less than a stage's 16384 bytes: its stages overlap"),
    (('stride = 32768 : i64, swizzle = "xor128B"}], consumer = "compute", name = "kv"',
      'stride = 32768 : i64, swizzle = "xor64B"}], consumer = "compute", name = "kv"'),
     "buffer sV has swizzle xor64B; the sm_80 kernel's is xor128B"),
    (('name = "sQ", offset = 0 : i64, size = 32768', 'name = "sQ", offset = 0 : i64, size = 16384'),
     "buffer sQ holds 16384 bytes; its tile takes 32768 a stage, 32768 for its 1"),
])
def test_a_placement_the_kernel_cannot_take_is_refused_at_its_channel(tmp_path, edit, error):
    plan = _plan(tmp_path, "mha", "sm_80")
    assert plan.count(edit[0]) == 1
    with pytest.raises(AttncError, match=re.escape(error)) as caught:
        _lowered(plan.replace(*edit), "sm_80")
    assert "plan.mlir" in str(caught.value) or "mha.attn" in str(caught.value)


def test_an_edited_role_is_built_as_edited(tmp_path):
    """The cooperative role's warps, edited from 4 to 8: a kernel of 256 threads."""
    plan = _plan(tmp_path, "mha", "sm_80")
    old, new = "warps = [0, 1, 2, 3]", "warps = [0, 1, 2, 3, 4, 5, 6, 7]"
    assert plan.count(old) == 1
    assert _lowered(plan, "sm_80").manifest["kernels"][-1]["block"] == [128, 1, 1]
    assert _lowered(plan.replace(old, new), "sm_80").manifest["kernels"][-1]["block"] == [256, 1, 1]
    with pytest.raises(AttncError, match=re.escape("num_warps=3: expected one of (1, 2, 4, 8)")):
        _lowered(plan.replace(old, "warps = [0, 1, 2]"), "sm_80")


def test_edited_register_budgets_are_the_kernels(tmp_path):
    plan = _plan(tmp_path, "mha", "sm_90a")
    assert plan.count("regs = 240 : i64") == 2 and plan.count("regs = 24 : i64") == 1
    edited = plan.replace("regs = 240 : i64", "regs = 232 : i64").replace("regs = 24 : i64", "regs = 40 : i64")
    ptx = _lowered(edited, "sm_90a").ptx
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in ptx and "setmaxnreg.dec.sync.aligned.u32 40;" in ptx
    with pytest.raises(AttncError, match=re.escape("the roles' register budgets take 65536 registers, more than "
                                                   "the 64512 the CTA starts with")) as error:
        _lowered(plan.replace("regs = 24 : i64", "regs = 32 : i64"), "sm_90a")
    assert error.value.note == 'at attn.role (name = "producer"), made by attn-warp-specialize'
    with pytest.raises(AttncError, match="different register budgets") as error:
        _lowered(plan.replace("regs = 240 : i64", "regs = 232 : i64", 1), "sm_90a")
    assert error.value.note == 'at attn.role (name = "consumer1"), made by attn-warp-specialize'


@pytest.fixture(scope="module")
def plans_90(tmp_path_factory):
    """mha's sm_90a plan, without and with ping-pong."""
    tmp = tmp_path_factory.mktemp("plans")
    return (_plan(tmp / "plain", "mha", "sm_90a"),
            _plan(tmp / "turns", "mha", "sm_90a", {"attn-warp-specialize": {"pingpong": 1}}))


def test_pingpong_is_followed_with_its_named_barriers(plans_90):
    """`pingpong` on attn.warp_specialize and the consumers' named barriers (Note [Ping-pong
    turns] in attnc/schedule/sync.py) go together: either one edited in alone is refused;
    the barriers' ids are the kernel's (Note [Turns as planned])."""
    plain, turns = plans_90
    # consumer0's turns before step 0's QK^T, each trip's GEMMs and the last P.V, and its
    # last sync; consumer1's three (Note [Overlapped steps in the IR])
    assert "attn.named_barrier" not in plain and turns.count('"attn.named_barrier_sync"') == 7
    ptx = _lowered(turns, "sm_90a").ptx
    assert "bar.sync 1, 256;" in ptx and "bar.arrive 2, 256;" in ptx
    renumbered = _lowered(turns.replace("id = 1 : i64", "id = 3 : i64"), "sm_90a").ptx
    assert "bar.sync 3, 256;" in renumbered and "bar.sync 1, 256;" not in renumbered
    attribute = ("}) {ranges = {", "}) {pingpong = true, ranges = {")
    with pytest.raises(AttncError, match=re.escape("role 'consumer0' takes named_barrier_sync after its key range "
                                                   "in the kernel, and no turn in this plan")):
        _lowered(plain.replace(*attribute), "sm_90a")
    with pytest.raises(AttncError, match=re.escape("only ping-pong's consumer warpgroups take turns on named "
                                                   "barriers, and attn.warp_specialize has no `pingpong`")):
        _lowered(turns.replace(attribute[1], attribute[0]), "sm_90a")
    # one of consumer0's syncs moved to another barrier: the verifier finds the deadlock
    with pytest.raises(AttncError, match=re.escape("the named barriers and channel 'kv' deadlock: consumer0 waits "
                                                   "at attn.named_barrier_sync on named barrier 3")):
        _lowered(turns.replace("id = 1 : i64", "id = 3 : i64", 1), "sm_90a")


def test_mbarriers_are_placed_and_counted_as_planned(plans_90):
    """Note [Mbarriers as planned] (smem_layout.py): the attn.mbarrier_init ops in another
    order give another kernel; counts are the verifier's to check; a barrier the kernel
    does not use, or one with other stages than its channel, is refused at the op."""
    plain, _ = plans_90
    lines = plain.splitlines()
    k = next(i for i, line in enumerate(lines) if '"attn.mbarrier_init"' in line and "mbar_k_full" in line)
    swapped = lines[:k] + [lines[k + 1], lines[k]] + lines[k + 2:]
    assert _lowered("\n".join(swapped), "sm_90a").ptx != _lowered(plain, "sm_90a").ptx
    with pytest.raises(AttncError, match=re.escape("mbar_k_full[0] gets 128 arrivals in one phase, more than its "
                                                   "count 64")):
        _lowered(plain.replace('count = 128 : i64, name = "mbar_k_full"', 'count = 64 : i64, name = "mbar_k_full"'),
                 "sm_90a")
    with pytest.raises(AttncError, match=re.escape("mbarrier mbar_k_full has 2 stages and the channel of tile 'k' "
                                                   "3: one barrier a slot")):
        _lowered(plain.replace('name = "mbar_k_full", side = "full", stages = 3',
                               'name = "mbar_k_full", side = "full", stages = 2'), "sm_90a")
    extra = lines[k].split(" = ", 1)[1].replace("mbar_k_full", "mbar_x_full").replace('tile = "k"', 'tile = "x"')
    with pytest.raises(AttncError, match=re.escape("mbarrier mbar_x_full (x, full) is none the sm_90a kernel waits "
                                                   "on or arrives at: it uses q_full, k_full, v_full, k_empty, "
                                                   "v_empty")):
        _lowered("\n".join(lines[:k] + [f"%extra = {extra}"] + lines[k:]), "sm_90a")


def _insert_at(lines: list[str], at: int, op: str) -> str:
    """The plan with `op` inserted before line `at`, at its indentation."""
    indent = len(lines[at]) - len(lines[at].lstrip())
    return "\n".join(lines[:at] + [" " * indent + op] + lines[at:])


def test_a_second_barrier_roles_out_of_order_and_a_turn_id_past_15_are_refused(plans_90):
    plain, turns = plans_90
    lines = plain.splitlines()
    k = next(i for i, line in enumerate(lines) if '"attn.mbarrier_init"' in line and "mbar_k_full" in line)
    second = "%second = " + lines[k].split(" = ", 1)[1].replace('"mbar_k_full"', '"mbar_k_full2"')
    with pytest.raises(AttncError, match=re.escape("mbarrier mbar_k_full2 is the second for k's full side; the "
                                                   "sm_90a kernel has one")):
        _lowered("\n".join(lines[:k + 1] + [second] + lines[k + 1:]), "sm_90a")
    swapped = plain.replace('name = "consumer0"', 'name = "c"').replace('name = "consumer1"', 'name = "consumer0"')
    with pytest.raises(AttncError, match=re.escape("the sm_90a kernel's roles stand in the order producer, "
                                                   "consumer0, consumer1; this plan has producer, consumer1, "
                                                   "consumer0")):
        _lowered(swapped.replace('name = "c"', 'name = "consumer1"'), "sm_90a")
    with pytest.raises(AttncError, match=re.escape("named barrier 16: the kernel's turns take ids 1 to 15")):
        _lowered(turns.replace("id = 2 : i64", "id = 16 : i64"), "sm_90a")


def test_roles_of_one_query_block_are_followed_in_full(plans_90):
    """Note [Roles followed in full] (attnc/ir/roles.py): with their digests no longer
    compared, what stands around the KV loops of sm_90a's roles is checked op by op -- an
    op added after the producer's loads or in the key range's else branch, a start value
    edited, ping-pong's last turn removed: each refused at its op."""
    plain, turns = plans_90
    lines = plain.splitlines()
    barrier = '"attn.cta_barrier"() : () -> ()'
    producer_end = next(i for i, line in enumerate(lines) if line.startswith(" " * 10 + "gpu.yield"))
    with pytest.raises(AttncError, match=re.escape("after the key range the producer has loaded every tile and "
                                                   "does nothing else, not attn.cta_barrier")):
        _lowered(_insert_at(lines, producer_end, barrier), "sm_90a")
    otherwise = next(i for i, line in enumerate(lines) if line.startswith(" " * 10 + "} else {"))
    with pytest.raises(AttncError, match=re.escape("where the key range has no step the kernel yields the values it "
                                                   "starts from and does nothing else, not attn.cta_barrier")):
        _lowered(_insert_at(lines, otherwise + 1, barrier), "sm_90a")
    with pytest.raises(AttncError, match=re.escape("the kernel starts m, l and O from -inf, 0 and 0")):
        _lowered(plain.replace('"attn.fill"() {value = 0xFF800000 : f32}', '"attn.fill"() {value = 0.000000e+00 : '
                                                                            'f32}', 1), "sm_90a")
    lines = turns.splitlines()
    last = [i for i, line in enumerate(lines) if line.startswith(" " * 10 + '"attn.named_barrier_sync"')]
    assert len(last) == 1       # consumer0's last turn
    with pytest.raises(AttncError, match=re.escape("role 'consumer0' takes named_barrier_sync after its key range "
                                                   "in the kernel, and no turn in this plan")):
        _lowered("\n".join(lines[:last[0]] + lines[last[0] + 1:]), "sm_90a")


def test_a_persistent_ctas_start_values_are_checked(tmp_path):
    """Each query block of a persistent CTA starts m from -inf (the fills in its walk):
    one edited to 0 is refused, not built as the kernel's -inf."""
    plan = _plan(tmp_path, "mha", "sm_90a", {"attn-warp-specialize": {"persistent": 1}})
    fill = '"attn.fill"() {value = 0xFF800000 : f32}'
    assert plan.count(fill) == 4            # each consumer's: carried into the walk, and each block's
    with pytest.raises(AttncError, match=re.escape("the kernel starts m, l and O from -inf, 0 and 0")):
        _lowered(plan.replace(fill, '"attn.fill"() {value = 0.000000e+00 : f32}'), "sm_90a")


@pytest.mark.parametrize("edit, error", [
    (("warps = [4, 5, 6, 7]", "warps = [5, 6, 7, 8]"),
     "role 'consumer0' has warps [5, 6, 7, 8]; the sm_90a kernel runs it on warps [4, 5, 6, 7]"),
    # Note [Consumer rows]: each consumer warpgroup's rows are the kernel's own
    (("rows = [0, 64]", "rows = [64, 128]"),
     "role 'consumer0' has rows = [64, 128]; the sm_90a kernel runs it on the query rows [0, 64) of the block"),
    (("rows = [64, 128], ", ""),
     "role 'consumer1' has no rows; the sm_90a kernel runs it on the query rows [64, 128) of the block"),
    (('tile = ["q"], transport = "cp.async.mbarrier"', 'tile = ["q"], transport = "cp.async"'),
     "channel 'q' has transport = cp.async; the sm_90a kernel's is cp.async.mbarrier"),
    (('consumer = "consumer0", name = "q"', 'consumer = "consumer1", name = "q"'),
     "channel 'q' has consumer = consumer1; the sm_90a kernel's is consumer0"),
])
def test_what_the_kernel_builds_as_its_own_is_refused_when_edited(plans_90, edit, error):
    plain, _ = plans_90
    assert plain.count(edit[0]) == 1
    with pytest.raises(AttncError, match=re.escape(error)):
        _lowered(plain.replace(*edit), "sm_90a")


def test_a_consumer_tile_edited_to_the_whole_block_is_refused(plans_90):
    """Note [Consumer rows]: the row statistics of every consumer edited from its 64 rows to
    the block's 128 (consistently, so the IR parses): refused at the first such tile, not
    built as the role's rows."""
    plain, _ = plans_90
    rows = '!attn.tile<[64], f32, "reg">'
    assert plain.count(rows) > 2
    with pytest.raises(AttncError, match=re.escape(
            "a tile of role 'consumer0' has 128 rows ([128]); the role runs 64 query rows, the rows of each of "
            "its tiles but K and V")):
        _lowered(plain.replace(rows, '!attn.tile<[128], f32, "reg">'), "sm_90a")


def test_the_default_plan_lowers():
    specs = target_pipeline("sm_80")
    module = compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=format_pipeline(specs))).module
    assert "gpu.module" in str(module)


@pytest.mark.parametrize("pass_name", ["attn-verify-pipeline", "attn-lower-sm80"])
@pytest.mark.parametrize("value", [0, -64])
def test_a_tile_edited_to_no_rows_is_named(tmp_path, pass_name, value):
    """`block_m = 0` in a dump was reported as a barrier expecting bytes a fill does not
    deliver (found by a review); the lowering's error came from its copy of the module,
    at no source location."""
    specs = target_pipeline("sm_80")
    dump = tmp_path / "dump"
    compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=format_pipeline(specs[:-2]),
                                                     dump_dir=str(dump)))
    plan = sorted(dump.glob("*.mlir"))[-1].read_text()
    assert plan.count("{block_m = 128 : i64") == 1         # the tile's (not the analysis' mask_block_m)
    with pytest.raises(AttncError) as info:
        optimize_mlir(plan.replace("{block_m = 128 : i64", f"{{block_m = {value} : i64"), "plan.mlir",
                      CompileOptions(arch="sm_80", pass_pipeline=pass_name))
    assert info.value.render().startswith(
        f"examples/mha.attn:2:1: error: {pass_name}: the tile has block_m = {value}; it must be at least 1")


def _gemma2_plan(tmp_path) -> str:
    """gemma2's IR after every sm_80 pass but the lowering, as --dump-dir writes it."""
    dump = tmp_path / "dump"
    compile_file("examples/gemma2.attn", CompileOptions(
        arch="sm_80", pass_pipeline=format_pipeline(target_pipeline("sm_80")[:-1]), dump_dir=str(dump)))
    return sorted(dump.glob("*.mlir"))[-1].read_text()


def test_an_edited_scale_is_compiled_as_edited(tmp_path):
    """The backend builds the kernel from the op's attributes (Note [The variant from the
    IR] in attnc/ir/kernel.py), not from the .attn source the module carries: a scale
    edited in a dump is the kernel's scale."""
    plan = _gemma2_plan(tmp_path)
    old, new = "scale = 0.0883883461 : f32", "scale = 5.000000e-01 : f32"
    assert plan.count(old) == 1
    assert _specialization(plan, "sm_80")["softmax_scale"] == pytest.approx(0.0883883461)
    assert _specialization(plan.replace(old, new), "sm_80")["softmax_scale"] == 0.5


@pytest.mark.parametrize("edit, message", [
    (('dtype = "bf16"', 'dtype = "f16"'), 'attribute dtype = "f16" but q is a tensor of bf16: they must agree'),
    (("head_dim_v = 128 : i64", "head_dim_v = 64 : i64"),
     "attribute head_dim_v = 64 but v_shape ends in 128: they must agree")])
def test_an_attribute_that_disagrees_with_the_types_is_refused(tmp_path, edit, message):
    """An attribute the kernel is built from, edited so that it contradicts the operands'
    types, is refused at the op, naming both."""
    plan = _gemma2_plan(tmp_path)
    old, new = edit
    assert plan.count(old) == 1
    with pytest.raises(AttncError) as info:
        optimize_mlir(plan.replace(old, new), "plan.mlir", CompileOptions(arch="sm_80", pass_pipeline="attn-lower-sm80"))
    assert info.value.message == message
    assert info.value.render().startswith("examples/gemma2.attn:2:1: error: ")


def test_an_option_past_64_bits_is_an_error_not_a_crash():
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=format_pipeline(
            target_pipeline("sm_80")[:-2]) + ",attn-kernel-choices{min_ctas_per_sm=9223372036854775808}"))
    assert info.value.message == "option min_ctas_per_sm = 9223372036854775808 is out of range"


@pytest.mark.parametrize("arch, message", [
    # Notes [Roles followed in full] and [The role op by op]: the epilogue is checked to
    # be the one the kernel builds
    ("sm_90a", "after its key range the role finalizes, and stores O, then the LSE (Note [Roles followed in "
               "full]"),
    ("sm_80", "after its key range the role waits for every copy (pending = 0), finalizes, and stores O, then the "
              "LSE"),
])
def test_ops_reordered_where_the_lowering_does_not_follow_are_refused(tmp_path, arch, message):
    """The stores of O and the LSE swapped in a dump."""
    plan = _plan(tmp_path, "gemma2", arch)
    lines = plan.splitlines()
    o, lse = ([i for i, line in enumerate(lines) if '"attn.store"' in line and f'operand = "{x}"' in line]
              for x in ("o", "lse"))
    assert len(o) == len(lse)
    for a, b in zip(o, lse):
        lines[a], lines[b] = lines[b], lines[a]
    with pytest.raises(AttncError, match=re.escape(message)):
        _lowered("\n".join(lines), arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_store_at_another_block_is_refused(tmp_path, arch):
    """O's store edited in a dump to take (h, b, m_block) for its block: the kernels store
    at the CTA's block, so the edit is refused at the store rather than built as the
    default (Note [Roles followed in full])."""
    plan = _plan(tmp_path, "gemma2", arch)
    found = re.search(r'"attn.store"\((%\d+#0), %arg3, %arg4, %arg5\) \{operand = "o"', plan)
    assert found, plan
    edited = plan.replace(found.group(0), f'"attn.store"({found.group(1)}, %arg4, %arg3, %arg5) {{operand = "o"')
    with pytest.raises(AttncError, match=re.escape("the stores take O and the LSE from the finalize, at the "
                                                   "block's (b, h, m_block)")):
        _lowered(edited, arch)


@pytest.mark.parametrize("example, arch, edit, error", [
    # mha has no sink: its finalize regions yield -inf, alike in both consumer warpgroups
    ("mha", "sm_80", ("0xFF800000", "1.000000e+00"), "the kernel has no sink (has_sink = false), and this finalize's "
                                                     "sink region yields something other than -inf"),
    ("mha", "sm_90a", ("0xFF800000", "1.000000e+00"), "this finalize's sink region differs from the first "
                                                      "finalize's"),
    # docs_sink's sink reads w[h]: its region's h edited to a value of the kernel's
    ("docs_sink", "sm_80", ('"attn.param"(%arg4, %arg8)', '"attn.param"(%arg4, %arg7)'),
     "this op of the attn.finalize op's hook region reads a value defined outside the region (i32)"),
])
def test_an_edited_sink_region_is_refused_not_ignored(tmp_path, example, arch, edit, error):
    """The kernel computes the sink from the first finalize's region: the others' must be
    alike, and a kernel without a sink must not find one there; a region that reads a
    value from outside it is refused at the op, not left to fail the kernel's verification."""
    lines = _plan(tmp_path, example, arch).splitlines()
    at = [i for i, line in enumerate(lines) if '"attn.finalize"' in line][-1] + 2     # the last copy's first op
    assert edit[0] in lines[at]
    lines[at] = lines[at].replace(*edit)
    with pytest.raises(AttncError, match=re.escape(error)):
        _lowered("\n".join(lines), arch)


def test_the_cooperative_roles_epilogue_is_checked_op_by_op(tmp_path):
    """Note [Roles followed in full]: sm_90a's cooperative role (docs_sink) waits for
    every copy after its key range; without that wait its epilogue is refused at the
    finalize."""
    plan = _plan(tmp_path, "docs_sink", "sm_90a")
    assert 'name = "compute"' in plan
    lines = plan.splitlines()
    top = [i for i, line in enumerate(lines) if line.startswith(' ' * 10 + '"attn.cp_async_wait"() {pending = 0')]
    assert len(top) == 1
    with pytest.raises(AttncError, match=re.escape("after its key range the role waits for every copy (pending = "
                                                   "0), finalizes, and stores O, then the LSE")) as caught:
        _lowered("\n".join(lines[:top[0]] + lines[top[0] + 1:]), "sm_90a")
    assert caught.value.render().startswith("examples/docs_sink.attn:")


def _producer_loads(module) -> list[str]:
    """The producer role's loads in the order they stand, each op with its tile (a
    barrier's from its mbarrier_init), `[` and `]` around a KV loop's trip."""
    kernel = attention_ops(module)[0]
    names = {R.MBARRIER_WAIT: "wait", R.SLOT_WRITE: "write", R.CP_ASYNC_MBARRIER_ARRIVE: "arrive"}
    out = []

    def walk(block) -> None:
        for op in block.operations:
            op = op.operation
            if op.name == R.SLOT_WRITE:
                out.append(f"write {R.attrs_of(op)['tile']}")
            elif op.name in names:
                out.append(f"{names[op.name]} {R.attrs_of(op.operands[0].owner)['tile']}")
            elif op.name == "scf.for":
                out.append("[")
                walk(op.regions[0].blocks[0])
                out.append("]")
            else:
                for region in op.regions:
                    for inner in region.blocks:
                        walk(inner)

    walk(R.body_block(next(r for r in R.role_ops(kernel) if R.name_of(r) == "producer")))
    return out


def test_a_producer_putting_v_first_is_followed():
    """The K/V order of the producer's loops is the kernel's (examples/passes/v_before_k.py).
    The default producer loads Q (its slot is filled once: no wait), K of the first step,
    then each trip K one step ahead before V, and the last V after the loop."""
    from attnc.passes.registry import load_pass_file

    load_pass_file("examples/passes/v_before_k.py")
    options = CompileOptions(arch="sm_90a", load_passes=("examples/passes/v_before_k.py",),
                             pass_pipeline=pipeline_with("sm_90a", {}).replace(
                                 "attn-warp-specialize", "attn-warp-specialize,v-before-k"))
    moved = build(compile_file("examples/mha.attn", options))
    default = build(compile_file("examples/mha.attn", CompileOptions(arch="sm_90a")))
    k, v = (["wait " + tile, "write " + tile, "arrive " + tile] for tile in "kv")
    assert _producer_loads(default.result.module) == ["write q", "arrive q", *k, "[", *k, *v, "]", *v]
    assert _producer_loads(moved.result.module) == ["write q", "arrive q", *k, "[", *v, *k, "]", *v]
    assert moved.ptx != default.ptx


def test_an_edit_of_sm80s_step_synchronization_is_built_once_verified(tmp_path):
    """Note [Steps op by op]: a step's cp.async wait edited to wait for one more group is
    sound, and sm_80's lowering builds it as it stands; one that waits for a group too few
    is refused at the wait by the verifier the lowering runs (sm_90a refuses any edit of
    its synchronization: tests/passes/test_kv_steps.py)."""
    plan = _plan(tmp_path, "mha", "sm_80")
    old = '"attn.cp_async_wait"() {pending = 2 : i64}'
    assert plan.count(old) >= 2
    edited = plan.replace(old, '"attn.cp_async_wait"() {pending = 1 : i64}', 1)
    built = _lowered(edited, "sm_80").ptx
    assert "cp.async.wait_group \t1;" in built and "cp.async.wait_group \t1;" not in _lowered(plan, "sm_80").ptx
    unsound = plan.replace(old, '"attn.cp_async_wait"() {pending = 3 : i64}', 1)
    with pytest.raises(AttncError, match="attn-verify-pipeline: compute reads fill 0 of 'kv' \\(k\\) from slot 0 "
                                         "before its data landed"):
        _lowered(unsound, "sm_80")
