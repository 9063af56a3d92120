"""nvidia-smi's SM clock and board power, sampled in the background, summarised over the
wall-clock windows in which a kernel ran (bench_variants.py, power_probe.py).

    with SmiLog() as smi:
        t0 = time.time(); ...run a kernel...; windows.append((t0, time.time()))
    print(smi.summary(windows))

Note [Clock under the power cap]: an H100 or H200 at its 700 W cap lowers the SM clock
until the board's power fits (nvidia-smi's clocks_event_reasons bit 0x4, the software
power cap), so two kernels timed on the same GPU may run at different clocks: on the
documents + causal variant at head dim 128 the sm_80 kernel runs at the cap, below
FlexAttention's clock near the maximum (power_probe.py; results/sm80_h200.md, "Benchmark
timing"). A kernel there is as fast as the energy it spends per launch lets it be,
whatever its latencies. Without nvidia-smi, nothing is logged and every summary is None.
"""
from __future__ import annotations

import csv
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from statistics import median

FIELDS = "timestamp,clocks.sm,power.draw,clocks_event_reasons.active"
PERIOD_MS = 50
POWER_CAP_BIT = 0x4


@dataclass(frozen=True)
class SmiSummary:
    clock_mhz: float            # median SM clock of the samples inside the windows
    power_w: float              # median board power
    capped: float               # the share of those samples with the software power cap active
    samples: int

    def __str__(self) -> str:
        return f"{self.clock_mhz:.0f} MHz, {self.power_w:.0f} W, power-capped {self.capped:.0%} of {self.samples} samples"

    def as_dict(self) -> dict:
        return {"sm_clock_mhz": self.clock_mhz, "power_w": self.power_w, "power_capped": self.capped,
                "smi_samples": self.samples}


class SmiLog:
    def __init__(self, period_ms: int = PERIOD_MS):
        self.period_ms = period_ms
        self._file = None
        self._proc = None

    def __enter__(self) -> "SmiLog":
        if shutil.which("nvidia-smi"):
            self._file = tempfile.NamedTemporaryFile("w+", suffix=".csv", prefix="smi_")
            self._proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits",
                                           "-lms", str(self.period_ms)], stdout=self._file)
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait()

    def samples(self) -> list[tuple[float, float, float, int]]:
        """The samples so far (`parse_samples`)."""
        if self._file is None:
            return []
        with open(self._file.name) as f:
            return parse_samples(f)

    def summary(self, windows: list[tuple[float, float]], skip_s: float = 0.05) -> SmiSummary | None:
        return summarize(self.samples(), windows, skip_s)


def parse_samples(lines) -> list[tuple[float, float, float, int]]:
    """(unix time, SM clock MHz, power W, clock-event reasons) per line of nvidia-smi's
    `--query-gpu=FIELDS --format=csv,noheader,nounits` (local time stamps); lines that do
    not parse (a partial last line, [N/A]) are left out."""
    out = []
    for row in csv.reader(lines):
        try:
            stamp, frac = (row[0].strip().split(".") + ["0"])[:2]
            t = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
            out.append((t, float(row[1]), float(row[2]), int(row[3].strip(), 16)))
        except (IndexError, ValueError):
            continue
    return out


def summarize(samples, windows: list[tuple[float, float]], skip_s: float = 0.05) -> SmiSummary | None:
    """The samples inside any window (each from its start + skip_s: the clock follows a
    new kernel within tens of milliseconds), or None without any."""
    inside = [s for s in samples if any(t0 + skip_s <= s[0] <= t1 for t0, t1 in windows)]
    if not inside:
        return None
    return SmiSummary(median(s[1] for s in inside), median(s[2] for s in inside),
                      sum(1 for s in inside if s[3] & POWER_CAP_BIT) / len(inside), len(inside))
