// attn-tile per target, from the table and with overrides. The input is L1 as the
// frontend writes it (attnc/ir/attn.irdl.mlir), reduced to what the pass reads.
//
// RUN: attnc opt %s -arch sm_80 --pass-pipeline attn-tile | filecheck %s --check-prefix=SM80
// RUN: attnc opt %s -arch sm_90a --pass-pipeline attn-tile | filecheck %s --check-prefix=SM90
// RUN: attnc opt %s -arch sm_100a --pass-pipeline attn-tile | filecheck %s --check-prefix=SM100
// RUN: attnc opt %s -arch sm_100a --pass-pipeline "attn-tile{target=sm_80 block_m=64 block_n=32 stages=1}" \
// RUN:   | filecheck %s --check-prefix=OVERRIDE
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile{num_warps=8 block_m=64}" \
// RUN:   | filecheck %s --check-prefix=SM90-ONE-CONSUMER
// RUN: attnc opt %s -arch sm_80 --pass-pipeline attn-tile | filecheck %s --check-prefix=PROGRAM
// RUN: attnc opt %s -arch sm_100a --pass-pipeline attn-tile | filecheck %s --check-prefix=TWO

// Attributes print sorted by name: block_m, block_n, ..., num_warps, ..., q_tiles, ...,
// stages, target.
// SM80-LABEL: func.func @hd128_unmasked
// SM80: }) {block_m = 128 : i64, block_n = 64 : i64,{{.*}} num_warps = 4 : i64,{{.*}} q_tiles = 1 : i64,{{.*}} stages = 2 : i64, target = "sm_80"
// Head dim 64 takes FA2's 128x128 (spill-free, faster than 128x64 on the GPU).
// SM80-LABEL: func.func @hd64_masked
// SM80: }) {block_m = 128 : i64, block_n = 128 : i64,{{.*}} num_warps = 4 : i64,{{.*}} q_tiles = 1 : i64,{{.*}} stages = 2 : i64, target = "sm_80"
// SM80-LABEL: func.func @hd256_qk128_v
// SM80: }) {block_m = 64 : i64, block_n = 64 : i64,{{.*}} num_warps = 4 : i64,{{.*}} q_tiles = 1 : i64,{{.*}} stages = 2 : i64, target = "sm_80"

// FlashAttention-3 takes 176-key blocks for head dim 128 without a mask, 128 with one;
// attn-lower-sm90a's kernel (no setmaxnreg budgets yet) takes 128 for both, 3 stages.
// SM90-LABEL: func.func @hd128_unmasked
// SM90: }) {block_m = 128 : i64, block_n = 128 : i64,{{.*}} num_warps = 12 : i64,{{.*}} q_tiles = 1 : i64,{{.*}} stages = 3 : i64, target = "sm_90a"
// Head dim 64: FlashAttention-3's 192-row tile, three consumer warpgroups and the producer
// (16 warps), 96-key blocks (at 128 the consumers spill).
// SM90-LABEL: func.func @hd64_masked
// SM90: }) {block_m = 192 : i64, block_n = 96 : i64,{{.*}} num_warps = 16 : i64,{{.*}} stages = 2 : i64, target = "sm_90a"
// SM90-LABEL: func.func @hd256_qk128_v
// SM90: }) {block_m = 128 : i64, block_n = 80 : i64,{{.*}} num_warps = 12 : i64,{{.*}} stages = 2 : i64, target = "sm_90a"

// attn.attention becomes attn.kernel, with its operands, attributes and location.
// SM100-LABEL: func.func @hd128_unmasked
// SM100: "attn.kernel"(%arg0, %arg1, %arg2)
// SM100: gpu.yield
// SM100: }) {block_m = 128 : i64, block_n = 128 : i64,{{.*}} num_warps = 16 : i64,{{.*}} q_tiles = 2 : i64,{{.*}} stages = 3 : i64, target = "sm_100a"
// SM100-SAME: loc("tile.attn":2:1)
// SM100-LABEL: func.func @hd64_masked
// SM100: }) {block_m = 128 : i64, block_n = 128 : i64,{{.*}} num_warps = 16 : i64,{{.*}} q_tiles = 2 : i64,{{.*}} stages = 3 : i64, target = "sm_100a"
// SM100-LABEL: func.func @hd256_qk128_v
// SM100: }) {block_m = 128 : i64, block_n = 128 : i64,{{.*}} num_warps = 16 : i64,{{.*}} q_tiles = 1 : i64,{{.*}} stages = 2 : i64, target = "sm_100a"

