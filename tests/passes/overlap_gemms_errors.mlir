// Every error attn-overlap-gemms raises on a plan that pass pipelines and options make,
// with its message and its .attn location. (The errors at a KV step it cannot rotate need
// an edited step: tests/passes/test_pass_errors.py and test_overlap_gemms.py.)
//
// A plan of another target than sm_90a:
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-insert-pipelines,attn-overlap-gemms" 2>&1 | filecheck %s --check-prefix=SM80
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms" 2>&1 | filecheck %s --check-prefix=SM100A
// Before attn-warp-specialize (no role regions), and before attn-insert-pipelines (the
// roles still pass tiles by attn.put and attn.get):
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-overlap-gemms" 2>&1 | filecheck %s --check-prefix=NOROLES
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-overlap-gemms" 2>&1 | filecheck %s --check-prefix=NOSYNC
// Run again on its own rotation: the producer plan's first role, and the cooperative role
// of attn-warp-specialize{producer=0}:
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-insert-pipelines,attn-overlap-gemms,attn-overlap-gemms" 2>&1 | filecheck %s --check-prefix=TWICE
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize{producer=0},attn-alloc-smem,attn-insert-pipelines,attn-overlap-gemms,attn-overlap-gemms" 2>&1 | filecheck %s --check-prefix=COOPTWICE
// The cooperative kernel of one K/V stage, on a tile program edited to it (attn-tile refuses it):
// RUN: not attnc opt tests/passes/overlap_gemms_one_stage.mlir -arch sm_90a --pass-pipeline "attn-warp-specialize{producer=0},attn-alloc-smem,attn-insert-pipelines,attn-overlap-gemms" 2>&1 | filecheck %s --check-prefix=STAGES

// SM80: overlap_gemms.attn:2:1: error: attn-overlap-gemms overlaps the GEMMs of sm_90a's consumer warpgroups (wgmma); this plan is for sm_80
// SM100A: overlap_gemms.attn:2:1: error: attn-overlap-gemms overlaps the GEMMs of sm_90a's consumer warpgroups (wgmma); this plan is for sm_100a
// NOROLES: overlap_gemms.attn:2:1: error: attn-overlap-gemms needs the role regions that attn-warp-specialize makes; run attn-warp-specialize first
// NOSYNC: overlap_gemms.attn:2:1: error: attn-overlap-gemms needs the synchronization attn-insert-pipelines makes; run attn-insert-pipelines first
// TWICE: overlap_gemms.attn:2:1: error: attn-overlap-gemms ran twice on role 'producer'
// COOPTWICE: overlap_gemms.attn:2:1: error: attn-overlap-gemms ran twice on role 'compute'
// STAGES: overlap_gemms.attn:2:1: error: attn-overlap-gemms: sm_90a's cooperative kernel overlaps its GEMMs across steps with two or more K/V stages (attn-tile{stages}); this plan has 1

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
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("overlap_gemms.attn":2:1)
  return %o : tensor<?x?x?x128xbf16>
}
