// L1 of examples/softcap.attn.
// RUN: attnc compile examples/softcap.attn --emit mlir --pass-pipeline "" | filecheck %s

// score_mod(s, b, h, i, j) = 30.0 * tanh(s / 30.0)
// CHECK: ^bb0(%[[S:[a-z0-9]+]]: f32 loc("examples/softcap.attn":6:3),
// CHECK-NEXT: %[[CAP:.*]] = arith.constant 3.000000e+01 : f32
// CHECK-NEXT: %[[CAP2:.*]] = arith.constant 3.000000e+01 : f32
// CHECK-NEXT: %[[X:.*]] = arith.divf %[[S]], %[[CAP2]] : f32
// CHECK-NEXT: %[[T:.*]] = math.tanh %[[X]] : f32
// CHECK-NEXT: %[[Y:.*]] = arith.mulf %[[CAP]], %[[T]] : f32
// CHECK-NEXT: gpu.yield %[[Y]] : f32
// CHECK: has_mask_mod = false, has_score_mod = true, has_sink = false
