"""attn-verify-pipeline (attnc/schedule/verify.py) on the L5 IR: every kernel the
pipelines make is sound on every target, and bugs planted in the IR's synchronization
ops -- a removed arrive, a wrong count, a cp.async noinc count off by one, an arrival
above the copies it reports, a wrong parity, wrong transaction bytes, a ping-pong named
barrier short of threads or without its first arrive, a cp.async read with its group in
flight -- are each refused with what breaks, at the op. (The same through `attnc opt` on hand-edited files:
test_verify_pipeline_filecheck.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest
from mlir import ir

from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir import roles as R
from attnc.passes.verify_pipeline import verify_pipeline
from attnc.schedule.verify import explore, kernel_explorations, verify_kernel

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.attn"))
L5 = "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines"


_KEPT = []        # the modules of the kernels the tests hold


def kernel(example: str, arch: str, pipeline: str = L5):
    result = compile_mlir((ROOT / f"examples/{example}.attn").read_text(), f"{example}.attn",
                          CompileOptions(arch=arch, pass_pipeline=pipeline))
    _KEPT.append(result)
    return attention_ops(result.module)[0]


def messages(op) -> str:
    with op.context:
        return " | ".join(v.message for v in verify_kernel(op))


def role(op, name: str) -> ir.Operation:
    return next(r for r in R.role_ops(op) if R.name_of(r) == name)


def ops(op, role_name: str, name: str, bar: str | None = None) -> list[ir.Operation]:
    found = R.ops_in(R.role_block(role(op, role_name)), (name,))
    return [o for o in found if bar is None or R.name_of(o.operands[0].owner) == bar]


def init(op, bar: str) -> ir.Operation:
    return next(o for o in R.mbarrier_ops(op) if R.name_of(o) == bar)


def alike(text: str) -> str:
    """`text` with consumer1 named consumer0: the two run one program, and the verifier
    names either (Note [Roles alike] in attnc/schedule/explore.py)."""
    return text.replace("consumer1", "consumer0")


def set_int(o: ir.Operation, key: str, value: int) -> None:
    with o.context:
        o.attributes[key] = R.i64(value)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
@pytest.mark.parametrize("example", EXAMPLES)
def test_every_kernel_is_sound(example, arch):
    assert messages(kernel(example, arch)) == ""


def q_after_the_kv_loop(op) -> None:
    """The producer's load of Q (its load, write and cp.async arrival) moved after its KV
    loop."""
    body = list(R.role_block(role(op, "producer")).operations)
    loop = next(o for o in body if o.operation.name == "scf.for")
    write = next(o for o in body if o.operation.name == R.SLOT_WRITE)
    q_ops = [write.operands[2].owner, write, body[body.index(write) + 1]]
    assert q_ops[2].operation.name == "attn.cp_async_mbarrier_arrive"
    for o in reversed(q_ops):
        o.move_after(loop)


def test_two_rings_waiting_on_each_other_deadlock():
    """Note [Every ring at once]: the producer's Q moved after its KV loop. The consumers
    wait for Q before they release a K/V slot, and the producer for a slot before it writes
    Q: neither ring alone deadlocks, the two together do."""
    op = kernel("mha", "sm_90a")
    q_after_the_kv_loop(op)
    assert messages(op).startswith("channels 'kv' and 'q' deadlock: consumer0 waits at attn.mbarrier_wait on "
                                   "mbar_q_full[0]")


def test_every_sm100a_plan_is_sound_with_every_ring_at_once():
    """Note [Every ring at once]: sm_100a's fifteen rings explored together, for every
    example. Examples whose roles run the same synchronization (the same events, mbarriers
    and warps) are one exploration (three, for the examples as they stand)."""
    explored = {}
    for example in EXAMPLES:
        op = kernel(example, "sm_100a")
        with op.context:
            found, [(channels, programs, bars, threads)] = kernel_explorations(op)
        assert found == [] and len(channels) == len(R.channel_ops(op))
        key = repr((sorted((role, [(e.kind, e.channel, e.bar, e.stage, e.value, e.tile, e.fill, e.lands, e.tx,
                                    e.groups) for e in events]) for role, events in programs.items()),
                    sorted(bars.items()), sorted(threads.items())))
        if key not in explored:
            with op.context:
                explored[key] = (example, explore(channels, programs, bars, threads))
    assert [(example, v) for example, v in explored.values() if v is not None] == []
    assert len(explored) >= 2


@pytest.mark.parametrize("example, arch, plant", [
    ("mha", "sm_90a", "q_after_the_kv_loop"),
    ("gemma2", "sm_90a", "removed_k_release"),
    ("softcap", "sm_90a", "none"),
])
def test_the_reduction_finds_what_every_interleaving_finds(example, arch, plant):
    """Note [Roles that need not move] (attnc/schedule/explore.py): with ping-pong (the
    consumers not alike, so the reduction applies), a sound plan is sound and a planted
    deadlock found both with every interleaving and with the reduced ones."""
    from attnc.schedule.explore import Explorer

    op = kernel(example, arch, PINGPONG)
    if plant == "q_after_the_kv_loop":
        q_after_the_kv_loop(op)
    elif plant == "removed_k_release":
        for arrive in ops(op, "consumer1", R.MBARRIER_ARRIVE, "mbar_k_empty"):
            arrive.erase()
    with op.context:
        found, [exploration] = kernel_explorations(op)
        assert found == []
        full, reduced = (Explorer(*exploration, reduce=r) for r in (False, True))
        assert reduced.reduce and not full.reduce
        verdicts = [x.run() for x in (full, reduced)]
    if plant == "none":
        assert verdicts == [None, None]
    else:
        assert all(v is not None and " deadlock" in v.message for v in verdicts), verdicts


def test_a_removed_arrive_deadlocks():
    op = kernel("gemma2", "sm_90a")
    for arrive in ops(op, "consumer1", R.MBARRIER_ARRIVE, "mbar_k_empty"):
        arrive.erase()
    # named first at the wait that got part of its arrivals (consumer0's, not consumer1's)
    assert messages(op).startswith("channel 'kv' deadlocks: producer waits at attn.mbarrier_wait on "
                                   "mbar_k_empty[0] for parity 0 (its phase 0, 4 of 8 arrivals)")
    assert ("consumer0 waits at attn.mbarrier_wait on mbar_k_full[0] for parity 1 (its phase 1, 0 of 128 "
            "arrivals)") in messages(op)
    # the pass's error is at the attention's line, as every op a pass made is: its note names the op
    with pytest.raises(AttncError, match="channel 'kv' deadlocks") as error:
        verify_pipeline(_KEPT[-1].module)
    assert (error.value.span.line, error.value.span.col) == (2, 1)
    assert error.value.note == "at attn.mbarrier_wait (on mbar_k_empty), made by attn-insert-pipelines"


def test_a_removed_cp_async_arrive_deadlocks():
    """V's copies are never reported: the consumers wait for V's first fill for ever."""
    op = kernel("gemma2", "sm_90a")
    for arrive in ops(op, "producer", R.CP_ASYNC_MBARRIER_ARRIVE, "mbar_v_full"):
        arrive.erase()
    assert ("channel 'kv' deadlocks: consumer0 waits at attn.mbarrier_wait on mbar_v_full[0] for parity 0 "
            "(its phase 0, 0 of 128 arrivals)") in messages(op)


def test_an_arrive_above_its_copies_lets_a_read_in_early():
    """cp.async.mbarrier.arrive reports only the copies issued before it (Note [cp.async
    arrivals]): moved above K's copies, it completes K's phase before they land."""
    op = kernel("gemma2", "sm_90a")
    arrive = ops(op, "producer", R.CP_ASYNC_MBARRIER_ARRIVE, "mbar_k_full")[0]
    arrive.move_before(next(o for o in ops(op, "producer", R.SLOT_WRITE) if R.attrs_of(o)["tile"] == "k"))
    assert "consumer0 reads fill 0 of 'kv' (k) from slot 0 before any fill was written to it" in alike(messages(op))


@pytest.mark.parametrize("bar, count, expect", [
    ("mbar_k_empty", 9, "channel 'kv' deadlocks"),      # one arrival more than the two warpgroups' 8: never released
    ("mbar_k_empty", 4, "producer overwrites slot 0 of 'kv' (k) with fill 3 before consumer1 released fill 0"),
    # the producer's 128 threads each arrive once (cp.async.mbarrier.arrive.noinc)
    ("mbar_k_full", 129, "consumer0 waits at attn.mbarrier_wait on mbar_k_full[0] for parity 0 (its phase 0, "
                         "128 of 129 arrivals)"),
    ("mbar_k_full", 127, "mbar_k_full[0] gets 128 arrivals in one phase, more than its count 127"),
])
def test_a_wrong_count_is_caught(bar, count, expect):
    op = kernel("gemma2", "sm_90a")
    set_int(init(op, bar), "count", count)
    assert alike(expect) in alike(messages(op))


def test_a_release_on_the_other_tiles_barrier_is_caught():
    """consumer0 hands V's slot back on K's empty barrier: K's slot looks free too early."""
    op = kernel("gemma2", "sm_90a")
    for arrive in ops(op, "consumer0", R.MBARRIER_ARRIVE, "mbar_v_empty"):
        arrive.operands[0] = init(op, "mbar_k_empty").result
    assert "producer overwrites slot 0 of 'kv' (k) with fill 3 before consumer1 released fill 0" in messages(op)


