// L1 of examples/mqa.attn: one key/value head (a fixed size in the tensor type), causal, LSE.
// RUN: attnc compile examples/mqa.attn --emit mlir --pass-pipeline "" | filecheck %s

// CHECK-LABEL: func.func @mqa(%arg0: tensor<?x?x?x128xf16> {{.*}}, %arg1: tensor<?x1x?x128xf16> {{.*}}, %arg2: tensor<?x1x?x128xf16> {{.*}}) -> (tensor<?x?x?x128xf16>, tensor<?x?x?xf32>)
// CHECK: ^bb0(%{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %[[I:[a-z0-9]+]]: i32 {{.*}}, %[[J:[a-z0-9]+]]: i32 loc("examples/mqa.attn":6:3)):
// CHECK-NEXT: %[[KEEP:.*]] = arith.cmpi sle, %[[J]], %[[I]] : i32 loc("examples/mqa.attn":6:28)
// CHECK-NEXT: gpu.yield %[[KEEP]] : i1
// CHECK: dtype = "f16", gqa = true,
// CHECK-SAME: k_shape = ["B", 1, "N", 128], outputs = ["o", "lse"]
