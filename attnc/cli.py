"""The `attnc` command (also `python -m attnc`).

    attnc check FILE
    attnc compile FILE -arch {sm_80,sm_90a,sm_100a} --emit {mlir,ptx,cubin,bundle} [-o OUT]
          [--print-ir-after-all | --print-ir-after PASS,...] [--dump-dir DIR] [--pass-pipeline TEXT]
          [--load-pass FILE] [--time-passes]      # where the time went, on stderr
          [--resource-usage]                      # registers and spills of each kernel, on stderr
    attnc opt FILE.mlir [-arch ...] [--pass-pipeline TEXT] [--emit {mlir,ptx,cubin,bundle}] [-o OUT]
          [--print-ir-after-all] [--print-ir-after PASS,...] [--dump-dir DIR] [--load-pass FILE]
          [--resource-usage]
                                                  # re-run passes on saved IR, and build its kernel
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
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnc import config
from attnc.emit import CUBIN_KINDS, EMIT_KINDS, Code, build_code, write_code, write_output
from attnc.errors import AttncError

if TYPE_CHECKING:
    from attnc.backend.cache import KernelCache

EXIT_ERROR, EXIT_ICE = 1, 70
EXIT_PIPE = 128 + signal.SIGPIPE         # standard output closed by its reader

DEBUG = config.DEBUG


# --- commands ---------------------------------------------------------------------------
def cmd_check(args) -> int:
    from attnc.frontend import load, read_source
    from attnc.driver import check_integers
    variant = load(read_source(args.file), args.file)
    check_integers(variant)
    _print_warnings(variant)
    print(summary(variant))
    return 0


def _print_warnings(variant) -> None:
    for warning in variant.warnings:
        print(warning.render(), file=sys.stderr)


def _backend_warnings(caught: list) -> list[str]:
    """The backend's warnings (a kernel assembled without ptxas spills) as the command's,
    printed now and kept with the cache entry as the frontend's are (a hit prints them
    too); other modules' warnings are shown as Python shows them."""
    root = Path(__file__).resolve().parent
    ours = [w for w in caught if Path(w.filename).resolve().is_relative_to(root)]
    for w in caught:
        if w not in ours:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    lines = list(dict.fromkeys(f"attnc: warning: {w.message}" for w in ours))
    for line in lines:
        print(line, file=sys.stderr)
    return lines


def cmd_compile(args) -> int:
    if not args.time_passes:
        return _compile(args)
    from attnc import timing
    with timing.recording() as report:
        status = _compile(args)
    print(report.render(), file=sys.stderr)
    return status


def _compile(args) -> int:
    from attnc import timing
    _check_output_is_not_input(args)
    out = Path(args.output) if args.output else None
    with timing.step("kernel cache lookup"):
        slot = cache_slot(args)
        hit = slot.cache.get(slot.key) if slot is not None else None
    if hit is not None:
        code = _served(slot, hit)
        with timing.step(f"writing the {args.emit}"):
            write_code(code, args.emit, out, resources=args.resource_usage)
        return 0
    from attnc.driver import CompileOptions, check_target, compile_variant
    from attnc.frontend import load, read_source
    # The pass files were loaded for the key already: loading them again would run them twice.
    load_passes = () if slot is not None and slot.passes_loaded else tuple(args.load_pass)
    options = CompileOptions(arch=args.arch, pass_pipeline=args.pass_pipeline, load_passes=load_passes,
                             print_ir_after_all=args.print_ir_after_all,
                             print_ir_after=tuple(args.print_ir_after), dump_dir=args.dump_dir)
    with timing.step("frontend: parse and check"):
        # the bytes the key was made of: a file saved again during the compile misses next time
        variant = load(slot.source if slot is not None else read_source(args.file), args.file)
    _print_warnings(variant)                    # before any pass may fail
    if args.emit == "mlir":
        result = compile_variant(variant, options)
        check_target(result, args.arch)
        with timing.step("writing the IR"):
            write_output(result.text, out)
        return 0
    from attnc.schedule import beside
    with beside.held():             # Note [The check beside the lowering]
        result = compile_variant(variant, options)
        check_target(result, args.arch)
        with timing.step("backend"), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code = build_code(result, args.emit)
    backend = _backend_warnings(caught)
    if slot is not None:
        with timing.step("kernel cache store"):
            slot.cache.put(slot.key, code.manifest, code.files,
                           warnings=[w.render() for w in variant.warnings] + backend)
    with timing.step(f"writing the {args.emit}"):
        write_code(code, args.emit, out, resources=args.resource_usage)
    return 0


