"""The driver: stages, dumps, custom pipelines, user passes, errors located in the .attn file."""
import io
import re
import textwrap
from pathlib import Path

import pytest

from attnc.driver import CompileOptions, compile_file, compile_kernel, compile_mlir, optimize_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops, get_int, get_str
from attnc.testing import run_attnc

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _headers(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("// -----// IR Dump")]


PIPELINE = ["attn-tile", "attn-analyze-masks", "attn-mask-kernels", "attn-hoist", "attn-warp-specialize", "attn-alloc-smem",
            "attn-alloc-tmem", "attn-insert-pipelines", "attn-verify-pipeline"]


def _buffers(text: str) -> list[tuple[str, str]]:
    """(name, space) of each buffer on the attn.channel ops, in order."""
    return [(m[1], m[2]) for line in text.splitlines() if '"attn.channel"()' in line
            for m in re.finditer(r'name = "(\w+)", offset = \d+ : i64, size = \d+ : i64, space = "(\w+)"', line)]


def test_print_ir_after_all_shows_l1_then_every_pass():
    out = io.StringIO()
    result = compile_file("examples/gemma2.attn", CompileOptions(arch="sm_100a", print_ir_after_all=True),
                          ir_stream=out)
    text = out.getvalue()
    assert _headers(text) == [f"// -----// IR Dump After {stage} //----- //"
                              for stage in ["frontend", *PIPELINE, "attn-kernel-choices", "attn-lower-sm100a"]]
    l1, tiled, masked, mapped, hoisted, roles, smem, tmem, pipelined, verified, chosen, lowered = \
        text.split("// -----// IR Dump After ")[1:]
    assert "block_m" not in l1 and 'loc("examples/gemma2.attn":7:37)' in l1
    assert 'target = "sm_100a"' in tiled and "mask_kind" not in tiled
    assert 'mask_kind = "static"' in masked and '"attn.role"' not in masked and "attn.level" not in masked
    # gemma2's mask reads no param: no block map, so attn-mask-kernels leaves the IR as it is
    assert mapped.split("\n", 1)[1] == masked.split("\n", 1)[1]
    assert 'attn.level = "score"' in hoisted and '"attn.role"' not in hoisted
    # each later pass adds its own level and nothing of the next one's
    assert '"attn.role"' in roles and '"attn.channel"' in roles and '"attn.put"' in roles and _buffers(roles) == []
    smem_buffers = [("sQ", "smem"), ("sKV", "smem"), ("sO", "smem")]
    assert _buffers(smem)[:3] == smem_buffers and all(space == "smem" for _, space in _buffers(smem))
    assert [b for b in _buffers(tmem) if b[1] == "tmem"][:4] == [("tS0", "tmem"), ("tS1", "tmem"), ("tP0", "tmem"),
                                                                  ("tP1", "tmem")]
    assert '"attn.mbarrier_init"' not in tmem and '"attn.put"' in tmem
    assert '"attn.mbarrier_init"' in pipelined and '"attn.put"' not in pipelined and '"attn.ring_advance"' in pipelined
    assert _buffers(pipelined) == _buffers(tmem)
    # attn-verify-pipeline only checks: the IR after it is the IR before it
    assert verified.split("\n", 1)[1] == pipelined.split("\n", 1)[1]
    # sm_100a's two choices (Note [Choices on sm_100a]) on their ops
    assert "lazy = true" in chosen and "exp2_fma = 0" in chosen and "lazy" not in verified
    assert [s.name for s in result.pipeline] == PIPELINE + ["attn-kernel-choices", "attn-lower-sm100a"]
    assert "gpu.module @attnc_kernels" in lowered and "gpu.module" not in chosen
    assert result.text in lowered


