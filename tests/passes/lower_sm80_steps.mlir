// attn-lower-sm80 builds sm_80's KV steps op by op, in the order their ops stand
// (Note [Steps op by op] in attnc/backend/kv_steps.py).
//
// A user pass at L5 (examples/passes/wait_v_early.py) moves the V wait and K's refill
// above the softmax; the verifier accepts it and the lowering builds it, with dead_rows
// off by default (its first step is built in the plan's order) and refused when asked.
// RUN: attnc compile examples/gemma2.attn -arch sm_80 --emit mlir --load-pass examples/passes/wait_v_early.py --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,wait-v-early,attn-verify-pipeline,attn-kernel-choices" | filecheck %s --check-prefix=EARLY
// RUN: attnc compile examples/gemma2.attn -arch sm_80 --emit mlir --load-pass examples/passes/wait_v_early.py --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,wait-v-early,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm80" | filecheck %s --check-prefix=BUILT
// RUN: not attnc compile examples/gemma2.attn -arch sm_80 --emit mlir --load-pass examples/passes/wait_v_early.py --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,wait-v-early,attn-verify-pipeline,attn-kernel-choices{dead_rows=true},attn-lower-sm80" 2>&1 | filecheck %s --check-prefix=DEAD
//
// Below, examples/mha.attn's L5 IR with P.V reading the carried O instead of the
// rescaled one: refused at the op.
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-kernel-choices,attn-lower-sm80" 2>&1 | filecheck %s --check-prefix=FLOW

