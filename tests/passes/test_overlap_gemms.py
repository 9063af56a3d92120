"""attn-overlap-gemms (attnc/schedule/overlap.py, Note [Overlapped steps in the IR]): the
consumer warpgroups' KV steps rotated so that QK^T(n) and P.V(n - 1) are issued together,
checked by attn-verify-pipeline with the slots the async GEMMs read (Note [Asynchronous
GEMMs]); the plans it refuses; and the lowering's refusal of steps not overlapped."""
from pathlib import Path

import pytest
from mlir import ir

from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops, set_int
from attnc.ir import roles as R
from attnc.schedule.verify import verify_kernel
from attnc.testing import check_file

ROOT = Path(__file__).resolve().parents[2]
L5 = ("attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize{%s},attn-alloc-smem,attn-alloc-tmem,"
      "attn-insert-pipelines")
_KEPT: list = []        # the results whose modules the returned ops live in


def kernel(example: str, arch: str = "sm_90a", pipeline: str = L5 % "", tile: str = ""):
    text = pipeline.replace("attn-tile", f"attn-tile{{{tile}}}" if tile else "attn-tile")
    result = compile_mlir((ROOT / f"examples/{example}.attn").read_text(), f"{example}.attn",
                          CompileOptions(arch=arch, pass_pipeline=text))
    _KEPT.append(result)
    return attention_ops(result.module)[0]


def messages(op) -> str:
    with op.context:
        return " | ".join(v.message for v in verify_kernel(op))


def consumer(op, name: str = "consumer0") -> ir.Operation:
    return next(r for r in R.role_ops(op) if R.name_of(r) == name)


def loop_ops(op, name: str, role: str = "consumer0") -> list[ir.Operation]:
    """The ops named `name` in the consumer's first KV loop."""
    loop = R.ops_in(R.role_block(consumer(op, role)), ("scf.for",))[0]
    return [o.operation for o in loop.regions[0].blocks[0].operations if o.operation.name == name]


