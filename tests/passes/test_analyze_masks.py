"""attn-analyze-masks: FileCheck of what it records (analyze_masks.mlir) and its errors."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from l1_text import dim_ops, module_text

from attnc.driver import CompileOptions, optimize_mlir
from attnc.errors import AttncError

HERE = Path(__file__).parent


def run_pass(text: str, times: int = 1) -> str:
    """`attnc opt` with the pass (`times` times) on `text`, printed with NameLoc prefixes
    (%m_lo, %may_keep)."""
    pipeline = ",".join(["attn-analyze-masks"] * times)
    module = optimize_mlir(text, "analyze_masks.mlir", CompileOptions(pass_pipeline=pipeline))
    return module.operation.get_asm(use_name_loc_as_prefix=True)


def filecheck(check_file: Path, output: str) -> None:
    done = subprocess.run([Path(sys.executable).parent / "filecheck", str(check_file)], input=output,
                          text=True, capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr


def chunks(path: Path) -> list[str]:
    """The inputs between `// -----` lines (as mlir-opt --split-input-file)."""
    return re.split(r"^// -----$", path.read_text(), flags=re.M)


def test_filecheck_analyze_masks():
    path = HERE / "analyze_masks.mlir"
    filecheck(path, "\n// -----\n".join(run_pass(chunk) for chunk in chunks(path)))


def test_running_twice_changes_nothing():
    causal = chunks(HERE / "analyze_masks.mlir")[0]
    assert run_pass(causal, times=2) == run_pass(causal)


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
