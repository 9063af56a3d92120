"""sm_80 kernels whose role was edited at L5 and built op by op (Notes [Steps op by op] and
[The role op by op] in attnc/backend/kv_steps.py and role_prologue.py), run in the PTX emulator against
attnc.reference at a small ragged shape, as tests/sim/test_examples_sim.py runs the
examples: each step's V wait above its softmax (examples/passes/wait_v_early.py) at 2
and 3 K/V stages and with two query blocks a CTA, and Q's copies issued after the key
range is read (a pass written here). Zero race or protocol reports are allowed."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import attnc
from attnc.frontend import load_file
from attnc.passes.pipelines import format_pipeline, target_pipeline
from attnc.testing import ptx_bundle
from attnc_sim.device import SimKernel, numpy_dtype
from tests.gpu.gpu_support import bind_sizes, compare, make_case

ROOT = Path(__file__).resolve().parents[2]
WAIT_V_EARLY = str(ROOT / "examples" / "passes" / "wait_v_early.py")

Q_AFTER_RANGE = '''
from dataclasses import dataclass
from typing import ClassVar

from attnc.ir import attention_ops
from attnc.ir.roles import name_of, role_block, role_ops
from attnc.passes import Pass, register


@register
@dataclass(frozen=True)
class QAfterRange(Pass):
    """Move Q's load, slot write, commit and ring advance below the key range's read."""

    name: ClassVar[str] = "q-after-range"

    def run(self, module):
        for kernel in attention_ops(module):
            role = next(r for r in role_ops(kernel) if name_of(r) == "compute")
            ops = [op.operation for op in role_block(role).operations]
            first = next(i for i, op in enumerate(ops)
                         if op.name == "attn.load" and str(op.attributes["operand"]) == '"q"')
            kv_range = next(op for op in ops if op.name == "attn.kv_range")
            for op in reversed(ops[first:first + 4]):
                op.move_after(kv_range)
'''


def _ptx(bundle) -> bytes:
    return bundle.code["ptx"]


def _pipeline(user_pass: str | None, stages: int | None) -> str:
    """sm_80's pipeline with `user_pass` (if any) right after attn-insert-pipelines (L5)."""
    names = format_pipeline(target_pipeline("sm_80")).split(",")
    if stages is not None:
        names[0] = f"attn-tile{{stages={stages}}}"
    if user_pass:
        names.insert(names.index("attn-insert-pipelines") + 1, user_pass)
    return ",".join(names)


@pytest.mark.parametrize("example, user_pass, stages", [
    ("gemma2", "wait-v-early", None),
    ("gemma2", "wait-v-early", 3),
    ("alibi", "wait-v-early", None),
    ("docs_sink", "wait-v-early", None),
    ("gemma2", "q-after-range", None),
])
def test_an_edited_role_computes_the_reference(tmp_path, example, user_pass, stages):
    pass_file = WAIT_V_EARLY
    if user_pass == "q-after-range":
        pass_file = str(tmp_path / "q_after_range.py")
        Path(pass_file).write_text(Q_AFTER_RANGE)
    path = ROOT / "examples" / f"{example}.attn"
    bundle = ptx_bundle(path, arch="sm_80", pass_pipeline=_pipeline(user_pass, stages),
                        load_passes=(pass_file,))
    plain = ptx_bundle(path, arch="sm_80", pass_pipeline=_pipeline(None, stages))
    assert _ptx(bundle) != _ptx(plain)          # the edit is another kernel
    check_against_reference(bundle, path, *((45, 70) if example == "docs_sink" else (70, 45)))


def test_wait_v_early_edits_both_query_blocks_of_a_cta():
    """With two query blocks a CTA (q_blocks_per_cta=2) the KV loops stand in the walk over
    them (Note [Two query blocks in the IR]), where examples/passes/wait_v_early.py finds them."""
    path = ROOT / "examples" / "mha.attn"
    two = lambda user_pass: _pipeline(user_pass, None).replace(  # noqa: E731
        "attn-warp-specialize", "attn-warp-specialize{q_blocks_per_cta=2}")
    bundle = ptx_bundle(path, arch="sm_80", pass_pipeline=two("wait-v-early"), load_passes=(WAIT_V_EARLY,))
    assert _ptx(bundle) != _ptx(ptx_bundle(path, arch="sm_80", pass_pipeline=two(None)))
    check_against_reference(bundle, path, 300, 150)


def check_against_reference(bundle, path: Path, m: int, n: int, device=None) -> None:
    """`bundle`, of the example at `path`, in the emulator (`device`, by default an H200's
    SMs) at (B, H, HKV) = (1, 2, 1), M = m, N = n: no race or protocol report, and the
    reference's outputs."""
    variant = load_file(str(path))
    rng = np.random.default_rng(7)
    sizes = bind_sizes(variant, batch=1, heads=2, heads_kv=1, m=m, n=n, rng=rng)
    case = make_case(variant, sizes, {}, rng)
    inputs = {name: (value.astype(numpy_dtype(bundle.manifest.tensor(name).dtype))
                     if isinstance(value, np.ndarray) else value) for name, value in case.items()}
    kernel = SimKernel(bundle, device=device, seed=1)
    out = kernel(**inputs)
    assert kernel.last_reports == []
    ref = attnc.reference(variant, **case)
    assert compare(variant, out, ref) == []
