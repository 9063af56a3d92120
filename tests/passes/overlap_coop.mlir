// attn-overlap-gemms on sm_90a's cooperative role (mha, no producer warpgroup, two K/V
// stages) as attn-insert-pipelines leaves it: the prologue of loads stays, and the KV loop
// becomes the overlapped steps of Note [Overlapped cooperative steps in the IR]
// (attnc/schedule/overlap_coop.py) -- the first step's QK^T before the loop after a wait
// for all but 2S - 2 groups, each trip landing the P.V of two steps back, waiting for all
// but 2S - 4 groups, loading V of block n + S - 2 and K of n + S - 1 into their rings,
// issuing QK^T(n) and P.V(n - 1) together and landing S with the P.V left in flight, the
// last P.V after the loop behind a wait for every group. attn-verify-pipeline finds it sound.
//
// RUN: attnc opt %s -arch sm_90a --pass-pipeline attn-overlap-gemms,attn-verify-pipeline | filecheck %s

// CHECK: "attn.load"({{.*}}) {ahead = 1 : i64, operand = "k"}
// CHECK: scf.if
// CHECK: %[[Q:c0_i32_[0-9]+]] = arith.constant 0 : i32
// CHECK-NEXT: "attn.cp_async_wait"() {pending = 2 : i64}
// CHECK-NEXT: "attn.cta_barrier"()
// CHECK-NEXT: %[[K0:[0-9]+]] = "attn.slot_read"(%{{[0-9]+}}, %c0_i32) {tile = "k"}
// CHECK-NEXT: %[[Q0:[0-9]+]] = "attn.slot_read"(%{{[0-9]+}}, %[[Q]]) {tile = "q"}
// CHECK-NEXT: %[[S0:[0-9]+]] = "attn.mma"(%[[Q0]], %[[K0]]) {async, kind = "qk"}
// CHECK-NEXT: %[[L0:[0-9]+]] = "attn.mma_wait"(%[[S0]]) {pending = 0 : i64}
// CHECK-NEXT: "attn.softmax_step"(%[[L0]],
// CHECK: scf.for %[[T:arg[0-9]+]] = {{.*}} iter_args(%[[M:arg[0-9]+]] = {{.*}}, %[[L:arg[0-9]+]] = {{.*}}, %[[OF:arg[0-9]+]] = {{.*}}, %[[P:arg[0-9]+]] = {{.*}}, %[[A:arg[0-9]+]] = {{.*}}, %[[RK:arg[0-9]+]] = {{.*}}, %{{arg[0-9]+}} = {{.*}}, %[[RV:arg[0-9]+]] = %c0_i32, %{{arg[0-9]+}} = %c0_i32, %[[WK:arg[0-9]+]] = {{.*}}, %{{arg[0-9]+}} = {{.*}}, %[[WV:arg[0-9]+]] = {{.*}}, %{{arg[0-9]+}} = {{.*}})
// CHECK-NEXT: %[[N:[0-9]+]] = arith.subi %{{[0-9]+}}, %[[T]]
// CHECK-NEXT: %[[O:[0-9]+]] = "attn.mma_wait"(%[[OF]]) {pending = 0 : i64}
// CHECK-NEXT: %[[OS:[0-9]+]] = "attn.rescale"(%[[O]], %[[A]])
// CHECK-NEXT: "attn.cp_async_wait"() {pending = 0 : i64}
// CHECK-NEXT: "attn.cta_barrier"()
// CHECK-NEXT: %[[V:[0-9]+]] = "attn.load"({{.*}}, %[[N]]) {ahead = 0 : i64, operand = "v"}
// CHECK-NEXT: "attn.slot_write"(%{{[0-9]+}}, %[[WV]], %[[V]]) {completes = "group", tile = "v"}
// CHECK-NEXT: "attn.cp_async_commit"()
// CHECK-NEXT: "attn.ring_advance"(%[[WV]],
// CHECK-NEXT: %[[K:[0-9]+]] = "attn.load"({{.*}}, %[[N]]) {ahead = 1 : i64, operand = "k"}
// CHECK-NEXT: "attn.slot_write"(%{{[0-9]+}}, %[[WK]], %[[K]]) {completes = "group", tile = "k"}
// CHECK-NEXT: "attn.cp_async_commit"()
// CHECK-NEXT: "attn.ring_advance"(%[[WK]],
// CHECK-NEXT: %[[KR:[0-9]+]] = "attn.slot_read"(%{{[0-9]+}}, %[[RK]]) {tile = "k"}
// CHECK-NEXT: %[[QR:[0-9]+]] = "attn.slot_read"(%{{[0-9]+}}, %[[Q]]) {tile = "q"}
// CHECK-NEXT: %[[VR:[0-9]+]] = "attn.slot_read"(%{{[0-9]+}}, %[[RV]]) {tile = "v"}
// CHECK-NEXT: %[[S:[0-9]+]] = "attn.mma"(%[[QR]], %[[KR]]) {async, kind = "qk"}
// CHECK-NEXT: "attn.mma"(%[[P]], %[[VR]], %[[OS]]) {async, kind = "pv"}
// CHECK-NEXT: %[[SL:[0-9]+]] = "attn.mma_wait"(%[[S]]) {pending = 1 : i64}
// CHECK-NEXT: "attn.softmax_step"(%[[SL]], %[[M]], %[[L]])
// CHECK-NEXT: "attn.ring_advance"(%[[RK]],
// CHECK-NEXT: "attn.ring_advance"(%[[RV]],
// CHECK: } {kv_blocks = "all"}
// CHECK-NEXT: "attn.mma_wait"({{.*}}) {pending = 0 : i64}
// CHECK-NEXT: "attn.rescale"
// CHECK-NEXT: "attn.cp_async_wait"() {pending = 0 : i64}
// CHECK-NEXT: "attn.cta_barrier"()
// CHECK-NEXT: "attn.slot_read"({{.*}}) {tile = "v"}
// CHECK-NEXT: "attn.mma"({{.*}}) {async, kind = "pv"}
// CHECK-NEXT: "attn.mma_wait"({{.*}}) {pending = 0 : i64}
// CHECK: } else {
// CHECK: "attn.finalize"

