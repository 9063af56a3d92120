"""Source to IR: the frontend, then a target's pass pipeline, every stage observable.

    compile_mlir(source, filename, CompileOptions(arch="sm_100a", print_ir_after_all=True))
      = frontend (parse, check, lower to L1)
      -> resolve the pipeline (the target's, or --pass-pipeline; user pass files loaded)
      -> one MLIR PassManager running the passes; after each one the IR is verified
         and handed to the stage observers (--print-ir-after-all, --dump-dir)

Every mistake, in the source, in a pipeline or found by a pass, is an `AttncError`
located in the `.attn` file (passes locate theirs with `attnc.ir.error_at(op, ...)`).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from attnc import timing
from attnc.errors import AttncError
from attnc.frontend import Variant, load, read_source
from attnc.passes import registry
from attnc.passes.pipelines import (LOWERING, PIPELINE_SOURCE, TARGETS, PassSpec, format_pipeline, parse_pipeline,
                                    pass_target, target_pipeline)

FRONTEND_STAGE = "frontend"      # the name of stage 0 of a compile: the L1 module
INPUT_STAGE = "input"            # the name of stage 0 of `attnc opt`: the IR read


@dataclass(frozen=True)
class CompileOptions:
    arch: str = "sm_80"
    pass_pipeline: str | None = None          # textual; replaces the target's pipeline
    load_passes: tuple[str, ...] = ()         # Python files of user passes
    print_ir_after_all: bool = False          # IR after every stage, to `ir_stream`
    print_ir_after: tuple[str, ...] = ()      # IR after these stages only, to `ir_stream`
    dump_dir: str | None = None               # IR after every stage, NN-<stage>.mlir files


@dataclass
class CompileResult:
    variant: Variant
    module: object                            # mlir.ir.Module
    pipeline: list[PassSpec] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The final IR with locations."""
        from attnc.ir import to_text
        return to_text(self.module)


Observer = Callable[[int, str, object], None]     # (stage index, stage name, module op)


# --- entry points -----------------------------------------------------------------------
def compile_mlir(source: str | bytes, filename: str = "<input>",
                 options: CompileOptions = CompileOptions(), *,
                 ir_stream: TextIO | None = None) -> CompileResult:
    """Frontend + pipeline; the module after the last pass."""
    return compile_variant(load(source, filename), options, ir_stream=ir_stream)


def compile_variant(variant: Variant, options: CompileOptions = CompileOptions(), *,
                    ir_stream: TextIO | None = None) -> CompileResult:
    """The pipeline on a checked variant (what compile_mlir runs after the frontend)."""
    _check_arch(options.arch)
    with timing.step("resolve the pipeline (imports its passes)"):
        passes = resolve_pipeline(options)
    try:
        with timing.step("frontend: lower to the attn dialect"):
            module = lower_variant(variant)
        _run_stages(module, FRONTEND_STAGE, passes, options, ir_stream)
    except AttncError as e:
        if e.filename in (variant.filename, "<input>"):
            e.located(variant.filename, variant.source)
        raise
    except RecursionError:
        # A last resort: the frontend refuses hooks deeper than MAX_HOOK_DEPTH and the walks
        # over them run with room for that (Note [Deep expressions], frontend/depth.py), so
        # reaching Python's limit here is the compiler's fault, not the variant's.
        from attnc.frontend.depth import MAX_HOOK_DEPTH
        raise AttncError(f"internal compiler error: Python's recursion limit reached while compiling this "
                         f"variant's hooks, which `attnc check` accepts (at most MAX_HOOK_DEPTH = "
                         f"{MAX_HOOK_DEPTH} levels, Note [Deep expressions]); please report it",
                         filename=variant.filename) from None
    return CompileResult(variant, module, [p.spec for p in passes])


def compile_file(path: str | Path, options: CompileOptions = CompileOptions(), **kwargs) -> CompileResult:
    return compile_mlir(read_source(path), str(path), options, **kwargs)


