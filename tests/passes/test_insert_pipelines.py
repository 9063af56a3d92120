"""attn-insert-pipelines states the synchronization each target's kernel runs: on sm_90a
the producer warpgroup's (Note [Producer warpgroup] in attnc/backend/sm90a_ws.py) --
cp.async copies each producer thread reports on the tile's full mbarrier with
cp.async.mbarrier.arrive.noinc, K and V each on barriers of their own with the kernel's
names and counts, Q's empty barrier exactly where the lowering makes the CTAs persistent
-- while sm_100a keeps FlashAttention-4's TMA ring, and sm_80's cp.async schedule is its
kernel's: K and V issued ahead of their steps, waits with the kernel's group counts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlir import ir

from attnc.backend.kernel_spec import PRODUCER_THREADS, producer_barriers
from attnc.driver import CompileOptions, compile_mlir
from attnc.ir import attention_ops
from attnc.ir import roles as R
from attnc.passes.lower_kernel import SPECIALIZATION_ATTR, lowered_gpu_module

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.attn"))
L5 = "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines"

_KEPT = []        # the results whose kernels the tests hold


def plan(example: str, arch: str = "sm_90a"):
    result = compile_mlir((ROOT / f"examples/{example}.attn").read_text(), f"examples/{example}.attn",
                          CompileOptions(arch=arch, pass_pipeline=L5))
    _KEPT.append(result)
    return result, attention_ops(result.module)[0]


def barriers(kernel) -> dict[str, dict]:
    return {R.name_of(op): R.attrs_of(op) for op in R.mbarrier_ops(kernel)}


def transports(kernel) -> dict[str, str]:
    return {R.name_of(op): R.attrs_of(op)["transport"] for op in R.channel_ops(kernel)}


def test_sm90a_barriers_are_the_kernels():
    """gemma2 (two consumer warpgroups, 8 warps): Q's full barrier, then the K/V ring's
    (producer_barriers); full ones count the producer's threads, empty ones the
    consumers' warps."""
    _, kernel = plan("gemma2")
    found = barriers(kernel)
    assert list(found) == [f"mbar_{key}" for key in producer_barriers(persistent=False)]
    assert {name: a["count"] for name, a in found.items()} == {
        "mbar_q_full": PRODUCER_THREADS, "mbar_k_full": PRODUCER_THREADS, "mbar_v_full": PRODUCER_THREADS,
        "mbar_k_empty": 8, "mbar_v_empty": 8}
    assert {a["tile"] for a in found.values()} == {"q", "k", "v"}
    assert transports(kernel) == {"q": "cp.async.mbarrier", "kv": "cp.async.mbarrier"}
    producer = next(r for r in R.role_ops(kernel) if R.name_of(r) == "producer")
    assert not R.ops_in(R.role_block(producer), (R.MBARRIER_EXPECT_TX,))


def _trip(kernel, role: str) -> list[str]:
    """The synchronization and GEMMs of the role's first KV loop's body, in order."""
    block = R.role_block(next(r for r in R.role_ops(kernel) if R.name_of(r) == role))
    loop = next(op for op in block.operations if op.operation.name == "scf.for")
    steps = []
    for op in loop.regions[0].blocks[0].operations:
        op = op.operation
        if op.name in (R.MBARRIER_WAIT, R.MBARRIER_ARRIVE, R.CP_ASYNC_MBARRIER_ARRIVE):
            steps.append(f"{op.name[5:]} {R.name_of(op.operands[0].owner)}")
        elif op.name in (R.SLOT_WRITE, R.SLOT_READ):
            steps.append(f"{op.name[5:]} {R.attrs_of(op)['tile']}")
        elif op.name == "attn.mma":
            steps.append(f"mma {R.attrs_of(op)['kind']}")
    return steps


def test_sm90a_tiles_are_waited_for_before_their_gemm_and_released_after_it():
    _, kernel = plan("gemma2")
    assert _trip(kernel, "producer") == [
        "mbarrier_wait mbar_k_empty", "slot_write k", "cp_async_mbarrier_arrive mbar_k_full",
        "mbarrier_wait mbar_v_empty", "slot_write v", "cp_async_mbarrier_arrive mbar_v_full"]
    for consumer in ("consumer0", "consumer1"):
        assert _trip(kernel, consumer) == [
            "mbarrier_wait mbar_k_full", "slot_read k", "mma qk", "mbarrier_arrive mbar_k_empty",
            "mbarrier_wait mbar_v_full", "slot_read v", "mma pv", "mbarrier_arrive mbar_v_empty"]


def test_sm90a_consumers_store_their_own_o():
    """The kernel's consumer warpgroups store O and the LSE from their registers
    (sm90a_ws.py's _epilogue): no channel hands O to the producer, no named barrier."""
    _, kernel = plan("gemma2")
    assert "o" not in transports(kernel)
    for role in R.role_ops(kernel):
        stores = [R.attrs_of(op)["operand"] for op in R.ops_in(R.role_block(role), ("attn.store",))]
        assert stores == ([] if R.name_of(role) == "producer" else ["o", "lse"])
        assert not R.ops_in(R.role_block(role), (R.NAMED_BARRIER_ARRIVE, R.NAMED_BARRIER_SYNC))