module attributes {attn.filename = "examples/mha.attn", attn.source = "# Plain multi-head attention. Dims in capitals are symbolic (runtime); numbers are fixed.\0Aattention mha {\0A  q: bf16[B, H, M, 128]\0A  k: bf16[B, H, N, 128]\0A  v: bf16[B, H, N, 128]\0A  out o: bf16[B, H, M, 128]\0A}\0A"} {
  func.func @mha(%arg0: tensor<?x?x?x128xbf16> loc("examples/mha.attn":3:3), %arg1: tensor<?x?x?x128xbf16> loc("examples/mha.attn":4:3), %arg2: tensor<?x?x?x128xbf16> loc("examples/mha.attn":5:3)) -> tensor<?x?x?x128xbf16> {
    %0 = "attn.kernel"(%arg0, %arg1, %arg2) ({
    ^bb0(%arg3: i32 loc("examples/mha.attn":2:1), %arg4: i32 loc("examples/mha.attn":2:1), %arg5: i32 loc("examples/mha.attn":2:1)):
      "attn.warp_specialize"() ({
        %1 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sQ", offset = 0 : i64, size = 32768 : i64, space = "smem", stages = 1 : i64, swizzle = "xor128B"}], consumer = "compute", name = "q", producer = "compute", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async", types = [!attn.tile<[128, 128], bf16, "smem">]} : () -> !attn.chan loc("attn-warp-specialize"("examples/mha.attn":2:1))
        %2 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sK", offset = 32768 : i64, size = 65536 : i64, space = "smem", stages = 2 : i64, swizzle = "xor128B"}, {align = 128 : i64, name = "sV", offset = 98304 : i64, size = 65536 : i64, space = "smem", stages = 2 : i64, swizzle = "xor128B"}], consumer = "compute", name = "kv", producer = "compute", space = "smem", stages = 2 : i64, tile = ["k", "v"], transport = "cp.async", types = [!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">]} : () -> !attn.chan loc("attn-warp-specialize"("examples/mha.attn":2:1))
        "attn.role"() ({
          %c0_i32 = arith.constant 0 : i32 loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %3 = "attn.load"(%arg0, %arg3, %arg4, %arg5) {operand = "q"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
          "attn.slot_write"(%1, %c0_i32, %3) {completes = "group", tile = "q"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          "attn.cp_async_commit"() {channel = "q"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %4:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 1 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %5 = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[128], f32, "reg"> loc("examples/mha.attn":2:1)
          %6 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128], f32, "reg"> loc("examples/mha.attn":2:1)
          %7 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128, 128], f32, "reg"> loc("examples/mha.attn":2:1)
          %8 = "attn.dim"() {name = "N"} : () -> i32 loc("examples/mha.attn":2:1)
          %c128_i32 = arith.constant 128 : i32 loc("examples/mha.attn":2:1)
          %c1_i32 = arith.constant 1 : i32 loc("examples/mha.attn":2:1)
          %9 = arith.subi %c128_i32, %c1_i32 : i32 loc("examples/mha.attn":2:1)
          %10 = arith.addi %8, %9 : i32 loc("examples/mha.attn":2:1)
          %11 = arith.divsi %10, %c128_i32 : i32 loc("examples/mha.attn":2:1)
          %c0_i32_0 = arith.constant 0 : i32 loc("examples/mha.attn":2:1)
          %c1_i32_1 = arith.constant 1 : i32 loc("examples/mha.attn":2:1)
          %12 = "attn.load"(%arg1, %arg3, %arg4, %c0_i32_0) {ahead = 0 : i64, operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
          "attn.slot_write"(%2, %c0_i32, %12) {completes = "group", tile = "k"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          "attn.cp_async_commit"() {channel = "kv"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %13:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %14 = "attn.load"(%arg2, %arg3, %arg4, %c0_i32_0) {ahead = 0 : i64, operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
          "attn.slot_write"(%2, %c0_i32, %14) {completes = "group", tile = "v"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          "attn.cp_async_commit"() {channel = "kv"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %15:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %16 = "attn.load"(%arg1, %arg3, %arg4, %c0_i32_0) {ahead = 1 : i64, operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
          "attn.slot_write"(%2, %13#0, %16) {completes = "group", tile = "k"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          "attn.cp_async_commit"() {channel = "kv"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %17:2 = "attn.ring_advance"(%13#0, %13#1) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %kv_top = arith.subi %11, %c1_i32_1 : i32
          %18:11 = scf.for %arg6 = %c0_i32_0 to %11 step %c1_i32_1 iter_args(%arg7 = %5, %arg8 = %6, %arg9 = %7, %arg10 = %c0_i32, %arg11 = %c0_i32, %arg12 = %17#0, %arg13 = %17#1, %arg14 = %15#0, %arg15 = %15#1, %arg16 = %c0_i32, %arg17 = %c0_i32) -> (!attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">, i32, i32, i32, i32, i32, i32, i32, i32)  : i32 {
            %kv_block = arith.subi %kv_top, %arg6 : i32
            "attn.cp_async_wait"() {pending = 2 : i64} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            "attn.cta_barrier"() : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %20 = "attn.slot_read"(%2, %arg10) {tile = "k"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %21 = "attn.slot_read"(%1, %arg16) {tile = "q"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %22 = "attn.load"(%arg2, %arg3, %arg4, %kv_block) {ahead = 1 : i64, operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
            "attn.slot_write"(%2, %arg14, %22) {completes = "group", tile = "v"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            "attn.cp_async_commit"() {channel = "kv"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %23:2 = "attn.ring_advance"(%arg14, %arg15) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %24 = "attn.mma"(%21, %20) {kind = "qk"} : (!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">) -> !attn.tile<[128, 128], f32, "reg"> loc("examples/mha.attn":2:1)
            %25:4 = "attn.softmax_step"(%24, %arg7, %arg8) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) loc("examples/mha.attn":2:1)
            "attn.cp_async_wait"() {pending = 2 : i64} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            "attn.cta_barrier"() : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %26 = "attn.slot_read"(%2, %arg10) {tile = "v"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %27:2 = "attn.ring_advance"(%arg10, %arg11) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %28 = "attn.load"(%arg1, %arg3, %arg4, %kv_block) {ahead = 2 : i64, operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
            "attn.slot_write"(%2, %arg12, %28) {completes = "group", tile = "k"} : (!attn.chan, i32, !attn.tile<[128, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            "attn.cp_async_commit"() {channel = "kv"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %29:2 = "attn.ring_advance"(%arg12, %arg13) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %30 = "attn.rescale"(%arg9, %25#3) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg"> loc("examples/mha.attn":2:1)
            %31 = "attn.mma"(%25#0, %26, %30) {kind = "pv"} : (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg"> loc("examples/mha.attn":2:1)
            scf.yield %25#1, %25#2, %31, %27#0, %27#1, %29#0, %29#1, %23#0, %23#1, %arg16, %arg17 : !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">, i32, i32, i32, i32, i32, i32, i32, i32 loc("examples/mha.attn":2:1)
          } {kv_blocks = "all"} loc("examples/mha.attn":2:1)
          "attn.cp_async_wait"() {pending = 0 : i64} : () -> () loc("attn-insert-pipelines"("examples/mha.attn":2:1))
          %19:2 = "attn.finalize"(%18#2, %18#0, %18#1, %arg4) ({
          ^bb0(%arg6: i32 loc("examples/mha.attn":2:1)):
            %cst = arith.constant 0xFF800000 : f32 loc("examples/mha.attn":2:1)
            gpu.yield %cst : f32 loc("examples/mha.attn":2:1)
          }) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, i32) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">) loc("examples/mha.attn":2:1)
          "attn.store"(%19#0, %arg3, %arg4, %arg5) {operand = "o"} : (!attn.tile<[128, 128], bf16, "reg">, i32, i32, i32) -> () loc("examples/mha.attn":2:1)
          gpu.yield loc("attn-warp-specialize"("examples/mha.attn":2:1))
        }) {name = "compute", regs = 0 : i64, warps = [0, 1, 2, 3, 4, 5, 6, 7]} : () -> () loc("attn-warp-specialize"("examples/mha.attn":2:1))
        gpu.yield loc("attn-warp-specialize"("examples/mha.attn":2:1))
      }) {ranges = {compute = "8afa9958eb2b7206"}} : () -> () loc("attn-warp-specialize"("examples/mha.attn":2:1))
      gpu.yield loc("examples/mha.attn":2:1)
    }) {block_m = 128 : i64, block_n = 128 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], key_range = "8afa9958eb2b7206", mask_block_m = 128 : i64, mask_block_n = 128 : i64, mask_digest = "none", mask_kind = "none", num_warps = 12 : i64, outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], q_tiles = 1 : i64, scale = 0.0883883461 : f32, stages = 2 : i64, target = "sm_90a", v_shape = ["B", "H", "N", 128], variant = "mha"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("examples/mha.attn":2:1)
    return %0 : tensor<?x?x?x128xbf16> loc("examples/mha.attn":2:1)
  } loc("examples/mha.attn":2:1)
} loc("examples/mha.attn":2:1)
