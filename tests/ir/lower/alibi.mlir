// L1 of examples/alibi.attn: a per-head param read in score_mod, dims in mask_mod.
// RUN: attnc compile examples/alibi.attn --emit mlir --pass-pipeline "" | filecheck %s

// The param is the function argument after q, k, v; the region reads it directly.
// CHECK-LABEL: func.func @alibi(
// CHECK-SAME: %arg0: tensor<?x?x?x64xf16> {{.*}}, %arg1: tensor<?x?x?x64xf16> {{.*}}, %arg2: tensor<?x?x?x64xf16> {{.*}},
// CHECK-SAME: %[[SLOPES:arg3]]: tensor<?xf32> loc("examples/alibi.attn":6:9)) -> tensor<?x?x?x64xf16>
// CHECK: "attn.attention"(%arg0, %arg1, %arg2) ({

// score_mod(s, b, h, i, j) = s + slopes[h] * (j - i)
// CHECK-NEXT: ^bb0(%[[S:[a-z0-9]+]]: f32 {{.*}}, %{{.*}}: i32 {{.*}}, %[[H:[a-z0-9]+]]: i32 {{.*}}, %[[I:[a-z0-9]+]]: i32 {{.*}}, %[[J:[a-z0-9]+]]: i32 {{.*}}):
// CHECK-NEXT: %[[SLOPE:.*]] = "attn.param"(%[[SLOPES]], %[[H]]) : (tensor<?xf32>, i32) -> f32 loc("examples/alibi.attn":7:34)
// CHECK-NEXT: %[[D:.*]] = arith.subi %[[J]], %[[I]] : i32 loc("examples/alibi.attn":7:49)
// CHECK-NEXT: %[[DF:.*]] = arith.sitofp %[[D]] : i32 to f32 loc("examples/alibi.attn":7:47)
// CHECK-NEXT: %[[BIAS:.*]] = arith.mulf %[[SLOPE]], %[[DF]] : f32 loc("examples/alibi.attn":7:44)
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[S]], %[[BIAS]] : f32 loc("examples/alibi.attn":7:32)
// CHECK-NEXT: gpu.yield %[[SUM]] : f32

// mask_mod(b, h, i, j) = j <= i + (N - M)
// CHECK: ^bb0(%{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %[[I2:[a-z0-9]+]]: i32 {{.*}}, %[[J2:[a-z0-9]+]]: i32 {{.*}}):
// CHECK-NEXT: %[[N:.*]] = "attn.dim"() {name = "N"} : () -> i32 loc("examples/alibi.attn":8:36)
// CHECK-NEXT: %[[M:.*]] = "attn.dim"() {name = "M"} : () -> i32 loc("examples/alibi.attn":8:40)
// CHECK-NEXT: %[[NM:.*]] = arith.subi %[[N]], %[[M]] : i32
// CHECK-NEXT: %[[BOUND:.*]] = arith.addi %[[I2]], %[[NM]] : i32
// CHECK-NEXT: %[[KEEP:.*]] = arith.cmpi sle, %[[J2]], %[[BOUND]] : i32 loc("examples/alibi.attn":8:28)
// CHECK-NEXT: gpu.yield %[[KEEP]] : i1

// CHECK: }) {dims = ["B", "H", "M", "N"], dtype = "f16", gqa = false, has_mask_mod = true, has_score_mod = true, has_sink = false, head_dim_qk = 64 : i64, head_dim_v = 64 : i64, k_shape = ["B", "H", "N", 64], outputs = ["o"], param_dtypes = ["f32"], param_shapes = {{\[\["H"\]\]}}, params = ["slopes"], q_shape = ["B", "H", "M", 64], scale = 1.250000e-01 : f32, v_shape = ["B", "H", "N", 64], variant = "alibi"}
