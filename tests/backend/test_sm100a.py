"""attn-lower-sm100a (Note [The sm_100a kernel, op by op] in attnc/backend/sm100a.py): the
kernel follows the L5 plan -- an edited ring depth is another kernel, still right in the
emulator -- its instruction mix is the recipe's, and what it cannot lower is refused at the op.
The emulator runs of every example are tests/sim/test_examples_sim.py's."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest
from mlir import ir

import attnc
from attnc.driver import CompileOptions, compile_mlir, optimize_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops, to_text
from attnc.ir import roles as R

ROOT = Path(__file__).resolve().parents[2]
PLAN = "attn-tile{opts},attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem," \
       "attn-insert-pipelines,attn-verify-pipeline"


def plan(example: str = "mha", tile: str = ""):
    text = (ROOT / f"examples/{example}.attn").read_text()
    return compile_mlir(text, f"{example}.attn", CompileOptions(
        arch="sm_100a", pass_pipeline=PLAN.format(opts="{" + tile + "}" if tile else "")))


def ptx_of(text: str) -> str:
    from attnc.backend.ptx import to_ptx
    from attnc.passes.lower_kernel import lowered_gpu_module
    module = optimize_mlir(text, "plan.mlir", CompileOptions(arch="sm_100a", pass_pipeline="attn-lower-sm100a"))
    with module.context, ir.Location.unknown():
        copy = ir.Module.create()
        copy.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
        lowered_gpu_module(module).clone(ip=ir.InsertionPoint(copy.body))
    return to_ptx(copy, "sm_100a", in_place=True)


@functools.lru_cache(maxsize=None)
def mha_ptx() -> str:
    return ptx_of(to_text(plan().module))


def test_the_instruction_mix_is_the_recipes():
    """mha at head dim 128, 128-key blocks, two Q tiles: per KV step 2 x 8 MMAs for S and 2 x 8
    for O (K = 16 each), two TMA boxes a 128-row tile (64 columns of 128B-swizzled rows)."""
    ptx = mha_ptx()
    assert len(re.findall(r"tcgen05\.mma\.cta_group::1\.kind::f16 \[%r\d+\], %rd", ptx)) == 16      # A from SMEM: S
    assert len(re.findall(r"tcgen05\.mma\.cta_group::1\.kind::f16 \[%r\d+\], \[%r\d+\]", ptx)) == 16  # A = P in TMEM
    tma = len(re.findall(r"cp\.async\.bulk\.tensor\.4d", ptx))       # Q0, Q1; K, V (LLVM may peel the loop)
    assert tma >= 2 * 2 + 2 * 2 and tma % 4 == 0
    assert "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32" in ptx and "tcgen05.dealloc" in ptx
    assert "cvta.param.u64" in ptx and ".param .align 64 .b8" in ptx


# relative_bias too: Note [One cvt for int()] in attnc/backend/ptx.py
SPILL_FREE = sorted(p.stem for p in (ROOT / "examples").glob("*.attn"))


@pytest.mark.parametrize("example", SPILL_FREE)
def test_the_kernel_assembles_without_spills(example):
    """Note [Addresses at their MMA]: the MMA warp's 48 registers hold its loop; every warpgroup
    keeps to its budget (ptxas as a whole program, which keeps setmaxnreg): the softmax
    warpgroups' 200 hold a row of S with the hooks' values (Note [Registers per warpgroup])."""
    from attnc.backend import cubin
    ptx = mha_ptx() if example == "mha" else attnc.compile(ROOT / f"examples/{example}.attn",
                                                           arch="sm_100a").bundle.code["ptx"].decode()
    usage = cubin.resource_usage(ptx, "sm_100a")      # the assembler the bundle's cubin is made by
    assert usage and all(not u.spills and u.stack_frame == 0 for u in usage.values()), usage


def test_int_is_one_conversion():
    """Note [One cvt for int()] (ptx.py): relative_bias's int(), once a score, is one
    cvt.rzi.s32.f32, not LLVM's expansion of fptosi.sat (three compares, three selects)."""
    ptx = attnc.compile(ROOT / "examples/relative_bias.attn", arch="sm_100a").bundle.code["ptx"].decode()
    assert ptx.count("cvt.rzi.s32.f32") >= 2 * 128 and "setp.nan.f32" not in ptx


def test_the_ring_depth_is_the_plans():
    """attn-tile{stages=3} at head dim 64 (which fits): a third K/V slot and its barriers,
    another kernel, which the emulator finds right."""
    two, three = (ptx_of(to_text(plan("diff_head_dims", f"stages={s}").module)) for s in (2, 3))
    assert two != three
    text = (ROOT / "examples/diff_head_dims.attn").read_text()
    kernel = attnc.compile(text, arch="sm_100a", pass_pipeline=PLAN.format(opts="{stages=3}") + ",attn-lower-sm100a")
    from attnc_sim.device import SimKernel, numpy_dtype
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 150, 128)).astype(numpy_dtype("bf16"))
    k = rng.standard_normal((1, 2, 300, 128)).astype(numpy_dtype("bf16"))
    v = rng.standard_normal((1, 2, 300, 64)).astype(numpy_dtype("bf16"))
    out = SimKernel(kernel.bundle)(q=q, k=k, v=v)
    ref = attnc.reference(kernel.bundle.manifest.source and attnc.frontend.load(text, "d.attn"),
                          q=q.astype(np.float32), k=k.astype(np.float32), v=v.astype(np.float32))
    assert np.abs(out["o"].astype(np.float64) - ref["o"]).max() < 2e-2


