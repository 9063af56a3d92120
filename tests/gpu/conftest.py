"""The `gpu` fixture: skips with the reason when no GPU or no prebuilt bundles."""
from __future__ import annotations

import pytest

from gpu_support import gpu_skip_reason


@pytest.fixture(scope="session")
def gpu():
    reason = gpu_skip_reason()
    if reason:
        pytest.skip(reason)
    import torch
    return torch.device("cuda")
