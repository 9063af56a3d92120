// Every error attn-alloc-tmem (sm_100a) raises, with its message and its .attn location.
//
// Before attn-warp-specialize there are no role regions and channels to place S, P and O for:
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-alloc-tmem" 2>&1 | filecheck %s --check-prefix=NOROLES
// Run again on a plan whose tensor-memory buffers it placed:
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-alloc-tmem" 2>&1 | filecheck %s --check-prefix=TWICE
// The budget of 512 columns, on a tile program edited past it (attn-tile refuses such a tile):
// RUN: not attnc opt tests/passes/alloc_tmem_overbudget.mlir -arch sm_100a --pass-pipeline "attn-warp-specialize,attn-alloc-tmem" 2>&1 | filecheck %s --check-prefix=BUDGET

// NOROLES: alloc_tmem.attn:2:1: error: attn-alloc-tmem needs the role regions that attn-warp-specialize makes; run attn-warp-specialize first
// TWICE: alloc_tmem.attn:2:1: error: attn-alloc-tmem ran twice on this op
// BUDGET: alloc_tmem.attn:2:1: error: tensor memory plan needs 768 columns (q_tiles x (block_n + V's head dim)) but sm_100a has 512; lower 'block_n' or 'q_tiles'

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
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("alloc_tmem.attn":2:1)
  return %o : tensor<?x?x?x128xbf16>
}
