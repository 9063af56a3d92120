"""Notes [The block map's program] and [The tile table's program] (attnc/passes/mask_kernels.py):
the kernels that fill a block map and a tile table are built from their programs in the
IR -- the map's options change its kernel and the emulator runs each against the
reference -- and the lowering refuses, at the op, a hand edit of a program it cannot
build. (The pass itself: mask_kernels.mlir.)"""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from mlir import ir

import attnc
from attnc.driver import CompileOptions, compile_mlir, optimize_mlir
from attnc.errors import AttncError
from attnc.frontend import load
from attnc.passes.lower_kernel import KERNELS_ATTR, lowered_gpu_module
from attnc.passes.pipelines import pipeline_with
from attnc.testing import ptx_bundle, variant_source

ROOT_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# A window of win[h] keys below the diagonal: a block map, and tiles of all three classes.
WINDOW = variant_source("win", 64, "j <= i and i - j < win[h]", dtype="f16", params=("win: i32[H]",))
# documents + causal with the map kept (no ranges from the runs): the map of a tile table
DOCS = variant_source("docs", 64, "doc[b, i] == doc[b, j] and j <= i", dtype="f16", params=("doc: i32[B, N]",))
FLOATS = variant_source("fl", 64, "t[b, j] > 0.5 or i == j", dtype="f16", params=("t: f32[B, N]",))
_KEPT = []


