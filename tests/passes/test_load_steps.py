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


def default_loads(persistent: bool = False) -> LoadSteps:
    """What attn-overlap-gemms writes from attn-insert-pipelines' step: K, then V; Q's load
    before them, which waits for Q's slot only where a CTA loads Q more than once."""
    k, v = (tuple(StepOp(name, tile) for name in ("wait", "write", "arrive")) for tile in ("k", "v"))
    q = tuple(StepOp(name, "q") for name in ("wait", "write", "arrive") if persistent or name != "wait")
    return LoadSteps(k + v, k, v, q)


@pytest.mark.parametrize("example,options", [("mha", ""), ("gemma2", ""), ("sliding_window", ""),
                                             ("mha", "persistent=true")])
def test_the_plans_trip_is_the_default(example, options):
    """Every producer KV loop is rotated (inside the range's scf.if, five values carried),
    and its trip is the one the kernel's default order builds: K(n), then V(n - 1)."""
    result = plan(example, options)
    assert not [op for op in R.body_block(producer(result)).operations if op.name == "scf.for"]
    assert loops(result) and all(len(list(loop.regions[0].blocks[0].arguments)) == 6 for loop in loops(result))
    kernel = attention_ops(result.module)[0]
    persistent = R.walk_branch(producer(result)) is not None
    assert load_steps(kernel) == default_loads(persistent)


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
    # the consumers run one program: the verifier names either (Note [Roles alike] in
    # attnc/schedule/explore.py)
    assert message.replace("consumer1", "consumer0") in str(err.value).replace("consumer1", "consumer0")


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
            first = trip(loop)[1]      # past the step's key block
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
    ("carried", "advances the K and V rings and carries its block on"),
    ("barrier", "the producer's KV step waits on K's and V's empty barriers, writes their slots and arrives on "
                "their full barriers"),
    ("twice", "a producer's KV step has one wait k")])
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
            elif edit == "carried":
                terminator = trip(loop)[-1]
                terminator.operands[4] = args[5]
            else:
                k_ops = tile_ops(loop, "k")
                wait = next(op for op in k_ops if op.name == R.MBARRIER_WAIT)
                if edit == "twice":
                    wait.clone(ir.InsertionPoint(wait))
                else:
                    wait.operands[0] = k_ops[-1].operands[0]        # K's full barrier
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
    first = trip(loop)[1]          # past the step's key block
    with kernel.context, ir.InsertionPoint(first), first.location:
        R.create(R.CTA_BARRIER)
    with pytest.raises(AttncError) as err:
        overlap(l5.module)
    assert "rotates the producer's KV step attn-insert-pipelines makes" in str(err.value)


def test_the_default_trip():
    assert default_loads().runs() == [
        ("k", (StepOp("wait", "k"), StepOp("write", "k"), StepOp("arrive", "k"))),
        ("v", (StepOp("wait", "v"), StepOp("write", "v"), StepOp("arrive", "v")))]


def _l5(example: str):
    text = (ROOT / f"examples/{example}.attn").read_text()
    return compile_mlir(text, f"{example}.attn", CompileOptions(arch="sm_90a",
                                                                pass_pipeline=_pipeline(until="attn-insert-pipelines")))


def _named(ops, name: str, tile: str | None = None) -> ir.Operation:
    return next(op for op in ops if op.name == name and (tile is None or tile in str(op)))


def _before_end(role: ir.Operation, value) -> None:
    """A use of `value` at the end of the role."""
    end = list(R.role_block(role).operations)[-1]
    with ir.InsertionPoint(end), end.location:
        from mlir.dialects import arith
        arith.AddIOp(value, value)


