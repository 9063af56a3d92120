"""Bundle writing: manifests from variants, round trips, and atomic writes."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import attnc.frontend as frontend
from attnc.backend import bundle as bundle_module
from attnc.backend.bundle import code_files, read_bundle, variant_manifest, write_bundle
from attnc_runtime.errors import ManifestError
from attnc_runtime.manifest import parse_manifest
from attnc_runtime.testing import synthetic_files, synthetic_manifest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

KERNEL = {"name": "attn_fwd", "symbol": "attnc_fwd", "block": [128, 1, 1], "dynamic_smem_bytes": 49152,
          "grid": [[["cdiv", "M", 128]], ["H"], ["B"]],
          "params": [{"kind": "ptr", "tensor": "q"}, {"kind": "ptr", "tensor": "o"},
                     {"kind": "dim", "name": "M", "type": "i32"}]}


def example_manifest(name: str, target: str = "sm_80", **extra) -> dict:
    variant = frontend.load_file(EXAMPLES / f"{name}.attn")
    return variant_manifest(variant, target=target, kernels=[KERNEL], code=code_files("attn_fwd", target),
                            blobs={kind: placeholder(kind) for kind in ("cubin", "ptx")},
                            specialization={"block_m": 128}, **extra)


def placeholder(kind: str) -> bytes:
    return f"{kind} bytes".encode()


def placeholder_files(manifest: dict) -> dict[str, bytes]:
    return {name: placeholder(kind) for kind, name in manifest["code"].items()}


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.attn")))
def test_every_example_gives_a_valid_manifest(name):
    manifest = example_manifest(name)
    variant = frontend.load_file(EXAMPLES / f"{name}.attn")
    assert manifest["variant"] == variant.name and manifest["source"] == variant.source
    assert manifest["dims"] == list(variant.dims)
    assert [t["name"] for t in manifest["inputs"]] == [t.name for t in variant.inputs]
    assert manifest["outputs"][0]["role"] == "o"


def test_manifest_carries_what_the_variant_declares():
    m = example_manifest("docs_sink")
    assert m["inputs"][3] == {"name": "doc", "role": "param", "dtype": "i32", "shape": ["B", "N"]}
    assert m["outputs"] == [{"name": "o", "role": "o", "dtype": "bf16", "shape": ["B", "H", "M", 64]}]
    assert m["compiler"] == {"name": "attnc", "version": "0.1.0"}


@pytest.mark.parametrize("name, constraints", [
    ("gemma2", [["divisible", "H", "HKV"]]),      # symbolic GQA: checked at launch
    ("mqa", []),                                  # one KV head divides anything
    ("mha", []),                                  # same heads
])
def test_gqa_constraint(name, constraints):
    assert example_manifest(name)["constraints"] == constraints


def test_extra_constraints_are_appended():
    m = example_manifest("docs_sink", constraints=[("equal", "M", "N")])
    assert m["constraints"] == [["equal", "M", "N"]]


def test_prefix_lm_scalar_dim():
    assert parse_manifest(example_manifest("prefix_lm")).scalar_dims == ("P",)


def test_variant_manifest_validates_the_kernels():
    bad = {**KERNEL, "params": [{"kind": "ptr", "tensor": "x"}]}
    with pytest.raises(ManifestError, match=r"kernels\[0\]\.params\[0\]\.tensor: unknown tensor 'x'"):
        variant_manifest(frontend.load_file(EXAMPLES / "mha.attn"), target="sm_80", kernels=[bad],
                         code=code_files("attn_fwd", "sm_80"), blobs={"cubin": b"", "ptx": b""})


@pytest.mark.parametrize("target, names", [
    ("sm_80", {"cubin": "attn_fwd.sm_80.cubin", "ptx": "attn_fwd.compute_80.ptx"}),
    ("sm_90a", {"cubin": "attn_fwd.sm_90a.cubin", "ptx": "attn_fwd.compute_90a.ptx"}),
    ("sm_100a", {"cubin": "attn_fwd.sm_100a.cubin", "ptx": "attn_fwd.compute_100a.ptx"}),
])
def test_code_file_names(target, names):
    assert code_files("attn_fwd", target) == names


def test_round_trip(tmp_path):
    manifest = example_manifest("gemma2")
    files = {**placeholder_files(manifest), "ptxas.txt": b"registers: 168"}
    written = write_bundle(tmp_path / "gemma2", manifest, files)
    read = read_bundle(tmp_path / "gemma2")
    assert read.manifest == written.manifest and read.manifest.raw == manifest
    assert read.code == {"cubin": b"cubin bytes", "ptx": b"ptx bytes"}
    assert (tmp_path / "gemma2" / "ptxas.txt").read_bytes() == b"registers: 168"
    assert json.loads((tmp_path / "gemma2" / "manifest.json").read_text()) == manifest
    assert sorted(os.listdir(tmp_path)) == ["gemma2"]          # no temporary left behind
    assert (tmp_path / "gemma2").stat().st_mode & 0o777 == 0o755


def test_an_invalid_manifest_writes_nothing(tmp_path):
    manifest = synthetic_manifest()
    manifest["target"] = "sm_70"
    with pytest.raises(ManifestError, match="^manifest: target: 'sm_70' is not one of"):
        write_bundle(tmp_path / "b", manifest, synthetic_files(manifest))
    assert os.listdir(tmp_path) == []


def test_a_missing_code_object_writes_nothing(tmp_path):
    manifest = synthetic_manifest()
    with pytest.raises(ManifestError, match="^manifest: code.ptx: 'attn_fwd.compute_80.ptx' is not in the bundle$"):
        write_bundle(tmp_path / "b", manifest, {"attn_fwd.sm_80.cubin": b"x"})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["../x", "manifest.json", "a/b"])
def test_file_names_must_be_plain(tmp_path, name):
    manifest = synthetic_manifest()
    with pytest.raises(ValueError, match="is not a plain file name"):
        write_bundle(tmp_path / "b", manifest, {**synthetic_files(manifest), name: b""})
    assert os.listdir(tmp_path) == []


def test_a_failure_mid_write_leaves_no_trace(tmp_path, monkeypatch):
    manifest = synthetic_manifest()
    written = []

    def failing_write(file, data):
        if written:
            raise OSError("disk full")
        written.append(file)
        file.write_bytes(data)

    monkeypatch.setattr(bundle_module, "_write_synced", failing_write)
    with pytest.raises(OSError, match="disk full"):
        write_bundle(tmp_path / "b", manifest, synthetic_files(manifest))
    assert written and os.listdir(tmp_path) == []


def _new_code(manifest: dict) -> tuple[dict, dict]:
    """(manifest, files) of other code than synthetic_files', the digests to match."""
    files = {name: b"new" for name in synthetic_files(manifest)}
    digests = {kind: hashlib.sha256(files[name]).hexdigest() for kind, name in manifest["code"].items()}
    return {**manifest, "code_sha256": digests}, files