// The tile program: the Q tile, the running max, sum and O, one KV loop over
// [0, cdiv(N, block_n)) carrying them, finalize and store. Without a mask_mod (or a
// score_mod) there is no attn.mask (attn.score_mod) op; the tile types follow the tile.
// PROGRAM-LABEL: func.func @hd128_unmasked
// PROGRAM: "attn.kernel"(%arg0, %arg1, %arg2) ({
// PROGRAM-NEXT: ^bb0(%[[B:.*]]: i32{{.*}}, %[[H:.*]]: i32{{.*}}, %[[M:.*]]: i32{{.*}}):
// PROGRAM-NEXT: %[[Q:.*]] = "attn.load"(%arg0, %[[B]], %[[H]], %[[M]]) {operand = "q"} : {{.*}} -> !attn.tile<[128, 128], bf16, "smem">
// PROGRAM-NEXT: %[[MAX0:.*]] = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[128], f32, "reg">
// PROGRAM-NEXT: %[[SUM0:.*]] = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128], f32, "reg">
// PROGRAM-NEXT: %[[ACC0:.*]] = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128, 128], f32, "reg">
// PROGRAM-NEXT: %[[N:.*]] = "attn.dim"() {name = "N"}
// PROGRAM-NEXT: %[[BN:.*]] = arith.constant 64 : i32
// PROGRAM: %[[BLOCKS:.*]] = arith.divsi %{{.*}}, %[[BN]] : i32
// PROGRAM: %[[ZERO:.*]] = arith.constant 0 : i32
// PROGRAM: %[[TOP:.*]] = arith.subi %[[BLOCKS]], %{{.*}} : i32
// PROGRAM: %[[R:.*]]:3 = scf.for %[[T:.*]] = %[[ZERO]] to %[[BLOCKS]] step %{{.*}} iter_args(%[[MAX:.*]] = %[[MAX0]], %[[SUM:.*]] = %[[SUM0]], %[[ACC:.*]] = %[[ACC0]])
// PROGRAM-NEXT: %[[NB:.*]] = arith.subi %[[TOP]], %[[T]] : i32
// PROGRAM-NEXT: %[[K:.*]] = "attn.load"(%arg1, %[[B]], %[[H]], %[[NB]]) {operand = "k"} : {{.*}} -> !attn.tile<[64, 128], bf16, "smem">
// PROGRAM-NEXT: %[[S:.*]] = "attn.mma"(%[[Q]], %[[K]]) {kind = "qk"} : {{.*}} -> !attn.tile<[128, 64], f32, "reg">
// PROGRAM-NEXT: %[[STEP:.*]]:4 = "attn.softmax_step"(%[[S]], %[[MAX]], %[[SUM]]) : {{.*}} -> (!attn.tile<[128, 64], bf16, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">)
// PROGRAM-NEXT: %[[SCALED:.*]] = "attn.rescale"(%[[ACC]], %[[STEP]]#3)
// PROGRAM-NEXT: %[[V:.*]] = "attn.load"(%arg2, %[[B]], %[[H]], %[[NB]]) {operand = "v"}
// PROGRAM-NEXT: %[[PV:.*]] = "attn.mma"(%[[STEP]]#0, %[[V]], %[[SCALED]]) {kind = "pv"}
// PROGRAM-NEXT: scf.yield %[[STEP]]#1, %[[STEP]]#2, %[[PV]]
// PROGRAM-NEXT: } {kv_blocks = "all"}
// PROGRAM-NEXT: %[[OUT:.*]]:2 = "attn.finalize"(%[[R]]#2, %[[R]]#0, %[[R]]#1, %[[H]]) ({
// PROGRAM-NEXT: ^bb0(%{{.*}}: i32{{.*}}):
// PROGRAM-NEXT: arith.constant 0xFF800000 : f32
// PROGRAM-NEXT: gpu.yield
// PROGRAM-NEXT: }) : {{.*}} -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">)
// PROGRAM-NEXT: "attn.store"(%[[OUT]]#0, %[[B]], %[[H]], %[[M]]) {operand = "o"}
// PROGRAM-NEXT: gpu.yield
// PROGRAM-NEXT: }) {block_m = 128 : i64, block_n = 64 : i64,
// PROGRAM-NOT: attn.mask