def _compiled(source: str, options: dict | None = None, upto: str | None = None, drop: str | None = None):
    pipeline = pipeline_with("sm_80", options or {})
    if upto is not None:        # through that pass and its options
        end = pipeline.find(",", pipeline.index(upto))
        pipeline = pipeline[:end] if end >= 0 else pipeline
    if drop is not None:
        pipeline = pipeline.replace(drop + ",", "")
    result = compile_mlir(source, "v.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline))
    _KEPT.append(result)
    return result


def _kernels(result) -> tuple[dict, str]:
    """(the manifest's map kernel entry, the map kernel's lowered code)."""
    module = lowered_gpu_module(result.module)
    entry = next(k for k in json.loads(ir.StringAttr(module.attributes[KERNELS_ATTR]).value)
                 if k["name"] == "blockmap")
    func = next(op for op in module.regions[0].blocks[0].operations
                if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == entry["symbol"])
    return entry, str(func)


@pytest.mark.parametrize("options, grid", [
    ({"groups": 2}, [["cdiv", "N", 128 * 4 * 2]]),
    ({"samples": False}, [["cdiv", "N", 128 * 4 * 4]]),
    ({"intervals": False}, [["cdiv", "N", 128 * 4 * 4]]),
])
def test_each_option_changes_the_map_kernel(options, grid):
    default_entry, default_code = _kernels(_compiled(WINDOW))
    entry, code = _kernels(_compiled(WINDOW, {"attn-mask-kernels": options}))
    assert default_entry["grid"][0] == [["cdiv", "N", 128 * 4 * 4]]
    assert entry["grid"][0] == grid and code != default_code
    if "samples" in options:        # the two votes on the sampled elements go
        assert default_code.count("nvvm.vote.sync") == code.count("nvvm.vote.sync") + 2


def test_the_emulator_runs_each_map_against_the_reference():
    """The window's map under the options (one group a CTA and no samples; no intervals)
    gives the same outputs, bit for bit, as the default's, and they match the reference."""
    from attnc_sim.device import SimKernel
    from tests.gpu.gpu_support import compare
    from tests.sim.test_examples_sim import typed_inputs

    variant = load(WINDOW, "win.attn")
    rng = np.random.default_rng(5)
    M = 150         # = N
    case = {name: rng.standard_normal((1, 2, M, 64)).astype(np.float32) for name in ("q", "k", "v")}
    case["win"] = np.array([40, 100], np.int32)
    ref = attnc.reference(variant, **case)
    outs = []
    for options in ({}, {"groups": 1, "samples": False}, {"intervals": False}):
        bundle = ptx_bundle(WINDOW, "sm_80", pass_pipeline=pipeline_with("sm_80", {"attn-mask-kernels": options}))
        kernel = SimKernel(bundle, seed=2)
        out = kernel(**typed_inputs(bundle, case))
        assert kernel.last_reports == []
        assert compare(variant, out, ref) == []
        outs.append(out["o"])
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


# ------------------------------------------------------------------ the lowering's checks

def _dump(source: str, options: dict | None = None) -> list[str]:
    """The IR after attn-kernel-choices, as lines without locations (an edited dump's
    errors then point at its own lines)."""
    module = _compiled(source, options, upto="attn-kernel-choices").module
    return module.operation.get_asm(enable_debug_info=False).split("\n")


def _refusal(lines: list[str]) -> str:
    with pytest.raises(AttncError) as info:
        optimize_mlir("\n".join(lines), "m.mlir", CompileOptions(arch="sm_80", pass_pipeline="attn-lower-sm80"))
    return info.value.render()


def _line(lines: list[str], needle: str) -> int:
    return next(k for k, line in enumerate(lines) if needle in line)


def test_the_unedited_dump_lowers():
    optimize_mlir("\n".join(_dump(WINDOW)), "m.mlir", CompileOptions(arch="sm_80", pass_pipeline="attn-lower-sm80"))


_CLASSIFY = re.compile(r'"attn.classify"\((%\w+), (%\w+), (%\w+), (%\w+)\)')
_STORE = re.compile(r'"attn.map_store"\((%\w+), ')


@pytest.mark.parametrize("source, needle, pattern, replace, message", [
    (WINDOW, "{groups = 4", re.compile("groups = 4"), "groups = 0",         # at the op's first line
     "groups = 0: each CTA of the map kernel takes at least one group"),
    (WINDOW, '"attn.classify"', _CLASSIFY, r'"attn.classify"(\1, \2, \4, \3)',        # m_block and n_block swapped
     "attn.classify classifies the loop's key block of the program's (b, h, m_block)"),
    (WINDOW, '"attn.map_store"', _STORE, r'"attn.map_store"(%c0_i32, ',
     "attn.map_store stores the attn.classify byte"),
    (DOCS, '"attn.table_runs"', re.compile(r'"attn.table_runs"\((%\w+), (%\w+), '), r'"attn.table_runs"(\2, \1, ',
     "attn.table_runs takes the program's (b, h) and the count attn.id_runs gives"),
    (DOCS, '"attn.table_rest"', re.compile(r'"attn.table_rest"\((%\w+), (%\w+), (%\w+)\)'),
     r'"attn.table_rest"(\1, \2, \1)', "attn.table_rest takes the program's (b, h) and the count"),
])
def test_an_edit_of_a_program_is_refused_at_its_op(source, needle, pattern, replace, message):
    lines = _dump(source)
    k = _line(lines, needle)
    edited = list(lines)
    edited[k], count = pattern.subn(replace, edited[k])
    assert count == 1
    rendered = _refusal(edited)
    at = _line(lines, '"attn.map_kernel"') if needle.startswith("{groups") else k
    assert f"m.mlir:{at + 1}:" in rendered and message in rendered, rendered


def test_a_loop_over_other_blocks_is_refused():
    lines = _dump(WINDOW)
    k = _line(lines, '"attn.classify"') - 1         # the loop's line
    assert "scf.for" in lines[k]
    edited = list(lines)
    edited[k] = re.sub(r"to %\w+ step", "to %c1_i32 step", edited[k])
    rendered = _refusal(edited)
    assert f"m.mlir:{k + 1}:" in rendered and "runs over every key block of the tile" in rendered, rendered


def test_a_block_without_its_store_is_refused():
    lines = _dump(WINDOW)
    k = _line(lines, '"attn.map_store"')
    rendered = _refusal(lines[:k] + lines[k + 1:])
    assert "a key block of the map kernel is one attn.classify and one attn.map_store" in rendered, rendered


def test_a_step_the_mask_cannot_take_is_refused_at_classify():
    lines = _dump(FLOATS)
    k = _line(lines, '"attn.classify"')
    edited = list(lines)
    edited[k] = edited[k].replace("intervals = false", "intervals = true")
    rendered = _refusal(edited)
    assert f"m.mlir:{k + 1}:" in rendered and "intervals = true, but the mask has" in rendered, rendered


def test_a_kernel_whose_map_no_program_fills_is_refused():
    with pytest.raises(AttncError, match="reads a block map that no attn.map_kernel before it fills: run "
                                         "attn-mask-kernels after attn-analyze-masks"):
        _compiled(WINDOW, drop="attn-mask-kernels")


def test_the_map_of_a_tile_table_reads_the_table():
    options = {"attn-kernel-choices": {"run_ranges": False}}
    entry, _ = _kernels(_compiled(DOCS, options))
    assert {"kind": "scratch", "name": "qtiles"} .items() <= entry["params"][1].items()
    lines = _dump(DOCS, options)
    k = next(k for k, line in enumerate(lines) if '"attn.tile_table_read"' in line
             and "attn.map_kernel" in lines[k - 2] + lines[k - 1])
    rendered = _refusal(lines[:k] + lines[k + 1:])
    assert "query tiles come from the tile table of 'doc' (aligned_tiles), which the map kernel's program " \
           "does not read" in rendered, rendered


def test_the_pass_runs_again_on_the_planned_kernel():
    """attn-mask-kernels after the plan (L5) replaces the program it wrote at L2, the tile
    table's read included, and the lowering builds the new one."""
    options = {"attn-kernel-choices": {"run_ranges": False}}
    module = optimize_mlir("\n".join(_dump(DOCS, options)), "m.mlir",
                           CompileOptions(arch="sm_80", pass_pipeline="attn-mask-kernels{groups=2},attn-lower-sm80"))
    text = str(module)
    assert text.count('"attn.map_kernel"') == 1 and '{asked = "groups=2", groups = 2 : i64}' in text
    kernels = json.loads(ir.StringAttr(lowered_gpu_module(module).attributes[KERNELS_ATTR]).value)
    blockmap = next(k for k in kernels if k["name"] == "blockmap")
    assert blockmap["grid"][0] == [["cdiv", "N", 64 * 4 * 2]] and blockmap["params"][1]["name"] == "qtiles"


@pytest.mark.parametrize("options, split", [({}, True), ({"attn-mask-kernels": {"samples": False}}, False)])
def test_a_map_that_records_no_conjuncts_leaves_the_split_to_the_runs(options, split):
    """The documents kernel splits its mask test where the table's runs give the ranges
    (Note [Ranges from the runs], its default here), and not where it reads a map that
    records no conjuncts a tile holds: one without the samples, which, asked for by the
    option, is built where the runs would have given the ranges."""
    text = str(_compiled(DOCS, options).module)
    assert ("run_ranges = true" in text) is split
    assert ("split = true" in text) is split and ("split = false" in text) is not split


@pytest.mark.parametrize("arch, block_n, option", [("sm_80", 64, {"groups": 2}), ("sm_100a", 128, {"groups": 2}),
                                                    ("sm_80", 64, {"holds": True})])
def test_an_option_of_the_map_keeps_it_where_the_runs_would_drop_it(arch, block_n, option):
    """docs_sink takes its key ranges from the table's runs by default, with no map; an
    option of attn-mask-kernels asks for the map (even one its default: holds), which the
    bundle then builds as asked (Note [The block map's program]), and run_ranges = true
    beside it is refused at that option."""
    docs = ROOT_EXAMPLES / "docs_sink.attn"
    bundles = [ptx_bundle(docs, arch, pass_pipeline=pipeline_with(arch, options))
               for options in ({}, {"attn-mask-kernels": option})]
    groups = option.get("groups", 4)
    assert [[k.grid[0][0].by for k in b.manifest.kernels if k.name == "blockmap"] for b in bundles] == \
        [[], [block_n * 4 * groups]]        # groups of four key blocks a CTA
    both = {"attn-mask-kernels": option, "attn-kernel-choices": {"run_ranges": True}}
    with pytest.raises(AttncError) as info:
        compile_mlir(docs.read_text(), str(docs), CompileOptions(arch=arch, pass_pipeline=pipeline_with(arch, both)))
    (name, value), = option.items()
    assert "run_ranges=true: run_ranges takes the key ranges from the tile table's runs, with no block map, and " \
        f"this map's program was asked for (attn-mask-kernels{{{name}={str(value).lower()}}})" in info.value.render()
    assert info.value.render().startswith("--pass-pipeline:1:")               # at the option


def test_an_edit_of_the_map_program_asks_for_it():
    """groups edited in the dump after attn-mask-kernels asks for the map as the option
    does; edited after attn-kernel-choices, which chose the runs, it is refused at the
    program."""
    from attnc.passes.pipelines import format_pipeline, target_pipeline

    def edited(lines: list[str]) -> str:
        at = _line(lines, "groups = 4 : i64")
        return "\n".join(lines[:at] + [lines[at].replace("groups = 4 : i64", "groups = 2 : i64")] + lines[at + 1:])

    planned = _compiled(DOCS, upto="attn-mask-kernels").module.operation.get_asm(enable_debug_info=False)
    rest = format_pipeline([s for s in target_pipeline("sm_80") if s.name not in (
        "attn-tile", "attn-analyze-masks", "attn-mask-kernels")])
    module = optimize_mlir(edited(planned.split("\n")), "plan.mlir", CompileOptions(arch="sm_80", pass_pipeline=rest))
    _KEPT.append(module)
    assert _kernels(SimpleNamespace(module=module))[0]["grid"][0] == [["cdiv", "N", 64 * 4 * 2]]
    chosen = _dump(DOCS)
    assert "run_ranges = true" in "\n".join(chosen)
    message = _refusal(edited(chosen).split("\n"))
    assert re.match(r"m\.mlir:\d+:\d+: error: run_ranges takes the key ranges from the tile table's runs, with no "
                    r"block map, and this map's program was asked for \(groups = 2 in the program, unlike the "
                    r"defaults of attn-mask-kernels\)", message), message


def test_sm100a_builds_its_map_from_the_program():
    """sm_100a's block map (Note [Block map on sm_100a]; asked for here, where by default the
    table's runs give the ranges) follows the program's options too."""
    docs = ROOT_EXAMPLES / "docs_sink.attn"
    with_map = {"attn-kernel-choices": {"run_ranges": False}}
    default = ptx_bundle(docs, "sm_100a", pass_pipeline=pipeline_with("sm_100a", with_map))
    two = ptx_bundle(docs, "sm_100a", pass_pipeline=pipeline_with("sm_100a", {"attn-mask-kernels": {"groups": 2},
                                                                              **with_map}))
    grids = [[k.grid[0][0] for k in b.manifest.kernels if k.name == "blockmap"][0] for b in (default, two)]
    assert [g.by for g in grids] == [128 * 4 * 4, 128 * 4 * 2]         # 128-key blocks


# ------------------------------------------------------------------ the tile table's program

def _without(lines: list[str], needle: str) -> list[str]:
    k = _line(lines, needle)
    return lines[:k] + lines[k + 1:]


def test_a_kernel_whose_table_no_program_fills_is_refused():
    lines = _dump(DOCS)
    start = _line(lines, '"attn.table_kernel"')
    end = _line(lines, '"attn.map_kernel"')
    rendered = _refusal(lines[:start] + lines[end:])
    assert "takes its query tiles from a tile table (aligned_tiles) that no attn.table_kernel before it fills" \
        in rendered, rendered


def test_a_table_without_its_order_is_refused_where_tail_waves_asks_it():
    lines = _dump(DOCS)
    assert any("tail_waves = 2" in line for line in lines)
    rendered = _refusal(_without(lines, '"attn.table_order"'))
    at = _line(lines, '"attn.table_kernel"')
    assert f"m.mlir:{at + 1}:" in rendered and "tail_waves = 2 orders the table's last tiles at " \
        "attn.table_order, which this program has not" in rendered, rendered


def test_a_table_without_its_order_keeps_the_order_found():
    """The program edited at L2 without attn.table_order: attn-kernel-choices takes
    tail_waves 0, and the table kernel reorders nothing (no %nsmid read)."""
    module = _compiled(DOCS, upto="attn-mask-kernels").module
    lines = _without(module.operation.get_asm(enable_debug_info=False).split("\n"), '"attn.table_order"')
    rest = pipeline_with("sm_80", {}).split("attn-mask-kernels,", 1)[1]
    edited = optimize_mlir("\n".join(lines), "m.mlir", CompileOptions(arch="sm_80", pass_pipeline=rest))
    default = _compiled(DOCS).module
    assert "tail_waves = 0" in str(edited) and "tail_waves = 2" in str(default)
    tables = [next(str(op) for op in lowered_gpu_module(m).regions[0].blocks[0].operations
                   if "sym_name" in op.attributes and "qtiles" in ir.StringAttr(op.attributes["sym_name"]).value)
              for m in (edited, default)]
    assert "nsmid" not in tables[0] and "nsmid" in tables[1]