def _role(kernel, name: str) -> ir.Operation:
    return next(r for r in R.role_ops(kernel) if R.name_of(r) == name)


def _refused(edit, example: str = "mha", result=None) -> str:
    """The error lowering `example`'s plan (or `result`'s) gives once `edit(kernel)` changed it."""
    result = result or plan(example)
    kernel = attention_ops(result.module)[0]
    with kernel.context:
        edit(kernel)
    with pytest.raises(AttncError) as err:
        ptx_of(to_text(result.module))
    return str(err.value)


def _first_op(kernel, role: str) -> ir.Operation:
    return list(R.role_block(_role(kernel, role)).operations)[0]


def test_an_mma_result_written_twice_is_refused():
    """S = Q K^T lands in the tensor memory of the one slot it is written to; a second write
    of it is a second fill of S's one-slot ring, which the verifier finds first."""
    def edit(kernel):
        write = next(o for o in R.ops_in(R.role_block(_role(kernel, "mma")), (R.SLOT_WRITE,))
                     if R.attrs_of(o)["tile"] == "s")
        write.clone(ir.InsertionPoint(write))
    assert "mma overwrites slot 0 of 's0' (s) with fill 1 before softmax0 released fill 0" in _refused(edit)


def test_an_op_without_a_pattern_is_refused_at_the_op():
    def edit(kernel):
        first = _first_op(kernel, "load")
        with ir.InsertionPoint(first), first.location:
            R.create(R.CTA_BARRIER)
    assert "attn-lower-sm100a has no pattern for attn.cta_barrier (role 'load')" in _refused(edit)


def test_an_unsound_edit_is_refused_by_the_verifier_first():
    """The lowering builds every op as it stands once attn-verify-pipeline found them sound: a
    removed release of S1 is a deadlock it names."""
    def edit(kernel):
        for arrive in R.ops_in(R.role_block(_role(kernel, "softmax1")), (R.MBARRIER_ARRIVE,)):
            if R.name_of(arrive.operands[0].owner) == "mbar_s1_empty":
                arrive.erase()
    assert "deadlock: mma waits at attn.mbarrier_wait on mbar_s1_empty[0]" in _refused(edit, "gemma2")


def test_a_role_reading_a_tile_table_is_refused_at_the_op():
    """Note [Tile table on sm_100a] (attnc/backend/sm100a_tiles.py): a role reads its CTA's
    entry where it reads the CTA's coordinates, by the kernel's aligned_tiles; a read of the
    table among a role's ops has no pattern."""
    from attnc.ir import tiles

    def edit(kernel):
        first = _first_op(kernel, "softmax0")
        with ir.InsertionPoint(first), first.location:
            i32 = ir.IntegerType.get_signless(32)
            zero = ir.Operation.create("arith.constant", results=[i32],
                                       attributes={"value": ir.IntegerAttr.get(i32, 0)}).result
            tiles.tile_table_read("doc", zero, zero, zero)
    assert "attn-lower-sm100a has no pattern for attn.tile_table_read (role 'softmax0')" in _refused(edit)


def test_aligned_tiles_without_a_documents_mask_are_refused():
    def edit(kernel):
        kernel.attributes["aligned_tiles"] = ir.BoolAttr.get(True)
    assert "aligned_tiles needs a block map (a mask that reads params, of one key range)" in _refused(edit)


def test_aligned_tiles_of_persistent_ctas_are_refused():
    from attnc.passes.pipelines import format_pipeline, target_pipeline
    names = format_pipeline(target_pipeline("sm_100a")).split(",")
    names[names.index("attn-warp-specialize")] = "attn-warp-specialize{persistent=1}"
    names[names.index("attn-kernel-choices")] = "attn-kernel-choices{aligned_tiles=true}"
    with pytest.raises(AttncError) as err:
        attnc.compile(ROOT / "examples/docs_sink.attn", arch="sm_100a", pass_pipeline=",".join(names))
    assert "aligned_tiles needs CTAs that run one query block each, not a walk over query blocks" in str(err.value)


