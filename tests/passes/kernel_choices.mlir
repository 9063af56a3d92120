// attn-kernel-choices: the kernel's choices beyond the plan (grid order, CTAs per SM, the
// mask's test, the exp2 split, the lazy rescale, row sums, step loads, the O store), each
// on the op it concerns, as the options give them or by the measured defaults.
// The errors here: the pass's own (run before attn-tile, attn-warp-specialize or
// attn-insert-pipelines; an sm_100a option of the other lowerings; an integer out of
// range) and, of the conditions of the kernel the lowering builds
// (attnc/backend/spec_checks.py), those an option breaks below. Its others are tested elsewhere: a module without a kernel in
// tests/passes/test_pass_errors.py, refused edits of the recorded choices in
// tests/passes/test_kernel_choices.py, the kernel's other conditions in tests/backend/*.
//
// The input is examples/alibi.attn's L1 IR (below the checks).
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices" | filecheck %s
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{mma_row_sum=0 staged_o=0 exp2_fma=3}" | filecheck %s --check-prefix=OPTIONS
// The producer warpgroup's kernel needs head dim 128, and the pass takes one attn.attention
// per module: Gemma-2 is compiled from its source.
// RUN: attnc compile examples/gemma2.attn -arch sm_90a --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices" | filecheck %s --check-prefix=GEMMA
// RUN: attnc compile examples/sliding_window.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices" | filecheck %s --check-prefix=WINDOW
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-kernel-choices" 2>&1 | filecheck %s --check-prefix=NOTILE
// RUN: attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices" | filecheck %s --check-prefix=SM100
// RUN: attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{lazy_rescale=0 exp2_fma=2}" | filecheck %s --check-prefix=SM100OPT
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{exp2_fma=2 heads_first=1}" 2>&1 | filecheck %s --check-prefix=SM100NOT
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{aligned_tiles=1}" 2>&1 | filecheck %s --check-prefix=SM100TILES
// RUN: attnc compile examples/docs_sink.attn -arch sm_100a --emit mlir | filecheck %s --check-prefix=SM100DOCS
// RUN: not attnc compile examples/docs_sink.attn -arch sm_100a --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{aligned_tiles=0 run_ranges=1}" 2>&1 | filecheck %s --check-prefix=SM100RUNS
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-kernel-choices" 2>&1 | filecheck %s --check-prefix=NOSYNC
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-kernel-choices" 2>&1 | filecheck %s --check-prefix=NOROLES
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{lean_loads=1}" 2>&1 | filecheck %s --check-prefix=LEAN
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{exp2_fma=9223372036854775808}" 2>&1 | filecheck %s --check-prefix=RANGE
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{qk_unroll=2}" 2>&1 | filecheck %s --check-prefix=UNROLL90
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{qk_unroll=3}" 2>&1 | filecheck %s --check-prefix=UNROLL3
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{qk_unroll=-1}" 2>&1 | filecheck %s --check-prefix=UNROLLNEG
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{min_ctas_per_sm=33}" 2>&1 | filecheck %s --check-prefix=CTAS
// RUN: not attnc compile examples/sliding_window.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile{block_m=64 block_n=256},attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{interval_test=bits}" 2>&1 | filecheck %s --check-prefix=BITS
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{interval_test=range}" 2>&1 | filecheck %s --check-prefix=NOINTERVAL

// ALiBi on sm_80 (head dim 64, an affine score_mod, no LSE): row sums on the tensor cores,
// no lazy rescale below head dim 128, O staged through shared memory, the mask's bit test.
// CHECK: "attn.load"({{.*}}) {ahead = 0 : i64, lean = false, operand = "k"}
// CHECK: "attn.load"({{.*}}) {ahead = 0 : i64, lean = false, operand = "v"}
// CHECK: "attn.load"({{.*}}) {ahead = 1 : i64, lean = false, operand = "k"}
// CHECK: "attn.mma"({{.*}}) {kind = "qk", unroll = 1 : i64}
// CHECK: "attn.softmax_step"({{.*}}) {exp2_fma = 0 : i64}
// CHECK: "attn.rescale"({{.*}}) {lazy = false}
// CHECK: "attn.mma"({{.*}}) {kind = "pv", row_sum = true}
// CHECK: }) {split = false}
// CHECK: "attn.store"({{.*}}) {operand = "o", staged = true}
// CHECK: }) {aligned_tiles = false, {{.*}}dead_rows = false, {{.*}}heads_first = false, {{.*}}kv_loops = 3 : i64, {{.*}}min_ctas_per_sm = 0 : i64, min_ctas_unless_spills = false, {{.*}}run_ranges = false, {{.*}}small_grid = true, {{.*}}tail_waves = 0 : i64, {{.*}}tiles_last = false

// OPTIONS: "attn.softmax_step"({{.*}}) {exp2_fma = 3 : i64}
// OPTIONS: "attn.mma"({{.*}}) {kind = "pv", row_sum = false}
// OPTIONS: "attn.store"({{.*}}) {operand = "o", staged = false}

// Gemma-2 on sm_90a (the producer warpgroup's kernel with a score_mod): one of 8 exp2 on
// the FMA pipe, the lazy rescale at head dim 128, O stored from the registers.
// The window's key range ends in mixed blocks: one loop on sm_80, a loop per kind of block
// on sm_90a (Note [Key loops]).
// WINDOW: }) {aligned_tiles = false, {{.*}}dead_rows = true, {{.*}}kv_loops = 1 : i64,
// GEMMA: }) {name = "producer"
// GEMMA: "attn.softmax_step"({{.*}}) {exp2_fma = 1 : i64}
// GEMMA: "attn.rescale"({{.*}}) {lazy = true}
// GEMMA: "attn.store"({{.*}}) {operand = "o", staged = false}
// GEMMA: }) {name = "consumer0"
// GEMMA: }) {aligned_tiles = false, {{.*}}kv_loops = 3 : i64,