# --- the kernel cache, looked up first --------------------------------------------------
# Note [The kernel cache first]: a repeated `attnc compile` is answered from the kernel
# cache before anything is parsed, built or imported that a hit does not need (not MLIR,
# not the grammar): its key is what decides the code before any pass runs -- the source
# text, the file's name as given (warnings and the IR's locations name it), -arch, the
# --pass-pipeline text with its options, the --emit kind, the content of every
# --load-pass file and of the user's modules that loading them imported, and the
# compiler and toolchain (cache_key); not what a pass reads only when it runs, nor an
# installed package's modules (README). The frontend's warnings are kept in the entry and
# printed again on a hit. A compile asked to show or dump its IR, or --emit mlir, runs
# every pass and takes nothing from the cache.
@dataclass(frozen=True)
class CacheSlot:
    cache: KernelCache
    key: str
    source: bytes               # the source as read for the key
    passes_loaded: bool         # the --load-pass files were loaded to make the key


def cache_slot(args) -> CacheSlot | None:
    """Where the code of this compile is kept in the kernel cache; None when it does not
    go through the cache (Note [The kernel cache first]), or when the source or a pass file
    cannot be read or loaded: the compile then reports that where it would have."""
    from attnc.backend.cache import KernelCache, cache_key
    if args.emit == "mlir" or args.print_ir_after_all or args.print_ir_after or args.dump_dir is not None:
        return None
    cache = KernelCache()
    if not cache.enabled:
        return None
    try:
        source = Path(args.file).read_bytes()
        text = source.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    pass_files = []
    if args.load_pass:
        from attnc.passes import registry
        try:
            pass_files = [[str(f), _sha256(f)] for f in registry.load_pass_files(args.load_pass)]
        except (AttncError, OSError):
            return None
    options = {"command": "compile", "filename": args.file, "pass_pipeline": args.pass_pipeline,
               "pass_files": pass_files, "emit": args.emit}
    return CacheSlot(cache, cache_key(text, options, args.arch), source, bool(args.load_pass))