def optimize_mlir(text: str, filename: str = "<input>",
                  options: CompileOptions = CompileOptions(), *,
                  ir_stream: TextIO | None = None, arch_given: bool = False):
    """`attnc opt`: parse attn IR (e.g. a --dump-dir file) and run a pipeline on it.

    Errors from the passes point at the `.attn` locations the IR carries; the
    source line is shown when that file can be read. `options.arch` None: the target
    the IR was tiled for (sm_80 before attn-tile); with `arch_given` (the CLI's -arch),
    it must be that target. IR that went through attn-tile needs `pass_pipeline` (the
    target's whole pipeline would run its passes a second time)."""
    from attnc.ir.read import in_input, parse_ir      # MLIR's import, where IR is read
    module = parse_ir(text, filename)
    from attnc.ir import planned_target
    target = planned_target(module)
    if target is not None and arch_given and options.arch != target:
        raise AttncError(f"this IR was tiled for {target} but -arch is {options.arch}: give -arch {target}, "
                         f"or leave -arch out", filename="attnc")
    if target is not None and options.pass_pipeline is None:
        raise AttncError(f"this IR went through attn-tile already: give --pass-pipeline with the passes to "
                         f"run on it (`attnc passes` shows the {target} pipeline; the dump's number says "
                         f"how many of them ran)", filename="attnc")
    options = dataclasses.replace(options, arch=options.arch or target or "sm_80")
    _check_arch(options.arch)
    passes = resolve_pipeline(options)
    try:
        _run_stages(module, INPUT_STAGE, passes, options, ir_stream)
    except AttncError as e:
        raise in_input(e, filename, text)
    return module


def _run_stages(module, first_stage: str, passes: list["ResolvedPass"],
                options: CompileOptions, ir_stream: TextIO | None) -> None:
    stages = [first_stage, *(p.spec.name for p in passes)]
    unknown = [name for name in options.print_ir_after if name not in stages]
    if unknown:
        raise AttncError(f"--print-ir-after: '{unknown[0]}' is no stage of this compile; its stages are "
                         f"{', '.join(stages)}", filename="attnc")
    observe = _stage_observers(options, ir_stream or sys.stderr, stages)
    observe(0, first_stage, module.operation)
    run_passes(module, passes, observe)


def lower_variant(variant: Variant):
    """The L1 module of a checked variant, in a fresh context with the attn dialect."""
    from attnc.frontend.lower import lower
    return lower(variant)


def check_integers(variant: Variant) -> None:
    """`attnc check`: refuse, as compile does, an integer of a hook that lies beyond 64
    bits whatever the indices are (Note [Exact integers] in attnc/backend/exact_ints.py):
    an error of the source, which the frontend alone does not see."""
    from attnc.backend.hooks import size_dims
    from attnc.ir import attention_ops
    from attnc.passes.analyze_masks import check_integer_widths

    module = lower_variant(variant)         # held: dropping it destroys the op's regions
    check_integer_widths(attention_ops(module)[0], size_dims(variant))