// EARLY: scf.for
// EARLY: "attn.mma"{{.*}}kind = "qk"
// EARLY: "attn.mask"
// EARLY-NOT: "attn.softmax_step"
// EARLY: "attn.cp_async_wait"() {pending = 2 : i64}
// EARLY-NOT: scf.yield
// EARLY: "attn.load"{{.*}}ahead = 2 : i64{{.*}}operand = "k"
// EARLY-NOT: scf.yield
// EARLY: "attn.softmax_step"
// EARLY-NOT: scf.yield
// EARLY: "attn.rescale"
// EARLY: dead_rows = false
// BUILT: gpu.func @attnc_gemma2_fwd(
// DEAD: error: attn-kernel-choices: dead_rows=true: the sm_80 kernel cannot be built: dead_rows needs {{.*}} the KV steps' ops in the order the plan passes make
module attributes {attn.filename = "examples/mha.attn", attn.source = "# Plain multi-head attention. Dims in capitals are symbolic (runtime); numbers are fixed.\0Aattention mha {\0A  q: bf16[B, H, M, 128]\0A  k: bf16[B, H, N, 128]\0A  v: bf16[B, H, N, 128]\0A  out o: bf16[B, H, M, 128]\0A}\0A"} {
  func.func @mha(%arg0: tensor<?x?x?x128xbf16> loc("examples/mha.attn":3:3), %arg1: tensor<?x?x?x128xbf16> loc("examples/mha.attn":4:3), %arg2: tensor<?x?x?x128xbf16> loc("examples/mha.attn":5:3)) -> tensor<?x?x?x128xbf16> {
    %0 = "attn.kernel"(%arg0, %arg1, %arg2) ({
    ^bb0(%arg3: i32 loc("examples/mha.attn":2:1), %arg4: i32 loc("examples/mha.attn":2:1), %arg5: i32 loc("examples/mha.attn":2:1)):
      "attn.warp_specialize"() ({
        %1 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sQ", offset = 0 : i64, size = 32768 : i64, space = "smem", stages = 1 : i64, swizzle = "xor128B"}], consumer = "compute", name = "q", producer = "compute", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async", types = [!attn.tile<[128, 128], bf16, "smem">]} : () -> !attn.chan loc("attn-warp-specialize"("examples/mha.attn":2:1))
        %2 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sK", offset = 32768 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, swizzle = "xor128B"}, {align = 128 : i64, name = "sV", offset = 65536 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, swizzle = "xor128B"}], consumer = "compute", name = "kv", producer = "compute", space = "smem", stages = 2 : i64, tile = ["k", "v"], transport = "cp.async", types = [!attn.tile<[64, 128], bf16, "smem">, !attn.tile<[64, 128], bf16, "smem">]} : () -> !attn.chan loc("attn-warp-specialize"("examples/mha.attn":2:1))
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
          %c64_i32 = arith.constant 64 : i32 loc("examples/mha.attn":2:1)
          %c1_i32 = arith.constant 1 : i32 loc("examples/mha.attn":2:1)
          %9 = arith.subi %c64_i32, %c1_i32 : i32 loc("examples/mha.attn":2:1)
          %10 = arith.addi %8, %9 : i32 loc("examples/mha.attn":2:1)
          %11 = arith.divsi %10, %c64_i32 : i32 loc("examples/mha.attn":2:1)
          %c0_i32_0 = arith.constant 0 : i32 loc("examples/mha.attn":2:1)
          %c1_i32_1 = arith.constant 1 : i32 loc("examples/mha.attn":2:1)
          %kv_top = arith.subi %11, %c1_i32_1 : i32
          %12 = "attn.load"(%arg1, %arg3, %arg4, %kv_top) {ahead = 0 : i64, operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
          "attn.slot_write"(%2, %c0_i32, %12) {completes = "group", tile = "k"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          "attn.cp_async_commit"() {channel = "kv"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %13:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %14 = "attn.load"(%arg2, %arg3, %arg4, %kv_top) {ahead = 0 : i64, operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
          "attn.slot_write"(%2, %c0_i32, %14) {completes = "group", tile = "v"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          "attn.cp_async_commit"() {channel = "kv"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %15:2 = "attn.ring_advance"(%c0_i32, %c0_i32) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %16 = "attn.load"(%arg1, %arg3, %arg4, %kv_top) {ahead = 1 : i64, operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
          "attn.slot_write"(%2, %13#0, %16) {completes = "group", tile = "k"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          "attn.cp_async_commit"() {channel = "kv"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %17:2 = "attn.ring_advance"(%13#0, %13#1) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
          %18:11 = scf.for %arg6 = %c0_i32_0 to %11 step %c1_i32_1 iter_args(%arg7 = %5, %arg8 = %6, %arg9 = %7, %arg10 = %c0_i32, %arg11 = %c0_i32, %arg12 = %17#0, %arg13 = %17#1, %arg14 = %15#0, %arg15 = %15#1, %arg16 = %c0_i32, %arg17 = %c0_i32) -> (!attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">, i32, i32, i32, i32, i32, i32, i32, i32)  : i32 {
            %kv_block = arith.subi %kv_top, %arg6 : i32
            "attn.cp_async_wait"() {pending = 2 : i64} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            "attn.cta_barrier"() : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %20 = "attn.slot_read"(%2, %arg10) {tile = "k"} : (!attn.chan, i32) -> !attn.tile<[64, 128], bf16, "smem"> loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %21 = "attn.slot_read"(%1, %arg16) {tile = "q"} : (!attn.chan, i32) -> !attn.tile<[128, 128], bf16, "smem"> loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %22 = "attn.load"(%arg2, %arg3, %arg4, %kv_block) {ahead = 1 : i64, operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
            "attn.slot_write"(%2, %arg14, %22) {completes = "group", tile = "v"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            "attn.cp_async_commit"() {channel = "kv"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %23:2 = "attn.ring_advance"(%arg14, %arg15) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %24 = "attn.mma"(%21, %20) {kind = "qk"} : (!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[64, 128], bf16, "smem">) -> !attn.tile<[128, 64], f32, "reg"> loc("examples/mha.attn":2:1)
            %25:4 = "attn.softmax_step"(%24, %arg7, %arg8) : (!attn.tile<[128, 64], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> (!attn.tile<[128, 64], bf16, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) loc("examples/mha.attn":2:1)
            "attn.cp_async_wait"() {pending = 2 : i64} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            "attn.cta_barrier"() : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %26 = "attn.slot_read"(%2, %arg10) {tile = "v"} : (!attn.chan, i32) -> !attn.tile<[64, 128], bf16, "smem"> loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %27:2 = "attn.ring_advance"(%arg10, %arg11) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %28 = "attn.load"(%arg1, %arg3, %arg4, %kv_block) {ahead = 2 : i64, operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[64, 128], bf16, "smem"> loc("examples/mha.attn":2:1)
            "attn.slot_write"(%2, %arg12, %28) {completes = "group", tile = "k"} : (!attn.chan, i32, !attn.tile<[64, 128], bf16, "smem">) -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            "attn.cp_async_commit"() {channel = "kv"} : () -> () loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %29:2 = "attn.ring_advance"(%arg12, %arg13) {stages = 2 : i64} : (i32, i32) -> (i32, i32) loc("attn-insert-pipelines"("attn-warp-specialize"("examples/mha.attn":2:1)))
            %30 = "attn.rescale"(%arg9, %25#3) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg"> loc("examples/mha.attn":2:1)
            // FLOW: lower_sm80_steps.mlir:[[# @LINE + 1]]:{{[0-9]+}}: error: the sm_80 lowering builds a KV step's data flow as attn-tile makes it, and operand 2 of this attn.mma is not what it reads there
            %31 = "attn.mma"(%25#0, %26, %arg9) {kind = "pv"} : (!attn.tile<[128, 64], bf16, "reg">, !attn.tile<[64, 128], bf16, "smem">, !attn.tile<[128, 128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
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
        }) {name = "compute", regs = 0 : i64, warps = [0, 1, 2, 3]} : () -> () loc("attn-warp-specialize"("examples/mha.attn":2:1))
        gpu.yield loc("attn-warp-specialize"("examples/mha.attn":2:1))
      }) : () -> () loc("attn-warp-specialize"("examples/mha.attn":2:1))
      gpu.yield loc("examples/mha.attn":2:1)
    }) {block_m = 128 : i64, block_n = 64 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], mask_block_m = 128 : i64, mask_block_n = 64 : i64, mask_digest = "none", mask_kind = "none", num_warps = 4 : i64, outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], q_tiles = 1 : i64, scale = 0.0883883461 : f32, stages = 2 : i64, target = "sm_80", v_shape = ["B", "H", "N", 128], variant = "mha"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("examples/mha.attn":2:1)
    return %0 : tensor<?x?x?x128xbf16> loc("examples/mha.attn":2:1)
  } loc("examples/mha.attn":2:1)
} loc("examples/mha.attn":2:1)