def test_a_wait_on_the_wrong_parity_reads_early():
    op = kernel("gemma2", "sm_90a")
    wait = ops(op, "consumer0", R.MBARRIER_WAIT, "mbar_k_full")[0]
    with op.context, ir.InsertionPoint(wait), wait.location:
        from mlir.dialects import arith
        one = arith.ConstantOp(ir.IntegerType.get_signless(32), 1).result
        wait.operands[2] = arith.XOrIOp(wait.operands[2], one).result
    assert "consumer0 reads fill 0 of 'kv' (k) from slot 0 before any fill was written to it" in messages(op)


@pytest.mark.parametrize("delta, expect", [
    # announced bytes never all land: named first at the wait for them, the rest of the CTA stuck behind it
    (16, "deadlock: mma waits at attn.mbarrier_wait on mbar_kv_full[0] for parity 0 (its phase 0, 1 of 1 "
         "arrivals, 16 bytes due)"),
    (-16, "mbar_kv_full[0] receives more bytes than its expect_tx announced"),
])
def test_wrong_transaction_bytes_are_caught(delta, expect):
    op = kernel("gemma2", "sm_100a")
    expect_tx = ops(op, "load", R.MBARRIER_EXPECT_TX, "mbar_kv_full")[0]
    set_int(expect_tx, "bytes", ir.IntegerAttr(expect_tx.attributes["bytes"]).value + delta)
    assert expect in messages(op)