def test_an_op_of_another_query_block_is_refused_on_table_tiles():
    """On a table's tiles a Q tile's rows are the CTA's entry's: a load that names another
    query block than the CTA's has no rows to take."""
    def edit(kernel):
        load = next(o for o in R.ops_in(R.role_block(_role(kernel, "load")), ("attn.load",))
                    if ir.StringAttr(o.attributes["operand"]).value == "q")
        with ir.InsertionPoint(load), load.location:
            i32 = ir.IntegerType.get_signless(32)
            load.operands[3] = ir.Operation.create("arith.constant", results=[i32],
                                                   attributes={"value": ir.IntegerAttr.get(i32, 0)}).result
    from attnc.passes.pipelines import format_pipeline, target_pipeline
    result = compile_mlir((ROOT / "examples/docs_sink.attn").read_text(), "docs_sink.attn", CompileOptions(
        arch="sm_100a", pass_pipeline=format_pipeline(target_pipeline("sm_100a")[:-1])))     # the plan
    assert "with a tile table (aligned_tiles) an op indexes the CTA's own query block" in _refused(edit, result=result)


def test_another_lowerings_choice_is_refused_at_its_op():
    """Note [Choices on sm_100a]: the lowering takes exp2_fma, lazy, aligned_tiles and run_ranges
    only; a choice of the other lowerings on one of its ops is refused there, not built around."""
    def edit(kernel):
        store = next(o for o in R.ops_in(R.role_block(_role(kernel, "epilogue")), ("attn.store",))
                     if ir.StringAttr(o.attributes["operand"]).value == "o")
        store.attributes["staged"] = ir.BoolAttr.get(True)
    assert "staged on attn.store: attn-lower-sm100a does not take staged_o (it takes exp2_fma on " \
           "attn.softmax_step, lazy on attn.rescale, aligned_tiles and run_ranges on attn.kernel" in _refused(edit)


def test_rescales_that_disagree_are_refused():
    """The lazy rescale is one per kernel: the softmax steps keep their max by it, and every
    correction warp votes by the factors they give (Note [Lazy rescale on sm_100a])."""
    def edit(kernel):
        rescales = R.ops_in(R.role_block(_role(kernel, "correction")), ("attn.rescale",))
        for op, lazy in zip(rescales, (True, False)):
            op.attributes["lazy"] = ir.BoolAttr.get(lazy)
    assert "lazy = false on this attn.rescale, true on an earlier one" in _refused(edit)


def test_a_role_across_two_warpgroups_is_refused_at_the_role():
    """Note [Registers per warpgroup]: a warpgroup's branch sets its budget, then runs its roles.
    (The correction role's 48 registers keep the warpgroups' budgets within the register file,
    which its 64 in the MMA warps' warpgroup would not.)"""
    def edit(kernel):
        role = _role(kernel, "correction")
        role.attributes["warps"] = R.attr([10, 11, 12, 13])
        role.attributes["regs"] = R.attr(48)
    assert "attn-lower-sm100a runs a role within one warpgroup, not warps [10, 11, 12, 13]" in _refused(edit)


def test_the_persistent_kernel_of_one_key_loop_assembles_without_spills():
    """Note [Persistent CTAs on sm_100a]: mha's roles in the walk over query blocks keep to
    their budgets (the kernels of two KV loops spill there, as the Note records)."""
    from attnc.backend import cubin
    from attnc.passes.pipelines import format_pipeline, target_pipeline
    names = format_pipeline(target_pipeline("sm_100a")).split(",")
    names[names.index("attn-warp-specialize")] = "attn-warp-specialize{persistent=1}"
    ptx = attnc.compile(ROOT / "examples/mha.attn", arch="sm_100a",
                        pass_pipeline=",".join(names)).bundle.code["ptx"].decode()
    assert "nctaid.x" in ptx
    usage = cubin.resource_usage(ptx, "sm_100a")
    assert usage and all(not u.spills and u.stack_frame == 0 for u in usage.values()), usage


def test_run_ranges_of_a_rest_that_reads_params_are_refused(tmp_path):
    """Note [Ranges from the runs]: the runs give the ranges where the rest of the mask is
    static; a rest that reads a param keeps the map (by default) or is refused (asked for)."""
    from attnc.passes.pipelines import pipeline_with_options
    path = tmp_path / "docs_window.attn"
    path.write_text("""attention docs_window {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  param doc: i32[B, N]
  param width: i32[H]
  mask_mod(b, h, i, j) = doc[b, i] == doc[b, j] and i - j < width[h]
  out o: bf16[B, H, M, 64]
}
""")
    spec = attnc.compile(path, arch="sm_100a").manifest.specialization
    assert (spec["aligned_tiles"], spec["run_ranges"], spec["blockmap"]) == (True, False, True)
    with pytest.raises(AttncError) as err:
        attnc.compile(path, arch="sm_100a", pass_pipeline=pipeline_with_options("sm_100a", {"run_ranges": "true"}))
    assert "run_ranges needs a mask whose other conjuncts read no param and no float" in str(err.value)


def test_run_ranges_without_a_table_name_what_the_table_needs():
    from attnc.passes.pipelines import pipeline_with_options
    with pytest.raises(AttncError) as err:
        attnc.compile(ROOT / "examples/alibi.attn", arch="sm_100a",
                      pass_pipeline=pipeline_with_options("sm_100a", {"run_ranges": "true"}))
    assert "run_ranges (on the aligned tiles) needs a block map (a mask that reads params" in str(err.value)
