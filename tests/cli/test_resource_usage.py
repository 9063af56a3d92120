"""`--resource-usage`: each kernel's registers, spills and stack frame as the assembler
reported them for the cubin the bundle takes (the manifest's `resources`), on stderr --
for a compile, for one served from the kernel cache, and for `attnc opt`; refused where
nothing is assembled."""
import json
from pathlib import Path

from attnc.testing import build_with, cubin_resources, run_attnc

ROOT = Path(__file__).resolve().parents[2]


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "registers a thread" in line]


def test_every_kernel_of_the_bundle_reports_what_its_cubin_holds(tmp_path):
    status, _, err = run_attnc(["compile", str(ROOT / "examples/docs_sink.attn"), "-arch", "sm_90a",
                                "--resource-usage", "-o", str(tmp_path / "b")])
    assert status == 0, err
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    art = build_with((ROOT / "examples/docs_sink.attn").read_text(), "docs_sink.attn", "sm_90a")
    usage = cubin_resources(art, "sm_90a")
    assert len(manifest["kernels"]) == 3 and len(_lines(err)) == 3      # tile table, block map, attention
    for kernel, line in zip(manifest["kernels"], _lines(err)):
        r, u = kernel["resources"], usage[kernel["symbol"]]
        assert (r["registers"], r["spill_stores"], r["spill_loads"], r["stack_frame"]) == \
            (u.registers, u.spill_stores, u.spill_loads, u.stack_frame)
        assert line.startswith(f"attnc: {kernel['symbol']}: {u.registers} registers a thread, ")
        assert f"{kernel['block'][0]} threads a CTA, {kernel['dynamic_smem_bytes']} bytes" in line


def test_a_compile_served_from_the_cache_reports_the_same(tmp_path):
    args = ["compile", str(ROOT / "examples/mha.attn"), "-arch", "sm_80", "--resource-usage", "-o"]
    first = run_attnc([*args, str(tmp_path / "a")])
    second = run_attnc([*args, str(tmp_path / "b")])
    assert first[0] == second[0] == 0 and "served from the kernel cache" in second[2]
    assert _lines(first[2]) == _lines(second[2]) and len(_lines(first[2])) == 1


def test_a_kernel_that_spills_says_how_much():
    """mha at head dim 128 on three consumer warpgroups: 160 registers hold less than its
    S, P, O and the next step's S."""
    status, _, err = run_attnc(["compile", str(ROOT / "examples/mha.attn"), "-arch", "sm_90a", "--emit", "cubin",
                                "--pass-pipeline", "attn-tile{block_m=192},attn-analyze-masks,attn-mask-kernels,"
                                "attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,"
                                "attn-insert-pipelines,attn-overlap-gemms,attn-verify-pipeline,"
                                "attn-kernel-choices,attn-lower-sm90a", "--resource-usage", "-o", "/dev/null"])
    assert status == 0, err
    [line] = _lines(err)
    stored = int(line.split(" registers a thread, ")[1].split(" bytes of spill stores")[0])
    assert stored > 0 and "512 threads a CTA" in line


def test_attnc_opt_reports_the_kernel_of_its_ir(tmp_path):
    dump = tmp_path / "dump"
    assert run_attnc(["compile", str(ROOT / "examples/mha.attn"), "-arch", "sm_80", "--emit", "mlir",
                      "--dump-dir", str(dump), "-o", str(tmp_path / "ir.mlir")])[0] == 0
    planned = sorted(dump.glob("*attn-kernel-choices.mlir"))[0]
    status, _, err = run_attnc(["opt", str(planned), "--pass-pipeline", "attn-lower-sm80", "--emit", "bundle",
                                "--resource-usage", "-o", str(tmp_path / "b")])
    assert status == 0 and len(_lines(err)) == 1, err


def test_nothing_assembled_nothing_to_report():
    """A usage mistake (exit status 2), before anything is compiled."""
    for emit in ("ptx", "mlir"):
        status, _, err = run_attnc(["compile", str(ROOT / "examples/mha.attn"), "--emit", emit,
                                    "--resource-usage"])
        assert status == 2 and f"--emit {emit} assembles none: use --emit bundle or cubin" in err
