"""The `attnc` command: in-process for speed, plus two real subprocess runs."""
import hashlib
import json
import re
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attnc.passes import registry
from attnc.passes.pipelines import format_pipeline, pipeline_with_options, target_pipeline
from attnc.testing import run_attnc, user_pass_source

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_check_prints_a_summary():
    status, out, err = run_attnc(["check", "examples/gemma2.attn"])
    assert (status, err) == (0, "")
    assert out == textwrap.dedent("""\
        variant:   gemma2 (examples/gemma2.attn) ok
        inputs:    q bf16[B, H, M, 128], k bf16[B, HKV, N, 128], v bf16[B, HKV, N, 128]
        dtype:     bf16
        dims:      B, H, M, HKV, N
        head dims: qk 128, v 128
        GQA:       yes: H query heads share HKV key/value heads
        hooks:     score_mod, mask_mod
        params:    none
        outputs:   o bf16[B, H, M, 128], lse f32[B, H, M]
        scale:     0.0883883
        """)


def test_check_summary_of_params_and_mqa():
    out = run_attnc(["check", "examples/docs_sink.attn"])[1]
    assert "params:    doc i32[B, N], sinks f32[H]\n" in out
    assert "hooks:     mask_mod, sink\n" in out
    assert "GQA:       yes: MQA, H query heads share one key/value head" in run_attnc(
        ["check", "examples/mqa.attn"])[1]


def test_check_reports_a_source_error(tmp_path):
    bad = tmp_path / "bad.attn"
    bad.write_text("attention t {\n  q: bf16[B, H, M, 100]\n}\n")
    status, out, err = run_attnc(["check", str(bad)])
    assert (status, out) == (1, "")
    assert err == (f"{bad}:2:20: error: head dim 100 is not supported; supported head dims are "
                   f"64, 96, 128, 256\n  q: bf16[B, H, M, 100]\n                   ^\n")


def test_check_refuses_an_integer_always_past_64_bits_as_compile_does(tmp_path):
    source = tmp_path / "wide.attn"
    source.write_text("attention wide {\n  q: bf16[B, H, M, 64]\n  k: bf16[B, H, N, 64]\n  v: bf16[B, H, N, 64]\n"
                      "  mask_mod(b, h, i, j) = (i + 1) * 2147483647 * 2147483647 * 3 * (j + 1) > 0\n"
                      "  out o: bf16[B, H, M, 64]\n}\n")
    expected = f"{source}:5:60: error: this integer is always beyond 64 bits"
    for command in (["check", str(source)], ["compile", str(source), "-arch", "sm_80", "--emit", "mlir"]):
        status, out, err = run_attnc(command)
        assert status == 1 and err.startswith(expected), (command, err)


def test_missing_file():
    status, out, err = run_attnc(["compile", "examples/nope.attn", "--emit", "mlir"])
    assert (status, out, err) == (1, "", "attnc: error: no such file: 'examples/nope.attn'\n")


PIPELINE = ["attn-tile", "attn-analyze-masks", "attn-mask-kernels", "attn-hoist", "attn-warp-specialize", "attn-alloc-smem",
            "attn-alloc-tmem", "attn-insert-pipelines", "attn-verify-pipeline"]
# sm_90a's plan: its consumer warpgroups' GEMMs overlapped after the synchronization
SM90A_PLAN = PIPELINE[:8] + ["attn-overlap-gemms"] + PIPELINE[8:]
# sm_100a's pipeline: the plan and the two choices its lowering takes
SM100A = PIPELINE + ["attn-kernel-choices", "attn-lower-sm100a"]


def test_compile_print_ir_after_all():
    status, out, err = run_attnc(["compile", "examples/gemma2.attn", "-arch", "sm_100a",
                                  "--emit", "mlir", "--print-ir-after-all"])
    assert status == 0
    dumps = err.split("// -----// IR Dump After ")[1:]
    assert [d.split(" ")[0] for d in dumps] == ["frontend", *SM100A]
    assert "block_m" not in dumps[0] and "block_m = 128 : i64" in dumps[1]
    assert out.startswith("module attributes {attn.filename = \"examples/gemma2.attn\", attn.source = ")
    assert 'mask_kind = "static"' in out
    assert '"attn.role"' in out and "buffers = [" in out and '"attn.mbarrier_init"' in out
    assert dumps[-1].split("\n", 1)[1].rstrip("\n") == out.rstrip("\n")
    assert 'loc("examples/gemma2.attn":8:28)' in out


