"""What attn-lower-sm90a refuses of a hand-edited L5 plan of sm_90a's consumer warpgroups
(Notes [Overlapped steps op by op] and [Turns as planned] in attnc/backend/wgmma_steps.py):
an edit attn-verify-pipeline, which the lowering runs first, finds sound but that the
lowering does not build -- ping-pong's turns taken otherwise, a KV loop carrying another
value, the key range's scf.if, its else branch and the first loop's K ring as
attn-overlap-gemms does not write them, a first step or a last P.V with an op missing,
twice, or without a pattern -- is refused at the op, with an error located in the `.attn`
source."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from mlir import ir
from mlir.dialects import arith, scf

from attnc.driver import CompileOptions, compile_mlir, optimize_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops, parse_module, set_int, to_text
from attnc.ir import roles as R
from tests.passes.test_wgmma_steps import _pipeline

ROOT = Path(__file__).resolve().parents[2]
LOWER = "attn-lower-sm90a"
LOCATED = re.compile(r"[^\s:]+:\d+:\d+: error: ")


@functools.lru_cache(maxsize=None)
def _plan_text(example: str, options: str) -> str:
    """The L5 plan of `example` on sm_90a (attn-warp-specialize{options}), overlapped."""
    result = compile_mlir((ROOT / f"examples/{example}.attn").read_text(), f"{example}.attn",
                          CompileOptions(arch="sm_90a", pass_pipeline=_pipeline(options)))
    return to_text(result.module)


def plan(example: str = "mha", options: str = "") -> ir.Module:
    """A fresh module of the plan, to edit."""
    return parse_module(_plan_text(example, options))


def kernel_of(module) -> ir.Operation:
    return attention_ops(module)[0]


def role_of(module, name: str) -> ir.Operation:
    return next(r for r in R.role_ops(kernel_of(module)) if R.name_of(r) == name)


def turns(module, name: str) -> list[ir.Operation]:
    """The named barrier ops of role `name`, in program order."""
    return R.ops_in(R.role_block(role_of(module, name)), (R.NAMED_BARRIER_SYNC, R.NAMED_BARRIER_ARRIVE))


def kv_loops(module, name: str = "consumer0") -> list[ir.Operation]:
    return [op for op in R.ops_in(R.role_block(role_of(module, name)), ("scf.for",)) if "kv_blocks" in op.attributes]


def around(module, name: str = "consumer0") -> tuple[list[ir.Operation], list[ir.Operation]]:
    """The ops of the scf.if over the key range before the role's first KV loop (its first
    step) and after its last (its last P.V)."""
    loops = kv_loops(module, name)
    ops = [o.operation for o in loops[0].parent.regions[0].blocks[0].operations]
    at = [k for k, o in enumerate(ops) if any(o == loop for loop in loops)]
    return ops[:at[0]], ops[at[-1] + 1:]


def refused(module, message: str) -> AttncError:
    """attn-lower-sm90a, which runs attn-verify-pipeline first on a plan edited since it
    was checked, refuses the text of `module` with `message`, located in the `.attn`
    source."""
    with pytest.raises(AttncError) as err:
        optimize_mlir(to_text(module), "plan.mlir", CompileOptions(arch="sm_90a", pass_pipeline=LOWER))
    assert message in err.value.message, err.value.message
    assert LOCATED.match(str(err.value)), str(err.value)
    return err.value


def unrecorded_key_range(module) -> None:
    """Drop the key ranges attn-warp-specialize recorded (`ranges`): a plan without them
    has its loops' bounds followed as they stand (Note [The key range as made])."""
    ws = R.warp_specialize_of(kernel_of(module))
    del ws.attributes[R.RANGES]


