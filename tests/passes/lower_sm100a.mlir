// attn-lower-sm100a: the sm_100a plan becomes a gpu.module holding the FlashAttention-4-style
// kernel, every op of every role lowered as it stands (Note [The sm_100a kernel, op by op] in
// attnc/backend/sm100a.py), and the launch ABI (tensor maps of q, k, v and o) on the module.
//
// The input is examples/mqa.attn's L1 IR (below the checks).
// RUN: attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-verify-pipeline,attn-lower-sm100a" | filecheck %s
// The pass lowers one attn.attention per module, and the block map needs a mask that reads
// params: examples/docs_sink.attn is compiled from its source (with the map, not its runs).
// RUN: attnc compile examples/docs_sink.attn -arch sm_100a --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-hoist,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-kernel-choices{run_ranges=0},attn-lower-sm100a" 2>&1 | filecheck %s --check-prefix=MAP
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-insert-pipelines,attn-lower-sm100a" 2>&1 | filecheck %s --check-prefix=OTHER
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-lower-sm100a,attn-lower-sm100a" 2>&1 | filecheck %s --check-prefix=TWICE
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-lower-sm100a" 2>&1 | filecheck %s --check-prefix=NOTILE
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-lower-sm100a" 2>&1 | filecheck %s --check-prefix=NOROLES

// The plan stays; the kernel is added beside it.
// CHECK: "attn.tcgen05_commit"
// CHECK: gpu.module @attnc_kernels attributes {attn.kernels = "[{\22name\22: \22attn_fwd\22, \22symbol\22: \22attnc_mqa_fwd\22, \22block\22: [512, 1, 1]
// CHECK-SAME: \22kind\22: \22tensor_map\22, \22tensor\22: \22q\22, \22box\22: [1, 1, 128, 64], \22swizzle\22: 128
// CHECK: gpu.func @attnc_mqa_fwd(%arg0: !llvm.ptr {llvm.align = 64 : i64}
// CHECK-SAME: attn.tensor_maps = [0, 1, 2, 3]{{.*}}nvvm.minctasm = 1
// The MMA warp allocates tensor memory; each warpgroup sets its plan's register budget.
// CHECK: tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [$0], 512
// CHECK: setmaxnreg.inc.sync.aligned.u32 200
// CHECK: tcgen05.ld.sync.aligned.32x32b.x32.b32
// CHECK: setmaxnreg.dec.sync.aligned.u32 64
// The correction warpgroup writes O's rows swizzled for TMA, and stores each row's LSE.
// CHECK: fence.proxy.async.shared::cta
// CHECK: st.global.f32
// CHECK: setmaxnreg.dec.sync.aligned.u32 48
// CHECK: tcgen05.mma.cta_group::1.kind::f16 [$1], $2, $3, $4, acc
// CHECK: tcgen05.mma.cta_group::1.kind::f16 [$1], [$2], $3, $4, acc
// CHECK: tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64
// CHECK: cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// The epilogue warp stores O through TMA and waits until it was read before releasing its slot.
// CHECK: cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group
// CHECK: cp.async.bulk.wait_group.read 0
// CHECK: tcgen05.dealloc.cta_group::1.sync.aligned.b32 $0, 512

// A mask that reads params: the block map's kernel first, whose scratch the attention kernel
// reads its ranges from (Note [Block map on sm_100a]); comparing document ids, after the tile
// table's, whose tiles both take (Note [Tile table on sm_100a]).
// MAP: "attn.block_map_read"
// MAP: gpu.module @attnc_kernels attributes {attn.kernels = "[{\22name\22: \22qtiles\22
// MAP-SAME: {\22name\22: \22blockmap\22
// MAP-SAME: {\22name\22: \22attn_fwd\22
// MAP-SAME: \22kind\22: \22scratch\22, \22name\22: \22blockmap\22
// MAP-SAME: \22kind\22: \22scratch\22, \22name\22: \22qtiles\22
// MAP: gpu.func @attnc_docs_sink_fwd(
// MAP: redux.sync
// MAP: gpu.func @attnc_docs_sink_blockmap(
// MAP: gpu.func @attnc_docs_sink_qtiles(
// OTHER: mqa.attn:2:1: error: attn-lower-sm100a lowers sm_100a plans; this one is for sm_90a: use attn-lower-sm90a
// TWICE: mqa.attn:2:1: error: attn-lower-sm100a ran twice on this module
// NOTILE: mqa.attn:2:1: error: attn-lower-sm100a needs the 'block_m' attribute that attn-tile records; run attn-tile first
// NOROLES: mqa.attn:2:1: error: attn-lower-sm100a needs the role regions that attn-warp-specialize makes; run attn-warp-specialize first

// examples/mqa.attn as the frontend lowers it (L1).
func.func @mqa(%q: tensor<?x?x?x128xf16>, %k: tensor<?x1x?x128xf16>, %v: tensor<?x1x?x128xf16>) -> (tensor<?x?x?x128xf16>, tensor<?x?x?xf32>) {
  %o, %lse = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %keep = arith.cmpi sle, %j, %i : i32
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "mqa", dtype = "f16", head_dim_qk = 128 : i64, head_dim_v = 128 : i64,
      scale = 0.0883883461 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 128],
      k_shape = ["B", 1, "N", 128], v_shape = ["B", 1, "N", 128], params = [],
      param_shapes = [], param_dtypes = [], outputs = ["o", "lse"], gqa = true,
      has_score_mod = false, has_mask_mod = true, has_sink = false}
      : (tensor<?x?x?x128xf16>, tensor<?x1x?x128xf16>, tensor<?x1x?x128xf16>) -> (tensor<?x?x?x128xf16>, tensor<?x?x?xf32>) loc("mqa.attn":2:1)
  return %o, %lse : tensor<?x?x?x128xf16>, tensor<?x?x?xf32>
}
