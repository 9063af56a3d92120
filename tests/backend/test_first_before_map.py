"""Note [First block before the map] (forward_loads.py): a block map's kernel on sm_80 issues
the first key block's K and V (the top of the static mask analysis' hull) right after Q,
before the map's row is read, and loads them again only where the map's range starts at
another block -- as attn-insert-pipelines writes it into the IR (Note [The guessed first
block in the IR] in attnc/schedule/first_guess.py). The numerics run on a GPU: every example
and property variant with a block map takes it (tests/gpu), and a kernel that skips the
reload fails 38 of the property test's 158 block-map cases."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir import roles as R
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import build_with, variant_source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DOCS_SINK = (EXAMPLES / "docs_sink.attn").read_text()
COPY = "cp.async.cg.shared.global"
MAP_READ = "ld.global.nc.b8"         # the block map's bytes (the row scan reads them first)


def docs_sink(arch: str = "sm_80", **options):
    """The docs_sink example's artifacts (d = 64) with attn-lower options; with its block
    map unless `run_ranges` says otherwise (Note [Ranges from the runs])."""
    options.setdefault("run_ranges", "false")
    return build_with(DOCS_SINK, "docs_sink.attn", arch, cubin=False, **options)


@functools.lru_cache(maxsize=None)
def _compiled(source: str, arch: str, options: tuple):
    pipeline = pipeline_with_options(arch, dict(options))
    return compile_mlir(source, "v.attn", CompileOptions(arch=arch, pass_pipeline=pipeline))


def early_first(source: str, arch: str = "sm_80", **options) -> bool:
    """Whether the plan guesses its first block (attn.first_block_guess; no PTX built)."""
    op = attention_ops(_compiled(source, arch, tuple(sorted(options.items()))).module)[0]
    return bool(R.ops_in(op.regions[0].blocks[0], (R.FIRST_BLOCK_GUESS,)))


def test_on_by_default_for_a_block_map_on_sm_80():
    """The map's first block is guessed from the static hull (the grid's query blocks) or
    from a table tile's diagonal (with its map, or with the runs)."""
    assert early_first(DOCS_SINK, aligned_tiles="false") is True
    assert early_first(DOCS_SINK, run_ranges="false") is True
    assert early_first(DOCS_SINK) is True
    assert early_first(variant_source("v", 64)) is False         # no map: the range is at hand
    assert early_first(variant_source("v", 64, mask="j <= i and i - j < 1024")) is False
    assert early_first(DOCS_SINK, aligned_tiles="false", early_first="false") is False
    assert early_first(DOCS_SINK, "sm_90a", aligned_tiles="false") is False


@pytest.mark.parametrize("mask", ["j <= i", "j <= i and i - j < 1024"])
def test_the_option_needs_a_block_map(mask):
    """Causal (a built-in mask) and a window (the mask analysis' static range): no map."""
    with pytest.raises(AttncError, match="early_first=true needs a role that reads its key range from a block map"):
        early_first(variant_source("v", 64, mask=mask), early_first="true")


def _kernel(text: str) -> str:
    """The attention kernel's PTX (the bundle's PTX holds the block map's kernel too)."""
    start = text.index(".entry attnc_docs_sink_fwd(")
    end = text.find(".entry", start + 1)
    return text[start:end if end >= 0 else len(text)]


def copies_per_thread(spec: dict) -> tuple[int, int]:
    """16-byte copies a thread issues for the Q tile and for one K (or V) tile."""
    threads = 32 * spec["num_warps"]
    return (spec["block_m"] * spec["head_dim_qk"] * 2 // 16 // threads,
            spec["block_n"] * spec["head_dim_qk"] * 2 // 16 // threads)


def test_the_first_k_and_v_are_in_flight_while_the_map_row_is_read():
    """docs_sink at d = 64, 64x64 tiles, 4 warps: Q, K and V are 64 rows x 128 bytes, 4
    copies of 16 bytes a thread each. Without the option only Q (one group) is issued
    before the map is read."""
    on, off = docs_sink(), docs_sink(early_first="false")
    assert on.manifest["specialization"]["early_first"] is True
    assert off.manifest["specialization"]["early_first"] is False
    before_on, before_off = (k[:k.index(MAP_READ)] for k in (_kernel(on.ptx), _kernel(off.ptx)))
    q, kv = copies_per_thread(on.manifest["specialization"])
    assert before_on.count(COPY) == q + 2 * kv      # (their commits: LLVM may duplicate them per path)
    assert before_off.count(COPY) == q and before_off.count("cp.async.commit_group") == 1


def test_the_table_tiles_diagonal_is_in_flight_while_the_runs_are_scanned():
    """Ranges from the runs (no map): the range is the warp's scan of the blocks' classes,
    reduced by redux.sync; the diagonal's K and V (the guess of a table tile) go before it."""
    on, off = docs_sink(run_ranges="true"), docs_sink(run_ranges="true", early_first="false")
    assert on.manifest["specialization"]["early_first"] is True
    assert on.manifest["specialization"]["run_ranges"] is True
    assert off.manifest["specialization"]["early_first"] is False
    before_on, before_off = (k[:k.index("redux.sync")] for k in (_kernel(on.ptx), _kernel(off.ptx)))
    q, kv = copies_per_thread(on.manifest["specialization"])
    assert MAP_READ not in _kernel(on.ptx)
    assert before_on.count(COPY) == q + 2 * kv
    assert before_off.count(COPY) == q


def test_a_range_that_starts_elsewhere_waits_for_every_copy_then_reloads():
    """The reload: after the row scan's reductions, cp.async.wait_group 0 and the two
    tiles' copies again, so the prologue (up to the first step's barrier) holds one K
    and one V tile's copies more than without the option, which has no wait there."""
    def prologue(text: str) -> str:
        kernel = _kernel(text)
        return kernel[:kernel.index("bar.sync")]

    built = docs_sink()
    on, off = prologue(built.ptx), prologue(docs_sink(early_first="false").ptx)
    scan = on.index("redux.sync.add.s32")
    assert re.search(r"cp\.async\.wait_group\s+0;", on[scan:])
    assert not re.search(r"cp\.async\.wait_group\s+0;", off)
    _, kv = copies_per_thread(built.manifest["specialization"])
    assert on.count(COPY) == off.count(COPY) + 2 * kv     # K and V once more


def test_sm_90a_takes_it_as_an_option_off_by_default():
    """sm_90a's cooperative role (docs_sink at d = 64, no producer warpgroup) guesses its
    first block where asked, as sm_80's does; its default is off (measured slower: results/sm90a_h200.md)."""
    off, on = docs_sink("sm_90a"), docs_sink("sm_90a", early_first="true")
    assert off.manifest["specialization"]["early_first"] is False
    assert on.manifest["specialization"]["early_first"] is True
    before_on, before_off = (k[:k.index(MAP_READ)] for k in (_kernel(on.ptx), _kernel(off.ptx)))
    _, kv = copies_per_thread(on.manifest["specialization"])
    assert before_on.count(COPY) == before_off.count(COPY) + 2 * kv


def test_a_producer_warpgroup_refuses_it():
    with pytest.raises(AttncError, match="early_first=true: the guessed first block is a cooperative role's"):
        docs_sink("sm_90a", block_m=128, producer=1, aligned_tiles="false", early_first="true")
