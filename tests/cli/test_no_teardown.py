"""The `attnc` command ends its process without the interpreter's teardown, its output
flushed first, and the usual way where a tracer or profiler may want the teardown (Note
[No teardown] in attnc/__main__.py). Timing is never checked here."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from attnc.testing import run_attnc

ROOT = Path(__file__).resolve().parents[2]


def command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "runtime")])}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_the_output_of_a_pipe_is_whole(tmp_path):
    """Standard output to a pipe is block-buffered: it reaches the reader only if flushed
    before the process ends."""
    done = command("-m", "attnc", "passes", cwd=tmp_path)
    status, out, err = run_attnc(["passes"])
    assert (done.returncode, done.stdout, done.stderr) == (status, out, err)
    assert status == 0 and "attn-tile" in out


def test_a_failure_keeps_its_status_and_message(tmp_path):
    done = command("-m", "attnc", "compile", str(tmp_path / "none.attn"), cwd=tmp_path)
    assert done.returncode == 1
    assert "no such file" in done.stderr


def test_exit_handlers_run_only_where_a_profiler_or_tracer_is_set(tmp_path):
    """Without one, the process ends at once: an exit handler registered before the command
    does not run. Under cProfile, the teardown runs and the profile is written."""
    marker = tmp_path / "handler_ran"
    script = ("import atexit, pathlib, sys\n"
              f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'ran')\n"
              "sys.argv = ['attnc', 'passes']\n"
              "from attnc.__main__ import run\n"
              "run()\n")
    done = command("-c", script, cwd=tmp_path)
    assert done.returncode == 0 and "attn-tile" in done.stdout
    assert not marker.exists()
    profile = tmp_path / "passes.prof"
    done = command("-m", "cProfile", "-o", str(profile), "-m", "attnc", "passes", cwd=tmp_path)
    assert done.returncode == 0 and "attn-tile" in done.stdout
    assert profile.stat().st_size > 0
