// attn-lower-sm80: the sm_80 plan becomes a gpu.module with the FlashAttention-2
// kernel in upstream dialects, the cp.async groups of attn-insert-pipelines now
// explicit commit groups and waits, and the launch ABI recorded on the module.
//
// RUN: attnc compile examples/mha.attn -arch sm_80 --emit mlir | filecheck %s
// RUN: attnc compile examples/docs_sink.attn -arch sm_80 --emit mlir | filecheck %s --check-prefix=RUNS
// RUN: attnc compile examples/docs_sink.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-warp-specialize,attn-alloc-smem,attn-insert-pipelines,attn-kernel-choices{run_ranges=false},attn-lower-sm80" | filecheck %s --check-prefix=BLOCKMAP
// RUN: not attnc compile examples/mha.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-insert-pipelines,attn-lower-sm80,attn-lower-sm80" 2>&1 | filecheck %s --check-prefix=TWICE
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-insert-pipelines,attn-lower-sm80" 2>&1 | filecheck %s --check-prefix=NOSOURCE

// CHECK: module attributes {attn.filename = "examples/mha.attn", attn.source = "{{.*}}", gpu.container_module}
// CHECK: "attn.cp_async_commit"() {channel = "kv"}
// CHECK: gpu.module @attnc_kernels attributes {attn.kernels = "[{\22name\22: \22attn_fwd\22, \22symbol\22: \22attnc_mha_fwd\22
// CHECK: gpu.func @attnc_mha_fwd(
// CHECK-SAME: kernel
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.wait.group
// CHECK: nvvm.mma.sync
// CHECK: gpu.return

// The block map of a mask that reads params is a second kernel, launched first.
// RUNS: gpu.module @attnc_kernels attributes {attn.kernels = "[{\22name\22: \22qtiles\22{{.*}}{\22name\22: \22attn_fwd\22
// RUNS-NOT: @attnc_docs_sink_blockmap
// RUNS: gpu.func @attnc_docs_sink_fwd(
// RUNS-NOT: @attnc_docs_sink_blockmap
// RUNS: gpu.func @attnc_docs_sink_qtiles(
// RUNS-NOT: @attnc_docs_sink_blockmap
// BLOCKMAP: gpu.module @attnc_kernels attributes {attn.kernels = "[{\22name\22: \22qtiles\22{{.*}}{\22name\22: \22blockmap\22{{.*}}{\22name\22: \22attn_fwd\22
// BLOCKMAP-DAG: gpu.func @attnc_docs_sink_fwd(
// BLOCKMAP-DAG: gpu.func @attnc_docs_sink_blockmap(

// TWICE: examples/mha.attn:2:1: error: attn-lower-sm80 ran twice on this module
// IR with no .attn source (hand-written here): the lowering builds the kernel from the
// op's attributes and types alone (Note [The variant from the IR] in attnc/ir/kernel.py).
// NOSOURCE-NOT: error
// NOSOURCE: gpu.module @attnc_kernels attributes {attn.kernels = "[{\22name\22: \22attn_fwd\22, \22symbol\22: \22attnc_hd128_unmasked_fwd\22
// NOSOURCE: gpu.func @attnc_hd128_unmasked_fwd(
// NOSOURCE: nvvm.mma.sync

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
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("lower_sm80.attn":2:1)
  return %o : tensor<?x?x?x128xbf16>
}
