"""`attnc.compile(source, arch=...)`: the in-process path builds the same bundle the CLI
writes, through the kernel cache, and returns the runtime's Kernel (launching needs a
GPU; the argument checks do not)."""
from pathlib import Path

import pytest

import attnc
from attnc.errors import AttncError
from attnc.testing import user_pass_source

ROOT = Path(__file__).resolve().parents[2]


def test_compile_returns_a_runtime_kernel_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path))
    src = (ROOT / "examples/mqa.attn").read_text()
    kernel = attnc.compile(src, arch="sm_80")
    assert kernel.manifest.target == "sm_80"
    assert [t.name for t in kernel.manifest.inputs] == ["q", "k", "v"]
    assert kernel.manifest.kernels[-1].resources.registers > 0      # as the assembler reported it
    assert len(list(tmp_path.rglob("manifest.json"))) == 1
    again = attnc.compile(src, arch="sm_80")          # a cache hit: nothing new written
    assert again.manifest == kernel.manifest
    assert len(list(tmp_path.rglob("manifest.json"))) == 1


def test_compile_builds_hooked_variants_and_sm100a_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path))
    kernel = attnc.compile((ROOT / "examples/alibi.attn").read_text(), arch="sm_80")
    assert [t.name for t in kernel.manifest.inputs] == ["q", "k", "v", "slopes"]
    docs = attnc.compile((ROOT / "examples/docs_sink.attn").read_text(), arch="sm_80")
    # The tile table, whose runs give the key ranges (Note [Ranges from the runs]): no map.
    assert [k.name for k in docs.manifest.kernels] == ["qtiles", "attn_fwd"]
    # Note [Reused masks] (runtime/attnc_runtime/kernel.py): the table's kernel reads no
    # attention tensor, so launches may keep its output; a bundle without params has none.
    assert docs.manifest.mask_kernels == (0,) and kernel.manifest.mask_kernels == ()
    blackwell = attnc.compile((ROOT / "examples/mha.attn").read_text(), arch="sm_100a")
    assert blackwell.manifest.target == "sm_100a"
    assert [p.tensor for p in blackwell.manifest.kernels[0].params if type(p).__name__ == "TensorMapParam"] == \
        ["q", "k", "v", "o"]
    # Note [Tile table on sm_100a]: the documents mask's table, then the kernel, which takes its
    # key ranges from the table's runs
    docs100 = attnc.compile((ROOT / "examples/docs_sink.attn").read_text(), arch="sm_100a")
    assert [k.name for k in docs100.manifest.kernels] == ["qtiles", "attn_fwd"]
    assert docs100.manifest.mask_kernels == (0,)


def test_compile_takes_the_path_of_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path))
    by_text = attnc.compile((ROOT / "examples/mqa.attn").read_text(), arch="sm_80")
    for path in (ROOT / "examples/mqa.attn", str(ROOT / "examples/mqa.attn")):
        assert attnc.compile(path, arch="sm_80").manifest == by_text.manifest
    with pytest.raises(AttncError, match="cannot read '.*nope.attn'"):
        attnc.compile(str(ROOT / "examples/nope.attn"))
    with pytest.raises(AttncError, match="not NoneType"):
        attnc.compile(None)


def pass_file_text(block_n) -> str:
    """A pass setting block_n to `block_n` (a number, or a name its imports give)."""
    return user_pass_source("test-set-block-n", f'set_int(op, "block_n", {block_n})',
                            "from attnc.ir import set_int")


def test_an_edited_pass_file_is_not_served_from_the_cache(tmp_path, monkeypatch):
    from attnc.passes import registry
    from attnc.passes.pipelines import format_pipeline, target_pipeline
    monkeypatch.setattr(registry, "_user_passes", {})
    monkeypatch.setattr(registry, "_user_origins", {})
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path / "cache"))
    specs = target_pipeline("sm_80")
    pipeline = format_pipeline(specs[:1]) + ",test-set-block-n," + format_pipeline(specs[1:])
    pass_file = tmp_path / "my_pass.py"
    src = (ROOT / "examples/mqa.attn").read_text()
    for block_n in (32, 64):
        pass_file.write_text(pass_file_text(block_n))
        kernel = attnc.compile(src, arch="sm_80", pass_pipeline=pipeline, load_passes=str(pass_file))
        assert kernel.manifest.specialization["block_n"] == block_n


# the pass with its block_n taken from a module it imports
HELPER_PASS_FILE = user_pass_source("test-set-block-n", 'set_int(op, "block_n", BLOCK_N)',
                                    "from attnc.ir import set_int\nfrom tiles_for_test import BLOCK_N")