PINGPONG = L5.replace("attn-warp-specialize", "attn-warp-specialize{pingpong=1}")


@pytest.mark.parametrize("example", ["mha", "gemma2", "sliding_window"])
def test_the_pingpong_turns_are_sound(example):
    """Note [Ping-pong turns] in sync.py: the consumers' named barriers, with the producer's
    ring (and, for the window, persistent CTAs' Q barrier)."""
    op = kernel(example, "sm_90a", PINGPONG)
    loops = [o for o in R.body_block(role(op, "consumer0")).operations if o.operation.name == "scf.for"]
    assert len(ops(op, "consumer0", R.NAMED_BARRIER_SYNC)) == len(loops) + 2
    assert messages(op) == ""


def test_a_named_barrier_short_of_threads_is_caught():
    """Consumer0's turn barrier counting one warp too few."""
    op = kernel("gemma2", "sm_90a", PINGPONG)
    for name in ("consumer0", "consumer1"):
        for o in ops(op, name, R.NAMED_BARRIER_SYNC) + ops(op, name, R.NAMED_BARRIER_ARRIVE):
            if R.attrs_of(o)["id"] == 1:
                set_int(o, "threads", 224)
    assert "named barrier 1 counts 224 threads but gets 256" in messages(op)


def test_a_removed_turn_arrive_deadlocks_the_consumers():
    """Without consumer1's first arrive, consumer0 never gets its first turn and consumer1
    waits for consumer0 to hand it one; the producer, its ring full, waits for a slot."""
    op = kernel("gemma2", "sm_90a", PINGPONG)
    first = ops(op, "consumer1", R.NAMED_BARRIER_ARRIVE)[0]
    first.erase()
    assert messages(op).startswith(
        "the named barriers and channel 'kv' deadlock: consumer0 waits at attn.named_barrier_sync on named "
        "barrier 1 (128 of its 256 threads there); consumer1 waits at attn.named_barrier_sync on named barrier 2 "
        "(128 of its 256 threads there); producer waits at attn.mbarrier_wait on mbar_k_empty[0]")


