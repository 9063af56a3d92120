"""attn-analyze-masks: FileCheck of what it records (analyze_masks.mlir, RUN lines run by
attnc.testing) and every error it raises, with its exact message and position."""
from __future__ import annotations

from pathlib import Path

import pytest
from l1_text import dim_ops, module_text

from attnc.driver import CompileOptions, optimize_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops, get_str, parse_module, to_text
from attnc.passes.analyze_masks import MaskFunctions, mask_functions
from attnc.testing import check_file, user_pass_source

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def run_pass(text: str, times: int = 1) -> str:
    """`attnc opt` with the pass (`times` times) on `text`."""
    pipeline = ",".join(["attn-analyze-masks"] * times)
    module = optimize_mlir(text, "analyze_masks.mlir", CompileOptions(pass_pipeline=pipeline))
    return to_text(module)


def test_filecheck_analyze_masks(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures = check_file("tests/passes/analyze_masks.mlir")
    assert not failures, "\n".join(failures)


def test_filecheck_the_loops_by_tile_class(monkeypatch):
    """analyze_masks_loops.mlir: the tile program's KV loop cut by tile class."""
    monkeypatch.chdir(ROOT)
    failures = check_file("tests/passes/analyze_masks_loops.mlir")
    assert not failures, "\n".join(failures)


def test_running_twice_changes_nothing():
    text = (HERE / "analyze_masks.mlir").read_text()
    assert run_pass(text, times=2) == run_pass(text)


# --- errors -------------------------------------------------------------------------------
def error_of(text: str) -> AttncError:
    with pytest.raises(AttncError) as info:
        run_pass(text)
    return info.value


def test_error_before_attn_tile():
    err = error_of(module_text("early", "    %keep = arith.cmpi sle, %j, %i : i32", tile=False))
    assert err.message == ("attn-analyze-masks needs the tile sizes, but 'block_m' is not set: "
                           "run attn-tile before it")
    assert (err.filename, err.span.line, err.span.col) == ("early.attn", 2, 1)


def test_error_mask_yields_no_boolean():
    text = module_text("notbool", "    %keep = arith.cmpi sle, %j, %i : i32")
    text = text.replace('"gpu.yield"(%keep) : (i1) -> ()', '"gpu.yield"(%j) : (i32) -> ()')
    err = error_of(text)
    assert err.message == "mask_mod must end in a gpu.yield of one i1 (keep (i, j) or not)"
    assert (err.filename, err.span.line, err.span.col) == ("notbool.attn", 6, 26)


def test_error_unknown_dim():
    body = dim_ops("W").replace("} : () -> i32", '} : () -> i32 loc("w.attn":6:40)') + \
        "\n    %keep = arith.cmpi slt, %j, %W : i32"
    err = error_of(module_text("w", body))
    assert err.message == "dim 'W' is not one of the dims of attn.attention (B, H, M, N)"
    assert (err.filename, err.span.line, err.span.col) == ("w.attn", 6, 40)


@pytest.mark.parametrize("hook,body,col", [
    ("mask_mod(b, h, i, j)", "(j + 1) * 65536 * 65536 * 65536 * 65536 > 0", 58),
    ("score_mod(s, b, h, i, j)", "s + float((i - j + 65536 * 65536 * 65536 * 65536) // 7)", 71),
])
def test_an_integer_past_64_bits_is_refused(hook, body, col):
    """The kernels and the reference wrap at 64 bits, the analysis does not: refused
    (before, the first mask compiled to FULL tiles where the reference kept nothing)."""
    from attnc.driver import compile_mlir
    source = (f"attention wide {{\n  q: f16[B, H, M, 64]\n  k: f16[B, H, N, 64]\n  v: f16[B, H, N, 64]\n"
              f"  {hook} = {body}\n  out o: f16[B, H, M, 64]\n}}\n")
    with pytest.raises(AttncError) as info:
        compile_mlir(source, "wide.attn", CompileOptions(arch="sm_80", pass_pipeline="attn-tile,attn-analyze-masks"))
    assert info.value.message.startswith("this integer is always beyond 64 bits")
    assert (info.value.filename, info.value.span.line, info.value.span.col) == ("wide.attn", 5, col)
    fits = body.replace("65536 * 65536 * 65536 * 65536", "65536 * 65536")
    compile_mlir(source.replace(body, fits), "wide.attn", CompileOptions(arch="sm_80",
                                                                          pass_pipeline="attn-tile,attn-analyze-masks"))


def test_error_reading_results_before_the_pass():
    module = parse_module(module_text("unread", "    %keep = arith.cmpi sle, %j, %i : i32"))
    with pytest.raises(AttncError) as info:
        mask_functions(attention_ops(module)[0])
    assert info.value.message == "attn.attention has no mask analysis: run attn-analyze-masks first"
    assert (info.value.filename, info.value.span.line, info.value.span.col) == ("unread.attn", 2, 1)


def test_mask_functions_reads_what_the_pass_recorded():
    module = optimize_mlir((HERE / "analyze_masks.mlir").read_text(), "analyze_masks.mlir",
                           CompileOptions(pass_pipeline="attn-analyze-masks"))
    found = {get_str(op, "variant"): mask_functions(op) for op in attention_ops(module)}
    assert found["mha"] == MaskFunctions("none", ("B", "H", "M", "N"))
    prefix = found["prefix_lm"]
    assert (prefix.kind, prefix.dims, prefix.segments) == ("static", ("B", "H", "M", "N", "P"), 1)
    assert prefix.tile_class.name.value == "prefix_lm_tile_class"
    assert prefix.kv_range.name.value == "prefix_lm_kv_range"
    assert found["docs_sink"].kind == "runtime"


def test_a_mask_whose_analysis_needs_constants_past_64_bits_proves_nothing():
    """x63 = (i - j) * 2^63 fits only where i = j, and the analysis' tile bounds would need
    2^63 itself: the analysis proves nothing (every tile MIXED, every key block visited),
    and the per-element test computes x63 as the kernels and the reference do (wrapping at
    64 bits), where it was once refused and, before that, crashed the constant builder."""
    from attnc.analysis.interp import compile_function
    from attnc.driver import compile_mlir
    lets = " ".join(f"let x{k + 1} = x{k} + x{k} in" for k in range(63))
    source = ("attention ld63 {\n  q: f16[B, H, M, 64]\n  k: f16[B, H, N, 64]\n  v: f16[B, H, N, 64]\n"
              f"  mask_mod(b, h, i, j) = let x0 = i - j in {lets} x63 >= 0\n  out o: f16[B, H, M, 64]\n}}\n")
    module = compile_mlir(source, "ld63.attn",
                          CompileOptions(arch="sm_80", pass_pipeline="attn-tile,attn-analyze-masks")).module
    found = mask_functions(attention_ops(module)[0])
    tile, kv = compile_function(found.tile_class), compile_function(found.kv_range)
    dims = (1, 1, 1000, 1000)                                   # B, H, M, N
    assert {tile(m, m + 64, n, n + 64, 0, 0, *dims) for m in (0, 512) for n in (0, 512)} == {(1,)}
    assert kv(3, 0, 0, *dims) == (0, -(-1000 // found_block_n(module)), 0, 0)


def found_block_n(module) -> int:
    from attnc.ir import get_int
    return get_int(attention_ops(module)[0], "block_n")


def _refused_then_redone(run, edits: str, message: str):
    """`run(pipeline)` -> module: after attn-tile,attn-analyze-masks,`edits` the recorded
    analysis is refused with `message`; run again after `edits`, the pass redoes it. The
    redone module."""
    stale = run(f"attn-tile,attn-analyze-masks,{edits}")
    with pytest.raises(AttncError) as info:
        mask_functions(attention_ops(stale)[0])
    assert info.value.message == message
    return run(f"attn-tile,attn-analyze-masks,{edits},attn-analyze-masks")


def test_an_analysis_for_other_tiles_is_refused_or_redone():
    """Found by a review: attn-tile run again after attn-analyze-masks left
    the functions of the old tile sizes, and the kernel used them (query block 100 of a
    causal mask visited no key block). The lowering now refuses such an analysis, and
    attn-analyze-masks run again redoes it, dropping the old functions."""
    from attnc.driver import compile_mlir
    from attnc.ir import get_int
    source = (HERE.parents[1] / "examples" / "sliding_window.attn").read_text()

    def run(pipeline):
        return compile_mlir(source, "sw.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline)).module

    redone = _refused_then_redone(run, "attn-tile{block_m=64,block_n=32}", (
        "the mask analysis was made for 128x64 tiles, and the op is now tiled 64x32: "
        "run attn-analyze-masks after attn-tile"))
    op = attention_ops(redone)[0]
    assert (get_int(op, "mask_block_m"), get_int(op, "mask_block_n")) == (64, 32)
    assert mask_functions(op).kind == "static"
    text = to_text(redone)
    assert text.count("func.func private @sliding_window_tile_class") == 1
    assert text.count("func.func private @sliding_window_kv_range") == 1
    with pytest.raises(AttncError, match="the mask analysis was made for 128x64 tiles"):
        compile_mlir(source, "sw.attn", CompileOptions(arch="sm_80", pass_pipeline=(
            "attn-tile,attn-analyze-masks,attn-tile{block_m=64,block_n=32},attn-warp-specialize,attn-alloc-smem,"
            "attn-alloc-tmem,attn-insert-pipelines,attn-verify-pipeline,attn-lower-sm80")))


# The sliding window's 1024 in mask_mod becomes 4096.
WIDEN_PASS = user_pass_source("test-widen-window-after-analysis", """\
def widen(inner):
    # every copy of mask_mod: the attn.mask op of each loop over mixed blocks
    if (inner.name == "arith.constant" and inner.parent.name == "attn.mask"
            and str(inner.attributes["value"]) == "1024 : i32"):
        with inner.context:
            inner.attributes["value"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 4096)
    return ir.WalkResult.ADVANCE
op.walk(widen)""",
                              "from mlir import ir")


def test_an_analysis_of_another_mask_is_refused_or_redone(tmp_path):
    """Found by a review: a user's pass that rewrote mask_mod after
    attn-analyze-masks (a window of 1024 widened to 4096) got a kernel that tested the new
    mask per element inside the old mask's key ranges. The lowering now refuses the
    analysis (Note [What the analysis holds for]), and attn-analyze-masks run again redoes it."""
    from attnc.driver import compile_mlir
    path = tmp_path / "widen.py"
    path.write_text(WIDEN_PASS)
    source = (HERE.parents[1] / "examples" / "sliding_window.attn").read_text()

    def run(pipeline):
        options = CompileOptions(arch="sm_80", pass_pipeline=pipeline, load_passes=(str(path),))
        return compile_mlir(source, "sw.attn", options).module

    redone = _refused_then_redone(run, "test-widen-window-after-analysis", (
        "the mask analysis was made for another mask_mod (it changed since): run "
        "attn-analyze-masks after every pass that changes the mask"))
    text = to_text(redone)
    assert mask_functions(attention_ops(redone)[0]).kind == "static"
    assert text.count("func.func private @sliding_window_kv_range") == 1
    assert "4094" in text.split("func.func private @sliding_window_kv_range")[1]     # the new window's reach


@pytest.mark.parametrize("example", ["sliding_window", "gemma2", "docs_sink"])
def test_canonicalize_after_the_analysis_keeps_it(example):
    """canonicalize moves mask_mod's constants out of the region (Note [Hoisted constants]
    brings them back in another order): the same mask, whose analysis still holds (found
    by a review: the first digest, of the operations in order, refused it)."""
    from attnc.driver import compile_mlir
    source = (HERE.parents[1] / "examples" / f"{example}.attn").read_text()
    module = compile_mlir(source, f"{example}.attn", CompileOptions(
        arch="sm_80", pass_pipeline="attn-tile,attn-analyze-masks,canonicalize,cse")).module
    assert mask_functions(attention_ops(module)[0]).kind in ("static", "runtime")