@pytest.mark.parametrize("example,edit,message", [
    ("mha", "no loop", "attn-overlap-gemms: role 'producer' has no KV loop"),
    ("mha", "twice", "a producer's KV step loads each of K and V once, with one k attn.mbarrier_wait"),
    ("mha", "missing", "rotates the producer's KV step attn-insert-pipelines makes, which has no v "
                       "attn.cp_async_mbarrier_arrive here"),
    ("mha", "yield", "a producer's KV step advances its ring once and carries it on"),
    ("mha", "block", "the K load of a producer's KV step loads the loop's block into the stage of its ring"),
    ("mha", "other", "an op of the V load of a producer's KV step reads a value of the other load's"),
    ("gemma2", "between", "rotates KV loops that follow each other, with nothing but index arithmetic between"),
    ("gemma2", "chain", "attn-overlap-gemms: a KV loop carries its ring from the loop before it"),
    ("gemma2", "escape", "what a KV loop carries out goes to the next KV loop only"),
])
def test_the_pass_refuses_producers_it_cannot_rotate(example, edit, message):
    result = _l5(example)
    kernel = attention_ops(result.module)[0]
    role = producer(result)
    found = [op for op in R.role_block(role).operations if op.name == "scf.for"]
    loop = found[0]
    body = trip(loop)
    args = list(loop.regions[0].blocks[0].arguments)
    with kernel.context:
        if edit == "no loop":
            for op in reversed(found):
                op.erase()
        elif edit == "twice":
            wait = _named(body, R.MBARRIER_WAIT)
            wait.clone(ir.InsertionPoint(wait))
        elif edit == "missing":
            [op for op in body if op.name == R.CP_ASYNC_MBARRIER_ARRIVE][1].erase()
        elif edit == "yield":
            body[-1].operands[0] = args[1]
        elif edit == "block":
            _named(body, "attn.load", '"k"').operands[3] = args[1]
        elif edit == "other":
            xors = [op for op in body if op.name == "arith.xori"]
            [op for op in body if op.name == R.MBARRIER_WAIT][1].operands[2] = xors[0].result
        elif edit == "between":
            with ir.InsertionPoint(found[1]), found[1].location:
                R.create(R.CTA_BARRIER)
        elif edit == "chain":
            found[1].operands[3] = _named(R.role_block(role).operations, "arith.constant").result
        else:
            _before_end(role, found[0].results[0])
    with pytest.raises(AttncError) as err:
        overlap(result.module)
    assert message in str(err.value)


def test_the_pass_refuses_a_producer_loop_carrying_more_than_its_ring():
    """A loop of the producer's carrying a third value (an L5 dump edited by hand)."""
    from attnc.driver import optimize_mlir
    from attnc.ir import to_text

    text = to_text(_l5("mha").module)
    start = text.index('name = "producer"')
    head = text.rindex("scf.for", 0, start)
    line_end = text.index("\n", head)
    line = text[head:line_end]
    edited = line.replace("iter_args(", "iter_args(%extra = %c0_i32, ").replace("-> (i32, i32)", "-> (i32, i32, i32)")
    yield_at = text.index("scf.yield", line_end)
    yield_end = text.index("\n", yield_at)
    old_yield = text[yield_at:yield_end]
    values, types = old_yield.removeprefix("scf.yield ").split(" : ", 1)
    types, loc = types.split(" loc", 1) if " loc" in types else (types, None)
    new_yield = f"scf.yield %extra, {values} : i32, {types}" + (f" loc{loc}" if loc else "")
    text = text[:head] + edited + text[line_end:yield_at] + new_yield + text[yield_end:]
    result_at = text.rindex("%", 0, head)
    text = text[:result_at] + text[result_at:head].replace(":2 =", ":3 =") + text[head:]
    with pytest.raises(AttncError) as err:
        optimize_mlir(text, "plan.mlir", CompileOptions(arch="sm_90a", pass_pipeline="attn-overlap-gemms"))
    assert "a producer's KV loop carries its ring (stage, phase), as attn-insert-pipelines makes it; this one " \
           "carries 3 values" in str(err.value)


def test_the_lowering_refuses_a_producer_not_rotated():
    result = _l5("mha")
    with pytest.raises(AttncError) as err:
        load_steps(attention_ops(result.module)[0])
    assert "the producer's KV loop carries the K and V rings and the previous block, as attn-overlap-gemms makes " \
           "it (run it after attn-insert-pipelines)" in str(err.value)


def _around(result) -> tuple[list[ir.Operation], list[ir.Operation]]:
    """The ops before the producer's first KV loop and after its last, in the scf.if around them."""
    found = loops(result)
    ops = [o.operation for o in found[0].operation.parent.regions[0].blocks[0].operations]
    start = next(k for k, op in enumerate(ops) if op == found[0].operation)
    end = next(k for k, op in enumerate(ops) if op == found[-1].operation)
    return ops[:start], ops[end + 1:]


def test_the_loads_around_the_loops_are_read_from_the_ir():
    """K's first load before the loops and V's last after them, each a wait, a write and an arrival."""
    result = plan("gemma2")
    steps = load_steps(attention_ops(result.module)[0])
    assert steps.first == tuple(StepOp(k, "k") for k in ("wait", "write", "arrive"))
    assert steps.last == tuple(StepOp(k, "v") for k in ("wait", "write", "arrive"))


