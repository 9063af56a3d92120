// attn-mask-kernels: the programs of the kernels that fill a tile table and a block map,
// just before the attention kernel that reads them (Notes [The block map's program] and
// [The tile table's program]); the options; the errors;
// the lowering's checks of the programs are tests/passes/test_mask_kernels.py's.
//
// The input is the L1 IR of examples/alibi.attn and examples/docs_sink.attn, and of a mask
// that reads a float param (below the checks).
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels" | filecheck %s
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels,attn-mask-kernels{groups=2 samples=false holds=false}" | filecheck %s --check-prefix=OPTS
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels{intervals=true}" 2>&1 | filecheck %s --check-prefix=NOINTERVALS
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels{intervals=false holds=true}" 2>&1 | filecheck %s --check-prefix=NOHOLDS
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-mask-kernels{groups=0}" 2>&1 | filecheck %s --check-prefix=GROUPS

// ALiBi's mask reads no param: no map, no program.
// CHECK-LABEL: func.func @alibi(
// CHECK-NOT: attn.{{map|table}}_kernel
// CHECK: "attn.kernel"

// documents + causal: the tile table's program (its ids' runs, then their tiles or the
// grid's, then the entries past them); the map's reads the table as the attention kernel
// does, and classifies every key block of the tile with every step, the conjuncts held
// included.
// CHECK-LABEL: func.func @docs_sink(
// CHECK: "attn.table_kernel"() ({
// CHECK-NEXT: ^bb0(%[[TB:.*]]: i32 {{.*}}, %[[TH:.*]]: i32 {{.*}}):
// CHECK-NEXT: %[[RUNS:.*]]:2 = "attn.id_runs"(%[[TB]], %[[TH]]) {param = "doc"}
// CHECK-NEXT: %[[USED:.*]] = scf.if %[[RUNS]]#0 -> (i32) {
// CHECK-NEXT: "attn.table_runs"(%[[TB]], %[[TH]], %[[RUNS]]#1)
// CHECK-NEXT: "attn.table_order"(%[[TB]], %[[TH]], %[[RUNS]]#1)
// CHECK-NEXT: scf.yield %[[RUNS]]#1 : i32
// CHECK-NEXT: } else {
// CHECK-NEXT: %[[GRID:.*]] = "attn.table_grid"(%[[TB]], %[[TH]])
// CHECK-NEXT: scf.yield %[[GRID]] : i32
// CHECK: "attn.table_rest"(%[[TB]], %[[TH]], %[[USED]])
// CHECK: "attn.map_kernel"() ({
// CHECK-NEXT: ^bb0(%[[B:.*]]: i32 {{.*}}, %[[H:.*]]: i32 {{.*}}, %[[M:.*]]: i32 {{.*}}):
// CHECK-NEXT: "attn.tile_table_read"(%[[B]], %[[H]], %[[M]]) {param = "doc"}
// CHECK: "attn.dim"() {name = "N"}
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT: %[[BYTE:.*]] = "attn.classify"(%[[B]], %[[H]], %[[M]], %[[K]]) {holds = true, intervals = true, samples = true}
// CHECK-NEXT: "attn.map_store"(%[[BYTE]], %[[B]], %[[H]], %[[M]], %[[K]])
// CHECK: gpu.yield
// CHECK-NEXT: }) {groups = 4 : i64} : () -> () loc("attn-mask-kernels"("docs_sink.attn":2:1))
// CHECK-NEXT: "attn.kernel"
// CHECK: "attn.block_map_read"

// A float param: no interval step (the evaluator does not model floats), so no conjuncts
// held; no ids compared, so no table.
// CHECK-LABEL: func.func @floats(
// CHECK-NOT: attn.table_kernel
// CHECK: "attn.classify"({{.*}}) {holds = false, intervals = false, samples = true}

// A second run replaces the programs, the map's with the options.
// OPTS-LABEL: func.func @docs_sink(
// OPTS: "attn.table_kernel"
// OPTS-NOT: "attn.table_kernel"
// OPTS: "attn.classify"({{.*}}) {holds = false, intervals = true, samples = false}
// OPTS: {asked = "holds=false samples=false groups=2", groups = 2 : i64}
// OPTS-NOT: "attn.map_kernel"
// OPTS: "attn.kernel"

// NOINTERVALS: floats.attn:2:1: error: attn-mask-kernels: intervals = true, but the mask has 'attn.param' (tensor<?x?xf32>, i32, i32 -> f32), which the interval step does not model
// NOHOLDS: docs_sink.attn:2:1: error: attn-mask-kernels: holds = true needs the interval and sample steps and a mask with a row interval and another conjunct
// GROUPS: --pass-pipeline:1:48: error: attn-mask-kernels: groups=0: a CTA takes at least one group

// examples/alibi.attn and examples/docs_sink.attn as the frontend lowers them (L1), and a
// mask on a float param.
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

func.func @docs_sink(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %doc: tensor<?x?xi32>, %sinks: tensor<?xf32>) -> tensor<?x?x?x64xbf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %doc_i = "attn.param"(%doc, %b, %i) : (tensor<?x?xi32>, i32, i32) -> i32
    %doc_j = "attn.param"(%doc, %b, %j) : (tensor<?x?xi32>, i32, i32) -> i32
    %same = arith.cmpi eq, %doc_i, %doc_j : i32
    %causal = arith.cmpi sle, %j, %i : i32
    %keep = arith.andi %same, %causal : i1
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %sink = "attn.param"(%sinks, %h) : (tensor<?xf32>, i32) -> f32
    gpu.yield %sink : f32
  }) {variant = "docs_sink", dtype = "bf16", head_dim_qk = 64 : i64, head_dim_v = 64 : i64,
      scale = 1.250000e-01 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 64],
      k_shape = ["B", "H", "N", 64], v_shape = ["B", "H", "N", 64], params = ["doc", "sinks"],
      param_shapes = [["B", "N"], ["H"]], param_dtypes = ["i32", "f32"], outputs = ["o"], gqa = false,
      has_score_mod = false, has_mask_mod = true, has_sink = true}
      : (tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>) -> tensor<?x?x?x64xbf16> loc("docs_sink.attn":2:1)
  return %o : tensor<?x?x?x64xbf16>
}

func.func @floats(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>, %t: tensor<?x?xf32>) -> tensor<?x?x?x64xf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    gpu.yield %s : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %t_j = "attn.param"(%t, %b, %j) : (tensor<?x?xf32>, i32, i32) -> f32
    %half = arith.constant 5.000000e-01 : f32
    %keep = arith.cmpf ogt, %t_j, %half : f32
    gpu.yield %keep : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "floats", dtype = "f16", head_dim_qk = 64 : i64, head_dim_v = 64 : i64,
      scale = 1.250000e-01 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 64],
      k_shape = ["B", "H", "N", 64], v_shape = ["B", "H", "N", 64], params = ["t"],
      param_shapes = [["B", "N"]], param_dtypes = ["f32"], outputs = ["o"], gqa = false,
      has_score_mod = false, has_mask_mod = true, has_sink = false}
      : (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) -> tensor<?x?x?x64xf16> loc("floats.attn":2:1)
  return %o : tensor<?x?x?x64xf16>
}
