"""The textual pipeline syntax, the pass registry and user pass files."""
import pathlib
import re
import textwrap

import pytest

from attnc.errors import AttncError, Span
from attnc.passes import registry
from attnc.passes.pipelines import PIPELINES, TARGETS, PassSpec, format_pipeline, parse_pipeline


def test_parse_pipeline():
    specs = parse_pipeline("attn-tile{block_m=64 block_n=32}, attn-analyze-masks,cse")
    assert specs == [PassSpec("attn-tile", {"block_m": "64", "block_n": "32"}, 1),
                     PassSpec("attn-analyze-masks", {}, 35), PassSpec("cse", {}, 54)]
    assert parse_pipeline("attn-tile{block_m=64,stages=1}")[0].options == {"block_m": "64", "stages": "1"}
    assert parse_pipeline("") == [] and parse_pipeline("  ") == []
    assert format_pipeline(specs) == "attn-tile{block_m=64 block_n=32},attn-analyze-masks,cse"


@pytest.mark.parametrize("text, message, col", [
    ("attn-tile{block_m=64", "'{' without a matching '}'", 10),
    ("attn-tile}", "'}' without a matching '{'", 10),
    ("attn-tile{a={b}}", "nested '{' in pass options", 13),
    ("attn-tile,,x", "empty pass name in the pipeline", 11),
    ("attn-tile{block_m}", "option 'block_m' of attn-tile must be written key=value", 11),
    ("attn-tile{stages=1 stages=2}", "option 'stages' of attn-tile is given twice", 20),
    ("attn tile", "'attn tile' is not a pass name", 1),
    ("attn-tile{x=1} y", "unexpected text after the options of 'attn-tile'", 1),
])
def test_pipeline_syntax_errors_point_into_the_text(text, message, col):
    with pytest.raises(AttncError) as info:
        parse_pipeline(text)
    e = info.value
    assert (e.message, e.span, e.filename) == (message, Span(1, col), "--pass-pipeline")
    assert e.render().splitlines()[1:] == [text, " " * (col - 1) + "^"]


FULL_PIPELINE = ["attn-tile", "attn-analyze-masks", "attn-mask-kernels", "attn-hoist", "attn-warp-specialize", "attn-alloc-smem",
                 "attn-alloc-tmem", "attn-insert-pipelines", "attn-verify-pipeline"]


def test_every_target_pipeline_is_the_full_plan():
    assert set(PIPELINES) == set(TARGETS)
    for target in TARGETS:
        lowering = ["attn-kernel-choices", f"attn-lower-{target.replace('_', '')}"]
        plan = FULL_PIPELINE[:8] + ["attn-overlap-gemms"] + FULL_PIPELINE[8:] if target == "sm_90a" else FULL_PIPELINE
        assert PIPELINES[target] == [(name, {}) for name in plan + lowering]
        for name, _ in PIPELINES[target]:
            info = registry.lookup(name)
            assert info is not None and info.name == name and info.origin == "built-in"


def test_options_are_converted_and_checked():
    info = registry.lookup("attn-tile")
    assert registry.instantiate(info, {"block_m": "64", "target": "sm_80"}).block_m == 64
    with pytest.raises(AttncError, match="option 'block_m' of attn-tile expects an integer, got 'big'"):
        registry.instantiate(info, {"block_m": "big"})
    with pytest.raises(AttncError, match=r"pass 'attn-tile' has no option 'block_k' \(its options: "
                                         r"target, block_m, block_n, stages, num_warps, q_tiles\)"):
        registry.instantiate(info, {"block_k": "1"})


def test_unknown_pass_suggests_the_closest():
    assert registry.lookup("attn-tyle") is None
    assert registry.suggestion("attn-tyle") == " (did you mean 'attn-tile'?)"
    assert registry.suggestion("zzz") == ""


def test_a_missing_builtin_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(registry.BUILTIN, "attn-future", "attnc.passes.future_pass:FuturePass")
    with pytest.raises(AttncError, match=r"pass 'attn-future' is not available: its module "
                                         r"attnc.passes.future_pass \(attnc/passes/future_pass.py\) is missing"):
        registry.lookup("attn-future")


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