def test_dump_dir_removes_earlier_dumps_only(tmp_path):
    """A longer pipeline's dumps go before a shorter one's are written; a file of the user's
    that looks like a dump but names no stage stays."""
    compile_file("examples/mha.attn", CompileOptions(dump_dir=str(tmp_path), pass_pipeline="attn-tile,attn-analyze-masks"))
    for name in ("99-notes.mlir", "05-important.mlir", "notes.txt"):
        (tmp_path / name).write_text("keep")
    compile_file("examples/mha.attn", CompileOptions(dump_dir=str(tmp_path), pass_pipeline="attn-tile"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".attnc-dumps", "00-frontend.mlir", "01-attn-tile.mlir", "05-important.mlir", "99-notes.mlir", "notes.txt"]


def test_dump_dir_writes_every_stage_and_opt_replays_it(tmp_path):
    compile_file("examples/sliding_window.attn", CompileOptions(arch="sm_90a", dump_dir=str(tmp_path)))
    names = sorted(p.name for p in tmp_path.glob("*.mlir"))
    stages = PIPELINE[:8] + ["attn-overlap-gemms"] + PIPELINE[8:] + ["attn-kernel-choices", "attn-lower-sm90a"]
    assert names == ["00-frontend.mlir"] + [f"{i:02d}-{name}.mlir" for i, name in enumerate(stages, 1)]
    from attnc.ir import to_text
    # every stage is the previous one with its pass re-run by `attnc opt`
    for before, after, name in zip(names, names[1:], stages):
        replayed = optimize_mlir((tmp_path / before).read_text(), before,
                                 CompileOptions(arch="sm_90a", pass_pipeline=name))
        assert to_text(replayed) == (tmp_path / after).read_text(), name
    # sm_90a has no tensor memory: attn-alloc-tmem leaves its IR as it is
    assert (tmp_path / "07-attn-alloc-tmem.mlir").read_text() == \
        (tmp_path / "06-attn-alloc-smem.mlir").read_text()


def test_a_custom_pipeline_gets_the_arch_as_target():
    result = compile_file("examples/mha.attn",
                          CompileOptions(arch="sm_90a", pass_pipeline="attn-tile{block_n=128 stages=3},cse"))
    (op,) = attention_ops(result.module)
    assert get_str(op, "target") == "sm_90a" and get_int(op, "stages") == 3
    assert "mask_kind" not in op.attributes


def test_the_empty_pipeline_leaves_l1():
    result = compile_file("examples/mha.attn", CompileOptions(pass_pipeline=""))
    (op,) = attention_ops(result.module)
    assert "block_m" not in op.attributes


@pytest.mark.parametrize("pipeline, rendered", [
    # a pass's refusal of the variant: at the variant
    ("attn-analyze-masks", "examples/mha.attn:2:1: error: attn-analyze-masks needs the tile sizes, but 'block_m' "
                           "is not set: run attn-tile before it\nattention mha {\n^"),
    # a refused option value, found only when the pass runs, is still an option mistake: where it was
    # typed (README: every mistake in a pass option, with a caret), from a review
    ("attn-tile{block_m=96}", "--pass-pipeline:1:11: error: attn-tile: block_m=96 is not possible on sm_80: each "
                              "of the 4 warps owns 16-row slices, so block_m must be a multiple of 64\n"
                              "attn-tile{block_m=96}\n          ^"),
])
def test_a_pass_error_renders_where_its_cause_is(pipeline, rendered):
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline))
    assert info.value.render() == rendered


def test_pipeline_errors_point_into_the_pipeline_text():
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(pass_pipeline="attn-tile,attn-tyle"))
    assert info.value.render() == (
        "--pass-pipeline:1:11: error: unknown pass 'attn-tyle' (did you mean 'attn-tile'?); "
        "`attnc passes` lists them\nattn-tile,attn-tyle\n          ^")
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(pass_pipeline="cse,attn-tile{block_m=x}"))
    assert info.value.render().splitlines()[0] == (          # at the option, as an unknown one is
        "--pass-pipeline:1:15: error: option 'block_m' of attn-tile expects an integer, got 'x'")