@pytest.mark.parametrize("example", EXAMPLES)
def test_q_is_released_where_the_ctas_are_persistent(example):
    """Only a persistent CTA refills Q's slot (Note [Persistent CTAs] in sm90a_ws.py): the
    plan's `persistent`, its mbar_q_empty and the kernel's `persistent` (the manifest's
    specialization, as the default pipeline lowers it) agree."""
    result, kernel = plan(example)
    ws = R.warp_specialize_of(kernel)
    persistent = R.PERSISTENT in ws.attributes
    assert ("mbar_q_empty" in barriers(kernel)) is persistent
    lowered = compile_mlir((ROOT / f"examples/{example}.attn").read_text(), f"examples/{example}.attn",
                           CompileOptions(arch="sm_90a"))
    specialization = json.loads(ir.StringAttr(lowered_gpu_module(lowered.module).attributes[SPECIALIZATION_ATTR]).value)
    assert specialization["persistent"] is persistent
    assert persistent is (example == "sliding_window")


def test_a_persistent_plan_releases_q_after_the_last_qk():
    _, kernel = plan("sliding_window")
    assert barriers(kernel)["mbar_q_empty"]["count"] == 8
    for consumer in ("consumer0", "consumer1"):
        block = R.body_block(next(r for r in R.role_ops(kernel) if R.name_of(r) == consumer))
        names = [op.operation.name for op in block.operations]
        arrive = next(i for i, op in enumerate(block.operations) if op.operation.name == R.MBARRIER_ARRIVE)
        assert R.name_of(list(block.operations)[arrive].operands[0].owner) == "mbar_q_empty"
        assert "scf.for" not in names[arrive:] and "attn.finalize" in names[arrive:]
    producer = next(r for r in R.role_ops(kernel) if R.name_of(r) == "producer")
    first_wait = R.ops_in(R.body_block(producer), (R.MBARRIER_WAIT,))[0]
    assert R.name_of(first_wait.operands[0].owner) == "mbar_q_empty"


@pytest.mark.parametrize("arch, kv, kv_barriers", [
    ("sm_100a", "tma", {"mbar_kv_full": 1, "mbar_kv_empty": 1}),   # FlashAttention-4's: arrive.expect_tx, commit
    ("sm_80", "cp.async", {}),                                      # commit groups, no mbarrier
])
def test_the_other_targets_keep_their_protocols(arch, kv, kv_barriers):
    _, kernel = plan("gemma2", arch)
    assert transports(kernel)["kv"] == kv
    assert {name: a["count"] for name, a in barriers(kernel).items() if a["channel"] == "kv"} == kv_barriers


def _sm80_steps(kernel) -> tuple[list[str], list[str]]:
    """The compute role's cp.async schedule: before its first KV loop, and one trip of it."""
    def steps(block) -> list[str]:
        out = []
        for op in block.operations:
            op = op.operation
            a = R.attrs_of(op)
            if op.name == R.SLOT_WRITE:
                out.append(f"put {a['tile']}")
            elif op.name == R.SLOT_READ:
                out.append(f"get {a['tile']}")
            elif op.name == R.CP_ASYNC_WAIT:
                out.append(f"wait {a['pending']}")
            elif op.name == R.CTA_BARRIER:
                out.append("bar")
            elif op.name == "attn.load" and "ahead" in a:
                out.append(f"{a['operand']} +{a['ahead']}")
            elif op.name in ("attn.mma", "attn.softmax_step", "attn.rescale"):
                out.append(a.get("kind", op.name[5:]))
            elif op.name == "scf.for":
                break
        return out

    block = R.role_block(R.role_ops(kernel)[0])
    loop = next(op.operation for op in block.operations if op.operation.name == "scf.for")
    return steps(block), steps(loop.regions[0].blocks[0])


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_sm80_states_the_kernels_prefetch(stages):
    """sm80.py's `_step` and forward_loads.py's `_prologue`: Q, then K(0), V(0), ..., K(S-1)
    before the steps; a step waits until the 2S - 2 groups of the steps ahead are in
    flight, reads K and Q, puts V(t + S - 1), and after the softmax (one slot: before it)
    waits again, reads V and puts K(t + S) (Note [Where V is waited for])."""
    result = compile_mlir((ROOT / "examples/mha.attn").read_text(), "examples/mha.attn", CompileOptions(
        arch="sm_80", pass_pipeline=L5.replace("attn-tile", f"attn-tile{{stages={stages}}}")))
    _KEPT.append(result)
    prologue, trip = _sm80_steps(attention_ops(result.module)[0])
    ahead = ["put q"] + [x for i in range(stages) for x in (f"k +{i}", "put k", f"v +{i}", "put v")][:-2]
    assert [x for x in prologue if x.startswith(("put", "k", "v"))] == ahead
    assert "wait" not in " ".join(prologue)
    pending = f"wait {2 * stages - 2}"
    v_step = [pending, "bar", "get v", f"k +{stages}", "put k"]
    assert trip == ([pending, "bar", "get k", "get q", f"v +{stages - 1}", "put v", "qk"]
                    + (v_step + ["softmax_step"] if stages == 1 else ["softmax_step"] + v_step)
                    + ["rescale", "pv"])
