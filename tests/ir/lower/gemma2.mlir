// L1 of examples/gemma2.attn: GQA, tanh soft-capping, a causal sliding window, LSE.
// RUN: attnc compile examples/gemma2.attn --emit mlir --pass-pipeline "" | filecheck %s

// CHECK-LABEL: func.func @gemma2(
// CHECK-SAME: %[[Q:arg0]]: tensor<?x?x?x128xbf16> loc("examples/gemma2.attn":3:3)
// CHECK-SAME: %[[K:arg1]]: tensor<?x?x?x128xbf16> loc("examples/gemma2.attn":4:3)
// CHECK-SAME: %[[V:arg2]]: tensor<?x?x?x128xbf16> loc("examples/gemma2.attn":5:3))
// CHECK-SAME: -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>)
// CHECK: %[[R:.*]]:2 = "attn.attention"(%[[Q]], %[[K]], %[[V]]) ({

// score_mod(s, b, h, i, j) = 50.0 * tanh(s / 50.0)
// CHECK-NEXT: ^bb0(%[[S:[a-z0-9]+]]: f32 loc("examples/gemma2.attn":7:3), %{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}):
// CHECK-NEXT: %[[C50:.*]] = arith.constant 5.000000e+01 : f32 loc("examples/gemma2.attn":7:30)
// CHECK-NEXT: %[[C50B:.*]] = arith.constant 5.000000e+01 : f32 loc("examples/gemma2.attn":7:46)
// CHECK-NEXT: %[[DIV:.*]] = arith.divf %[[S]], %[[C50B]] : f32 loc("examples/gemma2.attn":7:44)
// CHECK-NEXT: %[[TANH:.*]] = math.tanh %[[DIV]] : f32 loc("examples/gemma2.attn":7:37)
// CHECK-NEXT: %[[MUL:.*]] = arith.mulf %[[C50]], %[[TANH]] : f32 loc("examples/gemma2.attn":7:35)
// CHECK-NEXT: gpu.yield %[[MUL]] : f32

// mask_mod(b, h, i, j) = i >= j and i - j < 4096
// CHECK: ^bb0(%{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %[[I:[a-z0-9]+]]: i32 {{.*}}, %[[J:[a-z0-9]+]]: i32 loc("examples/gemma2.attn":8:3)):
// CHECK-NEXT: %[[GE:.*]] = arith.cmpi sge, %[[I]], %[[J]] : i32 loc("examples/gemma2.attn":8:28)
// CHECK-NEXT: %[[D:.*]] = arith.subi %[[I]], %[[J]] : i32 loc("examples/gemma2.attn":8:39)
// CHECK-NEXT: %[[W:.*]] = arith.constant 4096 : i32 loc("examples/gemma2.attn":8:45)
// CHECK-NEXT: %[[LT:.*]] = arith.cmpi slt, %[[D]], %[[W]] : i32 loc("examples/gemma2.attn":8:43)
// CHECK-NEXT: %[[AND:.*]] = arith.andi %[[GE]], %[[LT]] : i1 loc("examples/gemma2.attn":8:33)
// CHECK-NEXT: gpu.yield %[[AND]] : i1

// No sink: the neutral body yields -inf.
// CHECK: ^bb0(%{{.*}}: i32 loc("examples/gemma2.attn":2:1)):
// CHECK-NEXT: %[[NOSINK:.*]] = arith.constant 0xFF800000 : f32
// CHECK-NEXT: gpu.yield %[[NOSINK]] : f32

// CHECK: }) {dims = ["B", "H", "M", "HKV", "N"], dtype = "bf16", gqa = true, has_mask_mod = true, has_score_mod = true, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "HKV", "N", 128], outputs = ["o", "lse"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], scale = 0.0883883461 : f32, v_shape = ["B", "HKV", "N", 128], variant = "gemma2"}
// CHECK-SAME: -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) loc("examples/gemma2.attn":2:1)
// CHECK-NEXT: return %[[R]]#0, %[[R]]#1
