"""The `attnc` command: the console script and `python -m attnc ...`.

Note [No teardown]: once the command is done, what is left is the interpreter's
teardown, which frees every object one by one -- the MLIR contexts and their modules
among them, tens of thousands of ops a kernel -- and took 0.03-0.18 s of a 1-2 s
compile (results/compile_times.md, "No teardown"), and waits for the threads still at
work: a kernel that keeps its register bound may still be assembled without it, for
nothing, on a second thread (Note [Assembled beside the trial] in
attnc/backend/cubin.py). Every file the command writes is closed by then, and nothing
its output needs is still at work, so the process ends at once after flushing standard
output and error, as a C compiler frees nothing at exit.
Where something may still want the teardown -- a tracer or a profiler (coverage,
cProfile) set, or the command run with `-X dev` -- it ends the usual way.
"""
import os
import sys


def run() -> None:
    from attnc.cli import main
    status = main()
    if sys.gettrace() is None and sys.getprofile() is None and not sys.flags.dev_mode \
            and "coverage" not in sys.modules:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):       # a reader gone away: the usual end reports it
            sys.exit(status)
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    run()
