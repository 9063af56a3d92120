"""The L2 tile program (attnc/passes/tile_program.py): `attnc opt` on a dump taken after
attn-tile runs the rest of the pipeline from the IR alone to the same PTX as a compile;
attn-tile run again rebuilds the program for the new tile; a kernel whose hook op was
removed is refused where a pass asks for the hook."""
from pathlib import Path

import pytest

from attnc.driver import CompileOptions, compile_file, optimize_mlir
from attnc.errors import AttncError
from attnc.passes.pipelines import format_pipeline, target_pipeline

ROOT = Path(__file__).resolve().parents[2]


def _ptx(module) -> str:
    import json

    from mlir import ir

    from attnc.backend.ptx import to_ptx
    from attnc.passes.lower_kernel import SPECIALIZATION_ATTR, lowered_gpu_module

    gpu_module = lowered_gpu_module(module)
    target = json.loads(ir.StringAttr(gpu_module.attributes[SPECIALIZATION_ATTR]).value)["target"]
    kernels = ir.Module.parse(f"module attributes {{gpu.container_module}} {{\n{gpu_module}\n}}", module.context)
    return to_ptx(kernels, target, in_place=True)


@pytest.mark.parametrize("example, arch", [("gemma2", "sm_80"), ("docs_sink", "sm_80"), ("alibi", "sm_90a")])
def test_opt_on_a_dump_after_attn_tile_gives_the_same_ptx(tmp_path, monkeypatch, example, arch):
    """The module is stripped of the .attn source it carries: what the lowering builds
    comes from the L2 IR alone."""
    monkeypatch.chdir(ROOT)
    specs = target_pipeline(arch)
    dump = tmp_path / "dump"
    compiled = compile_file(f"examples/{example}.attn", CompileOptions(arch=arch, dump_dir=str(dump)))
    after_tile = (dump / "01-attn-tile.mlir").read_text()
    assert '"attn.kernel"' in after_tile and "kv_blocks" in after_tile
    without_source = after_tile.replace("attn.source = ", "attn.unread = ")
    module = optimize_mlir(without_source, "dump.mlir",
                           CompileOptions(arch=arch, pass_pipeline=format_pipeline(specs[1:])))
    assert _ptx(module) == _ptx(compiled.module)


def test_attn_tile_again_rebuilds_the_program(monkeypatch):
    monkeypatch.chdir(ROOT)
    from attnc.ir import to_text
    module = compile_file("examples/sliding_window.attn", CompileOptions(
        arch="sm_80", pass_pipeline="attn-tile,attn-analyze-masks,attn-tile{block_m=64,block_n=32}")).module
    text = to_text(module, locations=False)
    assert text.count("scf.for") == 1 and 'kv_blocks = "all"' in text and "attn.kv_range" not in text
    assert '!attn.tile<[64, 32], f32, "reg">' in text and "[128, 64]" not in text


def test_a_kernel_without_its_mask_op_is_refused(tmp_path, monkeypatch):
    """has_mask_mod says there is a mask, but a hand edit removed the attn.mask op: the
    pass that reads the mask names what is missing, at the op's location."""
    monkeypatch.chdir(ROOT)
    dump = tmp_path / "dump"
    compile_file("examples/sliding_window.attn", CompileOptions(arch="sm_80", pass_pipeline="attn-tile",
                                                                dump_dir=str(dump)))
    text = (dump / "01-attn-tile.mlir").read_text()
    mask_at = text.index('"attn.mask"')
    line_start = text.rindex("\n", 0, mask_at) + 1
    result = text[line_start:mask_at].strip().rstrip("=").strip()        # %N of the mask op
    end = text.index("\n", text.index("}) :", mask_at)) + 1                   # the op and its region
    operand = text[text.index("(", mask_at) + 1:text.index(",", mask_at)]  # the S tile it took
    edited = text[:line_start] + text[end:]
    edited = edited.replace(f"({result},", f"({operand},")
    assert '"attn.mask"' not in edited
    with pytest.raises(AttncError) as info:
        optimize_mlir(edited, "edited.mlir", CompileOptions(arch="sm_80", pass_pipeline="attn-analyze-masks"))
    assert info.value.message == "attn.kernel has no attn.mask op holding its mask_mod"
    assert info.value.render().startswith("examples/sliding_window.attn:2:1: error: ")
