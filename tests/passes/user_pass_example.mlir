// examples/passes/softcap_scores.py, the README's user pass: the ops it adds to the
// score_mod region, with their locations, and the errors it raises.
// RUN: attnc compile examples/alibi.attn --emit mlir --load-pass examples/passes/softcap_scores.py --pass-pipeline "softcap-scores{cap=20.0}" | filecheck %s
// RUN: not attnc compile examples/mha.attn --emit mlir --load-pass examples/passes/softcap_scores.py --pass-pipeline "softcap-scores" 2>&1 | filecheck %s --check-prefix=NOSCORE
// RUN: not attnc compile examples/alibi.attn --emit mlir --load-pass examples/passes/softcap_scores.py --pass-pipeline "softcap-scores{cap=-1.0}" 2>&1 | filecheck %s --check-prefix=BADCAP

// CHECK:      "attn.attention"
// CHECK:      %[[BIAS:.+]] = arith.mulf
// CHECK-NEXT: %[[S:.+]] = arith.addf %{{.+}}, %[[BIAS]] : f32 loc("examples/alibi.attn":7:32)
// CHECK-NEXT: %[[CAP:.+]] = arith.constant 2.000000e+01 : f32 loc("softcap-scores"("examples/alibi.attn":7:30))
// CHECK-NEXT: %[[X:.+]] = arith.divf %[[S]], %[[CAP]] : f32 loc("softcap-scores"("examples/alibi.attn":7:30))
// CHECK-NEXT: %[[T:.+]] = math.tanh %[[X]] : f32 loc("softcap-scores"("examples/alibi.attn":7:30))
// CHECK-NEXT: %[[Y:.+]] = arith.mulf %[[CAP]], %[[T]] : f32 loc("softcap-scores"("examples/alibi.attn":7:30))
// CHECK-NEXT: gpu.yield %[[Y]] : f32
// CHECK-NEXT: }, {

// NOSCORE:      examples/mha.attn:2:1: error: softcap-scores: this variant has no score_mod to cap; declare one, e.g. `score_mod(s, b, h, i, j) = s`
// NOSCORE-NEXT: attention mha {
// NOSCORE-NEXT: ^

// BADCAP:      --pass-pipeline:1:16: error: softcap-scores: cap=-1.0: expected a positive number
