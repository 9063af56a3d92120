// Input of analyze_masks_errors.mlir: an L1 op tiled by hand with block_m = 2^62, which
// attn-tile would refuse, and the mask_mod j >= 4 * i, every value of which fits in 64 bits
// (the keys a query block may keep would start at 4 * block_m * m_block: a constant of 2^64).

func.func @huge_tile(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %c4 = arith.constant 4 : i32
    %i4 = arith.muli %i, %c4 : i32
    %keep = arith.cmpi sge, %j, %i4 : i32
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "huge_tile", dtype = "bf16", head_dim_qk = 128 : i64, head_dim_v = 128 : i64,
      scale = 0.0883883461 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 128],
      k_shape = ["B", "H", "N", 128], v_shape = ["B", "H", "N", 128], params = [],
      param_shapes = [], param_dtypes = [], outputs = ["o"], gqa = false,
      has_score_mod = false, has_mask_mod = true, has_sink = false, block_m = 4611686018427387904 : i64, block_n = 64 : i64}
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("huge_tile.attn":2:1)
  return %o : tensor<?x?x?x128xbf16>
}
