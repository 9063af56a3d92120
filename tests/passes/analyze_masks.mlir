// RUN: attn-analyze-masks on each `// -----` chunk; see test_analyze_masks.py.
// Inputs: L1 from attnc.frontend.lower plus the block sizes attn-tile sets.
// Output printed with use_name_loc_as_prefix, so the values the pass names read
// %m_lo, %may_keep, %end_0, ...

// Causal, 128 x 128 tiles. A tile may keep something when n_lo < m_hi and may drop
// something when m_lo + 1 < n_hi; query block m visits key blocks [0, min(m, last) + 1).
// CHECK-LABEL: func.func @causal(
// CHECK:       "attn.attention"
// CHECK:         kv_range_fn = @causal_kv_range, kv_segments = 1 : i64, mask_kind = "static"
// CHECK-SAME:    tile_class_fn = @causal_tile_class
// CHECK-LABEL: func.func private @causal_tile_class(%m_lo: i32, %m_hi: i32, %n_lo: i32, %n_hi: i32, %b: i32, %h: i32, %B: i32, %H: i32, %M: i32, %N: i32) -> i32
// CHECK-DAG:     %[[NLO:.+]] = arith.extsi %n_lo : i32 to i64
// CHECK-DAG:     %[[MHI:.+]] = arith.extsi %m_hi : i32 to i64
// CHECK-DAG:     %may_keep = arith.cmpi slt, %[[NLO]], %[[MHI]] : i64
// CHECK-DAG:     %[[MLO:.+]] = arith.extsi %m_lo : i32 to i64
// CHECK-DAG:     %[[MLO1:.+]] = arith.addi %[[MLO]], %c1_i64 : i64
// CHECK-DAG:     %[[NHI:.+]] = arith.extsi %n_hi : i32 to i64
// CHECK-DAG:     %may_drop = arith.cmpi slt, %[[MLO1]], %[[NHI]] : i64
// CHECK:         %[[PARTIAL:.+]] = arith.select %may_drop, %c1_i64, %c2_i64 : i64
// CHECK:         %tile_class = arith.select %may_keep, %[[PARTIAL]], %c0_i64 : i64
// CHECK-LABEL: func.func private @causal_kv_range(%m_block: i32, %b: i32, %h: i32, %B: i32, %H: i32, %M: i32, %N: i32) -> (i32, i32)
// CHECK:         %[[START:.+]] = arith.constant 0 : i32
// CHECK:         %[[LAST:.+]] = arith.subi
// CHECK:         %[[MIN:.+]] = arith.minsi %{{.+}}, %[[LAST]] : i64
// CHECK:         %end_0 = arith.addi %[[MIN]], %c1_i64 : i64
// CHECK:         %[[END:.+]] = arith.trunci %end_0 : i64 to i32
// CHECK:         return %[[START]], %[[END]] : i32, i32
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
  }) {block_m = 128 : i64, block_n = 128 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = true, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], scale = 0.0883883461 : f32, v_shape = ["B", "H", "N", 128], variant = "causal"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}

// -----
// Sliding window of 1024 (examples/sliding_window.attn), 128 x 128 tiles: the tile
// keeps something when m_lo <= n_hi + 1022 and n_lo < m_hi; the KV range starts
// 8 blocks back: max(0, m_block - 8).
// CHECK-LABEL: func.func @sliding_window(
// CHECK:       "attn.attention"
// CHECK:         kv_range_fn = @sliding_window_kv_range, kv_segments = 1 : i64, mask_kind = "static"
// CHECK-LABEL: func.func private @sliding_window_tile_class(
// CHECK-DAG:     %[[MLO:.+]] = arith.extsi %m_lo : i32 to i64
// CHECK-DAG:     %[[NHI:.+]] = arith.extsi %n_hi : i32 to i64
// CHECK-DAG:     %[[REACH:.+]] = arith.addi %[[NHI]], %c1022_i64 : i64
// CHECK-DAG:     %[[INWINDOW:.+]] = arith.cmpi sle, %[[MLO]], %[[REACH]] : i64
// CHECK-DAG:     %[[NLO:.+]] = arith.extsi %n_lo : i32 to i64
// CHECK-DAG:     %[[MHI:.+]] = arith.extsi %m_hi : i32 to i64
// CHECK-DAG:     %[[BELOW:.+]] = arith.cmpi slt, %[[NLO]], %[[MHI]] : i64
// CHECK:         %may_keep = arith.andi %[[INWINDOW]], %[[BELOW]] : i1
// CHECK:         %[[NLOW:.+]] = arith.addi %[[NLO]], %c1024_i64 : i64
// CHECK:         %[[OUTSIDE:.+]] = arith.cmpi slt, %[[NLOW]], %[[MHI]] : i64
// CHECK:         %may_drop = arith.ori %{{.+}}, %[[OUTSIDE]] : i1
// CHECK:         %tile_class = arith.select %may_keep
// CHECK-LABEL: func.func private @sliding_window_kv_range(%m_block: i32,
// CHECK:         %[[MB:.+]] = arith.extsi %m_block : i32 to i64
// CHECK:         %[[BACK:.+]] = arith.subi %[[MB]], %c8_i64 : i64
// CHECK:         %start_0 = arith.maxsi %c0_i64, %[[BACK]] : i64
// CHECK:         %end_0 = arith.select
func.func @sliding_window(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %causal = arith.cmpi sle, %j, %i : i32
    %dist = arith.subi %i, %j : i32
    %c1024 = arith.constant 1024 : i32
    %near = arith.cmpi slt, %dist, %c1024 : i32
    %keep = arith.andi %causal, %near : i1
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {block_m = 128 : i64, block_n = 128 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = true, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], scale = 0.0883883461 : f32, v_shape = ["B", "H", "N", 128], variant = "sliding_window"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}