DECORATED = """
    from dataclasses import dataclass
    from typing import ClassVar
    from attnc.passes import Pass, register

    @register
    @dataclass(frozen=True)
    class Tag(Pass):
        '''Tag every attn.attention with a string.

        More text that `attnc passes` does not show.'''
        name: ClassVar[str] = "my-tag"
        value: str = "x"
        count: int = 1

        def run(self, module):
            pass
"""

LISTED = """
    from dataclasses import dataclass
    from typing import ClassVar

    @dataclass(frozen=True)
    class Plain:
        '''A pass that imports nothing from attnc.'''
        name: ClassVar[str] = "my-plain"

        def __call__(self, op, pass_=None):
            pass

    PASSES = [Plain]
"""


def test_load_a_pass_file_with_register(tmp_path):
    path = _write(tmp_path, "tag_pass.py", DECORATED)
    assert registry.load_pass_file(path) == ["my-tag"]
    info = registry.lookup("my-tag")
    assert info.summary == "Tag every attn.attention with a string."
    assert [(o.name, o.type_name, o.default) for o in info.options] == \
        [("value", "str", "x"), ("count", "int", 1)]
    assert registry.instantiate(info, {"count": "3"}).count == 3
    assert registry.load_pass_file(path) == ["my-tag"]        # loading again is harmless
    assert "my-tag" in [p.name for p in registry.all_passes()]


def test_load_a_pass_file_with_passes_list(tmp_path):
    assert registry.load_pass_file(_write(tmp_path, "plain.py", LISTED)) == ["my-plain"]
    assert registry.lookup("my-plain").summary == "A pass that imports nothing from attnc."


@pytest.mark.parametrize("text, message", [
    ("x = 1\n", "defines no pass: decorate a pass class with @attnc.passes.register or list "
                "the classes in PASSES = [...]"),
    ("import nonexistent_module_xyz\n", "ModuleNotFoundError: No module named 'nonexistent_module_xyz'"),
    ("def broken(:\n", "SyntaxError"),
    (LISTED.replace('"my-plain"', '"attn-tile"'), "pass 'attn-tile' (Plain) clashes with the "
                                                    "built-in pass of that name"),
    (LISTED.replace("    PASSES", "    class NoName:\n        pass\n    PASSES").replace(
        "[Plain]", "[NoName]"), "pass class NoName needs a class attribute `name`"),
    (LISTED.replace("    @dataclass(frozen=True)\n", ""), "pass class Plain must be a dataclass"),
    (LISTED.replace("__call__", "apply"), "pass class Plain must define run(module)"),
    (LISTED.replace('"my-plain"', '"my plain{x}"'), "pass class Plain: 'my plain{x}' cannot be written "
                                                    "in a pipeline"),
])
def test_bad_pass_files(tmp_path, text, message):
    path = _write(tmp_path, "bad_pass.py", text)
    with pytest.raises(AttncError) as info:
        registry.load_pass_file(path)
    assert message in info.value.message


def test_missing_pass_file(tmp_path):
    with pytest.raises(AttncError, match="cannot load passes from '.*nope.py': no such file"):
        registry.load_pass_file(tmp_path / "nope.py")


@pytest.mark.parametrize("upstream", ["canonicalize", "cse", "canonicalize,cse"])
def test_upstream_passes_before_the_attn_passes_change_nothing(upstream):
    """Note [Hoisted constants] (attnc/ir/ops.py): canonicalize and cse hoist the hook
    regions' constants out of them; the attn passes sink them back, and the kernel is the
    same (before, the lowering failed verification and the analysis lost the window)."""
    from pathlib import Path

    from attnc.backend.lowering import build
    from attnc.driver import CompileOptions, compile_mlir

    source = (Path(__file__).resolve().parents[2] / "examples/gemma2.attn").read_text()
    from attnc.passes.pipelines import target_pipeline
    default = format_pipeline(target_pipeline("sm_80"))
    ptx = [build(compile_mlir(source, "gemma2.attn", CompileOptions(arch="sm_80", pass_pipeline=p))).files
           for p in (default, f"{upstream},{default}")]
    assert ptx[0]["attn_fwd.compute_80.ptx"] == ptx[1]["attn_fwd.compute_80.ptx"]


