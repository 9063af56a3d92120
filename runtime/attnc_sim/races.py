"""Shared-memory race checks: bytes in-flight asynchronous operations write or read.

`Cta.inflight_writes` / `inflight_reads` count, per shared byte, the operations issued
and not completed that will write / still read it. A plain read of a byte with an
in-flight write reads data before its operation completed; a write of a byte an
in-flight operation reads or writes races with it. Both are reports (engine.Launch.report).
"""
from __future__ import annotations

import numpy as np


def byte_span(offs: np.ndarray, width: int) -> np.ndarray:
    return (offs[:, None] + np.arange(width)).reshape(-1)


def begin_write(cta, offs, width):
    cta.inflight_writes[byte_span(offs, width)] += 1
    cta.n_inflight += 1


def end_write(cta, offs, width):
    cta.inflight_writes[byte_span(offs, width)] -= 1
    cta.n_inflight -= 1


def begin_read(cta, span):
    cta.inflight_reads[span] += 1
    cta.n_inflight += 1


def end_read(cta, span):
    cta.inflight_reads[span] -= 1
    cta.n_inflight -= 1


def check_read(w, offs, width, where):
    check_read_bytes(w, byte_span(offs, width), where)


def check_read_bytes(w, span, where):
    """check_read of the bytes `span` themselves."""
    cta = w.cta
    if cta.inflight_writes[span].any():
        bad = int(span[cta.inflight_writes[span] > 0][0])
        cta.launch.report("read-before-complete", w, where,
                          f"reads shared byte {bad:#x} before the asynchronous copy writing it completed")


def check_write(w, offs, width, where, by_async=False):
    cta = w.cta
    span = byte_span(offs, width)
    if cta.inflight_reads[span].any():
        bad = int(span[cta.inflight_reads[span] > 0][0])
        cta.launch.report("write-while-read", w, where,
                          f"writes shared byte {bad:#x} that an in-flight asynchronous operation still reads")
    if not by_async and cta.inflight_writes[span].any():
        bad = int(span[cta.inflight_writes[span] > 0][0])
        cta.launch.report("write-while-read", w, where,
                          f"writes shared byte {bad:#x} that an in-flight asynchronous copy also writes")