def test_a_failure_mid_write_keeps_the_previous_bundle(tmp_path, monkeypatch):
    manifest = synthetic_manifest()
    write_bundle(tmp_path / "b", manifest, synthetic_files(manifest))
    def failing_write(file, data):
        raise OSError("disk full")

    monkeypatch.setattr(bundle_module, "_write_synced", failing_write)
    with pytest.raises(OSError, match="disk full"):
        write_bundle(tmp_path / "b", *_new_code(manifest))
    assert read_bundle(tmp_path / "b").code["cubin"] == b"not a real cubin"
    assert os.listdir(tmp_path) == ["b"]


def test_replace_swaps_a_whole_bundle(tmp_path):
    """Another target's bundle in the folder (other code files) gives way whole."""
    old, manifest = synthetic_manifest("sm_90a"), synthetic_manifest()
    write_bundle(tmp_path / "b", old, synthetic_files(old))
    write_bundle(tmp_path / "b", *_new_code(manifest))
    assert read_bundle(tmp_path / "b").code == {"cubin": b"new", "ptx": b"new"}
    assert sorted(os.listdir(tmp_path / "b")) == sorted(["manifest.json", *manifest["code"].values()])
    assert os.listdir(tmp_path) == ["b"]


def test_first_writer_wins_without_replace(tmp_path):
    manifest = synthetic_manifest()
    write_bundle(tmp_path / "b", manifest, synthetic_files(manifest))
    with pytest.raises(FileExistsError):
        write_bundle(tmp_path / "b", *_new_code(manifest), replace=False)
    assert read_bundle(tmp_path / "b").code["cubin"] == b"not a real cubin"
    assert os.listdir(tmp_path) == ["b"]


def test_an_empty_folder_is_replaced(tmp_path):
    (tmp_path / "b").mkdir()                # e.g. made by `mkdir out` before compiling
    manifest = synthetic_manifest()
    write_bundle(tmp_path / "b", manifest, synthetic_files(manifest), replace=False)
    assert read_bundle(tmp_path / "b").manifest.variant == "synthetic"


@pytest.mark.parametrize("make", ["file", "folder"])
def test_what_is_not_a_bundle_is_never_replaced(tmp_path, make):
    target = tmp_path / "b"
    if make == "file":
        target.write_text("important data")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("precious")
    manifest = synthetic_manifest()
    with pytest.raises(FileExistsError, match="is not an attnc bundle"):
        write_bundle(target, manifest, synthetic_files(manifest))
    kept = target if make == "file" else target / "notes.txt"
    assert kept.read_text() in ("important data", "precious")
    assert sorted(os.listdir(tmp_path)) == ["b"]


def test_dot_names_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "src.attn").write_text("x")
    monkeypatch.chdir(tmp_path / "work")
    manifest = synthetic_manifest()
    with pytest.raises(FileExistsError, match="is not an attnc bundle"):
        write_bundle(".", manifest, synthetic_files(manifest))
    assert (tmp_path / "work" / "src.attn").read_text() == "x"


def test_a_bundle_that_holds_other_files_is_not_replaced(tmp_path):
    """A user's file put into a bundle folder (or the folder a source lives in) is not
    lost to the next compile into it (found by a review)."""
    manifest = synthetic_manifest()
    target = tmp_path / "b"
    write_bundle(target, manifest, synthetic_files(manifest))
    write_bundle(target, manifest, synthetic_files(manifest))      # its own files only: replaced
    (target / "notes.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="holds other files too"):
        write_bundle(target, manifest, synthetic_files(manifest))
    assert (target / "notes.txt").read_text() == "precious"
    (target / "notes.txt").unlink()
    (target / "sub").mkdir()
    with pytest.raises(FileExistsError, match="holds other files too"):
        write_bundle(target, manifest, synthetic_files(manifest))
