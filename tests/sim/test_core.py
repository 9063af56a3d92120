"""The core's services to instruction families: the parser's tensor operands, exit checks,
and the command line's row filter for --ctas."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np

from attnc_sim import families, sweep
from attnc_sim.__main__ import main
from attnc_sim.ptx import Addr, Imm, Reg, Sym, parse_module
from tests.sim.ptx_harness import run_kernel

ROOT = Path(__file__).resolve().parents[2]


def test_bracketed_tensor_operand_with_a_vector():
    """`[tmap, {%r1, %r3}]` is one operand: the tensor map and its coordinates."""
    text = """.version 8.6
.target sm_100a
.entry k(.param .u64 tmap)
{
    .reg .b32 %r<8>;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r5], [tmap, {%r1, %r3}], [%r6];
    cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%r2, {%r1, 7}], [%r5+16];
}"""
    load, store = parse_module(text).kernels["k"].body
    assert load.operands == (Addr(Reg("%r5"), 0), Addr(Sym("tmap"), 0, (Reg("%r1"), Reg("%r3"))), Addr(Reg("%r6"), 0))
    assert store.operands == (Addr(Reg("%r2"), 0, (Reg("%r1"), Imm(7, False))), Addr(Reg("%r5"), 16))


def test_exit_checks_are_reported(monkeypatch):
    """A family's check_exit runs after the CTA's last warp: each (kind, message) it returns
    is a report at 'CTA (x, y, z) at exit'."""
    seen = []

    def check(cta):
        seen.append(cta.ctaid)
        return [("tensor-memory", "columns 0..31 still allocated")]
    monkeypatch.setattr(families, "EXIT_CHECKS", families.EXIT_CHECKS + [("test_family", check)])
    import attnc_sim.engine as engine
    monkeypatch.setattr(engine, "EXIT_CHECKS", families.EXIT_CHECKS)
    res = run_kernel("", [np.zeros(32, np.uint32)], grid=(2, 1, 1))
    assert seen == [(0, 0, 0), (1, 0, 0)]
    assert [(r.kind, r.where, r.message) for r in res.reports] == [
        ("tensor-memory", "CTA (0, 0, 0) at exit", "columns 0..31 still allocated"),
        ("tensor-memory", "CTA (1, 0, 0) at exit", "columns 0..31 still allocated")]


def _compiled(tmp_path) -> Path:
    out = tmp_path / "mha"
    subprocess.run([str(ROOT / ".venv" / "bin" / "attnc"), "compile", str(ROOT / "examples" / "mha.attn"),
                    "-arch", "sm_80", "-o", str(out)], check=True, capture_output=True)
    return out


def test_cli_compares_only_the_rows_of_the_chosen_ctas(tmp_path, capsys):
    """mha sm_80 at M = 200 (m-blocks of 128 rows): CTA (0, 0, 0) writes rows 0..127 of head 0
    and CTA (1, 1, 0) rows 128..199 of head 1: 200 of the 400 rows are compared."""
    out = _compiled(tmp_path)
    status = main([str(out), "--B", "1", "--H", "2", "--M", "200", "--N", "133", "--ctas", "0,0,0", "1,1,0"])
    printed = capsys.readouterr().out
    assert status == 0
    assert re.search(r"^o: 200 of 400 rows compared, max \|sim - reference\| = [0-9.e+-]+$", printed, re.M), printed


def test_sweep_runs_an_index(tmp_path, capsys):
    """The sweep runs each listed bundle against the reference and prints the summary; an
    entry refused at build time is skipped, one whose folder is missing is an error."""
    _compiled(tmp_path)
    (tmp_path / "index.json").write_text(json.dumps([
        {"suite": "examples", "name": "mha", "path": "mha"},
        {"suite": "examples", "name": "gone", "path": "gone"},
        {"suite": "examples", "name": "refused", "path": "x", "refused": "AttncError: no"}]))
    status = sweep.main([str(tmp_path)])
    printed = capsys.readouterr().out
    assert status == 1
    assert re.search(r"^pass +mha +sm_80 +reports=0 ", printed, re.M)
    assert re.search(r"^ERROR +gone ", printed, re.M) and re.search(r"^skip +refused ", printed, re.M)
    assert re.search(r"^1 passed, 1 failed, 1 skipped; 0 race/protocol reports", printed, re.M)
