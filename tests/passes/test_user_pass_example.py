"""examples/passes/softcap_scores.py, the README's user pass, run as a user runs it:
`attnc compile --load-pass FILE --pass-pipeline ...`. Its IR and errors are checked in
user_pass_example.mlir; its kernel is the one of the cap written in the source."""
from pathlib import Path

import pytest

from attnc.driver import describe_pipeline
from attnc.passes import registry
from attnc.testing import check_file, run_attnc

ROOT = Path(__file__).resolve().parents[2]
PASS_FILE = "examples/passes/softcap_scores.py"
ALIBI_SCORE = "score_mod(s, b, h, i, j) = s + slopes[h] * (j - i)"


@pytest.fixture(autouse=True)
def at_root_without_user_passes(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(registry, "_user_passes", {})
    monkeypatch.setattr(registry, "_user_origins", {})


def test_the_ir_it_builds_and_its_errors():
    failures = check_file("tests/passes/user_pass_example.mlir")
    assert not failures, "\n".join(failures)


def test_its_kernel_is_that_of_the_cap_written_in_the_source(tmp_path):
    source = (ROOT / "examples/alibi.attn").read_text()
    assert ALIBI_SCORE in source
    capped = tmp_path / "alibi.attn"
    capped.write_text(source.replace(ALIBI_SCORE, "score_mod(s, b, h, i, j) = "
                                                  "20.0 * tanh((s + slopes[h] * (j - i)) / 20.0)"))
    pipeline = f"softcap-scores{{cap=20.0}},{describe_pipeline('sm_80')}"
    status, by_pass, err = run_attnc(["compile", "examples/alibi.attn", "-arch", "sm_80", "--emit", "ptx",
                                      "--load-pass", PASS_FILE, "--pass-pipeline", pipeline])
    assert status == 0, err
    status, by_source, err = run_attnc(["compile", str(capped), "-arch", "sm_80", "--emit", "ptx"])
    assert status == 0, err
    assert "tanh.approx.f32" in by_pass
    assert by_pass == by_source


def test_the_readme_shows_this_pass():
    """The README's user-pass section is this file's code (its comments aside), so the
    pass a reader copies is the one tested here."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("```python\n", readme.index("caps the scores after a variant's score_mod")) + len("```python\n")
    shown = readme[start:readme.index("```", start)]
    code = (ROOT / PASS_FILE).read_text()
    code = code[code.index("from dataclasses"):]
    without_comments = "".join(line for line in code.splitlines(keepends=True) if not line.lstrip().startswith("#"))
    assert shown.strip() == without_comments.strip()
