"""FileCheck tests run in-process: `// RUN:` lines of attnc commands and CHECK patterns.

A test file (tests/passes/tile.mlir, tests/ir/lower/*.mlir) is IR (or any text) with
RUN lines in the style of LLVM's lit:

    // RUN: attnc opt %s -arch sm_80 --pass-pipeline attn-tile | filecheck %s
    // RUN: not attnc opt %s --pass-pipeline "attn-tile{block_m=96}" 2>&1 | filecheck %s --check-prefix=ERR

`%s` is the test file; other paths are relative to the working directory (the
repository root). `attnc` runs `attnc.cli.main` in this process (no subprocess,
no MLIR start-up per line); `not` expects a non-zero exit; `2>&1` checks stderr
too. The patterns are matched by the `filecheck` package, also in-process.

`build_with` compiles a source to its bundle artifacts with options of the target's
lowering pass (the backend tests' way to ask for a kernel choice). `let_chain` writes
the hook bodies whose `let`s reuse each value (compile-time tests,
tools/build_gpu_bundles.py's `reused_lets` suite). `user_pass_source` writes the file of
a user pass (`--load-pass`, `load_passes`) for tests of the pass surfaces.
"""
from __future__ import annotations

import contextlib
import io
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

RUN_MARK = "RUN:"
# attn-tile's options for sm_90a's kernel of one 64-row consumer warpgroup a CTA at head dim
# 64 (several CTAs an SM, a register bound: Note [CTAs per SM]), the table's tile there for
# a score_mod of i and j (ALiBi) and what tests of that kernel ask for where the table
# gives three consumer warpgroups.
SM90A_ONE_WARPGROUP = {"block_m": 64, "block_n": 128}


@dataclass(frozen=True)
class RunLine:
    line: int
    argv: list[str]              # attnc's arguments, %s substituted
    expect_failure: bool
    merge_stderr: bool
    check_prefix: str


def run_lines(path: Path) -> list[RunLine]:
    """The RUN lines of a test file (a RUN line ending in '\\' continues on the next)."""
    runs, pending, first = [], "", 0
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if RUN_MARK not in text:
            continue
        part = text.split(RUN_MARK, 1)[1].strip()
        first = first or number
        if part.endswith("\\"):
            pending += part[:-1] + " "
            continue
        runs.append(_parse_run(pending + part, path, first))
        pending, first = "", 0
    return runs


def _parse_run(command: str, path: Path, line: int) -> RunLine:
    left, sep, right = command.partition("|")
    if not sep:
        raise ValueError(f"{path}:{line}: RUN line must pipe into filecheck: {command}")
    words = shlex.split(left.replace("%s", shlex.quote(str(path))))
    expect_failure = words[:1] == ["not"]
    words = words[1:] if expect_failure else words
    merge = "2>&1" in words
    words = [w for w in words if w != "2>&1"]
    if words[:1] != ["attnc"]:
        raise ValueError(f"{path}:{line}: RUN line must run attnc: {command}")
    check = shlex.split(right)
    if check[:1] != ["filecheck"]:
        raise ValueError(f"{path}:{line}: RUN line must pipe into filecheck: {command}")
    prefix = "CHECK"
    for word in check[1:]:
        if word.startswith("--check-prefix="):
            prefix = word.split("=", 1)[1]
        elif word != "%s":
            # Refused rather than ignored: a check this runner does not make must not look made.
            raise ValueError(f"{path}:{line}: filecheck takes the file and --check-prefix= here, not {word}")
    return RunLine(line, words[1:], expect_failure, merge, prefix)


def run_attnc(argv: list[str]) -> tuple[int, str, str]:
    """`attnc argv...` in this process: (exit status, stdout, stderr)."""
    from attnc.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as e:            # argparse usage errors
            status = e.code if isinstance(e.code, int) else 1
    return status, out.getvalue(), err.getvalue()


def check_file(path: str | Path) -> list[str]:
    """Run every RUN line of `path`; the failures, as messages (empty: all passed)."""
    path = Path(path)
    failures = []
    for run in run_lines(path):
        status, out, err = run_attnc(run.argv)
        where = f"{path}:{run.line}: attnc {' '.join(run.argv)}"
        if (status != 0) != run.expect_failure:
            failures.append(f"{where}\n  exit status {status}\n{err}")
            continue
        text = out + err if run.merge_stderr else out
        ok, report = filecheck(path, text, run.check_prefix)
        if not ok:
            failures.append(f"{where}\n{report}")
    return failures


def filecheck(check_path: Path, text: str, prefix: str = "CHECK") -> tuple[bool, str]:
    """Match `text` against the `prefix` patterns of `check_path` (python filecheck)."""
    from filecheck.matcher import Matcher
    from filecheck.options import Options
    with tempfile.NamedTemporaryFile("w", suffix=".out", delete=False) as f:
        f.write(text)
    report = io.StringIO()
    try:
        opts = Options(match_filename=str(check_path), input_file=f.name, check_prefixes=prefix)
        with contextlib.redirect_stdout(report), contextlib.redirect_stderr(report):
            status = Matcher.from_opts(opts).run()
    finally:
        Path(f.name).unlink()
    return status == 0, report.getvalue()


