"""The `gpu` fixture: skips with the reason when no GPU or no prebuilt bundles; and a
per-file count of the GPU tests' outcomes at the end of the run."""
from __future__ import annotations

import collections
from pathlib import Path

import pytest

from gpu_support import gpu_skip_reason


def pytest_configure(config):
    # Set by the GPU tests to keep a bundle's cases on one pytest-xdist worker
    # (`-n 8 --dist loadgroup`), so its PTX is JIT-compiled once.
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one xdist worker")


@pytest.fixture(scope="session")
def gpu():
    reason = gpu_skip_reason()
    if reason:
        pytest.skip(reason)
    import torch
    return torch.device("cuda")


def pytest_terminal_summary(terminalreporter):
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(report, "nodeid", "")
            if "tests/gpu/" in nodeid:
                counts[Path(nodeid.split("::")[0]).name][outcome] += 1
    if not counts:
        return
    terminalreporter.section("GPU tests by file")
    for name, c in sorted(counts.items()):
        terminalreporter.write_line(f"{name}: {c['passed']} passed, {c['failed']} failed, "
                                    f"{c['skipped']} skipped, {c['error']} errors")