// NOTILE: alibi.attn:2:1: error: attn-kernel-choices needs the 'target' attribute that attn-tile records; run attn-tile first
// sm_100a (Note [Choices on sm_100a]): the lazy rescale on every attn.rescale of the
// correction role and no exp2 on the FMA pipe by default; the options set them; the other
// lowerings' choices are refused at the option.
// SM100: "attn.softmax_step"({{.*}}) {exp2_fma = 0 : i64, q_tile = 0 : i64}
// SM100: "attn.softmax_step"({{.*}}) {exp2_fma = 0 : i64, q_tile = 1 : i64}
// SM100: }) {name = "softmax1"
// SM100: "attn.rescale"({{.*}}) {lazy = true, q_tile = 0 : i64}
// SM100: "attn.rescale"({{.*}}) {lazy = true, q_tile = 1 : i64}
// SM100: }) {name = "correction"
// SM100: aligned_tiles = false
// SM100-NOT: heads_first
// SM100OPT: "attn.softmax_step"({{.*}}) {exp2_fma = 2 : i64, q_tile = 0 : i64}
// SM100OPT: "attn.rescale"({{.*}}) {lazy = false, q_tile = 0 : i64}
// SM100NOT: --pass-pipeline:1:136: error: attn-kernel-choices: heads_first=true: no choice of attn-lower-sm100a, which takes exp2_fma, lazy_rescale, aligned_tiles and run_ranges only
// A tile table needs a documents mask (Note [Tile table on sm_100a]): ALiBi's kernel takes
// none, and docs_sink's takes one by default, its key ranges from the table's runs (the
// rest of its mask, j <= i, reads no param); the runs need the table.
// SM100TILES: error: aligned_tiles needs a block map (a mask that reads params, of one key range) (Note [Tile table on sm_100a])
// SM100DOCS: }) {name = "correction"
// SM100DOCS: aligned_tiles = true{{.*}}run_ranges = true
// SM100RUNS: error: run_ranges needs the aligned tiles (aligned_tiles is off)
// NOSYNC: alibi.attn:2:1: error: attn-kernel-choices needs the synchronization attn-insert-pipelines makes of attn.put; run attn-insert-pipelines first
// NOROLES: alibi.attn:2:1: error: attn-kernel-choices needs the role regions that attn-warp-specialize makes; run attn-warp-specialize first
// LEAN: --pass-pipeline:1:125: error: attn-kernel-choices: lean_loads=true: the sm_90a kernel cannot be built: lean_loads needs an sm_80 kernel whose key ranges come from a block map or a band
// RANGE: --pass-pipeline:1:125: error: attn-kernel-choices: exp2_fma=9223372036854775808: expected 0 to 8
// UNROLL90: --pass-pipeline:1:125: error: attn-kernel-choices: the sm_90a kernel cannot be built: qk_unroll=2: it rolls sm_80's QK^T k16 steps into a loop; sm_90a issues QK^T as one wgmma group (0 there)
// UNROLL3: --pass-pipeline:1:125: error: attn-kernel-choices: the sm_80 kernel cannot be built: qk_unroll=3 must divide 4 (k16 steps per smem page), or be 0
// UNROLLNEG: --pass-pipeline:1:125: error: attn-kernel-choices: qk_unroll=-1: expected 0 or more
// CTAS: --pass-pipeline:1:125: error: attn-kernel-choices: the sm_80 kernel cannot be built: min_ctas_per_sm=33: expected 0 to 32
// The kept-bits test holds 32 scores per row and lane: 256-key tiles take another.
// BITS: --pass-pipeline:1:149: error: attn-kernel-choices: interval_test=bits: interval_test='bits' needs block_n <= 128 (32 scores per row and lane), not 256: use 'range' or 'pair'
// ALiBi's mask is bottom-right causal, compared per score (Note [Mask hooks]): no row interval to test.
// NOINTERVAL: --pass-pipeline:1:125: error: attn-kernel-choices: interval_test=range: interval_test chooses how a row interval's scores are tested, and this kernel's mask has none

// examples/alibi.attn as the frontend lowers it (L1).
func.func @alibi(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>, %slopes: tensor<?xf32>) -> tensor<?x?x?x64xf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    %slope = "attn.param"(%slopes, %h) : (tensor<?xf32>, i32) -> f32
    %d = arith.subi %j, %i : i32
    %df = arith.sitofp %d : i32 to f32
    %bias = arith.mulf %slope, %df : f32
    %t = arith.addf %s, %bias : f32
    gpu.yield %t : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %n = "attn.dim"() {name = "N"} : () -> i32
    %m = "attn.dim"() {name = "M"} : () -> i32
    %shift = arith.subi %n, %m : i32
    %last = arith.addi %i, %shift : i32
    %keep = arith.cmpi sle, %j, %last : i32
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "alibi", dtype = "f16", head_dim_qk = 64 : i64, head_dim_v = 64 : i64,
      scale = 1.250000e-01 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 64],
      k_shape = ["B", "H", "N", 64], v_shape = ["B", "H", "N", 64], params = ["slopes"],
      param_shapes = [["H"]], param_dtypes = ["f32"], outputs = ["o"], gqa = false,
      has_score_mod = true, has_mask_mod = true, has_sink = false}
      : (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) -> tensor<?x?x?x64xf16> loc("alibi.attn":2:1)
  return %o : tensor<?x?x?x64xf16>
}
