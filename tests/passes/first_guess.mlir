// attn-insert-pipelines' guessed first block (Note [The guessed first block in the IR] in
// attnc/schedule/first_guess.py) on docs_sink's L4 plan for sm_80 (a mask that reads params:
// the role reads its key range from the block map; locations dropped): by default the role
// issues K and V of attn.first_block_guess before attn.block_map_range and, where the range
// is not empty and its top is another block, waits for every copy and writes them again
// (`rewrite`), and attn-verify-pipeline proves both ways sound; early_first=0 keeps the
// loads after the range. The option is refused for a kernel without a block map and for
// one whose roles are not one cooperative role (sm_100a's).
//
// RUN: attnc opt %s -arch sm_80 --pass-pipeline attn-insert-pipelines,attn-verify-pipeline | filecheck %s
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-insert-pipelines{early_first=0}" | filecheck %s --check-prefix=OFF
// RUN: not attnc compile examples/mha.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines{early_first=1}" 2>&1 | filecheck %s --check-prefix=NOMAP
// RUN: not attnc compile examples/docs_sink.attn -arch sm_100a --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines{early_first=1}" 2>&1 | filecheck %s --check-prefix=SM100

// CHECK: %[[Q:.*]] = "attn.load"({{.*}}) {operand = "q"}
// CHECK: %[[GUESS:.*]] = "attn.first_block_guess"(%arg7, %arg5, %arg6) : (i32, i32, i32) -> i32
// CHECK-NEXT: %[[KG:.*]] = "attn.load"(%arg1, %arg5, %arg6, %[[GUESS]]) {ahead = 0 : i64, operand = "k"}
// CHECK-NEXT: "attn.slot_write"(%{{.*}}, %c0_i32, %[[KG]]) {completes = "group", tile = "k"}
// CHECK-NEXT: "attn.cp_async_commit"()
// CHECK-NEXT: %[[VG:.*]] = "attn.load"(%arg2, %arg5, %arg6, %[[GUESS]]) {ahead = 0 : i64, operand = "v"}
// CHECK-NEXT: "attn.slot_write"(%{{.*}}, %c0_i32, %[[VG]]) {completes = "group", tile = "v"}
// CHECK-NEXT: "attn.cp_async_commit"()
// CHECK-NEXT: %[[R:.*]]:4 = "attn.block_map_range"(%arg7, %arg5, %arg6)
// CHECK: %[[TOP:.*]] = arith.subi %[[R]]#1, %c1_i32
// CHECK: %[[SOME:.*]] = arith.cmpi slt, %[[R]]#0, %[[R]]#1
// CHECK-NEXT: %[[OTHER:.*]] = arith.cmpi ne, %[[TOP]], %[[GUESS]]
// CHECK-NEXT: %[[MISS:.*]] = arith.andi %[[SOME]], %[[OTHER]]
// CHECK-NEXT: scf.if %[[MISS]] {
// CHECK-NEXT: "attn.cp_async_wait"() {pending = 0 : i64}
// CHECK-NEXT: %[[K:.*]] = "attn.load"(%arg1, %arg5, %arg6, %[[TOP]]) {ahead = 0 : i64, operand = "k"}
// CHECK-NEXT: "attn.slot_write"(%{{.*}}, %c0_i32, %[[K]]) {completes = "group", rewrite, tile = "k"}
// CHECK-NEXT: "attn.cp_async_commit"()
// CHECK-NEXT: %[[V:.*]] = "attn.load"(%arg2, %arg5, %arg6, %[[TOP]]) {ahead = 0 : i64, operand = "v"}
// CHECK-NEXT: "attn.slot_write"(%{{.*}}, %c0_i32, %[[V]]) {completes = "group", rewrite, tile = "v"}
// CHECK-NEXT: "attn.cp_async_commit"()
// CHECK-NEXT: }
// CHECK: "attn.load"(%arg1, %arg5, %arg6, %[[TOP]]) {ahead = 1 : i64, operand = "k"}
// CHECK: scf.for

// OFF-NOT: attn.first_block_guess
// OFF: %[[R:.*]]:4 = "attn.block_map_range"
// OFF: "attn.load"(%arg1, {{.*}}) {ahead = 0 : i64, operand = "k"}
// OFF-NOT: attn.first_block_guess
// OFF-NOT: rewrite
// OFF: scf.for

// NOMAP: --pass-pipeline:1:105: error: attn-insert-pipelines: early_first=true needs a role that reads its key range from a block map (attn.block_map_range: a mask that reads params); this kernel's reads none

