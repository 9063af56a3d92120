"""A bundle: a folder holding `manifest.json` and the code objects it names.

`read_bundle(path)` loads and validates one; `Bundle.from_files` builds the same
object from memory (the compiler's in-process path, when nothing is written).
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from attnc_runtime.errors import AttncRuntimeError, ManifestError
from attnc_runtime.manifest import Manifest, parse_manifest

MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class Bundle:
    manifest: Manifest
    code: Mapping[str, bytes]               # 'cubin' / 'ptx' -> the code object
    path: Path | None = None
    digests: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "digests", {kind: hashlib.sha256(blob).hexdigest()
                                             for kind, blob in self.code.items()})
        for kind, want in self.manifest.code_sha256.items():
            if self.digests[kind] != want:
                raise ManifestError(f"{self.manifest.code[kind]}: its sha256 is {self.digests[kind]}, but "
                                    f"the manifest's code_sha256.{kind} is {want}: the file was changed "
                                    f"or damaged after it was compiled")

    @functools.cached_property
    def images(self) -> Mapping[str, bytes]:
        """The code objects as cuModuleLoadData takes them: PTX as a NUL-terminated string."""
        return {kind: blob + b"\0" if kind == "ptx" and not blob.endswith(b"\0") else blob
                for kind, blob in self.code.items()}

    @classmethod
    def from_files(cls, manifest: Mapping[str, Any], files: Mapping[str, bytes],
                   path: Path | None = None) -> "Bundle":
        """Validate `manifest` and pick its code objects out of `files` (file name -> bytes)."""
        parsed = parse_manifest(manifest)
        return cls(parsed, {kind: _code_file(files.get(name), kind, name)
                            for kind, name in parsed.code.items()}, path)


def read_bundle(path: str | Path) -> Bundle:
    path = Path(path)
    manifest_path = path / MANIFEST_NAME
    if not manifest_path.is_file():
        raise AttncRuntimeError(f"{path}: not a bundle (no {MANIFEST_NAME})")
    try:
        raw = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ManifestError(f"{manifest_path}: not valid JSON: {e}") from None
    try:
        manifest = parse_manifest(raw)
        code = {kind: _code_file(_read(path / name), kind, name) for kind, name in manifest.code.items()}
        return Bundle(manifest, code, path)
    except ManifestError as e:
        raise ManifestError(f"{path}: {e}") from None


def _read(file: Path) -> bytes | None:
    return file.read_bytes() if file.is_file() else None


def _code_file(blob: bytes | None, kind: str, name: str) -> bytes:
    if blob is None:
        raise ManifestError(f"manifest: code.{kind}: {name!r} is not in the bundle")
    return bytes(blob)
