"""The FileCheck runner of the .mlir tests (attnc.testing): what it refuses to run."""
import pytest

from attnc.testing import run_lines


@pytest.mark.parametrize("option", ["--implicit-check-not=error", "--check-prefixes=A,B", "--dump-input=fail"])
def test_a_filecheck_option_the_runner_does_not_apply_is_refused(tmp_path, option):
    test = tmp_path / "t.mlir"
    test.write_text(f"// RUN: attnc opt %s | filecheck %s {option}\n// CHECK: module\n")
    with pytest.raises(ValueError, match=f"filecheck takes the file and --check-prefix= here, not {option}"):
        run_lines(test)


def test_the_check_prefix_is_read(tmp_path):
    test = tmp_path / "t.mlir"
    test.write_text("// RUN: not attnc opt %s 2>&1 | filecheck %s --check-prefix=ERR\n// ERR: error\n")
    (run,) = run_lines(test)
    assert (run.check_prefix, run.expect_failure, run.merge_stderr) == ("ERR", True, True)
