"""Which code object runs on which GPU (Note [Code object compatibility])."""
from __future__ import annotations

import pytest

from attnc_runtime.arch import select_code
from attnc_runtime.errors import AttncRuntimeError

BOTH = ("cubin", "ptx")


@pytest.mark.parametrize("target, kinds, cc, chosen", [
    ("sm_80", BOTH, (8, 0), "cubin"),
    ("sm_80", BOTH, (8, 6), "cubin"),        # same major: SASS is binary compatible
    ("sm_80", BOTH, (8, 9), "cubin"),
    ("sm_80", BOTH, (9, 0), "ptx"),          # newer major: the driver JIT-compiles compute_80
    ("sm_80", BOTH, (10, 0), "ptx"),
    ("sm_80", ("ptx",), (8, 0), "ptx"),
    ("sm_86", BOTH, (8, 9), "cubin"),
    ("sm_90a", ("cubin",), (9, 0), "cubin"),
    ("sm_90a", ("ptx",), (9, 0), "ptx"),
    ("sm_100a", BOTH, (10, 0), "cubin"),
])
def test_code_selection(target, kinds, cc, chosen):
    assert select_code(target, kinds, cc, 0) == chosen


@pytest.mark.parametrize("target, kinds, cc, message", [
    ("sm_80", BOTH, (7, 5),
     "bundle for sm_80 cannot run on device 0 (compute capability 7.5): its cubin needs compute "
     "capability 8.x with x >= 0; its ptx needs compute capability >= 8.0"),
    ("sm_80", ("cubin",), (9, 0),
     "bundle for sm_80 cannot run on device 0 (compute capability 9.0): its cubin needs compute "
     "capability 8.x with x >= 0"),
    ("sm_86", BOTH, (8, 0),
     "bundle for sm_86 cannot run on device 0 (compute capability 8.0): its cubin needs compute "
     "capability 8.x with x >= 6; its ptx needs compute capability >= 8.6"),
    ("sm_90a", BOTH, (8, 0),
     "bundle for sm_90a cannot run on device 0 (compute capability 8.0): its cubin needs compute "
     "capability exactly 9.0; its ptx needs compute capability exactly 9.0"),
    ("sm_90a", ("cubin",), (10, 0),
     "bundle for sm_90a cannot run on device 0 (compute capability 10.0): its cubin needs compute "
     "capability exactly 9.0"),
    ("sm_100a", ("cubin",), (9, 0),
     "bundle for sm_100a cannot run on device 0 (compute capability 9.0): its cubin needs compute "
     "capability exactly 10.0"),
])
def test_incompatible_gpu_is_refused(target, kinds, cc, message):
    with pytest.raises(AttncRuntimeError) as info:
        select_code(target, kinds, cc, 0)
    assert str(info.value) == message
