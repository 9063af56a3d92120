"""The kernel cache: a second compile of the same thing is a folder lookup.

The key is a sha256 over everything that changes the code (design.md section 5):
the source text, the compile options, the target, the compiler version and the
bundle format. The compiler version is the release plus a digest of the compiler's
own source files (`compiler_fingerprint()`): a code generator changed without a version
bump (any development checkout) must not be served the kernels of the old one. An entry
is a bundle folder, `<root>/<key[:2]>/<key>/`, written with `write_bundle(replace=False)`
(Note [Atomic bundle writes]): concurrent writers of one key all succeed and one folder
survives; a reader never sees half an entry. An entry that no longer validates is a miss,
and is replaced.

    cache = KernelCache()                     # ATTNC_CACHE_DIR, ATTNC_DISABLE_CACHE
    key = cache_key(source, options, "sm_80")
    bundle = cache.get_or_build(key, lambda: compile_to_files(...))  # -> (manifest, files)

Disabled, the cache reads and writes nothing: `get` misses, `put` returns the
bundle in memory.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import attnc
from attnc import config
from attnc.backend.bundle import FORMAT, Bundle, read_bundle, write_bundle
from attnc_runtime.errors import AttncRuntimeError

_SHARD = re.compile(r"[0-9a-f]{2}")
WARNINGS_FILE = "warnings.txt"          # beside an entry's bundle files; no code file has the name
_WARNING_SEPARATOR = "\0"               # a rendered warning is text of several lines, never a NUL

BuildResult = tuple[Mapping[str, Any], Mapping[str, bytes]]     # (manifest, files)


@functools.lru_cache(maxsize=None)
def compiler_fingerprint() -> str:
    """attnc's release and a digest of every source file of the package (Python, the
    grammar, the IRDL dialect): what the cache keys call the compiler."""
    root = Path(attnc.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".lark", ".mlir") and p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{attnc.__version__}+{digest.hexdigest()[:16]}"


@functools.lru_cache(maxsize=1)
def toolchain() -> dict[str, str | None]:
    """What besides attnc makes the code: the MLIR bindings that emit the PTX, nvJitLink,
    and the ptxas of whole-program assembly, or None where there is none (without it a
    kernel that sets its registers is assembled by nvJitLink and spills, Note
    [Whole-program assembly] in cubin.py, and so is an sm_80 kernel that ptxas would
    assemble with fewer spills, Note [The assembly that spills less]). Found by a review: a cubin built without ptxas
    was served from the cache after ptxas was installed. Kept in the cache folder between
    runs (Note [Toolchain memo])."""
    stamp = _toolchain_stamp()
    memo = _read_toolchain_memo(stamp)
    if memo is not None:
        return memo
    found = _ask_toolchain()
    _write_toolchain_memo(stamp, found)
    return found


# Note [Toolchain memo]: asking the toolchain's versions costs about as much as the rest
# of a cache hit (importlib.metadata, a `ptxas --version` process), so the answer is kept in
# `<cache>/toolchain.json` with a stamp of what it was read from, and used while the stamp
# holds. The versions come from the distributions' `*.dist-info` folders in sys.path's
# directories, which pip adds, removes or renames on every install, upgrade or removal,
# changing the directory's mtime; and from the ptxas binary that whole_program_ptxas finds,
# another one being another path, or the same path with another mtime, size or inode. So the
# stamp is sys.path with each directory's mtime, and ptxas's path and stat. A change made
# within the same clock tick as the stamp's reading would not show in it (git's "racily
# clean" files): no memo is written while a stamped time is less than two seconds old.
TOOLCHAIN_MEMO = "toolchain.json"
_RACY_NS = 2_000_000_000


def _toolchain_stamp() -> dict[str, Any]:
    from attnc.backend.cubin import whole_program_ptxas

    def stat(path: str) -> list[int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return [st.st_mtime_ns, st.st_size, st.st_ino]

    ptxas = whole_program_ptxas()
    return {"sys.path": [[entry, stat(entry or ".")] for entry in sys.path],
            "ptxas": [ptxas, stat(ptxas) if ptxas else None]}


def _memo_path() -> Path | None:
    return None if config.cache_disabled() else config.cache_dir() / TOOLCHAIN_MEMO


def _read_toolchain_memo(stamp: dict[str, Any]) -> dict[str, str | None] | None:
    path = _memo_path()
    try:
        memo = json.loads(path.read_text(encoding="utf-8")) if path is not None else None
    except (OSError, ValueError):
        return None
    if not isinstance(memo, dict) or memo.get("stamp") != stamp or not isinstance(memo.get("toolchain"), dict):
        return None
    return memo["toolchain"]


def _write_toolchain_memo(stamp: dict[str, Any], found: dict[str, str | None]) -> None:
    path = _memo_path()
    times = [st[0] for _, st in [*stamp["sys.path"], stamp["ptxas"]] if st is not None]
    if path is None or any(time.time_ns() - t < _RACY_NS for t in times):
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"stamp": stamp, "toolchain": found}, f)
        os.replace(tmp, path)
    except OSError:
        pass            # a cache folder that cannot be written costs the memo, not the compile


def _ask_toolchain() -> dict[str, str | None]:
    import importlib.metadata
    import subprocess

    from attnc.backend.cubin import whole_program_ptxas

    def version(distribution: str) -> str | None:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    ptxas = whole_program_ptxas()
    if ptxas is not None:
        try:
            ptxas = f"{ptxas}: " + subprocess.run([ptxas, "--version"], capture_output=True, text=True,
                                                  timeout=30).stdout.strip().splitlines()[-1]
        except (OSError, subprocess.SubprocessError, IndexError):
            ptxas = f"{ptxas}: no version"
    return {"mlir": version("xtc-mlir-python-bindings"), "nvjitlink": version("nvidia-nvjitlink"),
            "ptxas": ptxas}


def cache_key(source: str, options: Any, target: str, compiler_version: str | None = None) -> str:
    """sha256 of the canonical JSON of what determines the code.

    `options` is a mapping or a dataclass of JSON values (key order does not
    matter), or an object with its own `cache_key() -> str` (a frozen options
    object); anything else is a `TypeError`, since a key
    that silently ignored an option would serve stale kernels.
    """
    if callable(getattr(options, "cache_key", None)):
        options = {"cache_key": options.cache_key()}
    elif dataclasses.is_dataclass(options) and not isinstance(options, type):
        options = dataclasses.asdict(options)
    elif options is None:
        options = {}
    elif not isinstance(options, Mapping):
        raise TypeError(f"compile options must be a mapping, a dataclass or have cache_key(), "
                        f"got {type(options).__name__}")
    payload = {"format": FORMAT, "compiler": compiler_version or compiler_fingerprint(), "target": target,
               "toolchain": toolchain(), "options": dict(options), "source": source}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=_not_json)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _not_json(value: Any):
    raise TypeError(f"compile option value {value!r} ({type(value).__name__}) is not JSON; "
                    "the cache key cannot cover it")


class KernelCache:
    def __init__(self, root: str | Path | None = None, enabled: bool | None = None):
        self.root = Path(root) if root is not None else config.cache_dir()
        self.enabled = (not config.cache_disabled()) if enabled is None else enabled

    def path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> Bundle | None:
        """The cached bundle of `key`, or None (a miss, a disabled cache or a broken entry)."""
        if not self.enabled:
            return None
        entry = self.path(key)
        if not entry.is_dir():
            return None
        try:
            return read_bundle(entry)
        except (AttncRuntimeError, OSError):    # broken, or replaced while read (another writer)
            return None

    def warnings(self, key: str) -> list[str]:
        """The warnings stored with the entry of `key` (`put`), one rendered warning each."""
        try:
            text = (self.path(key) / WARNINGS_FILE).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return []
        return text.split(_WARNING_SEPARATOR) if text else []

    def put(self, key: str, manifest: Mapping[str, Any], files: Mapping[str, bytes], *,
            warnings: Sequence[str] = ()) -> Bundle:
        """Store a bundle under `key`, with the compile's `warnings` (the frontend's, which a
        hit prints again); when another writer got there first, theirs is returned."""
        if not self.enabled:
            return Bundle.from_files(manifest, files)
        entry = self.path(key)
        if warnings:
            files = {**files, WARNINGS_FILE: _WARNING_SEPARATOR.join(warnings).encode("utf-8")}
        try:
            return write_bundle(entry, manifest, files, replace=False)
        except FileExistsError:
            pass
        except OSError as e:
            return self._unwritable(e, manifest, files)
        existing = self.get(key)
        if existing is not None:
            return existing
        try:
            return write_bundle(entry, manifest, files, replace=True, owned=True)   # the entry there was broken
        except OSError as e:
            # Another writer published the entry between the two renames of the replacement
            # (found by a review): theirs is the entry, if it reads back. Else the entry's
            # folder cannot be made (a file where it goes).
            return self.get(key) or self._unwritable(e, manifest, files)

    def _unwritable(self, e: OSError, manifest, files) -> Bundle:
        """A cache that cannot be written (a file, a read-only home) costs the caching, not
        the compile."""
        print(f"attnc: warning: the kernel cache at {self.root} cannot be written ({e.strerror or e}); "
              f"compiling without it (set ATTNC_CACHE_DIR to a writable folder, or ATTNC_DISABLE_CACHE=1)",
              file=sys.stderr)
        return Bundle.from_files(manifest, files)

    def get_or_build(self, key: str, build: Callable[[], BuildResult]) -> Bundle:
        bundle = self.get(key)
        if bundle is not None:
            return bundle
        manifest, files = build()
        return self.put(key, manifest, files)

    def clear(self) -> None:
        """Remove every entry (and any temporary folder a crashed writer left)."""
        if self.root.is_dir():
            for child in self.root.iterdir():
                if child.is_dir() and _SHARD.fullmatch(child.name):     # never anything else there
                    shutil.rmtree(child, ignore_errors=True)
