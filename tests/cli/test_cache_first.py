"""`attnc compile` looks the kernel cache up before it parses, imports or runs anything a
hit does not need (Note [The kernel cache first] in attnc/cli.py): what the key covers,
what a hit prints, which compiles bypass the cache. Timing is never checked here."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import attnc.driver
import attnc.frontend
from attnc.backend import cache as cache_module
from attnc.cli import cache_slot, parser
from attnc.testing import run_attnc

ROOT = Path(__file__).resolve().parents[2]
MHA = ROOT / "examples" / "mha.attn"
SM80_PIPELINE = ("attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,"
                 "attn-insert-pipelines,attn-verify-pipeline,attn-lower-sm80")


def key_of(*argv: str) -> str | None:
    slot = cache_slot(parser().parse_args(["compile", *argv]))
    return None if slot is None else slot.key


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "v.attn"
    path.write_text(MHA.read_text())
    return path


# -- the key ----------------------------------------------------------------------------

def test_the_key_is_the_same_for_the_same_compile(source):
    assert key_of(str(source), "-arch", "sm_80") == key_of(str(source), "-arch", "sm_80") is not None


@pytest.mark.parametrize("other", [
    ["-arch", "sm_90a"],
    ["--emit", "ptx", "-o", "x.ptx"],
    ["--pass-pipeline", SM80_PIPELINE.replace("attn-tile", "attn-tile{block_n=32}")],
    ["--pass-pipeline", SM80_PIPELINE],       # the same passes, asked for by name
])
def test_the_key_covers_the_target_the_emit_kind_and_the_pipeline(source, other):
    assert key_of(str(source), "-arch", "sm_80") != key_of(str(source), *other)


def test_the_key_covers_the_source_text_and_its_name(source, tmp_path):
    before = key_of(str(source))
    copy = tmp_path / "copy.attn"
    copy.write_text(source.read_text())
    assert key_of(str(copy)) != before          # warnings and IR locations name the file
    source.write_text(source.read_text() + "\n")
    assert key_of(str(source)) != before


def test_the_key_covers_the_compiler_and_the_toolchain(source, monkeypatch):
    before = key_of(str(source))
    monkeypatch.setattr(cache_module, "compiler_fingerprint", lambda: "0.0.0+edited")
    assert key_of(str(source)) != before
    monkeypatch.undo()
    monkeypatch.setattr(cache_module, "toolchain", lambda: {"mlir": "other", "nvjitlink": None, "ptxas": None})
    assert key_of(str(source)) != before


def test_the_key_covers_each_pass_file_and_the_users_modules_it_imports(source, tmp_path, monkeypatch):
    helper = tmp_path / "helpers_for_cache_key.py"
    helper.write_text("BLOCK_N = 64\n")
    pass_file = tmp_path / "my_pass.py"
    pass_file.write_text(
        "from dataclasses import dataclass\nfrom typing import ClassVar\n"
        "from attnc.passes import Pass, register\nimport helpers_for_cache_key\n\n"
        "@register\n@dataclass(frozen=True)\nclass Nothing(Pass):\n    name: ClassVar[str] = 'do-nothing'\n"
        "    def run(self, module):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def key() -> str:
        sys.modules.pop("helpers_for_cache_key", None)      # a fresh process imports it anew
        return key_of(str(source), "--load-pass", str(pass_file), "--pass-pipeline", "do-nothing," + SM80_PIPELINE)

    first = key()
    assert first == key() is not None
    helper.write_text("BLOCK_N = 32\n")
    second = key()
    assert second != first
    pass_file.write_text(pass_file.read_text() + "# edited\n")
    assert key() not in (first, second)


@pytest.mark.parametrize("argv", [
    ["--emit", "mlir"],
    ["--print-ir-after-all"],
    ["--dump-dir", "dumps"],
])
def test_compiles_that_show_the_ir_take_nothing_from_the_cache(source, argv):
    assert key_of(str(source), *argv) is None


def test_a_disabled_cache_or_an_unreadable_source_has_no_key(source, tmp_path, monkeypatch):
    assert key_of(str(tmp_path / "missing.attn")) is None
    monkeypatch.setenv("ATTNC_DISABLE_CACHE", "1")
    assert key_of(str(source)) is None


# -- a hit ------------------------------------------------------------------------------

def test_a_hit_runs_neither_the_frontend_nor_a_pass(source, tmp_path, monkeypatch):
    args = ["compile", str(source), "-arch", "sm_80", "--emit", "ptx", "-o"]
    assert run_attnc([*args, str(tmp_path / "a.ptx")])[0] == 0

    def refused(*_args, **_kwargs):
        raise AssertionError("a cache hit compiled")
    monkeypatch.setattr(attnc.driver, "compile_variant", refused)
    monkeypatch.setattr(attnc.frontend, "load", refused)
    status, _, err = run_attnc([*args, str(tmp_path / "b.ptx")])
    assert status == 0 and "served from the kernel cache" in err
    assert (tmp_path / "a.ptx").read_bytes() == (tmp_path / "b.ptx").read_bytes()


def test_a_hit_imports_neither_mlir_nor_the_grammar(source, tmp_path):
    assert run_attnc(["compile", str(source), "-o", str(tmp_path / "a")])[0] == 0
    script = ("import sys\nfrom attnc.cli import main\n"
              f"status = main(['compile', {str(source)!r}, '-o', {str(tmp_path / 'b')!r}])\n"
              "print(status, sorted({m.split('.')[0] for m in sys.modules} & {'mlir', 'lark', 'cuda', 'numpy'}))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert "served from the kernel cache" in proc.stderr
    assert proc.stdout.splitlines()[-1] == "0 []"
    assert (tmp_path / "b" / "attn_fwd.sm_80.cubin").read_bytes() == (tmp_path / "a" / "attn_fwd.sm_80.cubin").read_bytes()


def test_a_hit_prints_the_frontends_warnings_again(tmp_path):
    source = tmp_path / "unused.attn"
    source.write_text(MHA.read_text().replace("{", "{\n  dim P", 1))
    args = ["compile", str(source), "--emit", "ptx", "-o", str(tmp_path / "v.ptx")]
    status, _, built = run_attnc(args)
    assert status == 0 and "warning: dim 'P' is declared but never used" in built
    status, _, served = run_attnc(args)
    assert status == 0
    assert served.startswith(built) and served[len(built):].startswith("attnc: note: served from the kernel cache")


def test_showing_the_ir_compiles_even_when_the_kernel_is_cached(source, tmp_path):
    args = ["compile", str(source), "--emit", "ptx", "-o", str(tmp_path / "v.ptx")]
    assert run_attnc(args)[0] == 0
    status, _, err = run_attnc([*args, "--print-ir-after-all"])
    assert status == 0 and "IR Dump After attn-lower-sm80" in err and "served from the kernel cache" not in err


def test_pass_files_run_once_per_compile_hit_or_miss(source, tmp_path):
    log = tmp_path / "loaded.log"
    pass_file = tmp_path / "counted_pass.py"
    pass_file.write_text(
        "from dataclasses import dataclass\nfrom typing import ClassVar\nfrom attnc.passes import Pass, register\n"
        f"with open({str(log)!r}, 'a') as f:\n    f.write('loaded\\n')\n\n"
        "@register\n@dataclass(frozen=True)\nclass Nothing(Pass):\n    name: ClassVar[str] = 'do-nothing'\n"
        "    def run(self, module):\n        pass\n")
    args = ["compile", str(source), "--emit", "ptx", "-o", str(tmp_path / "v.ptx"), "--load-pass", str(pass_file),
            "--pass-pipeline", "do-nothing," + SM80_PIPELINE]
    assert run_attnc(args)[0] == 0
    assert log.read_text() == "loaded\n"
    status, _, err = run_attnc(args)
    assert status == 0 and "served from the kernel cache" in err
    assert log.read_text() == "loaded\n" * 2