def carry_one_more(loop: ir.Operation) -> ir.Operation:
    """`loop` again, carrying one more i32 (its lower bound, yielded unchanged)."""
    old_body = loop.regions[0].blocks[0]
    with loop.context, loop.location, ir.InsertionPoint(loop):
        lb, ub, step, *init = list(loop.operands)
        new = scf.ForOp(lb, ub, step, [*init, lb])
        for name in loop.attributes:
            new.operation.attributes[name] = loop.attributes[name]
        with ir.InsertionPoint(new.body):
            old_yield = list(old_body.operations)[-1]
            scf.YieldOp([*old_yield.operands, new.body.arguments[len(init) + 1]])
    terminator = list(new.body.operations)[-1]
    for old, arg in zip(old_body.arguments, new.body.arguments):
        old.replace_all_uses_with(arg)
    for op in list(old_body.operations)[:-1]:
        op.operation.move_before(terminator)
    for old, result in zip(loop.results, new.results):
        old.replace_all_uses_with(result)
    loop.erase()
    return new.operation


# ---------------------------------------------------------------- ping-pong's turns

def test_a_producer_taking_turns_is_refused():
    """A named barrier arrive of the producer's own 128 threads (sound, each arrive a
    phase of its own): only the consumer warpgroups take turns."""
    module = plan("mha", "pingpong=true")
    with module.context:
        arrive = turns(module, "consumer0")[1].clone(ir.InsertionPoint.at_block_begin(
            R.role_block(role_of(module, "producer"))))
        set_int(arrive, "id", 5)
        set_int(arrive, "threads", 128)
    refused(module, "role 'producer' takes turns on a named barrier; only the two consumer warpgroups of "
                    "ping-pong do")


def test_turns_on_one_barrier_are_refused():
    """Every turn renumbered to barrier 1, each of one warpgroup's 128 threads (sound:
    each a phase of its own): a warpgroup syncs on its own barrier and arrives on the
    other's."""
    module = plan("mha", "pingpong=true")
    for name in ("consumer0", "consumer1"):
        for op in turns(module, name):
            set_int(op, "id", 1)
            set_int(op, "threads", 128)
    refused(module, "with `pingpong` role 'consumer0' syncs on its own named barrier and arrives on the other "
                    "warpgroup's; it syncs on [1] and arrives on [1]")


def test_a_barrier_of_two_thread_counts_is_refused():
    """consumer0's last sync on barrier 1 and consumer1's last arrive on it each counted
    128 threads (sound: by then the turns are over), the other turns on it 256."""
    module = plan("mha", "pingpong=true")
    last_sync = [op for op in turns(module, "consumer0") if op.name == R.NAMED_BARRIER_SYNC][-1]
    last_arrive = [op for op in turns(module, "consumer1") if op.name == R.NAMED_BARRIER_ARRIVE][-1]
    for op in (last_sync, last_arrive):
        set_int(op, "threads", 128)
    refused(module, "named barrier 1 counts 128 threads here and 256 elsewhere: a barrier has one count")


def test_warpgroups_arriving_on_barriers_the_other_does_not_sync_on_are_refused():
    """consumer0 syncs on 1 and arrives on 2, consumer1 syncs on 3 and arrives on 4, each
    barrier of one warpgroup's 128 threads (sound, no turns taken)."""
    module = plan("mha", "pingpong=true")
    for name, (own, other) in (("consumer0", (1, 2)), ("consumer1", (3, 4))):
        for op in turns(module, name):
            set_int(op, "id", own if op.name == R.NAMED_BARRIER_SYNC else other)
            set_int(op, "threads", 128)
    refused(module, "role 'consumer1' arrives on 4 and syncs on 3; consumer0 syncs on 1 and arrives on 2: each "
                    "arrives on the other's")


# ---------------------------------------------------------------- the KV loops and the key range

def test_a_kv_loop_carrying_another_value_is_refused():
    """consumer0's KV loop carries one more i32, unused."""
    module = plan()
    carry_one_more(kv_loops(module)[0])
    refused(module, "a consumer's overlapped KV loop carries m, l, O, P, the factor, the K and V rings, V's "
                    "previous stage and the step count")


