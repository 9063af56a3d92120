"""sm_90a's producer loading K one step ahead of V (Note [K one step ahead] in
attnc/schedule/load_ahead.py, written by attn-overlap-gemms) and its trips lowered op by
op (Note [Loads op by op] in attnc/backend/load_steps.py): the IR's trip is the default
one the kernel was built with; V's load moved above K's, by a user pass at L3 or by hand
at L5, is one other kernel; an unsound edit is refused by the verifier, and what the
lowering and the pass refuse themselves."""
import pytest
from mlir import ir

from attnc.backend.kv_steps import StepOp
from attnc.backend.load_steps import LoadSteps, load_steps
from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops, to_text
from attnc.ir import roles as R
from attnc.passes.overlap_gemms import overlap
from attnc.passes.tile_program import KV_LOOP
from tests.passes.test_wgmma_steps import ROOT, _pipeline, plan, ptx_of

V_BEFORE_K = str(ROOT / "examples" / "passes" / "v_before_k.py")


def producer(result) -> ir.Operation:
    kernel = attention_ops(result.module)[0]
    return next(r for r in R.role_ops(kernel) if R.name_of(r) == "producer")


def loops(result) -> list[ir.Operation]:
    return [op for op in R.ops_in(R.role_block(producer(result)), ("scf.for",)) if KV_LOOP in op.attributes]


def trip(loop) -> list[ir.Operation]:
    return [o.operation for o in loop.regions[0].blocks[0].operations]


def tile_ops(loop, tile: str) -> list[ir.Operation]:
    """The ops of `tile`'s load in a trip: from its attn.load to its arrival."""
    ops = trip(loop)
    start = next(k for k, op in enumerate(ops) if op.name == "attn.load" and R.attrs_of(op)["operand"] == tile)
    end = next(k for k in range(start, len(ops)) if ops[k].name == R.CP_ASYNC_MBARRIER_ARRIVE)
    return ops[start:end + 1]


@pytest.mark.parametrize("example,options", [("mha", ""), ("gemma2", ""), ("sliding_window", ""),
                                             ("mha", "persistent=true")])
def test_the_plans_trip_is_the_default(example, options):
    """Every producer KV loop is rotated (inside the range's scf.if, five values carried),
    and its trip is the one the kernel's default order builds: K(n), then V(n - 1)."""
    result = plan(example, options)
    assert not [op for op in R.role_block(producer(result)).operations if op.name == "scf.for"]
    assert loops(result) and all(len(list(loop.regions[0].blocks[0].arguments)) == 6 for loop in loops(result))
    assert load_steps(attention_ops(result.module)[0]) == LoadSteps.default()


def test_v_before_k_at_l3_and_by_hand_at_l5_are_one_other_kernel():
    """examples/passes/v_before_k.py before attn-insert-pipelines, or V's load moved above
    K's in the L5 trips: K0, V0, K1, V1, ... instead of K0, K1, V0, K2, V1, ..."""
    text = (ROOT / "examples/mha.attn").read_text()
    by_pass = compile_mlir(text, "mha.attn", CompileOptions(
        arch="sm_90a", load_passes=(V_BEFORE_K,),
        pass_pipeline=_pipeline().replace("attn-warp-specialize", "attn-warp-specialize,v-before-k")))
    by_hand = plan()
    for loop in loops(by_hand):
        first_k = tile_ops(loop, "k")[0]
        for op in tile_ops(loop, "v"):
            op.move_before(first_k)
    steps = load_steps(attention_ops(by_hand.module)[0]).trip
    assert [op.what for op in steps] == ["v"] * 3 + ["k"] * 3
    edited, moved, plain = (ptx_of(to_text(r.module)) for r in (by_hand, by_pass, plan()))
    assert edited == moved != plain


def test_the_waits_moved_together_are_another_kernel():
    """Both loads' waits before either write: each load's ops in their order still."""
    result = plan()
    for loop in loops(result):
        k_ops, v_ops = tile_ops(loop, "k"), tile_ops(loop, "v")
        k_write = next(op for op in k_ops if op.name == R.SLOT_WRITE)
        for op in v_ops:
            if op.name in ("attn.load", "arith.xori", R.MBARRIER_WAIT):
                op.move_before(k_write)
    steps = [(op.name, op.what) for op in load_steps(attention_ops(result.module)[0]).trip]
    assert steps[:3] == [("wait", "k"), ("wait", "v"), ("write", "k")]
    assert ptx_of(to_text(result.module)) != ptx_of(to_text(plan().module))


