// L1 of examples/mha.attn: no hook, so every region holds its neutral body.
// RUN: attnc compile examples/mha.attn --emit mlir --pass-pipeline "" | filecheck %s

// CHECK-LABEL: func.func @mha(%arg0: tensor<?x?x?x128xbf16> {{.*}}, %arg1: tensor<?x?x?x128xbf16> {{.*}}, %arg2: tensor<?x?x?x128xbf16> {{.*}}) -> tensor<?x?x?x128xbf16> {
// CHECK-NEXT: %[[O:.*]] = "attn.attention"(%arg0, %arg1, %arg2) ({
// CHECK-NEXT: ^bb0(%[[S:[a-z0-9]+]]: f32 {{.*}}, %{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}):
// CHECK-NEXT: gpu.yield %[[S]] : f32 loc("examples/mha.attn":2:1)
// CHECK-NEXT: }, {
// CHECK-NEXT: ^bb0(%{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}, %{{.*}}: i32 {{.*}}):
// CHECK-NEXT: %[[TRUE:.*]] = arith.constant true loc("examples/mha.attn":2:1)
// CHECK-NEXT: gpu.yield %[[TRUE]] : i1
// CHECK-NEXT: }, {
// CHECK-NEXT: ^bb0(%{{.*}}: i32 {{.*}}):
// CHECK-NEXT: %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK-NEXT: gpu.yield %[[NINF]] : f32
// CHECK-NEXT: }) {dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], scale = 0.0883883461 : f32, v_shape = ["B", "H", "N", 128], variant = "mha"}
// CHECK-SAME: : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("examples/mha.attn":2:1)
// CHECK-NEXT: return %[[O]] : tensor<?x?x?x128xbf16>
