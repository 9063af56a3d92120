"""Each KV loop's own trip (`check_trips_by_kind` in attnc/backend/kv_steps.py): over a
key range of one segment the kernels build their partial steps at the top of the range
from the first mixed loop, those at the bottom from the last (Note [Key blocks top down]
in attnc/passes/tile_program.py), so the two may hold trips of their own -- on sm_80, on
sm_90a's consumer warpgroups and on its cooperative role; over several segments every
loop of a kind is built from one trip, and one that differs is refused at the loop."""
from __future__ import annotations

from pathlib import Path

import pytest
from mlir import ir

from attnc.backend.coop_steps import coop_steps
from attnc.backend.kv_steps import kv_steps
from attnc.backend.wgmma_steps import wgmma_steps
from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir import roles as R
from attnc.passes.pipelines import CHOICES_PASS, format_pipeline, target_pipeline
from tests.sim.test_segments_sim import SOURCE as TWO_SEGMENTS

ROOT = Path(__file__).resolve().parents[2]
# (target, attn-warp-specialize's options, the reader of the roles' KV loops)
READERS = {
    "sm_80": ("sm_80", "", lambda kernel: kv_steps(_role(kernel, "compute"), kernel)),
    "sm_90a consumers": ("sm_90a", "{producer=true}", wgmma_steps),
    "sm_90a cooperative": ("sm_90a", "{producer=false}", coop_steps),
}


def _role(kernel, name: str):
    return next(r for r in R.role_ops(kernel) if R.name_of(r) == name)


def _plan(source: str, reader: str):
    arch, options, read = READERS[reader]
    names = format_pipeline(target_pipeline(arch)).split(",")
    names = names[:names.index(CHOICES_PASS) + 1] if CHOICES_PASS in names else names
    names[names.index("attn-warp-specialize")] += options
    result = compile_mlir(source, "variant.attn", CompileOptions(arch=arch, pass_pipeline=",".join(names)))
    return result, attention_ops(result.module)[0], read


def _softmax_in_first_mixed_loops(kernel) -> list[ir.Operation]:
    """exp2_fma = 4 on the softmax of each role's first mixed KV loop; those loops."""
    edited = []
    for role in R.role_ops(kernel):
        mixed = [op for op in R.ops_in(R.role_block(role), ("scf.for",))
                 if R.attrs_of(op).get("kv_blocks") == "mixed"
                 and R.ops_in(op.regions[0].blocks[0], ("attn.softmax_step",))]
        if mixed:
            for op in R.ops_in(mixed[0].regions[0].blocks[0], ("attn.softmax_step",)):
                op.attributes["exp2_fma"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 4)
            edited.append(mixed[0])
    return edited


@pytest.mark.parametrize("reader", list(READERS))
def test_the_top_and_bottom_mixed_loops_hold_their_own_trips(reader):
    """sliding_window, one segment, its loops apart (Note [Key loops] in sm80.py): the
    first mixed loop's choice shows in the kernel's top partial steps only."""
    result, kernel, read = _plan((ROOT / "examples/sliding_window.attn").read_text(), reader)
    with kernel.context:
        kernel.attributes["kv_loops"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 3)
        assert _softmax_in_first_mixed_loops(kernel)
    steps = read(kernel)

    def exp2_fma(top: bool) -> int:
        return next(op for op in steps.body("partial", top) if op.name == "softmax_step").choice("exp2_fma")
    assert (exp2_fma(True), exp2_fma(False)) == (4, 0)


@pytest.mark.parametrize("reader", list(READERS))
def test_loops_of_one_kind_over_several_segments_hold_one_trip(reader):
    """A prefix and a window, two segments: the kernel's partial steps run over the
    blocks of several mixed loops, built from one trip, so one loop edited alone is refused."""
    result, kernel, read = _plan(TWO_SEGMENTS, reader)
    with kernel.context:
        _softmax_in_first_mixed_loops(kernel)
    with pytest.raises(AttncError, match=r"over a key range of several segments the KV loops of one kind \(mixed\) "
                                         r"have the same trip"):
        read(kernel)