def let_chain(first: str, step: str, n: int, last: str) -> str:
    """`let x0 = first in let x1 = step(x0) in ... last(xn)`, `step` and `last` written
    with `{p}` for the previous value: with a step that uses it twice, the expression
    has 2^n paths from its result to `first`."""
    lets = "".join(f"let x{k + 1} = {step.format(p=f'x{k}')} in " for k in range(n))
    return f"let x0 = {first} in {lets}{last.format(p=f'x{n}')}"


def variant_source(name: str, d: int, mask: str | None = "j <= i", score_mod: str | None = None,
                   dtype: str = "bf16", params: tuple[str, ...] = (), lse: bool = False) -> str:
    """The `.attn` text of a plain variant: q, k, v and o of head dim d in `dtype`, with
    the mask_mod `mask` and the score_mod `score_mod` (expressions; None: no hook),
    `params` (declarations such as "doc: i32[B, N]") and, with `lse`, the LSE as an output."""
    hooks = "".join(f"  param {p}\n" for p in params) + \
        (f"  score_mod(s, b, h, i, j) = {score_mod}\n" if score_mod else "") + \
        (f"  mask_mod(b, h, i, j) = {mask}\n" if mask else "")
    return (f"attention {name} {{\n  q: {dtype}[B, H, M, {d}]\n  k: {dtype}[B, H, N, {d}]\n"
            f"  v: {dtype}[B, H, N, {d}]\n{hooks}  out o: {dtype}[B, H, M, {d}]\n"
            + ("  out lse: f32[B, H, M]\n" if lse else "") + "}\n")


def build_with(source: str, filename: str, arch: str = "sm_80", *, cubin: bool = True, **options):
    """The bundle artifacts (`attnc.backend.lowering.build`) of `source` compiled for
    `arch`, with `options` given to the passes of the target's pipeline that have them
    (attn-warp-specialize's `producer`, attn-kernel-choices' `staged_o`, ...); without
    `cubin`, the PTX alone (nothing assembled)."""
    from attnc.backend.lowering import build
    from attnc.driver import CompileOptions, compile_mlir
    from attnc.passes.pipelines import pipeline_with_options

    pipeline = pipeline_with_options(arch, options)
    return build(compile_mlir(source, filename, CompileOptions(arch=arch, pass_pipeline=pipeline)), cubin=cubin)


def cubin_resources(art, arch: str) -> dict:
    """The resources of every kernel of the cubin the bundle `art` (`build_with`'s) takes:
    `resource_usage` of its PTX asked as the build asks it (Note [The assembly that spills
    less] in attnc/backend/cubin.py)."""
    from attnc.backend.cubin import resource_usage
    from attnc.passes.hoist import lanes_shared

    return resource_usage(art.ptx, arch, spills_expected=lanes_shared(art.result.module))


def ptx_bundle(source, arch: str, **options):
    """What `attnc.compile(source, arch=arch, **options).bundle` holds but the cubin: the
    PTX the emulator (attnc_sim) runs, with nothing assembled and no kernel cache."""
    from attnc.backend.lowering import build
    from attnc.driver import CompileOptions, _source_of, check_target, compile_mlir
    from attnc_runtime.bundle import Bundle

    text, filename = _source_of(source)
    result = compile_mlir(text, filename, CompileOptions(arch=arch, **options))
    check_target(result, arch, "arch")
    art = build(result, cubin=False)
    return Bundle.from_files(art.manifest, art.files)


def user_pass_source(name: str, body: str, imports: str = "") -> str:
    """The text of a pass file that registers one attnc pass called `name`, whose
    run(module) runs `body` (Python lines, unindented) for each attn.attention `op` of
    the module; `imports` go on top, beside what every such file imports."""
    lines = "".join(f"            {line}\n" for line in body.splitlines())
    return (f"from dataclasses import dataclass\nfrom typing import ClassVar\n"
            f"from attnc.passes import Pass, register\nfrom attnc.ir import attention_ops\n{imports}\n\n"
            f"@register\n@dataclass(frozen=True)\nclass UserPass(Pass):\n"
            f"    name: ClassVar[str] = {name!r}\n\n"
            f"    def run(self, module):\n        for op in attention_ops(module):\n{lines}")


def kernel_ptx(ptx: str, symbol: str) -> str:
    """The text of the entry `symbol` of a PTX module, from `.entry` to its closing brace
    (a bundle's module may hold more kernels: Note [Small grids] in backend/kernel_abi.py)."""
    start = ptx.index(f".entry {symbol}(")
    depth, i = 0, ptx.index("{", ptx.index(")", start))
    while True:
        depth += {"{": 1, "}": -1}.get(ptx[i], 0)
        if depth == 0:
            return ptx[start:i + 1]
        i += 1
