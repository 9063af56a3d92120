// The `attn` dialect, defined once here and loaded into every Context by
// attnc/ir/context.py (`mlir.dialects.irdl.load_dialects`).
//
// IRDL ops have no custom syntax, so every attn op prints in MLIR's generic form
// ("attn.attention"(...) ({...}) {...} : (...) -> ...); FileCheck tests match that.
//
// Note [IRDL constraint variables bind once]
// An IRDL constraint SSA value is a variable: the first attribute or type it
// matches is bound, and every other use must be equal to it. So each attribute
// below has its own constraint, and a `variadic` operand list can only hold values
// of one type. This is why q, k and v are separate operands and why the `param`
// tensors (of differing shapes and dtypes) are not operands at all: see
// Note [Params are captured].
//
// Note [Region terminators]
// IRDL cannot give an op traits, so an IRDL-defined `attn.yield` could never be a
// terminator and MLIR's verifier rejects every block ending in it ("block with no
// terminator"). The hook regions therefore end in the upstream `gpu.yield`
// (Pure, ReturnLike, Terminator, no parent constraint), which returns the hook's
// value to the enclosing op. `attnc.ir.YIELD` names it for every pass.
//
// Note [Params are captured]
// A `param` tensor is a function argument (after q, k, v, in declaration order)
// that the hook regions read with `attn.param(%arg, %idx...)`; the regions capture
// it from the enclosing function (attn.attention is not isolated from above). The
// `params` attribute of attn.attention lists their names in argument order.
//
// L1 (written by attnc/frontend/lower.py):
//
//   func.func @NAME(%q, %k, %v, %params...) -> (o[, lse]) {
//     %o, %lse = "attn.attention"(%q, %k, %v) ({
//       ^bb0(%s: f32, %b: i32, %h: i32, %i: i32, %j: i32):   // score_mod
//         ... "gpu.yield"(%score) : (f32) -> ()
//     }, {
//       ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):             // mask_mod
//         ... "gpu.yield"(%keep) : (i1) -> ()
//     }, {
//       ^bb0(%h: i32):                                        // sink
//         ... "gpu.yield"(%sink) : (f32) -> ()
//     }) {variant, dtype, head_dim_qk, head_dim_v, scale, dims, q_shape, k_shape,
//         v_shape, params, param_shapes, param_dtypes, outputs, gqa,
//         has_score_mod, has_mask_mod, has_sink}
//     return %o, %lse
//   }
//
// L2 (attn-tile adds these as plain attributes of attn.attention):
//   target: string ("sm_80" | "sm_90a" | "sm_100a")
//   block_m, block_n, stages, num_warps, q_tiles: i64
// Attributes not listed in an `irdl.attributes` below are allowed, so later passes
// add theirs the same way.

