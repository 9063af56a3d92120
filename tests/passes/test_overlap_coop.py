"""attn-overlap-gemms on sm_90a's cooperative role (attnc/schedule/overlap_coop.py, Note
[Overlapped cooperative steps in the IR]): its loads ahead of their steps and its GEMMs
overlapped as the kernel runs them, checked by attn-verify-pipeline (a copy into a slot
an asynchronous GEMM still reads is caught); the steps it refuses; and the lowering's
refusal of a cooperative role not overlapped."""
from pathlib import Path

import pytest
from mlir import ir

from attnc.errors import AttncError
from attnc.ir import roles as R
from attnc.ir import set_int
from attnc.testing import check_file
from tests.passes.test_overlap_gemms import L5, _KEPT, kernel, messages

ROOT = Path(__file__).resolve().parents[2]
COOP = L5 % "producer=false"


def compute(op) -> ir.Operation:
    return next(r for r in R.role_ops(op) if R.name_of(r) == "compute")


def trip_ops(op, name: str) -> list[ir.Operation]:
    """The ops named `name` in the first rotated KV loop."""
    loop = [o for o in R.ops_in(R.role_block(compute(op)), ("scf.for",)) if "kv_blocks" in o.attributes][0]
    return [o.operation for o in loop.regions[0].blocks[0].operations if o.operation.name == name]


def test_filecheck(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/overlap_coop.mlir"))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("example,tile", [("mha", "stages=2"), ("mha", "stages=3"), ("mha", "stages=4 block_n=64"),
                                          ("gemma2", ""), ("sliding_window", "stages=2"), ("docs_sink", ""),
                                          ("diff_head_dims", "")])
def test_overlapped_cooperative_plans_are_sound(example, tile):
    """The role's steps are rotated (its QK^T and P.V async, landed by attn.mma_wait), its
    trips wait for all but 2S - 4 groups and load V S - 2 and K S - 1 blocks ahead, and
    the plan verifies."""
    op = kernel(example, pipeline=COOP + ",attn-overlap-gemms", tile=tile)
    stages = int(next(R.attrs_of(c)["stages"] for c in R.channel_ops(op) if R.name_of(c) == "kv"))
    assert R.ops_in(R.role_block(compute(op)), (R.MMA_WAIT,))
    assert [R.attrs_of(w)["pending"] for w in trip_ops(op, R.CP_ASYNC_WAIT)] == [2 * stages - 4]
    assert {R.attrs_of(load)["operand"]: R.attrs_of(load)["ahead"] for load in trip_ops(op, "attn.load")} == \
        {"v": stages - 2, "k": stages - 1}
    assert messages(op) == ""


def test_a_copy_into_a_slot_a_gemm_still_reads_is_caught():
    """A trip's loads moved above the wait that lands the P.V of two steps back: V's copy
    goes into the slot that P.V reads."""
    op = kernel("mha", pipeline=COOP + ",attn-overlap-gemms", tile="stages=2")
    land = trip_ops(op, R.MMA_WAIT)[0]
    ops = [o.operation for o in land.block.operations]
    start = ops.index(trip_ops(op, R.CP_ASYNC_WAIT)[0])
    end = ops.index(trip_ops(op, R.RING_ADVANCE)[1])            # K's write ring, after its commit
    for o in ops[start:end + 1]:
        o.move_before(land)
    found = messages(op)
    assert "overwrites slot" in found and "while an async attn.mma reading it is in flight" in found


def test_a_trip_that_waits_for_too_few_groups_is_caught():
    """A trip's wait leaving the 2S - 2 youngest groups in flight reads V(n - 1) before its
    copy landed."""
    op = kernel("mha", pipeline=COOP + ",attn-overlap-gemms", tile="stages=3")
    set_int(trip_ops(op, R.CP_ASYNC_WAIT)[0], "pending", 4)
    assert "before its data landed" in messages(op)


def test_an_edited_step_is_refused_at_its_op():
    """A step whose P.V reads the O it was given, not the rescaled one."""
    op = kernel("mha", pipeline=COOP)
    loop = [o for o in R.ops_in(R.role_block(compute(op)), ("scf.for",)) if "kv_blocks" in o.attributes][0]
    body = loop.regions[0].blocks[0]
    pv = next(o.operation for o in body.operations if o.operation.name == "attn.mma"
              and ir.StringAttr(o.operation.attributes["kind"]).value == "pv")
    with op.context:
        pv.operands[2] = body.arguments[3]
    from attnc.passes.overlap_gemms import overlap
    with pytest.raises(AttncError) as err:
        overlap(_KEPT[-1].module)
    assert "rotates the cooperative KV step" in err.value.message and "this attn.mma differs" in err.value.message
    assert err.value.span is not None


