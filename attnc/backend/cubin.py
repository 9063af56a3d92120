"""PTX -> cubin in-process with nvJitLink, and the resource report of a kernel.

`ptx_to_cubin(ptx, "sm_80")` assembles without any CUDA toolkit (the nvJitLink library
ships as a wheel; so does the ptxas of Notes [Whole-program assembly] and [The assembly
that spills less]). `resource_usage(ptx, "sm_80")` returns registers, spills, stack and
static shared memory per kernel, read from the info log of the cubin `ptx_to_cubin` takes
(nvJitLink's `-verbose`, or the ptxas binary's `-v`), or from `ptxas -v` when a `ptxas`
binary is on PATH and `prefer_ptxas` is set (both print the same `ptxas info` lines).

Note [Whole-program assembly]: nvJitLink assembles PTX as one unit of a link, and ptxas
then ignores `setmaxnreg` ("(C7504) 'setmaxnreg' ignored to maintain compatibility
across compilation units"). The sm_90a kernel with a producer warpgroup (sm90a_ws.py)
lives on it: without it its consumers keep the launch's 168 registers, spill 524
bytes and have their wgmma serialized (C7512), at head dim 128. So PTX that uses
setmaxnreg is assembled by the `ptxas` binary as a whole program, which keeps it:
the one of the `nvidia-cuda-nvcc` wheel (a dependency, the same release as the
nvJitLink wheel), else one on PATH; with neither, nvJitLink's cubin with a warning
(correct, and slow).

Note [Assembled beside the trial]: sm_90a's register-bound trial (Note [The bound the
assembler decides] in register_bound.py) asks the resources of its kernel's PTX under the
bound; where that spills, the bundle takes the kernel without the bound, whose PTX is the
trial's less its `.minnctapersm` line (Note [A bound dropped] in ptx.py). nvJitLink lets
go of the GIL, so `resource_usage(ptx, unbounded=...)` has that PTX assembled on a second
thread meanwhile, where the process has a second core that nothing else wants now, and
the bundle's `ptx_to_cubin` of it takes that cubin. Where the bound is kept, the second
assembly was for nothing, and cost no wall time (on a busy machine it would: hence the
count of the tasks ready to run now; the load average, of the last minute, still counts
a compile that ended seconds ago).

Note [The assembly that spills less]: an sm_80 kernel whose lanes share the diagonals
(Note [Diagonals across the warp] in warp_diagonals.py; the bundle's build says so,
`spills_expected`) is assembled by nvJitLink and by the ptxas binary as a whole program,
and the bundle takes the cubin that spills fewer bytes, nvJitLink's at a tie
(SPILLS_WEIGHED). A unit of a link, as nvJitLink assembles PTX (`ptxas -c` gives the
same), can allocate such a kernel's registers far worse: relative_bias's stores 1,720
bytes of spills so and 16 as a whole program. Elsewhere the whole program spills as much
or a little more (relative_bias's kernel without the lanes stores 52 bytes against 44,
mqa's 16 against none: results/sm80_h200.md, "The assembly that spills less"), and a
second assembly of a kernel that spills doubles its assembly (the 150 params' read of
results/compile_times.md: 5.9 s, then ptxas's 6.2 s, for 6,880 bytes stored and loaded
against 6,992), so every other kernel is nvJitLink's alone. The driver that runs sm_80's
PTX in our measurements (no sm_80 GPU here) compiles it as a whole program. Where the
module has one kernel and a second core is idle, ptxas runs beside nvJitLink, stopped
should nvJitLink's cubin show no spills; else after it, only where that cubin spills.

Note [Split compile]: ptxas compiles a module's kernels one after the other, and a
module may hold two or three (sm_80's tiles_last kernel, Note [Small grids] in kernel_abi.py; a block map
and a tile table); `--split-compile=0` has it compile them on every core. Each kernel's
code (its `.text.<kernel>` section) is the same byte for byte; the cubin's tables list
the kernels in another order. A module of one kernel has nothing to split, and is
assembled as it was. Split, ptxas's threads write their advisories (C7504, `(C7512)
Potential Performance Loss: wgmma.mma_async instructions are serialized`) to the
process's standard error, not to nvJitLink's log: a register-bound trial's (Note
[Assembled beside the trial]) reached the terminal of an `attnc compile` whose kernel
then had no bound and no such loss, and a test reading the log for them saw none. So
such an assembly runs with file descriptor 2 on a file of its own (`_stderr_of`; one at
a time, which no example's compile waited on) and its `ptxas` lines join the log; any
other line there goes on to standard error.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnc import timing

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor


class CubinError(RuntimeError):
    """nvJitLink or ptxas refused the PTX (with its error log)."""


@dataclass(frozen=True)
class CubinResult:
    cubin: bytes
    info_log: str


@dataclass(frozen=True)
class ResourceUsage:
    function: str
    registers: int
    spill_stores: int       # bytes
    spill_loads: int        # bytes
    stack_frame: int        # bytes
    shared_static: int      # bytes (the kernels here use dynamic shared memory)

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0


def _arch_flag(arch: str) -> str:
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise CubinError(f"bad arch {arch!r}: expected e.g. sm_80, sm_90a, sm_100a")
    return f"-arch={arch}"


def _log(getter_size, getter, handle) -> str:
    size = getter_size(handle)
    if size <= 1:
        return ""
    buf = bytearray(size)
    getter(handle, buf)
    return bytes(buf).rstrip(b"\0").decode(errors="replace")


OPTIONS = ("-O3",)
SPLIT = ("-Xptxas=--split-compile=0",)              # Note [Split compile]
_ENTRY = re.compile(r"^(?:\.\w+\s+)*\.entry\s", re.M)


def default_options(ptx: str) -> tuple[str, ...]:
    """OPTIONS, and SPLIT for PTX of several kernels."""
    return OPTIONS + SPLIT if len(_ENTRY.findall(ptx)) > 1 else OPTIONS


def ptx_to_cubin(ptx: str, arch: str, *, verbose: bool = True, options: tuple[str, ...] | None = None,
                 spills_expected: bool = False) -> CubinResult:
    """Assemble `ptx` for `arch` (e.g. "sm_80") with nvJitLink (PTX that uses setmaxnreg:
    Note [Whole-program assembly]; sm_80 where `spills_expected`: Note [The assembly that
    spills less]); the info log holds the `ptxas info`
    lines when `verbose`. The last few results are kept: the register-bound trial (Note
    [The bound the assembler decides] in register_bound.py) assembles the PTX the bundle
    then takes."""
    options = default_options(ptx) if options is None else options
    if _needs_whole_program(ptx):
        return _assemble_whole_program(ptx, arch, tuple(options))
    beside = _beside.pop((ptx, arch, verbose, tuple(options)), None)
    if beside is not None:
        with timing.step("PTX -> cubin (nvJitLink, assembled beside the trial)"):
            return beside.result()
    if verbose and spills_expected and arch in SPILLS_WEIGHED:
        return _fewer_spills(ptx, arch, tuple(options))
    return _assemble(ptx, arch, verbose, tuple(options))


# Targets where a kernel expected to spill under nvJitLink takes the cubin of nvJitLink and
# ptxas that spills less (Note [The assembly that spills less]).
SPILLS_WEIGHED = frozenset({"sm_80"})


@functools.lru_cache(maxsize=8)
def _fewer_spills(ptx: str, arch: str, options: tuple[str, ...]) -> CubinResult:
    """Note [The assembly that spills less]."""
    ptxas = whole_program_ptxas()
    if ptxas is None:
        return _assemble(ptx, arch, True, options)
    whole_options = tuple(o.removeprefix("-Xptxas=") for o in options)
    if len(_ENTRY.findall(ptx)) > 1 or not idle_core():
        linked = _assemble(ptx, arch, True, options)
        if not spilled_bytes(linked):
            return linked
        try:
            return _lesser(linked, _run_ptxas(ptxas, ptx, arch, whole_options))
        except (CubinError, OSError):
            return linked
    linked_later = _second_thread().submit(_nvjitlink, ptx, arch, True, options)
    with tempfile.TemporaryDirectory() as tmp, timing.step("PTX -> cubin (nvJitLink, ptxas beside it)"):
        try:
            proc = _start_ptxas(ptxas, ptx, arch, whole_options, Path(tmp))
        except OSError:
            return linked_later.result()
        try:
            linked = linked_later.result()
            if not spilled_bytes(linked):
                return linked
            return _lesser(linked, _ptxas_result(ptxas, proc, arch, Path(tmp)))
        except CubinError:
            if linked_later.exception() is not None:
                raise
            return linked_later.result()            # ptxas failed where nvJitLink did not
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def spilled_bytes(result: CubinResult) -> int:
    """The bytes every kernel of `result` spills, stored and loaded."""
    return sum(u.spill_stores + u.spill_loads for u in parse_resource_usage(result.info_log).values())


def _lesser(linked: CubinResult, whole: CubinResult) -> CubinResult:
    """The cubin of the two that spills fewer bytes; nvJitLink's (`linked`) at a tie."""
    return whole if spilled_bytes(whole) < spilled_bytes(linked) else linked