// -----
// Prefix-LM, P a runtime dim (examples/prefix_lm.attn): the prefix and the causal band
// both start at key block 0, so they make one segment ending at the larger end.
// CHECK-LABEL: func.func @prefix_lm(
// CHECK:       "attn.attention"
// CHECK:         kv_range_fn = @prefix_lm_kv_range, kv_segments = 1 : i64, mask_kind = "static"
// CHECK-LABEL: func.func private @prefix_lm_tile_class(%m_lo: i32, %m_hi: i32, %n_lo: i32, %n_hi: i32, %b: i32, %h: i32, %B: i32, %H: i32, %M: i32, %N: i32, %P: i32) -> i32
// CHECK-DAG:     %[[NLO:.+]] = arith.extsi %n_lo : i32 to i64
// CHECK-DAG:     %[[P:.+]] = arith.extsi %P : i32 to i64
// CHECK-DAG:     %[[INPREFIX:.+]] = arith.cmpi slt, %[[NLO]], %[[P]] : i64
// CHECK-DAG:     %[[MHI:.+]] = arith.extsi %m_hi : i32 to i64
// CHECK-DAG:     %[[BELOW:.+]] = arith.cmpi slt, %[[NLO]], %[[MHI]] : i64
// CHECK:         %may_keep = arith.ori %[[INPREFIX]], %[[BELOW]] : i1
// CHECK:         %[[NHI:.+]] = arith.extsi %n_hi : i32 to i64
// CHECK:         %[[PASTPREFIX:.+]] = arith.cmpi slt, %[[P]], %[[NHI]] : i64
// CHECK:         %may_drop = arith.andi %[[PASTPREFIX]], %{{.+}} : i1
// CHECK-LABEL: func.func private @prefix_lm_kv_range(%m_block: i32, %b: i32, %h: i32, %B: i32, %H: i32, %M: i32, %N: i32, %P: i32) -> (i32, i32)
// CHECK:         %end_0 = arith.maxsi
func.func @prefix_lm(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %P = "attn.dim"() {name = "P"} : () -> i32
    %prefix = arith.cmpi slt, %j, %P : i32
    %causal = arith.cmpi sle, %j, %i : i32
    %keep = arith.ori %prefix, %causal : i1
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {block_m = 128 : i64, block_n = 128 : i64, dims = ["B", "H", "M", "N", "P"], dtype = "bf16", gqa = false, has_mask_mod = true, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], scale = 0.0883883461 : f32, v_shape = ["B", "H", "N", 128], variant = "prefix_lm"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}

// -----
// Documents (examples/docs_sink.attn): the mask reads the param `doc`, so it is
// "runtime"; the integer part still skips the tiles above the diagonal, and no tile is
// ever FULL (whether documents match is known only on the GPU).
// CHECK-LABEL: func.func @docs_sink(
// CHECK:       "attn.attention"
// CHECK:         kv_range_fn = @docs_sink_kv_range, kv_segments = 1 : i64, mask_kind = "runtime"
// CHECK-SAME:    tile_class_fn = @docs_sink_tile_class
// CHECK-LABEL: func.func private @docs_sink_tile_class(
// CHECK:         %may_keep = arith.cmpi slt, %{{.+}}, %{{.+}} : i64
// CHECK-NOT:     %may_drop
// CHECK:         %tile_class = arith.select %may_keep, %c1_i64, %c0_i64 : i64
// CHECK-LABEL: func.func private @docs_sink_kv_range(
func.func @docs_sink(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %doc: tensor<?x?xi32>, %sinks: tensor<?xf32>) -> tensor<?x?x?x64xbf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %doc_i = "attn.param"(%doc, %b, %i) : (tensor<?x?xi32>, i32, i32) -> i32
    %doc_j = "attn.param"(%doc, %b, %j) : (tensor<?x?xi32>, i32, i32) -> i32
    %same = arith.cmpi eq, %doc_i, %doc_j : i32
    %causal = arith.cmpi sle, %j, %i : i32
    %keep = arith.andi %same, %causal : i1
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %sink = "attn.param"(%sinks, %h) : (tensor<?xf32>, i32) -> f32
    gpu.yield %sink : f32
  }) {block_m = 128 : i64, block_n = 128 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = true, has_score_mod = false, has_sink = true, head_dim_qk = 64 : i64, head_dim_v = 64 : i64, k_shape = ["B", "H", "N", 64], outputs = ["o"], param_dtypes = ["i32", "f32"], param_shapes = [["B", "N"], ["H"]], params = ["doc", "sinks"], q_shape = ["B", "H", "M", 64], scale = 1.250000e-01 : f32, v_shape = ["B", "H", "N", 64], variant = "docs_sink"} : (tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>) -> tensor<?x?x?x64xbf16>
  return %o : tensor<?x?x?x64xbf16>
}

// -----
// No mask_mod (examples/mha.attn): "none", and nothing is added.
// CHECK-LABEL: func.func @mha(
// CHECK:       "attn.attention"
// CHECK:         mask_kind = "none"
// CHECK-NOT:     tile_class_fn
// CHECK-NOT:     func.func private @mha_
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
  }) {block_m = 128 : i64, block_n = 128 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], scale = 0.0883883461 : f32, v_shape = ["B", "H", "N", 128], variant = "mha"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
