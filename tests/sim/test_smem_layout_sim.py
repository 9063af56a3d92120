"""Shared-memory placements in the PTX emulator (Note [Buffers as placed] in
attnc/backend/smem_layout.py): K and V in a ring each (attn-alloc-smem{kv_layout=separate})
and the K/V ring before Q (examples/passes/kv_first.py), on sm_80 and on sm_90a's
cooperative and producer kernels. Each is another kernel (its PTX differs from the
default placement's) that runs with no race or protocol report and gives the reference's
outputs."""
from __future__ import annotations

from pathlib import Path

import pytest

from attnc.passes import registry
from attnc.passes.pipelines import format_pipeline, target_pipeline
from attnc.testing import ptx_bundle
from tests.sim.test_steps_sim import check_against_reference

ROOT = Path(__file__).resolve().parents[2]
KV_FIRST = str(ROOT / "examples" / "passes" / "kv_first.py")
PLACEMENTS = {"separate": "attn-alloc-smem{kv_layout=separate}", "kv_first": "attn-alloc-smem,kv-first"}


@pytest.fixture(autouse=True)
def without_user_passes(monkeypatch):
    monkeypatch.setattr(registry, "_user_passes", {})
    monkeypatch.setattr(registry, "_user_origins", {})


def _bundle(path: Path, arch: str, placement: str | None):
    names = format_pipeline(target_pipeline(arch)).split(",")
    if placement is not None:
        names[names.index("attn-alloc-smem")] = PLACEMENTS[placement]
    loads = (KV_FIRST,) if placement == "kv_first" else ()
    return ptx_bundle(path, arch=arch, pass_pipeline=",".join(names), load_passes=loads)


@pytest.mark.parametrize("example, arch, placement", [
    ("mha", "sm_80", "separate"),
    ("sliding_window", "sm_80", "kv_first"),
    ("softcap", "sm_90a", "separate"),          # the cooperative kernel (head dim 64)
    ("gemma2", "sm_90a", "kv_first"),           # the producer warpgroup's
    ("mha", "sm_90a", "separate"),
])
def test_a_placement_is_another_kernel_with_the_references_outputs(example, arch, placement):
    path = ROOT / "examples" / f"{example}.attn"
    bundle = _bundle(path, arch, placement)
    assert bundle.code["ptx"] != _bundle(path, arch, None).code["ptx"]
    check_against_reference(bundle, path, 200, 300)
