"""`python -m attnc_runtime.run`: its options come from the bundle's dims, its refusals
are one-line errors, and its comparison treats infinities and NaNs as it should.
(Running a kernel needs torch and a GPU: see test_gpu.py and design.md section 8.)"""
from __future__ import annotations

import json

import numpy as np
import pytest

from attnc_runtime import run
from attnc_runtime.testing import synthetic_files, synthetic_manifest


@pytest.fixture
def bundle(tmp_path):
    manifest = synthetic_manifest()
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    for name, blob in synthetic_files(manifest).items():
        (tmp_path / name).write_bytes(blob)
    return tmp_path


def test_help_lists_the_bundles_dims_with_defaults(bundle, capsys):
    with pytest.raises(SystemExit) as info:
        run.main([str(bundle), "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--B B dim B (default 2)", "--HKV HKV dim HKV (default 2)",
                   "--M M dim M (default 1024)", "--P P dim P", "--iters ITERS"):
        assert option in text


def test_a_dim_without_default_is_required(bundle, capsys):
    with pytest.raises(SystemExit) as info:
        run.main([str(bundle)])
    assert info.value.code == 2
    assert "the following arguments are required: --P" in capsys.readouterr().err


def test_a_folder_that_is_not_a_bundle(tmp_path, capsys):
    assert run.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path}: not a bundle (no manifest.json)\n"


def test_compare_tolerances():
    want = np.array([1.0, -2.0, 0.5])
    assert run.compare(want + 0.01, want, atol=0.02, rtol=0.0) == (True, pytest.approx(0.01))
    ok, err = run.compare(want + [0.0, 0.0, 0.1], want, atol=0.02, rtol=0.02)
    assert not ok and err == pytest.approx(0.1)


def test_compare_infinities_and_nans():
    want = np.array([-np.inf, 1.0])                 # a fully masked row has lse = -inf
    assert run.compare(np.array([-np.inf, 1.0]), want, 1e-3, 1e-3) == (True, 0.0)
    assert run.compare(np.array([np.nan, 1.0]), want, 1e-3, 1e-3) == (False, np.inf)
    assert run.compare(np.array([np.inf, 1.0]), want, 1e-3, 1e-3)[0] is False


def test_compare_shape_mismatch():
    assert run.compare(np.zeros(3), np.zeros(4), 1.0, 1.0) == (False, np.inf)


def test_the_bundle_may_come_after_the_options(bundle, capsys):
    """Options that take a value were taken for the bundle when they came first (found by a
    review: `--B 1 BUNDLE` said "1: not a bundle")."""
    with pytest.raises(SystemExit) as info:
        run.main(["--B", "1", "--iters=3", "--no-check", str(bundle), "--help"])
    assert info.value.code == 0 and "--P P" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("argv, bundle", [
    (["b"], "b"), (["--B", "1", "b"], "b"), (["--no-check", "b", "--M", "3"], "b"),
    (["--iters=5", "b"], "b"), (["--", "-odd-name"], "-odd-name"), (["--B", "1"], None), ([], None),
])
def test_the_bundle_argument_is_found_among_the_options(argv, bundle):
    assert run._bundle_argument(argv) == bundle