// SM100: --pass-pipeline:1:105: error: attn-insert-pipelines: early_first=true: the guessed first block is a cooperative role's, whose copies are cp.async groups (sm_80's, or sm_90a's without a producer warpgroup); this kernel is sm_100a's with 7 roles

module attributes {attn.filename = "examples/docs_sink.attn", attn.source = "# Document masking (packed sequences) with learnable sinks (gpt-oss style).\0Aattention docs_sink {\0A  q: bf16[B, H, M, 64]\0A  k: bf16[B, H, N, 64]\0A  v: bf16[B, H, N, 64]\0A  param doc: i32[B, N]             # document id of each position (M == N here)\0A  param sinks: f32[H]\0A  mask_mod(b, h, i, j) = doc[b, i] == doc[b, j] and j <= i\0A  sink(h) = sinks[h]\0A  out o: bf16[B, H, M, 64]\0A}\0A"} {
  func.func @docs_sink(%arg0: tensor<?x?x?x64xbf16>, %arg1: tensor<?x?x?x64xbf16>, %arg2: tensor<?x?x?x64xbf16>, %arg3: tensor<?x?xi32>, %arg4: tensor<?xf32>) -> tensor<?x?x?x64xbf16> {
    %0 = "attn.kernel"(%arg0, %arg1, %arg2) ({
    ^bb0(%arg5: i32, %arg6: i32, %arg7: i32):
      "attn.warp_specialize"() ({
        %1 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sQ", offset = 0 : i64, size = 8192 : i64, space = "smem", stages = 1 : i64, swizzle = "xor128B"}], consumer = "compute", name = "q", producer = "compute", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async", types = [!attn.tile<[64, 64], bf16, "smem">]} : () -> !attn.chan
        %2 = "attn.channel"() {buffers = [{align = 128 : i64, name = "sK", offset = 8192 : i64, size = 16384 : i64, space = "smem", stages = 2 : i64, stride = 16384 : i64, swizzle = "xor128B"}, {align = 128 : i64, name = "sV", offset = 16384 : i64, size = 16384 : i64, space = "smem", stages = 2 : i64, stride = 16384 : i64, swizzle = "xor128B"}], consumer = "compute", name = "kv", producer = "compute", space = "smem", stages = 2 : i64, tile = ["k", "v"], transport = "cp.async", types = [!attn.tile<[64, 64], bf16, "smem">, !attn.tile<[64, 64], bf16, "smem">]} : () -> !attn.chan
        "attn.role"() ({
          %3 = "attn.load"(%arg0, %arg5, %arg6, %arg7) {operand = "q"} : (tensor<?x?x?x64xbf16>, i32, i32, i32) -> !attn.tile<[64, 64], bf16, "smem">
          "attn.put"(%1, %3) {tile = "q"} : (!attn.chan, !attn.tile<[64, 64], bf16, "smem">) -> ()
          %4 = "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[64], f32, "reg">
          %5 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[64], f32, "reg">
          %6 = "attn.fill"() {value = 0.000000e+00 : f32} : () -> !attn.tile<[64, 64], f32, "reg">
          %7:4 = "attn.block_map_range"(%arg7, %arg5, %arg6) : (i32, i32, i32) -> (i32, i32, i32, i32)
          %c1_i32 = arith.constant 1 : i32
          %c0_i32 = arith.constant 0 : i32
          %8 = arith.maxsi %7#2, %7#0 : i32
          %9 = arith.minsi %8, %7#1 : i32
          %10 = arith.maxsi %7#3, %9 : i32
          %11 = arith.minsi %10, %7#1 : i32
          %12 = arith.subi %7#1, %c1_i32 : i32
          %13 = arith.subi %7#1, %11 : i32
          %14 = arith.subi %7#1, %9 : i32
          %15 = arith.subi %7#1, %7#0 : i32
          %c1_i32_0 = arith.constant 1 : i32
          %16 = "attn.load"(%arg1, %arg5, %arg6, %12) {ahead = 0 : i64, operand = "k"} : (tensor<?x?x?x64xbf16>, i32, i32, i32) -> !attn.tile<[64, 64], bf16, "smem">
          "attn.put"(%2, %16) {tile = "k"} : (!attn.chan, !attn.tile<[64, 64], bf16, "smem">) -> ()
          %17 = "attn.load"(%arg2, %arg5, %arg6, %12) {ahead = 0 : i64, operand = "v"} : (tensor<?x?x?x64xbf16>, i32, i32, i32) -> !attn.tile<[64, 64], bf16, "smem">
          "attn.put"(%2, %17) {tile = "v"} : (!attn.chan, !attn.tile<[64, 64], bf16, "smem">) -> ()
          %18 = "attn.load"(%arg1, %arg5, %arg6, %12) {ahead = 1 : i64, operand = "k"} : (tensor<?x?x?x64xbf16>, i32, i32, i32) -> !attn.tile<[64, 64], bf16, "smem">
          "attn.put"(%2, %18) {tile = "k"} : (!attn.chan, !attn.tile<[64, 64], bf16, "smem">) -> ()
          %19:3 = scf.for %arg8 = %c0_i32 to %13 step %c1_i32_0 iter_args(%arg9 = %4, %arg10 = %5, %arg11 = %6) -> (!attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64, 64], f32, "reg">)  : i32 {
            %23 = arith.subi %12, %arg8 : i32
            %24 = "attn.get"(%2) {tile = "k"} : (!attn.chan) -> !attn.tile<[64, 64], bf16, "smem">
            %25 = "attn.get"(%1) {tile = "q"} : (!attn.chan) -> !attn.tile<[64, 64], bf16, "smem">
            %26 = "attn.load"(%arg2, %arg5, %arg6, %23) {ahead = 1 : i64, operand = "v"} : (tensor<?x?x?x64xbf16>, i32, i32, i32) -> !attn.tile<[64, 64], bf16, "smem">
            "attn.put"(%2, %26) {tile = "v"} : (!attn.chan, !attn.tile<[64, 64], bf16, "smem">) -> ()
            %27 = "attn.mma"(%25, %24) {kind = "qk"} : (!attn.tile<[64, 64], bf16, "smem">, !attn.tile<[64, 64], bf16, "smem">) -> !attn.tile<[64, 64], f32, "reg">
            %28 = "attn.block_map_read"(%arg7, %23, %arg5, %arg6) : (i32, i32, i32, i32) -> i32
            %29 = "attn.mask"(%27, %arg5, %arg6, %arg7, %23, %28) ({
            ^bb0(%arg12: i32, %arg13: i32, %arg14: i32, %arg15: i32):
              %35 = "attn.param"(%arg3, %arg12, %arg14) : (tensor<?x?xi32>, i32, i32) -> i32
              %36 = "attn.param"(%arg3, %arg12, %arg15) : (tensor<?x?xi32>, i32, i32) -> i32
              %37 = arith.cmpi eq, %35, %36 : i32
              %38 = arith.cmpi sle, %arg15, %arg14 : i32
              %39 = arith.andi %37, %38 : i1
              gpu.yield %39 : i1
            }) : (!attn.tile<[64, 64], f32, "reg">, i32, i32, i32, i32, i32) -> !attn.tile<[64, 64], f32, "reg">
            %30:4 = "attn.softmax_step"(%29, %arg9, %arg10) : (!attn.tile<[64, 64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">) -> (!attn.tile<[64, 64], bf16, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">)
            %31 = "attn.get"(%2) {tile = "v"} : (!attn.chan) -> !attn.tile<[64, 64], bf16, "smem">
            %32 = "attn.load"(%arg1, %arg5, %arg6, %23) {ahead = 2 : i64, operand = "k"} : (tensor<?x?x?x64xbf16>, i32, i32, i32) -> !attn.tile<[64, 64], bf16, "smem">
            "attn.put"(%2, %32) {tile = "k"} : (!attn.chan, !attn.tile<[64, 64], bf16, "smem">) -> ()
            %33 = "attn.rescale"(%arg11, %30#3) : (!attn.tile<[64, 64], f32, "reg">, !attn.tile<[64], f32, "reg">) -> !attn.tile<[64, 64], f32, "reg">
            %34 = "attn.mma"(%30#0, %31, %33) {kind = "pv"} : (!attn.tile<[64, 64], bf16, "reg">, !attn.tile<[64, 64], bf16, "smem">, !attn.tile<[64, 64], f32, "reg">) -> !attn.tile<[64, 64], f32, "reg">
            scf.yield %30#1, %30#2, %34 : !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64, 64], f32, "reg">
          } {kv_blocks = "mixed"}
          %c1_i32_1 = arith.constant 1 : i32
          %20:3 = scf.for %arg8 = %13 to %14 step %c1_i32_1 iter_args(%arg9 = %19#0, %arg10 = %19#1, %arg11 = %19#2) -> (!attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64, 64], f32, "reg">)  : i32 {
            %23 = arith.subi %12, %arg8 : i32
            %24 = "attn.get"(%2) {tile = "k"} : (!attn.chan) -> !attn.tile<[64, 64], bf16, "smem">
            %25 = "attn.get"(%1) {tile = "q"} : (!attn.chan) -> !attn.tile<[64, 64], bf16, "smem">
            %26 = "attn.load"(%arg2, %arg5, %arg6, %23) {ahead = 1 : i64, operand = "v"} : (tensor<?x?x?x64xbf16>, i32, i32, i32) -> !attn.tile<[64, 64], bf16, "smem">
            "attn.put"(%2, %26) {tile = "v"} : (!attn.chan, !attn.tile<[64, 64], bf16, "smem">) -> ()
            %27 = "attn.mma"(%25, %24) {kind = "qk"} : (!attn.tile<[64, 64], bf16, "smem">, !attn.tile<[64, 64], bf16, "smem">) -> !attn.tile<[64, 64], f32, "reg">
            %28:4 = "attn.softmax_step"(%27, %arg9, %arg10) : (!attn.tile<[64, 64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">) -> (!attn.tile<[64, 64], bf16, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">)
            %29 = "attn.get"(%2) {tile = "v"} : (!attn.chan) -> !attn.tile<[64, 64], bf16, "smem">
            %30 = "attn.load"(%arg1, %arg5, %arg6, %23) {ahead = 2 : i64, operand = "k"} : (tensor<?x?x?x64xbf16>, i32, i32, i32) -> !attn.tile<[64, 64], bf16, "smem">
            "attn.put"(%2, %30) {tile = "k"} : (!attn.chan, !attn.tile<[64, 64], bf16, "smem">) -> ()
            %31 = "attn.rescale"(%arg11, %28#3) : (!attn.tile<[64, 64], f32, "reg">, !attn.tile<[64], f32, "reg">) -> !attn.tile<[64, 64], f32, "reg">
            %32 = "attn.mma"(%28#0, %29, %31) {kind = "pv"} : (!attn.tile<[64, 64], bf16, "reg">, !attn.tile<[64, 64], bf16, "smem">, !attn.tile<[64, 64], f32, "reg">) -> !attn.tile<[64, 64], f32, "reg">
            scf.yield %28#1, %28#2, %32 : !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64, 64], f32, "reg">
          } {kv_blocks = "full"}
          %c1_i32_2 = arith.constant 1 : i32
          %21:3 = scf.for %arg8 = %14 to %15 step %c1_i32_2 iter_args(%arg9 = %20#0, %arg10 = %20#1, %arg11 = %20#2) -> (!attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64, 64], f32, "reg">)  : i32 {
            %23 = arith.subi %12, %arg8 : i32
            %24 = "attn.get"(%2) {tile = "k"} : (!attn.chan) -> !attn.tile<[64, 64], bf16, "smem">
            %25 = "attn.get"(%1) {tile = "q"} : (!attn.chan) -> !attn.tile<[64, 64], bf16, "smem">
            %26 = "attn.load"(%arg2, %arg5, %arg6, %23) {ahead = 1 : i64, operand = "v"} : (tensor<?x?x?x64xbf16>, i32, i32, i32) -> !attn.tile<[64, 64], bf16, "smem">
            "attn.put"(%2, %26) {tile = "v"} : (!attn.chan, !attn.tile<[64, 64], bf16, "smem">) -> ()
            %27 = "attn.mma"(%25, %24) {kind = "qk"} : (!attn.tile<[64, 64], bf16, "smem">, !attn.tile<[64, 64], bf16, "smem">) -> !attn.tile<[64, 64], f32, "reg">
            %28 = "attn.block_map_read"(%arg7, %23, %arg5, %arg6) : (i32, i32, i32, i32) -> i32
            %29 = "attn.mask"(%27, %arg5, %arg6, %arg7, %23, %28) ({
            ^bb0(%arg12: i32, %arg13: i32, %arg14: i32, %arg15: i32):
              %35 = "attn.param"(%arg3, %arg12, %arg14) : (tensor<?x?xi32>, i32, i32) -> i32
              %36 = "attn.param"(%arg3, %arg12, %arg15) : (tensor<?x?xi32>, i32, i32) -> i32
              %37 = arith.cmpi eq, %35, %36 : i32
              %38 = arith.cmpi sle, %arg15, %arg14 : i32
              %39 = arith.andi %37, %38 : i1
              gpu.yield %39 : i1
            }) : (!attn.tile<[64, 64], f32, "reg">, i32, i32, i32, i32, i32) -> !attn.tile<[64, 64], f32, "reg">
            %30:4 = "attn.softmax_step"(%29, %arg9, %arg10) : (!attn.tile<[64, 64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">) -> (!attn.tile<[64, 64], bf16, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">)
            %31 = "attn.get"(%2) {tile = "v"} : (!attn.chan) -> !attn.tile<[64, 64], bf16, "smem">
            %32 = "attn.load"(%arg1, %arg5, %arg6, %23) {ahead = 2 : i64, operand = "k"} : (tensor<?x?x?x64xbf16>, i32, i32, i32) -> !attn.tile<[64, 64], bf16, "smem">
            "attn.put"(%2, %32) {tile = "k"} : (!attn.chan, !attn.tile<[64, 64], bf16, "smem">) -> ()
            %33 = "attn.rescale"(%arg11, %30#3) : (!attn.tile<[64, 64], f32, "reg">, !attn.tile<[64], f32, "reg">) -> !attn.tile<[64, 64], f32, "reg">
            %34 = "attn.mma"(%30#0, %31, %33) {kind = "pv"} : (!attn.tile<[64, 64], bf16, "reg">, !attn.tile<[64, 64], bf16, "smem">, !attn.tile<[64, 64], f32, "reg">) -> !attn.tile<[64, 64], f32, "reg">
            scf.yield %30#1, %30#2, %34 : !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64, 64], f32, "reg">
          } {kv_blocks = "mixed"}
          %22:2 = "attn.finalize"(%21#2, %21#0, %21#1, %arg6) ({
          ^bb0(%arg8: i32):
            %23 = "attn.param"(%arg4, %arg8) : (tensor<?xf32>, i32) -> f32
            gpu.yield %23 : f32
          }) : (!attn.tile<[64, 64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, i32) -> (!attn.tile<[64, 64], bf16, "reg">, !attn.tile<[64], f32, "reg">)
          "attn.store"(%22#0, %arg5, %arg6, %arg7) {operand = "o"} : (!attn.tile<[64, 64], bf16, "reg">, i32, i32, i32) -> ()
          gpu.yield
        }) {name = "compute", regs = 0 : i64, warps = [0, 1, 2, 3]} : () -> ()
        gpu.yield
      }) {ranges = {compute = "433ce7cce4f53f90"}} : () -> ()
      gpu.yield
    }) {block_m = 64 : i64, block_n = 64 : i64, dims = ["B", "H", "M", "N"], dtype = "bf16", gqa = false, has_mask_mod = true, has_score_mod = false, has_sink = true, head_dim_qk = 64 : i64, head_dim_v = 64 : i64, k_shape = ["B", "H", "N", 64], key_range = "433ce7cce4f53f90", kv_range_fn = @docs_sink_kv_range, kv_segments = 1 : i64, mask_block_m = 64 : i64, mask_block_n = 64 : i64, mask_digest = "68548c456dfd1b17", mask_kind = "runtime", num_warps = 4 : i64, outputs = ["o"], param_dtypes = ["i32", "f32"], param_shapes = [["B", "N"], ["H"]], params = ["doc", "sinks"], q_shape = ["B", "H", "M", 64], q_tiles = 1 : i64, scale = 1.250000e-01 : f32, stages = 2 : i64, target = "sm_80", tile_class_fn = @docs_sink_tile_class, v_shape = ["B", "H", "N", 64], variant = "docs_sink"} : (tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>) -> tensor<?x?x?x64xbf16>
    return %0 : tensor<?x?x?x64xbf16>
  }
  func.func private @docs_sink_tile_class(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32, %arg4: i32, %arg5: i32, %arg6: i32, %arg7: i32, %arg8: i32, %arg9: i32) -> i32 {
    %0 = arith.extsi %arg2 : i32 to i64
    %1 = arith.extsi %arg1 : i32 to i64
    %2 = arith.cmpi slt, %0, %1 : i64
    %c1_i64 = arith.constant 1 : i64
    %c0_i64 = arith.constant 0 : i64
    %3 = arith.select %2, %c1_i64, %c0_i64 : i64
    %4 = arith.trunci %3 : i64 to i32
    return %4 : i32
  }
  func.func private @docs_sink_kv_range(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32, %arg4: i32, %arg5: i32, %arg6: i32) -> (i32, i32, i32, i32) {
    %c0_i32 = arith.constant 0 : i32
    %0 = arith.extsi %arg0 : i32 to i64
    %1 = arith.extsi %arg6 : i32 to i64
    %c63_i64 = arith.constant 63 : i64
    %2 = arith.addi %1, %c63_i64 : i64
    %c64_i64 = arith.constant 64 : i64
    %3 = arith.floordivsi %2, %c64_i64 : i64
    %c1_i64 = arith.constant 1 : i64
    %4 = arith.subi %3, %c1_i64 : i64
    %5 = arith.minsi %0, %4 : i64
    %6 = arith.addi %5, %c1_i64 : i64
    %7 = arith.trunci %6 : i64 to i32
    return %c0_i32, %7, %c0_i32, %c0_i32 : i32, i32, i32, i32
  }
}
