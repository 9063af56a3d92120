"""sm_90a's cooperative trips lowered op by op (Note [Cooperative steps op by op] in
attnc/backend/coop_steps.py): the IR's trips are the default ones the kernel was built
with; an edited trip is another kernel (examples/passes/loads_after_gemms.py); and what
the lowering refuses, at the op."""
from pathlib import Path

import pytest
from mlir import ir

from attnc.backend.coop_steps import CoopSteps, coop_steps
from attnc.backend.kv_steps import KvSteps, StepOp
from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops, set_int, to_text
from attnc.ir import roles as R
from tests.passes.test_wgmma_steps import ptx_of

ROOT = Path(__file__).resolve().parents[2]
LOADS_AFTER_GEMMS = str(ROOT / "examples" / "passes" / "loads_after_gemms.py")
_KEPT: list = []


def plan(example: str = "mha", tile: str = "", passes: tuple = ()):
    names = ["attn-tile" + (f"{{{tile}}}" if tile else ""), "attn-analyze-masks", "attn-hoist",
             "attn-warp-specialize{producer=false}", "attn-alloc-smem", "attn-alloc-tmem", "attn-insert-pipelines",
             "attn-overlap-gemms", *([Path(p).stem.replace("_", "-") for p in passes])]
    result = compile_mlir((ROOT / f"examples/{example}.attn").read_text(), f"{example}.attn",
                          CompileOptions(arch="sm_90a", pass_pipeline=",".join(names), load_passes=passes))
    _KEPT.append(result)
    return result


def kernel_of(result):
    return attention_ops(result.module)[0]


def loops_of(result) -> list[ir.Operation]:
    role = next(r for r in R.role_ops(kernel_of(result)) if R.name_of(r) == "compute")
    return [op for op in R.ops_in(R.role_block(role), ("scf.for",)) if "kv_blocks" in op.attributes]


def body_ops(loop) -> list[ir.Operation]:
    return [o.operation for o in loop.regions[0].blocks[0].operations]


def default_trips(stages: int) -> CoopSteps:
    """What attn-overlap-gemms writes, with a score_mod and a mask."""
    def load(tile: str, ahead: int) -> tuple[StepOp, ...]:
        return StepOp("load", tile, ahead), StepOp("slot_write", tile), StepOp("cp_async_commit")
    ops = (StepOp("land_o"), StepOp("rescale"), StepOp("cp_async_wait", count=2 * stages - 4),
           StepOp("cta_barrier"), *load("v", stages - 2), *load("k", stages - 1), StepOp("read", "k"),
           StepOp("read", "q"), StepOp("read", "v"), StepOp("mma", "qk"), StepOp("mma", "pv"),
           StepOp("land_s", count=1), StepOp("score_mod"), StepOp("mask"), StepOp("softmax_step"))
    first = (StepOp("cp_async_wait", count=2 * stages - 2), StepOp("cta_barrier"), StepOp("read", "k"),
             StepOp("read", "q"), StepOp("mma", "qk"), StepOp("land_s"), StepOp("score_mod"), StepOp("mask"),
             StepOp("softmax_step"))
    last = (StepOp("land_o"), StepOp("rescale"), StepOp("cp_async_wait"), StepOp("cta_barrier"),
            StepOp("read", "v"), StepOp("mma", "pv"), StepOp("land_pv"))
    return CoopSteps((("all", ops),), first, last, KvSteps.default(stages).prologue)


@pytest.mark.parametrize("example,tile", [("mha", "stages=2"), ("mha", "stages=3"), ("gemma2", "stages=4 block_n=64"),
                                          ("sliding_window", ""), ("docs_sink", "")])
def test_the_plans_trips_are_the_default(example, tile):
    result = plan(example, tile)
    op = kernel_of(result)
    stages = int(next(R.attrs_of(c)["stages"] for c in R.channel_ops(op) if R.name_of(c) == "kv"))
    hooks = ("score_mod", "mask", "block_map_read")
    default = [o for o in default_trips(stages).loops[0][1] if o.name not in hooks]
    steps, plain = coop_steps(op), default_trips(stages)
    for _, ops in steps.loops:
        assert [o for o in ops if o.name not in hooks] == default
    assert [o for o in steps.first if o.name not in hooks] == [o for o in plain.first if o.name not in hooks]
    assert steps.last == plain.last


def around(result) -> tuple[list, list]:
    """The ops of the scf.if over the key range before its first KV loop and after its last."""
    loops = loops_of(result)
    ops = [o.operation for o in loops[0].parent.regions[0].blocks[0].operations]
    at = [k for k, o in enumerate(ops) if any(o == loop for loop in loops)]
    return ops[:at[0]], ops[at[-1] + 1:]


def test_the_last_pv_waiting_for_every_copy_first_is_another_sound_kernel():
    """The last P.V's wait for every cp.async group (and the CTA barrier) moved above the
    landing of the P.V in flight: built as it stands."""
    result = plan()
    _, after = around(result)
    land = next(o for o in after if o.name == R.MMA_WAIT)
    for name in (R.CP_ASYNC_WAIT, R.CTA_BARRIER):
        next(o for o in after if o.name == name).move_before(land)
    last = coop_steps(kernel_of(result)).last
    assert [o.name for o in last[:3]] == ["cp_async_wait", "cta_barrier", "land_o"]
    assert ptx_of(to_text(result.module)) != ptx_of(to_text(plan().module))


def test_loads_after_gemms_is_another_sound_kernel():
    edited = plan(passes=(LOADS_AFTER_GEMMS,))
    names = [o.name for o in coop_steps(kernel_of(edited)).loops[0][1]]
    assert names.index("load") > names.index("mma")
    assert ptx_of(to_text(edited.module)) != ptx_of(to_text(plan().module))


