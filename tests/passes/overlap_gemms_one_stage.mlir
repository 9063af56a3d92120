// Input of overlap_gemms_errors.mlir: the sm_90a tile program attn-tile makes of
// overlap_gemms_errors.mlir's op, with stages = 1 in its attributes, which attn-tile would
// refuse (sm_90a takes 2 to 4): the cooperative kernel has one K/V stage.

func.func @hd128_unmasked(%arg0: tensor<?x?x?x128xbf16>, %arg1: tensor<?x?x?x128xbf16>, %arg2: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %0 = "attn.kernel"(%arg0, %arg1, %arg2) ({
  ^bb0(%arg3: i32, %arg4: i32, %arg5: i32):
    %1 = "attn.load"(%arg0, %arg3, %arg4, %arg5) {operand = "q"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
    %2 = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[128], f32, "reg">
    %3 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128], f32, "reg">
    %4 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[128, 128], f32, "reg">
    %5 = "attn.dim"() {name = "N"} : () -> i32
    %c128_i32 = arith.constant 128 : i32
    %c1_i32 = arith.constant 1 : i32
    %6 = arith.subi %c128_i32, %c1_i32 : i32
    %7 = arith.addi %5, %6 : i32
    %8 = arith.divsi %7, %c128_i32 : i32
    %c0_i32 = arith.constant 0 : i32
    %c1_i32_0 = arith.constant 1 : i32
    %kv_top = arith.subi %8, %c1_i32_0 : i32
    %9:3 = scf.for %arg6 = %c0_i32 to %8 step %c1_i32_0 iter_args(%arg7 = %2, %arg8 = %3, %arg9 = %4) -> (!attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">)  : i32 {
      %kv_block = arith.subi %kv_top, %arg6 : i32
      %11 = "attn.load"(%arg1, %arg3, %arg4, %kv_block) {operand = "k"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
      %12 = "attn.mma"(%1, %11) {kind = "qk"} : (!attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">) -> !attn.tile<[128, 128], f32, "reg">
      %13:4 = "attn.softmax_step"(%12, %arg7, %arg8) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">)
      %14 = "attn.rescale"(%arg9, %13#3) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
      %15 = "attn.load"(%arg2, %arg3, %arg4, %kv_block) {operand = "v"} : (tensor<?x?x?x128xbf16>, i32, i32, i32) -> !attn.tile<[128, 128], bf16, "smem">
      %16 = "attn.mma"(%13#0, %15, %14) {kind = "pv"} : (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128, 128], bf16, "smem">, !attn.tile<[128, 128], f32, "reg">) -> !attn.tile<[128, 128], f32, "reg">
      scf.yield %13#1, %13#2, %16 : !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128, 128], f32, "reg">
    } {kv_blocks = "all"}
    %10:2 = "attn.finalize"(%9#2, %9#0, %9#1, %arg4) ({
    ^bb0(%arg6: i32):
      %cst = arith.constant 0xFF800000 : f32
      gpu.yield %cst : f32
    }) : (!attn.tile<[128, 128], f32, "reg">, !attn.tile<[128], f32, "reg">, !attn.tile<[128], f32, "reg">, i32) -> (!attn.tile<[128, 128], bf16, "reg">, !attn.tile<[128], f32, "reg">)
    "attn.store"(%10#0, %arg3, %arg4, %arg5) {operand = "o"} : (!attn.tile<[128, 128], bf16, "reg">, i32, i32, i32) -> ()
    gpu.yield
  }) {block_m = 128 : i64, block_n = 128 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = false, has_score_mod = false, has_sink = false, head_dim_qk = 128 : i64, head_dim_v = 128 : i64, k_shape = ["B", "H", "N", 128], key_range = "8afa9958eb2b7206", num_warps = 12 : i64, outputs = ["o"], param_dtypes = [], param_shapes = [], params = [], q_shape = ["B", "H", "M", 128], q_tiles = 1 : i64, scale = 0.0883883461 : f32, stages = 1 : i64, target = "sm_90a", v_shape = ["B", "H", "N", 128], variant = "hd128_unmasked"} : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("overlap_gemms.attn":2:1)
  return %0 : tensor<?x?x?x128xbf16>
}
