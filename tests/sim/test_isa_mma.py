"""ldmatrix and mma.sync fragment layouts (PTX ISA 8.x, 9.7.14.5.15 "ldmatrix" and 9.7.14.5.8
"Matrix Fragments for mma.m16n8k16 with floating point type"): groupID = lane / 4,
threadID_in_group = lane % 4."""
from __future__ import annotations

import numpy as np
import pytest

from tests.sim.ptx_harness import kernel, run_kernel

LANE = np.arange(32)
G, T = LANE // 4, LANE % 4

_LDMATRIX = """
    ld.param.u64 %rd1, [p1];
    mul.wide.u32 %rd2, %tid, 16;
    add.s64 %rd1, %rd1, %rd2;
    ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];
    mov.u32 %r10, smem;
    mul.lo.u32 %r11, %tid, 16;
    add.u32 %r10, %r10, %r11;
    st.shared.v4.b32 [%r10], {%r1, %r2, %r3, %r4};
    bar.sync 0;
    ldmatrix.sync.aligned.m8n8.x{n}{trans}.shared.b16 {regs}, [%r10];
    ld.param.u64 %rd3, [p0];
    add.s64 %rd3, %rd3, %rd2;
    st.global.v4.b32 [%rd3], {out};"""


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_fragments(n, trans):
    """Lane 8i + r gives the address of row r of matrix i; register i of lane l holds
    elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix i (of its transpose with
    .trans)."""
    mats = (np.arange(4 * 64, dtype=np.uint16) + 1000).reshape(4, 8, 8)     # [matrix, row, col]
    regs = [f"%r{20 + i}" for i in range(n)]
    out = ", ".join(regs + ["%r30"] * (4 - n))
    body = _LDMATRIX.replace("{n}", str(n)).replace("{trans}", ".trans" if trans else "") \
                    .replace("{regs}", "{" + ", ".join(regs) + "}").replace("{out}", "{" + out + "}")
    text = kernel(body, 2, extra=".shared .align 16 .b8 smem[512];")
    got = run_kernel(text, [np.zeros((32, 4), np.uint32), mats.reshape(32, 8)]).arrays[0]
    halves = got.view(np.uint16).reshape(32, 4, 2)
    for i in range(n):
        m = mats[i].T if trans else mats[i]
        assert halves[:, i, 0].tolist() == m[G, 2 * T].tolist()
        assert halves[:, i, 1].tolist() == m[G, 2 * T + 1].tolist()
    # a hand-worked element: lane 5 (row 1, cols 2 and 3) of matrix 0
    assert halves[5, 0].tolist() == ([1000 + 2 * 8 + 1, 1000 + 3 * 8 + 1] if trans else [1010, 1011])


def test_mma_m16n8k16_fragments():
    """mma.sync.m16n8k16.row.col.f32.f16.f16.f32: a0..a7 of lane l are A[g][2t + {0,1}],
    A[g+8][2t + {0,1}], A[g][2t + 8 + {0,1}], A[g+8][2t + 8 + {0,1}]; b0..b3 are B[2t + {0,1}][g],
    B[2t + 8 + {0,1}][g]; c0..c3 / d0..d3 are C[g][2t + {0,1}], C[g+8][2t + {0,1}]."""
    rng = np.random.default_rng(5)
    a = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    b = rng.integers(-4, 5, (16, 8)).astype(np.float16)
    c = rng.integers(-8, 9, (16, 8)).astype(np.float32)
    a_frag = np.stack([a[G, 2 * T], a[G, 2 * T + 1], a[G + 8, 2 * T], a[G + 8, 2 * T + 1],
                       a[G, 2 * T + 8], a[G, 2 * T + 9], a[G + 8, 2 * T + 8], a[G + 8, 2 * T + 9]], 1)
    b_frag = np.stack([b[2 * T, G], b[2 * T + 1, G], b[2 * T + 8, G], b[2 * T + 9, G]], 1)
    c_frag = np.stack([c[G, 2 * T], c[G, 2 * T + 1], c[G + 8, 2 * T], c[G + 8, 2 * T + 1]], 1)
    body = """
    ld.param.u64 %rd1, [p1];
    mul.wide.u32 %rd2, %tid, 16;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd3];
    ld.param.u64 %rd1, [p2];
    mul.wide.u32 %rd4, %tid, 8;
    add.s64 %rd3, %rd1, %rd4;
    ld.global.v2.b32 {%r5, %r6}, [%rd3];
    ld.param.u64 %rd1, [p3];
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd3];
    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f5, %f6, %f7, %f8}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};
    ld.param.u64 %rd1, [p0];
    add.s64 %rd3, %rd1, %rd2;
    st.global.v4.f32 [%rd3], {%f5, %f6, %f7, %f8};"""
    got = run_kernel(body, [np.zeros((32, 4), np.float32), a_frag.view(np.uint32), b_frag.view(np.uint32),
                            c_frag]).arrays[0]
    d = a.astype(np.float32) @ b.astype(np.float32) + c
    want = np.stack([d[G, 2 * T], d[G, 2 * T + 1], d[G + 8, 2 * T], d[G + 8, 2 * T + 1]], 1)
    assert got.tolist() == want.tolist()
    assert got[5].tolist() == [d[1, 2], d[1, 3], d[9, 2], d[9, 3]]
