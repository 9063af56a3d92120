"""Inputs a careful user would not write, in real processes: a variant name of 100,000
characters (it crashed nvJitLink: Note [Kernel symbols] in backend/bundle.py), a
standard output whose reader goes away (`attnc passes | head -1`) or that cannot be
written (a full disk)."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from attnc.backend.bundle import SYMBOL_NAME_CHARS, kernel_symbol, symbol_stem

ROOT = Path(__file__).resolve().parents[2]
LONG_NAME = "a" * 100_000


def _attnc(*args, cwd=ROOT, **kwargs):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ATTNC_DEBUG", None)
    streams = {} if "stdout" in kwargs else {"capture_output": True}
    return subprocess.run([sys.executable, "-m", "attnc", *args], cwd=cwd, env=env,
                          text=True, timeout=300, **streams, **kwargs)


def _long_named_variant(tmp_path) -> Path:
    source = (ROOT / "examples/mha.attn").read_text().replace("attention mha", f"attention {LONG_NAME}")
    path = tmp_path / "long.attn"
    path.write_text(source)
    return path


def test_a_short_name_is_its_own_symbol_stem():
    assert kernel_symbol("gemma2", "fwd") == "attnc_gemma2_fwd"
    assert symbol_stem("x" * SYMBOL_NAME_CHARS) == "x" * SYMBOL_NAME_CHARS


def test_a_long_name_enters_symbols_as_a_prefix_and_a_digest():
    stem = symbol_stem(LONG_NAME)
    assert len(stem) == SYMBOL_NAME_CHARS and stem.isidentifier()
    assert stem.startswith("a" * 40) and stem != symbol_stem(LONG_NAME[:-1] + "b")
    assert symbol_stem("x" * (SYMBOL_NAME_CHARS + 1)) != "x" * SYMBOL_NAME_CHARS


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_100000_character_name_compiles_and_the_manifest_keeps_it(tmp_path, arch):
    source = _long_named_variant(tmp_path)
    # no -o: the default bundle folder is named after the variant, cut as its symbols are
    p = _attnc("compile", str(source), "-arch", arch, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    folder = tmp_path / f"{symbol_stem(LONG_NAME)}.{arch}"
    assert p.stdout.startswith(f"wrote {folder.name}/: manifest.json")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["variant"] == LONG_NAME
    assert [k["symbol"] for k in manifest["kernels"]] == [f"attnc_{symbol_stem(LONG_NAME)}_fwd"]
    ptx = (folder / manifest["code"]["ptx"]).read_text()
    assert f".entry attnc_{symbol_stem(LONG_NAME)}_fwd(" in ptx and LONG_NAME not in ptx


def test_a_100000_character_name_with_a_block_map_compiles(tmp_path):
    """A mask that reads a param adds the block-map kernel, with a symbol of its own."""
    source = tmp_path / "long.attn"
    source.write_text(f"attention {LONG_NAME} {{\n  q: bf16[B, H, M, 64]\n  k: bf16[B, H, N, 64]\n"
                      f"  v: bf16[B, H, N, 64]\n  param keep: i32[H, N]\n"
                      f"  mask_mod(b, h, i, j) = keep[h, j] > 0 and j <= i\n  out o: bf16[B, H, M, 64]\n}}\n")
    p = _attnc("compile", str(source), "-arch", "sm_80", "-o", str(tmp_path / "bundle"))
    assert p.returncode == 0, p.stderr[-2000:]
    manifest = json.loads((tmp_path / "bundle/manifest.json").read_text())
    assert manifest["variant"] == LONG_NAME
    assert [k["symbol"] for k in manifest["kernels"]] == [kernel_symbol(LONG_NAME, "blockmap"),
                                                          kernel_symbol(LONG_NAME, "fwd")]


# --- a standard output nobody reads ------------------------------------------------------
@pytest.mark.parametrize("args", [["passes"], ["check", "examples/mha.attn"]])
def test_a_closed_standard_output_stops_quietly(args):
    """As a Unix tool killed by SIGPIPE: status 128 + 13, nothing on stderr. The reading
    end is closed before the process writes, so every write fails."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ATTNC_DEBUG", None)
    p = subprocess.Popen([sys.executable, "-m", "attnc", *args], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    _, err = p.communicate(timeout=120)
    assert (p.returncode, err.decode()) == (128 + signal.SIGPIPE, "")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["passes"], ["check", "examples/mha.attn"]])
def test_a_full_standard_output_is_an_error_not_a_compiler_bug(args):
    with open("/dev/full", "w") as full:
        p = _attnc(*args, stdout=full, stderr=subprocess.PIPE)
    assert (p.returncode, p.stderr) == (1, "attnc: error: an I/O error on standard output: No space left on device\n")