def test_a_kv_loop_outside_the_key_ranges_scf_if_is_refused():
    """consumer0's KV loop wrapped in an scf.for of one trip (0 to 1), which the verifier
    runs as the loop alone; the plan records no key range (`ranges`) to compare."""
    module = plan()
    unrecorded_key_range(module)
    loop = kv_loops(module)[0]
    with module.context, loop.location, ir.InsertionPoint(loop):
        i32 = ir.IntegerType.get_signless(32)
        zero, one = (arith.ConstantOp(i32, v).result for v in (0, 1))
        outer = scf.ForOp(zero, one, one, list(loop.operands)[3:])
        with ir.InsertionPoint(outer.body):
            inner = loop.clone()
            scf.YieldOp(list(inner.results))
    for k, arg in enumerate(list(outer.body.arguments)[1:]):
        inner.operands[3 + k] = arg
    for old, new in zip(loop.results, outer.results):
        old.replace_all_uses_with(new)
    loop.erase()
    refused(module, "a consumer's overlapped KV loops stand in one scf.if over the key range")


def test_an_else_branch_yielding_another_o_is_refused():
    """The key range's else branch yields O from a fill of its own, not the one the KV
    loops start from."""
    module = plan()
    range_if = kv_loops(module)[0].parent
    yielded = list(range_if.regions[1].blocks[0].operations)[-1]
    with module.context:
        fill = yielded.operands[2].owner.clone(ir.InsertionPoint(yielded))
        yielded.operands[2] = fill.result
    refused(module, "the overlapped steps start O as the range yields it without a step")


def test_a_first_loop_starting_k_from_constants_is_refused():
    """consumer0's first KV loop starts K's ring from constants (stage 1, phase 0: where
    the first step's advance takes it, so sound), not from that advance."""
    module = plan()
    loop = kv_loops(module)[0]
    with module.context, loop.location, ir.InsertionPoint(loop):
        i32 = ir.IntegerType.get_signless(32)
        loop.operands[3 + 5] = arith.ConstantOp(i32, 1).result
        loop.operands[3 + 6] = arith.ConstantOp(i32, 0).result
    refused(module, "a consumer's first overlapped KV loop starts K's ring a stage past the first step's")


# ---------------------------------------------------------------- the first step and the last P.V

def test_a_first_step_without_its_softmax_is_refused():
    """consumer0's first step without its softmax (the loop started from fills)."""
    module = plan()
    first, _ = around(module)
    softmax = next(op for op in first if op.name == "attn.softmax_step")
    fills = R.ops_in(R.role_block(role_of(module, "consumer0")), ("attn.fill",))
    with module.context, fills[0].location, ir.InsertionPoint(fills[0]):
        p = R.create("attn.fill", [softmax.results[0].type], [], {"value": fills[0].attributes["value"]})
    for result, value in zip(softmax.results, (p.result, fills[0].result, fills[1].result, fills[1].result)):
        result.replace_all_uses_with(value)
    softmax.erase()
    refused(module, "a consumer's first step has a softmax_step op, and this one has none")


def test_a_first_step_without_the_variants_score_mod_is_refused():
    """gemma2's first step without its score_mod: the kernel applies the hooks where
    attn-tile put them."""
    module = plan("gemma2")
    for name in ("consumer0", "consumer1"):
        first, _ = around(module, name)
        score_mod = next(op for op in first if op.name == "attn.score_mod")
        score_mod.result.replace_all_uses_with(score_mod.operands[0])
        score_mod.erase()
    refused(module, "the first step (of mixed key blocks) has no attn.score_mod op")


def test_a_last_pv_with_an_op_without_a_pattern_is_refused():
    module = plan()
    _, last = around(module)
    fill = R.ops_in(R.role_block(role_of(module, "consumer0")), ("attn.fill",))[0]
    with module.context:
        fill.clone(ir.InsertionPoint(last[0]))
    refused(module, "the sm_90a lowering has no pattern for attn.fill in a consumer's last P.V")


def test_a_last_pv_rescaling_twice_is_refused():
    """consumer0's last P.V with a second rescale of the landed O, unused."""
    module = plan()
    _, last = around(module)
    rescale = next(op for op in last if op.name == "attn.rescale")
    with module.context:
        rescale.clone(ir.InsertionPoint(rescale))
    refused(module, "a consumer's last P.V has one rescale")