// sm_100a's CTA runs two Q tiles (Note [Q tiles of a CTA] in attnc/passes/tile_program.py):
// each tile's Q, max, sum and O, its ops tagged q_tile; one K and one V a step for both,
// both tiles' S before either softmax, both P.V after V's load; a finalize and a store each.
// TWO-LABEL: func.func @hd128_unmasked
// TWO: %[[Q0:.*]] = "attn.load"(%arg0, %[[B:.*]], %[[H:.*]], %[[M:.*]]) {operand = "q", q_tile = 0 : i64}
// TWO-NEXT: %[[Q1:.*]] = "attn.load"(%arg0, %[[B]], %[[H]], %[[M]]) {operand = "q", q_tile = 1 : i64}
// TWO: scf.for %[[T:.*]] = {{.*}} iter_args(%[[MAX0:.*]] = %{{.*}}, %[[SUM0:.*]] = %{{.*}}, %[[ACC0:.*]] = %{{.*}}, %[[MAX1:.*]] = %{{.*}}, %[[SUM1:.*]] = %{{.*}}, %[[ACC1:.*]] = %{{.*}})
// TWO-NEXT: %[[NB:.*]] = arith.subi %{{.*}}, %[[T]] : i32
// TWO-NEXT: %[[K:.*]] = "attn.load"(%arg1, %[[B]], %[[H]], %[[NB]]) {operand = "k"}
// TWO-NEXT: %[[S0:.*]] = "attn.mma"(%[[Q0]], %[[K]]) {kind = "qk", q_tile = 0 : i64}
// TWO-NEXT: %[[S1:.*]] = "attn.mma"(%[[Q1]], %[[K]]) {kind = "qk", q_tile = 1 : i64}
// TWO-NEXT: %[[STEP0:.*]]:4 = "attn.softmax_step"(%[[S0]], %[[MAX0]], %[[SUM0]]) {q_tile = 0 : i64}
// TWO-NEXT: %[[SCALED0:.*]] = "attn.rescale"(%[[ACC0]], %[[STEP0]]#3) {q_tile = 0 : i64}
// TWO-NEXT: %[[STEP1:.*]]:4 = "attn.softmax_step"(%[[S1]], %[[MAX1]], %[[SUM1]]) {q_tile = 1 : i64}
// TWO-NEXT: %[[SCALED1:.*]] = "attn.rescale"(%[[ACC1]], %[[STEP1]]#3) {q_tile = 1 : i64}
// TWO-NEXT: %[[V:.*]] = "attn.load"(%arg2, %[[B]], %[[H]], %[[NB]]) {operand = "v"}
// TWO-NEXT: %[[PV0:.*]] = "attn.mma"(%[[STEP0]]#0, %[[V]], %[[SCALED0]]) {kind = "pv", q_tile = 0 : i64}
// TWO-NEXT: %[[PV1:.*]] = "attn.mma"(%[[STEP1]]#0, %[[V]], %[[SCALED1]]) {kind = "pv", q_tile = 1 : i64}
// TWO-NEXT: scf.yield %[[STEP0]]#1, %[[STEP0]]#2, %[[PV0]], %[[STEP1]]#1, %[[STEP1]]#2, %[[PV1]]
// TWO: %[[OUT0:.*]]:2 = "attn.finalize"({{.*}}) ({
// TWO: }) {q_tile = 0 : i64}
// TWO-NEXT: "attn.store"(%[[OUT0]]#0, %[[B]], %[[H]], %[[M]]) {operand = "o", q_tile = 0 : i64}
// TWO-NEXT: %[[OUT1:.*]]:2 = "attn.finalize"({{.*}}) ({
// TWO: }) {q_tile = 1 : i64}
// TWO-NEXT: "attn.store"(%[[OUT1]]#0, %[[B]], %[[H]], %[[M]]) {operand = "o", q_tile = 1 : i64}
// TWO-NEXT: gpu.yield
// Head dims 256: one Q tile, no q_tile attributes.
// TWO-LABEL: func.func @hd256_qk128_v
// TWO-NOT: q_tile =
// TWO: }) {block_m = 128
// PROGRAM-LABEL: func.func @hd64_masked
// PROGRAM: scf.for
// PROGRAM: "attn.mma"({{.*}}) {kind = "qk"}
// PROGRAM-NEXT: "attn.mask"(%{{.*}}) ({
// PROGRAM-NEXT: ^bb0(%{{.*}}: i32{{.*}}, %{{.*}}: i32{{.*}}, %[[I:.*]]: i32{{.*}}, %[[J:.*]]: i32{{.*}}):
// PROGRAM-NEXT: arith.cmpi sle, %[[J]], %[[I]] : i32
// PROGRAM: "attn.softmax_step"
// PROGRAM: } {kv_blocks = "all"}
// PROGRAM-LABEL: func.func @hd64_params
// PROGRAM: "attn.score_mod"(%{{.*}}) ({
// PROGRAM-NEXT: ^bb0(
// PROGRAM-NEXT: "attn.param"
// PROGRAM: "attn.softmax_step"

// Options override the table field by field; target= wins over -arch.
// OVERRIDE-LABEL: func.func @hd128_unmasked
// OVERRIDE: }) {block_m = 64 : i64, block_n = 32 : i64,{{.*}} num_warps = 4 : i64,{{.*}} q_tiles = 1 : i64,{{.*}} stages = 1 : i64, target = "sm_80"