def _ahead(result):
    load = next(o for o in body_ops(loops_of(result)[0]) if o.name == "attn.load")
    set_int(load, "ahead", 3)


def _no_pattern(result):
    role = next(r for r in R.role_ops(kernel_of(result)) if R.name_of(r) == "compute")
    fill = R.ops_in(R.role_block(role), ("attn.fill",))[0]
    fill.clone(ir.InsertionPoint(body_ops(loops_of(result)[0])[0]))


def _flow(result):
    loop = loops_of(result)[0]
    pv = next(o for o in body_ops(loop) if o.name == "attn.mma" and "pv" in str(o.attributes["kind"]))
    pv.operands[2] = loop.regions[0].blocks[0].arguments[3]


def _not_async(result):
    qk = next(o for o in body_ops(loops_of(result)[0]) if o.name == "attn.mma")
    del qk.attributes["async"]


def _loops_differ(result):
    """K's copies before V's in the last mixed loop only (sound: each goes into a slot
    landed before)."""
    loops = [loop for loop in loops_of(result) if "mixed" in str(loop.attributes["kv_blocks"])]
    ops = body_ops(loops[-1])
    v_load = next(o for o in ops if o.name == "attn.load")
    k_load = next(o for o in ops if o.name == "attn.load" and o != v_load)
    for o in ops[ops.index(k_load):ops.index(k_load) + 4]:      # K's load, slot write, commit, ring advance
        o.move_before(v_load)


def _ring(result):
    loop = loops_of(result)[0]
    args = list(loop.regions[0].blocks[0].arguments)
    read = next(o for o in body_ops(loop) if o.name == R.SLOT_READ and "k" == str(R.attrs_of(o)["tile"]))
    read.operands[1] = args[1 + 9]          # K's write ring, not its read ring


def _first_no_pattern(result):
    before, _ = around(result)
    role = next(r for r in R.role_ops(kernel_of(result)) if R.name_of(r) == "compute")
    R.ops_in(R.role_block(role), ("attn.fill",))[0].clone(ir.InsertionPoint(before[-1]))


def _first_flow(result):
    before, _ = around(result)
    softmax = next(o for o in before if o.name == "attn.softmax_step")
    softmax.operands[1], softmax.operands[2] = softmax.operands[2], softmax.operands[1]


def _last_flow(result):
    _, after = around(result)
    pv = next(o for o in after if o.name == "attn.mma")
    pv.operands[2] = next(o for o in after if o.name == R.MMA_WAIT).result      # O not rescaled


@pytest.mark.parametrize("edit,example,message", [
    (_first_no_pattern, "mha", "has no pattern for attn.fill in the cooperative role's first step"),
    (_first_flow, "mha", "the data flow of the cooperative role's first step"),
    (_last_flow, "mha", "the data flow of the cooperative role's last P.V"),
    (_ahead, "mha", "a cooperative trip loads V 1 and K 2 blocks past its own (`ahead`)"),
    (_no_pattern, "mha", "has no pattern for attn.fill in a cooperative overlapped KV step"),
    (_flow, "mha", "data flow as attn-overlap-gemms makes it, and this attn.mma differs"),
    (_not_async, "mha", "GEMMs are QK^T and P.V, async"),
    (_ring, "mha", "attn-verify-pipeline: compute reads fill 1 of 'kv' (k) from slot 0"),    # unsound first
])
def test_an_edit_the_lowering_does_not_build_is_refused_at_its_op(edit, example, message):
    result = plan(example)
    with kernel_of(result).context:
        edit(result)
    with pytest.raises(AttncError) as err:
        ptx_of(to_text(result.module))
    assert message in err.value.message
    assert err.value.span is not None


def test_the_bottom_mixed_loop_is_built_from_its_own_trip():
    """sliding_window's range is one segment: its last mixed loop (the blocks at the
    bottom, walked last) with K's copies before V's is built as it stands, the top one
    as it was (Note [Key blocks top down] in attnc/passes/tile_program.py)."""
    result = plan("sliding_window")
    with kernel_of(result).context:
        _loops_differ(result)
    steps = coop_steps(kernel_of(result))
    assert steps.body("partial", False) != steps.body("partial", True)
    assert ptx_of(to_text(result.module)) != ptx_of(to_text(plan("sliding_window").module))


def test_the_prologue_is_built_as_it_stands():
    """The loads before the key range are built op by op as sm_80's (Note [The role op by
    op]): V0's copy moved after K1's is another kernel (the digests leave them out), and a
    load of another block is refused at it."""
    result = plan(tile="stages=2")
    role = next(r for r in R.role_ops(kernel_of(result)) if R.name_of(r) == "compute")
    ops = [o.operation for o in R.role_block(role).operations]
    loads = [o for o in ops if o.name == "attn.load" and str(R.attrs_of(o)["operand"]) in ("k", "v")]
    v0, k1 = loads[1], loads[2]
    assert [str(R.attrs_of(o)["operand"]) for o in (v0, k1)] == ["v", "k"]
    group = ops[ops.index(v0):ops.index(k1)]                 # V0's load, slot write, commit, ring advance
    end = ops[ops.index(k1) + len(group) - 1]
    for o in reversed(group):
        o.move_after(end)
    steps = coop_steps(kernel_of(result)).prologue
    assert [o.what for o in steps if o.name == "load"] == ["q", "k", "k", "v"]
    assert ptx_of(to_text(result.module)) != ptx_of(to_text(plan(tile="stages=2").module))
    with kernel_of(result).context:
        k1.operands[3] = k1.operands[1]                         # the block of another index
    with pytest.raises(AttncError) as err:
        ptx_of(to_text(result.module))
    assert "before the KV loops the role loads K of the first steps in turn" in err.value.message
