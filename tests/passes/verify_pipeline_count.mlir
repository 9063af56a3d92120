// A planted bug in hand-edited L5 IR (verify_pipeline.mlir, mha on sm_90a): mbar_kv_empty counting 5 arrivals where the consumer warpgroup makes 4.
// attn-verify-pipeline refuses it at the op where the protocol breaks, at its line here.
//
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline attn-verify-pipeline 2>&1 | filecheck %s

// CHECK: tests/passes/verify_pipeline_count.mlir:71:13: error: attn-verify-pipeline: channel 'kv' deadlocks: consumer0 waits at attn.mbarrier_wait on mbar_kv_full[0] for parity 1 (its phase 1, 0 of 1 arrivals); producer waits at attn.mbarrier_wait on mbar_kv_empty[0] for parity 0 (its phase 0, 4 of 5 arrivals)

module {
  func.func @mha(%arg0: tensor<?x?x?x128xbf16> loc("examples/mha.attn":3:3), %arg1: tensor<?x?x?x128xbf16> loc("examples/mha.attn":4:3), %arg2: tensor<?x?x?x128xbf16> loc("examples/mha.attn":5:3)) -> tensor<?x?x?x128xbf16> {
    %0 = "attn.kernel"(%arg0, %arg1, %arg2) ({
    ^bb0(%arg3: i32 loc("examples/mha.attn":2:1), %arg4: i32 loc("examples/mha.attn":2:1), %arg5: i32 loc("examples/mha.attn":2:1)):
      "attn.warp_specialize"() ({
        %1 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sQ", offset = 0 : i64, size = 32768 : i64, space = "smem", stages = 1 : i64, swizzle = "xor128B"}], consumer = "consumer0", name = "q", producer = "producer", space = "smem", stages = 1 : i64, tile = ["q"], transport = "tma", types = [!attn.tile<[128, 128], bf16, "smem">]} : () -> !attn.chan
        %2 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sK", offset = 32768 : i64, size = 98304 : i64, space = "smem", stages = 3 : i64, swizzle = "xor128B"}, {align = 128 : i64, name = "sV", offset = 131072 : i64, size = 98304 : i64, space = "smem", stages = 3 : i64, swizzle = "xor128B"}], consumer = "consumer0", name = "kv", producer = "producer", space = "smem", stages = 3 : i64, tile = ["k", "v"], transport = "tma", types = [!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">]} : () -> !attn.chan
        %3 = "attn.channel"() {buffers = [{alias_of = "sQ", align = 128 : i64, name = "sO", offset = 0 : i64, size = 32768 : i64, space = "smem", stages = 1 : i64, swizzle = "xor128B"}], consumer = "producer", name = "o", producer = "consumer0", space = "smem", stages = 1 : i64, tile = ["o"], transport = "regs", types = [!attn.tile<[128, 128], bf16, "reg">]} : () -> !attn.chan
        %4 = "attn.mbarrier_init"() {channel = "q", count = 1 : i64, name = "mbar_q_full", side = "full", stages = 1 : i64} : () -> !attn.mbar
        %5 = "attn.mbarrier_init"() {channel = "q", count = 4 : i64, name = "mbar_q_empty", side = "empty", stages = 1 : i64} : () -> !attn.mbar
        %6 = "attn.mbarrier_init"() {channel = "kv", count = 1 : i64, name = "mbar_kv_full", side = "full", stages = 3 : i64} : () -> !attn.mbar
        %7 = "attn.mbarrier_init"() {channel = "kv", count = 5 : i64, name = "mbar_kv_empty", side = "empty", stages = 3 : i64} : () -> !attn.mbar
        "attn.role"() ({
          %c0_i32 = arith.constant 0 : i32
          %c1_i32 = arith.constant 1 : i32
          %8 = "attn.load"(%arg0, %arg3, %arg4, %arg5) {operand = "q"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
          %9 = arith.xori %c0_i32, %c1_i32 : i32
          "attn.mbarrier_wait"(%5, %c0_i32, %9) : (!attn.mbar, i32, i32) -> ()
          "attn.mbarrier_expect_tx"(%4, %c0_i32) {bytes = 32768 : i64} : (!attn.mbar, i32) -> ()
          "attn.slot_write"(%1, %c0_i32, %8, %4) {completes = "mbarrier", tile = "q"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">, !attn.mbar) -> ()
          %10:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 1 : i64} : (i32, i32) -> (i32, i32)
          %11 = "attn.dim"() {name = "N"} : () -> i32
          %c128_i32 = arith.constant 128 : i32
          %c1_i32_0 = arith.constant 1 : i32
          %12 = arith.subi %c128_i32, %c1_i32_0 : i32
          %13 = arith.addi %11, %12 : i32
          %14 = arith.divsi %13, %c128_i32 : i32
          %c0_i32_1 = arith.constant 0 : i32
          %c1_i32_2 = arith.constant 1 : i32
          %15:2 = scf.for %arg6 = %c0_i32_1 to %14 step %c1_i32_2 iter_args(%arg7 = %c0_i32, %arg8 = %c0_i32) -> (i32, i32)  : i32 {
            %18 = "attn.load"(%arg1, %arg3, %arg4, %arg6) {operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
            %19 = arith.xori %arg8, %c1_i32 : i32
            "attn.mbarrier_wait"(%7, %arg7, %19) : (!attn.mbar, i32, i32) -> ()
            "attn.mbarrier_expect_tx"(%6, %arg7) {bytes = 65536 : i64} : (!attn.mbar, i32) -> ()
            "attn.slot_write"(%2, %arg7, %18, %6) {completes = "mbarrier", tile = "k"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">, !attn.mbar) -> ()
            %20 = "attn.load"(%arg2, %arg3, %arg4, %arg6) {operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
            "attn.slot_write"(%2, %arg7, %20, %6) {completes = "mbarrier", tile = "v"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">, !attn.mbar) -> ()
            %21:2 = "attn.ring_advance"(%arg7, %arg8) {stages = 3 : i64} : (i32, i32) -> (i32, i32)
            scf.yield %21#0, %21#1 : i32, i32
          } {kv_blocks = "all"}
          "attn.named_barrier_sync"() {channel = "o", id = 1 : i64, threads = 256 : i64} : () -> ()
          %16 = "attn.slot_read"(%3, %c0_i32) {tile = "o"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "reg">
          %17:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 1 : i64} : (i32, i32) -> (i32, i32)
          "attn.store"(%16, %arg3, %arg4, %arg5) {operand = "o"} : (!attn.tile<[128, 128], bf16, "reg">, i32, i32, i32) -> ()
          gpu.yield
        }) {name = "producer", regs = 24 : i64, warps = [0, 1, 2, 3]} : () -> ()
        "attn.role"() ({
          %c0_i32 = arith.constant 0 : i32
          "attn.mbarrier_wait"(%4, %c0_i32, %c0_i32) : (!attn.mbar, i32, i32) -> ()
          %8 = "attn.slot_read"(%1, %c0_i32) {tile = "q"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "smem">
          %9:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 1 : i64} : (i32, i32) -> (i32, i32)
          %10 = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[128], f32, "reg">
          %11 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128], f32, "reg">
          %12 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128, 128], f32, "reg">
          %13 = "attn.dim"() {name = "N"} : () -> i32
          %c128_i32 = arith.constant 128 : i32
          %c1_i32 = arith.constant 1 : i32
          %14 = arith.subi %c128_i32, %c1_i32 : i32
          %15 = arith.addi %13, %14 : i32
          %16 = arith.divsi %15, %c128_i32 : i32
          %c0_i32_0 = arith.constant 0 : i32
          %c1_i32_1 = arith.constant 1 : i32
          %17:5 = scf.for %arg6 = %c0_i32_0 to %16 step %c1_i32_1 iter_args(%arg7 = %10, %arg8 = %11, %arg9 = %12, %arg10 = %c0_i32, %arg11 = %c0_i32) -> (!attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">, i32, i32)  : i32 {
            "attn.mbarrier_wait"(%6, %arg10, %arg11) : (!attn.mbar, i32, i32) -> ()
            %20 = "attn.slot_read"(%2, %arg10) {tile = "k"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "smem">
            %21 = "attn.mma"(%8, %20) {kind = "qk"} : (!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">) -> !attn.tile<[128, 128], f32, "reg">
            %22:4 = "attn.softmax_step"(%21, %arg7, %arg8) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">)
            %23 = "attn.rescale"(%arg9, %22#3) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
            %24 = "attn.slot_read"(%2, %arg10) {tile = "v"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "smem">
            %25:2 = "attn.ring_advance"(%arg10, %arg11) {stages = 3 : i64} : (i32, i32) -> (i32, i32)
            %26 = "attn.mma"(%22#0, %24, %23) {kind = "pv"} : (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
            "attn.mbarrier_arrive"(%7, %arg10) {per = "warp"} : (!attn.mbar, i32) -> ()
            scf.yield %22#1, %22#2, %26, %25#0, %25#1 : !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">, i32, i32
          } {kv_blocks = "all"}
          "attn.mbarrier_arrive"(%5, %c0_i32) {per = "warp"} : (!attn.mbar, i32) -> ()
          %18:2 = "attn.finalize"(%17#2, %17#0, %17#1, %arg4) ({
          ^bb0(%arg6: i32 loc("examples/mha.attn":2:1)):
            %cst = arith.constant 0xFF800000 : f32
            gpu.yield %cst : f32
          }) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, i32) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">)
          "attn.slot_write"(%3, %c0_i32, %18#0) {completes = "store", tile = "o"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "reg">) -> ()
          "attn.named_barrier_arrive"() {channel = "o", id = 1 : i64, threads = 256 : i64} : () -> ()
          %19:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 1 : i64} : (i32, i32) -> (i32, i32)
          gpu.yield
        }) {name = "consumer0", regs = 240 : i64, warps = [4, 5, 6, 7]} : () -> ()
        gpu.yield
      }) : () -> ()
      gpu.yield
    }) {block_m = 128 : i64, block_n = 128 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], mask_block_m = 128 : i64, mask_block_n = 128 : i64, mask_digest = "none", mask_kind = "none", num_warps = 12 : i64, outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], q_tiles = 1 : i64, scale = 0.0883883461 : f32, stages = 3 : i64, target = "sm_90a", v_shape = ["B", "H", "N", 128], variant = "mha"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16>
    return %0 : tensor<?x?x?x128xbf16>
  }
}