def test_filecheck(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file(Path("tests/passes/overlap_gemms.mlir"))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("example,options,tile", [
    ("gemma2", "", ""), ("gemma2", "", "stages=2"), ("mha", "pingpong=true", ""),
    ("mha", "persistent=true", "stages=4 block_n=64"), ("sliding_window", "pingpong=true persistent=true", ""),
    ("prefix_lm", "consumers=1 producer=true", "block_m=64"), ("softcap", "", "")])
def test_overlapped_plans_are_sound(example, options, tile):
    """Every consumer role is rotated and the whole plan verifies, with ping-pong's turns,
    persistent CTAs' releases of Q and the last V slots, and 2 to 4 stages."""
    op = kernel(example, pipeline=L5 % options + ",attn-overlap-gemms", tile=tile)
    consumers = [r for r in R.role_ops(op) if R.name_of(r).startswith("consumer")]
    assert consumers and all(R.ops_in(R.role_block(r), (R.MMA_WAIT,)) for r in consumers)
    assert not R.ops_in(R.role_block(next(r for r in R.role_ops(op) if R.name_of(r) == "producer")), (R.MMA_WAIT,))
    assert messages(op) == ""
    for role in consumers:      # the finalize takes O, m and l from the overlapped steps, in its order
        finalize = R.ops_in(R.role_block(role), ("attn.finalize",))[-1]
        values = list(finalize.operands)[:3]
        if "pingpong" not in options and "persistent" in options:
            # Note [The next block's first QK^T in the IR]: the last block's, after the walk,
            # from what the walk carries out of its blocks' steps
            loop = R.walk_branch(role).parent
            assert [v.owner for v in values] == [loop] * 3
            values = [list(loop.regions[0].blocks[0].operations)[-1].operands[v.result_number] for v in values]
            branch = values[0].owner
            values = [list(branch.regions[0].blocks[0].operations)[-1].operands[v.result_number] for v in values]
        steps = values[0].owner
        assert steps.name == "scf.if" and [v.owner for v in values] == [steps] * 3
        then, otherwise = (list(steps.regions[k].blocks[0].operations)[-1] for k in (0, 1))
        taken = [v.result_number for v in values]
        assert then.operands[taken[0]].owner.name == R.MMA_WAIT            # O: the last P.V landed
        assert [then.operands[k].owner.name for k in taken[1:]] == ["attn.softmax_step"] * 2 or \
            [then.operands[k].owner.name for k in taken[1:]] == ["scf.for"] * 2
        starts = [ir.FloatAttr(otherwise.operands[k].owner.attributes["value"]).value for k in taken]
        assert starts == [0.0, float("-inf"), 0.0]


def test_two_segments_peel_the_first_block_of_either():
    """A range of two segments (kv_segments = 2): the first step's block is the first of
    the first segment that has blocks, and the loops of that segment start past it."""
    from tests.gpu.variant_gen import generate

    source = generate(19).source
    result = compile_mlir(source, "gen019.attn", CompileOptions(arch="sm_90a", pass_pipeline=L5 % ""
                                                                + ",attn-overlap-gemms,attn-verify-pipeline"))
    op = attention_ops(result.module)[0]
    assert R.attrs_of(op)["kv_segments"] == 2
    assert len(R.ops_in(R.role_block(consumer(op)), ("arith.select",))) >= 2


def test_release_before_landing_is_caught():
    """K's slot released above the wait that lands the QK^T reading it."""
    op = kernel("mha", pipeline=L5 % "" + ",attn-overlap-gemms")
    release = next(o for o in loop_ops(op, R.MBARRIER_ARRIVE)
                   if R.name_of(o.operands[0].owner) == "mbar_k_empty")
    release.move_before(loop_ops(op, R.MMA_WAIT)[1])
    assert "releases slot" in messages(op) and "while an async attn.mma reading it is in flight" in messages(op)


def test_release_before_the_gemm_is_issued_is_caught():
    """K's slot released between its read and the QK^T that reads the view: no GEMM is in
    flight yet, and the slot is still to be read (Note [Reads until their last use])."""
    op = kernel("mha", pipeline=L5 % "" + ",attn-overlap-gemms")
    release = next(o for o in loop_ops(op, R.MBARRIER_ARRIVE)
                   if R.name_of(o.operands[0].owner) == "mbar_k_empty")
    release.move_before(next(o for o in loop_ops(op, "attn.mma") if R.attrs_of(o)["kind"] == "qk"))
    assert "this attn.mbarrier_arrive releases slot 1 of 'kv' (k) before the attn.mma that reads it" in messages(op)


def test_landing_a_gemm_left_in_flight_is_caught():
    """S landed by a wait that leaves two GEMMs in flight: S is one of them."""
    op = kernel("mha", pipeline=L5 % "" + ",attn-overlap-gemms")
    set_int(loop_ops(op, R.MMA_WAIT)[1], "pending", 2)
    assert messages(op) == "attn.mma_wait (pending = 2): operand 0 is among the 2 youngest GEMMs the wait leaves " \
                           "in flight"


@pytest.mark.parametrize("pipeline,arch,message", [
    (L5 % "" + ",attn-overlap-gemms", "sm_80", "overlaps the GEMMs of sm_90a's consumer warpgroups (wgmma); "
                                              "this plan is for sm_80"),
    ("attn-tile,attn-analyze-masks,attn-warp-specialize,attn-overlap-gemms", "sm_90a",
     "needs the synchronization attn-insert-pipelines makes; run attn-insert-pipelines first"),
    ("attn-tile,attn-analyze-masks,attn-overlap-gemms", "sm_90a", "needs the role regions"),
    (L5 % "" + ",attn-overlap-gemms,attn-overlap-gemms", "sm_90a", "attn-overlap-gemms ran twice on role"),
])
def test_refused_plans(pipeline, arch, message):
    with pytest.raises(AttncError) as err:
        kernel("mha", arch=arch, pipeline=pipeline)
    assert message in str(err.value)


def test_an_edited_step_is_refused_at_its_op():
    """A step whose P.V reads the O it was given, not the rescaled one: not the step the
    pass rotates."""
    op = kernel("mha")
    loop = R.ops_in(R.role_block(consumer(op)), ("scf.for",))[0]
    body = loop.regions[0].blocks[0]
    pv = next(o.operation for o in body.operations if o.operation.name == "attn.mma"
              and ir.StringAttr(o.operation.attributes["kind"]).value == "pv")
    with op.context:
        pv.operands[2] = body.arguments[3]
    from attnc.passes.overlap_gemms import overlap
    with pytest.raises(AttncError) as err:
        overlap(_KEPT[-1].module)
    assert "this attn.mma differs" in str(err.value)


def test_the_lowering_refuses_steps_not_overlapped():
    """attn-lower-sm90a builds a producer plan's consumers overlapped only."""
    pipeline = (L5 % "" + ",attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a")
    with pytest.raises(AttncError) as err:
        kernel("mha", pipeline=pipeline)
    assert "role 'consumer0' has them one after the other: run attn-overlap-gemms after attn-insert-pipelines" \
        in str(err.value)


@pytest.mark.parametrize("edit,message", [
    ("wait", "this attn.mbarrier_wait differs"),
    ("release", "this attn.mbarrier_arrive differs"),
    ("turn", "takes ping-pong's turns in a KV step (a sync before P.V, an arrive after QK^T) with those around"),
])
def test_a_step_off_its_ring_or_with_a_turn_inside_is_refused(edit, message):
    """The pass takes the waits' and releases' stage and phase to be the loop's ring, and
    takes ping-pong's turns from around the loops: a wait at the ring's next stage, a
    release of a constant slot, or a named barrier inside the step is refused, not
    rebound or dropped."""
    op = kernel("mha")
    loop = R.ops_in(R.role_block(consumer(op)), ("scf.for",))[0]
    body = loop.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    with op.context:
        if edit == "wait":
            advance = next(o for o in ops if o.name == R.RING_ADVANCE)
            wait = [o for o in ops if o.name == R.MBARRIER_WAIT][1]
            advance.move_before(wait)
            wait.operands[1] = advance.results[0]
        elif edit == "release":
            release = [o for o in ops if o.name == R.MBARRIER_ARRIVE][1]
            q_wait = R.ops_in(R.role_block(consumer(op)), (R.MBARRIER_WAIT,))[0]     # Q's, at constant 0
            release.operands[1] = q_wait.operands[1]
        else:
            with ir.InsertionPoint(ops[1]), ops[1].location:      # past the step's key block
                R.create(R.NAMED_BARRIER_SYNC, attributes={"id": 1, "threads": 256})
    from attnc.passes.overlap_gemms import overlap
    with pytest.raises(AttncError) as err:
        overlap(_KEPT[-1].module)
    assert message in str(err.value)
