"""What a compile writes (`--emit`): the IR text, or the kernel's code -- its PTX, its
cubin, or the bundle (manifest and code files) -- to a file, a folder or standard output.
A kernel cache hit writes through here too, so nothing here imports MLIR."""
from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from attnc.errors import AttncError


def write_output(text: str, out: Path | None) -> None:
    """IR text to `out`, or to standard output when there is none."""
    text += "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        _write_atomically(out, text)


@dataclass(frozen=True)
class Code:
    """A compiled kernel's bundle: its manifest and files (file name -> bytes)."""
    manifest: dict
    files: dict

    def _kind(self, kind: str) -> bytes:
        return self.files[self.manifest["code"][kind]]

    @property
    def ptx(self) -> str:
        return self._kind("ptx").decode()

    @property
    def cubin(self) -> bytes:
        return self._kind("cubin")


def emit_ptx(code: Code, out: Path | None) -> None:
    """The bundle's PTX byte for byte (the manifest's sha256 of it holds for the file)."""
    if out is None:
        sys.stdout.write(code.ptx)
    else:
        _write_atomically(out, code.ptx)


def emit_cubin(code: Code, out: Path | None) -> None:
    if out is None:
        raise AttncError("--emit cubin writes a binary: give the file with -o", filename="attnc")
    _write_atomically(out, code.cubin)


def emit_bundle(code: Code, out: Path | None) -> None:
    from attnc.backend.bundle import symbol_stem, write_bundle
    # a name too long for a file name is cut as the kernels' symbols are (Note [Kernel symbols])
    path = out or Path(f"{symbol_stem(code.manifest['variant'])}.{code.manifest['target']}")
    try:
        write_bundle(path, code.manifest, code.files)
    except OSError as e:
        if e.errno is None:                     # write_bundle's own refusal, which says why
            reason = str(e)
        elif e.filename and Path(e.filename).is_file():     # a folder on the way is a file
            reason = f"'{e.filename}' is a file, not a folder"
        else:
            reason = e.strerror or str(e)
        raise AttncError(f"cannot write the bundle '{path}': {reason}", filename="attnc") from None
    print(f"wrote {path}/: " + ", ".join(["manifest.json", *sorted(code.files)]))


# kind -> writer(code, out); `--emit mlir` writes the IR, not code.
CODE_EMITTERS: dict[str, Callable[[Code, Path | None], None]] = {
    "ptx": emit_ptx,
    "cubin": emit_cubin,
    "bundle": emit_bundle,
}
EMIT_KINDS = ("mlir", *CODE_EMITTERS)
CUBIN_KINDS = ("cubin", "bundle")          # the kinds whose code is assembled


def write_code(code: Code, emit: str, out: Path | None, *, resources: bool = False) -> None:
    """`code` written as `--emit` asks (ptx, cubin or bundle); with `resources`
    (--resource-usage), then each kernel's line of what the assembler reported for it in
    the cubin (the manifest's `resources`), on standard error."""
    CODE_EMITTERS[emit](code, out)
    if resources:
        for kernel in code.manifest["kernels"]:
            print(resource_line(kernel), file=sys.stderr)


def resource_line(kernel: dict) -> str:
    """One kernel's resources as --resource-usage prints them."""
    threads = kernel["block"][0] * kernel["block"][1] * kernel["block"][2]
    r = kernel.get("resources")
    used = (f"{r['registers']} registers a thread, {r['spill_stores']} bytes of spill stores and "
            f"{r['spill_loads']} of spill loads, a {r['stack_frame']}-byte stack frame"
            if r is not None else "no assembler report")
    return (f"attnc: {kernel['symbol']}: {used}; {threads} threads a CTA, "
            f"{kernel['dynamic_smem_bytes']} bytes of dynamic shared memory")


def build_code(result, emit: str = "bundle") -> Code:
    """The code of a compiled module from its target's backend: for `--emit ptx`, no cubin."""
    from attnc.backend.lowering import require_plan
    from attnc.ir import attention_ops, get_str
    ops = attention_ops(result.module)
    if not ops:
        raise AttncError("the module holds no attention op to generate code from (a pass removed it?): "
                         "--emit mlir shows what the passes left", filename="attnc")
    if "target" not in ops[0].attributes:
        require_plan(result.module)
    target = get_str(ops[0], "target")
    from attnc.passes.pipelines import LOWERING
    if target not in LOWERING:
        raise AttncError(f"code generation for {target} is not built yet: --emit mlir shows its "
                         f"plan; -arch {' and -arch '.join(LOWERING)} produce PTX, cubins and bundles",
                         filename="attnc")
    from attnc.backend.lowering import build
    art = build(result, cubin=emit != "ptx")
    return Code(art.manifest, art.files)


def _write_atomically(path: Path, text: str | bytes) -> None:
    """Write `text` to `path` through a temporary file renamed over it, so a failure
    leaves no half file; the file gets the mode a plain `open` would give it (the old
    file's, or 0666 less the umask). What is not a regular file (/dev/null, a pipe) or
    is a symbolic link is written through instead, as a shell's `>` would: renaming over
    it would replace the device, the pipe or the link."""
    mode = "wb" if isinstance(text, bytes) else "w"
    tmp = None
    try:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            with open(path, mode) as f:
                f.write(text)
            return
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, mode) as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise AttncError(f"cannot write '{path}': {e.strerror}", filename="attnc") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
