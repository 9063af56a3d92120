// Every error the L3-L5 passes raise, at the .attn location of the attn.attention op.
//
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline attn-warp-specialize 2>&1 | filecheck %s --check-prefix=NOTILE
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-alloc-smem" 2>&1 | filecheck %s --check-prefix=NOROLES
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-insert-pipelines" 2>&1 | filecheck %s --check-prefix=NOBUFFERS
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-warp-specialize" 2>&1 | filecheck %s --check-prefix=TWICE
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-alloc-smem" 2>&1 | filecheck %s --check-prefix=ALLOCTWICE
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-insert-pipelines,attn-insert-pipelines" 2>&1 | filecheck %s --check-prefix=SYNCTWICE
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize{consumers=4}" 2>&1 | filecheck %s --check-prefix=CONSUMERS
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize{consumers=1}" 2>&1 | filecheck %s --check-prefix=CONSUMERS80
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize{producer=1}" 2>&1 | filecheck %s --check-prefix=PRODUCER80
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize{persistent=1}" 2>&1 | filecheck %s --check-prefix=PERSISTENT80
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize{consumers=1}" 2>&1 | filecheck %s --check-prefix=COVER
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile{block_m=64},attn-warp-specialize{pingpong=1}" 2>&1 | filecheck %s --check-prefix=PINGPONG1
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile{block_m=256 block_n=64},attn-warp-specialize" 2>&1 | filecheck %s --check-prefix=ROWS
// The budget check of attn-alloc-smem, on a hand-tiled op that attn-tile would refuse:
// RUN: not attnc opt tests/passes/schedule_pretiled.mlir -arch sm_90a --pass-pipeline "attn-warp-specialize" 2>&1 | filecheck %s --check-prefix=NOKERNEL
// RUN: not attnc opt tests/passes/schedule_overbudget.mlir -arch sm_90a --pass-pipeline "attn-alloc-smem" 2>&1 | filecheck %s --check-prefix=SMEM
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem{kv_layout=rows}" 2>&1 | filecheck %s --check-prefix=KVLAYOUT
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem{kv_layout=separate}" 2>&1 | filecheck %s --check-prefix=KVLAYOUT100
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-insert-pipelines" 2>&1 | filecheck %s --check-prefix=SYNCNOROLES
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-verify-pipeline" 2>&1 | filecheck %s --check-prefix=VERIFYNOROLES
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-verify-pipeline" 2>&1 | filecheck %s --check-prefix=VERIFYNOSYNC

// NOTILE: schedule.attn:2:1: error: attn-warp-specialize needs the 'target' attribute that attn-tile records; run attn-tile first
// NOROLES: schedule.attn:2:1: error: attn-alloc-smem needs the role regions that attn-warp-specialize makes; run attn-warp-specialize first
// SYNCNOROLES: schedule.attn:2:1: error: attn-insert-pipelines needs the role regions that attn-warp-specialize makes; run attn-warp-specialize first
// VERIFYNOROLES: schedule.attn:2:1: error: attn-verify-pipeline needs the role regions that attn-warp-specialize makes; run attn-warp-specialize first
// VERIFYNOSYNC: schedule.attn:2:1: error: attn-verify-pipeline needs the synchronization attn-insert-pipelines makes of attn.put; run attn-insert-pipelines first
// NOKERNEL: schedule.attn:2:1: error: attn-warp-specialize needs the tile program of attn.kernel; run attn-tile first
// NOBUFFERS: schedule.attn:2:1: error: attn-insert-pipelines: channel(s) q, kv have no buffer; run attn-alloc-smem (and attn-alloc-tmem) first
// TWICE: schedule.attn:2:1: error: attn-warp-specialize ran twice on this op
// ALLOCTWICE: schedule.attn:2:1: error: attn-alloc-smem ran twice on this op
// KVLAYOUT: --pass-pipeline:1:48: error: attn-alloc-smem: kv_layout=rows: expected interleaved or separate (Note [K/V slots] in attnc/schedule/alloc.py)
// KVLAYOUT100: --pass-pipeline:1:48: error: attn-alloc-smem: kv_layout=separate: sm_100a's K and V take the slots of one ring in turn (alternating): there is no layout of the two to choose
// SYNCTWICE: schedule.attn:2:1: error: attn-insert-pipelines ran twice on this op
// CONSUMERS: --pass-pipeline:1:32: error: attn-warp-specialize: consumers=4: sm_90a has 1, 2 or 3 consumer warpgroups
// CONSUMERS80: --pass-pipeline:1:32: error: attn-warp-specialize: consumers=1: only sm_90a has a producer and consumer warpgroups; sm_80's roles are fixed by its recipe
// PRODUCER80: --pass-pipeline:1:32: error: attn-warp-specialize: producer=1: only sm_90a has a producer and consumer warpgroups; sm_80's roles are fixed by its recipe
// PERSISTENT80: --pass-pipeline:1:32: error: attn-warp-specialize: persistent=1: persistent CTAs are sm_90a's producer kernel's and sm_100a's; sm_80's CTAs run one query block, or two (q_blocks_per_cta=2)
// COVER: --pass-pipeline:1:32: error: attn-warp-specialize: consumers=1 runs 64 query rows (64 a warpgroup), and the tile has block_m=128: set attn-tile{block_m=64}
// PINGPONG1: --pass-pipeline:1:44: error: attn-warp-specialize: pingpong=1: the consumers take turns when there are two fed by the producer; this plan has consumers=1, producer=0
// ROWS: --pass-pipeline:1:11: error: attn-tile: block_m=256 is not possible on sm_90a: a consumer warpgroup runs 64 rows, and a CTA has 1, 2 or 3 of them: block_m 64, 128 or 192
// SMEM: schedule.attn:2:1: error: shared memory plan needs 295048 bytes (sQ 32768, sK 131072, sV 131072, mbarriers 136) but sm_90a allows 232448; lower 'stages' or 'block_n' (attn-tile)

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
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("schedule.attn":2:1)
  return %o : tensor<?x?x?x128xbf16>
}
