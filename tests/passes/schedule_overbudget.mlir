// Input of schedule_errors.mlir: the L3 IR attn-warp-specialize leaves for sm_90a at head dim
// 128, with the K/V channel edited by hand to 4 stages, past the shared-memory budget.

module {
  func.func @hd128_unmasked(%arg0: tensor<?x?x?x128xbf16> loc("-":164:27), %arg1: tensor<?x?x?x128xbf16> loc("-":164:55), %arg2: tensor<?x?x?x128xbf16> loc("-":164:83)) -> tensor<?x?x?x128xbf16> {
    %0 = "attn.kernel"(%arg0, %arg1, %arg2) ({
    ^bb0(%arg3: i32 loc("schedule.attn":2:1), %arg4: i32 loc("schedule.attn":2:1), %arg5: i32 loc("schedule.attn":2:1)):
      "attn.warp_specialize"() ({
        %1 = "attn.channel"() {consumer = "consumer0", name = "q", producer = "producer", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async.mbarrier", types = [!attn.tile<[128, 128], bf16, "smem">]} : () -> !attn.chan loc("attn-warp-specialize"("schedule.attn":2:1))
        %2 = "attn.channel"() {consumer = "consumer0", name = "kv", producer = "producer", space = "smem", stages = 4 : i64, tile = ["k", "v"], transport = "cp.async.mbarrier", types = [!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">]} : () -> !attn.chan loc("attn-warp-specialize"("schedule.attn":2:1))
        "attn.role"() ({
          %3 = "attn.load"(%arg0, %arg3, %arg4, %arg5) {operand = "q"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("schedule.attn":2:1)
          "attn.put"(%1, %3) {tile = "q"} : (!attn.chan, !attn.tile<[128, 128], bf16, "smem">) -> () loc("attn-warp-specialize"("schedule.attn":2:1))
          %4 = "attn.dim"() {name = "N"} : () -> i32 loc("schedule.attn":2:1)
          %c128_i32 = arith.constant 128 : i32 loc("schedule.attn":2:1)
          %c1_i32 = arith.constant 1 : i32 loc("schedule.attn":2:1)
          %5 = arith.subi %c128_i32, %c1_i32 : i32 loc("schedule.attn":2:1)
          %6 = arith.addi %4, %5 : i32 loc("schedule.attn":2:1)
          %7 = arith.divsi %6, %c128_i32 : i32 loc("schedule.attn":2:1)
          %c0_i32 = arith.constant 0 : i32 loc("schedule.attn":2:1)
          %c1_i32_0 = arith.constant 1 : i32 loc("schedule.attn":2:1)
          %kv_top = arith.subi %7, %c1_i32_0 : i32
          scf.for %arg6 = %c0_i32 to %7 step %c1_i32_0  : i32 {
            %kv_block = arith.subi %kv_top, %arg6 : i32
            %8 = "attn.load"(%arg1, %arg3, %arg4, %kv_block) {operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("schedule.attn":2:1)
            "attn.put"(%2, %8) {tile = "k"} : (!attn.chan, !attn.tile<[128, 128], bf16, "smem">) -> () loc("attn-warp-specialize"("schedule.attn":2:1))
            %9 = "attn.load"(%arg2, %arg3, %arg4, %kv_block) {operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("schedule.attn":2:1)
            "attn.put"(%2, %9) {tile = "v"} : (!attn.chan, !attn.tile<[128, 128], bf16, "smem">) -> () loc("attn-warp-specialize"("schedule.attn":2:1))
          } {kv_blocks = "all"} loc("schedule.attn":2:1)
          gpu.yield loc("attn-warp-specialize"("schedule.attn":2:1))
        }) {name = "producer", regs = 24 : i64, warps = [0, 1, 2, 3]} : () -> () loc("attn-warp-specialize"("schedule.attn":2:1))
        "attn.role"() ({
          %3 = "attn.get"(%1) {tile = "q"} : (!attn.chan) -> !attn.tile<[128, 128], bf16, "smem"> loc("attn-warp-specialize"("schedule.attn":2:1))
          %4 = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[128], f32, "reg"> loc("schedule.attn":2:1)
          %5 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128], f32, "reg"> loc("schedule.attn":2:1)
          %6 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128, 128], f32, "reg"> loc("schedule.attn":2:1)
          %7 = "attn.dim"() {name = "N"} : () -> i32 loc("schedule.attn":2:1)
          %c128_i32 = arith.constant 128 : i32 loc("schedule.attn":2:1)
          %c1_i32 = arith.constant 1 : i32 loc("schedule.attn":2:1)
          %8 = arith.subi %c128_i32, %c1_i32 : i32 loc("schedule.attn":2:1)
          %9 = arith.addi %7, %8 : i32 loc("schedule.attn":2:1)
          %10 = arith.divsi %9, %c128_i32 : i32 loc("schedule.attn":2:1)
          %c0_i32 = arith.constant 0 : i32 loc("schedule.attn":2:1)
          %c1_i32_0 = arith.constant 1 : i32 loc("schedule.attn":2:1)
          %kv_top2 = arith.subi %10, %c1_i32_0 : i32
          %11:3 = scf.for %arg6 = %c0_i32 to %10 step %c1_i32_0 iter_args(%arg7 = %4, %arg8 = %5, %arg9 = %6) -> (!attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">)  : i32 {
            %kv_block2 = arith.subi %kv_top2, %arg6 : i32
            %13 = "attn.get"(%2) {tile = "k"} : (!attn.chan) -> !attn.tile<[128, 128], bf16, "smem"> loc("attn-warp-specialize"("schedule.attn":2:1))
            %14 = "attn.mma"(%3, %13) {kind = "qk"} : (!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">) -> !attn.tile<[128, 128], f32, "reg"> loc("schedule.attn":2:1)
            %15:4 = "attn.softmax_step"(%14, %arg7, %arg8) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) loc("schedule.attn":2:1)
            %16 = "attn.rescale"(%arg9, %15#3) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg"> loc("schedule.attn":2:1)
            %17 = "attn.get"(%2) {tile = "v"} : (!attn.chan) -> !attn.tile<[128, 128], bf16, "smem"> loc("attn-warp-specialize"("schedule.attn":2:1))
            %18 = "attn.mma"(%15#0, %17, %16) {kind = "pv"} : (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg"> loc("schedule.attn":2:1)
            scf.yield %15#1, %15#2, %18 : !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg"> loc("schedule.attn":2:1)
          } {kv_blocks = "all"} loc("schedule.attn":2:1)
          %12:2 = "attn.finalize"(%11#2, %11#0, %11#1, %arg4) ({
          ^bb0(%arg6: i32 loc("-":173:8)):
            %cst = arith.constant 0xFF800000 : f32 loc("-":174:13)
            gpu.yield %cst : f32 loc("-":175:5)
          }) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, i32) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">) loc("schedule.attn":2:1)
          "attn.store"(%12#0, %arg3, %arg4, %arg5) {operand = "o"} : (!attn.tile<[128, 128], bf16, "reg">, i32, i32, i32) -> () loc("schedule.attn":2:1)
          gpu.yield loc("attn-warp-specialize"("schedule.attn":2:1))
        }) {name = "consumer0", regs = 240 : i64, warps = [4, 5, 6, 7]} : () -> () loc("attn-warp-specialize"("schedule.attn":2:1))
        "attn.role"() ({
          %3 = "attn.get"(%1) {tile = "q"} : (!attn.chan) -> !attn.tile<[128, 128], bf16, "smem"> loc("attn-warp-specialize"("schedule.attn":2:1))
          %4 = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[128], f32, "reg"> loc("schedule.attn":2:1)
          %5 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128], f32, "reg"> loc("schedule.attn":2:1)
          %6 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128, 128], f32, "reg"> loc("schedule.attn":2:1)
          %7 = "attn.dim"() {name = "N"} : () -> i32 loc("schedule.attn":2:1)
          %c128_i32 = arith.constant 128 : i32 loc("schedule.attn":2:1)
          %c1_i32 = arith.constant 1 : i32 loc("schedule.attn":2:1)
          %8 = arith.subi %c128_i32, %c1_i32 : i32 loc("schedule.attn":2:1)
          %9 = arith.addi %7, %8 : i32 loc("schedule.attn":2:1)
          %10 = arith.divsi %9, %c128_i32 : i32 loc("schedule.attn":2:1)
          %c0_i32 = arith.constant 0 : i32 loc("schedule.attn":2:1)
          %c1_i32_0 = arith.constant 1 : i32 loc("schedule.attn":2:1)
          %kv_top3 = arith.subi %10, %c1_i32_0 : i32
          %11:3 = scf.for %arg6 = %c0_i32 to %10 step %c1_i32_0 iter_args(%arg7 = %4, %arg8 = %5, %arg9 = %6) -> (!attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">)  : i32 {
            %kv_block3 = arith.subi %kv_top3, %arg6 : i32
            %13 = "attn.get"(%2) {tile = "k"} : (!attn.chan) -> !attn.tile<[128, 128], bf16, "smem"> loc("attn-warp-specialize"("schedule.attn":2:1))
            %14 = "attn.mma"(%3, %13) {kind = "qk"} : (!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">) -> !attn.tile<[128, 128], f32, "reg"> loc("schedule.attn":2:1)
            %15:4 = "attn.softmax_step"(%14, %arg7, %arg8) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) loc("schedule.attn":2:1)
            %16 = "attn.rescale"(%arg9, %15#3) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg"> loc("schedule.attn":2:1)
            %17 = "attn.get"(%2) {tile = "v"} : (!attn.chan) -> !attn.tile<[128, 128], bf16, "smem"> loc("attn-warp-specialize"("schedule.attn":2:1))
            %18 = "attn.mma"(%15#0, %17, %16) {kind = "pv"} : (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg"> loc("schedule.attn":2:1)
            scf.yield %15#1, %15#2, %18 : !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg"> loc("schedule.attn":2:1)
          } {kv_blocks = "all"} loc("schedule.attn":2:1)
          %12:2 = "attn.finalize"(%11#2, %11#0, %11#1, %arg4) ({
          ^bb0(%arg6: i32 loc("-":173:8)):
            %cst = arith.constant 0xFF800000 : f32 loc("-":174:13)
            gpu.yield %cst : f32 loc("-":175:5)
          }) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, i32) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">) loc("schedule.attn":2:1)
          "attn.store"(%12#0, %arg3, %arg4, %arg5) {operand = "o"} : (!attn.tile<[128, 128], bf16, "reg">, i32, i32, i32) -> () loc("schedule.attn":2:1)
          gpu.yield loc("attn-warp-specialize"("schedule.attn":2:1))
        }) {name = "consumer1", regs = 240 : i64, warps = [8, 9, 10, 11]} : () -> () loc("attn-warp-specialize"("schedule.attn":2:1))
        gpu.yield loc("attn-warp-specialize"("schedule.attn":2:1))
      }) : () -> () loc("attn-warp-specialize"("schedule.attn":2:1))
      gpu.yield loc("schedule.attn":2:1)
    }) {block_m = 128 : i64, block_n = 128 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], num_warps = 12 : i64, outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], q_tiles = 1 : i64, scale = 0.0883883461 : f32, stages = 3 : i64, target = "sm_90a", v_shape = ["B", "H", "N", 128], variant = "hd128_unmasked"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("schedule.attn":2:1)
    return %0 : tensor<?x?x?x128xbf16> loc("-":182:3)
  } loc("-":164:1)
} loc("-":0:0)