def _needs_whole_program(ptx: str) -> bool:
    return "setmaxnreg" in ptx


@functools.lru_cache(maxsize=8)
def _assemble_whole_program(ptx: str, arch: str, options: tuple[str, ...]) -> CubinResult:
    """Note [Whole-program assembly]."""
    ptxas = whole_program_ptxas()
    if ptxas is None:
        warnings.warn("this kernel sets its warpgroups' registers (setmaxnreg), which nvJitLink "
                      "ignores; no ptxas binary found (pip install nvidia-cuda-nvcc, or put one on PATH), "
                      "so it is assembled without: correct, but it spills", RuntimeWarning, stacklevel=3)
        return _assemble(ptx, arch, True, options)
    # nvJitLink's options: those it passes to ptxas (-Xptxas=...) are ptxas's own
    result = _run_ptxas(ptxas, ptx, arch, tuple(o.removeprefix("-Xptxas=") for o in options))
    check_register_pool(ptx, result.info_log)
    return result


_ENTRY_NAME = re.compile(r"\.entry\s+(\w+)\s*\(")
_MAXNTID = re.compile(r"\.maxntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")


def check_register_pool(ptx: str, log: str) -> None:
    """Note [The pool setmaxnreg moves]: a kernel's setmaxnreg budgets are planned from the
    registers its threads start with, the register file's share of each (65536 over the
    CTA's threads, a multiple of 8: what ptxas gives a kernel of one CTA an SM that uses
    setmaxnreg), and setmaxnreg.inc waits until the warps that lower theirs have given
    enough back (attnc/schedule/recipes.py's check_register_budget). Should ptxas give
    fewer, the pool would be smaller than the budgets and the kernel would hang on a GPU,
    where the emulator (which does not model registers) runs it to the end. So a kernel
    whose PTX sets its registers is refused unless ptxas reports at least that share."""
    from attnc.schedule.recipes import register_share

    usage = parse_resource_usage(log)
    entries = [(m.start(), m.group(1)) for m in _ENTRY_NAME.finditer(ptx)]
    for k, (start, name) in enumerate(entries):
        text = ptx[start:entries[k + 1][0] if k + 1 < len(entries) else len(ptx)]
        ntid = _MAXNTID.search(text)
        if "setmaxnreg" not in text or ntid is None or name not in usage:
            continue
        threads = 1
        for n in ntid.groups():
            threads *= int(n or 1)
        share = register_share(threads)
        if usage[name].registers < share:
            raise CubinError(f"ptxas gave {name} {usage[name].registers} registers a thread, fewer than the "
                             f"{share} of the register file's share of its {threads} threads that its "
                             f"setmaxnreg budgets are planned from: setmaxnreg.inc would wait for ever "
                             f"(Note [The pool setmaxnreg moves] in attnc/backend/cubin.py)")


