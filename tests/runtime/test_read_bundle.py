"""Reading a bundle folder: what is loaded, and how a broken folder is refused."""
from __future__ import annotations

import hashlib
import json

import pytest

from attnc_runtime import Bundle, load, read_bundle
from attnc_runtime.errors import AttncRuntimeError, ManifestError
from attnc_runtime.testing import synthetic_files, synthetic_manifest


def write(folder, manifest, files):
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for name, blob in files.items():
        (folder / name).write_bytes(blob)
    return folder


def test_read_bundle_loads_manifest_and_code(tmp_path):
    manifest = synthetic_manifest()
    folder = write(tmp_path / "b", manifest, synthetic_files(manifest))
    bundle = read_bundle(folder)
    assert bundle.path == folder and bundle.manifest.variant == "synthetic"
    assert bundle.code == {"cubin": b"not a real cubin", "ptx": b"not a real ptx"}
    assert bundle.digests["cubin"] == hashlib.sha256(b"not a real cubin").hexdigest()
    assert bundle.manifest.raw == manifest
    assert repr(load(folder)) == "Kernel(synthetic, sm_80, inputs=(q, k, v, slopes), outputs=(o, lse))"


def test_load_takes_a_bundle_read_already_and_refuses_other_objects(tmp_path):
    manifest = synthetic_manifest()
    bundle = read_bundle(write(tmp_path / "b", manifest, synthetic_files(manifest)))
    assert load(bundle).bundle is bundle
    with pytest.raises(AttncRuntimeError, match="load takes a bundle's folder \\(a path\\) or a Bundle, not dict"):
        load(manifest)
    with pytest.raises(AttncRuntimeError, match="device='gpu': expected 'cuda' or 'sim'"):
        load(bundle, device="gpu")


def test_a_folder_without_manifest_is_not_a_bundle(tmp_path):
    with pytest.raises(AttncRuntimeError, match=f"^{tmp_path}: not a bundle \\(no manifest.json\\)$"):
        read_bundle(tmp_path)


def test_invalid_json_is_refused(tmp_path):
    (tmp_path / "manifest.json").write_text("{ not json")
    with pytest.raises(ManifestError, match=r"manifest.json: not valid JSON: Expecting property name"):
        read_bundle(tmp_path)


def test_a_missing_code_file_is_refused_naming_it(tmp_path):
    manifest = synthetic_manifest()
    folder = write(tmp_path / "b", manifest, {"attn_fwd.sm_80.cubin": b"x"})
    with pytest.raises(ManifestError) as info:
        read_bundle(folder)
    assert str(info.value) == f"{folder}: manifest: code.ptx: 'attn_fwd.compute_80.ptx' is not in the bundle"


def test_schema_errors_name_the_folder(tmp_path):
    manifest = synthetic_manifest()
    manifest["target"] = "sm_70"
    folder = write(tmp_path / "b", manifest, synthetic_files(manifest))
    with pytest.raises(ManifestError, match=f"^{folder}: manifest: target: 'sm_70' is not one of"):
        read_bundle(folder)


def test_bundle_from_memory():
    manifest = synthetic_manifest()
    del manifest["code"]["ptx"]
    files = {"attn_fwd.sm_80.cubin": b"sass", "notes.txt": b"extra"}
    bundle = Bundle.from_files(with_digests(manifest, files), files)
    assert bundle.path is None and bundle.code == {"cubin": b"sass"}


def with_digests(manifest: dict, files: dict) -> dict:
    """`manifest` with the code_sha256 attnc writes, of `files`."""
    return {**manifest, "code_sha256": {kind: hashlib.sha256(files[name]).hexdigest()
                                        for kind, name in manifest["code"].items()}}


def test_code_files_are_checked_against_their_digests(tmp_path):
    """A code file changed after it was compiled (a damaged copy, a truncated download) is
    refused when the bundle is read, instead of reaching the driver."""
    manifest = synthetic_manifest()
    files = synthetic_files(manifest)
    manifest = with_digests(manifest, files)
    assert read_bundle(write(tmp_path / "good", manifest, files)).code["cubin"] == b"not a real cubin"
    damaged = {**files, "attn_fwd.sm_80.cubin": b"not a real cubiN"}
    folder = write(tmp_path / "bad", manifest, damaged)
    with pytest.raises(ManifestError) as info:
        read_bundle(folder)
    assert str(info.value) == (
        f"{folder}: attn_fwd.sm_80.cubin: its sha256 is {hashlib.sha256(b'not a real cubiN').hexdigest()}, "
        f"but the manifest's code_sha256.cubin is {manifest['code_sha256']['cubin']}: the file was "
        f"changed or damaged after it was compiled")
    with pytest.raises(ManifestError, match="code_sha256.cubin"):
        Bundle.from_files(manifest, damaged)


@pytest.mark.parametrize("digests, expect", [
    ({"ptx": "0" * 63}, r"code_sha256.ptx: '0{63}' is not a sha256 \(64 lowercase hex digits\)"),
    ({"ptx": "A" * 64}, r"code_sha256.ptx: 'A{64}' is not a sha256"),
    ({"sass": "0" * 64}, r"code_sha256: unknown field 'sass'"),
])
def test_malformed_digests_are_refused(digests, expect):
    manifest = {**synthetic_manifest(), "code_sha256": digests}
    with pytest.raises(ManifestError, match=expect):
        Bundle.from_files(manifest, synthetic_files(manifest))


def test_a_digest_of_a_code_object_the_bundle_lacks_is_refused():
    manifest = synthetic_manifest()
    manifest = with_digests(manifest, synthetic_files(manifest))
    del manifest["code"]["ptx"]
    with pytest.raises(ManifestError, match=r"code_sha256.ptx: the bundle has no ptx \(code names cubin\)"):
        Bundle.from_files(manifest, synthetic_files(manifest))
