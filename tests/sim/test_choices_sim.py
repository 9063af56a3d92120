"""Kernels whose KV loops hold different choices of their own (Note [Choices op by op] in
attnc/passes/kernel_choices.py), run in the PTX emulator against attnc.reference:
examples/passes/exp2_fma_unmasked.py puts half the exponentials of the loops without a
mask on the FMA pipe and leaves the masked loops' on the SFU, on sm_80, sm_90a and
sm_100a (one of the two choices its lowering takes: Note [Choices on sm_100a]). At
M = N = 300 the last query block has key blocks below its diagonal, so both kinds of loop
run. Zero race or protocol reports are allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from attnc.passes.pipelines import CHOICES_PASS, pipeline_with_options
from attnc.testing import ptx_bundle
from tests.sim.test_steps_sim import _ptx, check_against_reference

ROOT = Path(__file__).resolve().parents[2]
PASS_FILE = str(ROOT / "examples" / "passes" / "exp2_fma_unmasked.py")


def _pipeline(arch: str, edited: bool) -> str:
    """The target's pipeline, with the pass after attn-kernel-choices; on sm_80 and sm_90a
    with the KV loops apart, as the pass asks for them (Note [Key loops] in sm80.py)."""
    names = pipeline_with_options(arch, {"kv_loops": 3} if arch != "sm_100a" else {}).split(",")
    if edited:
        at = next(k for k, name in enumerate(names) if name.startswith(CHOICES_PASS))
        names.insert(at + 1, "exp2-fma-unmasked{k=4}")
    return ",".join(names)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_loops_with_their_own_exp2_fma_compute_the_reference(arch):
    path = ROOT / "examples" / "gemma2.attn"
    bundle = ptx_bundle(path, arch=arch, pass_pipeline=_pipeline(arch, True), load_passes=(PASS_FILE,))
    plain = ptx_bundle(path, arch=arch, pass_pipeline=_pipeline(arch, False))
    # the edit is another kernel: some exponentials moved off ex2.approx
    assert _ptx(bundle).count(b"ex2.approx") < _ptx(plain).count(b"ex2.approx")
    default = plain.manifest.specialization["exp2_fma"]
    assert bundle.manifest.specialization["exp2_fma"] == sorted({default, 4})
    check_against_reference(bundle, path, 300, 300)
