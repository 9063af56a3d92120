// attn-lower-sm90a: the sm_90a plan becomes a gpu.module with the kernel its roles say --
// a producer warpgroup loading into an mbarrier ring that two consumer warpgroups read,
// with their setmaxnreg budgets (the default at head dim 128), or one cooperative role that
// loads with cp.async groups (producer=0) -- its GEMMs wgmma from shared memory, and the
// launch ABI on the module; and the pass's errors.
//
// The input is a plain head-dim-128 attention (L1, below the checks).
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a" | filecheck %s
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize{producer=0},attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a" | filecheck %s --check-prefix=COOP
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize{producer=0},attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a" | filecheck %s --check-prefix=COOPNOT
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a,attn-lower-sm90a" 2>&1 | filecheck %s --check-prefix=TWICE
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-lower-sm90a" 2>&1 | filecheck %s --check-prefix=SM80
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-lower-sm90a" 2>&1 | filecheck %s --check-prefix=SM100
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-lower-sm90a" 2>&1 | filecheck %s --check-prefix=NOTILE
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-lower-sm90a" 2>&1 | filecheck %s --check-prefix=NOROLES
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-lower-sm90a" 2>&1 | filecheck %s --check-prefix=NOOVERLAP
// Two query blocks per CTA are sm_80's (Note [Two query blocks in the IR]): refused at the option.
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize{q_blocks_per_cta=2},attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,attn-verify-pipeline,attn-kernel-choices,attn-lower-sm90a" 2>&1 | filecheck %s --check-prefix=QBLOCKS
// Choices the producer warpgroup's kernel cannot take: attn-kernel-choices checks its options
// against the kernel attn-lower-sm90a would build, and refuses them first.
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,attn-verify-pipeline,attn-kernel-choices{heads_first=1},attn-lower-sm90a" 2>&1 | filecheck %s --check-prefix=HEADS
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-overlap-gemms,attn-verify-pipeline,attn-kernel-choices{mma_row_sum=1},attn-lower-sm90a" 2>&1 | filecheck %s --check-prefix=ROWSUM

// The producer warpgroup's kernel: 384 threads; the producer gives up registers and copies
// K/V with cp.async, reporting each tile on its full mbarrier; the consumers take registers,
// wait on the ring, run wgmma groups and release the slot.
// CHECK: }) {name = "producer"
// CHECK: gpu.module @attnc_kernels attributes {attn.kernels = "[{\22name\22: \22attn_fwd\22, \22symbol\22: \22attnc_hd128_unmasked_fwd\22, \22block\22: [384, 1, 1]
// CHECK-SAME: \22producer_warpgroup\22: true
// CHECK: gpu.func @attnc_hd128_unmasked_fwd(
// CHECK-SAME: kernel
// CHECK: mbarrier.init.shared::cta.b64
// CHECK: setmaxnreg.dec.sync.aligned.u32 24
// CHECK: cp.async.cg.shared.global
// CHECK: cp.async.mbarrier.arrive.noinc.shared::cta.b64
// CHECK: setmaxnreg.inc.sync.aligned.u32 240
// CHECK: mbarrier.try_wait.parity.shared::cta.b64
// CHECK: wgmma.fence.sync.aligned
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK: wgmma.commit_group.sync.aligned
// CHECK: wgmma.wait_group.sync.aligned
// CHECK: mbarrier.arrive.shared::cta.b64
// CHECK: gpu.return

// producer=0: one cooperative role of 256 threads that loads with cp.async groups and
// waits on them before its wgmma groups; no mbarrier, no setmaxnreg.
// COOP: }) {name = "compute"
// COOP: gpu.module @attnc_kernels attributes {attn.kernels = "[{\22name\22: \22attn_fwd\22, \22symbol\22: \22attnc_hd128_unmasked_fwd\22, \22block\22: [256, 1, 1]
// COOP-SAME: \22producer_warpgroup\22: false
// COOP: gpu.func @attnc_hd128_unmasked_fwd(
// COOP: cp.async.cg.shared.global
// COOP: nvvm.cp.async.commit.group
// COOP: nvvm.cp.async.wait.group
// COOP: wgmma.fence.sync.aligned
// COOP: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// COOP: wgmma.commit_group.sync.aligned
// COOP: gpu.return
// Its own run, so that one -NOT spans the whole kernel body.
// COOPNOT: gpu.func @attnc_hd128_unmasked_fwd(
// COOPNOT-NOT: {{mbarrier|setmaxnreg}}
// COOPNOT: gpu.return

// TWICE: lower_sm90a.attn:2:1: error: attn-lower-sm90a ran twice on this module
// SM80: lower_sm90a.attn:2:1: error: attn-lower-sm90a lowers sm_90a plans; this one is for sm_80: use attn-lower-sm80
// SM100: lower_sm90a.attn:2:1: error: attn-lower-sm90a lowers sm_90a plans; this one is for sm_100a: use attn-lower-sm100a
// NOTILE: lower_sm90a.attn:2:1: error: attn-lower-sm90a needs the 'block_m' attribute that attn-tile records; run attn-tile first
// NOROLES: lower_sm90a.attn:2:1: error: attn-lower-sm90a needs the role regions that attn-warp-specialize makes; run attn-warp-specialize first
// NOOVERLAP: lower_sm90a.attn:2:1: error: attn-lower-sm90a builds the KV steps of sm_90a's consumer warpgroups and of its cooperative role with their GEMMs overlapped
// NOOVERLAP-SAME: role 'consumer0' has them one after the other: run attn-overlap-gemms after attn-insert-pipelines
// QBLOCKS: --pass-pipeline:1:62: error: attn-warp-specialize: q_blocks_per_cta=2: two query blocks per CTA are sm_80's cooperative kernel's; sm_90a's CTAs run one
// HEADS: error: attn-kernel-choices: heads_first=true: the sm_90a kernel cannot be built: heads_first needs a kernel with one query block per CTA and no producer warpgroup
// ROWSUM: error: attn-kernel-choices: mma_row_sum=true: the sm_90a kernel cannot be built: mma_row_sum sums P on mma.sync, an sm_80 kernel's P.V, not sm_90a's

// A plain attention (no hooks) at head dim 128, bf16, as the frontend lowers it (L1).
func.func @hd128_unmasked(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %true = arith.constant true
    gpu.yield %true : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "hd128_unmasked", dtype = "bf16", head_dim_qk = 128 : i64, head_dim_v = 128 : i64,
      scale = 0.0883883461 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 128],
      k_shape = ["B", "H", "N", 128], v_shape = ["B", "H", "N", 128], params = [],
      param_shapes = [], param_dtypes = [], outputs = ["o"], gqa = false,
      has_score_mod = false, has_mask_mod = false, has_sink = false}
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("lower_sm90a.attn":2:1)
  return %o : tensor<?x?x?x128xbf16>
}
