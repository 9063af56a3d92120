"""The instruction families the decoder loads: importing a module registers its handlers.

A family module may define `check_exit(cta)`, the checks of its state when a CTA's last warp
has exited (tensor memory still allocated, ...); it returns a list of `(kind, message)`
report pairs. `EXIT_CHECKS` holds (family, check_exit) of every loaded family; the engine
runs them at the end of each CTA.
"""
from __future__ import annotations

import importlib

FAMILIES = ("isa_control", "isa_int", "isa_float", "isa_cvt", "isa_mem", "isa_warp", "isa_sync",
            "isa_mma", "isa_sm90", "isa_bulk", "isa_sm100")

EXIT_CHECKS: list = []


def _load(name: str) -> None:
    module = importlib.import_module(f"attnc_sim.{name}")
    if hasattr(module, "check_exit"):
        EXIT_CHECKS.append((name, module.check_exit))


for _name in FAMILIES:
    _load(_name)
