"""sm_80's two query blocks per CTA in the PTX emulator (Notes [Two query blocks in the IR]
in attnc/schedule/walk.py and [The next block's loads in the IR] in walk_pairs.py): a CTA
runs blocks nb - 1 - c and c, the second one's first copies issued before the first one's
epilogue, and one block where they meet. Zero race or protocol reports are allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from attnc.passes.pipelines import pipeline_with
from attnc.testing import ptx_bundle
from tests.passes.test_walk_pairs import SOFTCAP64       # two blocks per CTA by default
from tests.sim.test_steps_sim import check_against_reference
from tests.sim.test_walk_sim import BOTTOM_RIGHT

ROOT = Path(__file__).resolve().parents[2]
PAIRS = pipeline_with("sm_80", {"attn-warp-specialize": {"q_blocks_per_cta": 2}})


@pytest.mark.parametrize("m, n", [(300, 300), (520, 200)])
def test_the_default_pair(m, n, tmp_path):
    """Three query blocks (the middle one alone in its CTA) and five, over ragged keys."""
    path = tmp_path / "sc64.attn"
    path.write_text(SOFTCAP64)
    bundle = ptx_bundle(path, arch="sm_80")
    assert bundle.manifest.specialization["q_blocks_per_cta"] == 2
    check_against_reference(bundle, path, m, n)


@pytest.mark.parametrize("example, stages", [("docs_sink", 2), ("sliding_window", 3), ("mha", 1)])
def test_the_pair_asked_for(example, stages):
    """A block map (and its guessed first block), a band, and one K/V stage."""
    path = ROOT / "examples" / f"{example}.attn"
    pipeline = pipeline_with("sm_80", {"attn-tile": {"stages": stages},
                                       "attn-warp-specialize": {"q_blocks_per_cta": 2}})
    check_against_reference(ptx_bundle(path, arch="sm_80", pass_pipeline=pipeline), path, 333, 333)


def test_a_block_without_keys_in_the_pair(tmp_path):
    """Causal from the bottom right with M = 260 and N = 64: the first query block keeps no
    key, so a round of its CTA has no step and its copies land unread before the next
    round's."""
    path = tmp_path / "bottom_right.attn"
    path.write_text(BOTTOM_RIGHT)
    check_against_reference(ptx_bundle(path, arch="sm_80", pass_pipeline=PAIRS), path, 260, 64)
