"""Memory instructions against hand-worked values (PTX ISA 8.x, 9.7.9.24 "atom", 9.7.9.25
"red", 5.1.7 "Generic addressing" with 9.7.9.18 "cvta", 5.1.5 "Local state space")."""
from __future__ import annotations

import numpy as np

from attnc_sim.isa_mem import SHARED_WINDOW
from tests.sim.ptx_harness import kernel, run_kernel


def test_atom_and_red():
    """atom returns the old value; the lanes' atomics are serialized: 32 atom.add of 1 on one
    word return 0..31 in some order and leave 32; red.add.f32 sums; atom.cas swaps only where
    the compare matches; atom.shared.max keeps the largest."""
    body = """
    ld.param.u64 %rd1, [p1];
    atom.global.add.u32 %r1, [%rd1], 1;
    st.global.b32 [%a0], %r1;
    ld.param.u64 %rd2, [p2];
    cvt.rn.f32.u32 %f1, %tid;
    red.global.add.f32 [%rd2], %f1;
    ld.param.u64 %rd3, [p3];
    atom.global.cas.b32 %r2, [%rd3], 7, %tid;
    mov.u32 %r3, smem;
    atom.shared.max.s32 %r4, [%r3], %tid;
    bar.sync 0;
    ld.shared.b32 %r5, [%r3];
    st.global.b32 [%a4], %r5;"""
    text = kernel(body, 5, extra=".shared .align 4 .b8 smem[4];")
    out = run_kernel(text, [np.zeros(32, np.uint32), np.zeros(1, np.uint32), np.zeros(1, np.float32),
                            np.array([7], np.uint32), np.zeros(32, np.int32)]).arrays
    assert sorted(out[0].tolist()) == list(range(32)) and out[1][0] == 32
    assert out[2][0] == sum(range(32))
    assert out[3][0] == 0               # the first lane's cas (7 == 7) stored its tid 0; no other matched
    assert out[4][0] == 31


def test_generic_addressing():
    """cvta.shared gives a shared variable's generic address; st / ld without a state space
    reach shared or global memory by the address alone; cvta.to.shared takes it back."""
    body = """
    mov.u64 %rd1, smem;
    cvta.shared.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %tid, 4;
    add.s64 %rd4, %rd2, %rd3;
    add.u32 %r1, %tid, 1000;
    st.b32 [%rd4], %r1;
    bar.sync 0;
    cvta.to.shared.u64 %rd5, %rd4;
    cvt.u32.u64 %r2, %rd5;
    ld.shared.b32 %r3, [%r2];
    st.global.b32 [%a0], %r3;
    ld.param.u64 %rd6, [p1];
    cvta.global.u64 %rd7, %rd6;
    add.s64 %rd7, %rd7, %rd3;
    ld.b32 %r4, [%rd7];
    st.global.b32 [%a2], %r4;
    st.global.b64 [%a3], %rd2;"""
    text = kernel(body, 4, extra=".shared .align 16 .b8 pad[64];\n.shared .align 16 .b8 smem[128];")
    src = np.arange(32, dtype=np.uint32) * 3
    # %a3 is &p3[tid] for 4-byte elements: lane 0's 8-byte store lands at p3[0]
    out = run_kernel(text, [np.zeros(32, np.uint32), src, np.zeros(32, np.uint32), np.zeros(64, np.uint32)],
                     threads=1).arrays
    assert out[0][0] == 1000 and out[2][0] == 0
    assert int(out[3][:2].view(np.uint64)[0]) == SHARED_WINDOW + 64      # smem follows 64 bytes of pad


def test_local_memory_is_per_thread():
    """Every thread's .local variable is its own: each stores its tid and reads it back."""
    body = """
    mov.u64 %rd1, buf;
    st.local.b32 [%rd1+8], %tid;
    bar.sync 0;
    ld.local.b32 %r1, [%rd1+8];
    cvta.local.u64 %rd2, %rd1;
    ld.b32 %r2, [%rd2+8];
    add.u32 %r3, %r1, %r2;
    st.global.b32 [%a0], %r3;"""
    text = kernel(body, 1).replace(".reg .b32 %tid;", ".reg .b32 %tid;\n    .local .align 8 .b8 buf[16];")
    out = run_kernel(text, [np.zeros(64, np.uint32)], threads=64).arrays[0]
    assert out.tolist() == (2 * np.arange(64)).tolist()
