// Every error attn-tile raises: a refused option value at the option in --pass-pipeline,
// the others at the .attn location of the attn.attention op it tiles (the first op of
// the module fails first).
//
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile{target=sm_75}" 2>&1 | filecheck %s --check-prefix=TARGET
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile{block_m=0}" 2>&1 | filecheck %s --check-prefix=ZERO
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile{num_warps=6}" 2>&1 | filecheck %s --check-prefix=WARPS80
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile{num_warps=8}" 2>&1 | filecheck %s --check-prefix=WARPS100
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile{block_m=96}" 2>&1 | filecheck %s --check-prefix=BLOCKM80
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile{block_m=64 num_warps=12}" 2>&1 | filecheck %s --check-prefix=BLOCKM90
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile{block_m=64}" 2>&1 | filecheck %s --check-prefix=BLOCKM100
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile{block_n=40}" 2>&1 | filecheck %s --check-prefix=BLOCKN
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile{block_n=272}" 2>&1 | filecheck %s --check-prefix=BLOCKNMAX
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile{block_n=48}" 2>&1 | filecheck %s --check-prefix=BLOCKN100
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile{stages=1}" 2>&1 | filecheck %s --check-prefix=STAGES
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile{q_tiles=2}" 2>&1 | filecheck %s --check-prefix=QTILES
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile{block_n=256 stages=3}" 2>&1 | filecheck %s --check-prefix=SMEM
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile{stages=4}" 2>&1 | filecheck %s --check-prefix=SMEM100
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile{block_n=192 stages=2}" 2>&1 | filecheck %s --check-prefix=TMEM
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile{block_n=128}" 2>&1 | filecheck %s --check-prefix=REGS

// TARGET: --pass-pipeline:1:11: error: attn-tile: target=sm_75: unsupported; supported targets are sm_80, sm_90a, sm_100a
// ZERO: --pass-pipeline:1:11: error: attn-tile: block_m=0 must be at least 1
// WARPS80: --pass-pipeline:1:11: error: attn-tile: num_warps=6 is not possible on sm_80: its kernel layout uses 4 or 8 warps
// WARPS100: --pass-pipeline:1:11: error: attn-tile: num_warps=8 is not possible on sm_100a: its kernel layout uses 16 warps
// BLOCKM80: --pass-pipeline:1:11: error: attn-tile: block_m=96 is not possible on sm_80: each of the 4 warps owns 16-row slices, so block_m must be a multiple of 64
// BLOCKM90: --pass-pipeline:1:11: error: attn-tile: block_m=64 is not possible on sm_90a with num_warps=12: 4 warps load, and each of the 2 consumer warpgroups runs 64 rows, so block_m must be 128
// BLOCKM100: --pass-pipeline:1:11: error: attn-tile: block_m=64 is not possible on sm_100a: a Q tile is one tcgen05.mma of 128 rows (one row per softmax thread)
// BLOCKN: --pass-pipeline:1:11: error: attn-tile: block_n=40 is not possible on sm_80: it must be a multiple of 16 (the k-step of P.V) and at most 256
// BLOCKNMAX: --pass-pipeline:1:11: error: attn-tile: block_n=272 is not possible on sm_90a: it must be a multiple of 16 (the k-step of P.V) and at most 256
// BLOCKN100: --pass-pipeline:1:11: error: attn-tile: block_n=48 is not possible on sm_100a: it must be a multiple of 32 (a row of S is read from tensor memory, and P written there, in chunks of 32 scores)
// STAGES: --pass-pipeline:1:11: error: attn-tile: stages=1 is not possible on sm_90a: the K/V pipeline needs 2 to 4 stages
// QTILES: --pass-pipeline:1:11: error: attn-tile: q_tiles=2 is not possible on sm_80: a CTA holds 1 Q tile(s)
// SMEM: tile_errors.attn:2:1: error: the tile needs 416 KB of shared memory (Q 32 KB + K/V 384 KB) but sm_80 has 163 KB: lower block_n, stages or block_m
// SMEM100: tile_errors.attn:2:1: error: the tile needs 232760 bytes of shared memory ({{.*}}) but sm_100a has 227 KB: lower block_n, stages or q_tiles
// TMEM: tile_errors.attn:2:1: error: S and O need 640 TMEM columns (2 x (192 + 128)) but sm_100a has 512: lower block_n or q_tiles
// REGS: tile_errors.attn:2:1: error: S and O accumulators need 256 registers per thread (128 rows x (128 + 128) f32 over 128 threads), more than the 192 sm_80 leaves for them: lower block_m or block_n, or raise num_warps

func.func @hd128_unmasked(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
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
  }) {variant = "hd128_unmasked", dtype = "bf16", head_dim_qk = 128 : i64, head_dim_v = 128 : i64,
      scale = 0.0883883461 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 128],
      k_shape = ["B", "H", "N", 128], v_shape = ["B", "H", "N", 128], params = [],
      param_shapes = [], param_dtypes = [], outputs = ["o"], gqa = false,
      has_score_mod = false, has_mask_mod = false, has_sink = false}
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("tile_errors.attn":2:1)
  return %o : tensor<?x?x?x128xbf16>
}

func.func @hd64_masked(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>) -> tensor<?x?x?x64xf16> {
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
  }) {variant = "hd64_masked", dtype = "f16", head_dim_qk = 64 : i64, head_dim_v = 64 : i64,
      scale = 0.125 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 64],
      k_shape = ["B", "H", "N", 64], v_shape = ["B", "H", "N", 64], params = [],
      param_shapes = [], param_dtypes = [], outputs = ["o"], gqa = false,
      has_score_mod = false, has_mask_mod = true, has_sink = false}
      : (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) -> tensor<?x?x?x64xf16> loc("tile_errors.attn":20:1)
  return %o : tensor<?x?x?x64xf16>
}
