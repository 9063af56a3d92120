"""The instruction families the decoder loads: importing a module registers its handlers."""
from __future__ import annotations

import importlib

FAMILIES = ("isa_control", "isa_int", "isa_float", "isa_cvt", "isa_mem", "isa_warp", "isa_sync",
            "isa_mma", "isa_sm90")
OPTIONAL = ("isa_sm100",)       # the sm_100a family, where present

for _name in FAMILIES:
    importlib.import_module(f"attnc_sim.{_name}")
for _name in OPTIONAL:
    try:
        importlib.import_module(f"attnc_sim.{_name}")
    except ModuleNotFoundError as e:
        if e.name != f"attnc_sim.{_name}":
            raise