def compile_kernel(source, arch: str = "sm_80", **options):
    """`attnc.compile(source, arch=...)`: compile (or fetch from the kernel cache) a bundle
    and return the runtime's launchable `Kernel` for it -- the same code path and bundle
    format as `attnc compile -o DIR` followed by `attnc_runtime.load(DIR)`.

    `source` is the variant's text, or a path (`os.PathLike`, or a str ending in .attn)
    of its file; `options` are CompileOptions fields (pass_pipeline, load_passes: one
    file or several, ...)."""
    import attnc_runtime
    from attnc.backend.cache import KernelCache, cache_key
    from attnc.backend.lowering import build

    text, filename = _source_of(source)
    variant = load(text, filename)
    for warning in variant.warnings:                # checked first: a cache hit has them too
        warnings.warn(warning, stacklevel=3)        # the caller of attnc.compile
    if isinstance(options.get("load_passes"), (str, os.PathLike)):
        options["load_passes"] = (options["load_passes"],)
    if isinstance(options.get("print_ir_after"), str):     # one stage, or several comma-separated
        options["print_ir_after"] = tuple(options["print_ir_after"].split(","))
    unknown = sorted(set(options) - {f.name for f in dataclasses.fields(CompileOptions)})
    if unknown:
        raise AttncError(f"attnc.compile has no option {', '.join(map(repr, unknown))}: it takes "
                         f"{', '.join(f.name for f in dataclasses.fields(CompileOptions) if f.name != 'arch')}; "
                         f"a pass's option goes in pass_pipeline, e.g. \"attn-tile{{block_m=64}},...\"",
                         filename=filename)
    opts = CompileOptions(arch=arch, **options)
    if opts.arch not in LOWERING:
        raise AttncError(f"attnc.compile builds kernels for {' and '.join(LOWERING)} so far, not {opts.arch}",
                         filename=filename)
    if opts.pass_pipeline is None and not opts.load_passes:
        # The target's own passes: the source and the compiler decide the code (a hit runs nothing).
        key = cache_key(variant.source, {"arch": opts.arch, "pass_pipeline": None, "load_passes": []}, opts.arch)
        compiled = functools.partial(compile_variant, variant, opts)
    else:
        # A pipeline of one's own, perhaps with one's own passes, whose code (and the modules
        # it imports) no key of the source could cover: its passes run, and the final IR,
        # which holds every decision they made, is the key, as `attnc compile`'s (found by
        # a review: an edited pass served the bundle of the old one).
        result = compile_variant(variant, opts)
        check_target(result, opts.arch, "arch")
        key = cache_key(result.text, {"backend": "forward"}, opts.arch)
        compiled = lambda: result       # noqa: E731

    def build_bundle():
        from attnc.schedule import beside
        with beside.held():         # Note [The check beside the lowering]
            art = build(compiled())
        return art.manifest, art.files

    # Asked to show or dump the IR, it compiles: a cache hit would run no pass to show.
    observed = opts.print_ir_after_all or bool(opts.print_ir_after) or opts.dump_dir is not None
    bundle = KernelCache(enabled=False if observed else None).get_or_build(key, build_bundle)
    return attnc_runtime.Kernel(bundle)


def check_target(result: CompileResult, arch: str, option: str = "-arch") -> None:
    """A pipeline whose passes were told another target (attn-tile{target=...}) than the
    one asked for would write that target's code under the asked one's name: refused."""
    from attnc.ir import planned_target
    target = planned_target(result.module)
    if target is not None and target != arch:
        raise AttncError(f"the pipeline built for {target} but {option} is {arch}: give {option} {target}, "
                         f"or drop the passes' target option", filename="attnc")


def _source_of(source) -> tuple[str | bytes, str]:
    """(text, file name for messages) of attnc.compile's `source`."""
    if source is None or not isinstance(source, (str, bytes, os.PathLike)):
        raise AttncError(f"attnc.compile takes a variant's text or the path of its .attn file, "
                         f"not {type(source).__name__}")
    if isinstance(source, bytes):
        return source, "<attnc.compile>"        # `load` decodes it (a non-UTF-8 byte located)
    if isinstance(source, os.PathLike) or ("{" not in source and source.endswith(".attn")):
        try:
            return Path(source).read_text(encoding="utf-8"), str(source)
        except (OSError, UnicodeDecodeError) as e:
            raise AttncError(f"cannot read '{source}': {getattr(e, 'strerror', None) or e}") from None
    return source, "<attnc.compile>"


# --- the pipeline -----------------------------------------------------------------------
@dataclass(frozen=True)
class ResolvedPass:
    spec: PassSpec
    run: Callable | None          # the pass object (an attnc pass), or
    upstream: str | None = None   # an upstream MLIR pass, as pipeline text
    origin: str = "built-in"      # where an attnc pass was defined
    pipeline: str | None = None   # the --pass-pipeline text it was given in (None: the target's)


def resolve_pipeline(options: CompileOptions) -> list[ResolvedPass]:
    """The passes to run: user files loaded, names looked up, options converted."""
    registry.load_pass_files(options.load_passes)
    text = options.pass_pipeline
    specs = parse_pipeline(text) if text is not None else target_pipeline(options.arch)
    _check_targets(specs, options.arch, text)
    return [_resolve(spec, options.arch, text) for spec in specs]


