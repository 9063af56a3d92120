"""The driver's and the command's refusals of inputs and outputs: IR that `attnc opt`
cannot parse, verify or read, a target `attnc.compile` has no kernels for, a dump
folder or an output file that cannot be written, and code asked of a module with no
attention op left. Each is one error, exit status 1, no traceback."""
import errno
import os
from pathlib import Path

import pytest

import attnc
from attnc.errors import AttncError
from attnc.testing import run_attnc, user_pass_source
from tests.cli.test_cli import ROOT, at_root  # noqa: F401  (at_root: every test runs at the root)


def _refused(argv: list[str]) -> str:
    """stderr of an `attnc` run that must fail as a user error: exit status 1, nothing on
    standard output, no traceback."""
    status, out, err = run_attnc(argv)
    assert (status, out) == (1, ""), err
    assert "Traceback" not in err
    return err


# --- `attnc opt`: IR that does not parse or verify ------------------------------------
def test_opt_refuses_malformed_ir_at_its_place(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("module { foo }\n")
    err = _refused(["opt", str(bad)])
    assert err == (f"{bad}:1:10: error: custom op 'foo' is unknown (tried 'builtin.foo' as well)\n"
                   f"module {{ foo }}\n         ^\n")


@pytest.mark.parametrize("emit", ["mlir", "ptx"])
def test_an_unsound_edit_of_ir_without_locations_is_located_in_the_file(tmp_path, emit):
    # With --emit ptx the check runs beside the lowering and fails after the pipeline:
    # located in the edited file as well, not in MLIR's "-".
    import re
    dump = tmp_path / "dump"
    assert run_attnc(["compile", "examples/mha.attn", "-arch", "sm_80", "--dump-dir", str(dump),
                      "--emit", "mlir", "-o", str(tmp_path / "out.mlir")])[0] == 0
    from attnc.ir.read import parse_ir
    module = parse_ir((dump / "08-attn-insert-pipelines.mlir").read_text())
    text = str(module)                      # printed without locations
    assert "loc(" not in text
    edited = tmp_path / "edited.mlir"
    edited.write_text(text.replace('"attn.cp_async_wait"() {pending = 2 : i64}',
                                   '"attn.cp_async_wait"() {pending = 3 : i64}', 1))
    err = _refused(["opt", str(edited), "-arch", "sm_80", "--pass-pipeline",
                    "attn-verify-pipeline,attn-kernel-choices,attn-lower-sm80", "--emit", emit,
                    "-o", str(tmp_path / f"out.{emit}")])
    assert re.match(rf"{re.escape(str(edited))}:\d+:\d+: error: attn-verify-pipeline: ", err), err
    # The check beside the lowering remembered the kernel sound as it started (Note [Verified
    # as it stands]): its failure forgets that, so a lowering of the same IR checks it again.
    err = _refused(["opt", str(edited), "-arch", "sm_80", "--pass-pipeline", "attn-kernel-choices,attn-lower-sm80",
                    "--emit", emit, "-o", str(tmp_path / f"again.{emit}")])
    assert "attn-verify-pipeline: " in err, err


VERIFIER_FAILS = """\
module {
  func.func @f() -> i32 {
    %c = arith.constant 1 : i64
    return %c : i64
  }
}
"""


def test_opt_refuses_ir_that_fails_verification_at_its_place(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text(VERIFIER_FAILS)
    err = _refused(["opt", str(bad)])
    assert err == (f"{bad}:4:5: error: type of return operand 0 ('i64') doesn't match function result type "
                   f"('i32') in function @f\n    return %c : i64\n    ^\n")


def test_opt_refuses_invalid_ir_at_the_attn_source_of_the_failing_op(tmp_path):
    """The failing op carries a location in a `.attn` file: the error is there, with that
    file's line read from disk."""
    bad = tmp_path / "bad.mlir"
    bad.write_text(VERIFIER_FAILS.replace("return %c : i64", 'return %c : i64 loc("examples/mha.attn":2:1)'))
    err = _refused(["opt", str(bad)])
    assert err == ("examples/mha.attn:2:1: error: type of return operand 0 ('i64') doesn't match function "
                   "result type ('i32') in function @f\nattention mha {\n^\n")


# --- `attnc opt`: integers wider than 64 bits -----------------------------------------
def test_opt_refuses_an_op_result_wider_than_64_bits(tmp_path):
    wide = tmp_path / "wide.mlir"
    wide.write_text('module {\n  func.func @f() -> i128 {\n    %c = arith.constant 1 : i64\n'
                    '    %w = arith.extsi %c : i64 to i128 loc("wide.attn":4:7)\n'
                    '    return %w : i128\n  }\n}\n')
    err = _refused(["opt", str(wide), "--pass-pipeline", ""])
    assert err == "wide.attn:4:7: error: arith.extsi gives an i128: attnc reads integers of up to 64 bits\n"


def test_opt_refuses_a_block_argument_wider_than_64_bits(tmp_path):
    wide = tmp_path / "wide.mlir"
    wide.write_text('module {\n  func.func @f(%a: i128) {\n    return\n  } loc("wide.attn":2:3)\n}\n')
    err = _refused(["opt", str(wide), "--pass-pipeline", ""])
    assert err == ("wide.attn:2:3: error: a block argument of func.func is an i128: attnc reads integers "
                   "of up to 64 bits\n")


def test_a_wide_integer_without_a_location_is_refused_in_the_input_file(tmp_path):
    """IR without locations: the error names the input file and shows its line."""
    wide = tmp_path / "wide.mlir"
    wide.write_text('module {\n  func.func @f() {\n    %c = arith.constant 1 : i128\n    return\n  }\n}\n')
    err = _refused(["opt", str(wide), "--pass-pipeline", ""])
    assert err.startswith(f"{wide}:3:10: error: attribute 'value' of arith.constant holds an i128: attnc reads "
                          f"integers of up to 64 bits\n    %c = arith.constant 1 : i128\n"), err


def test_opt_refuses_a_file_that_is_not_utf8(tmp_path):
    bad = tmp_path / "latin1.mlir"
    bad.write_bytes("// caf\u00e9\nmodule {}\n".encode("latin-1"))
    err = _refused(["opt", str(bad)])
    assert err == f"{bad}: error: the file is not UTF-8 text\n"


# --- attnc.compile: a target without kernels -------------------------------------------
def test_python_compile_refuses_a_target_without_kernels():
    cache = Path(os.environ["ATTNC_CACHE_DIR"])
    with pytest.raises(AttncError) as caught:
        attnc.compile(ROOT / "examples" / "mha.attn", arch="sm_75")
    assert caught.value.message == ("attnc.compile builds kernels for sm_80 and sm_90a and sm_100a so far, "
                                    "not sm_75")
    assert str(caught.value).startswith(f"{ROOT / 'examples' / 'mha.attn'}: error: attnc.compile builds")
    assert not any(cache.iterdir())             # refused before anything was built or cached


# --- outputs that cannot be written ---------------------------------------------------
def test_compile_refuses_a_dump_dir_that_is_a_file(tmp_path):
    taken = tmp_path / "notes.txt"
    taken.write_text("not a folder")
    target = tmp_path / "out.mlir"
    err = _refused(["compile", "examples/mha.attn", "--emit", "mlir", "--dump-dir", str(taken),
                    "-o", str(target)])
    assert err == f"attnc: error: cannot prepare the dump folder '{taken}': {os.strerror(errno.EEXIST)}\n"
    assert taken.read_text() == "not a folder" and not target.exists()


def test_a_dump_that_cannot_be_written_is_named(tmp_path, monkeypatch):
    """A dump folder that takes no file (a full disk, a read-only mount: here, its
    writes failing) and one whose entry is a folder are errors naming what failed, not
    internal ones (found by a review)."""
    in_the_way = tmp_path / "dumps" / "00-frontend.mlir"
    in_the_way.mkdir(parents=True)
    err = _refused(["compile", "examples/mha.attn", "--emit", "mlir", "-o", os.devnull, "--dump-dir",
                    str(tmp_path / "dumps")])
    assert err == f"attnc: error: cannot prepare '{in_the_way}': {os.strerror(errno.EISDIR)}\n"
    real = Path.write_text

    def full(self, *args, **kwargs):
        if self.parent == tmp_path / "full" and self.suffix == ".mlir":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    err = _refused(["compile", "examples/mha.attn", "--emit", "mlir", "-o", os.devnull, "--dump-dir",
                    str(tmp_path / "full")])
    assert err == (f"attnc: error: cannot write the dump '{tmp_path / 'full' / '00-frontend.mlir'}': "
                   f"{os.strerror(errno.ENOSPC)}\n")


def test_an_empty_output_path_is_refused(capsys):
    status, out, err = run_attnc(["compile", "examples/mha.attn", "--emit", "ptx", "-o", ""])
    assert status == 2 and err.endswith("attnc: error: -o: an empty path\n")


def test_python_compile_refuses_bytes_that_are_not_utf8():
    with pytest.raises(AttncError, match=r"source is not valid UTF-8 text \(byte 0xff\)"):
        attnc.compile(b"\xff\xfeattention")


def test_compile_refuses_an_output_in_a_folder_that_is_a_file(tmp_path):
    (tmp_path / "notes.txt").write_text("not a folder")
    target = tmp_path / "notes.txt" / "out.mlir"
    err = _refused(["compile", "examples/mha.attn", "--emit", "mlir", "-o", str(target)])
    assert err == f"attnc: error: cannot write '{target}': {os.strerror(errno.ENOTDIR)}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]      # no temporary file left


# --- code of a module whose pipeline left no attention op -----------------------------
def test_code_of_a_module_without_an_attention_op_is_refused(tmp_path):
    """A user pass that removes the variant's function: no target to build code for."""
    path = tmp_path / "erase.py"
    path.write_text(user_pass_source("my-erase", "op.parent.erase()"))
    err = _refused(["compile", "examples/mha.attn", "--emit", "ptx", "--load-pass", str(path),
                    "--pass-pipeline", "my-erase"])
    assert err == ("attnc: error: the module holds no attention op to generate code from (a pass removed it?): "
                   "--emit mlir shows what the passes left\n")


def test_a_user_pass_that_exits_fails_its_pass(tmp_path):
    """sys.exit() in a user pass is its failure, not the compiler's silent exit (status 0,
    nothing written)."""
    path = tmp_path / "exiter.py"
    path.write_text(user_pass_source("my-exit", "raise SystemExit(0)"))
    err = _refused(["compile", "examples/mha.attn", "--emit", "mlir", "-o", str(tmp_path / "out.mlir"),
                    "--load-pass", str(path), "--pass-pipeline", "my-exit"])
    assert err.startswith(f"examples/mha.attn: error: pass 'my-exit' (from {path}) failed at {path}:")
    assert "SystemExit: 0" in err and not (tmp_path / "out.mlir").exists()


def test_paths_of_the_wrong_kind_are_named_for_what_they_are(tmp_path):
    """A dump given to `attnc compile` points at `attnc opt`; a folder where a file belongs
    (the input, a pass file) and a file where a folder belongs (on the bundle's way) say so."""
    dump = tmp_path / "dump"
    assert run_attnc(["compile", "examples/mha.attn", "--emit", "mlir", "-o", os.devnull, "--dump-dir", str(dump)])[0] == 0
    err = _refused(["compile", str(dump / "01-attn-tile.mlir"), "--emit", "ptx", "-o", os.devnull])
    assert f"error: this is MLIR, not an .attn source: run passes on it with `attnc opt {dump / '01-attn-tile.mlir'}" in err
    for argv in (["compile", str(dump)], ["opt", str(dump)]):
        assert _refused(argv) == f"attnc: error: '{dump}' is a directory, not a file\n"
    err = _refused(["compile", "examples/mha.attn", "--load-pass", str(dump)])
    assert err.startswith(f"{dump}: error: cannot load passes from '{dump}': a directory, not a Python file")
    (tmp_path / "notes.txt").write_text("a file")
    out = tmp_path / "notes.txt" / "bundle"
    err = _refused(["compile", "examples/mha.attn", "-o", str(out)])
    assert err.endswith(f"attnc: error: cannot write the bundle '{out}': '{tmp_path / 'notes.txt'}' is a file, "
                        f"not a folder\n")
