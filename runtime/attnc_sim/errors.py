"""The emulator's errors: one exception type, and the reports of races and protocol errors."""
from __future__ import annotations


class SimError(Exception):
    """An emulated launch cannot go on: an unsupported instruction, a fault, a deadlock,
    a warp-collective instruction on a diverged warp. The message names the warp and the
    PTX line where one is known."""