def _check_targets(specs: list[PassSpec], arch: str | None, text: str | None) -> None:
    """A pass told another target (attn-tile{target=...}) than `arch` in a pipeline that
    holds a pass of `arch`'s own (its lowering, attn-overlap-gemms) would plan one target's
    kernel for another's passes: refused at the option (check_target's refusal, before a
    later pass fails on the plan). A pipeline of target-neutral passes plans for the
    option's target."""
    own = [s.name for s in specs if pass_target(s.name) == arch]
    for spec in specs:
        given = spec.options.get("target")
        if arch is not None and own and given != arch and given in LOWERING:
            message = (f"target={given}, and the pipeline holds {own[0]}, a pass of {arch} (the arch asked for): "
                       f"ask for {given}, or drop the option")
            col = _option_col(spec, text, message) if text is not None else None
            raise _pipeline_error(message, PassSpec(spec.name, {}, col or spec.col), text)


def _resolve(spec: PassSpec, arch: str, text: str | None) -> ResolvedPass:
    info = registry.lookup(spec.name)
    if info is None:
        if _is_upstream_pass(spec):
            return ResolvedPass(spec, None, spec.text())
        if spec.options and _is_upstream_pass(PassSpec(spec.name, {}, spec.col)):
            reason = _upstream_refusal(spec) or "an unknown option or a bad value"
            raise _pipeline_error(f"MLIR's pass '{spec.name}' does not take the options "
                                  f"{{{spec.text()[len(spec.name) + 1:-1]}}}: {reason}", spec, text)
        raise _pipeline_error(f"unknown pass '{spec.name}'{registry.suggestion(spec.name)}; "
                              f"`attnc passes` lists them", spec, text)
    options = dict(spec.options)
    if "target" in {o.name for o in info.options}:
        options.setdefault("target", arch)
    try:
        return ResolvedPass(spec, registry.instantiate(info, options), origin=info.origin, pipeline=text)
    except AttncError as e:         # at the option it names (an unknown one, a malformed value), else the pass
        col = _option_col(spec, text, e.message) if text is not None else None
        raise _pipeline_error(e.message, PassSpec(spec.name, {}, col or spec.col), text) from None


def _is_upstream_pass(spec: PassSpec) -> bool:
    """Whether MLIR itself knows the pass (cse, canonicalize, ...) with these options."""
    return _upstream_refusal(spec) is None


def _upstream_refusal(spec: PassSpec) -> str | None:
    """None when MLIR takes the pass with these options, else what LLVM's option parser
    wrote to the process's stderr (kept off the terminal: it becomes our message)."""
    import tempfile

    from mlir import ir, passmanager
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            with ir.Context():
                passmanager.PassManager().add(spec.text())
            return None
        except ValueError:
            captured.seek(0)
            return captured.read().decode("utf-8", "replace").strip().lstrip(": ")
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _pipeline_error(message: str, spec: PassSpec, text: str | None) -> AttncError:
    if text is None:
        return AttncError(message, filename="attnc")
    from attnc.errors import Span
    return AttncError(message, Span(1, spec.col), filename=PIPELINE_SOURCE, source=text)


def run_passes(module, passes: list[ResolvedPass], observe: Observer) -> None:
    """Run `passes` on `module` with one PassManager; after each, verify and observe."""
    from mlir import passmanager
    if not passes:
        return
    pm = passmanager.PassManager(context=module.context)
    pm.enable_verifier(False)         # verified after each pass below, naming the pass
    clock = _PassClock()
    for index, p in enumerate(passes, 1):
        after = clock.after(_after_pass(index, p.spec.name, observe))
        if p.upstream is not None:
            pm.add(p.upstream)
            pm.add(lambda op, _pass, after=after, name=p.spec.name: after(op, name), name=f"{p.spec.name}-done")
            continue
        pm.add(_attnc_pass(p, after), name=p.spec.name, argument=p.spec.name)
    from mlir import ir

    from attnc.schedule import beside
    try:
        clock.start()
        with beside.running():
            try:
                pm.run(module.operation)
            except BaseException:
                beside.finish()         # Note [The check beside the lowering]: its error first
                raise
            if not beside.holding():
                beside.finish()
    except ir.MLIRError as e:
        upstream = [p.spec.name for p in passes if p.upstream is not None]
        if not upstream:
            raise                                   # the attn passes' own: a compiler bug
        notes = "; ".join(_diagnostic_lines(d) for d in e.error_diagnostics) or str(e)
        raise AttncError(f"the pass pipeline failed in MLIR (its passes from MLIR: {', '.join(upstream)}): "
                         f"{notes}", filename="attnc") from None