def test_a_step_with_its_ops_moved_is_refused():
    """The rotation takes the step attn-insert-pipelines makes: V's wait moved above the
    softmax is another step, refused rather than rotated as the default."""
    op = kernel("mha", pipeline=COOP)
    loop = [o for o in R.ops_in(R.role_block(compute(op)), ("scf.for",)) if "kv_blocks" in o.attributes][0]
    ops = [o.operation for o in loop.regions[0].blocks[0].operations]
    softmax = next(o for o in ops if o.name == "attn.softmax_step")
    ops[ops.index(softmax) + 1].move_before(softmax)          # the second cp.async wait
    from attnc.passes.overlap_gemms import overlap
    with pytest.raises(AttncError) as err:
        overlap(_KEPT[-1].module)
    assert "whose ops are k_wait, k_bar" in err.value.message


def test_twice_is_refused():
    with pytest.raises(AttncError) as err:
        kernel("mha", pipeline=COOP + ",attn-overlap-gemms,attn-overlap-gemms")
    assert "attn-overlap-gemms ran twice on role 'compute'" in err.value.message


def test_the_lowering_refuses_a_cooperative_role_not_overlapped():
    with pytest.raises(AttncError) as err:
        kernel("mha", pipeline=COOP + ",attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a")
    assert "role 'compute' has them one after the other: run attn-overlap-gemms" in err.value.message


def _no_kv_loop(op, loop, body):
    del loop.attributes["kv_blocks"]


def _one_stage(op, loop, body):
    kv = next(c for c in R.channel_ops(op) if R.name_of(c) == "kv")
    set_int(kv, "stages", 1)


def _other_op(op, loop, body):
    fill = R.ops_in(R.role_block(compute(op)), ("attn.fill",))[0]
    fill.clone(ir.InsertionPoint(list(body.operations)[1]))     # past the step's key block


def _rings_swapped(op, loop, body):
    terminator = list(body.operations)[-1]
    a, b = terminator.operands[5], terminator.operands[7]
    terminator.operands[5], terminator.operands[7] = b, a


def _q_ring_not_constant(op, loop, body):
    q_read = next(o.operation for o in body.operations if o.operation.name == R.SLOT_READ
                  and R.attrs_of(o.operation)["tile"] == "q")
    at = list(body.arguments).index(q_read.operands[1]) - 1 + 3          # among the loop's operands
    with loop.location, ir.InsertionPoint(loop):
        from mlir.dialects import arith
        loop.operands[at] = arith.AddIOp(loop.operands[at], loop.operands[at]).result


@pytest.mark.parametrize("edit,message", [
    (_no_kv_loop, "attn-overlap-gemms: role 'compute' has no KV loop"),
    (_one_stage, "overlaps its GEMMs across steps with two or more K/V stages"),
    (_other_op, "for sm_90a's cooperative role (Note [cp.async prefetch]), which has no attn.fill here"),
    (_rings_swapped, "the cooperative KV loop carries its rings from one step to the next"),
    (_q_ring_not_constant, "the cooperative role's Q ring starts from a constant stage"),
])
def test_a_plan_the_rotation_cannot_take_is_refused(edit, message):
    op = kernel("mha", pipeline=COOP)
    loop = [o for o in R.ops_in(R.role_block(compute(op)), ("scf.for",)) if "kv_blocks" in o.attributes][0]
    with op.context:
        edit(op, loop, loop.regions[0].blocks[0])
    from attnc.passes.overlap_gemms import overlap
    with pytest.raises(AttncError) as err:
        overlap(_KEPT[-1].module)
    assert message in err.value.message
    assert err.value.span is not None


@pytest.mark.parametrize("arch,pipeline", [("sm_80", L5 % ""), ("sm_90a", COOP + ",attn-overlap-gemms")])
def test_a_read_before_the_cta_barrier_is_caught(arch, pipeline):
    """Note [Copies seen by every thread] (attnc/schedule/explore.py): the first step's CTA barrier
    removed, each warp would read K's slot (the step's first read, before Q's) before the
    other warps' copies are known to have landed; on sm_90a's cooperative kernel this was
    accepted."""
    op = kernel("mha", arch=arch, pipeline=pipeline)
    assert messages(op) == ""
    R.ops_in(R.role_block(R.role_ops(op)[0]), (R.CTA_BARRIER,))[0].erase()
    assert "reads fill 0 of 'kv' (k) from slot 0 before a cp.async wait and then a CTA barrier made every " \
           "thread's copies of it visible" in messages(op)
