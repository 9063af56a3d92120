"""Note [The check beside the lowering] (attnc/schedule/beside.py): attn-verify-pipeline's
exploration runs in a forked process beside the later passes; its error is the one the
compile reports, before a later pass's, as when it runs in place; a child that fails
leaves its explorations to the parent."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnc.passes.pipelines import format_pipeline, target_pipeline
from attnc.schedule import beside
from attnc.testing import user_pass_source

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "tests/passes/verify_pipeline_no_arrive.mlir"     # a removed arrive: a deadlock
DEADLOCK = (f"{PLANTED}:40:13: error: attn-verify-pipeline: channel 'kv' deadlocks: producer waits at "
            f"attn.mbarrier_wait on mbar_k_empty[0]")
WAITED = "attn-verify-pipeline: waiting for its exploration"


def _attnc(args: list[str], beside_on: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "ATTNC_VERIFY_BESIDE": "1" if beside_on else "0", "ATTNC_DISABLE_CACHE": "1"}
    return subprocess.run([sys.executable, "-m", "attnc", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("beside_on", [True, False])
def test_an_unsound_plan_is_refused_before_the_lowering_builds_it(beside_on):
    """The lowering after the check would refuse the edited role too; the check's error,
    located at the op, is the one reported, beside or in place."""
    run = _attnc(["opt", PLANTED, "-arch", "sm_90a", "--pass-pipeline",
                  "attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a"], beside_on)
    assert run.returncode == 1
    assert run.stderr.startswith(DEADLOCK), run.stderr


@pytest.mark.parametrize("beside_on", [True, False])
def test_a_sound_plan_compiles_with_the_check_beside(beside_on, tmp_path):
    run = _attnc(["compile", "examples/mha.attn", "-arch", "sm_90a", "-o", str(tmp_path / "b"), "--time-passes"],
                 beside_on)
    assert run.returncode == 0, run.stderr
    assert (WAITED in run.stderr) == beside_on
    assert "explored again in place" not in run.stderr      # the child did not fail
    assert (tmp_path / "b" / "manifest.json").exists()


# A user pass the lowering does not notice: mbar_k_empty counts twice the arrivals it
# gets, so the producer waits for ever; attn-verify-pipeline runs after it.
WRONG_COUNT = user_pass_source("wrong-count", """\
for bar in R.mbarrier_ops(op):
    if R.name_of(bar) == "mbar_k_empty":
        with bar.context:
            bar.attributes["count"] = R.i64(R.attrs_of(bar)["count"] * 2)""",
                               imports="from attnc.ir import roles as R")
WRONG_COUNT_PIPELINE = format_pipeline(target_pipeline("sm_90a")).replace(
    "attn-verify-pipeline", "wrong-count,attn-verify-pipeline")
WRONG_COUNT_DEADLOCK = ("examples/gemma2.attn:2:1: error: attn-verify-pipeline: channel 'kv' deadlocks: "
                        "producer waits at attn.mbarrier_wait on mbar_k_empty[0]")


@pytest.mark.parametrize("beside_on", [True, False])
def test_a_kernel_whose_check_fails_never_leaves_the_compiler(beside_on, tmp_path):
    """`attnc compile` waits for the check after LLVM and ptxas (the lowering builds this
    plan): the check's error is reported and no bundle is written."""
    (tmp_path / "wrong_count.py").write_text(WRONG_COUNT)
    out = tmp_path / "b"
    run = _attnc(["compile", "examples/gemma2.attn", "-arch", "sm_90a", "--load-pass", str(tmp_path / "wrong_count.py"),
                  "--pass-pipeline", WRONG_COUNT_PIPELINE, "-o", str(out)], beside_on)
    assert run.returncode == 1
    assert run.stderr.startswith(WRONG_COUNT_DEADLOCK), run.stderr
    assert not out.exists()


def test_the_api_caches_no_kernel_whose_check_fails(tmp_path, monkeypatch):
    import attnc
    from attnc.errors import AttncError
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ATTNC_DISABLE_CACHE", raising=False)
    (tmp_path / "wrong_count.py").write_text(WRONG_COUNT)
    with pytest.raises(AttncError, match="channel 'kv' deadlocks"):
        attnc.compile(ROOT / "examples" / "gemma2.attn", arch="sm_90a", pass_pipeline=WRONG_COUNT_PIPELINE,
                      load_passes=str(tmp_path / "wrong_count.py"))
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_a_failed_child_leaves_its_explorations_to_the_parent(monkeypatch):
    parent = os.getpid()

    def explore(n, programs):
        if os.getpid() != parent:
            raise RuntimeError("the child fails")
        return None if n % 2 else f"violation {n}"
    monkeypatch.setattr(beside.threading, "active_count", lambda: 1)
    roles = {"producer": [], "consumer0": []}          # several roles: explored beside
    wait = beside.explore_beside([(0, roles), (1, roles), (2, roles)], explore)
    assert wait() == ["violation 0", "violation 2"]
