// Input of alloc_tmem_errors.mlir: the sm_100a tile program attn-tile makes of
// alloc_tmem_errors.mlir's op (two Q tiles, block_n = 128), with block_n raised to 256 in
// its attributes only (the pass reads them, not the tile types), which attn-tile would
// refuse: S and O of two Q tiles then need 2 x (256 + 128) = 768 tensor-memory columns of
// the 512.

func.func @hd128_unmasked(%arg0: tensor<?x?x?x128xbf16>, %arg1: tensor<?x?x?x128xbf16>, %arg2: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %0 = "attn.kernel"(%arg0, %arg1, %arg2) ({
  ^bb0(%arg3: i32, %arg4: i32, %arg5: i32):
    %1 = "attn.load"(%arg0, %arg3, %arg4, %arg5) {operand = "q", q_tile = 0 : i64} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
    %2 = "attn.load"(%arg0, %arg3, %arg4, %arg5) {operand = "q", q_tile = 1 : i64} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
    %3 = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[128], f32, "reg">
    %4 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128], f32, "reg">
    %5 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128, 128], f32, "reg">
    %6 = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[128], f32, "reg">
    %7 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128], f32, "reg">
    %8 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128, 128], f32, "reg">
    %9 = "attn.dim"() {name = "N"} : () -> i32
    %c128_i32 = arith.constant 128 : i32
    %c1_i32 = arith.constant 1 : i32
    %10 = arith.subi %c128_i32, %c1_i32 : i32
    %11 = arith.addi %9, %10 : i32
    %12 = arith.divsi %11, %c128_i32 : i32
    %c0_i32 = arith.constant 0 : i32
    %c1_i32_0 = arith.constant 1 : i32
    %kv_top = arith.subi %12, %c1_i32_0 : i32
    %13:6 = scf.for %arg6 = %c0_i32 to %12 step %c1_i32_0 iter_args(%arg7 = %3, %arg8 = %4, %arg9 = %5, %arg10 = %6, %arg11 = %7, %arg12 = %8) -> (!attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">)  : i32 {
      %kv_block = arith.subi %kv_top, %arg6 : i32
      %16 = "attn.load"(%arg1, %arg3, %arg4, %kv_block) {operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
      %17 = "attn.mma"(%1, %16) {kind = "qk", q_tile = 0 : i64} : (!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">) -> !attn.tile<[128, 128], f32, "reg">
      %18 = "attn.mma"(%2, %16) {kind = "qk", q_tile = 1 : i64} : (!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">) -> !attn.tile<[128, 128], f32, "reg">
      %19:4 = "attn.softmax_step"(%17, %arg7, %arg8) {q_tile = 0 : i64} : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">)
      %20 = "attn.rescale"(%arg9, %19#3) {q_tile = 0 : i64} : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
      %21:4 = "attn.softmax_step"(%18, %arg10, %arg11) {q_tile = 1 : i64} : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">)
      %22 = "attn.rescale"(%arg12, %21#3) {q_tile = 1 : i64} : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
      %23 = "attn.load"(%arg2, %arg3, %arg4, %kv_block) {operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
      %24 = "attn.mma"(%19#0, %23, %20) {kind = "pv", q_tile = 0 : i64} : (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
      %25 = "attn.mma"(%21#0, %23, %22) {kind = "pv", q_tile = 1 : i64} : (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
      scf.yield %19#1, %19#2, %24, %21#1, %21#2, %25 : !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">
    } {kv_blocks = "all"}
    %14:2 = "attn.finalize"(%13#2, %13#0, %13#1, %arg4) ({
    ^bb0(%arg6: i32):
      %cst = arith.constant 0xFF800000 : f32
      gpu.yield %cst : f32
    }) {q_tile = 0 : i64} : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, i32) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">)
    "attn.store"(%14#0, %arg3, %arg4, %arg5) {operand = "o", q_tile = 0 : i64} : (!attn.tile<[128, 128], bf16, "reg">, i32, i32, i32) -> ()
    %15:2 = "attn.finalize"(%13#5, %13#3, %13#4, %arg4) ({
    ^bb0(%arg6: i32):
      %cst = arith.constant 0xFF800000 : f32
      gpu.yield %cst : f32
    }) {q_tile = 1 : i64} : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, i32) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">)
    "attn.store"(%15#0, %arg3, %arg4, %arg5) {operand = "o", q_tile = 1 : i64} : (!attn.tile<[128, 128], bf16, "reg">, i32, i32, i32) -> ()
    gpu.yield
  }) {block_m = 128 : i64, block_n = 256 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], key_range = "8afa9958eb2b7206", num_warps = 16 : i64, outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], q_tiles = 2 : i64, scale = 0.0883883461 : f32, stages = 3 : i64, target = "sm_100a", v_shape = ["B", "H", "N", 128], variant = "hd128_unmasked"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("alloc_tmem.attn":2:1)
  return %0 : tensor<?x?x?x128xbf16>
}
