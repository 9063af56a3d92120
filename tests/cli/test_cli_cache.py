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
    assert (entry / "attn_fwd.compute_80.ptx").read_text() + "\n" == built
