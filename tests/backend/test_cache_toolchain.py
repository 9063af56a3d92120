"""The toolchain the cache keys name, kept between runs in the cache folder under a stamp
of what it was read from (Note [Toolchain memo] in attnc/backend/cache.py): used while
the stamp holds, asked again when sys.path's directories or the ptxas binary change,
never written while a stamped time is too recent to tell a later change from it; and an
entry's warnings, kept for a hit to print."""
from __future__ import annotations

import json
import os
import time

import pytest

from attnc.backend import cache as cache_module
from attnc.backend.cache import TOOLCHAIN_MEMO, KernelCache, toolchain
from attnc_runtime.testing import synthetic_files, synthetic_manifest

OLD = time.time() - 3600


@pytest.fixture
def asked(monkeypatch, tmp_path):
    """Counts how often the toolchain is asked; a fake ptxas and a stamp of old times."""
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path / "cache"))
    ptxas = tmp_path / "ptxas"
    ptxas.write_text("#!/bin/sh\n")
    os.utime(ptxas, (OLD, OLD))
    monkeypatch.setattr("attnc.backend.cubin.whole_program_ptxas", lambda: str(ptxas))
    monkeypatch.setattr("sys.path", [str(tmp_path / "lib")])
    (tmp_path / "lib").mkdir()
    os.utime(tmp_path / "lib", (OLD, OLD))
    calls = []

    def ask():
        calls.append(1)
        return {"mlir": "1.0", "nvjitlink": "13.0", "ptxas": f"{ptxas}: V{len(calls)}"}
    monkeypatch.setattr(cache_module, "_ask_toolchain", ask)
    toolchain.cache_clear()
    yield calls
    toolchain.cache_clear()


def fresh_process_toolchain():
    toolchain.cache_clear()
    return toolchain()


def test_the_toolchain_is_asked_once_and_then_read_from_the_memo(asked, tmp_path):
    first = fresh_process_toolchain()
    assert asked == [1] and (tmp_path / "cache" / TOOLCHAIN_MEMO).is_file()
    assert fresh_process_toolchain() == first and asked == [1]


def test_another_ptxas_binary_is_asked_again(asked, tmp_path):
    fresh_process_toolchain()
    (tmp_path / "ptxas").write_text("#!/bin/sh\n# another release\n")
    os.utime(tmp_path / "ptxas", (OLD + 1, OLD + 1))
    assert fresh_process_toolchain()["ptxas"].endswith("V2")


def test_an_install_in_a_sys_path_directory_is_asked_again(asked, tmp_path):
    fresh_process_toolchain()
    (tmp_path / "lib" / "nvidia_nvjitlink-13.1.dist-info").mkdir()
    os.utime(tmp_path / "lib", (OLD + 1, OLD + 1))
    fresh_process_toolchain()
    assert asked == [1, 1]


def test_no_memo_is_written_while_a_stamped_time_is_recent(asked, tmp_path):
    os.utime(tmp_path / "ptxas")            # now: a change in the same clock tick would not show
    fresh_process_toolchain()
    assert not (tmp_path / "cache" / TOOLCHAIN_MEMO).exists()
    fresh_process_toolchain()
    assert asked == [1, 1]


def test_a_damaged_memo_is_asked_again(asked, tmp_path):
    fresh_process_toolchain()
    (tmp_path / "cache" / TOOLCHAIN_MEMO).write_text("{not json")
    assert fresh_process_toolchain()["ptxas"].endswith("V2")
    assert json.loads((tmp_path / "cache" / TOOLCHAIN_MEMO).read_text())["toolchain"]["ptxas"].endswith("V2")


def test_a_disabled_cache_keeps_no_memo(asked, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNC_DISABLE_CACHE", "1")
    fresh_process_toolchain()
    fresh_process_toolchain()
    assert asked == [1, 1] and not (tmp_path / "cache").exists()


def test_an_entry_keeps_the_warnings_of_its_compile(tmp_path):
    cache = KernelCache(tmp_path)
    key = "ab" + "0" * 62
    warnings = ["v.attn:2:3: warning: dim 'P' is declared but never used\n  dim P\n  ^", "second"]
    manifest = synthetic_manifest()
    cache.put(key, manifest, synthetic_files(manifest), warnings=warnings)
    assert cache.get(key) is not None and cache.warnings(key) == warnings
    other = "cd" + "0" * 62
    cache.put(other, manifest, synthetic_files(manifest))
    assert cache.warnings(other) == []