def _user_pass(tmp_path, body: str, fields: str = "") -> str:
    """A pass file of the pass "user" whose run(module) is `body`, with the dataclass
    fields (options) `fields`."""
    path = tmp_path / "user_pass.py"
    path.write_text(textwrap.dedent("""
        from dataclasses import dataclass
        from typing import ClassVar
        from attnc.passes import Pass, register

        @register
        @dataclass(frozen=True)
        class User(Pass):
            '''A test pass.'''
            name: ClassVar[str] = "user"
        """) + textwrap.indent(fields, " " * 4) + "\n    def run(self, module):\n"
        + textwrap.indent(textwrap.dedent(body), " " * 8))
    return str(path)


def test_a_user_pass_that_raises_is_reported_as_its_failure(tmp_path):
    path = _user_pass(tmp_path, "{}['missing']\n")
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(load_passes=(path,), pass_pipeline="user"))
    line = open(path).read().splitlines().index("        {}['missing']") + 1
    assert info.value.message == (f"pass 'user' (from {path}) failed at {path}:{line}: KeyError: 'missing' "
                                  f"(ATTNC_DEBUG=1 shows the traceback)")


def test_a_user_pass_failing_in_a_walk_shows_the_innermost_exception_and_line(tmp_path):
    """MLIR re-raises a walk visitor's exception as a RuntimeError holding the traceback
    as text: the message is the visitor's own exception, at the deepest line of the file."""
    path = _user_pass(tmp_path, """
        def visit(op):
            return {}["missing"]
        module.walk(visit)
        """)
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(load_passes=(path,), pass_pipeline="user"))
    line = open(path).read().splitlines().index('            return {}["missing"]') + 1
    assert info.value.message == (f"pass 'user' (from {path}) failed at {path}:{line}: KeyError: 'missing' "
                                  f"(ATTNC_DEBUG=1 shows the traceback)")


def test_a_user_pass_building_ir_without_a_context_is_one_line(tmp_path):
    path = _user_pass(tmp_path, """
        from mlir import ir
        from mlir.dialects import arith
        def visit(op):
            arith.constant(ir.IntegerType.get_signless(32), 1)
            return ir.WalkResult.ADVANCE
        module.walk(visit)
        """)
    status, out, err = run_attnc(["compile", "examples/mha.attn", "--emit", "mlir", "--load-pass", path,
                                  "--pass-pipeline", "user"])
    line = open(path).read().splitlines().index("            arith.constant(ir.IntegerType.get_signless(32), 1)") + 1
    assert (status, out) == (1, "")
    assert err.startswith(f"examples/mha.attn: error: pass 'user' (from {path}) failed at {path}:{line}: "
                          f"RuntimeError: An MLIR function requires a Context but none was provided")
    assert err.count("\n") == 1 and "Traceback" not in err and 'File "' not in err


def test_a_user_pass_that_breaks_the_ir_is_named(tmp_path):
    path = _user_pass(tmp_path, """
        from attnc.ir import attention_ops
        for op in attention_ops(module):
            del op.attributes["dtype"]
        """)
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn",
                     CompileOptions(load_passes=(path,), pass_pipeline="attn-tile,user,attn-analyze-masks"))
    assert info.value.render() == (
        "examples/mha.attn:2:1: error: the IR after pass 'user' is invalid: 'attn.kernel' op "
        "attribute \"dtype\" is expected but not provided\nattention mha {\n^")


def test_frontend_errors_come_first():
    with pytest.raises(AttncError, match="unknown name 'x'"):
        compile_mlir("attention t { q: bf16[B,H,M,64] k: bf16[B,H,N,64] v: bf16[B,H,N,64] "
                     "score_mod(s, b, h, i, j) = x out o: bf16[B,H,M,64] }", "t.attn")


