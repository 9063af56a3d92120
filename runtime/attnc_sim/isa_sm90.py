"""sm_90a placeholder: wgmma (added with its shared-memory descriptors)."""
from __future__ import annotations
