"""The kernel cache: what the key covers, hits and misses, the knobs that place and
disable it, broken entries, and concurrent writers of one key."""
from __future__ import annotations

import hashlib
import multiprocessing
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnc import config
from attnc.backend.bundle import write_bundle
from attnc.backend.cache import KernelCache, cache_key
from attnc.errors import AttncError
from attnc_runtime.testing import synthetic_files, synthetic_manifest

SOURCE = "attention mha { ... }"


@dataclass(frozen=True)
class Options:
    block_m: int = 128
    stages: int = 2


# -- the key ------------------------------------------------------------------------

def test_key_is_a_sha256_hex_digest_and_deterministic():
    key = cache_key(SOURCE, {"block_m": 128}, "sm_80")
    assert len(key) == 64 and int(key, 16) >= 0
    assert key == cache_key(SOURCE, {"block_m": 128}, "sm_80")


@pytest.mark.parametrize("changed", [
    dict(source=SOURCE + " "),
    dict(options={"block_m": 64}),
    dict(options={"block_m": 128, "stages": 3}),
    dict(options={"block_m": "128"}),
    dict(target="sm_90a"),
    dict(compiler_version="0.2.0"),
])
def test_key_changes_with_everything_that_changes_the_code(changed):
    base = dict(source=SOURCE, options={"block_m": 128}, target="sm_80", compiler_version="0.1.0")
    assert cache_key(**base) != cache_key(**{**base, **changed})


def test_the_default_compiler_is_the_release_and_a_digest_of_its_sources(tmp_path, monkeypatch):
    """A code generator changed without a version bump gets other keys (compiler_fingerprint)."""
    import attnc
    from attnc.backend import cache as cache_module

    fingerprint = cache_module.compiler_fingerprint()
    assert fingerprint.startswith(attnc.__version__ + "+") and len(fingerprint) == len(attnc.__version__) + 17
    assert cache_key(SOURCE, {}, "sm_80") == cache_key(SOURCE, {}, "sm_80", compiler_version=fingerprint)
    fake = tmp_path / "attnc"
    (fake / "backend").mkdir(parents=True)
    (fake / "__init__.py").write_text("x = 1\n")
    (fake / "backend" / "sm80.py").write_text("y = 2\n")
    monkeypatch.setattr(attnc, "__file__", str(fake / "__init__.py"))
    cache_module.compiler_fingerprint.cache_clear()
    try:
        before = cache_module.compiler_fingerprint()
        (fake / "backend" / "sm80.py").write_text("y = 3\n")
        cache_module.compiler_fingerprint.cache_clear()
        assert cache_module.compiler_fingerprint() != before
    finally:
        monkeypatch.undo()
        cache_module.compiler_fingerprint.cache_clear()
    assert cache_module.compiler_fingerprint() == fingerprint


def test_key_ignores_option_order_and_spelling_of_the_options_object():
    a = cache_key(SOURCE, {"block_m": 128, "stages": 2}, "sm_80")
    assert a == cache_key(SOURCE, {"stages": 2, "block_m": 128}, "sm_80")
    assert a == cache_key(SOURCE, Options(), "sm_80")
    assert cache_key(SOURCE, None, "sm_80") == cache_key(SOURCE, {}, "sm_80")


def test_options_objects_with_their_own_key():
    class Spec:
        def __init__(self, text):
            self.text = text

        def cache_key(self):
            return self.text

    assert cache_key(SOURCE, Spec("block_m=128"), "sm_80") == cache_key(SOURCE, Spec("block_m=128"), "sm_80")
    assert cache_key(SOURCE, Spec("block_m=128"), "sm_80") != cache_key(SOURCE, Spec("block_m=64"), "sm_80")


def test_key_refuses_options_it_cannot_cover():
    with pytest.raises(TypeError, match=r"^compile option value \{1, 2\} \(set\) is not JSON; "
                                        r"the cache key cannot cover it$"):
        cache_key(SOURCE, {"warps": {1, 2}}, "sm_80")
    with pytest.raises(TypeError, match="^compile options must be a mapping, a dataclass or have "
                                        "cache_key\\(\\), got list$"):
        cache_key(SOURCE, [("block_m", 128)], "sm_80")


# -- hits and misses ----------------------------------------------------------------

def build_synthetic(calls: list | None = None):
    def build():
        if calls is not None:
            calls.append(1)
        manifest = synthetic_manifest()
        return manifest, synthetic_files(manifest)
    return build


