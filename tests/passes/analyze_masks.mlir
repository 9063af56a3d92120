// attn-analyze-masks on L1 (as attnc.frontend.lower writes it) with the block sizes
// attn-tile sets. The functions it adds name their arguments and key values with
// NameLocs, which the checks below anchor on: loc("m_lo"...), loc("may_keep"...).
//
// RUN: attnc opt %s --pass-pipeline attn-analyze-masks | filecheck %s

// Causal, 128 x 128 tiles. A tile may keep something when n_lo < m_hi and may drop
// something when m_lo + 1 < n_hi; query block m visits key blocks
// [0, min(m, last key block) + 1) and runs [0, min(m, N // 128)) without the mask.
// CHECK-LABEL: func.func @causal(
// CHECK:         kv_range_fn = @causal_kv_range, kv_segments = 1 : i64, mask_block_m = 128 : i64, mask_block_n = 128 : i64, mask_digest = "{{[0-9a-f]+}}", mask_kind = "static"
// CHECK-SAME:    tile_class_fn = @causal_tile_class
// CHECK-LABEL: func.func private @causal_tile_class(
// CHECK-SAME:    %[[A_m_lo:[0-9a-z_]+]]: i32 loc("m_lo"
// CHECK-SAME:    %[[A_m_hi:[0-9a-z_]+]]: i32 loc("m_hi"
// CHECK-SAME:    %[[A_n_lo:[0-9a-z_]+]]: i32 loc("n_lo"
// CHECK-SAME:    %[[A_n_hi:[0-9a-z_]+]]: i32 loc("n_hi"
// CHECK-SAME:    %[[A_b:[0-9a-z_]+]]: i32 loc("b"
// CHECK-SAME:    %[[A_h:[0-9a-z_]+]]: i32 loc("h"
// CHECK-DAG:     %[[NLO:[0-9a-z_]+]] = arith.extsi %[[A_n_lo]] : i32 to i64
// CHECK-DAG:     %[[MHI:[0-9a-z_]+]] = arith.extsi %[[A_m_hi]] : i32 to i64
// CHECK-DAG:     %[[KEEP:[0-9a-z_]+]] = arith.cmpi slt, %[[NLO]], %[[MHI]] : i64 loc("may_keep"
// CHECK-DAG:     %[[MLO:[0-9a-z_]+]] = arith.extsi %[[A_m_lo]] : i32 to i64
// CHECK-DAG:     %[[MLO1:[0-9a-z_]+]] = arith.addi %[[MLO]], %c1_i64 : i64
// CHECK-DAG:     %[[NHI:[0-9a-z_]+]] = arith.extsi %[[A_n_hi]] : i32 to i64
// CHECK-DAG:     %[[DROP:[0-9a-z_]+]] = arith.cmpi slt, %[[MLO1]], %[[NHI]] : i64 loc("may_drop"
// CHECK:         %[[PARTIAL:[0-9a-z_]+]] = arith.select %[[DROP]], %c1_i64, %c2_i64 : i64
// CHECK:         %[[CLASS:[0-9a-z_]+]] = arith.select %[[KEEP]], %[[PARTIAL]], %c0_i64 : i64 loc("tile_class"
// CHECK:         %[[RESULT:[0-9a-z_]+]] = arith.trunci %[[CLASS]] : i64 to i32
// CHECK:         return %[[RESULT]] : i32
// CHECK-LABEL: func.func private @causal_kv_range(
// CHECK-SAME:    %[[A_m_block:[0-9a-z_]+]]: i32 loc("m_block"
// CHECK-SAME:    %[[A_b:[0-9a-z_]+]]: i32 loc("b"
// CHECK-SAME:    %[[A_h:[0-9a-z_]+]]: i32 loc("h"
// CHECK:         %[[START:[0-9a-z_]+]] = arith.constant 0 : i32
// CHECK:         %[[MB:[0-9a-z_]+]] = arith.extsi %[[A_m_block]] : i32 to i64
// CHECK:         %[[LAST:[0-9a-z_]+]] = arith.minsi %[[MB]], %{{.+}} : i64
// CHECK:         %[[END:[0-9a-z_]+]] = arith.addi %[[LAST]], %c1_i64 : i64 loc("end_0"
// CHECK:         %[[END32:[0-9a-z_]+]] = arith.trunci %[[END]] : i64 to i32
// CHECK:         %[[FULL:[0-9a-z_]+]] = arith.maxsi %c0_i64, %{{.+}} : i64 loc("full_end"
// CHECK:         %[[FULL32:[0-9a-z_]+]] = arith.trunci %[[FULL]] : i64 to i32
// CHECK:         return %[[START]], %[[END32]], %[[START]], %[[FULL32]] : i32, i32, i32, i32
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