def test_sm100_p_published_with_too_small_a_count():
    op = kernel("gemma2", "sm_100a")
    set_int(init(op, "mbar_p0_full"), "count", 2)
    assert "mbar_p0_full[0] gets 4 arrivals in one phase, more than its count 2" in messages(op)


@pytest.mark.parametrize("barrier,expect", [
    ("mbar_s1_empty", "deadlock: mma waits at attn.mbarrier_wait on mbar_s1_empty[0] for parity 0"),
    ("mbar_p1_full", "deadlock: mma waits at attn.mbarrier_wait on mbar_p1_full[0] for parity 0"),
])
def test_sm100_second_q_tiles_release_removed_deadlocks(barrier, expect):
    """Note [Q tiles of a CTA]: softmax1 runs Q tile 1 on its own channels; without its
    release of S1 (or its publication of P1) the MMA warp waits for ever."""
    op = kernel("gemma2", "sm_100a")
    for arrive in ops(op, "softmax1", R.MBARRIER_ARRIVE, barrier):
        arrive.erase()
    assert expect in messages(op)


def test_sm100_alternating_ring_announces_each_tiles_bytes():
    """diff_head_dims: K fills deliver twice V's bytes; each expect_tx announces its own
    (Note [Bytes per fill] in sync.py)."""
    op = kernel("diff_head_dims", "sm_100a")
    announced = [ir.IntegerAttr(o.attributes["bytes"]).value
                 for o in ops(op, "load", R.MBARRIER_EXPECT_TX, "mbar_kv_full")]
    assert announced[:2] == [32768, 16384] and messages(op) == ""


def test_sm100_k_released_before_its_second_qk_is_caught():
    """The MMA warp's tcgen05 commit that releases K's slot, moved above the second Q tile's
    QK^T: the commit arrives once the MMAs issued before it land, and that one reads K after
    (Note [Reads until their last use] in verify.py)."""
    op = kernel("mha", "sm_100a")
    commit = ops(op, "mma", R.TCGEN05_COMMIT, "mbar_kv_empty")[0]
    second = [o for o in ops(op, "mma", "attn.mma") if R.attrs_of(o)["kind"] == "qk"][1]
    commit.move_before(second)
    assert ("this attn.tcgen05_commit releases slot 0 of 'kv' (k) before the attn.mma that reads it"
            in messages(op))


def test_sm80_read_with_its_group_in_flight_is_caught():
    """A step's wait leaving one group more than the loads ahead (2 * stages - 2) in
    flight: K of the step may not have landed."""
    op = kernel("mha", "sm_80")
    set_int(ops(op, "compute", R.CP_ASYNC_WAIT)[0], "pending", 3)
    assert messages(op).startswith("compute reads fill 0 of 'kv' (k) from slot 0 before its data landed")