def test_compile_to_a_file(tmp_path):
    target = tmp_path / "out.mlir"
    status, out, err = run_attnc(["compile", "examples/mha.attn", "--emit", "mlir", "-o", str(target)])
    assert (status, out, err) == (0, "", "")
    assert '"attn.kernel"' in target.read_text()        # the L2 tile program attn-tile made


# --- code for sm_80: --emit ptx, cubin, bundle -----------------------------------------
BUNDLE_FILES = ["attn_fwd.compute_80.ptx", "attn_fwd.sm_80.cubin", "manifest.json"]


def test_emit_ptx_for_sm80():
    status, out, err = run_attnc(["compile", "examples/mha.attn", "-arch", "sm_80", "--emit", "ptx"])
    assert (status, err) == (0, "")
    assert "\n.target sm_80\n" in out and ".visible .entry attnc_mha_fwd(" in out
    assert "mma.sync.aligned.m16n8k16" in out


def test_emit_ptx_assembles_nothing(tmp_path):
    """--emit ptx runs no ptxas: its PTX is the bundle's, and --time-passes has no
    PTX -> cubin step."""
    status, out, err = run_attnc(["compile", "examples/mha.attn", "-arch", "sm_80", "--emit", "ptx",
                                  "--time-passes", "-o", str(tmp_path / "mha.ptx")])
    assert status == 0 and "PTX -> cubin" not in err and "MLIR -> PTX" in err, err
    status, out, err = run_attnc(["compile", "examples/mha.attn", "-arch", "sm_80", "-o", str(tmp_path / "b")])
    assert status == 0, err
    # byte for byte: the manifest's sha256 of the PTX holds for the file (found by a review)
    assert (tmp_path / "mha.ptx").read_bytes() == (tmp_path / "b" / "attn_fwd.compute_80.ptx").read_bytes()


def test_emit_cubin_to_a_file(tmp_path):
    target = tmp_path / "mha.cubin"
    status, out, err = run_attnc(["compile", "examples/mha.attn", "-arch", "sm_80", "--emit", "cubin",
                                  "-o", str(target)])
    assert (status, out, err) == (0, "", "")
    data = target.read_bytes()
    assert data.startswith(b"\x7fELF") and len(data) > 1024
    assert data[18:20] == (190).to_bytes(2, "little")          # e_machine: EM_CUDA
    assert [p.name for p in tmp_path.iterdir()] == ["mha.cubin"]    # no temporary file left


def test_emit_cubin_needs_o():
    """A command-line mistake: exit status 2, before anything is compiled."""
    status, out, err = run_attnc(["compile", "examples/mha.attn", "--emit", "cubin"])
    assert (status, out) == (2, "")
    assert err.endswith("attnc: error: --emit cubin writes a binary: give the file with -o\n")


@pytest.mark.parametrize("variable", ["ATTNC_DEBUG", "ATTNC_VERIFY_BESIDE", "ATTNC_DISABLE_CACHE"])
def test_a_malformed_variable_is_refused(monkeypatch, variable):
    """Refused by every command, up front: also a compile the kernel cache would serve
    without reading it (the first run fills the cache)."""
    run_attnc(["compile", "examples/mha.attn", "--emit", "ptx", "-o", os.devnull])
    monkeypatch.setenv(variable, "garbage")
    for argv in (["check", "examples/mha.attn"], ["compile", "examples/mha.attn", "--emit", "ptx", "-o", os.devnull]):
        status, out, err = run_attnc(argv)
        assert (status, out) == (1, "")
        assert err.startswith(f"attnc: error: environment variable {variable}='garbage' is not a boolean")


def _check_bundle(folder: Path) -> dict:
    assert sorted(p.name for p in folder.iterdir()) == BUNDLE_FILES
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["target"] == "sm_80" and manifest["variant"] == "mha"
    assert manifest["code"] == {"cubin": "attn_fwd.sm_80.cubin", "ptx": "attn_fwd.compute_80.ptx"}
    assert (folder / "attn_fwd.sm_80.cubin").read_bytes().startswith(b"\x7fELF")
    assert "mma.sync.aligned.m16n8k16" in (folder / "attn_fwd.compute_80.ptx").read_text()
    assert manifest["code_sha256"] == {kind: hashlib.sha256((folder / name).read_bytes()).hexdigest()
                                       for kind, name in manifest["code"].items()}
    return manifest