// Sliding window of 1024 (examples/sliding_window.attn): a tile keeps something when
// m_lo <= n_hi + 1022 (its nearest pair is within the window) and n_lo < m_hi; it drops
// something when m_lo + 1 < n_hi (above the diagonal) or n_lo + 1024 < m_hi (out of
// the window). The KV range starts 8 blocks back: max(0, m_block - 8); the blocks
// no row drops start 7 back (the last query block, clipped by M, has fewer rows).
// CHECK-LABEL: func.func @sliding_window(
// CHECK:         kv_range_fn = @sliding_window_kv_range, kv_segments = 1 : i64, mask_block_m = 128 : i64, mask_block_n = 128 : i64, mask_digest = "{{[0-9a-f]+}}", mask_kind = "static"
// CHECK-LABEL: func.func private @sliding_window_tile_class(
// CHECK-SAME:    %[[A_m_lo:[0-9a-z_]+]]: i32 loc("m_lo"
// CHECK-SAME:    %[[A_m_hi:[0-9a-z_]+]]: i32 loc("m_hi"
// CHECK-SAME:    %[[A_n_lo:[0-9a-z_]+]]: i32 loc("n_lo"
// CHECK-SAME:    %[[A_n_hi:[0-9a-z_]+]]: i32 loc("n_hi"
// CHECK-DAG:     %[[MLO:[0-9a-z_]+]] = arith.extsi %[[A_m_lo]] : i32 to i64
// CHECK-DAG:     %[[NHI:[0-9a-z_]+]] = arith.extsi %[[A_n_hi]] : i32 to i64
// CHECK-DAG:     %[[REACH:[0-9a-z_]+]] = arith.addi %[[NHI]], %c1022_i64 : i64
// CHECK-DAG:     %[[INWINDOW:[0-9a-z_]+]] = arith.cmpi sle, %[[MLO]], %[[REACH]] : i64
// CHECK-DAG:     %[[NLO:[0-9a-z_]+]] = arith.extsi %[[A_n_lo]] : i32 to i64
// CHECK-DAG:     %[[MHI:[0-9a-z_]+]] = arith.extsi %[[A_m_hi]] : i32 to i64
// CHECK-DAG:     %[[BELOW:[0-9a-z_]+]] = arith.cmpi slt, %[[NLO]], %[[MHI]] : i64
// CHECK:         %[[KEEP:[0-9a-z_]+]] = arith.andi %[[INWINDOW]], %[[BELOW]] : i1 loc("may_keep"
// CHECK:         %[[ABOVE:[0-9a-z_]+]] = arith.cmpi slt, %{{.+}}, %[[NHI]] : i64
// CHECK:         %[[FAR:[0-9a-z_]+]] = arith.addi %[[NLO]], %c1024_i64 : i64
// CHECK:         %[[OUTSIDE:[0-9a-z_]+]] = arith.cmpi slt, %[[FAR]], %[[MHI]] : i64
// CHECK:         %[[DROP:[0-9a-z_]+]] = arith.ori %[[ABOVE]], %[[OUTSIDE]] : i1 loc("may_drop"
// CHECK:         arith.select %[[KEEP]], %{{.+}}, %c0_i64 : i64 loc("tile_class"
// CHECK-LABEL: func.func private @sliding_window_kv_range(
// CHECK-SAME:    %[[A_m_block:[0-9a-z_]+]]: i32 loc("m_block"
// CHECK:         %[[MB:[0-9a-z_]+]] = arith.extsi %[[A_m_block]] : i32 to i64
// CHECK:         %[[BACK:[0-9a-z_]+]] = arith.subi %[[MB]], %c8_i64 : i64
// CHECK:         %[[START:[0-9a-z_]+]] = arith.maxsi %c0_i64, %[[BACK]] : i64 loc("start_0"
// CHECK:         arith.select %{{.+}}, %{{.+}}, %[[START]] : i64 loc("end_0"
// CHECK:         arith.maxsi %c0_i64, %{{.+}} : i64 loc("full_start"
// CHECK:         arith.maxsi %{{.+}}, %{{.+}} : i64 loc("full_end"
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

