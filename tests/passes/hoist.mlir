// attn-hoist: every value of the score_mod and mask hooks placed at the level of what it
// reads (`attn.level`: cta, row, col, score), or (hoist=false) every one per score; and the
// pass's error.
//
// RUN: attnc compile examples/docs_sink.attn -arch sm_80 --emit mlir --pass-pipeline "attn-tile,attn-analyze-masks,attn-hoist" | filecheck %s
// RUN: attnc compile examples/alibi.attn -arch sm_90a --emit mlir --pass-pipeline "attn-tile,attn-hoist" | filecheck %s --check-prefix=ALIBI
// RUN: attnc compile examples/alibi.attn -arch sm_90a --emit mlir --pass-pipeline "attn-tile,attn-hoist{hoist=false}" | filecheck %s --check-prefix=OFF --implicit-check-not='attn.level = "cta"' --implicit-check-not='attn.level = "row"' --implicit-check-not='attn.level = "col"' 
// RUN: not attnc compile examples/alibi.attn -arch sm_80 --emit mlir --pass-pipeline "attn-hoist" 2>&1 | filecheck %s --check-prefix=NOTILE

// documents + causal: a row's document id once per row, a column's once per column, the
// comparisons per score.
// CHECK: "attn.mask"
// CHECK: "attn.param"({{.*}}) {attn.level = "row"}
// CHECK-NEXT: "attn.param"({{.*}}) {attn.level = "col"}
// CHECK-NEXT: arith.cmpi eq, {{.*}} {attn.level = "score"}
// CHECK-NEXT: arith.cmpi sle, {{.*}} {attn.level = "score"}

// ALiBi: the head's slope once per CTA, j - i and what reads s per score.
// ALIBI: "attn.score_mod"
// ALIBI: "attn.param"({{.*}}) {attn.level = "cta"}
// ALIBI: arith.subi {{.*}} {attn.level = "score"}
// ALIBI: arith.addf {{.*}} {attn.level = "score"}
// OFF: "attn.score_mod"
// OFF: "attn.param"({{.*}}) {attn.level = "score"}

// NOTILE: alibi.attn:2:1: error: attn-hoist places the values of the tile program's hooks; run attn-tile first
