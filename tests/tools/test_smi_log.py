"""bench/smi_log.py: nvidia-smi's samples, and their summary over a kernel's windows."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import smi_log  # noqa: E402

LOG = """2026/11/28 04:10:00.000, 1980, 120.5, 0x0000000000000001
2026/11/28 04:10:00.050, 1815, 692.1, 0x0000000000000004
2026/11/28 04:10:00.100, 1650, 701.0, 0x0000000000000004
2026/11/28 04:10:00.150, 1980, 686.0, 0x0000000000000000
2026/11/28 04:10:00.200, [N/A], 0.0, 0x0
2026/11/28 04:10:00.2"""


def _t(clock: str) -> float:
    stamp, frac = clock.split(".")
    return time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)


def test_samples_parse_and_bad_lines_are_left_out():
    samples = smi_log.parse_samples(LOG.splitlines())
    assert [s[1:] for s in samples] == [(1980.0, 120.5, 1), (1815.0, 692.1, 4), (1650.0, 701.0, 4),
                                        (1980.0, 686.0, 0)]
    assert samples[1][0] - samples[0][0] == pytest.approx(0.05)


def test_summary_takes_the_samples_inside_the_windows():
    samples = smi_log.parse_samples(LOG.splitlines())
    t0 = _t("2026/11/28 04:10:00.000")
    # from 0.03 s on (the window's start + skip): the three samples at 0.05-0.15
    summary = smi_log.summarize(samples, [(t0 - 0.02, t0 + 0.16)])
    assert (summary.clock_mhz, summary.power_w, summary.samples) == (1815.0, 692.1, 3)
    assert summary.capped == pytest.approx(2 / 3)
    assert smi_log.summarize(samples, [(t0 + 10, t0 + 11)]) is None
    # two windows together
    assert smi_log.summarize(samples, [(t0 - 0.06, t0 + 0.01), (t0 + 0.1, t0 + 0.11)], skip_s=0.0).samples == 2


def test_without_nvidia_smi_nothing_is_logged(monkeypatch):
    monkeypatch.setattr(smi_log.shutil, "which", lambda name: None)
    with smi_log.SmiLog() as smi:
        pass
    assert smi.samples() == [] and smi.summary([(0.0, 1e12)]) is None
