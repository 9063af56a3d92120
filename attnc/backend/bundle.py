"""Writing bundles: `manifest.json` plus the code objects it names, atomically.

The schema, its validation and reading belong to the runtime
(`attnc_runtime.manifest`, `attnc_runtime.bundle`): the compiler writes exactly
what the runtime reads, checked by the same code. This module adds what only
the compiler does -- describe a `Variant`'s tensors in manifest terms, name the
code files, and write a folder so that it appears whole or not at all.

    manifest = variant_manifest(variant, target="sm_80", kernels=[...],
                                code=code_files("attn_fwd", "sm_80"),
                                blobs={"cubin": cubin, "ptx": ptx}, specialization={...})
    write_bundle("out/gemma2", manifest, {"attn_fwd.sm_80.cubin": cubin,
                                          "attn_fwd.compute_80.ptx": ptx})

Note [Kernel symbols]: a kernel's symbol is `attnc_<variant>_<kernel>`, and LLVM names
each of its parameters `<symbol>_param_<n>` in the PTX. The variant's name is the
user's, of any length the grammar takes, and nvJitLink corrupts its heap on identifiers
of some 100,000 characters (the process aborts). So a name longer than
`SYMBOL_NAME_CHARS` enters the symbol as its first characters and a digest of the whole:
bounded, still a PTX identifier, and distinct for distinct names. The manifest keeps the
user's name under "variant" and each kernel's symbol beside it: the runtime looks a
kernel up by the manifest's symbol, never by the variant's name.

Note [Atomic bundle writes]: a bundle is written into a fresh temporary folder
next to its destination (same filesystem) and renamed into place; a reader sees
either no folder or a complete one. `replace=False` is first-writer-wins (the
kernel cache's use: two processes compiling the same thing both succeed and one
folder survives); `replace=True` swaps an existing folder out by two renames.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Mapping, Sequence

import attnc
from attnc_runtime.bundle import MANIFEST_NAME, Bundle, read_bundle
from attnc_runtime.manifest import FORMAT, Manifest, parse_manifest, source_sha256

__all__ = ["FORMAT", "MANIFEST_NAME", "Bundle", "code_files", "kernel_symbol", "read_bundle",
           "symbol_stem", "validate_manifest", "variant_manifest", "write_bundle"]

SYMBOL_NAME_CHARS = 64      # the most of a variant's name a symbol holds (Note [Kernel symbols])
_DIGEST_CHARS = 16


def symbol_stem(variant_name: str) -> str:
    """The variant's name as it enters symbols and default file names: itself when short,
    else its first characters and a digest of the whole (Note [Kernel symbols])."""
    if len(variant_name) <= SYMBOL_NAME_CHARS and variant_name.isascii() and variant_name.isidentifier():
        return variant_name
    digest = hashlib.sha256(variant_name.encode("utf-8")).hexdigest()[:_DIGEST_CHARS]
    prefix = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_"
                     for c in variant_name[:SYMBOL_NAME_CHARS - _DIGEST_CHARS - 1])
    return f"{prefix}_{digest}"


def kernel_symbol(variant_name: str, kernel: str) -> str:
    """The PTX/cubin symbol of `variant_name`'s `kernel` ("fwd", "blockmap", "qtiles")."""
    return f"attnc_{symbol_stem(variant_name)}_{kernel}"


def validate_manifest(manifest: Mapping[str, Any]) -> Manifest:
    """The parsed manifest, or `ManifestError` naming the field at fault."""
    return parse_manifest(manifest)


def code_files(stem: str, target: str) -> dict[str, str]:
    """The conventional code file names: `attn_fwd.sm_80.cubin`, `attn_fwd.compute_80.ptx`."""
    return {"cubin": f"{stem}.{target}.cubin", "ptx": f"{stem}.{target.replace('sm_', 'compute_')}.ptx"}


