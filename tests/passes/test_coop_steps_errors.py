"""What attn-lower-sm90a refuses of a hand-edited L5 plan of sm_90a's cooperative kernel
(attn-warp-specialize{producer=false}; Note [Cooperative steps op by op] in
attnc/backend/coop_steps.py): an edit attn-verify-pipeline, which the lowering runs
first, finds sound but that the lowering does not build -- KV loops starting elsewhere
than past the key range's first block or carrying another value, a trip with an op twice,
without one, without the variant's hook or reading K off its ring, a first step or a
last P.V with an op missing or twice -- is refused at the op, with an error located in
the `.attn` source; and what attn-overlap-gemms refuses of the cooperative KV loops it
rotates (Note [Overlapped cooperative steps in the IR] in attnc/schedule/overlap_coop.py):
their rings used after them."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
from mlir import ir
from mlir.dialects import arith

from attnc.driver import CompileOptions, compile_mlir, optimize_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops, parse_module, set_int, to_text
from attnc.ir import roles as R
from tests.passes.test_wgmma_steps import _pipeline
from tests.passes.test_wgmma_steps_errors import LOCATED, carry_one_more, refused, unrecorded_key_range

ROOT = Path(__file__).resolve().parents[2]
COOP = "producer=false"


@functools.lru_cache(maxsize=None)
def _plan_text(example: str, until: str = "attn-overlap-gemms") -> str:
    """The L5 plan of `example`'s cooperative kernel on sm_90a, up to `until`."""
    result = compile_mlir((ROOT / f"examples/{example}.attn").read_text(), f"{example}.attn",
                          CompileOptions(arch="sm_90a", pass_pipeline=_pipeline(COOP, until=until)))
    return to_text(result.module)


def plan(example: str = "mha", until: str = "attn-overlap-gemms") -> ir.Module:
    """A fresh module of the plan, to edit."""
    return parse_module(_plan_text(example, until))


def compute(module) -> ir.Operation:
    return next(r for r in R.role_ops(attention_ops(module)[0]) if R.name_of(r) == "compute")


def kv_loops(module) -> list[ir.Operation]:
    return [op for op in R.ops_in(R.role_block(compute(module)), ("scf.for",)) if "kv_blocks" in op.attributes]


def trip(loop) -> list[ir.Operation]:
    return [o.operation for o in loop.regions[0].blocks[0].operations]


def around(module) -> tuple[list[ir.Operation], list[ir.Operation]]:
    """The ops of the scf.if over the key range before the first KV loop (the first step)
    and after the last (the last P.V)."""
    loops = kv_loops(module)
    ops = [o.operation for o in loops[0].parent.regions[0].blocks[0].operations]
    at = [k for k, o in enumerate(ops) if any(o == loop for loop in loops)]
    return ops[:at[0]], ops[at[-1] + 1:]


# ---------------------------------------------------------------- the KV loops

def test_a_first_loop_not_starting_past_the_first_block_is_refused():
    """The first KV loop's lower bound is the first block plus one as it stands, not
    clamped (`arith.maxsi`) above the key range's first block: the same block here, so
    sound; the plan records no key range (`ranges`) to compare."""
    module = plan()
    unrecorded_key_range(module)
    loop = kv_loops(module)[0]
    bound = loop.operands[0].owner
    assert bound.name == "arith.maxsi"
    loop.operands[0] = bound.operands[1]
    refused(module, "the cooperative role's overlapped KV loops start past the key range's first block, in an "
                    "scf.if of the role")


def test_a_kv_loop_carrying_another_value_is_refused():
    module = plan()
    carry_one_more(kv_loops(module)[0])
    refused(module, "the cooperative role's overlapped KV loop carries m, l, O, P, the factor and the rings K and "
                    "V are read and written on")


def test_a_trip_that_does_not_land_o_is_refused():
    """The trip's rescale takes the O in flight without a wait of its own, the wait for S
    landing every group (`pending` = 0) instead: sound, no copy goes into a slot a P.V
    in flight reads."""
    module = plan()
    loop = kv_loops(module)[0]
    o_in_flight = loop.regions[0].blocks[0].arguments[1 + 2]
    waits = [op for op in trip(loop) if op.name == R.MMA_WAIT]
    land, land_s = sorted(waits, key=lambda op: list(op.operands) != [o_in_flight])
    set_int(land_s, "pending", 0)
    land.result.replace_all_uses_with(o_in_flight)
    land.erase()
    refused(module, "this KV loop has no land_o op, which a cooperative overlapped step has")


