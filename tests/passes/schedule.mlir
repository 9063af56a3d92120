// attn-warp-specialize, attn-alloc-smem, attn-alloc-tmem and attn-insert-pipelines:
// the same four passes lay out the sm_80 recipe (one cooperative role, cp.async
// queue), a two-role producer/consumer plan with an mbarrier ring (sm_90a with one
// consumer warpgroup) and the 16-warp sm_100a recipe with tensor memory.
//
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines" | filecheck %s --check-prefix=SM80
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile{num_warps=8 block_m=64 block_n=128 stages=2},attn-warp-specialize{consumers=1},attn-alloc-smem,attn-insert-pipelines" | filecheck %s --check-prefix=RING
// RUN: attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines" | filecheck %s --check-prefix=SM100

// SM80: "attn.kernel"
// SM80: "attn.role"() {name = "compute", ops = [{{.*}}], regs = 0 : i64, warps = [0, 1, 2, 3]}
// SM80-NEXT: "attn.channel"() {{{.*}}consumer = "compute", name = "q", producer = "compute", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async"}
// SM80-NEXT: "attn.channel"() {{{.*}}name = "kv"{{.*}}stages = 2 : i64, tile = ["k", "v"], transport = "cp.async"}
// SM80-NEXT: "attn.buffer"() {align = 128 : i64, channel = "q", name = "sQ", offset = 0 : i64, size = 32768 : i64, space = "smem", stages = 1 : i64, swizzle = "xor128B"}
// SM80-NEXT: "attn.buffer"() {align = 128 : i64, channel = "kv", name = "sK", offset = 32768 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, swizzle = "xor128B"}
// SM80-NEXT: "attn.buffer"() {align = 128 : i64, channel = "kv", name = "sV", offset = 65536 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, swizzle = "xor128B"}
// SM80-NOT: space = "tmem"
// SM80: "attn.barrier"() {{{.*}}kind = "cp.async.group", name = "cp_async_q", stages = 1 : i64, tx_bytes = [32768]
// SM80-NEXT: "attn.barrier"() {{{.*}}kind = "cp.async.group", name = "cp_async_kv", stages = 2 : i64, tx_bytes = [32768]
// SM80-NOT: mbarrier

// Two roles: a producer warpgroup and one consumer warpgroup, with setmaxnreg budgets.
// RING: "attn.role"() {name = "producer", ops = ["load_q", "load_kv", "store_o"], regs = 24 : i64, warps = [0, 1, 2, 3]}
// RING-NEXT: "attn.role"() {name = "consumer0", ops = [{{.*}}], regs = 240 : i64, warps = [4, 5, 6, 7]}
// RING-NOT: "attn.role"
// RING: "attn.channel"() {{{.*}}consumer = "consumer0", name = "kv", producer = "producer", space = "smem", stages = 2 : i64, tile = ["k", "v"], transport = "tma"}
// RING: "attn.buffer"() {{{.*}}name = "sK"{{.*}}size = 65536 : i64, space = "smem", stages = 2 : i64
// RING: "attn.buffer"() {{{.*}}alias_of = "sQ"{{.*}}name = "sO"
// The ring: one full barrier per slot armed with the slot's bytes by one producer
// arrive, one empty barrier per slot released by the consumer's 4 warps.
// RING: "attn.barrier"() {arrive_count = 1 : i64, arrivers = "producer", channel = "kv", kind = "mbarrier", name = "mbar_kv_full", stages = 2 : i64, tx_bytes = [65536], waiters = "consumer0"}
// RING-NEXT: "attn.barrier"() {arrive_count = 4 : i64, arrivers = "consumer0", channel = "kv", kind = "mbarrier", name = "mbar_kv_empty", stages = 2 : i64, tx_bytes = [0], waiters = "producer"}

// SM100-COUNT-7: "attn.role"
// SM100: "attn.buffer"() {{{.*}}name = "sKV"{{.*}}size = 98304 : i64, space = "smem", stages = 3 : i64
// SM100: "attn.buffer"() {{{.*}}name = "tS0", offset = 0 : i64, size = 128 : i64, space = "tmem"
// SM100-NEXT: "attn.buffer"() {alias_of = "tS0"{{.*}}name = "tP0", offset = 64 : i64, size = 64 : i64, space = "tmem"
// SM100: "attn.buffer"() {{{.*}}name = "tO1", offset = 384 : i64, size = 128 : i64, space = "tmem"
// The K, V ring announces each fill's bytes in turn (Note [Bytes per fill]): K's, then V's.
// SM100: "attn.barrier"() {arrive_count = 1 : i64, arrivers = "load", channel = "kv", kind = "mbarrier", name = "mbar_kv_full", stages = 3 : i64, tx_bytes = [32768, 32768], waiters = "mma"}
// SM100: "attn.barrier"() {arrive_count = 1 : i64, arrivers = "mma", channel = "s0", kind = "mbarrier", name = "mbar_s0_full"
// SM100-NEXT: "attn.barrier"() {arrive_count = 4 : i64, arrivers = "softmax0", channel = "s0", kind = "mbarrier", name = "mbar_s0_empty"

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
      : (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> loc("schedule.attn":2:1)
  return %o : tensor<?x?x?x128xbf16>
}