def variant_manifest(variant, *, target: str, kernels: Sequence[Mapping[str, Any]],
                     code: Mapping[str, str], blobs: Mapping[str, bytes],
                     specialization: Mapping[str, Any] | None = None,
                     constraints: Sequence[Sequence[Any]] = ()) -> dict[str, Any]:
    """A validated manifest for a checked `attnc.frontend.Variant`.

    `code` names each code object's file and `blobs` gives its bytes (kind -> bytes), whose
    sha256 the manifest records. The tensors, dims, source and hash come from the variant; GQA adds
    ["divisible", H, HKV]; `constraints` adds the kernel's own (e.g. ["equal", "M", "N"]).
    """
    manifest = {
        "format": FORMAT,
        "compiler": {"name": "attnc", "version": attnc.__version__},
        "variant": variant.name,
        "source_sha256": source_sha256(variant.source),
        "source": variant.source,
        "target": target,
        "code": dict(code),
        "code_sha256": {kind: hashlib.sha256(blobs[kind]).hexdigest() for kind in code},
        "dims": list(variant.dims),
        "inputs": [_tensor(t) for t in variant.inputs],
        "outputs": [_tensor(t) for t in variant.outputs],
        "constraints": _gqa_constraints(variant) + [list(c) for c in constraints],
        "kernels": [dict(k) for k in kernels],
        "specialization": dict(specialization or {}),
    }
    parse_manifest(manifest)
    return manifest


def _tensor(t) -> dict[str, Any]:
    return {"name": t.name, "role": t.role, "dtype": t.dtype, "shape": list(t.shape)}


def _gqa_constraints(variant) -> list[list[Any]]:
    heads, heads_kv = variant.heads, variant.heads_kv
    if heads == heads_kv or heads_kv == 1 or (isinstance(heads, int) and isinstance(heads_kv, int)):
        return []       # nothing to check at run time (sema checked two numbers)
    return [["divisible", heads, heads_kv]]


def write_bundle(path: str | Path, manifest: Mapping[str, Any], files: Mapping[str, bytes], *,
                 replace: bool = True, owned: bool = False) -> Bundle:
    """Validate and write a bundle folder atomically (see Note [Atomic bundle writes]).

    `files` maps file names to contents: every code object the manifest names,
    plus any others worth keeping beside them (e.g. a ptxas report; such a bundle is
    then not replaced without `owned`: only files its manifest names are). With
    `replace=False` an existing bundle at `path` is kept and `FileExistsError` raised;
    anything else at `path` (a file, a folder that is not empty and holds no attnc
    manifest) is never replaced, `FileExistsError` too, unless the caller says it `owned`
    the path (the kernel cache, replacing a broken entry of its own).
    """
    path = Path(os.path.abspath(path))      # "." and ".." by their names
    if path.exists() and not owned and not _replaceable(path):
        raise FileExistsError(f"'{path}' exists and is not an attnc bundle, or holds other files too: "
                              f"not replacing it")
    bundle = Bundle.from_files(manifest, files, path)
    for name in files:
        if name in ("", ".", "..", MANIFEST_NAME) or "/" in name or os.sep in name:
            raise ValueError(f"bundle file name {name!r} is not a plain file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        tmp.chmod(0o755)            # mkdtemp makes it private; a bundle is for anyone to load
        for name, blob in files.items():
            _write_synced(tmp / name, bytes(blob))
        _write_synced(tmp / MANIFEST_NAME, (json.dumps(manifest, indent=2) + "\n").encode("utf-8"))
        _publish(tmp, path, replace)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)      # gone already when the rename succeeded
    return bundle


def _write_synced(file: Path, data: bytes) -> None:
    # fsync before the rename: otherwise a crash can leave a published folder of empty files.
    with open(file, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _replaceable(path: Path) -> bool:
    """Whether `path` may give way to a bundle: an empty folder, or one whose manifest
    says attnc wrote it and that holds nothing but that manifest and the code files it
    names (a user's folder or file never is; nor is a bundle the user put files in)."""
    if not path.is_dir() or path.is_symlink():
        return False
    if not any(path.iterdir()):
        return True
    try:
        manifest = json.loads((path / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or not isinstance(manifest.get("compiler"), dict) \
            or manifest["compiler"].get("name") != "attnc":
        return False
    code = manifest.get("code")
    ours = {MANIFEST_NAME, *(code.values() if isinstance(code, dict) else ())}
    return all(entry.name in ours and entry.is_file() and not entry.is_symlink() for entry in path.iterdir())


def _publish(tmp: Path, path: Path, replace: bool) -> None:
    try:
        os.rename(tmp, path)        # atomic; fails when `path` is a non-empty folder
        return
    except OSError:
        if not path.exists():
            raise
    if not replace:
        raise FileExistsError(f"bundle {path} already exists")
    old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex}")
    os.rename(path, old)
    try:
        os.rename(tmp, path)
    except OSError:
        try:
            os.rename(old, path)    # put the previous bundle back rather than lose both
        except OSError:             # another writer's bundle took the place: it stays
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink()
