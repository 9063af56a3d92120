"""`attnc compile --time-passes`: a table on standard error of where the compile's time
went -- each pass in pipeline order, the backend's steps, the writing of the output and
the total -- or, for a compile served from the kernel cache, that it was. The rows and
their order are checked, never how long anything took."""
from __future__ import annotations

import re
from pathlib import Path

from attnc.passes.pipelines import pipeline_with_options, target_pipeline
from attnc.testing import SM90A_ONE_WARPGROUP, run_attnc

ROOT = Path(__file__).resolve().parents[2]
MHA = str(ROOT / "examples" / "mha.attn")
ROW = re.compile(r"(?P<indent> *)(?P<label>\S.*?)\s+(?P<seconds>-?\d+\.\d{3}) s\s+(?P<share>-?\d+\.\d)%")


def table(err: str) -> list[tuple[int, str]]:
    """(indentation, label) of each row of the time report in `err`."""
    report = err[err.index("attnc: where the time went"):]
    return [(len(m["indent"]), m["label"]) for m in map(ROW.fullmatch, report.splitlines()) if m]


def test_a_compile_reports_each_pass_then_the_backend_then_the_total(tmp_path, monkeypatch):
    from attnc.backend import cubin
    monkeypatch.setenv("ATTNC_DISABLE_CACHE", "1")
    cubin._assemble.cache_clear()
    cubin._fewer_spills.cache_clear()
    status, out, err = run_attnc(["compile", MHA, "-arch", "sm_80", "-o", str(tmp_path / "b"), "--time-passes"])
    assert status == 0 and out.startswith(f"wrote {tmp_path / 'b'}/")     # standard output is unchanged
    rows = table(err)
    labels = [label for _, label in rows]
    passes = [p.name for p in target_pipeline("sm_80")]
    assert [label for label in labels if label in passes] == passes
    backend = labels.index("backend")
    assert labels.index(passes[-1]) < backend < labels.index("writing the bundle")
    depth = rows[backend][0]
    steps = [label for indent, label in rows[backend + 1:] if indent > depth]
    assert [s for s in steps if s in ("MLIR -> PTX", "PTX -> cubin (nvJitLink)")] == \
        ["MLIR -> PTX", "PTX -> cubin (nvJitLink)"]
    assert labels[-2:] == ["other (imports, the rest)", "total"]
    assert rows[-1][0] == rows[0][0]                # the total is a top-level row


def test_a_compile_served_from_the_cache_says_so_and_runs_no_pass(tmp_path):
    args = ["compile", MHA, "-arch", "sm_80", "--emit", "ptx", "-o", str(tmp_path / "v.ptx"), "--time-passes"]
    assert run_attnc(args)[0] == 0
    status, _, err = run_attnc(args)
    assert status == 0
    report = err[err.index("attnc: where the time went"):]
    assert re.search(r"^attnc: served from the kernel cache \(.+\): no pass ran$", report, re.M)
    labels = [label for _, label in table(err)]
    assert labels == ["kernel cache lookup", "writing the ptx", "other (imports, the rest)", "total"]


def test_upstream_passes_and_the_ir_output_have_their_rows(tmp_path):
    status, _, err = run_attnc(["compile", MHA, "--emit", "mlir", "-o", str(tmp_path / "v.mlir"),
                                "--pass-pipeline", "canonicalize,attn-tile,cse", "--time-passes"])
    assert status == 0
    labels = [label for _, label in table(err)]
    assert [label for label in labels if label in ("canonicalize", "attn-tile", "cse")] == \
        ["canonicalize", "attn-tile", "cse"]
    assert "writing the IR" in labels and "backend" not in labels


def test_the_register_bound_trial_shows_under_the_pass_that_runs_it(tmp_path, monkeypatch):
    """sm_90a's one-warpgroup kernel at head dim 64 keeps a register bound only where a trial
    compile does not spill (Note [CTAs per SM]): its PTX and cubin are steps of attn-lower-sm90a."""
    monkeypatch.setenv("ATTNC_DISABLE_CACHE", "1")
    source = tmp_path / "d64.attn"
    source.write_text((ROOT / "examples" / "softcap.attn").read_text().replace("128]", "64]"))
    one_warpgroup = pipeline_with_options("sm_90a", SM90A_ONE_WARPGROUP)     # a bound to try
    status, _, err = run_attnc(["compile", str(source), "-arch", "sm_90a", "--emit", "ptx", "--pass-pipeline",
                                one_warpgroup, "-o", str(tmp_path / "v.ptx"), "--time-passes"])
    assert status == 0
    rows = table(err)
    lower = [label for _, label in rows].index("attn-lower-sm90a")
    nested = [label for indent, label in rows[lower + 1:] if indent > rows[lower][0]]
    assert "MLIR -> PTX" in nested and "PTX -> cubin (nvJitLink)" in nested


def test_the_help_documents_the_flag():
    status, out, _ = run_attnc(["compile", "--help"])
    assert status == 0 and "--time-passes" in out and "where the compile's time went" in " ".join(out.split())


def test_the_steps_of_a_thread_beside_the_compile_are_no_rows():
    """Work on a second core (the far sides' copy of Note [Spills of the near tiles])
    shows as the time its caller waits for it, not as rows under whatever step the
    recording thread is in meanwhile."""
    import threading

    from attnc import timing

    def beside():
        with timing.step("beside"):
            timing.add("added beside", 1.0)
    with timing.recording() as report:
        with timing.step("trial"):
            thread = threading.Thread(target=beside)
            thread.start()
            thread.join()
    assert [c.name for c in report.total.children] == ["trial"]
    assert report.total.children[0].children == []