def _run_ptxas(ptxas: str, ptx: str, arch: str, options: tuple[str, ...] = ()) -> CubinResult:
    """`ptxas -v` on `ptx` as a whole program: the cubin and its info lines."""
    with tempfile.TemporaryDirectory() as tmp, timing.step("PTX -> cubin (ptxas)"):
        return _ptxas_result(ptxas, _start_ptxas(ptxas, ptx, arch, options, Path(tmp)), arch, Path(tmp))


def _start_ptxas(ptxas: str, ptx: str, arch: str, options: tuple[str, ...], folder: Path) -> subprocess.Popen:
    """`ptxas -v` on `ptx`, begun in `folder`."""
    src = folder / "kernel.ptx"
    src.write_text(ptx)
    return subprocess.Popen([ptxas, _arch_flag(arch), *options, "-v", str(src), "-o", str(folder / "kernel.cubin")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ptxas_result(ptxas: str, proc: subprocess.Popen, arch: str, folder: Path) -> CubinResult:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise CubinError(f"ptxas ({ptxas}) failed for {arch}:\n{err}")
    return CubinResult((folder / "kernel.cubin").read_bytes(), out + err)


def whole_program_ptxas() -> str | None:
    """The `ptxas` of the nvidia-cuda-nvcc wheel, else the one on PATH, else None."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob("cu*/bin/ptxas"), reverse=True):
            if candidate.is_file():
                return str(candidate)
    return ptxas_path()


@functools.lru_cache(maxsize=8)
def _assemble(ptx: str, arch: str, verbose: bool, options: tuple[str, ...]) -> CubinResult:
    with timing.step("PTX -> cubin (nvJitLink)"):
        return _nvjitlink(ptx, arch, verbose, options)


def _nvjitlink(ptx: str, arch: str, verbose: bool, options: tuple[str, ...]) -> CubinResult:
    from cuda.bindings import nvjitlink
    opts = [_arch_flag(arch), *options] + (["-verbose"] if verbose else [])
    handle = nvjitlink.create(len(opts), opts)
    try:
        data = ptx.encode()
        advisories: list[str] = []
        try:
            with _stderr_of(SPLIT[0] in options, advisories):     # ptxas runs in both
                nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
                nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            err = _log(nvjitlink.get_error_log_size, nvjitlink.get_error_log, handle)
            raise CubinError(f"nvJitLink failed for {arch}: {e}\n{err}") from None
        size = nvjitlink.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(handle, cubin)
        info = _log(nvjitlink.get_info_log_size, nvjitlink.get_info_log, handle)
        return CubinResult(bytes(cubin), "\n".join([info, *advisories]) if advisories else info)
    finally:
        nvjitlink.destroy(handle)


_STDERR_TAKEN = threading.Lock()


@contextlib.contextmanager
def _stderr_of(split: bool, lines: list[str]):
    """Note [Split compile]: where `split`, file descriptor 2 on a file of its own for the
    block's time; its `ptxas` lines are added to `lines`, the others written to stderr."""
    if not split:
        yield
        return
    with _STDERR_TAKEN, tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        try:
            saved = os.dup(2)
        except OSError:             # no standard error to take
            yield
            return
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            others = []
            for line in sink.read().decode(errors="replace").splitlines():
                (lines if line.startswith("ptxas") else others).append(line)
            if any(others):
                print("\n".join(others), file=sys.stderr)


_FUNC = re.compile(r"Compiling entry function '([^']+)'")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_resource_usage(log: str) -> dict[str, ResourceUsage]:
    """Per-function resources from `ptxas info` lines (nvJitLink -verbose or ptxas -v)."""
    out: dict[str, ResourceUsage] = {}
    current, frame = None, (0, 0, 0)
    for line in log.splitlines():
        if m := _FUNC.search(line):
            current, frame = m.group(1), (0, 0, 0)
        elif (m := _SPILL.search(line)) and current:
            frame = tuple(int(g) for g in m.groups())
        elif (m := _REGS.search(line)) and current:
            smem = _SMEM.search(line)
            out[current] = ResourceUsage(current, int(m.group(1)), frame[1], frame[2], frame[0],
                                         int(smem.group(1)) if smem else 0)
    return out


def ptxas_path() -> str | None:
    return shutil.which("ptxas")


def resource_usage(ptx: str, arch: str, *, prefer_ptxas: bool = False, unbounded: str | None = None,
                   spills_expected: bool = False) -> dict[str, ResourceUsage]:
    """Registers/spills per kernel of `ptx` compiled for `arch` (`spills_expected`: as
    `ptx_to_cubin`'s); `unbounded` (its PTX without a register bound) is assembled
    meanwhile (Note [Assembled beside the trial])."""
    if prefer_ptxas and ptxas_path():
        log = _run_ptxas(ptxas_path(), ptx, arch).info_log
    else:
        if unbounded is not None:
            _assemble_beside(unbounded, arch)
        log = ptx_to_cubin(ptx, arch, verbose=True, spills_expected=spills_expected).info_log
    usage = parse_resource_usage(log)
    if not usage:
        raise CubinError(f"no 'ptxas info' lines in the log for {arch}:\n{log}")
    return usage


_beside: dict[tuple, Future] = {}           # ptx_to_cubin's arguments -> the cubin on its way
_BESIDE_KEPT = 2


def _assemble_beside(ptx: str, arch: str) -> None:
    key = (ptx, arch, True, default_options(ptx))
    if _needs_whole_program(ptx) or key in _beside or not idle_core():
        return
    while len(_beside) >= _BESIDE_KEPT:
        _beside.pop(next(iter(_beside)))
    _beside[key] = _second_thread().submit(_nvjitlink, *key)


def idle_core() -> bool:
    """A second core that nothing else wants now: fewer tasks ready to run than cores,
    this process's running thread among them."""
    cores = len(os.sched_getaffinity(0))
    return cores >= 2 and _ready_tasks() < cores


def _ready_tasks() -> float:
    """The tasks ready to run now (Linux's /proc/loadavg: running and waiting for a core),
    this thread included; elsewhere, the load average of the last minute."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return os.getloadavg()[0] + 0.5


@functools.lru_cache(maxsize=1)
def _second_thread() -> ThreadPoolExecutor:
    from concurrent.futures import ThreadPoolExecutor
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnc-nvjitlink")