def test_miss_put_hit(tmp_path):
    cache = KernelCache(tmp_path, enabled=True)
    key = cache_key(SOURCE, {}, "sm_80")
    assert cache.get(key) is None
    stored = cache.put(key, *build_synthetic()())
    assert stored.path == tmp_path / key[:2] / key
    hit = cache.get(key)
    assert hit is not None and hit.manifest == stored.manifest and hit.code == stored.code


def test_get_or_build_builds_once(tmp_path):
    cache, calls = KernelCache(tmp_path, enabled=True), []
    key = cache_key(SOURCE, {}, "sm_80")
    first = cache.get_or_build(key, build_synthetic(calls))
    second = cache.get_or_build(key, build_synthetic(calls))
    assert len(calls) == 1 and first.path == second.path


def test_a_broken_entry_is_a_miss_and_is_replaced(tmp_path):
    cache = KernelCache(tmp_path, enabled=True)
    key = cache_key(SOURCE, {}, "sm_80")
    cache.put(key, *build_synthetic()())
    (cache.path(key) / "manifest.json").write_text("{ truncated")
    assert cache.get(key) is None
    repaired = cache.put(key, *build_synthetic()())
    assert cache.get(key) is not None and repaired.path == cache.path(key)


def test_an_entry_whose_code_was_damaged_is_a_miss_and_is_replaced(tmp_path):
    """The manifest records each code file's sha256 (as attnc writes it): an entry whose
    cubin changed on disk is not served; the next put replaces it (found by a review: it
    was served as it was)."""
    cache = KernelCache(tmp_path, enabled=True)
    key = cache_key(SOURCE, {}, "sm_80")
    manifest = synthetic_manifest()
    files = synthetic_files(manifest)
    manifest["code_sha256"] = {kind: hashlib.sha256(files[name]).hexdigest()
                               for kind, name in manifest["code"].items()}
    cache.put(key, manifest, files)
    cubin = cache.path(key) / manifest["code"]["cubin"]
    cubin.write_bytes(b"\0" * len(files[cubin.name]))
    assert cache.get(key) is None
    cache.put(key, manifest, files)
    assert cache.get(key).code["cubin"] == files[cubin.name] == cubin.read_bytes()


def test_clear_removes_entries_and_nothing_else(tmp_path):
    cache = KernelCache(tmp_path, enabled=True)
    cache.put(cache_key(SOURCE, {}, "sm_80"), *build_synthetic()())
    (tmp_path / "notes").mkdir()
    (tmp_path / "README").write_text("mine")
    cache.clear()
    assert sorted(os.listdir(tmp_path)) == ["README", "notes"]


# -- knobs ----------------------------------------------------------------------------

def test_disabled_cache_reads_and_writes_nothing(tmp_path):
    cache, calls = KernelCache(tmp_path, enabled=False), []
    key = cache_key(SOURCE, {}, "sm_80")
    bundle = cache.get_or_build(key, build_synthetic(calls))
    cache.get_or_build(key, build_synthetic(calls))
    assert len(calls) == 2 and bundle.path is None and bundle.manifest.variant == "synthetic"
    assert os.listdir(tmp_path) == []