@pytest.mark.parametrize("edit,message", [
    ("first ring", "loads K(n) and V of the block before at the stages and phases of their rings"),
    ("first order", "the first block's K load has a wait for its empty slot, then the slot's write, then"),
    ("last order", "the last block's V load has a wait for its empty slot, then the slot's write, then"),
])
def test_the_loads_around_the_loops_are_checked(edit, message):
    """K's first load at another stage than the one the first loop's ring advances from,
    or its ops out of order; V's last load with its ops out of order."""
    result = plan()
    kernel = attention_ops(result.module)[0]
    before, after = _around(result)
    with kernel.context:
        if edit == "first ring":
            write = next(op for op in before if op.name == R.SLOT_WRITE)
            write.operands[1] = loops(result)[0].operands[3]       # the stage after it
        elif edit == "first order":
            wait = next(op for op in before if op.name == R.MBARRIER_WAIT)
            wait.move_after(next(op for op in before if op.name == R.CP_ASYNC_MBARRIER_ARRIVE))
        else:
            arrive = next(op for op in after if op.name == R.CP_ASYNC_MBARRIER_ARRIVE)
            arrive.move_before(next(op for op in after if op.name == R.SLOT_WRITE))
    with pytest.raises(AttncError) as err:
        load_steps(kernel)
    assert message in str(err.value)


def _q_ops(result) -> list[ir.Operation]:
    """Q's load: the producer's ops before the scf.if over the key range."""
    ops = [o.operation for o in R.body_block(producer(result)).operations]
    end = next(k for k, op in enumerate(ops) if op == loops(result)[0].operation.parent)
    return ops[:end]


@pytest.mark.parametrize("options", ["", "persistent=true"])
def test_q_load_is_read_from_the_ir(options):
    """Q's write and arrival, after a wait for Q's slot where a CTA loads Q once a round,
    and the kernel built from them is the default one."""
    result = plan("mha", options)
    steps = load_steps(attention_ops(result.module)[0])
    names = ("wait", "write", "arrive") if options else ("write", "arrive")
    assert steps.q == tuple(StepOp(k, "q") for k in names)


@pytest.mark.parametrize("options,edit,message", [
    ("", "order", "the block's Q load has the slot's write (a CTA that loads it once has no empty barrier to wait on), "
                  "then the arrival on its full barrier"),
    ("persistent=true", "order", "the block's Q load has a wait for its empty slot, then the slot's write, then the "
                                 "arrival on its full barrier"),
    ("persistent=true", "barrier", "Q's load waits on Q's empty barrier, writes their slots and arrives on "
                                   "their full barriers"),
    ("persistent=true", "phase", "Q's load takes Q's slot at its ring"),
])
def test_q_load_edits_are_refused_by_the_lowering(options, edit, message):
    """Q's arrival before its write, its wait on Q's full barrier, or on the phase it has
    (not its flip): the lowering refuses what it would not build as it stands."""
    result = plan("mha", options)
    kernel = attention_ops(result.module)[0]
    ops = _q_ops(result)
    write = next(op for op in ops if op.name == R.SLOT_WRITE)
    arrive = next(op for op in ops if op.name == R.CP_ASYNC_MBARRIER_ARRIVE)
    with kernel.context:
        if edit == "order":
            arrive.move_before(write)
        else:
            wait = next(op for op in ops if op.name == R.MBARRIER_WAIT)
            if edit == "barrier":
                wait.operands[0] = arrive.operands[0]
            else:
                wait.operands[2] = wait.operands[2].owner.operands[0]
    with pytest.raises(AttncError) as err:
        load_steps(kernel)
    assert message in str(err.value)


def test_q_arrival_before_its_write_is_refused_by_the_verifier():
    """Q's full barrier completes before Q's copies were issued: the consumers would read it unwritten."""
    def edit(result):
        ops = _q_ops(result)
        next(op for op in ops if op.name == R.CP_ASYNC_MBARRIER_ARRIVE).move_before(
            next(op for op in ops if op.name == R.SLOT_WRITE))
    _refused(edit, "attn-verify-pipeline: consumer0 reads fill 0 of 'q' (q) from slot 0 before any fill was "
                   "written to it")
