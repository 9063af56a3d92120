"""Errors of the lowerings (attnc/backend/*.py), each triggered here by an edit a user could
make to a compiled plan -- a dump edited by hand, or the plan's IR edited in Python as
tests/backend/test_sm100a.py's `_refused` does -- and checked by its message and, where the
error names an op, by its location. The plans and edits are the other tests' (their helpers are imported)."""
from __future__ import annotations

import re

from mlir import ir
from mlir.dialects import arith, scf

from attnc.driver import CompileOptions, compile_mlir
from attnc.ir import roles as R
from attnc.ir.tiles import BLOCK_MAP_RANGE
from attnc.passes.tile_program import KV_LOOP
from attnc.testing import variant_source
from tests.backend.test_sm100a import PLAN, ROOT, _first_op, _refused, _role
from tests.passes.test_error_coverage import _example_plan, _located
from tests.passes.test_pass_errors import _replaced


def _sm100a_plan(source: str, filename: str, warp_specialize: str = "attn-warp-specialize"):
    """The sm_100a plan (test_sm100a.PLAN) of `source`, with `warp_specialize` for that pass."""
    pipeline = PLAN.format(opts="").replace("attn-warp-specialize", warp_specialize)
    return compile_mlir(source, filename, CompileOptions(arch="sm_100a", pass_pipeline=pipeline))


def _i32(value: int) -> ir.Value:
    i32 = ir.IntegerType.get_signless(32)
    return arith.ConstantOp(i32, value).result


def _swizzled(buffer: str, swizzle: str):
    """The edit setting the swizzle of the shared-memory buffer named `buffer`."""
    def edit(kernel):
        channel = next(c for c in R.channel_ops(kernel) if f'name = "{buffer}"' in str(c.attributes["buffers"]))
        text, n = re.subn(rf'(name = "{buffer}",[^}}]*swizzle = ")\w+"', rf'\g<1>{swizzle}"',
                          str(channel.attributes["buffers"]))
        assert n == 1, text
        channel.attributes["buffers"] = ir.Attribute.parse(text)
    return edit


# --- attn-lower-sm80 / attn-lower-sm90a (lowering.py) ----------------------------------------
def test_a_runtime_mask_whose_program_reads_no_block_map_is_refused():
    """sliding_window's sm_80 plan with its mask analysis edited to "runtime" (a mask that
    reads params), its program still reading the key range from attn.kv_range."""
    plan = _replaced(_example_plan("sliding_window", "sm_80", "attn-kernel-choices"),
                     'mask_kind = "static"', 'mask_kind = "runtime"')
    assert _located(plan, "sm_80", "attn-lower-sm80").message == (
        "the kernel walks the key blocks its block map's row keeps, and its program reads no attn.block_map_range "
        "(run attn-analyze-masks again)")


# --- attn-lower-sm100a (sm100a.py, sm100a_ops.py, sm100a_tiles.py) ---------------------------
def test_kv_loops_stepping_two_blocks_are_refused():
    """Every KV loop of mha's sm_100a plan edited to step 2 key blocks at a time."""
    def edit(kernel):
        for role in R.role_ops(kernel):
            for loop in R.ops_in(R.role_block(role), ("scf.for",)):
                if KV_LOOP in loop.attributes:
                    with ir.InsertionPoint(loop), loop.location:
                        loop.operands[2] = _i32(2)
    assert "error: attn-lower-sm100a steps a KV loop one key block at a time" in _refused(edit)


def test_an_scf_if_of_float_results_is_refused():
    """An scf.if yielding an f32 added to the load role of mha's sm_100a plan."""
    def edit(kernel):
        first = _first_op(kernel, "load")
        with ir.InsertionPoint(first), first.location:
            f32 = ir.F32Type.get()
            zero = _i32(0)
            branch = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.eq, zero, zero).result, [f32], has_else=True)
            for block, value in ((branch.then_block, 0.0), (branch.else_block, 1.0)):
                with ir.InsertionPoint(block):
                    scf.YieldOp([arith.ConstantOp(f32, value).result])
    assert "error: attn-lower-sm100a lowers an scf.if whose results are integers only" in _refused(edit)


