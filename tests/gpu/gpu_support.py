"""GPU tests run from prebuilt bundles (design.md section 8).

`python tools/build_gpu_bundles.py` compiles them here into `.bundles/gpu/` (an
index.json lists them); on a machine with a GPU, torch and cuda-python,
`pytest -m gpu tests/gpu` loads them with `attnc_runtime` and compares with
`attnc.reference`. Without a GPU or without the bundles every test skips and
says why.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = Path(os.environ.get("ATTNC_GPU_BUNDLES", ROOT / ".bundles" / "gpu"))


def gpu_skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible"
    if not (BUNDLES / "index.json").exists():
        return f"no prebuilt bundles at {BUNDLES} (run tools/build_gpu_bundles.py)"
    return None


def bundle_index() -> list[dict]:
    path = BUNDLES / "index.json"
    return json.loads(path.read_text()) if path.exists() else []