// SM90-ONE-CONSUMER-LABEL: func.func @hd128_unmasked
// SM90-ONE-CONSUMER: }) {block_m = 64 : i64, block_n = 128 : i64,{{.*}} num_warps = 8 : i64,{{.*}} target = "sm_90a"

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
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("tile.attn":2:1)
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
      : (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) -> tensor<?x?x?x64xf16> loc("tile.attn":20:1)
  return %o : tensor<?x?x?x64xf16>
}

// (256, 128): a pair not in the table takes the row of its larger head dim.
func.func @hd256_qk128_v(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
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
  }) {variant = "hd256_qk128_v", dtype = "bf16", head_dim_qk = 256 : i64, head_dim_v = 128 : i64,
      scale = 0.0625 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 256],
      k_shape = ["B", "H", "N", 256], v_shape = ["B", "H", "N", 128], params = [],
      param_shapes = [], param_dtypes = [], outputs = ["o"], gqa = false,
      has_score_mod = false, has_mask_mod = false, has_sink = false}
      : (tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("tile.attn":40:1)
  return %o : tensor<?x?x?x128xbf16>
}

// Head dim 64 with a hook reading a param at (b, h) only (ALiBi slopes): loaded once per
// CTA, nothing in the score tile: the table's tile on sm_80 (128x128); on sm_90a a score_mod
// of i and j score by score takes one consumer warpgroup (64x128).
// SM80-LABEL: func.func @hd64_params
// SM80: }) {block_m = 128 : i64, block_n = 128 : i64,{{.*}} num_warps = 4 : i64,{{.*}} q_tiles = 1 : i64,{{.*}} stages = 2 : i64, target = "sm_80"
// SM90-LABEL: func.func @hd64_params
// SM90: }) {block_m = 64 : i64, block_n = 128 : i64,{{.*}} target = "sm_90a"
func.func @hd64_params(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>, %slopes: tensor<?xf32>) -> tensor<?x?x?x64xf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    %slope = "attn.param"(%slopes, %h) : (tensor<?xf32>, i32) -> f32
    %d = arith.subi %j, %i : i32
    %df = arith.sitofp %d : i32 to f32
    %bias = arith.mulf %slope, %df : f32
    %score = arith.addf %s, %bias : f32
    gpu.yield %score : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %true = arith.constant true
    gpu.yield %true : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "hd64_params", dtype = "f16", head_dim_qk = 64 : i64, head_dim_v = 64 : i64,
      scale = 0.125 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 64],
      k_shape = ["B", "H", "N", 64], v_shape = ["B", "H", "N", 64], params = ["slopes"],
      param_shapes = [["H"]], param_dtypes = ["f32"], outputs = ["o"], gqa = false,
      has_score_mod = true, has_mask_mod = false, has_sink = false}
      : (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) -> tensor<?x?x?x64xf16> loc("tile.attn":60:1)
  return %o : tensor<?x?x?x64xf16>
}

// Head dim 64 with a hook reading a param at an index that depends on j (a bias table):
// 64-key blocks on sm_80, where the loads in the score tile spill 128 keys; sm_90a's is
// that of a score_mod of i and j (64x128).
// SM80-LABEL: func.func @hd64_param_ij
// SM80: }) {block_m = 128 : i64, block_n = 64 : i64,{{.*}} num_warps = 4 : i64,{{.*}} q_tiles = 1 : i64,{{.*}} stages = 2 : i64, target = "sm_80"
// SM90-LABEL: func.func @hd64_param_ij
// SM90: }) {block_m = 64 : i64, block_n = 128 : i64,{{.*}} target = "sm_90a"
func.func @hd64_param_ij(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>, %slopes: tensor<?xf32>) -> tensor<?x?x?x64xf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    %slope = "attn.param"(%slopes, %j) : (tensor<?xf32>, i32) -> f32
    %d = arith.subi %j, %i : i32
    %df = arith.sitofp %d : i32 to f32
    %bias = arith.mulf %slope, %df : f32
    %score = arith.addf %s, %bias : f32
    gpu.yield %score : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %true = arith.constant true
    gpu.yield %true : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "hd64_param_ij", dtype = "f16", head_dim_qk = 64 : i64, head_dim_v = 64 : i64,
      scale = 0.125 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 64],
      k_shape = ["B", "H", "N", 64], v_shape = ["B", "H", "N", 64], params = ["slopes"],
      param_shapes = [["N"]], param_dtypes = ["f32"], outputs = ["o"], gqa = false,
      has_score_mod = true, has_mask_mod = false, has_sink = false}
      : (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) -> tensor<?x?x?x64xf16> loc("tile.attn":80:1)
  return %o : tensor<?x?x?x64xf16>
}
