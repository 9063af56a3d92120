"""The `attnc` command (also `python -m attnc`).

    attnc check FILE
    attnc compile FILE -arch {sm_80,sm_90a,sm_100a} --emit {mlir,ptx,cubin,bundle} [-o OUT]
          [--print-ir-after-all] [--dump-dir DIR] [--pass-pipeline TEXT] [--load-pass FILE]
    attnc opt FILE.mlir [-arch ...] [--pass-pipeline TEXT] [-o OUT] [--print-ir-after-all]
          [--dump-dir DIR] [--load-pass FILE]     # re-run passes on saved IR
    attnc passes [--load-pass FILE]

Every user mistake is an `AttncError`, printed as `file:line:col: error: ...` with
the source line and a caret, exit status 1. Anything else is a compiler bug: one
line saying so (the traceback with ATTNC_DEBUG=1), exit status 70 (EX_SOFTWARE)
-- never a raw Python traceback. Usage mistakes are argparse's: exit status 2.
Standard output closed by its reader (`attnc passes | head -1`) stops the command
quietly with exit status 141, what a shell reports for a Unix tool that SIGPIPE
ended (128 + 13): a pipeline's status stays `head`'s, and `set -o pipefail` still
sees that attnc did not finish.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from attnc import config
from attnc.errors import AttncError

EXIT_ERROR, EXIT_ICE = 1, 70
EXIT_PIPE = 128 + signal.SIGPIPE         # standard output closed by its reader

DEBUG = config.DEBUG


# --- what `--emit` produces -------------------------------------------------------------
@dataclass(frozen=True)
class Unavailable:
    """An --emit kind whose backend has not landed: a clear error, before compiling."""
    what: str

    def message(self, kind: str) -> str:
        return f"--emit {kind} is not available yet: it needs {self.what}; --emit mlir works"


def emit_mlir(result, out: Path | None) -> None:
    write_output(result.text, out)


def write_output(text: str, out: Path | None) -> None:
    """IR text to `out`, or to standard output when there is none."""
    text += "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        _write_atomically(out, text)


def emit_ptx(result, out: Path | None) -> None:
    write_output(_code(result).ptx, out)


def emit_cubin(result, out: Path | None) -> None:
    if out is None:
        raise AttncError("--emit cubin writes a binary: give the file with -o", filename="attnc")
    _write_atomically(out, _code(result).cubin)


def emit_bundle(result, out: Path | None) -> None:
    from attnc.backend.bundle import symbol_stem, write_bundle
    code = _code(result)
    # a name too long for a file name is cut as the kernels' symbols are (Note [Kernel symbols])
    path = out or Path(f"{symbol_stem(result.variant.name)}.{code.manifest['target']}")
    try:
        write_bundle(path, code.manifest, code.files)
    except OSError as e:
        reason = str(e) if isinstance(e, FileExistsError) else e.strerror or str(e)
        raise AttncError(f"cannot write the bundle '{path}': {reason}", filename="attnc") from None
    print(f"wrote {path}/: " + ", ".join(["manifest.json", *sorted(code.files)]))


@dataclass(frozen=True)
class _Code:
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


def _code(result) -> _Code:
    """The code of a compiled module from its target's backend, through the kernel cache.

    The key is the final IR (it holds the source, the options and every pass's
    decisions), the target and the compiler version: a repeated compile of the same
    thing skips kernel generation, PTX and nvJitLink."""
    from attnc.backend.sm80_lower import require_plan
    from attnc.ir import attention_ops, get_str
    ops = attention_ops(result.module)
    if ops and "target" not in ops[0].attributes:
        require_plan(result.module)
    target = get_str(ops[0], "target") if ops else None
    from attnc.passes.pipelines import LOWERING
    if target not in LOWERING:
        raise AttncError(f"code generation for {target} is not built yet: --emit mlir shows its "
                         f"plan; -arch {' and -arch '.join(LOWERING)} produce PTX, cubins and bundles",
                         filename="attnc")
    from attnc.backend.cache import KernelCache, cache_key
    cache = KernelCache()
    key = cache_key(result.text, {"backend": "sm80"}, target)
    hit = cache.get(key)
    if hit is not None:
        # on stderr: `-o -` keeps standard output for the code
        print(f"attnc: note: served from the kernel cache ({cache.path(key)}); ATTNC_DISABLE_CACHE=1 "
              f"builds it again", file=sys.stderr)
        # the bytes the cache checked against the manifest's digests, not the files read again
        manifest = dict(hit.manifest.raw)
        return _Code(manifest, {manifest["code"][kind]: blob for kind, blob in hit.code.items()})
    from attnc.backend.sm80_lower import build
    art = build(result)
    cache.put(key, art.manifest, art.files)
    return _Code(art.manifest, art.files)


# kind -> writer(result, out) or Unavailable.
EMITTERS: dict[str, Callable | Unavailable] = {
    "mlir": emit_mlir,
    "ptx": emit_ptx,
    "cubin": emit_cubin,
    "bundle": emit_bundle,
}


# --- commands ---------------------------------------------------------------------------
def cmd_check(args) -> int:
    from attnc.frontend import load, read_source
    variant = load(read_source(args.file), args.file)
    _print_warnings(variant)
    print(summary(variant))
    return 0


def _print_warnings(variant) -> None:
    for warning in variant.warnings:
        print(warning.render(), file=sys.stderr)


def cmd_compile(args) -> int:
    from attnc.driver import CompileOptions, check_target, compile_variant
    from attnc.frontend import load, read_source
    emitter = EMITTERS[args.emit]
    if isinstance(emitter, Unavailable):
        raise AttncError(emitter.message(args.emit), filename="attnc")
    options = CompileOptions(arch=args.arch, pass_pipeline=args.pass_pipeline,
                             load_passes=tuple(args.load_pass),
                             print_ir_after_all=args.print_ir_after_all, dump_dir=args.dump_dir)
    _check_output_is_not_input(args)
    variant = load(read_source(args.file), args.file)
    _print_warnings(variant)                    # before any pass may fail
    result = compile_variant(variant, options)
    check_target(result, args.arch)
    emitter(result, Path(args.output) if args.output else None)
    return 0


def _check_output_is_not_input(args) -> None:
    """-o naming the input (or a folder holding it, for a bundle) would overwrite the
    source: refused before anything is compiled."""
    if not args.output:
        return
    source, out = Path(args.file), Path(args.output)
    try:
        same = out.exists() and source.exists() and (os.path.samefile(source, out) or (
            out.is_dir() and source.resolve().is_relative_to(out.resolve())))
    except OSError:
        same = False
    if same:
        what = "is the input file" if not out.is_dir() else "holds the input file"
        raise AttncError(f"-o {args.output} {what}: give another output", filename="attnc")


def _check_dump_dir_keeps_input(args) -> None:
    """--dump-dir first removes the NN-*.mlir files an earlier run left in the folder;
    the input among them (a dump being edited and run again) would be lost: refused
    (found by a review)."""
    if not args.dump_dir:
        return
    source = Path(args.file)
    try:
        inside = source.is_file() and source.resolve().parent == Path(args.dump_dir).resolve()
    except OSError:
        inside = False
    if inside and source.match("[0-9][0-9]-*.mlir"):
        raise AttncError(f"--dump-dir {args.dump_dir} holds the input {args.file}, which the dump would "
                         f"remove with the earlier run's files: copy the input elsewhere, or give another "
                         f"--dump-dir", filename="attnc")


def cmd_opt(args) -> int:
    from attnc.driver import CompileOptions, optimize_mlir
    from attnc.frontend import read_source
    options = CompileOptions(arch=args.arch, pass_pipeline=args.pass_pipeline,
                             load_passes=tuple(args.load_pass),
                             print_ir_after_all=args.print_ir_after_all, dump_dir=args.dump_dir)
    _check_output_is_not_input(args)
    _check_dump_dir_keeps_input(args)
    text = _decode(read_source(args.file), args.file)
    _check_not_attn_source(args.file, text)
    module = optimize_mlir(text, args.file, options, arch_given=args.arch is not None)
    from attnc.ir import to_text
    write_output(to_text(module), Path(args.output) if args.output else None)
    return 0


# A `.attn` source: its comments, then `attention NAME` (MLIR text starts otherwise).
_ATTN_SOURCE = re.compile(r"\ufeff?(?:\s*#[^\n]*\n)*\s*attention\s+\w")


def _check_not_attn_source(filename: str, text: str) -> None:
    """`attnc opt` on a variant's source would fail in MLIR's parser at its first word:
    said for what it is, with the command that takes it."""
    if not _ATTN_SOURCE.match(text):
        return
    raise AttncError(f"this is an .attn source, not MLIR: compile it with `attnc compile {filename}` "
                     f"(with --emit mlir it prints the IR that `attnc opt` takes)", filename=filename)


def _decode(data: bytes, filename: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttncError("the file is not UTF-8 text", filename=filename) from None


def cmd_passes(args) -> int:
    from attnc.driver import describe_pipeline
    from attnc.passes import all_passes, load_pass_file
    from attnc.passes.pipelines import TARGETS
    for path in args.load_pass:
        load_pass_file(path)
    for info in all_passes():
        origin = "" if info.origin == "built-in" else f"  [{info.origin}]"
        print(f"{info.name}{origin}\n    {info.summary}")
        for o in info.options:
            default = "" if o.default is None else f" = {o.default}"
            doc = f"  {o.doc}" if o.doc else ""
            print(f"    {o.name}: {o.type_name}{default}{doc}")
    print("\npipelines:")
    for target in TARGETS:
        print(f"  {target}: {describe_pipeline(target)}")
    return 0


def summary(v) -> str:
    """What `attnc check` prints: the variant at a glance."""
    def tensor(t) -> str:
        return f"{t.name} {t.dtype}[{', '.join(map(str, t.shape))}]"

    if v.heads == v.heads_kv:
        gqa = "no"
    elif v.heads_kv == 1:
        gqa = f"yes: MQA, {v.heads} query heads share one key/value head"
    else:
        gqa = f"yes: {v.heads} query heads share {v.heads_kv} key/value heads"
    hooks = [h.name for h in v.hooks()]
    rows = [
        ("variant", f"{v.name} ({v.filename}) ok"),
        ("inputs", ", ".join(tensor(t) for t in (v.q, v.k, v.v))),
        ("dtype", v.dtype),
        ("dims", ", ".join(v.dims) or "none"),
        ("head dims", f"qk {v.head_dim_qk}, v {v.head_dim_v}"),
        ("GQA", gqa),
        ("hooks", ", ".join(hooks) or "none"),
        ("params", ", ".join(tensor(p) for p in v.params) or "none"),
        ("outputs", ", ".join(tensor(t) for t in v.outputs)),
        ("scale", f"{v.scale:.6g}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k + ':':<{width + 1}} {val}" for k, val in rows)


# --- arguments --------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    from attnc.passes.pipelines import TARGETS
    p = argparse.ArgumentParser(prog="attnc", description="A compiler for attention kernels.")
    p.add_argument("--version", action="version", version=f"attnc {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{check,compile,opt,passes}")

    check = sub.add_parser("check", help="parse and check a .attn file, print a summary")
    check.add_argument("file")
    check.set_defaults(run=cmd_check)

    comp = sub.add_parser("compile", help="compile a .attn file for a target")
    comp.add_argument("file")
    comp.add_argument("--emit", choices=tuple(EMITTERS), default="bundle",
                      help="what to produce (default: bundle)")
    _pipeline_arguments(comp, TARGETS)
    comp.set_defaults(run=cmd_compile)

    opt = sub.add_parser("opt", help="run passes on attn IR (e.g. a --dump-dir file)")
    opt.add_argument("file")
    _pipeline_arguments(opt, TARGETS, arch_default="the IR's target; sm_80 before attn-tile")
    opt.set_defaults(run=cmd_opt)

    passes = sub.add_parser("passes", help="list the passes, their options and the pipelines")
    passes.add_argument("--load-pass", metavar="FILE", action="append", default=[])
    passes.set_defaults(run=cmd_passes)
    return p


def _version() -> str:
    from importlib import metadata
    try:
        return metadata.version("attnc")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _pipeline_arguments(p: argparse.ArgumentParser, targets, arch_default: str | None = None) -> None:
    p.add_argument("-arch", "--arch", choices=targets, default=None if arch_default else "sm_80",
                   help=f"target GPU architecture (default: {arch_default or 'sm_80'})")
    p.add_argument("-o", "--output", metavar="OUT", help="output file or folder "
                   "(default for IR: standard output)")
    p.add_argument("--print-ir-after-all", action="store_true",
                   help="print the IR given to the pipeline (compile: the frontend's) and after "
                        "every pass, to stderr")
    p.add_argument("--dump-dir", metavar="DIR",
                   help="write the IR after every stage to DIR/NN-<stage>.mlir")
    p.add_argument("--pass-pipeline", metavar="TEXT",
                   help='replace the target\'s pipeline, e.g. "attn-tile{block_m=64},attn-analyze-masks"')
    p.add_argument("--load-pass", metavar="FILE", action="append", default=[],
                   help="load passes from a Python file (repeatable)")


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if getattr(args, "output", None) == "-":        # standard output, for the text outputs
        if getattr(args, "emit", "mlir") in ("cubin", "bundle"):
            cli.error(f"-o -: --emit {args.emit} writes files, not text: give a path")     # exit status 2
        args.output = None
    if getattr(args, "emit", None) == "cubin" and not args.output:
        cli.error("--emit cubin writes a binary: give the file with -o")     # exit status 2
    try:
        DEBUG.get()             # a malformed ATTNC_DEBUG is refused, as the other variables are
        status = args.run(args)
        sys.stdout.flush()      # a reader gone away shows here, not at the interpreter's exit
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except AttncError as e:
        print(e.render(), file=sys.stderr)
        if _debug() and e.__cause__ is not None:
            traceback.print_exception(e.__cause__, file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("attnc: interrupted", file=sys.stderr)
        return 130
    except Exception as e:      # a compiler bug, reported as one
        print(f"attnc: internal compiler error: {type(e).__name__}: {_first_line(e)}",
              file=sys.stderr)
        if _debug():
            traceback.print_exc()
        else:
            print("attnc: set ATTNC_DEBUG=1 to see the traceback", file=sys.stderr)
        return EXIT_ICE


def _stdout_closed() -> int:
    """The reader of standard output went away: stop as quietly as a tool that SIGPIPE
    ended. What is still buffered would fail again when the interpreter flushes it at
    exit (with a message of its own): standard output becomes /dev/null first."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE


def _debug() -> bool:
    try:
        return DEBUG.get()
    except AttncError:
        return False


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.split("\n")[0] if text else "(no message)"


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


if __name__ == "__main__":
    sys.exit(main())