def _diagnostic_lines(diag) -> str:
    """A diagnostic's message and its notes', first lines only (a note may dump the IR)."""
    lines = [diag.message] + [_diagnostic_lines(n) for n in diag.notes]
    return " ".join(line.split("\n", 1)[0].strip() for line in lines if line.strip())


class _PassClock:
    """Each pass's wall time for --time-passes (`attnc.timing`): an attnc pass is timed
    around its call, where the steps it runs nest; an upstream pass, which MLIR runs
    without a callback around it, as the time from the previous pass's end to its own."""

    def __init__(self) -> None:
        self.last = 0.0

    def start(self) -> None:
        self.last = time.perf_counter()

    def after(self, check: Callable) -> Callable:
        def after(op, upstream: str | None = None) -> None:
            if upstream is not None:
                timing.add(upstream, time.perf_counter() - self.last)
            with timing.step("verify the IR after each pass"):
                check(op)
            self.last = time.perf_counter()
        return after


def _attnc_pass(p: ResolvedPass, after: Callable) -> Callable:
    def run(op, pass_) -> None:
        try:
            with timing.step(p.spec.name):
                p.run(op, pass_)
        except AttncError as e:
            raise _at_the_option(e, p) from None
        except (Exception, SystemExit) as e:     # a user pass's sys.exit() is its failure too
            if p.origin == "built-in":
                raise                     # a compiler bug: the CLI reports it as one
            raise AttncError(f"pass '{p.spec.name}' (from {p.origin}) failed{_user_failure(p.origin, e)} "
                             f"(ATTNC_DEBUG=1 shows the traceback)") from e
        after(op)
    return run


# MLIR's bindings re-raise an exception of a Python callback they called (an op walk's
# visitor) as a RuntimeError whose message is the callback's whole traceback, as text.
_CALLBACK_FAILED = "Exception raised in callback: Traceback (most recent call last):"
_FRAME = re.compile(r'  File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _user_failure(origin: str, e: BaseException) -> str:
    """' at FILE:LINE: Type: message' of a user pass's exception: the innermost
    exception's message, at the deepest frame in the pass's own file -- also for one
    raised in a callback, whose traceback MLIR passes on as text (no frames shown)."""
    import traceback
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(e.__traceback__)]
    message = f"{type(e).__name__}: {e}"
    if isinstance(e, RuntimeError) and str(e).startswith(_CALLBACK_FAILED):
        inner_frames, inner_message = _read_traceback(str(e))
        frames += inner_frames
        message = inner_message or message
    own = [(file, line) for file, line in frames if Path(file) == Path(origin)]
    return f" at {own[-1][0]}:{own[-1][1]}: {message}" if own else f": {message}"


def _read_traceback(text: str) -> tuple[list[tuple[str, int]], str]:
    """The (file, line) frames of a traceback printed as text, and its last exception's
    'Type: message' (what follows the last frame and its indented source lines)."""
    lines = text.splitlines()
    rows = [n for n, line in enumerate(lines) if _FRAME.match(line)]
    frames = [(m["file"], int(m["line"])) for m in (_FRAME.match(lines[n]) for n in rows)]
    rest = lines[rows[-1] + 1:] if rows else []
    while rest and rest[0].startswith("    "):
        rest.pop(0)
    return frames, "\n".join(rest).strip()


def _at_the_option(e: AttncError, p: ResolvedPass) -> AttncError:
    """A pass's refusal of a value the user gave an option in --pass-pipeline (its
    message quotes `name=value`, e.g. "q_blocks_per_cta=3: expected 1 or 2", found only
    when the kernel is built) is shown at that option in the pipeline text, as its
    parse errors are. A refusal of what the variant needs with the options given (too
    much shared memory for its head dim) stays at the variant."""
    col = _option_col(p.spec, p.pipeline, e.message, quoted=False) if p.pipeline is not None else None
    return e if col is None else _pipeline_error(f"{p.spec.name}: {e.message}", PassSpec(p.spec.name, {}, col),
                                                 p.pipeline)


