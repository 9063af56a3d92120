"""The examples under other plans of the plan passes on a real GPU against attnc.reference:
K/V ring depths 2 and 3 on sm_80 and 2, 3 and 4 on sm_90a, one and two consumer
warpgroups with a producer, ping-pong on and off, a producer putting V before K (the
user pass examples/passes/v_before_k.py), sm_90a's consumers issuing P.V before QK^T
with and without ping-pong (examples/passes/pv_before_qk.py, Note [Overlapped steps op by
op]), its producer waiting for both slots before writing either
(examples/passes/waits_first.py, Note [Loads op by op]), its consumers waiting for the
last V before landing the P.V in flight (examples/passes/last_v_early.py), sm_80's steps waiting for V before the softmax at 2 and 3 stages
(examples/passes/wait_v_early.py, Note [Steps op by op]), and on both targets K and V in a
ring each (attn-alloc-smem{kv_layout=separate}) and the K/V ring placed before Q
(examples/passes/kv_first.py, Note [Buffers as placed]), and on both targets the KV loops
without a mask taking 4 of every 8 exponentials on the FMA pipe while the masked ones keep
the default (examples/passes/exp2_fma_unmasked.py, Note [Choices op by op]), and on both
targets every hook value computed per score (attn-hoist{hoist=false}) --
tools/build_gpu_bundles.py --suites schedules
(SCHEDULES). Each at the ragged shapes of test_examples.py; o and lse within gpu_support's
tolerances.
"""
from __future__ import annotations

import pytest

from gpu_support import bundle_cases, check_against_reference

pytestmark = pytest.mark.gpu

SHAPES = [(333, 333), (200, 517), (517, 200)]
SQUARE_SHAPES = [(333, 333), (517, 517)]


@pytest.mark.parametrize("entry,m,n", list(bundle_cases("schedules", lambda e: SQUARE_SHAPES if e.get("square")
                                                                   else SHAPES)))
def test_schedule_matches_reference(gpu, entry, m, n):
    check_against_reference(entry, m, n, seed=m * 7919 + n)
