// L1 of examples/sliding_window.attn.
// RUN: attnc compile examples/sliding_window.attn --emit mlir --pass-pipeline "" | filecheck %s

// mask_mod(b, h, i, j) = j <= i and i - j < 1024
// CHECK: ^bb0(%{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %[[I:[a-z0-9]+]]: i32 {{.*}}, %[[J:[a-z0-9]+]]: i32 loc("examples/sliding_window.attn":6:3)):
// CHECK-NEXT: %[[CAUSAL:.*]] = arith.cmpi sle, %[[J]], %[[I]] : i32 loc("examples/sliding_window.attn":6:28)
// CHECK-NEXT: %[[D:.*]] = arith.subi %[[I]], %[[J]] : i32 loc("examples/sliding_window.attn":6:39)
// CHECK-NEXT: %[[W:.*]] = arith.constant 1024 : i32
// CHECK-NEXT: %[[IN:.*]] = arith.cmpi slt, %[[D]], %[[W]] : i32 loc("examples/sliding_window.attn":6:43)
// CHECK-NEXT: %[[KEEP:.*]] = arith.andi %[[CAUSAL]], %[[IN]] : i1 loc("examples/sliding_window.attn":6:33)
// CHECK-NEXT: gpu.yield %[[KEEP]] : i1
// CHECK: has_mask_mod = true, has_score_mod = false, has_sink = false
