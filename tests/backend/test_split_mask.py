"""Note [Conjuncts a tile holds] (blockmap.py): which block maps record the conjuncts a
MIXED tile holds, the kernels that read them (`split_mask`), the option and its errors.
The bits' soundness over random tiles: test_blockmap_intervals.py; on a GPU, against a
brute force: test_blockmap_gpu.py; the kernels' numerics: tests/gpu (every example and
property variant with a block map), and bench/ab_bundles.py compares them bit for bit
with split_mask=false."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from attnc.backend.blockmap import blockmap_plan
from attnc.backend.hook_walks import MaskConjuncts
from attnc.backend.hooks import KernelNames
from attnc.backend.row_intervals import RowInterval
from attnc.driver import CompileOptions, compile_mlir
from attnc.errors import AttncError
from attnc.ir import MASK_MOD, attention_ops, region_block
from attnc.passes import kernel_choices
from attnc.passes.pipelines import pipeline_with_options
from attnc.testing import build_with
from tests.backend.test_blockmap import compiled, emit_i1_function, variant

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


DOCS = variant("doc[b, i] == doc[b, j] and j <= i", "param doc: i32[B, N]")


def test_the_conjuncts_of_documents():
    parts = MaskConjuncts.of(region_block(attention_ops(compiled(DOCS).module)[0], MASK_MOD))
    assert (len(parts.free), len(parts.linear), len(parts.residual)) == (0, 1, 1)
    assert [n for _, n in parts.interval] == [False]


@pytest.mark.parametrize("mask, params, holds", [
    ("doc[b, i] == doc[b, j] and j <= i", "param doc: i32[B, N]", True),
    ("not (doc[b, j] % 5 == 2) and j <= i and i > 3", "param doc: i32[B, N]", True),
    # every conjunct linear in j or free of it: the row interval is the whole mask
    ("j <= i and i - j < win[h]", "param win: i32[H]", False),
    # no linear conjunct: no row interval to split from
    ("doc[b, i] == doc[b, j]", "param doc: i32[B, N]", False),
    # floats: no interval step to prove anything with
    ("t[b, j] > 0.5 and j <= i", "param t: f32[B, N]", False),
])
def test_which_maps_record_the_conjuncts(mask, params, holds):
    assert blockmap_plan(compiled(variant(mask, params)), 128, 64).holds is holds


@functools.lru_cache(maxsize=None)
def _compiled(source: str, options: tuple):
    pipeline = pipeline_with_options("sm_80", dict(options))
    return compile_mlir(source, "v.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline))


def split_mask(source: str, **options) -> bool:
    """split_mask as attn-kernel-choices records it on sm_80 (no PTX built)."""
    result = _compiled(source, tuple(sorted(options.items())))
    return kernel_choices.read(attention_ops(result.module)[0])["split_mask"]


def test_split_mask_needs_a_map_that_records_the_conjuncts():
    held = variant("not (doc[b, j] % 5 == 2) and j <= i and i > 3", "param doc: i32[B, N]")
    assert split_mask(held) is True
    assert split_mask(held, split_mask="false") is False
    # No linear conjunct: the map (not the tile table's runs) records nothing to split by.
    nothing = variant("doc[b, i] == doc[b, j]", "param doc: i32[B, N]")
    assert split_mask(nothing, aligned_tiles="false") is False
    with pytest.raises(AttncError, match="split_mask needs a mask read from a block map whose MIXED tiles record"):
        split_mask(nothing, aligned_tiles="false", split_mask="true")


def _build(path: Path, arch: str, **options):
    return build_with(path.read_text(), path.name, arch, cubin=False, **options)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_documents_example_splits_its_mask_by_default(arch):
    path = EXAMPLES / "docs_sink.attn"
    # With the block map (Note [Ranges from the runs]: by default docs_sink has none).
    split, plain = (_build(path, arch, run_ranges="false", **o) for o in ({}, {"split_mask": "false"}))
    assert split.manifest["specialization"]["split_mask"] is True
    assert plain.manifest["specialization"]["split_mask"] is False
    # The block-map kernels are the same; the attention kernel reads the ids (the
    # residual's param loads) in two of its mask variants (residual only, both) instead
    # of one, and the map's byte of a block once per step either way.
    loads = lambda text, kind: text.count(f"ld.global.nc.{kind}")     # noqa: E731
    assert loads(split.ptx, "b32") > loads(plain.ptx, "b32")
    assert loads(split.ptx, "b8") == loads(plain.ptx, "b8")


def test_split_mask_is_refused_without_a_map():
    with pytest.raises(AttncError, match="split_mask"):
        _build(EXAMPLES / "sliding_window.attn", "sm_80", split_mask="true")


def _residual_clamps(source: str, j_below_n: bool) -> int:
    """How many indices the residual of `source`'s mask clamps, emitted with or without
    the kernel's word that 0 <= j < N (Note [Indices known in range] in hooks.py)."""
    result = compiled(source)
    op = attention_ops(result.module)[0]
    names = KernelNames(result.variant, op, result.module)
    rows = RowInterval.of(region_block(op, MASK_MOD), names, frozenset(result.variant.dims))
    text = emit_i1_function(result, [names.abi_dims.get(d, f"dim:{d}") for d in result.variant.dims],
                            lambda e, b, h, i, j: rows.residual_keep(e, b, h, i, j, j_below_n=j_below_n))
    assert text.count("arith.minsi") == text.count("arith.maxsi")
    return text.count("arith.minsi")


@pytest.mark.parametrize("mask, params, known", [
    # doc[b, j]: j on an axis of N is used as it is; b, i and b are still clamped
    ("doc[b, i] == doc[b, j] and j <= i", "param doc: i32[B, N]", 3),
    # j + 1 may be N
    ("doc[b, i] == doc[b, j + 1] and j <= i", "param doc: i32[B, N]", 4),
    # j on an axis of M: M may be smaller than N
    ("doc[b, i] == doc[b, j] and j <= i", "param doc: i32[B, M]", 4),
])
def test_a_key_index_known_below_n_is_not_clamped(mask, params, known):
    source = variant(mask, params)
    assert _residual_clamps(source, j_below_n=False) == 4
    assert _residual_clamps(source, j_below_n=True) == known