def _refused(edit, message: str, example: str = "mha") -> None:
    result = plan(example)
    with attention_ops(result.module)[0].context:
        edit(result)
    with pytest.raises(AttncError) as err:
        ptx_of(to_text(result.module))
    assert message in str(err.value)


def test_a_write_before_its_wait_is_refused_by_the_verifier():
    """K's slot written before the wait for the consumers' release of it."""
    def edit(result):
        for loop in loops(result):
            ops = tile_ops(loop, "k")
            wait = next(op for op in ops if op.name == R.MBARRIER_WAIT)
            wait.move_after(next(op for op in ops if op.name == R.SLOT_WRITE))
    _refused(edit, "attn-verify-pipeline: producer overwrites slot 0 of 'kv' (k) with fill 3 before consumer0, "
                   "consumer1 released fill 0")


def test_an_arrival_before_its_write_is_refused():
    def edit(result):
        for loop in loops(result):
            ops = tile_ops(loop, "v")
            ops[-1].move_before(next(op for op in ops if op.name == R.SLOT_WRITE))
    _refused(edit, "attn-verify-pipeline: consumer0 reads fill 0 of 'kv' (v) from slot 0 before any fill was "
                   "written to it")


def test_an_op_without_a_pattern_is_refused():
    def edit(result):
        for loop in loops(result):
            first = trip(loop)[0]
            with ir.InsertionPoint(first), first.location:
                R.create(R.CTA_BARRIER)
    _refused(edit, "has no pattern for attn.cta_barrier in the producer's KV step")


def test_a_write_off_its_ring_is_refused():
    """K written at V's stage: the verifier sees another slot than the lowering builds."""
    def edit(result):
        for loop in loops(result):
            write = next(op for op in tile_ops(loop, "k") if op.name == R.SLOT_WRITE)
            write.operands[1] = loop.regions[0].blocks[0].arguments[3]
    _refused(edit, "attn-verify-pipeline: producer overwrites slot 0 of 'kv' (k) with fill 1 before consumer0, "
                   "consumer1 released fill 0")


@pytest.mark.parametrize("edit,message", [
    ("ring", "loads K(n) and V of the block before at the stages and phases of their rings"),
    ("order", "this KV loop's V load has a wait for its empty slot, then the slot's write, then the arrival"),
    ("carried", "advances the K and V rings and carries its block on")])
def test_what_the_lowering_refuses_behind_the_verifier(edit, message):
    """The lowering takes a step's slot and block from its index: a load off its ring, a
    load's ops out of their order or a trip that carries another block is refused by the
    lowering itself too."""
    result = plan()
    kernel = attention_ops(result.module)[0]
    with kernel.context:
        for loop in loops(result):
            args = list(loop.regions[0].blocks[0].arguments)
            ops = tile_ops(loop, "v")
            if edit == "ring":
                next(op for op in tile_ops(loop, "k") if op.name == R.SLOT_WRITE).operands[1] = args[3]
            elif edit == "order":
                ops[-1].move_before(next(op for op in ops if op.name == R.SLOT_WRITE))
            else:
                terminator = trip(loop)[-1]
                terminator.operands[4] = args[5]
    with pytest.raises(AttncError) as err:
        load_steps(kernel)
    assert message in str(err.value)


def test_loops_with_different_trips_are_refused():
    """gemma2's first loop with V before K, its others not: the kernel builds one trip."""
    def edit(result):
        loop = loops(result)[0]
        first_k = tile_ops(loop, "k")[0]
        for op in tile_ops(loop, "v"):
            op.move_before(first_k)
    _refused(edit, "the producer's KV loops have one trip", "gemma2")


def test_the_pass_refuses_a_step_it_does_not_know():
    """An op the producer's step attn-insert-pipelines makes has not, before the pass."""
    text = (ROOT / "examples/mha.attn").read_text()
    l5 = compile_mlir(text, "mha.attn", CompileOptions(arch="sm_90a",
                                                       pass_pipeline=_pipeline(until="attn-insert-pipelines")))
    kernel = attention_ops(l5.module)[0]
    loop = next(op for op in R.ops_in(R.role_block(producer(l5)), ("scf.for",)))
    first = trip(loop)[0]
    with kernel.context, ir.InsertionPoint(first), first.location:
        R.create(R.CTA_BARRIER)
    with pytest.raises(AttncError) as err:
        overlap(l5.module)
    assert "rotates the producer's KV step attn-insert-pipelines makes" in str(err.value)


def test_the_default_trip():
    assert LoadSteps.default().runs() == [
        ("k", (StepOp("wait", "k"), StepOp("write", "k"), StepOp("arrive", "k"))),
        ("v", (StepOp("wait", "v"), StepOp("write", "v"), StepOp("arrive", "v")))]