def _sha256(path: Path) -> str:
    import hashlib
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _served(slot: CacheSlot, hit) -> Code:
    """A cache entry's code, after its warnings and the note that it was cached (on stderr:
    `-o -` keeps standard output for the code)."""
    from attnc import timing
    for warning in slot.cache.warnings(slot.key):
        print(warning, file=sys.stderr)
    where = slot.cache.path(slot.key)
    print(f"attnc: note: served from the kernel cache ({where}); ATTNC_DISABLE_CACHE=1 builds it again",
          file=sys.stderr)
    timing.note(f"served from the kernel cache ({where}): no pass ran")
    # the bytes the cache checked against the manifest's digests, not the files read again
    manifest = dict(hit.manifest.raw)
    return Code(manifest, {manifest["code"][kind]: blob for kind, blob in hit.code.items()})


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
                             print_ir_after_all=args.print_ir_after_all,
                             print_ir_after=tuple(args.print_ir_after), dump_dir=args.dump_dir)
    _check_output_is_not_input(args)
    _check_dump_dir_keeps_input(args)
    text = _decode(read_source(args.file), args.file)
    _check_not_attn_source(args.file, text)
    out = Path(args.output) if args.output else None
    if args.emit == "mlir":
        module = optimize_mlir(text, args.file, options, arch_given=args.arch is not None)
        from attnc.ir import to_text
        write_output(to_text(module), out)
        return 0
    # Code from the IR as the pipeline leaves it, read as attn-lower-* reads it: the
    # variant from the attn.kernel's attributes, the plan from its ops (an edited dump's).
    from attnc.passes.lower_kernel import compile_result_of
    from attnc.schedule import beside
    from attnc.ir.read import in_input
    try:
        with beside.held():             # Note [The check beside the lowering]
            module = optimize_mlir(text, args.file, options, arch_given=args.arch is not None)
            code = build_code(compile_result_of(module, f"attnc opt --emit {args.emit}"), args.emit)
    except AttncError as e:             # the check's, raised when the held checks end, located too
        raise in_input(e, args.file, text) from None
    write_code(code, args.emit, out, resources=args.resource_usage)
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
    # allow_abbrev=False: an option is named in full (no --pass for --pass-pipeline).
    p = argparse.ArgumentParser(prog="attnc", description="A compiler for attention kernels.", allow_abbrev=False)
    p.add_argument("--version", action=_Version, nargs=0, help="show attnc's version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="{check,compile,opt,passes}")

    check = sub.add_parser("check", allow_abbrev=False, help="parse and check a .attn file, print a summary")
    check.add_argument("file")
    check.set_defaults(run=cmd_check)

    comp = sub.add_parser("compile", allow_abbrev=False, help="compile a .attn file for a target")
    comp.add_argument("file")
    comp.add_argument("--emit", choices=EMIT_KINDS, default="bundle",
                      help="what to produce (default: bundle)")
    _pipeline_arguments(comp, TARGETS)
    comp.add_argument("--time-passes", action="store_true",
                      help="print to stderr where the compile's time went: each pass, the backend's "
                           "steps (MLIR -> PTX, PTX -> cubin, writing the output) and the total; a "
                           "compile served from the kernel cache says so")
    comp.set_defaults(run=cmd_compile)

    opt = sub.add_parser("opt", allow_abbrev=False, help="run passes on attn IR (e.g. a --dump-dir file)")
    opt.add_argument("file")
    opt.add_argument("--emit", choices=EMIT_KINDS, default="mlir",
                     help="what to produce (default: mlir, the IR the pipeline leaves; ptx, cubin and "
                          "bundle: the kernel of that IR, a planned one lowered first)")
    _pipeline_arguments(opt, TARGETS, arch_default="the IR's target; sm_80 before attn-tile")
    opt.set_defaults(run=cmd_opt)

    passes = sub.add_parser("passes", allow_abbrev=False, help="list the passes, their options and the pipelines")
    passes.add_argument("--load-pass", metavar="FILE", action="append", default=[])
    passes.set_defaults(run=cmd_passes)
    return p


class _Version(argparse.Action):
    """argparse's "version" action, asking the installed version only when used
    (importlib.metadata costs a compile served from the kernel cache a third of its time)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"attnc {_version()}")
        parser.exit()


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
    p.add_argument("--print-ir-after", metavar="STAGES", type=_stages, default=(),
                   help="print the IR after these stages only (comma-separated pass names, or "
                        "frontend / input), to stderr")
    p.add_argument("--dump-dir", metavar="DIR",
                   help="write the IR after every stage to DIR/NN-<stage>.mlir")
    p.add_argument("--pass-pipeline", metavar="TEXT",
                   help='replace the target\'s pipeline, e.g. "attn-tile{block_m=64},attn-analyze-masks"')
    p.add_argument("--load-pass", metavar="FILE", action="append", default=[],
                   help="load passes from a Python file (repeatable)")
    p.add_argument("--resource-usage", action="store_true",
                   help="print to stderr each kernel's registers, spilled bytes and stack frame as the "
                        "assembler reported them for the cubin (the manifest's `resources`), with its "
                        "threads and shared memory (--emit cubin or bundle)")


def _stages(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r}: expected pass names separated by commas")
    return names


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if getattr(args, "output", None) == "":
        cli.error("-o: an empty path")      # exit status 2
    if getattr(args, "resource_usage", False) and args.emit not in CUBIN_KINDS:
        cli.error(f"--resource-usage reports the assembler's view of the cubin, and --emit {args.emit} "
                  f"assembles none: use --emit bundle or cubin")
    if getattr(args, "output", None) == "-":        # standard output, for the text outputs
        if getattr(args, "emit", "mlir") in ("cubin", "bundle"):
            cli.error(f"-o -: --emit {args.emit} writes files, not text: give a path")     # exit status 2
        args.output = None
    if getattr(args, "emit", None) == "cubin" and not args.output:
        cli.error("--emit cubin writes a binary: give the file with -o")     # exit status 2
    try:
        for knob in config.KNOBS:
            knob.get()          # a malformed variable is refused up front, even where a cache hit skips its use
        status = args.run(args)
        sys.stdout.flush()      # a reader gone away shows here, not at the interpreter's exit
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except OSError as e:        # standard output failing (a full disk): the system's error, not a compiler bug
        where = f"'{e.filename}'" if e.filename else "standard output"
        print(f"attnc: error: an I/O error on {where}: {e.strerror or e}", file=sys.stderr)
        _stdout_closed()
        return EXIT_ERROR
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
