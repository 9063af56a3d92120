"""The emulator's sm_100a spec kernels (ptx/) are PTX that ptxas takes: an instruction form
the emulator runs but the assembler refuses (a tensor map named by its parameter instead of
its generic address, found so) would make a spec test check what no GPU runs. Templates
are assembled with every fill their tests use."""
from __future__ import annotations

import re
import subprocess

import pytest

import sm100_harness as h
from attnc.backend.cubin import whole_program_ptxas
from test_sm100_ptx import CP_CASES, SHAPES, shape_op

PTXAS = whole_program_ptxas()
_PLACEHOLDER = re.compile(r"\{[A-Z_]+\}")


def cases() -> list[tuple[str, str]]:
    out = []
    for path in sorted(h.PTX.glob("*.ptx")):
        if not _PLACEHOLDER.search(path.read_text()):
            out.append((path.name, path.read_text()))
    for qualifiers, *_ in CP_CASES:
        out.append((f"cp.ptx {qualifiers}", h.kernel_text("cp.ptx", CP=qualifiers)))
    for shape, num, _ in SHAPES:
        store, _ = shape_op("st", shape, num, 0)
        load, _ = shape_op("ld", shape, num, 32)
        out.append((f"ld_st_shape.ptx {shape}.x{num}", h.kernel_text("ld_st_shape.ptx", STORE=store, LOAD=load)))
    return out


@pytest.mark.skipif(PTXAS is None, reason="no ptxas (the nvidia-cuda-nvcc wheel, or one on PATH)")
@pytest.mark.parametrize("name,text", cases(), ids=[name for name, _ in cases()])
def test_the_spec_kernel_assembles(name, text, tmp_path):
    src = tmp_path / "k.ptx"
    src.write_text(text)
    done = subprocess.run([PTXAS, "-arch=sm_100a", str(src), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"{name}: {done.stderr}"