@pytest.mark.parametrize("options, reason", [
    ("bogus=1", "an unknown option or a bad value"),
    ("max-iterations=abc", "for the --max-iterations option: 'abc' value invalid for long argument!"),
])
def test_bad_options_of_an_upstream_pass_are_named_as_such(options, reason):
    from attnc.driver import CompileOptions, resolve_pipeline
    with pytest.raises(AttncError) as info:
        resolve_pipeline(CompileOptions(pass_pipeline=f"attn-tile,canonicalize{{{options}}}"))
    assert info.value.message == f"MLIR's pass 'canonicalize' does not take the options {{{options}}}: {reason}"
    assert info.value.span.col == 11


def test_the_readme_lists_every_kernel_choice():
    """README's table of attn-kernel-choices' options names each once, under the kernels that
    take it (an option documented as "sm_80: ..." is sm_80's; sm_100a's two are all three's:
    Note [Choices on sm_100a])."""
    from attnc.passes.kernel_choices import SM100A_CHOICES, KernelChoices
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (both|all three|sm_80|sm_90a) \|", readme, re.M))
    options = {o.name: o for o in registry.options_of(KernelChoices)}
    assert set(rows) == set(options)
    for name, where in rows.items():
        expected = "sm_80" if options[name].doc.startswith("sm_80:") else "both"
        assert where == ("all three" if name in SM100A_CHOICES else expected), name


def test_a_pass_constructor_that_raises_is_a_pipeline_error(tmp_path):
    """Any exception of a user pass's constructor (its __post_init__ checking an option)
    is the pipeline's error, not an internal one (found by a review: KeyError was)."""
    text = LISTED.replace("            pass\n", "            pass\n\n        def __post_init__(self):\n"
                                                "            raise KeyError('n too big')\n")
    registry.load_pass_file(_write(tmp_path, "raising.py", text))
    with pytest.raises(AttncError, match=r"pass 'my-plain' cannot be made with these options: KeyError: 'n too big'"):
        registry.instantiate(registry.lookup("my-plain"), {})


def test_a_failed_batch_keeps_its_loaded_files_replaceable(tmp_path, monkeypatch):
    """load_pass_files([a, broken]) fails at broken; a later call's file may still redefine
    a's pass (Note [Pass files of one compile]; found by a review: it was 'defined twice')."""
    for name, value in (("_user_passes", {}), ("_user_origins", {}), ("_from_files", set())):
        monkeypatch.setattr(registry, name, value)
    first, second = _write(tmp_path, "a.py", LISTED), _write(tmp_path, "b.py", LISTED)
    with pytest.raises(AttncError, match="no such file"):
        registry.load_pass_files([first, tmp_path / "missing.py"])
    registry.load_pass_files([second])
    assert registry.lookup("my-plain").origin == str(second)
    with pytest.raises(AttncError, match="pass 'my-plain' is defined twice"):
        registry.load_pass_files([first, second])


def test_a_pass_file_loaded_again_defines_its_passes_anew(tmp_path, monkeypatch):
    """An edited file loaded again in the same process: a pass it renamed is gone (it was
    still found, the old class, or failed inside typing: found by a review)."""
    for name, value in (("_user_passes", {}), ("_user_origins", {}), ("_from_files", set())):
        monkeypatch.setattr(registry, name, value)
    path = _write(tmp_path, "edited.py", LISTED)
    registry.load_pass_files([path])
    _write(tmp_path, "edited.py", LISTED.replace('"my-plain"', '"my-plain-two"'))
    registry.load_pass_files([path])
    assert registry.lookup("my-plain") is None and registry.lookup("my-plain-two") is not None