def test_a_trip_without_the_variants_score_mod_is_refused():
    """gemma2's first KV loop (of mixed blocks) without its score_mod: the kernel applies
    the hooks where attn-tile put them."""
    module = plan("gemma2")
    score_mod = next(op for op in trip(kv_loops(module)[0]) if op.name == "attn.score_mod")
    score_mod.result.replace_all_uses_with(score_mod.operands[0])
    score_mod.erase()
    refused(module, "this KV loop (of mixed key blocks) has no attn.score_mod op, and the kernel's steps of its "
                    "kind apply it")


def test_k_read_off_its_ring_is_refused():
    """The trip reads K at a stage computed from its read ring (`arith.maxsi` of it with
    itself, which the trip then advances: the same slots, so sound), not at the ring the
    loop carries: the lowering takes the slot from the ring."""
    module = plan()
    loop = kv_loops(module)[0]
    stage = loop.regions[0].blocks[0].arguments[1 + 5]          # K's read ring
    read = next(op for op in trip(loop) if op.name == R.SLOT_READ and R.attrs_of(op)["tile"] == "k")
    advance = next(op for op in trip(loop) if op.name == R.RING_ADVANCE and op.operands[0] == stage)
    with module.context, read.location, ir.InsertionPoint(read):
        same = arith.MaxSIOp(stage, stage).result
    read.operands[1] = same
    advance.operands[0] = same
    refused(module, "a cooperative trip reads K and V and writes them at the stages of their rings, carried by "
                    "the loop")


# ---------------------------------------------------------------- the first step and the last P.V

def test_a_first_step_without_the_variants_score_mod_is_refused():
    module = plan("gemma2")
    first, _ = around(module)
    score_mod = next(op for op in first if op.name == "attn.score_mod")
    score_mod.result.replace_all_uses_with(score_mod.operands[0])
    score_mod.erase()
    error = refused(module, "the first step (of mixed key blocks) has no attn.score_mod op")
    assert error.message.endswith("(Note [Cooperative steps op by op])"), error.message


def test_a_last_pv_without_its_rescale_is_refused():
    """The last P.V accumulates into the landed O, not rescaled."""
    module = plan()
    _, last = around(module)
    rescale = next(op for op in last if op.name == "attn.rescale")
    rescale.result.replace_all_uses_with(rescale.operands[0])
    rescale.erase()
    refused(module, "the cooperative role's last P.V has a rescale op, and this one has none")


@pytest.mark.parametrize("where, name, message", [
    ("trip", "attn.softmax_step", "a cooperative KV step has one softmax_step"),
    ("first", "attn.softmax_step", "the cooperative role's first step has one softmax_step"),
    ("last", "attn.rescale", "the cooperative role's last P.V has one rescale"),
])
def test_an_op_twice_is_refused(where, name, message):
    """A second copy of an op a trip, the first step or the last P.V has one of."""
    module = plan()
    first, last = around(module)
    ops = {"trip": trip(kv_loops(module)[0]), "first": first, "last": last}[where]
    op = next(op for op in ops if op.name == name)
    with module.context:
        op.clone(ir.InsertionPoint(op))
    refused(module, message)


# ---------------------------------------------------------------- attn-overlap-gemms

def test_the_rings_used_after_the_kv_loops_are_refused_by_the_rotation():
    """Before attn-overlap-gemms: K's read ring, as the last KV loop carries it out, used
    after it; the rotated loops end the rings elsewhere."""
    module = plan(until="attn-insert-pipelines")
    loop = kv_loops(module)[-1]
    ring = loop.results[3]
    with module.context, loop.location, ir.InsertionPoint(loop):
        use = arith.AddIOp(ring, ring)
    use.operation.move_after(loop)
    with pytest.raises(AttncError) as err:
        optimize_mlir(to_text(module), "plan.mlir", CompileOptions(arch="sm_90a", pass_pipeline="attn-overlap-gemms"))
    assert "attn-overlap-gemms: the ring state after the KV loops is used; the rotated loops end it elsewhere" \
        in err.value.message, err.value.message
    assert LOCATED.match(str(err.value)), str(err.value)
