// A planted bug in hand-edited L5 IR (mha on sm_80, two K/V stages, as attn-insert-pipelines
// leaves it, locations dropped): V prefetched one step too far for the two-slot ring -- the
// prologue copies V of steps 0 and 1, each step V of the step two ahead (Note [cp.async
// prefetch] in attnc/schedule/prefetch.py: one ahead). Step 0's copy of V(2) goes into slot 0
// while V(0) there is still to be read; attn-verify-pipeline refuses it at that copy, at its
// line here.
//
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline attn-verify-pipeline 2>&1 | filecheck %s

// CHECK: tests/passes/verify_pipeline_prefetch.mlir:59:13: error: attn-verify-pipeline: compute overwrites slot 0 of 'kv' (v) with fill 2 before compute released fill 0
module {
  func.func @mha(%arg0: tensor<?x?x?x128xbf16> loc("examples/mha.attn":3:3), %arg1: tensor<?x?x?x128xbf16> loc("examples/mha.attn":4:3), %arg2: tensor<?x?x?x128xbf16> loc("examples/mha.attn":5:3)) -> tensor<?x?x?x128xbf16> {
    %0 = "attn.kernel"(%arg0, %arg1, %arg2) ({
    ^bb0(%arg3: i32 loc("examples/mha.attn":2:1), %arg4: i32 loc("examples/mha.attn":2:1), %arg5: i32 loc("examples/mha.attn":2:1)):
      "attn.warp_specialize"() ({
        %1 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sQ", offset = 0 : i64, size = 32768 : i64, space = "smem", stages = 1 : i64, swizzle = "xor128B"}], consumer = "compute", name = "q", producer = "compute", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async", types = [!attn.tile<[128, 128], bf16, "smem">]} : () -> !attn.chan
        %2 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sK", offset = 32768 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, swizzle = "xor128B"}, {align = 128 : i64, name = "sV", offset = 65536 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, swizzle = "xor128B"}], consumer = "compute", name = "kv", producer = "compute", space = "smem", stages = 2 : i64, tile = ["k", "v"], transport = "cp.async", types = [!attn.tile<[64, 128], bf16, "smem">, !attn.tile<[64, 128], bf16, "smem">]} : () -> !attn.chan
        "attn.role"() ({
          %c0_i32 = arith.constant 0 : i32
          %3 = "attn.load"(%arg0, %arg3, %arg4, %arg5) {operand = "q"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
          "attn.slot_write"(%1, %c0_i32, %3) {completes = "group", tile = "q"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">) -> ()
          "attn.cp_async_commit"() {channel = "q"} : () -> ()
          %4:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 1 : i64} : (i32, i32) -> (i32, i32)
          %5 = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[128], f32, "reg">
          %6 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128], f32, "reg">
          %7 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128, 128], f32, "reg">
          %8 = "attn.dim"() {name = "N"} : () -> i32
          %c64_i32 = arith.constant 64 : i32
          %c1_i32 = arith.constant 1 : i32
          %9 = arith.subi %c64_i32, %c1_i32 : i32
          %10 = arith.addi %8, %9 : i32
          %11 = arith.divsi %10, %c64_i32 : i32
          %c0_i32_0 = arith.constant 0 : i32
          %c1_i32_1 = arith.constant 1 : i32
          %kv_top = arith.subi %11, %c1_i32_1 : i32
          %12 = "attn.load"(%arg1, %arg3, %arg4, %kv_top) {ahead = 0 : i64, operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem">
          "attn.slot_write"(%2, %c0_i32, %12) {completes = "group", tile = "k"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> ()
          "attn.cp_async_commit"() {channel = "kv"} : () -> ()
          %13:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 2 : i64} : (i32, i32) -> (i32, i32)
          %14 = "attn.load"(%arg2, %arg3, %arg4, %kv_top) {ahead = 0 : i64, operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem">
          "attn.slot_write"(%2, %c0_i32, %14) {completes = "group", tile = "v"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> ()
          "attn.cp_async_commit"() {channel = "kv"} : () -> ()
          %15:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 2 : i64} : (i32, i32) -> (i32, i32)
          %v1 = "attn.load"(%arg2, %arg3, %arg4, %kv_top) {ahead = 1 : i64, operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem">
          "attn.slot_write"(%2, %15#0, %v1) {completes = "group", tile = "v"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> ()
          "attn.cp_async_commit"() {channel = "kv"} : () -> ()
          %v2:2 = "attn.ring_advance"(%15#0, %15#1) {stages = 2 : i64} : (i32, i32) -> (i32, i32)
          %16 = "attn.load"(%arg1, %arg3, %arg4, %kv_top) {ahead = 1 : i64, operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem">
          "attn.slot_write"(%2, %13#0, %16) {completes = "group", tile = "k"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> ()
          "attn.cp_async_commit"() {channel = "kv"} : () -> ()
          %17:2 = "attn.ring_advance"(%13#0, %13#1) {stages = 2 : i64} : (i32, i32) -> (i32, i32)
          %18:11 = scf.for %arg6 = %c0_i32_0 to %11 step %c1_i32_1 iter_args(%arg7 = %5, %arg8 = %6, %arg9 = %7, %arg10 = %c0_i32, %arg11 = %c0_i32, %arg12 = %17#0, %arg13 = %17#1, %arg14 = %v2#0, %arg15 = %v2#1, %arg16 = %c0_i32, %arg17 = %c0_i32) -> (!attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">, i32, i32, i32, i32, i32, i32, i32, i32)  : i32 {
            %kv_block = arith.subi %kv_top, %arg6 : i32
            "attn.cp_async_wait"() {pending = 2 : i64} : () -> ()
            "attn.cta_barrier"() : () -> ()
            %20 = "attn.slot_read"(%2, %arg10) {tile = "k"} : (!attn.chan, i32) -> !attn.tile<[64, 128], bf16, "smem">
            %21 = "attn.slot_read"(%1, %arg16) {tile = "q"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "smem">
            %22 = "attn.load"(%arg2, %arg3, %arg4, %kv_block) {ahead = 2 : i64, operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem">
            "attn.slot_write"(%2, %arg14, %22) {completes = "group", tile = "v"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> ()
            "attn.cp_async_commit"() {channel = "kv"} : () -> ()
            %23:2 = "attn.ring_advance"(%arg14, %arg15) {stages = 2 : i64} : (i32, i32) -> (i32, i32)
            %24 = "attn.mma"(%21, %20) {kind = "qk"} : (!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[64, 128], bf16, "smem">) -> !attn.tile<[128, 64], f32, "reg">
            %25:4 = "attn.softmax_step"(%24, %arg7, %arg8) : (!attn.tile<[128, 64], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> (!attn.tile<[128, 64], bf16, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">)
            "attn.cp_async_wait"() {pending = 2 : i64} : () -> ()
            "attn.cta_barrier"() : () -> ()
            %26 = "attn.slot_read"(%2, %arg10) {tile = "v"} : (!attn.chan, i32) -> !attn.tile<[64, 128], bf16, "smem">
            %27:2 = "attn.ring_advance"(%arg10, %arg11) {stages = 2 : i64} : (i32, i32) -> (i32, i32)
            %28 = "attn.load"(%arg1, %arg3, %arg4, %kv_block) {ahead = 2 : i64, operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem">
            "attn.slot_write"(%2, %arg12, %28) {completes = "group", tile = "k"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> ()
            "attn.cp_async_commit"() {channel = "kv"} : () -> ()
            %29:2 = "attn.ring_advance"(%arg12, %arg13) {stages = 2 : i64} : (i32, i32) -> (i32, i32)
            %30 = "attn.rescale"(%arg9, %25#3) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
            %31 = "attn.mma"(%25#0, %26, %30) {kind = "pv"} : (!attn.tile<[128, 64], bf16, "reg">, !attn.tile<[64, 128], bf16, "smem">, !attn.tile<[128, 128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
            scf.yield %25#1, %25#2, %31, %27#0, %27#1, %29#0, %29#1, %23#0, %23#1, %arg16, %arg17 : !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">, i32, i32, i32, i32, i32, i32, i32, i32
          } {kv_blocks = "all"}
          "attn.cp_async_wait"() {pending = 0 : i64} : () -> ()
          %19:2 = "attn.finalize"(%18#2, %18#0, %18#1, %arg4) ({
          ^bb0(%arg6: i32 loc("examples/mha.attn":2:1)):
            %cst = arith.constant 0xFF800000 : f32
            gpu.yield %cst : f32
          }) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, i32) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">)
          "attn.store"(%19#0, %arg3, %arg4, %arg5) {operand = "o"} : (!attn.tile<[128, 128], bf16, "reg">, i32, i32, i32) -> ()
          gpu.yield
        }) {name = "compute", regs = 0 : i64, warps = [0, 1, 2, 3]} : () -> ()
        gpu.yield
      }) : () -> ()
      gpu.yield
    }) {block_m = 128 : i64, block_n = 64 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], mask_block_m = 128 : i64, mask_block_n = 64 : i64, mask_digest = "none", mask_kind = "none", num_warps = 4 : i64, outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], q_tiles = 1 : i64, scale = 0.0883883461 : f32, stages = 2 : i64, target = "sm_80", v_shape = ["B", "H", "N", 128], variant = "mha"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16>
    return %0 : tensor<?x?x?x128xbf16>
  }
}
