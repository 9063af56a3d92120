// attn-verify-pipeline on L5 IR as attn-insert-pipelines leaves it (mha, sm_90a, one consumer
// warpgroup fed by the producer's cp.async, locations dropped so that each op is at its line here):
// sound, left unchanged.
//
// RUN: attnc opt %s -arch sm_90a --pass-pipeline attn-verify-pipeline | filecheck %s

// CHECK: "attn.mbarrier_init"() {channel = "kv", count = 128 : i64, name = "mbar_k_full", side = "full", stages = 3 : i64, tile = "k"}
// CHECK: "attn.mbarrier_init"() {channel = "kv", count = 4 : i64, name = "mbar_k_empty", side = "empty", stages = 3 : i64, tile = "k"}
// CHECK: "attn.slot_write"(%{{[0-9]+}}, %arg7, %{{[0-9]+}}) {completes = "arrive", tile = "k"}
// CHECK-NEXT: "attn.cp_async_mbarrier_arrive"(%{{[0-9]+}}, %arg7)
// CHECK: "attn.mma"
// CHECK-NEXT: "attn.mbarrier_arrive"(%{{[0-9]+}}, %arg10) {per = "warp"}

module {
  func.func @mha(%arg0: tensor<?x?x?x128xbf16> loc("examples/mha.attn":3:3), %arg1: tensor<?x?x?x128xbf16> loc("examples/mha.attn":4:3), %arg2: tensor<?x?x?x128xbf16> loc("examples/mha.attn":5:3)) -> tensor<?x?x?x128xbf16> {
    %0 = "attn.kernel"(%arg0, %arg1, %arg2) ({
    ^bb0(%arg3: i32 loc("examples/mha.attn":2:1), %arg4: i32 loc("examples/mha.attn":2:1), %arg5: i32 loc("examples/mha.attn":2:1)):
      "attn.warp_specialize"() ({
        %1 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sQ", offset = 0 : i64, size = 16384 : i64, space = "smem", stages = 1 : i64, swizzle = "xor128B"}], consumer = "consumer0", name = "q", producer = "producer", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async.mbarrier", types = [!attn.tile<[64, 128], bf16, "smem">]} : () -> !attn.chan
        %2 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sK", offset = 16384 : i64, size = 98304 : i64, space = "smem", stages = 3 : i64, swizzle = "xor128B"}, {align = 128 : i64, name = "sV", offset = 114688 : i64, size = 98304 : i64, space = "smem", stages = 3 : i64, swizzle = "xor128B"}], consumer = "consumer0", name = "kv", producer = "producer", space = "smem", stages = 3 : i64, tile = ["k", "v"], transport = "cp.async.mbarrier", types = [!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">]} : () -> !attn.chan
        %3 = "attn.mbarrier_init"() {channel = "q", count = 128 : i64, name = "mbar_q_full", side = "full", stages = 1 : i64, tile = "q"} : () -> !attn.mbar
        %4 = "attn.mbarrier_init"() {channel = "kv", count = 128 : i64, name = "mbar_k_full", side = "full", stages = 3 : i64, tile = "k"} : () -> !attn.mbar
        %5 = "attn.mbarrier_init"() {channel = "kv", count = 128 : i64, name = "mbar_v_full", side = "full", stages = 3 : i64, tile = "v"} : () -> !attn.mbar
        %6 = "attn.mbarrier_init"() {channel = "kv", count = 4 : i64, name = "mbar_k_empty", side = "empty", stages = 3 : i64, tile = "k"} : () -> !attn.mbar
        %7 = "attn.mbarrier_init"() {channel = "kv", count = 4 : i64, name = "mbar_v_empty", side = "empty", stages = 3 : i64, tile = "v"} : () -> !attn.mbar
        "attn.role"() ({
          %c0_i32 = arith.constant 0 : i32
          %c1_i32 = arith.constant 1 : i32
          %8 = "attn.load"(%arg0, %arg3, %arg4, %arg5) {operand = "q"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem">
          "attn.slot_write"(%1, %c0_i32, %8) {completes = "arrive", tile = "q"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> ()
          "attn.cp_async_mbarrier_arrive"(%3, %c0_i32) : (!attn.mbar, i32) -> ()
          %9:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 1 : i64} : (i32, i32) -> (i32, i32)
          %10 = "attn.dim"() {name = "N"} : () -> i32
          %c128_i32 = arith.constant 128 : i32
          %c1_i32_0 = arith.constant 1 : i32
          %11 = arith.subi %c128_i32, %c1_i32_0 : i32
          %12 = arith.addi %10, %11 : i32
          %13 = arith.divsi %12, %c128_i32 : i32
          %c0_i32_1 = arith.constant 0 : i32
          %c1_i32_2 = arith.constant 1 : i32
          %kv_top = arith.subi %13, %c1_i32_2 : i32
          %14:2 = scf.for %arg6 = %c0_i32_1 to %13 step %c1_i32_2 iter_args(%arg7 = %c0_i32, %arg8 = %c0_i32) -> (i32, i32)  : i32 {
            %kv_block = arith.subi %kv_top, %arg6 : i32
            %15 = "attn.load"(%arg1, %arg3, %arg4, %kv_block) {operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
            %16 = arith.xori %arg8, %c1_i32 : i32
            "attn.mbarrier_wait"(%6, %arg7, %16) : (!attn.mbar, i32, i32) -> ()
            "attn.slot_write"(%2, %arg7, %15) {completes = "arrive", tile = "k"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">) -> ()
            "attn.cp_async_mbarrier_arrive"(%4, %arg7) : (!attn.mbar, i32) -> ()
            %17 = "attn.load"(%arg2, %arg3, %arg4, %kv_block) {operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
            %18 = arith.xori %arg8, %c1_i32 : i32
            "attn.mbarrier_wait"(%7, %arg7, %18) : (!attn.mbar, i32, i32) -> ()
            "attn.slot_write"(%2, %arg7, %17) {completes = "arrive", tile = "v"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">) -> ()
            "attn.cp_async_mbarrier_arrive"(%5, %arg7) : (!attn.mbar, i32) -> ()
            %19:2 = "attn.ring_advance"(%arg7, %arg8) {stages = 3 : i64} : (i32, i32) -> (i32, i32)
            scf.yield %19#0, %19#1 : i32, i32
          } {kv_blocks = "all"}
          gpu.yield
        }) {name = "producer", regs = 0 : i64, warps = [0, 1, 2, 3]} : () -> ()
        "attn.role"() ({
          %c0_i32 = arith.constant 0 : i32
          "attn.mbarrier_wait"(%3, %c0_i32, %c0_i32) : (!attn.mbar, i32, i32) -> ()
          %8 = "attn.slot_read"(%1, %c0_i32) {tile = "q"} : (!attn.chan, i32) -> !attn.tile<[64, 128], bf16, "smem">
          %9:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 1 : i64} : (i32, i32) -> (i32, i32)
          %10 = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[64], f32, "reg">
          %11 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[64], f32, "reg">
          %12 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[64, 128], f32, "reg">
          %13 = "attn.dim"() {name = "N"} : () -> i32
          %c128_i32 = arith.constant 128 : i32
          %c1_i32 = arith.constant 1 : i32
          %14 = arith.subi %c128_i32, %c1_i32 : i32
          %15 = arith.addi %13, %14 : i32
          %16 = arith.divsi %15, %c128_i32 : i32
          %c0_i32_0 = arith.constant 0 : i32
          %c1_i32_1 = arith.constant 1 : i32
          %kv_top2 = arith.subi %16, %c1_i32_1 : i32
          %17:5 = scf.for %arg6 = %c0_i32_0 to %16 step %c1_i32_1 iter_args(%arg7 = %10, %arg8 = %11, %arg9 = %12, %arg10 = %c0_i32, %arg11 = %c0_i32) -> (!attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64, 128], f32, "reg">, i32, i32)  : i32 {
            %kv_block2 = arith.subi %kv_top2, %arg6 : i32
            "attn.mbarrier_wait"(%4, %arg10, %arg11) : (!attn.mbar, i32, i32) -> ()
            %19 = "attn.slot_read"(%2, %arg10) {tile = "k"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "smem">
            %20 = "attn.mma"(%8, %19) {kind = "qk"} : (!attn.tile<[64, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">) -> !attn.tile<[64, 128], f32, "reg">
            "attn.mbarrier_arrive"(%6, %arg10) {per = "warp"} : (!attn.mbar, i32) -> ()
            %21:4 = "attn.softmax_step"(%20, %arg7, %arg8) : (!attn.tile<[64, 128], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">) -> (!attn.tile<[64, 128], bf16, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">)
            %22 = "attn.rescale"(%arg9, %21#3) : (!attn.tile<[64, 128], f32, "reg">, !attn.tile<[64], f32, "reg">) -> !attn.tile<[64, 128], f32, "reg">
            "attn.mbarrier_wait"(%5, %arg10, %arg11) : (!attn.mbar, i32, i32) -> ()
            %23 = "attn.slot_read"(%2, %arg10) {tile = "v"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "smem">
            %24:2 = "attn.ring_advance"(%arg10, %arg11) {stages = 3 : i64} : (i32, i32) -> (i32, i32)
            %25 = "attn.mma"(%21#0, %23, %22) {kind = "pv"} : (!attn.tile<[64, 128], bf16, "reg">, !attn.tile<[128, 128], bf16, "smem">, !attn.tile<[64, 128], f32, "reg">) -> !attn.tile<[64, 128], f32, "reg">
            "attn.mbarrier_arrive"(%7, %arg10) {per = "warp"} : (!attn.mbar, i32) -> ()
            scf.yield %21#1, %21#2, %25, %24#0, %24#1 : !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64, 128], f32, "reg">, i32, i32
          } {kv_blocks = "all"}
          %18:2 = "attn.finalize"(%17#2, %17#0, %17#1, %arg4) ({
          ^bb0(%arg6: i32 loc("examples/mha.attn":2:1)):
            %cst = arith.constant 0xFF800000 : f32
            gpu.yield %cst : f32
          }) : (!attn.tile<[64, 128], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, i32) -> (!attn.tile<[64, 128], bf16, "reg">, !attn.tile<[64], f32, "reg">)
          "attn.store"(%18#0, %arg3, %arg4, %arg5) {operand = "o"} : (!attn.tile<[64, 128], bf16, "reg">, i32, i32, i32) -> ()
          gpu.yield
        }) {name = "consumer0", regs = 0 : i64, warps = [4, 5, 6, 7]} : () -> ()
        gpu.yield
      }) : () -> ()
      gpu.yield
    }) {block_m = 64 : i64, block_n = 128 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], mask_block_m = 64 : i64, mask_block_n = 128 : i64, mask_digest = "none", mask_kind = "none", num_warps = 8 : i64, outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], q_tiles = 1 : i64, scale = 0.0883883461 : f32, stages = 3 : i64, target = "sm_90a", v_shape = ["B", "H", "N", 128], variant = "mha"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16>
    return %0 : tensor<?x?x?x128xbf16>
  }
}
