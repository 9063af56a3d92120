// L1 of examples/relative_bias.attn: let bindings, where, abs, min/max, casts, a 2-D param.
// RUN: attnc compile examples/relative_bias.attn --emit mlir --pass-pipeline "" | filecheck %s

// CHECK-LABEL: func.func @relative_bias(
// CHECK-SAME: %[[BIAS:arg3]]: tensor<?x32xf32>
// CHECK: ^bb0(%[[S:[a-z0-9]+]]: f32 {{.*}}, %{{.*}}: i32 {{.*}}, %[[H:[a-z0-9]+]]: i32 {{.*}}, %[[I:[a-z0-9]+]]: i32 {{.*}}, %[[J:[a-z0-9]+]]: i32 {{.*}}):
// let d = j - i: one value, used by every later mention of d
// CHECK-NEXT: %[[D:.*]] = arith.subi %[[J]], %[[I]] : i32 loc("examples/relative_bias.attn":9:15)
// let side = where(d > 0, 16, 0)
// CHECK: %[[POS:.*]] = arith.cmpi sgt, %[[D]], %{{.*}} : i32
// CHECK: %[[SIDE:.*]] = arith.select %[[POS]], %{{.*}}, %{{.*}} : i32 loc("examples/relative_bias.attn":10:16)
// let n = abs(d)
// CHECK-NEXT: %[[N:.*]] = math.absi %[[D]] : i32 loc("examples/relative_bias.attn":11:13)
// float(max(n, 1)): an integer max, then the cast
// CHECK: %[[MAX:.*]] = arith.maxsi %[[N]], %{{.*}} : i32
// CHECK-NEXT: %{{.*}} = arith.sitofp %[[MAX]] : i32 to f32
// CHECK: math.log
// CHECK: math.log
// int(...) truncates toward zero
// CHECK: %[[TRUNC:.*]] = arith.fptosi %{{.*}} : f32 to i32 loc("examples/relative_bias.attn":12:23)
// CHECK: %[[FAR:.*]] = arith.minsi %{{.*}}, %{{.*}} : i32 loc("examples/relative_bias.attn":12:15)
// CHECK: %[[NEAR:.*]] = arith.cmpi slt, %[[N]], %{{.*}} : i32
// CHECK-NEXT: %[[BUCKET:.*]] = arith.select %[[NEAR]], %[[N]], %[[FAR]] : i32
// CHECK-NEXT: %[[IDX:.*]] = arith.addi %[[SIDE]], %[[BUCKET]] : i32
// CHECK-NEXT: %[[B:.*]] = "attn.param"(%[[BIAS]], %[[H]], %[[IDX]]) : (tensor<?x32xf32>, i32, i32) -> f32 loc("examples/relative_bias.attn":13:9)
// CHECK-NEXT: %[[OUT:.*]] = arith.addf %[[S]], %[[B]] : f32
// CHECK-NEXT: gpu.yield %[[OUT]] : f32
// CHECK: param_shapes = {{\[\["H", 32\]\]}}, params = ["bias"]
