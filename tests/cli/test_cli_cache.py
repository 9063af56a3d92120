"""`attnc compile` goes through the kernel cache: the second compile of the same
source with the same options reuses the code and generates no kernel."""
import re
from pathlib import Path

import attnc.backend.lowering as lowering
from attnc.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_second_compile_is_served_from_the_cache(tmp_path, monkeypatch, capsys):
    src = str(ROOT / "examples/mha.attn")
    assert main(["compile", src, "-arch", "sm_80", "-o", str(tmp_path / "a")]) == 0
    assert list(Path(__import__("os").environ["ATTNC_CACHE_DIR"]).rglob("manifest.json"))

    def no_build(result, **options):
        raise AssertionError("the kernel was generated again")
    monkeypatch.setattr(lowering, "build", no_build)
    assert main(["compile", src, "-arch", "sm_80", "-o", str(tmp_path / "b")]) == 0
    for name in ("manifest.json", "attn_fwd.sm_80.cubin", "attn_fwd.compute_80.ptx"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_other_options_miss_the_cache(tmp_path, monkeypatch):
    src = str(ROOT / "examples/mha.attn")
    assert main(["compile", src, "-arch", "sm_80", "-o", str(tmp_path / "a")]) == 0
    calls = []
    real = lowering.build
    monkeypatch.setattr(lowering, "build", lambda r, **options: calls.append(1) or real(r, **options))
    pipeline = ("attn-tile{block_n=32},attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,"
                "attn-alloc-tmem,attn-insert-pipelines")
    assert main(["compile", src, "-arch", "sm_80", "--pass-pipeline", pipeline,
                 "-o", str(tmp_path / "b")]) == 0
    assert calls == [1]


def test_a_compile_served_from_the_cache_says_so_on_stderr(monkeypatch):
    from attnc.backend.cache import KernelCache
    from attnc.testing import run_attnc
    monkeypatch.chdir(ROOT)
    args = ["compile", "examples/mha.attn", "-arch", "sm_80", "--emit", "ptx", "-o", "-"]
    status, built, err = run_attnc(args)
    assert (status, err) == (0, "")
    status, served, err = run_attnc(args)
    assert (status, served) == (0, built)           # standard output holds the code alone
    note = re.fullmatch(r"attnc: note: served from the kernel cache \((.+)\); ATTNC_DISABLE_CACHE=1 builds it "
                        r"again\n", err)
    entry = Path(note[1])
    assert entry.parent.parent == KernelCache().root
    assert (entry / "attn_fwd.compute_80.ptx").read_text() == built


def test_the_backends_warnings_are_the_commands_and_kept_with_the_entry(tmp_path, monkeypatch):
    """sm_90a's producer kernel assembled without ptxas (it spills): one `attnc: warning:`
    line, not Python's format, on the compile and again on the hit that serves its cubin
    (found by a review: the hit said nothing)."""
    from attnc.backend import cubin
    from attnc.testing import run_attnc
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cubin, "whole_program_ptxas", lambda: None)
    cubin._assemble_whole_program.cache_clear()
    src = str(ROOT / "examples/mha.attn")
    warned = []
    for out in ("a", "b"):
        status, _, err = run_attnc(["compile", src, "-arch", "sm_90a", "-o", str(tmp_path / out)])
        assert status == 0, err
        warned.append([line for line in err.splitlines() if "setmaxnreg" in line])
    assert "served from the kernel cache" in err
    assert warned[0] == warned[1] and len(warned[0]) == 1
    assert warned[0][0].startswith("attnc: warning: this kernel sets its warpgroups' registers (setmaxnreg)")
    cubin._assemble_whole_program.cache_clear()