def test_emit_bundle_to_a_folder(tmp_path):
    target = tmp_path / "mha_bundle"
    status, out, err = run_attnc(["compile", "examples/mha.attn", "-arch", "sm_80", "--emit", "bundle",
                                  "-o", str(target)])
    assert (status, err) == (0, "")
    assert out == f"wrote {target}/: manifest.json, attn_fwd.compute_80.ptx, attn_fwd.sm_80.cubin\n"
    manifest = _check_bundle(target)
    assert manifest["source"] == (ROOT / "examples/mha.attn").read_text()


def test_the_default_emit_is_a_bundle_named_after_the_variant(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, err = run_attnc(["compile", str(ROOT / "examples/mha.attn")])
    assert (status, err) == (0, "")
    assert out == "wrote mha.sm_80/: manifest.json, attn_fwd.compute_80.ptx, attn_fwd.sm_80.cubin\n"
    assert [p.name for p in tmp_path.iterdir()] == ["mha.sm_80"]
    _check_bundle(tmp_path / "mha.sm_80")


def test_a_bundle_never_replaces_what_is_not_one(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("important data")
    status, out, err = run_attnc(["compile", "examples/mha.attn", "-arch", "sm_80", "-o", str(target)])
    assert (status, out) == (1, "")
    assert err == (f"attnc: error: cannot write the bundle '{target}': '{target}' exists and is not an attnc "
                   f"bundle, or holds other files too: not replacing it\n")
    assert target.read_text() == "important data"


@pytest.mark.parametrize("pipeline", ["attn-tile{block_m=64},attn-analyze-masks", ""])
def test_code_of_a_pipeline_that_stops_before_the_plan(tmp_path, pipeline):
    """Found by a review: the errors were about what the lowering found
    missing ('0 attn.role ops', "no 'target' attribute")."""
    status, out, err = run_attnc(["compile", "examples/alibi.attn", "-arch", "sm_80", "--emit", "ptx",
                                  "--pass-pipeline", pipeline])
    assert (status, out) == (1, "")
    assert err.startswith("examples/alibi.attn:2:1: error: the pass pipeline stops before the plan "
                          "(attn-warp-specialize and the passes after it) and has no lowering")


def test_sm100a_code(tmp_path):
    """-arch sm_100a: the plan lowered by attn-lower-sm100a (tcgen05, TMA through tensor maps)."""
    status, out, err = run_attnc(["compile", "examples/mha.attn", "-arch", "sm_100a", "--emit", "ptx",
                                  "-o", str(tmp_path / "mha.ptx")])
    assert (status, err) == (0, "")
    ptx = (tmp_path / "mha.ptx").read_text()
    assert ".target sm_100a" in ptx and "tcgen05.mma.cta_group::1.kind::f16" in ptx
    assert "cp.async.bulk.tensor.4d" in ptx and ".param .align 64 .b8" in ptx
    status, out, err = run_attnc(["compile", "examples/mha.attn", "-arch", "sm_100a", "-o", str(tmp_path / "b")])
    assert status == 0
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["target"] == "sm_100a" and manifest["kernels"][0]["block"] == [512, 1, 1]


def test_sm100a_builds_a_mask_that_reads_params_with_its_map(tmp_path):
    """Notes [Block map on sm_100a] (attnc/backend/sm100a.py) and [Tile table on sm_100a]: the
    tile table's kernel, the map kernel over its tiles (asked for: by default the table's runs
    give the ranges), then the attention kernel, which lists the map's and the table's
    scratch as the map kernel does."""
    status, out, err = run_attnc(["compile", "examples/docs_sink.attn", "-arch", "sm_100a", "-o", str(tmp_path / "b"),
                                  "--pass-pipeline", pipeline_with_options("sm_100a", {"run_ranges": "false"})])
    assert (status, err) == (0, "")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert [k["name"] for k in manifest["kernels"]] == ["qtiles", "blockmap", "attn_fwd"]
    scratch = [[p["name"] for p in k["params"] if p["kind"] == "scratch"] for k in manifest["kernels"]]
    assert scratch == [["qtiles"], ["blockmap", "qtiles"], ["blockmap", "qtiles"]]


def test_sm90a_bundle_runs_wgmma(tmp_path):
    """-arch sm_90a builds the kernel with its GEMMs on wgmma: an sm_90a cubin and its
    PTX, both in the bundle, the manifest saying so."""
    status, out, err = run_attnc(["compile", "examples/softcap.attn", "-arch", "sm_90a",
                                  "-o", str(tmp_path / "b")])
    assert (status, err) == (0, "")
    assert out == f"wrote {tmp_path / 'b'}/: manifest.json, attn_fwd.compute_90a.ptx, attn_fwd.sm_90a.cubin\n"
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["target"] == "sm_90a" and manifest["specialization"]["target"] == "sm_90a"
    ptx = (tmp_path / "b" / "attn_fwd.compute_90a.ptx").read_text()
    assert ".target sm_90a" in ptx and "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in ptx
    assert "mma.sync" not in ptx and "ldmatrix" not in ptx


def test_sm80_compiles_a_score_mod_hook():
    """softcap's score_mod is compiled into the kernel (it was refused before the hooks
    existed): tanh in natural units, as the SFU's approximate instruction."""
    status, out, err = run_attnc(["compile", "examples/softcap.attn", "-arch", "sm_80", "--emit", "ptx"])
    assert (status, err) == (0, "")
    assert ".entry attnc_softcap_fwd(" in out
    assert "tanh.approx.f32" in out


def test_dump_dir(tmp_path):
    status, _, _ = run_attnc(["compile", "examples/alibi.attn", "--emit", "mlir", "-arch", "sm_90a",
                              "--dump-dir", str(tmp_path / "dumps")])
    assert status == 0
    assert sorted(p.name for p in (tmp_path / "dumps").iterdir()) == [".attnc-dumps", "00-frontend.mlir"] + \
        [f"{i:02d}-{name}.mlir" for i, name in enumerate(SM90A_PLAN + ["attn-kernel-choices", "attn-lower-sm90a"], 1)]


def test_pass_pipeline_option():
    status, out, err = run_attnc(["compile", "examples/mha.attn", "--emit", "mlir", "-arch", "sm_80",
                                  "--pass-pipeline", "attn-tile{block_m=64 block_n=32}",
                                  "--print-ir-after-all"])
    assert status == 0
    assert [d.split(" ")[0] for d in err.split("// -----// IR Dump After ")[1:]] == ["frontend", "attn-tile"]
    assert "block_m = 64 : i64, block_n = 32 : i64" in out


def test_unknown_pass():
    status, out, err = run_attnc(["compile", "examples/mha.attn", "--emit", "mlir",
                                  "--pass-pipeline", "attn-tile,no-such-pass"])
    assert status == 1
    assert err.splitlines()[0] == "--pass-pipeline:1:11: error: unknown pass 'no-such-pass'; `attnc passes` lists them"


USER_PASS = '''
from dataclasses import dataclass
from typing import ClassVar

from attnc.ir import attention_ops, set_str
from attnc.passes import Pass, register


@register
@dataclass(frozen=True)
class Mark(Pass):
    """Mark every attn.attention with a label."""
    name: ClassVar[str] = "my-mark"
    label: str = "marked"

    def run(self, module):
        for op in attention_ops(module):
            set_str(op, "my_label", self.label)
'''


def test_load_pass(tmp_path):
    path = tmp_path / "my_pass.py"
    path.write_text(USER_PASS)
    status, out, err = run_attnc(["compile", "examples/gemma2.attn", "--emit", "mlir", "-arch", "sm_90a",
                                  "--load-pass", str(path), "--print-ir-after-all",
                                  "--pass-pipeline", "attn-tile,my-mark{label=hello},attn-analyze-masks"])
    assert status == 0, err
    assert [d.split(" ")[0] for d in err.split("// -----// IR Dump After ")[1:]] == \
        ["frontend", "attn-tile", "my-mark", "attn-analyze-masks"]
    assert 'my_label = "hello"' in out and 'mask_kind = "static"' in out
    status, out, _ = run_attnc(["passes", "--load-pass", str(path)])
    assert f"my-mark  [{path}]\n    Mark every attn.attention with a label.\n    label: str = marked" in out


def test_passes_lists_passes_options_and_pipelines():
    status, out, err = run_attnc(["passes"])
    assert (status, err) == (0, "")
    assert "attn-tile\n    Choose block_m, block_n, stages and warps" in out
    assert "    block_m: int  query rows per Q tile (default: the target's choice for the head dims and the mask; --emit mlir shows it)\n" in out
    assert "attn-analyze-masks\n    Classify KV tiles as skip / full / mixed from mask_mod" in out
    assert ("attn-warp-specialize\n"
            "    Split the tile program into role regions with put/get on channels (attn.role, attn.channel).\n"
            "    consumers: int  consumer warpgroups on sm_90a") in out      # the option's doc is the pass's
    assert ("attn-alloc-smem\n"
            "    Place Q, K, V (and O) tiles in shared memory with swizzle, alignment and a budget "
            "check.\n") in out
    assert ("attn-alloc-tmem\n"
            "    Place S, P and O accumulators in tensor memory columns (sm_100a).\n") in out
    assert ("attn-insert-pipelines\n"
            "    Replace put/get by mbarrier, cp.async and named-barrier ops with (stage, phase) state; a guessed "
            "first block.\n"
            "    early_first: bool  sm_80 (and sm_90a's cooperative role): where the role reads its key range") in out
    # each pass's summary is its docstring's first line
    for name in SM90A_PLAN:
        info = registry.lookup(name)
        assert f"{name}\n    {info.cls.__doc__.strip().splitlines()[0]}\n" in out
    assert out.endswith("\npipelines:\n" + f"  sm_80: {','.join(PIPELINE)},attn-kernel-choices,attn-lower-sm80\n"
                        + f"  sm_90a: {','.join(SM90A_PLAN)},attn-kernel-choices,attn-lower-sm90a\n"
                        + f"  sm_100a: {','.join(SM100A)}\n")


def test_opt_runs_passes_on_saved_ir(tmp_path):
    run_attnc(["compile", "examples/prefix_lm.attn", "--emit", "mlir", "--pass-pipeline", "",
               "-o", str(tmp_path / "l1.mlir")])
    status, out, err = run_attnc(["opt", str(tmp_path / "l1.mlir"), "-arch", "sm_100a",
                                  "--pass-pipeline", "attn-tile"])
    assert (status, err) == (0, "")
    assert 'q_tiles = 2 : i64' in out and 'target = "sm_100a"' in out


def test_opt_builds_the_kernel_of_a_dump(tmp_path):
    """`attnc opt --emit ptx|bundle` builds the kernel of the IR its pipeline leaves: a
    dump taken on through the lowering gives compile's kernel, a planned one is lowered
    first, and an attribute edited in the dump is the kernel's."""
    dumps, ref = tmp_path / "d", tmp_path / "ref"
    assert run_attnc(["compile", "examples/mha.attn", "--dump-dir", str(dumps), "-o", str(ref)])[0] == 0
    ptx = (ref / "attn_fwd.compute_80.ptx").read_text()
    status, out, err = run_attnc(["opt", str(dumps / "10-attn-kernel-choices.mlir"), "--pass-pipeline",
                                  "attn-lower-sm80", "--emit", "bundle", "-o", str(tmp_path / "b")])
    assert (status, err) == (0, "") and out.startswith(f"wrote {tmp_path / 'b'}/")
    assert (tmp_path / "b" / "attn_fwd.compute_80.ptx").read_text() == ptx
    planned = dumps / "09-attn-verify-pipeline.mlir"
    status, out, err = run_attnc(["opt", str(planned), "--pass-pipeline", "attn-kernel-choices", "--emit", "ptx"])
    assert (status, err, out) == (0, "", ptx)
    edited = tmp_path / "edited.mlir"
    edited.write_text(planned.read_text().replace("scale = 0.0883883461", "scale = 0.125", 1))
    status, out, _ = run_attnc(["opt", str(edited), "--pass-pipeline", "attn-kernel-choices", "--emit", "ptx"])
    assert status == 0 and out != ptx


def test_internal_errors_are_one_line_without_a_traceback(monkeypatch):
    import attnc.passes.tile as tile

    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")
    monkeypatch.setattr(tile, "choose_tile", broken)
    status, out, err = run_attnc(["compile", "examples/mha.attn", "--emit", "mlir"])
    assert (status, out) == (70, "")
    assert err == ("attnc: internal compiler error: RuntimeError: boom\n"
                   "attnc: set ATTNC_DEBUG=1 to see the traceback\n")
    monkeypatch.setenv("ATTNC_DEBUG", "1")
    status, _, err = run_attnc(["compile", "examples/mha.attn", "--emit", "mlir"])
    assert status == 70 and "Traceback (most recent call last)" in err


# --- real processes: the console entry point works end to end ---------------------------
def _attnc(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ATTNC_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "attnc", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_process_compile_gemma2_sm100a():
    p = _attnc("compile", "examples/gemma2.attn", "-arch", "sm_100a", "--emit", "mlir",
               "--print-ir-after-all")
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("// -----// IR Dump After") == 1 + len(SM100A)
    assert '"attn.kernel"' in p.stdout and 'loc("examples/gemma2.attn"' in p.stdout


def test_print_ir_after_named_stages_only():
    """--print-ir-after names the stages to show (MLIR's spelling, `=` or a space); a name that
    is no stage of the compile is refused with the stages listed; options are named in full."""
    p = _attnc("compile", "examples/mha.attn", "-arch", "sm_90a", "--emit", "mlir", "-o", os.devnull,
               "--print-ir-after=attn-tile,attn-insert-pipelines")
    assert p.returncode == 0, p.stderr
    assert re.findall(r"IR Dump After (\S+)", p.stderr) == ["attn-tile", "attn-insert-pipelines"]
    p = _attnc("compile", "examples/mha.attn", "--emit", "mlir", "-o", os.devnull, "--print-ir-after", "attn-til")
    assert p.returncode == 1 and "--print-ir-after: 'attn-til' is no stage of this compile; its stages are " \
        "frontend, attn-tile," in p.stderr
    p = _attnc("compile", "examples/mha.attn", "--pass", "attn-tile")
    assert p.returncode == 2 and "unrecognized arguments: --pass attn-tile" in p.stderr


def test_process_error_has_no_traceback():
    p = _attnc("compile", "examples/mha.attn", "--emit", "mlir", "--pass-pipeline", "attn-tile{block_m=7}")
    assert p.returncode == 1
    assert p.stderr.startswith("--pass-pipeline:1:11: error: attn-tile: block_m=7 is not possible on sm_80")
    assert "Traceback" not in p.stderr


def test_a_pipeline_for_another_target_than_arch_is_refused(tmp_path):
    pipeline = format_pipeline(target_pipeline("sm_90a")).replace("attn-tile", "attn-tile{target=sm_90a}", 1)
    status, out, err = run_attnc(["compile", "examples/gemma2.attn", "-arch", "sm_80", "--pass-pipeline", pipeline,
                                  "-o", str(tmp_path / "b")])
    assert (status, out) == (1, "")
    assert err == ("attnc: error: the pipeline built for sm_90a but -arch is sm_80: give -arch sm_90a, "
                   "or drop the passes' target option\n")
    assert list(tmp_path.iterdir()) == []


def test_a_target_option_against_the_arch_of_the_pipelines_passes_is_refused_at_it(tmp_path):
    # -arch sm_90a's own passes (attn-overlap-gemms, its lowering) on a plan for sm_80
    pipeline = format_pipeline(target_pipeline("sm_90a")).replace("attn-tile", "attn-tile{target=sm_80}", 1)
    status, out, err = run_attnc(["compile", "examples/mha.attn", "-arch", "sm_90a", "--pass-pipeline", pipeline,
                                  "-o", str(tmp_path / "b")])
    assert (status, out) == (1, "")
    assert err.startswith("--pass-pipeline:1:11: error: target=sm_80, and the pipeline holds attn-overlap-gemms, "
                          "a pass of sm_90a (the arch asked for): ask for sm_80, or drop the option\n")


@pytest.mark.parametrize("emit", ["ptx", "mlir", "bundle"])
def test_the_output_is_never_the_input(tmp_path, emit):
    source = tmp_path / "my.attn"
    source.write_text((ROOT / "examples" / "mha.attn").read_text())
    out = source if emit != "bundle" else tmp_path
    status, stdout, err = run_attnc(["compile", str(source), "--emit", emit, "-o", str(out)])
    what = "is the input file" if emit != "bundle" else "holds the input file"
    assert (status, stdout, err) == (1, "", f"attnc: error: -o {out} {what}: give another output\n")
    assert source.read_text() == (ROOT / "examples" / "mha.attn").read_text()


def test_a_dump_folder_holding_the_input_dump_is_refused(tmp_path):
    """`attnc opt D/02-....mlir --dump-dir D` would remove its own input with the earlier
    run's dumps (found by a review: a hand-edited dump was lost)."""
    dumps = tmp_path / "d"
    assert run_attnc(["compile", "examples/mha.attn", "--emit", "mlir", "-o", str(tmp_path / "m.mlir"),
                      "--dump-dir", str(dumps)])[0] == 0
    edited = dumps / "02-attn-analyze-masks.mlir"
    text = edited.read_text() + "// edited\n"
    edited.write_text(text)
    status, out, err = run_attnc(["opt", str(edited), "--pass-pipeline", "attn-warp-specialize",
                                  "--dump-dir", str(dumps), "-o", str(tmp_path / "o.mlir")])
    assert (status, out) == (1, "")
    assert err.startswith(f"attnc: error: --dump-dir {dumps} holds the input {edited}, which the dump would remove")
    assert edited.read_text() == text


def test_an_output_that_is_not_a_regular_file_is_written_through(tmp_path):
    """-o /dev/null, a pipe or a link is written as a shell's `>` writes it, not replaced
    by a file renamed over it (found by a review: /dev/null became a file)."""
    (tmp_path / "real.ptx").write_text("old")
    link = tmp_path / "link.ptx"
    link.symlink_to("real.ptx")
    assert run_attnc(["compile", "examples/mha.attn", "--emit", "ptx", "-o", str(link)])[0] == 0
    assert link.is_symlink() and (tmp_path / "real.ptx").read_text().startswith("//")
    assert run_attnc(["compile", "examples/mha.attn", "--emit", "ptx", "-o", os.devnull])[0] == 0
    assert Path(os.devnull).is_char_device()


def test_an_output_file_gets_the_mode_open_would_give_it(tmp_path):
    old = os.umask(0o022)
    try:
        fresh, kept = tmp_path / "fresh.ptx", tmp_path / "kept.ptx"
        kept.write_text("old")
        kept.chmod(0o640)
        for out in (fresh, kept):
            assert run_attnc(["compile", "examples/mha.attn", "--emit", "ptx", "-o", str(out)])[0] == 0
        assert (fresh.stat().st_mode & 0o777, kept.stat().st_mode & 0o777) == (0o644, 0o640)
    finally:
        os.umask(old)


def test_opt_on_tiled_ir_wants_its_target_and_a_pipeline(tmp_path):
    """From a review: opt ran the whole pipeline again on a dump past attn-tile (an error
    deep in a pass), and took any -arch for IR tiled for another target."""
    dump = tmp_path / "dump"
    assert run_attnc(["compile", "examples/mha.attn", "-arch", "sm_90a", "--dump-dir", str(dump),
                      "--emit", "mlir", "-o", str(tmp_path / "out.mlir")])[0] == 0
    tiled = str(dump / "02-attn-analyze-masks.mlir")
    status, _, err = run_attnc(["opt", tiled, "-arch", "sm_80", "--pass-pipeline", "attn-warp-specialize"])
    assert (status, err) == (1, "attnc: error: this IR was tiled for sm_90a but -arch is sm_80: give -arch "
                                "sm_90a, or leave -arch out\n")
    status, _, err = run_attnc(["opt", tiled])
    assert status == 1 and err.startswith("attnc: error: this IR went through attn-tile already: give "
                                          "--pass-pipeline")
    status, out, _ = run_attnc(["opt", tiled, "--pass-pipeline", "attn-warp-specialize"])
    assert status == 0 and '"attn.role"' in out


def test_a_dump_dir_holds_only_this_run(tmp_path):
    dump = tmp_path / "dump"
    assert run_attnc(["compile", "examples/gemma2.attn", "--dump-dir", str(dump), "--emit", "mlir",
                      "-o", str(tmp_path / "a.mlir")])[0] == 0
    assert run_attnc(["compile", "examples/mha.attn", "--dump-dir", str(dump), "--emit", "mlir",
                      "--pass-pipeline", "attn-tile", "-o", str(tmp_path / "b.mlir")])[0] == 0
    assert sorted(p.name for p in dump.iterdir()) == [".attnc-dumps", "00-frontend.mlir", "01-attn-tile.mlir"]


def test_a_dump_dir_loses_an_earlier_runs_user_pass_dumps(tmp_path):
    """The dumps of a user pass not loaded now go too (the folder lists what its last run
    wrote: found by a review, an earlier 01-<user pass> stood beside this run's 01-attn-tile)."""
    dump, path = tmp_path / "dump", tmp_path / "mine.py"
    path.write_text(user_pass_source("my-noop", "pass"))
    assert run_attnc(["compile", "examples/mha.attn", "--dump-dir", str(dump), "--emit", "mlir", "-o", os.devnull,
                      "--load-pass", str(path), "--pass-pipeline", "my-noop"])[0] == 0
    (dump / "07-mine.mlir").write_text("the user's")
    assert run_attnc(["compile", "examples/mha.attn", "--dump-dir", str(dump), "--emit", "mlir", "-o", os.devnull,
                      "--pass-pipeline", "attn-tile"])[0] == 0
    assert sorted(p.name for p in dump.iterdir()) == [".attnc-dumps", "00-frontend.mlir", "01-attn-tile.mlir",
                                                      "07-mine.mlir"]
    assert (dump / ".attnc-dumps").read_text() == "00-frontend.mlir\n01-attn-tile.mlir\n"


def test_version():
    status, out, _ = run_attnc(["--version"])
    assert status == 0 and re.fullmatch(r"attnc \S+\n", out)


def test_dash_is_standard_output_for_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, _ = run_attnc(["compile", str(ROOT / "examples" / "mha.attn"), "--emit", "ptx", "-o", "-"])
    assert status == 0 and out.startswith("//") and not (tmp_path / "-").exists()
    status, _, err = run_attnc(["compile", str(ROOT / "examples" / "mha.attn"), "-o", "-"])
    assert status == 2 and err.endswith("-o -: --emit bundle writes files, not text: give a path\n")


def test_opt_names_the_file_of_ir_without_locations(tmp_path):
    """Found by a review: MLIR names parsed text "-", and the errors of the
    passes on IR with no locations said "-:1:1"."""
    empty = tmp_path / "empty.mlir"
    empty.write_text("module {}\n")
    status, out, err = run_attnc(["opt", str(empty)])
    assert status == 1
    assert err.startswith(f"{empty}:1:1: error: attn-tile found no attn.attention op to tile\n")


def test_opt_refuses_integers_wider_than_64_bits(tmp_path):
    """A hand-edited i128 in the input is a located error, not an abort of the process
    (the bindings assert on reading it as a 64-bit integer)."""
    text = (ROOT / "tests" / "passes" / "lower_sm80.mlir").read_text()
    edited = tmp_path / "wide.mlir"
    edited.write_text(text.replace('k_shape = ["B", "H", "N", 128]', 'k_shape = ["B", "H", 4 : i128, 128]'))
    status, _, err = run_attnc(["opt", str(edited), "--pass-pipeline", "attn-tile"])
    assert status == 1
    assert err.startswith("lower_sm80.attn:2:1: error: attribute 'k_shape' of attn.attention holds an i128: "
                          "attnc reads integers of up to 64 bits\n")


@pytest.mark.parametrize("name", ["mha.attn", "mha.txt"])
def test_opt_on_an_attn_source_suggests_compile(tmp_path, name):
    source = tmp_path / name
    source.write_text((ROOT / "examples/mha.attn").read_text())
    status, out, err = run_attnc(["opt", str(source)])
    assert (status, out) == (1, "")
    assert err == (f"{source}: error: this is an .attn source, not MLIR: compile it with `attnc compile {source}` "
                   f"(with --emit mlir it prints the IR that `attnc opt` takes)\n")