// Prefix-LM, P a runtime dim (examples/prefix_lm.attn): a tile keeps something when
// n_lo < P or n_lo < m_hi, drops something when P < n_hi and m_lo + 1 < n_hi. The
// prefix and the causal band both start at key block 0: one segment, to the larger end.
// CHECK-LABEL: func.func @prefix_lm(
// CHECK:         kv_range_fn = @prefix_lm_kv_range, kv_segments = 1 : i64, mask_block_m = 128 : i64, mask_block_n = 128 : i64, mask_digest = "{{[0-9a-f]+}}", mask_kind = "static"
// CHECK-LABEL: func.func private @prefix_lm_tile_class(
// CHECK-SAME:    %[[A_m_lo:[0-9a-z_]+]]: i32 loc("m_lo"
// CHECK-SAME:    %[[A_m_hi:[0-9a-z_]+]]: i32 loc("m_hi"
// CHECK-SAME:    %[[A_n_lo:[0-9a-z_]+]]: i32 loc("n_lo"
// CHECK-SAME:    %[[A_n_hi:[0-9a-z_]+]]: i32 loc("n_hi"
// CHECK-SAME:    %[[A_b:[0-9a-z_]+]]: i32 loc("b"
// CHECK-SAME:    %[[A_h:[0-9a-z_]+]]: i32 loc("h"
// CHECK-SAME:    %[[A_B:[0-9a-z_]+]]: i32 loc("B"
// CHECK-SAME:    %[[A_H:[0-9a-z_]+]]: i32 loc("H"
// CHECK-SAME:    %[[A_M:[0-9a-z_]+]]: i32 loc("M"
// CHECK-SAME:    %[[A_N:[0-9a-z_]+]]: i32 loc("N"
// CHECK-SAME:    %[[A_P:[0-9a-z_]+]]: i32 loc("P"
// CHECK-DAG:     %[[NLO:[0-9a-z_]+]] = arith.extsi %[[A_n_lo]] : i32 to i64
// CHECK-DAG:     %[[PP:[0-9a-z_]+]] = arith.extsi %[[A_P]] : i32 to i64
// CHECK-DAG:     %[[INPREFIX:[0-9a-z_]+]] = arith.cmpi slt, %[[NLO]], %[[PP]] : i64
// CHECK-DAG:     %[[MHI:[0-9a-z_]+]] = arith.extsi %[[A_m_hi]] : i32 to i64
// CHECK-DAG:     %[[BELOW:[0-9a-z_]+]] = arith.cmpi slt, %[[NLO]], %[[MHI]] : i64
// CHECK:         arith.ori %[[INPREFIX]], %[[BELOW]] : i1 loc("may_keep"
// CHECK:         %[[NHI:[0-9a-z_]+]] = arith.extsi %[[A_n_hi]] : i32 to i64
// CHECK:         %[[PASTPREFIX:[0-9a-z_]+]] = arith.cmpi slt, %[[PP]], %[[NHI]] : i64
// CHECK:         arith.andi %[[PASTPREFIX]], %{{.+}} : i1 loc("may_drop"
// CHECK-LABEL: func.func private @prefix_lm_kv_range(
// CHECK:         %[[START:[0-9a-z_]+]] = arith.constant 0 : i32
// CHECK:         %[[END:[0-9a-z_]+]] = arith.maxsi %{{.+}}, %{{.+}} : i64 loc("end_0"
// CHECK:         %[[END32:[0-9a-z_]+]] = arith.trunci %[[END]] : i64 to i32
// CHECK:         %[[FULL:[0-9a-z_]+]] = arith.maxsi %c0_i64, %{{.+}} : i64 loc("full_end"
// CHECK:         %[[FULL32:[0-9a-z_]+]] = arith.trunci %[[FULL]] : i64 to i32
// CHECK:         return %[[START]], %[[END32]], %[[START]], %[[FULL32]] : i32, i32, i32, i32
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

// Documents (examples/docs_sink.attn): the mask reads the param `doc`, so it is
// "runtime"; the integer part still skips the tiles above the diagonal (n_lo >= m_hi),
// and no tile is FULL (whether documents match is known only on the GPU): the full
// range is empty, (0, 0).
// CHECK-LABEL: func.func @docs_sink(
// CHECK:         kv_range_fn = @docs_sink_kv_range, kv_segments = 1 : i64, mask_block_m = 128 : i64, mask_block_n = 128 : i64, mask_digest = "{{[0-9a-f]+}}", mask_kind = "runtime"
// CHECK-SAME:    tile_class_fn = @docs_sink_tile_class
// CHECK-LABEL: func.func private @docs_sink_tile_class(
// CHECK:         %[[KEEP:[0-9a-z_]+]] = arith.cmpi slt, %{{.+}}, %{{.+}} : i64 loc("may_keep"
// CHECK-NOT:     loc("may_drop"
// CHECK:         arith.select %[[KEEP]], %c1_i64, %c0_i64 : i64 loc("tile_class"
// CHECK-LABEL: func.func private @docs_sink_kv_range(
// CHECK:         %[[ZERO:[0-9a-z_]+]] = arith.constant 0 : i32
// CHECK:         return %[[ZERO]], %{{.+}}, %[[ZERO]], %[[ZERO]] : i32, i32, i32, i32
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

// No mask_mod (examples/mha.attn): "none", and nothing is added.
// CHECK-LABEL: func.func @mha(
// CHECK:         mask_block_m = 128 : i64, mask_block_n = 128 : i64, mask_digest = "none", mask_kind = "none"
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
