// L1 of examples/docs_sink.attn: an i32 param read twice in mask_mod, a sink from an f32 param.
// RUN: attnc compile examples/docs_sink.attn --emit mlir --pass-pipeline "" | filecheck %s

// CHECK-LABEL: func.func @docs_sink(
// CHECK-SAME: %[[DOC:arg3]]: tensor<?x?xi32> loc("examples/docs_sink.attn":6:9), %[[SINKS:arg4]]: tensor<?xf32> loc("examples/docs_sink.attn":7:9))

// mask_mod(b, h, i, j) = doc[b, i] == doc[b, j] and j <= i
// CHECK: ^bb0(%[[B:[a-z0-9]+]]: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %[[I:[a-z0-9]+]]: i32 {{.*}}, %[[J:[a-z0-9]+]]: i32 loc("examples/docs_sink.attn":8:3)):
// CHECK-NEXT: %[[DI:.*]] = "attn.param"(%[[DOC]], %[[B]], %[[I]]) : (tensor<?x?xi32>, i32, i32) -> i32 loc("examples/docs_sink.attn":8:26)
// CHECK-NEXT: %[[DJ:.*]] = "attn.param"(%[[DOC]], %[[B]], %[[J]]) : (tensor<?x?xi32>, i32, i32) -> i32 loc("examples/docs_sink.attn":8:39)
// CHECK-NEXT: %[[SAME:.*]] = arith.cmpi eq, %[[DI]], %[[DJ]] : i32 loc("examples/docs_sink.attn":8:36)
// CHECK-NEXT: %[[CAUSAL:.*]] = arith.cmpi sle, %[[J]], %[[I]] : i32 loc("examples/docs_sink.attn":8:55)
// CHECK-NEXT: %[[KEEP:.*]] = arith.andi %[[SAME]], %[[CAUSAL]] : i1 loc("examples/docs_sink.attn":8:49)
// CHECK-NEXT: gpu.yield %[[KEEP]] : i1

// sink(h) = sinks[h]
// CHECK: ^bb0(%[[H:[a-z0-9]+]]: i32 loc("examples/docs_sink.attn":9:3)):
// CHECK-NEXT: %[[SINK:.*]] = "attn.param"(%[[SINKS]], %[[H]]) : (tensor<?xf32>, i32) -> f32 loc("examples/docs_sink.attn":9:13)
// CHECK-NEXT: gpu.yield %[[SINK]] : f32

// CHECK: has_mask_mod = true, has_score_mod = false, has_sink = true,
// CHECK-SAME: param_dtypes = ["i32", "f32"], param_shapes = {{\[\["B", "N"\], \["H"\]\]}}, params = ["doc", "sinks"]