def test_unsupported_arch_and_missing_file():
    with pytest.raises(AttncError, match="unsupported target 'sm_75'; supported targets are "
                                         "sm_80, sm_90a, sm_100a"):
        compile_file("examples/mha.attn", CompileOptions(arch="sm_75"))
    with pytest.raises(AttncError) as info:
        compile_file("examples/nope.attn")
    assert info.value.render() == "attnc: error: no such file: 'examples/nope.attn'"


def test_compile_kernel_caches_nothing_it_cannot_build(tmp_path, monkeypatch):
    # a pipeline that stops before the plan has no kernel (the builds: tests/backend/test_compile_api.py)
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path))
    with pytest.raises(AttncError) as info:
        compile_kernel(Path("examples/mha.attn").read_text(), arch="sm_100a", pass_pipeline="attn-tile")
    assert "the pass pipeline stops before the plan" in info.value.message
    assert not [p for p in tmp_path.rglob("manifest.json")]


def test_a_recursion_limit_in_the_analyses_is_reported_as_the_compilers_fault(monkeypatch):
    """The frontend refuses hooks deeper than MAX_HOOK_DEPTH and the walks over them have
    room for that depth, so Python's recursion limit reached in a compile is the compiler's
    fault: one located message that says so and names the limit, not a traceback."""
    import attnc.driver as driver

    def deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(driver, "_run_stages", deep)
    with pytest.raises(AttncError) as info:
        compile_file("examples/mha.attn", CompileOptions(arch="sm_80"))
    assert info.value.message.startswith("internal compiler error: Python's recursion limit reached while "
                                         "compiling this variant's hooks")
    assert "MAX_HOOK_DEPTH = 1000" in info.value.message
    assert info.value.filename == "examples/mha.attn"


def test_a_failing_upstream_pass_is_reported_with_mlir_s_reason():
    frontend = compile_mlir(Path("examples/mha.attn").read_text(), "mha.attn", CompileOptions(pass_pipeline="")).text
    with pytest.raises(AttncError) as info:
        optimize_mlir(frontend, "mha.mlir", CompileOptions(arch="sm_90a", pass_pipeline="attn-tile,convert-gpu-to-nvvm"))
    assert info.value.message.startswith("the pass pipeline failed in MLIR (its passes from MLIR: "
                                         "convert-gpu-to-nvvm): 'builtin.module' op trying to schedule pass")
    assert "\n" not in info.value.message


def test_the_python_api_refuses_what_it_cannot_take():
    """attnc.compile's unknown options and attnc.reference's non-sources are AttncErrors
    that say what is taken (found by a review: a TypeError, an AttributeError)."""
    import attnc
    with pytest.raises(AttncError, match=r"attnc.compile has no option 'block_m': it takes pass_pipeline, "):
        attnc.compile("examples/mha.attn", block_m=64)
    with pytest.raises(AttncError, match="reference takes a variant's text, the path of its .attn file or a "
                                         "loaded Variant, not NoneType"):
        attnc.reference(None)
    with pytest.raises(AttncError, match="no such file: 'nosuch.attn'"):
        attnc.reference("nosuch.attn")


def test_compile_shows_the_ir_even_when_the_kernel_is_cached(tmp_path, monkeypatch):
    import attnc
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path / "cache"))
    attnc.compile("examples/mha.attn")
    attnc.compile("examples/mha.attn", dump_dir=str(tmp_path / "dump"))
    assert len(list((tmp_path / "dump").glob("*.mlir"))) > 3


def test_an_option_of_a_type_a_pipeline_cannot_give_is_refused(tmp_path):
    """From a review: `sizes: tuple` took the text '3' as is."""
    path = _user_pass(tmp_path, "pass\n", fields="sizes: tuple = (1, 2)\n")
    with pytest.raises(AttncError, match="option 'sizes' of user is declared tuple, which a pipeline cannot "
                                         "give: options are str, int, float or bool"):
        compile_file("examples/mha.attn", CompileOptions(arch="sm_80", load_passes=(path,),
                                                         pass_pipeline="user{sizes=3}"))