irdl.dialect @attn {
  // The whole variant: S = scale * Q K^T, score_mod, mask_mod, softmax with the
  // sink, O = P V (and LSE). Results: o, then lse when the variant declares it.
  irdl.operation @attention {
    %q = irdl.base "!builtin.tensor"
    %k = irdl.base "!builtin.tensor"
    %v = irdl.base "!builtin.tensor"
    irdl.operands(q: %q, k: %k, v: %v)
    %o = irdl.base "!builtin.tensor"
    %lse = irdl.base "!builtin.tensor"
    irdl.results(o: %o, lse: optional %lse)

    %f32 = irdl.is f32
    %i32 = irdl.is i32
    %score_mod = irdl.region(%f32, %i32, %i32, %i32, %i32) with size 1
    %mask_mod = irdl.region(%i32, %i32, %i32, %i32) with size 1
    %sink = irdl.region(%i32) with size 1
    irdl.regions(score_mod: %score_mod, mask_mod: %mask_mod, sink: %sink)

    %variant = irdl.base "#builtin.string"
    %dtype = irdl.base "#builtin.string"
    %head_dim_qk = irdl.base "#builtin.integer"
    %head_dim_v = irdl.base "#builtin.integer"
    %scale = irdl.base "#builtin.float"
    %dims = irdl.base "#builtin.array"
    %q_shape = irdl.base "#builtin.array"
    %k_shape = irdl.base "#builtin.array"
    %v_shape = irdl.base "#builtin.array"
    %params = irdl.base "#builtin.array"
    %param_shapes = irdl.base "#builtin.array"
    %param_dtypes = irdl.base "#builtin.array"
    %outputs = irdl.base "#builtin.array"
    %gqa = irdl.base "#builtin.integer"
    %has_score_mod = irdl.base "#builtin.integer"
    %has_mask_mod = irdl.base "#builtin.integer"
    %has_sink = irdl.base "#builtin.integer"
    irdl.attributes {
      "variant" = %variant,
      "dtype" = %dtype,
      "head_dim_qk" = %head_dim_qk,
      "head_dim_v" = %head_dim_v,
      "scale" = %scale,
      "dims" = %dims,
      "q_shape" = %q_shape,
      "k_shape" = %k_shape,
      "v_shape" = %v_shape,
      "params" = %params,
      "param_shapes" = %param_shapes,
      "param_dtypes" = %param_dtypes,
      "outputs" = %outputs,
      "gqa" = %gqa,
      "has_score_mod" = %has_score_mod,
      "has_mask_mod" = %has_mask_mod,
      "has_sink" = %has_sink
    }
  }

  // A symbolic dim (a runtime integer such as N or P) read inside a hook.
  irdl.operation @dim {
    %name = irdl.base "#builtin.string"
    irdl.attributes { "name" = %name }
    %i32 = irdl.is i32
    irdl.results(value: %i32)
  }

  // One element of a `param` tensor: attn.param(%tensor, %idx0, ...) with one i32
  // index per dimension of the tensor. Each index is clamped into [0, size - 1]
  // of its dimension before the read, so no index is ever out of bounds (the
  // language's bounds-safe reads). The result has the tensor's element type.
  irdl.operation @param {
    %tensor = irdl.base "!builtin.tensor"
    %i32 = irdl.is i32
    irdl.operands(tensor: %tensor, indices: variadic %i32)
    %f32 = irdl.is f32
    %i32_value = irdl.is i32
    %element = irdl.any_of(%f32, %i32_value)
    irdl.results(value: %element)
  }

  // --- L3-L5: the schedule, as attribute-only ops placed after attn.attention in
  // its function, in the order the passes add them (attnc/passes/plan_ir.py).
  // L3 attn-warp-specialize: who runs what.
  irdl.operation @role {
    %name = irdl.base "#builtin.string"
    %warps = irdl.base "#builtin.array"
    %regs = irdl.base "#builtin.integer"
    %ops = irdl.base "#builtin.array"
    irdl.attributes { "name" = %name, "warps" = %warps, "regs" = %regs, "ops" = %ops }
  }
  // L3: a value crossing from a producer role to a consumer role in `stages` slots.
  irdl.operation @channel {
    %name = irdl.base "#builtin.string"
    %producer = irdl.base "#builtin.string"
    %consumer = irdl.base "#builtin.string"
    %transport = irdl.base "#builtin.string"
    %space = irdl.base "#builtin.string"
    %stages = irdl.base "#builtin.integer"
    %tile = irdl.base "#builtin.array"
    irdl.attributes { "name" = %name, "producer" = %producer, "consumer" = %consumer,
                      "transport" = %transport, "space" = %space, "stages" = %stages,
                      "tile" = %tile }
  }
  // L4 attn-alloc-smem / attn-alloc-tmem: where a channel's slots live.
  irdl.operation @buffer {
    %name = irdl.base "#builtin.string"
    %channel = irdl.base "#builtin.string"
    %space = irdl.base "#builtin.string"
    %offset = irdl.base "#builtin.integer"
    %size = irdl.base "#builtin.integer"
    %stages = irdl.base "#builtin.integer"
    %align = irdl.base "#builtin.integer"
    %swizzle = irdl.base "#builtin.string"
    irdl.attributes { "name" = %name, "channel" = %channel, "space" = %space,
                      "offset" = %offset, "size" = %size, "stages" = %stages,
                      "align" = %align, "swizzle" = %swizzle }
  }
  // L5 attn-insert-pipelines: how a channel is synchronized (cp.async groups,
  // mbarriers with arrive counts and transaction bytes, named barriers).
  irdl.operation @barrier {
    %name = irdl.base "#builtin.string"
    %channel = irdl.base "#builtin.string"
    %kind = irdl.base "#builtin.string"
    %stages = irdl.base "#builtin.integer"
    %arrive_count = irdl.base "#builtin.integer"
    // bytes per fill, in turn (Note [Bytes per fill] in attnc/schedule/sync.py): an
    // array of integers, or a single integer (as dumps before that note wrote it), which
    // reads as a list of one; attn-verify-pipeline names any other value.
    %tx_bytes = irdl.any
    %arrivers = irdl.base "#builtin.string"
    %waiters = irdl.base "#builtin.string"
    irdl.attributes { "name" = %name, "channel" = %channel, "kind" = %kind,
                      "stages" = %stages, "arrive_count" = %arrive_count,
                      "tx_bytes" = %tx_bytes, "arrivers" = %arrivers, "waiters" = %waiters }
  }
}
