// L1 of examples/diff_head_dims.attn: QK head dim 128, V head dim 64, GQA.
// RUN: attnc compile examples/diff_head_dims.attn --emit mlir --pass-pipeline "" | filecheck %s

// CHECK-LABEL: func.func @diff_head_dims(%arg0: tensor<?x?x?x128xbf16> {{.*}}, %arg1: tensor<?x?x?x128xbf16> {{.*}}, %arg2: tensor<?x?x?x64xbf16> {{.*}}) -> tensor<?x?x?x64xbf16>
// CHECK: "attn.attention"(%arg0, %arg1, %arg2)
// CHECK: }) {dims = ["B", "H", "M", "HKV", "N"], dtype = "bf16", gqa = true, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 64 : i64, k_shape = ["B", "HKV", "N", 128], outputs = ["o"]
// CHECK-SAME: v_shape = ["B", "HKV", "N", 64], variant = "diff_head_dims"}
// CHECK-SAME: -> tensor<?x?x?x64xbf16> loc("examples/diff_head_dims.attn":2:1)