def test_environment_places_and_disables_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("ATTNC_DISABLE_CACHE", raising=False)
    assert KernelCache().root == tmp_path / "c" and KernelCache().enabled
    monkeypatch.setenv("ATTNC_DISABLE_CACHE", "1")
    assert not KernelCache().enabled
    monkeypatch.setenv("ATTNC_DISABLE_CACHE", "off")
    assert KernelCache().enabled


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("ATTNC_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config.cache_dir() == tmp_path / ".cache" / "attnc"


def test_a_malformed_knob_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("ATTNC_DISABLE_CACHE", "maybe")
    with pytest.raises(AttncError) as info:
        config.cache_disabled()
    assert str(info.value) == ("attnc: error: environment variable ATTNC_DISABLE_CACHE='maybe' is not a "
                               "boolean; use one of 1, true, yes, on or 0, false, no, off")


def test_an_empty_cache_dir_is_the_default(monkeypatch, tmp_path):
    """`ATTNC_CACHE_DIR=` is unset, not the current folder (found by a review)."""
    monkeypatch.setenv("ATTNC_CACHE_DIR", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config.cache_dir() == tmp_path / ".cache" / "attnc"


def test_a_cache_that_cannot_be_written_warns_and_compiles(tmp_path, capsys):
    """A cache folder that is a file (or read-only) costs the caching, not the compile."""
    (tmp_path / "afile").write_text("")
    cache = KernelCache(tmp_path / "afile")
    manifest = synthetic_manifest()
    bundle = cache.put("ab" * 32, manifest, synthetic_files(manifest))
    assert bundle.manifest.variant == "synthetic"
    assert capsys.readouterr().err.startswith(f"attnc: warning: the kernel cache at {tmp_path / 'afile'} "
                                              f"cannot be written")


def test_a_file_where_an_entry_s_folder_goes_warns_and_compiles(tmp_path, capsys):
    """The entry's shard (its key's first two digits) a file: the same warning, not a
    silent miss every time (found by a review)."""
    key = "ab" * 32
    (tmp_path / key[:2]).write_text("")
    manifest = synthetic_manifest()
    KernelCache(tmp_path).put(key, manifest, synthetic_files(manifest))
    assert capsys.readouterr().err.startswith(f"attnc: warning: the kernel cache at {tmp_path} cannot be written")


def test_knob_table_documents_every_knob():
    table = config.describe()
    assert all(f"`{k.name}`" in table for k in config.KNOBS)
    assert "| `ATTNC_CACHE_DIR` | path | `~/.cache/attnc` |" in table


# -- concurrent writers ---------------------------------------------------------------

def _writer(root: str, key: str, tag: int, barrier, results) -> None:
    manifest = synthetic_manifest()
    files = {name: f"from writer {tag}".encode() for name in synthetic_files(manifest)}
    manifest["code_sha256"] = {kind: hashlib.sha256(files[name]).hexdigest() for kind, name in manifest["code"].items()}
    barrier.wait()
    bundle = KernelCache(Path(root), enabled=True).put(key, manifest, files)
    results.put(bundle.code["cubin"])


def test_concurrent_writers_of_one_key_all_get_the_one_surviving_entry(tmp_path):
    # Spawned, not forked: a child forked from this process (MLIR and its threads loaded,
    # whatever locks they held at the fork) crashed now and then (SIGSEGV in a CI run).
    ctx = multiprocessing.get_context("spawn")
    writers, key = 6, cache_key(SOURCE, {}, "sm_80")
    barrier, results = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), key, i, barrier, results))
             for i in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0] * writers
    survivor = KernelCache(tmp_path, enabled=True).get(key)
    assert survivor is not None
    assert {results.get(timeout=5) for _ in range(writers)} == {survivor.code["cubin"]}
    assert os.listdir(tmp_path / key[:2]) == [key]           # no temporaries left behind


def test_a_writer_that_loses_the_replacement_race_takes_the_winners_entry(tmp_path, monkeypatch):
    """Two processes replace the same broken entry: the other one publishes between this
    one's two renames (found by a review: put raised 'Directory not empty' and left a
    .old- folder). Now put returns the entry there, and nothing is left behind."""
    from attnc.backend import bundle as bundle_module
    manifest = synthetic_manifest()
    files = synthetic_files(manifest)
    cache, key = KernelCache(tmp_path, enabled=True), cache_key(SOURCE, {}, "sm_80")
    entry = cache.path(key)
    write_bundle(entry, manifest, files)
    (entry / "manifest.json").write_text("{broken")            # a miss, to be replaced
    real_rename = os.rename

    def rename(src, dst):
        real_rename(src, dst)
        if ".old-" in str(dst) and not getattr(rename, "done", False):
            rename.done = True                                  # the other writer, right now
            write_bundle(entry, manifest, files, replace=False)

    monkeypatch.setattr(bundle_module.os, "rename", rename)
    assert cache.put(key, manifest, files).manifest.variant == "synthetic"
    assert rename.done and cache.get(key) is not None
    assert os.listdir(entry.parent) == [key]


def test_an_entry_replaced_while_it_is_read_is_a_miss(tmp_path, monkeypatch):
    """Another writer's replacement can remove a file between read_bundle's look and its
    read (found by a review: FileNotFoundError escaped put)."""
    from attnc.backend import cache as cache_module
    manifest = synthetic_manifest()
    cache, key = KernelCache(tmp_path, enabled=True), cache_key(SOURCE, {}, "sm_80")
    write_bundle(cache.path(key), manifest, synthetic_files(manifest))

    def vanished(path):
        raise FileNotFoundError(2, "No such file or directory", str(path / "manifest.json"))

    monkeypatch.setattr(cache_module, "read_bundle", vanished)
    assert cache.get(key) is None