def test_a_q_slot_without_swizzle_is_refused():
    """mha's sm_100a plan with Q's shared-memory buffer edited to swizzle = "none"."""
    assert _refused(_swizzled("sQ", "none")).startswith(
        "mha.attn:2:1: error: attn-lower-sm100a: channel 'q' has swizzle none; its tiles land through TMA in "
        "swizzled rows (xor128B, xor64B, xor32B)")


def test_a_value_made_outside_every_role_is_refused():
    """An arith.constant added beside the channels (outside every role) and read by an
    arith.addi in the mma role of mha's sm_100a plan."""
    def edit(kernel):
        first_role = R.role_ops(kernel)[0]
        with ir.InsertionPoint(first_role), first_role.location:
            outside = _i32(0)
        first = _first_op(kernel, "mma")
        with ir.InsertionPoint(first), first.location:
            arith.AddIOp(outside, outside)
    assert "error: attn-lower-sm100a: a value of role 'mma' has no lowering" in _refused(edit)


def test_a_walk_block_before_the_walk_is_refused():
    """mha's persistent sm_100a plan with a copy of the load role's attn.walk_block put
    before its attn.walk_rounds (taking round 0)."""
    result = _sm100a_plan((ROOT / "examples/mha.attn").read_text(), "mha.attn", "attn-warp-specialize{persistent=1}")

    def edit(kernel):
        block = R.role_block(_role(kernel, "load"))
        rounds = next(op.operation for op in block.operations if op.operation.name == R.WALK_ROUNDS)
        copy = R.ops_in(block, (R.WALK_BLOCK,))[0].clone(ir.InsertionPoint(rounds))
        with ir.InsertionPoint(copy), copy.location:
            copy.operands[0] = _i32(0)
    assert "error: attn-lower-sm100a takes a query block of the role's walk: attn.walk_block in the scf.for over " \
           "attn.walk_rounds (Note [The walk over query blocks] in attnc/schedule/walk.py)" in \
           _refused(edit, result=result)


def test_a_qk_mma_written_to_no_slot_is_refused():
    """A second S = Q K^T (a copy of the mma role's) whose result no attn.slot_write takes."""
    def edit(kernel):
        block = R.role_block(_role(kernel, "mma"))
        qk = next(op for op in R.ops_in(block, ("attn.mma",)) if R.attrs_of(op)["kind"] == "qk")
        qk.clone(ir.InsertionPoint(qk))
    assert "error: attn-lower-sm100a issues S = Q K^T into the tensor memory of the one slot its result is " \
           "written to (Note [MMAs into their slot])" in _refused(edit)


def test_o_rows_that_do_not_fill_the_swizzle_are_refused():
    """At head dim 96 (192-byte rows of O, which attn-alloc-smem swizzles by 64 bytes), O's
    shared-memory buffer edited to 128-byte swizzled blocks."""
    result = _sm100a_plan(variant_source("d96", 96, mask=None), "d96.attn")
    assert _refused(_swizzled("sO", "xor128B"), result=result).startswith(
        "d96.attn:1:1: error: attn-lower-sm100a: O's rows of 192 bytes do not fill its 128-byte swizzled blocks")


def test_a_block_map_range_without_a_block_map_is_refused():
    """An attn.block_map_range added to the load role of mha's sm_100a plan (whose mask
    reads no params: no block map)."""
    def edit(kernel):
        first = _first_op(kernel, "load")
        b, h, m_block = list(kernel.regions[0].blocks[0].arguments)[:3]
        with ir.InsertionPoint(first), first.location:
            R.create(BLOCK_MAP_RANGE, [ir.IntegerType.get_signless(32)] * 4, [m_block, b, h])
    assert "error: attn-lower-sm100a builds a block map where the mask reads params and the analysis gives one " \
           "segment; this kernel has none to read a range from" in _refused(edit)
