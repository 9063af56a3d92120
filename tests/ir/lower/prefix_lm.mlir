// L1 of examples/prefix_lm.attn: a dim declared with `dim P`, read with attn.dim.
// RUN: attnc compile examples/prefix_lm.attn --emit mlir --pass-pipeline "" | filecheck %s

// mask_mod(b, h, i, j) = j < P or j <= i
// CHECK: ^bb0(%{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %[[I:[a-z0-9]+]]: i32 {{.*}}, %[[J:[a-z0-9]+]]: i32 loc("examples/prefix_lm.attn":7:3)):
// CHECK-NEXT: %[[P:.*]] = "attn.dim"() {name = "P"} : () -> i32 loc("examples/prefix_lm.attn":7:30)
// CHECK-NEXT: %[[PREFIX:.*]] = arith.cmpi slt, %[[J]], %[[P]] : i32 loc("examples/prefix_lm.attn":7:28)
// CHECK-NEXT: %[[CAUSAL:.*]] = arith.cmpi sle, %[[J]], %[[I]] : i32 loc("examples/prefix_lm.attn":7:37)
// CHECK-NEXT: %[[KEEP:.*]] = arith.ori %[[PREFIX]], %[[CAUSAL]] : i1 loc("examples/prefix_lm.attn":7:32)
// CHECK-NEXT: gpu.yield %[[KEEP]] : i1
// CHECK: dims = ["B", "H", "M", "N", "P"]