def _option_col(spec: PassSpec, pipeline: str, message: str, quoted: bool = True) -> int | None:
    """The column in `pipeline` of the option of `spec` that `message` names (`name=`, or
    with `quoted` also `'name'`), None where it names none the text gives."""
    import re
    for name in spec.options:
        at = re.compile(rf"\b{re.escape(name)}\s*=").search(pipeline, spec.col - 1)
        named = re.search(rf"\b{re.escape(name)}=", message) or (quoted and f"'{name}'" in message)
        if at is not None and named:
            return at.start() + 1
    return None


def _after_pass(index: int, name: str, observe: Observer) -> Callable:
    def after(op) -> None:
        _verify(op, name)
        observe(index, name, op)
    return after


def _verify(op, pass_name: str) -> None:
    from mlir import ir
    from attnc.ir import error_at
    try:
        op.verify()
    except ir.MLIRError as e:
        diag = e.error_diagnostics[0] if e.error_diagnostics else None
        message = diag.message if diag is not None else str(e)
        where = diag.location if diag is not None else op
        raise error_at(where, f"the IR after pass '{pass_name}' is invalid: {message}") from None


# --- stage observers --------------------------------------------------------------------
def _stage_observers(options: CompileOptions, stream: TextIO, stages: list[str]) -> Observer:
    observers: list[Observer] = []
    if options.print_ir_after_all or options.print_ir_after:
        observers.append(_printer(stream, None if options.print_ir_after_all else set(options.print_ir_after)))
    if options.dump_dir is not None:
        observers.append(_dumper(Path(options.dump_dir), stages))

    def observe(index: int, name: str, op) -> None:
        if not observers:
            return
        from attnc.ir import to_text
        text = to_text(op)
        for o in observers:
            o(index, name, text)
    return observe


def _printer(stream: TextIO, stages: set[str] | None) -> Callable:
    """Print the IR after each stage, or after those of `stages` only."""
    def show(index: int, name: str, text: str) -> None:
        if stages is not None and name not in stages:
            return
        stream.write(f"// -----// IR Dump After {name} //----- //\n{text}\n")
        stream.flush()
    return show


DUMPS_WRITTEN = ".attnc-dumps"      # in a dump folder: the dumps the last run wrote there


def _dumper(folder: Path, stages: list[str]) -> Callable:
    """Writes stage NN to folder/NN-<stage>.mlir, after removing the dumps an earlier run
    left there (a longer pipeline's would pass for this run's): the NN-<stage>.mlir files
    of a stage this run has or of an attnc pass, and those the folder's list of the last
    run's dumps names (a user pass's, not loaded now: found by a review); other files stay."""
    from attnc.passes.registry import known_names
    names = {*stages, *known_names(), FRONTEND_STAGE, INPUT_STAGE}
    written = folder / DUMPS_WRITTEN
    try:
        folder.mkdir(parents=True, exist_ok=True)
        listed = set(written.read_text().split()) if written.is_file() else set()
        for old in folder.glob("[0-9][0-9]-*.mlir"):
            if old.name[3:-len(".mlir")] in names or old.name in listed:
                old.unlink()
        written.write_text("")
    except OSError as e:
        what = f"'{e.filename}'" if e.filename and Path(e.filename) != folder else f"the dump folder '{folder}'"
        raise AttncError(f"cannot prepare {what}: {e.strerror}", filename="attnc") from None

    def dump(index: int, name: str, text: str) -> None:
        path = folder / f"{index:02d}-{name}.mlir"
        try:
            path.write_text(text)
            with written.open("a") as f:
                f.write(path.name + "\n")
        except OSError as e:
            raise AttncError(f"cannot write the dump '{path}': {e.strerror or e}", filename="attnc") from None
    return dump


def _check_arch(arch: str) -> None:
    if arch not in TARGETS:
        raise AttncError(f"unsupported target '{arch}'; supported targets are {', '.join(TARGETS)}",
                         filename="attnc")


def describe_pipeline(arch: str) -> str:
    return format_pipeline(target_pipeline(arch))
