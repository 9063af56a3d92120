// attn-analyze-masks on the tile program attn-tile builds: the KV loop cut by tile
// class. Skipped key blocks are in no loop; fully kept ones run in a loop without the
// attn.mask op; mixed ones in loops with it; a mask that reads params reads its block
// map in the mixed loops and, for document ids, the tile table.
//
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks" | filecheck %s
// RUN: attnc compile examples/docs_sink.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks" | filecheck %s --check-prefix=DOCS

// Causal: the ranges come from the analysis' function; per query block, walked top down
// (Note [Key blocks top down]), the mixed diagonal block with the mask, the full blocks
// below the diagonal without it, then the mixed blocks below the full ones (none:
// causal's full blocks start at 0). Each loop runs over steps, its first op the step's block.
// CHECK-LABEL: func.func @causal(
// CHECK: ^bb0(%[[B:.*]]: i32{{.*}}, %[[H:.*]]: i32{{.*}}, %[[M:.*]]: i32{{.*}}):
// CHECK: %[[KV:.*]]:4 = "attn.kv_range"(%[[M]], %[[B]], %[[H]], %{{.*}}) {fn = @causal_kv_range} : (i32, i32, i32, i32, i32, i32, i32) -> (i32, i32, i32, i32)
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK-NEXT: %[[LO:.*]] = arith.maxsi %[[KV]]#2, %[[KV]]#0 : i32
// CHECK-NEXT: %[[FIRST_FULL:.*]] = arith.minsi %[[LO]], %[[KV]]#1 : i32
// CHECK-NEXT: %[[HI:.*]] = arith.maxsi %[[KV]]#3, %[[FIRST_FULL]] : i32
// CHECK-NEXT: %[[AFTER_FULL:.*]] = arith.minsi %[[HI]], %[[KV]]#1 : i32
// CHECK-NEXT: %[[TOP:.*]] = arith.subi %[[KV]]#1, %[[ONE]] : i32
// CHECK-NEXT: %[[ABOVE:.*]] = arith.subi %[[KV]]#1, %[[AFTER_FULL]] : i32
// CHECK-NEXT: %[[BELOW:.*]] = arith.subi %[[KV]]#1, %[[FIRST_FULL]] : i32
// CHECK-NEXT: %[[STEPS:.*]] = arith.subi %[[KV]]#1, %[[KV]]#0 : i32
// CHECK: %[[R0:.*]]:3 = scf.for %[[T0:.*]] = %[[ZERO]] to %[[ABOVE]] step %{{.*}} iter_args
// CHECK-NEXT: arith.subi %[[TOP]], %[[T0]] : i32
// CHECK: "attn.mask"
// CHECK: } {kv_blocks = "mixed"}
// CHECK: %[[R1:.*]]:3 = scf.for %[[T1:.*]] = %[[ABOVE]] to %[[BELOW]] step %{{.*}} iter_args(%{{.*}} = %[[R0]]#0, %{{.*}} = %[[R0]]#1, %{{.*}} = %[[R0]]#2)
// CHECK-NEXT: arith.subi %[[TOP]], %[[T1]] : i32
// CHECK-NOT: "attn.mask"
// CHECK: } {kv_blocks = "full"}
// CHECK: %[[R2:.*]]:3 = scf.for %[[T2:.*]] = %[[BELOW]] to %[[STEPS]] step %{{.*}} iter_args(%{{.*}} = %[[R1]]#0, %{{.*}} = %[[R1]]#1, %{{.*}} = %[[R1]]#2)
// CHECK-NEXT: arith.subi %[[TOP]], %[[T2]] : i32
// CHECK: "attn.mask"
// CHECK-NOT: "attn.block_map_read"
// CHECK: } {kv_blocks = "mixed"}
// CHECK-NOT: scf.for
// CHECK: "attn.finalize"(%[[R2]]#2, %[[R2]]#0, %[[R2]]#1, %[[H]])
// CHECK: kv_range_fn = @causal_kv_range, kv_segments = 1 : i64, {{.*}}mask_kind = "static"
// CHECK: func.func private @causal_tile_class(
// CHECK: func.func private @causal_kv_range(

// No mask: the one loop attn-tile built, over every key block, without a mask op.
// CHECK-LABEL: func.func @mha(
// CHECK-NOT: "attn.kv_range"
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step
// CHECK-NOT: "attn.mask"
// CHECK: } {kv_blocks = "all"}
// CHECK-NOT: scf.for
// CHECK: mask_kind = "none"

// Documents (doc[b, i] == doc[b, j], a param): the tile table read first, the key range
// the block map's row keeps (attn.block_map_range, not the analysis' function), and each
// mixed block's class read from the block map, which the mask op takes last.
// DOCS: "attn.kernel"
// DOCS-NEXT: ^bb0(%[[B:.*]]: i32{{.*}}, %[[H:.*]]: i32{{.*}}, %[[M:.*]]: i32{{.*}}):
// DOCS-NEXT: "attn.tile_table_read"(%[[B]], %[[H]], %[[M]]) {param = "doc"} : (i32, i32, i32) -> (i32, i32)
// DOCS-NOT: "attn.kv_range"
// DOCS: "attn.block_map_range"(%[[M]], %[[B]], %[[H]]) : (i32, i32, i32) -> (i32, i32, i32, i32)
// DOCS-NOT: "attn.kv_range"
// DOCS: scf.for %[[T:[^ ]*]] =
// DOCS-NEXT: %[[N:.*]] = arith.subi %{{.*}}, %[[T]] : i32
// DOCS: %[[CLASS:.*]] = "attn.block_map_read"(%[[M]], %[[N]], %[[B]], %[[H]]) : (i32, i32, i32, i32) -> i32
// DOCS-NEXT: "attn.mask"(%{{.*}}, %[[B]], %[[H]], %[[M]], %[[N]], %[[CLASS]])
// DOCS: } {kv_blocks = "mixed"}
// DOCS: scf.for
// DOCS-NOT: "attn.block_map_read"
// DOCS-NOT: "attn.mask"
// DOCS: } {kv_blocks = "full"}
// DOCS: scf.for
// DOCS: "attn.block_map_read"
// DOCS: "attn.mask"
// DOCS: } {kv_blocks = "mixed"}
// DOCS: mask_kind = "runtime"

func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %keep = arith.cmpi sle, %j, %i : i32
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "causal", dtype = "bf16", head_dim_qk = 128 : i64, head_dim_v = 128 : i64,
      scale = 0.0883883461 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 128],
      k_shape = ["B", "H", "N", 128], v_shape = ["B", "H", "N", 128], params = [],
      param_shapes = [], param_dtypes = [], outputs = ["o"], gqa = false,
      has_score_mod = false, has_mask_mod = true, has_sink = false}
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}

func.func @mha(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %true = arith.constant true
    gpu.yield %true : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "mha", dtype = "bf16", head_dim_qk = 128 : i64, head_dim_v = 128 : i64,
      scale = 0.0883883461 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 128],
      k_shape = ["B", "H", "N", 128], v_shape = ["B", "H", "N", 128], params = [],
      param_shapes = [], param_dtypes = [], outputs = ["o"], gqa = false,
      has_score_mod = false, has_mask_mod = false, has_sink = false}
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
