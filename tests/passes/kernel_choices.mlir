// attn-kernel-choices: the kernel's choices beyond the plan (grid order, CTAs per SM, the
// mask's test, the exp2 split, the lazy rescale, row sums, step loads, the O store), each
// on the op it concerns, as the options give them or by the measured defaults; and every
// error the pass raises.
//
// RUN: attnc compile examples/alibi.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices" | filecheck %s
// RUN: attnc compile examples/alibi.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{mma_row_sum=0 staged_o=0 exp2_fma=3}" | filecheck %s --check-prefix=OPTIONS
// RUN: attnc compile examples/gemma2.attn -arch sm_90a --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices" | filecheck %s --check-prefix=GEMMA
// RUN: not attnc compile examples/alibi.attn -arch sm_100a --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices" 2>&1 | filecheck %s --check-prefix=SM100
// RUN: not attnc compile examples/alibi.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-kernel-choices" 2>&1 | filecheck %s --check-prefix=NOSYNC
// RUN: not attnc compile examples/alibi.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-kernel-choices" 2>&1 | filecheck %s --check-prefix=NOROLES
// RUN: not attnc compile examples/alibi.attn -arch sm_90a --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{lean_loads=1}" 2>&1 | filecheck %s --check-prefix=LEAN
// RUN: not attnc compile examples/alibi.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{exp2_fma=9223372036854775808}" 2>&1 | filecheck %s --check-prefix=RANGE
// RUN: not attnc compile examples/alibi.attn -arch sm_90a --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{qk_unroll=2}" 2>&1 | filecheck %s --check-prefix=UNROLL90
// RUN: not attnc compile examples/alibi.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{qk_unroll=3}" 2>&1 | filecheck %s --check-prefix=UNROLL3

// ALiBi on sm_80 (head dim 64, an affine score_mod, no LSE): row sums on the tensor cores,
// no lazy rescale below head dim 128, O staged through shared memory, the mask's bit test.
// CHECK: "attn.load"({{.*}}) {ahead = 0 : i64, early_first = false, lean = false, operand = "k"}
// CHECK: "attn.load"({{.*}}) {ahead = 0 : i64, lean = false, operand = "v"}
// CHECK: "attn.mma"({{.*}}) {kind = "qk", unroll = 1 : i64}
// CHECK: "attn.softmax_step"({{.*}}) {exp2_fma = 0 : i64}
// CHECK: "attn.rescale"({{.*}}) {lazy = false}
// CHECK: "attn.mma"({{.*}}) {kind = "pv", row_sum = true}
// CHECK: }) {interval_test = "bits", split = false}
// CHECK: "attn.store"({{.*}}) {operand = "o", staged = true}
// CHECK: }) {aligned_tiles = false, {{.*}}dead_rows = false, {{.*}}heads_first = false, {{.*}}min_ctas_per_sm = 0 : i64, min_ctas_unless_spills = false, {{.*}}q_blocks_per_cta = 1 : i64, {{.*}}run_ranges = false, {{.*}}small_grid = true, {{.*}}tail_waves = 0 : i64, {{.*}}tiles_last = false

// OPTIONS: "attn.softmax_step"({{.*}}) {exp2_fma = 3 : i64}
// OPTIONS: "attn.mma"({{.*}}) {kind = "pv", row_sum = false}
// OPTIONS: "attn.store"({{.*}}) {operand = "o", staged = false}

// Gemma-2 on sm_90a (the producer warpgroup's kernel with a score_mod): one of 8 exp2 on
// the FMA pipe, the lazy rescale at head dim 128, O stored from the registers.
// GEMMA: }) {name = "producer"
// GEMMA: "attn.softmax_step"({{.*}}) {exp2_fma = 1 : i64}
// GEMMA: "attn.rescale"({{.*}}) {lazy = true}
// GEMMA: "attn.store"({{.*}}) {operand = "o", staged = false}
// GEMMA: }) {name = "consumer0"

// SM100: alibi.attn:2:1: error: attn-kernel-choices records the choices of the sm_80 and sm_90a lowerings; attn-lower-sm100a takes none yet
// NOSYNC: alibi.attn:2:1: error: attn-kernel-choices needs the synchronization attn-insert-pipelines makes of attn.put; run attn-insert-pipelines first
// NOROLES: alibi.attn:2:1: error: attn-kernel-choices needs the role regions that attn-warp-specialize makes; run attn-warp-specialize first
// LEAN: alibi.attn:2:1: error: the sm_90a kernel cannot be built: lean_loads needs an sm_80 kernel whose key ranges come from a block map or a band
// RANGE: alibi.attn:2:1: error: option exp2_fma = 9223372036854775808 is out of range
// UNROLL90: --pass-pipeline:1:125: error: attn-kernel-choices: the sm_90a kernel cannot be built: qk_unroll=2: it rolls sm_80's QK^T k16 steps into a loop; sm_90a issues QK^T as one wgmma group (0 there)
// UNROLL3: --pass-pipeline:1:125: error: attn-kernel-choices: the sm_80 kernel cannot be built: qk_unroll=3 must divide 4 (k16 steps per smem page), or be 0