def test_a_pass_is_keyed_by_what_it_did_not_by_its_file(tmp_path, monkeypatch):
    """A pass file that takes its block_n from a module it imports, and two files that
    define the same pass name, one per call (found by a review: the key covered the
    pass file's bytes only, and served block_n 32 after the helper said 64; the second
    file was refused as defining the pass twice). A pipeline of one's own is keyed by
    the final IR (Note [Pass files of one compile] in registry.py)."""
    from attnc.passes import registry
    from attnc.passes.pipelines import format_pipeline, target_pipeline
    for name, value in (("_user_passes", {}), ("_user_origins", {}), ("_from_files", set())):
        monkeypatch.setattr(registry, name, value)
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = target_pipeline("sm_80")
    pipeline = format_pipeline(specs[:1]) + ",test-set-block-n," + format_pipeline(specs[1:])
    src = (ROOT / "examples/mqa.attn").read_text()
    pass_file = tmp_path / "my_pass.py"
    pass_file.write_text(HELPER_PASS_FILE)
    for block_n in (32, 64):
        (tmp_path / "tiles_for_test.py").write_text(f"BLOCK_N = {block_n}\n")
        monkeypatch.delitem(__import__("sys").modules, "tiles_for_test", raising=False)
        kernel = attnc.compile(src, arch="sm_80", pass_pipeline=pipeline, load_passes=str(pass_file))
        assert kernel.manifest.specialization["block_n"] == block_n
    for block_n in (32, 64):                                  # the same pass name, another file
        other = tmp_path / f"pass_{block_n}.py"
        other.write_text(pass_file_text(block_n))
        kernel = attnc.compile(src, arch="sm_80", pass_pipeline=pipeline, load_passes=str(other))
        assert kernel.manifest.specialization["block_n"] == block_n
    with pytest.raises(AttncError, match="pass 'test-set-block-n' is defined twice"):
        attnc.compile(src, arch="sm_80", pass_pipeline=pipeline,
                      load_passes=[str(tmp_path / "pass_32.py"), str(tmp_path / "pass_64.py")])


def test_a_pipeline_for_another_target_is_refused(tmp_path, monkeypatch):
    """As `attnc compile` refuses it (found by a review: attnc.compile(arch="sm_80") with
    attn-tile{target=sm_90a} returned an sm_90a bundle)."""
    from attnc.passes.pipelines import format_pipeline, target_pipeline
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path))
    pipeline = "attn-tile{target=sm_90a}," + format_pipeline(target_pipeline("sm_90a")[1:])
    with pytest.raises(AttncError, match="the pipeline built for sm_90a but arch is sm_80: give arch sm_90a"):
        attnc.compile((ROOT / "examples/mqa.attn").read_text(), arch="sm_80", pass_pipeline=pipeline)


def test_the_toolchain_is_part_of_the_key(monkeypatch):
    """A cubin assembled without ptxas (registers set by setmaxnreg ignored: it spills) is
    not served once ptxas is there (found by a review)."""
    from attnc.backend import cache
    with_ptxas, tools = cache.cache_key("x", {}, "sm_90a"), cache.toolchain()
    monkeypatch.setattr(cache, "toolchain", lambda: {**tools, "ptxas": None})
    assert cache.cache_key("x", {}, "sm_90a") != with_ptxas


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_a_dim_never_used_warns_on_every_compile_and_is_not_required(tmp_path, monkeypatch, arch):
    """The frontend's warnings reach Python users through `warnings` (a cache hit too), and
    the bundle's launch does not require the unused dim (Manifest.read_dims) on any target
    (sm_100a's kernel took every dim as a parameter: found by a review)."""
    from attnc.errors import AttncWarning
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path))
    src = (ROOT / "examples/prefix_lm.attn").read_text().replace("j < P or ", "")
    for _ in range(2):
        with pytest.warns(AttncWarning, match="dim 'P' is declared but never used"):
            kernel = attnc.compile(src, arch=arch)
    assert "P" in kernel.manifest.dims and "P" not in kernel.manifest.read_dims


def test_the_cli_prints_warnings_and_goes_on(tmp_path):
    from attnc.testing import run_attnc
    src = tmp_path / "unused.attn"
    src.write_text((ROOT / "examples/prefix_lm.attn").read_text().replace("j < P or ", ""))
    for command in (["check", str(src)], ["compile", str(src), "--emit", "mlir", "-o", str(tmp_path / "x.mlir")]):
        status, out, err = run_attnc(command)
        assert status == 0 and err.startswith(f"{src}:6:7: warning: dim 'P' is declared but never used"), err
        assert err.count("warning:") == 1
    # a compile that fails in a pass still shows them, first
    status, out, err = run_attnc(["compile", str(src), "--emit", "mlir", "--pass-pipeline", "attn-tile{block_m=96}"])
    assert status == 1 and err.startswith(f"{src}:6:7: warning:") and "error:" in err


def test_print_ir_after_takes_one_stage_as_a_string(capsys, monkeypatch, tmp_path):
    """`print_ir_after="attn-tile"` is that stage, not its letters (found by a review)."""
    monkeypatch.setenv("ATTNC_DISABLE_CACHE", "1")
    attnc.compile((ROOT / "examples/mha.attn").read_text(), arch="sm_80", print_ir_after="attn-tile")
    assert capsys.readouterr().err.count("IR Dump After attn-tile") == 1
