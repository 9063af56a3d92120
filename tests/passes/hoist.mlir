// attn-hoist: every value of the score_mod and mask hooks placed at the level of what it
// reads (`attn.level`: cta, row, col, score), or (hoist=false) every one per score; and the
// pass's error.
//
// The input is the L1 IR of examples/alibi.attn and examples/docs_sink.attn (below the checks).
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist" | filecheck %s
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-hoist" | filecheck %s --check-prefix=ALIBI
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-hoist{hoist=false}" | filecheck %s --check-prefix=OFF
// RUN: not attnc opt %s -arch sm_80 --pass-pipeline "attn-hoist" 2>&1 | filecheck %s --check-prefix=NOTILE
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-hoist" | filecheck %s --check-prefix=FLAT
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-hoist{flat=false}" | filecheck %s --check-prefix=NOFLAT
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-hoist,attn-hoist{flat=false}" | filecheck %s --check-prefix=NOFLAT
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-hoist{hoist=false flat=true}" 2>&1 | filecheck %s --check-prefix=BOTH
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-hoist" | filecheck %s --check-prefix=FLAT
// RUN: attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-hoist" | filecheck %s --check-prefix=NOLANES
// RUN: not attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-hoist{lanes=true}" 2>&1 | filecheck %s --check-prefix=ROWS
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-hoist{lanes=false}" | filecheck %s --check-prefix=NOLANES
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-hoist,attn-hoist{lanes=false}" | filecheck %s --check-prefix=NOLANES
// RUN: not attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-hoist{flat=false lanes=true}" 2>&1 | filecheck %s --check-prefix=NOBOUNDS

// documents + causal: a row's document id once per row, a column's once per column, the
// comparisons per score.
// CHECK-LABEL: func.func @docs_sink(
// CHECK: "attn.mask"
// CHECK: "attn.param"({{.*}}) {attn.level = "row"}
// CHECK-NEXT: "attn.param"({{.*}}) {attn.level = "col"}
// CHECK-NEXT: arith.cmpi eq, {{.*}} {attn.level = "score"}
// CHECK-NEXT: arith.cmpi sle, {{.*}} {attn.level = "score"}

// ALiBi: the head's slope once per CTA, j - i and what reads s per score.
// ALIBI-LABEL: func.func @alibi(
// ALIBI: "attn.score_mod"
// ALIBI: "attn.param"({{.*}}) {attn.level = "cta"}
// ALIBI: arith.subi {{.*}} {attn.level = "score"}
// ALIBI: arith.addf {{.*}} {attn.level = "score"}
// hoist=false: every value of both functions per score, none at a coarser level.
// OFF-NOT: attn.level = "{{cta|row|col}}"
// OFF: "attn.score_mod"
// OFF-NOT: attn.level = "{{cta|row|col}}"
// OFF: "attn.param"({{.*}}) {attn.level = "score"}
// OFF-NOT: attn.level = "{{cta|row|col}}"

// A bucket of d = j - i clamped to [-8, 8]: flat at and below -8, at and above 8 (Note
// [Flat diagonals]); ALiBi's bias, linear in d, is flat nowhere. flat=false records none,
// and drops those of an earlier run. attn.flat_lanes has the lanes share the diagonals
// near the bounds (Note [Diagonals across the warp]): sm_80's and sm_90a's default, not
// sm_100a's, whose threads hold rows of scores and refuse lanes=true; lanes=false drops it.
// FLAT-LABEL: func.func @alibi(
// FLAT-NOT: attn.flat_
// FLAT-LABEL: func.func @bucket(
// FLAT: "attn.score_mod"
// FLAT: arith.subi {{.*}} {attn.flat_above = 8 : i64, attn.flat_below = -8 : i64, attn.flat_lanes, attn.level = "score"}
// NOFLAT-NOT: attn.flat_
// NOLANES-LABEL: func.func @bucket(
// NOLANES: arith.subi {{.*}} {attn.flat_above = 8 : i64, attn.flat_below = -8 : i64, attn.level = "score"}
// NOLANES-NOT: attn.flat_lanes

// NOTILE: alibi.attn:2:1: error: attn-hoist places the values of the tile program's hooks; run attn-tile first

// BOTH: error: attn-hoist: flat=true: a tile beyond the flat diagonals computes their values once, and hoist=false computes every value per score; give one or the other

// ROWS: error: attn-hoist: lanes=true: a thread of sm_100a's kernel holds a row of scores, so its lanes have no diagonals to share; the lanes share them on sm_80 and sm_90a

// NOBOUNDS: error: attn-hoist: lanes=true: the lanes share the values of the diagonals near the flat ones, and there are none without flat (hoist=false or flat=false); give one or the other

// examples/alibi.attn and examples/docs_sink.attn as the frontend lowers them (L1), and a
// clamped bucket bias.
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

func.func @bucket(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>, %w: tensor<?x17xf32>) -> tensor<?x?x?x64xf16> {
  %o = "attn.attention"(%q, %k, %v) ({
  ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):
    %d = arith.subi %j, %i : i32
    %lo = arith.constant -8 : i32
    %hi = arith.constant 8 : i32
    %above = arith.maxsi %d, %lo : i32
    %clamped = arith.minsi %above, %hi : i32
    %bucket = arith.addi %clamped, %hi : i32
    %bias = "attn.param"(%w, %h, %bucket) : (tensor<?x17xf32>, i32, i32) -> f32
    %t = arith.addf %s, %bias : f32
    gpu.yield %t : f32
  }, {
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
    %true = arith.constant true
    gpu.yield %true : i1
  }, {
  ^bb0(%h: i32):
    %none = arith.constant 0xFF800000 : f32
    gpu.yield %none : f32
  }) {variant = "bucket", dtype = "f16", head_dim_qk = 64 : i64, head_dim_v = 64 : i64,
      scale = 1.250000e-01 : f32, dims = ["B", "H", "M", "N"], q_shape = ["B", "H", "M", 64],
      k_shape = ["B", "H", "N", 64], v_shape = ["B", "H", "N", 64], params = ["w"],
      param_shapes = [["H", 17]], param_dtypes = ["f32"], outputs = ["o"], gqa = false,
      has_score_mod = true, has_mask_mod = false, has_sink = false}
      : (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) -> tensor<?x?x?x64xf16> loc("bucket.attn":2:1)
  return %o : tensor<?x?x?x64xf16>
}
