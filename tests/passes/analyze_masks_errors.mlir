// Every error attn-analyze-masks raises, with its message and its .attn location.
// The input at the bottom is the L1 IR of
//   mask_mod(b, h, i, j) = (j + 1) * 65536 * 65536 * 65536 * 65536 > 0
// (wide.attn, line 5); the inputs of the other RUN lines are hand-edited L1 IR that no
// .attn source gives.
//
// Without attn-tile the op has no tile sizes to classify the tiles of:
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline attn-analyze-masks 2>&1 | filecheck %s --check-prefix=NOTILE
// A value that is at least 2^64 whatever i and j are, refused at its operation:
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks" 2>&1 | filecheck %s --check-prefix=WIDE
// A mask_mod that yields an i32, refused at its gpu.yield:
// RUN: not attnc opt tests/passes/analyze_masks_not_i1.mlir -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks" 2>&1 | filecheck %s --check-prefix=NOTI1
// A mask_mod that reads a dim 'W' the op's dims do not have, refused at the attn.dim:
// RUN: not attnc opt tests/passes/analyze_masks_unknown_dim.mlir -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks" 2>&1 | filecheck %s --check-prefix=DIM
// A hand-set block_m = 2^62, which attn-tile would refuse (its key ranges' bounds would
// need constants past 64 bits):
// RUN: not attnc opt tests/passes/analyze_masks_huge_tile.mlir -arch sm_80 --pass-pipeline attn-analyze-masks 2>&1 | filecheck %s --check-prefix=TILESIZE

// NOTILE: wide.attn:2:1: error: attn-analyze-masks needs the tile sizes, but 'block_m' is not set: run attn-tile before it
// WIDE: wide.attn:5:58: error: this integer is always beyond 64 bits (at least 1.84e+19 in size): integers are exact up to 64 bits; rewrite it with smaller values
// NOTI1: not_i1.attn:5:26: error: mask_mod must end in a gpu.yield of one i1 (keep (i, j) or not)
// DIM: unknown_dim.attn:5:33: error: dim 'W' is not one of the dims of attn.kernel (B, H, M, N)
// TILESIZE: huge_tile.attn:2:1: error: attn-analyze-masks: block_m = 4611686018427387904 is no tile size (1 to 4096); attn-tile sets it

func.func @wide(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %c1 = arith.constant 1 : i32
    %j1 = arith.addi %j, %c1 : i32
    %c65536 = arith.constant 65536 : i32
    %x1 = arith.muli %j1, %c65536 : i32
    %x2 = arith.muli %x1, %c65536 : i32
    %x3 = arith.muli %x2, %c65536 : i32
    %x4 = arith.muli %x3, %c65536 : i32 loc("wide.attn":5:58)
    %c0 = arith.constant 0 : i32
    %keep = arith.cmpi sgt, %x4, %c0 : i32
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "wide", dtype = "bf16", head_dim_qk = 128 : i64, head_dim_v = 128 : i64,
      scale = 0.0883883461 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 128],
      k_shape = ["B", "H", "N", 128], v_shape = ["B", "H", "N", 128], params = [],
      param_shapes = [], param_dtypes = [], outputs = ["o"], gqa = false,
      has_score_mod = false, has_mask_mod = true, has_sink = false}
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("wide.attn":2:1)
  return %o : tensor<?x?x?x128xbf16>
}