def test_an_unevaluable_stage_is_named():
    op = kernel("mha", "sm_90a")
    wait = ops(op, "producer", R.MBARRIER_WAIT, "mbar_k_empty")[0]
    with op.context:        # the CTA's batch index: a value of the launch
        wait.operands[1] = op.regions[0].blocks[0].arguments[0]
    assert "the stage or parity of attn.mbarrier_wait is not a value" in messages(op)


def test_a_count_below_one_is_named():
    op = kernel("mha", "sm_90a")
    set_int(init(op, "mbar_k_full"), "count", 0)
    assert "mbarrier 'mbar_k_full' has count 0 and 3 stages: both must be at least 1" in messages(op)


def test_kv_loops_run_short_of_the_key_range_are_refused():
    """Bounds edited so that a role's KV loops run no trip would leave their bodies
    unchecked (Note [Key blocks the check runs])."""
    op = kernel("mha", "sm_90a")
    loop = next(o for o in R.ops_in(R.role_block(role(op, "producer")), ("scf.for",)) if "kv_blocks" in o.attributes)
    with op.context:
        loop.operands[1] = loop.operands[0]
    assert messages(op).startswith("role 'producer': its KV loops run 0 trips over the 8 key blocks")


FIXED_KEYS = """attention fixed {
  q: bf16[B, H, 200, 64]
  k: bf16[B, H, 333, 64]
  v: bf16[B, H, 333, 64]
  out o: bf16[B, H, 200, 64]
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_fixed_key_length_of_few_blocks_is_sound(arch):
    """N = 333 fixed: the KV loops run the 3 blocks of its constant bound (one of them
    peeled on sm_90a), fewer than the trips that wrap each ring twice, and the check takes
    them as the kernel runs them (Note [Key blocks the check runs])."""
    result = compile_mlir(FIXED_KEYS, "fixed.attn", CompileOptions(arch=arch, pass_pipeline=L5 + (
        ",attn-overlap-gemms" if arch == "sm_90a" else "")))
    _KEPT.append(result)
    assert messages(attention_ops(result.module)[0]) == ""


@pytest.mark.parametrize("pipeline, alike", [(L5, [(0, 1)]), (PINGPONG, [])])
def test_consumers_running_one_program_are_explored_once(pipeline, alike):
    """Note [Roles alike] (attnc/schedule/explore.py): the two consumer warpgroups are one
    class without ping-pong (their named barriers differ with it), and a state with the
    two swapped is the same state to the exploration."""
    from attnc.schedule.explore import Explorer
    from attnc.schedule.verify import _Trace

    op = kernel("mha", "sm_90a", pipeline)
    bars = {R.name_of(b): (R.attrs_of(b).get("channel"), R.attrs_of(b)["count"], R.attrs_of(b)["stages"],
                           R.attrs_of(b).get("tile")) for b in R.mbarrier_ops(op)}
    programs, threads = {}, {}
    with op.context:
        for r in R.role_ops(op):
            a = R.attrs_of(r)
            trace = _Trace(len(a["warps"]), 3, bars, a.get("block_n", 0))
            trace.block(R.role_block(r))
            programs[a["name"]] = [e for e in trace.events if e.channel in ("kv", None)]
            threads[a["name"]] = 32 * len(a["warps"])
    explorer = Explorer(("kv",), programs, bars, threads)
    assert explorer.roles[:2] == ["consumer0", "consumer1"] and explorer.alike == alike
    if alike:
        start = ((3, 1, 0), ((0, 0, 0),) * len(explorer.bar_keys),
                 ((-1, 0, frozenset({0})),) * len(explorer.slot_keys), (), ((),) * 3, ((),) * 3,
                 frozenset({(0, 0)}), (-1,) * 3)
        swapped = ((1, 3, 0), start[1], ((-1, 0, frozenset({1})),) * len(explorer.slot_keys), (), ((),) * 3,
                   ((),) * 3, frozenset({(1, 0)}), (-1,) * 3)
        assert explorer._canonical(start) == explorer._canonical(swapped) == swapped
