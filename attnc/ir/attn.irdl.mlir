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
// L2, the tile program (attn-tile builds it, attn-analyze-masks splits its KV loop;
// builders and readers in attnc/ir/tiles.py and attnc/ir/kernel.py). attn-tile
// replaces attn.attention by one attn.kernel with the same operands, results and L1
// attributes plus the tile choice (target: string; block_m, block_n, stages,
// num_warps, q_tiles: i64), whose one region is what one CTA runs for its query
// block of batch b and head h. Values are tiles: !attn.tile<[rows, cols], element,
// "space">, space one of "global", "smem", "reg", "tmem" (rows only for a row
// vector such as the running max). The hook regions move onto the ops that run
// them (score_mod, mask, finalize's sink):
//
//   %o, %lse = "attn.kernel"(%q, %k, %v) ({
//   ^bb0(%b: i32, %h: i32, %m_block: i32):
//     %q_tile = "attn.load"(%q, %b, %h, %m_block) {operand = "q"} -> tile<[128, 128], bf16, "smem">
//     %m0 = "attn.fill"() {value = -inf} -> tile<[128], f32, "reg">    (and %l0 = 0, %acc0 = 0)
//     %r:3 = scf.for %t = %lo to %hi step %c1 iter_args(%m = %m0, %l = %l0, %acc = %acc0) {
//       %n = arith.subi %top, %t                                       key block of step t, top down
//       %k_tile = "attn.load"(%k, %b, %h, %n) {operand = "k"}
//       %s = "attn.mma"(%q_tile, %k_tile) {kind = "qk"}               S = Q K^T
//       %s1 = "attn.score_mod"(%s, %b, %h, %m_block, %n) ({score_mod region})
//       %s2 = "attn.mask"(%s1, %b, %h, %m_block, %n) ({mask_mod region})
//       %p, %m1, %l1, %alpha = "attn.softmax_step"(%s2, %m, %l)
//       %acc1 = "attn.rescale"(%acc, %alpha)
//       %v_tile = "attn.load"(%v, %b, %h, %n) {operand = "v"}
//       %acc2 = "attn.mma"(%p, %v_tile, %acc1) {kind = "pv"}            O += P V
//       scf.yield %m1, %l1, %acc2
//     }
//     %o_tile, %lse_tile = "attn.finalize"(%r#2, %r#0, %r#1, %h) ({sink region})
//     "attn.store"(%o_tile, %b, %h, %m_block) {operand = "o"}   (and "lse")
//     "gpu.yield"() : () -> ()
//   }) {...L1 attributes..., target, block_m, block_n, stages, num_warps, q_tiles}
//
// With q_tiles = T > 1 (sm_100a's two) the CTA's query block is T Q tiles of block_m
// rows: each tile's Q load, running max, sum and O, and the ops on them, carry
// `q_tile = t` (rows [(m_block T + t) block_m, + block_m)); each K and V is loaded once
// a step for every tile, and every tile's S = Q K^T comes before any tile's softmax.
// The mask analysis and kv_range are for the whole query block of T block_m rows.
//
// attn-tile's loop runs over [0, cdiv(N, block_n)) from the top block down with the
// mask op where the variant has a mask_mod. attn-analyze-masks reads the ranges from an
// attn.kv_range op (a call of its @NAME_kv_range function) and replaces that loop by,
// per segment from the highest, a loop over the mixed blocks above the fully kept ones
// (with attn.mask), one over the fully kept ones (without), and one over the mixed ones
// below them; a mask that reads params takes its range from the block map's row
// instead (attn.block_map_range: one segment; on sm_100a where the analysis gives
// one), reads its block map in the mixed loops (attn.block_map_read, whose class the
// mask op takes as a last operand) and, for document ids, the tile table at the top
// (attn.tile_table_read). attn-mask-kernels then
// writes the programs of the kernels that fill them just before the attn.kernel
// (attn.table_kernel and attn.map_kernel, below).
//
// L3-L5 (attn-warp-specialize, attn-alloc-smem/-tmem, attn-insert-pipelines; builders and
// readers in attnc/ir/roles.py): the kernel's region becomes one attn.warp_specialize
// whose block declares the channels (!attn.chan values: name, producer and consumer
// roles, transport, stages, tiles and their types; at L4 their `buffers`) and holds one
// attn.role region per role (name, warps, regs). Tiles cross roles only by attn.put /
// attn.get on a channel (L3); attn-insert-pipelines declares the mbarriers beside the
// channels (!attn.mbar values) and replaces each put/get by slot writes and reads with
// mbarrier waits, arrives, expect_tx, cp.async arrivals, tcgen05 commits, cp.async
// groups or named barriers, each ring's (stage, phase) i32 pair carried by the roles'
// loops (L5):
//
//   "attn.warp_specialize"() ({
//     %kv = "attn.channel"() {name = "kv", producer = "producer", consumer = "consumer0", ...}
//     %k_full = "attn.mbarrier_init"() {name = "mbar_k_full", count = 128, stages = 2, tile = "k", ...}
//     "attn.role"() ({
//       %r:2 = scf.for ... iter_args(%stage = %c0, %phase = %c0) {
//         "attn.mbarrier_wait"(%k_empty, %stage, %phase ^ 1)
//         "attn.slot_write"(%kv, %stage, %k_tile) {completes = "arrive"}
//         "attn.cp_async_mbarrier_arrive"(%k_full, %stage); ... "attn.ring_advance"(%stage, %phase) }
//     }) {name = "producer", warps = [0, 1, 2, 3], regs = 24}
//     "attn.role"() ({ ... }) {name = "consumer0", ...}
//   })
//
// Attributes not listed in an `irdl.attributes` below are allowed, so later passes
// add theirs the same way (mask_kind, tile_class_fn, kv_range_fn, kv_segments, ...).

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

  // --- L2: the tile program -----------------------------------------------------
  // A tile: [rows, cols] (or [rows] for a row vector) of `element` in `space`
  // ("global", "smem", "reg" or "tmem").
  irdl.type @tile {
    %shape = irdl.base "#builtin.array"
    %element = irdl.any
    %space = irdl.base "#builtin.string"
    irdl.parameters(shape: %shape, element: %element, space: %space)
  }

  // The CTA's program for query block %m_block of batch %b and head %h (region
  // arguments), replacing attn.attention after attn-tile: the same operands,
  // results and L1 attributes, plus the tile choice (with its `num_warps` and K/V
  // `stages`, which attn-warp-specialize moves onto the roles and channels: not listed
  // here; Note [Sizes the plan states] in attnc/passes/warp_specialize.py).
  irdl.operation @kernel {
    %q = irdl.base "!builtin.tensor"
    %k = irdl.base "!builtin.tensor"
    %v = irdl.base "!builtin.tensor"
    irdl.operands(q: %q, k: %k, v: %v)
    %o = irdl.base "!builtin.tensor"
    %lse = irdl.base "!builtin.tensor"
    irdl.results(o: %o, lse: optional %lse)
    %i32 = irdl.is i32
    %body = irdl.region(%i32, %i32, %i32) with size 1
    irdl.regions(body: %body)
    %variant = irdl.base "#builtin.string"
    %dtype = irdl.base "#builtin.string"
    %scale = irdl.base "#builtin.float"
    %dims = irdl.base "#builtin.array"
    %params = irdl.base "#builtin.array"
    %outputs = irdl.base "#builtin.array"
    %target = irdl.base "#builtin.string"
    %block_m = irdl.base "#builtin.integer"
    %block_n = irdl.base "#builtin.integer"
    %q_tiles = irdl.base "#builtin.integer"
    irdl.attributes {
      "variant" = %variant, "dtype" = %dtype, "scale" = %scale, "dims" = %dims,
      "params" = %params, "outputs" = %outputs, "target" = %target,
      "block_m" = %block_m, "block_n" = %block_n,
      "q_tiles" = %q_tiles
    }
  }

  // A tile of q, k or v (`operand`) at the block coordinates (b, h, block index). With
  // `ahead` (sm_80's cooperative role, L3 on): the K or V of the key block `ahead` KV steps
  // after the step of that block index, none past the last step (Note [cp.async prefetch]
  // in attnc/schedule/prefetch.py).
  irdl.operation @load {
    %source = irdl.base "!builtin.tensor"
    %i32 = irdl.is i32
    irdl.operands(source: %source, coords: variadic %i32)
    %operand = irdl.base "#builtin.string"
    irdl.attributes { "operand" = %operand }
    %tile = irdl.base @attn::@tile
    irdl.results(tile: %tile)
  }

  // A tile whose every element is `value` (the running max, sum and O at the start).
  irdl.operation @fill {
    %value = irdl.base "#builtin.float"
    irdl.attributes { "value" = %value }
    %tile = irdl.base @attn::@tile
    irdl.results(tile: %tile)
  }

  // kind "qk": S = A B^T (Q K^T); kind "pv": acc + A B (O += P V). With `async` (L5, sm_90a's
  // overlapped consumers: a wgmma group) the result is in flight until an attn.mma_wait
  // lands it, and the shared-memory operands are read until then.
  irdl.operation @mma {
    %a = irdl.base @attn::@tile
    %b = irdl.base @attn::@tile
    %acc = irdl.base @attn::@tile
    irdl.operands(a: %a, b: %b, acc: optional %acc)
    %kind = irdl.base "#builtin.string"
    irdl.attributes { "kind" = %kind }
    %result = irdl.base @attn::@tile
    irdl.results(result: %result)
  }

  // The score_mod hook on every score of S; coords: b, h, m_block, n_block.
  irdl.operation @score_mod {
    %s = irdl.base @attn::@tile
    %i32 = irdl.is i32
    irdl.operands(s: %s, coords: variadic %i32)
    %f32 = irdl.is f32
    %i32_arg = irdl.is i32
    %hook = irdl.region(%f32, %i32_arg, %i32_arg, %i32_arg, %i32_arg) with size 1
    irdl.regions(hook: %hook)
    %result = irdl.base @attn::@tile
    irdl.results(result: %result)
  }

  // The mask_mod hook: dropped scores of S become -inf; coords: b, h, m_block,
  // n_block, then the tile's class from attn.block_map_read where there is one.
  irdl.operation @mask {
    %s = irdl.base @attn::@tile
    %i32 = irdl.is i32
    irdl.operands(s: %s, coords: variadic %i32)
    %i32_arg = irdl.is i32
    %hook = irdl.region(%i32_arg, %i32_arg, %i32_arg, %i32_arg) with size 1
    irdl.regions(hook: %hook)
    %result = irdl.base @attn::@tile
    irdl.results(result: %result)
  }

  // One step of the online softmax: the block's scores S and the running row max
  // and sum in; P, the new max and sum, and the factor O is rescaled by out.
  irdl.operation @softmax_step {
    %s = irdl.base @attn::@tile
    %max = irdl.base @attn::@tile
    %sum = irdl.base @attn::@tile
    irdl.operands(s: %s, max: %max, sum: %sum)
    %p = irdl.base @attn::@tile
    %new_max = irdl.base @attn::@tile
    %new_sum = irdl.base @attn::@tile
    %factor = irdl.base @attn::@tile
    irdl.results(p: %p, new_max: %new_max, new_sum: %new_sum, factor: %factor)
  }

  // The O accumulator with each row multiplied by its factor.
  irdl.operation @rescale {
    %acc = irdl.base @attn::@tile
    %factor = irdl.base @attn::@tile
    irdl.operands(acc: %acc, factor: %factor)
    %result = irdl.base @attn::@tile
    irdl.results(result: %result)
  }

  // O = acc / (sum + the sink's share), LSE: the sink hook's region, run per head.
  irdl.operation @finalize {
    %acc = irdl.base @attn::@tile
    %max = irdl.base @attn::@tile
    %sum = irdl.base @attn::@tile
    %i32 = irdl.is i32
    irdl.operands(acc: %acc, max: %max, sum: %sum, h: %i32)
    %i32_arg = irdl.is i32
    %sink = irdl.region(%i32_arg) with size 1
    irdl.regions(sink: %sink)
    %o = irdl.base @attn::@tile
    %lse = irdl.base @attn::@tile
    irdl.results(o: %o, lse: %lse)
  }

  // Writes a tile of the output `operand` ("o" or "lse") at (b, h, m_block).
  irdl.operation @store {
    %tile = irdl.base @attn::@tile
    %i32 = irdl.is i32
    irdl.operands(tile: %tile, coords: variadic %i32)
    %operand = irdl.base "#builtin.string"
    irdl.attributes { "operand" = %operand }
  }

  // The KV block ranges of query block m_block: a call of the mask analysis'
  // function `fn` (m_block, b, h, dims...) -> (start_0, end_0, ..., full_start, full_end).
  irdl.operation @kv_range {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
    %fn = irdl.base "#builtin.symbol_ref"
    irdl.attributes { "fn" = %fn }
    %bound = irdl.is i32
    irdl.results(bounds: variadic %bound)
  }

  // The key blocks the block map's row of query block m_block of (b, h) keeps: args
  // m_block, b, h -> (lo, hi, full_start, full_end), the blocks [lo, hi) past which
  // every tile is skipped and the fully kept ones among them (Note [Full range from
  // the map] in attnc/backend/blockmap_hooks.py), where a kernel reads its block map
  // (with run_ranges on attn.kernel, the same range from the tile table's runs: Note
  // [Ranges from the runs] in attnc/backend/run_ranges.py).
  irdl.operation @block_map_range {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
    %bound = irdl.is i32
    irdl.results(bounds: variadic %bound)
  }

  // L5 (a cooperative role, early_first on attn-insert-pipelines): the key block guessed
  // as the top of query block m_block's range before its block map's row is read: args
  // m_block, b, h. The lowering's guess: the static analysis' top block, or a table
  // tile's diagonal block, clamped into the key blocks (Note [First block before the
  // map] in attnc/backend/forward_loads.py).
  irdl.operation @first_block_guess {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
    %block = irdl.is i32
    irdl.results(block: %block)
  }

  // The class (0 skip, 1 mixed, 2 full) the block map gives the tile (m_block,
  // n_block) of (b, h): args m_block, n_block, b, h.
  irdl.operation @block_map_read {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
    %class = irdl.is i32
    irdl.results(class: %class)
  }

  // The query tile of a document-aligned grid (Note [Document-aligned tiles] in
  // attnc/backend/qtiles.py): its first row and row count, read from the tile table
  // of `param`'s ids; args b, h, m_block.
  irdl.operation @tile_table_read {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
    %param = irdl.base "#builtin.string"
    irdl.attributes { "param" = %param }
    %row = irdl.is i32
    irdl.results(rows: variadic %row)
  }

  // The block map's own program (attn-mask-kernels; Note [The block map's program] in
  // attnc/passes/mask_kernels.py): what fills the map the attention kernel after it reads with
  // attn.block_map_read, one region run for query tile %m_block of batch %b and head slot
  // %h (region arguments), a loop over its key blocks of one attn.classify and one
  // attn.map_store each. `groups`: groups of 4 key blocks (one a warp) each CTA of the
  // loop takes, one after the other. `asked` (a string, where the pass was given options:
  // "groups=2 holds=true") says the map was asked for, so the bundle builds it.
  irdl.operation @map_kernel {
    %i32 = irdl.is i32
    %body = irdl.region(%i32, %i32, %i32) with size 1
    irdl.regions(body: %body)
    %groups = irdl.base "#builtin.integer"
    irdl.attributes { "groups" = %groups }
  }

  // The map byte of key block n_block of query tile m_block of (b, h): its class (0 skip,
  // 1 mixed, 2 full) under the attention kernel's mask_mod, found in steps -- the static
  // tile class of attn-analyze-masks, then (`intervals`) the mask on the tile's intervals
  // and (`samples`) 32 sampled elements, each by the tile's warp, then every element by
  // the CTA -- and (`holds`) the conjuncts a mixed tile holds whole; args b, h, m_block,
  // n_block.
  irdl.operation @classify {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
    %intervals = irdl.base "#builtin.integer"
    %samples = irdl.base "#builtin.integer"
    %holds = irdl.base "#builtin.integer"
    irdl.attributes { "intervals" = %intervals, "samples" = %samples, "holds" = %holds }
    %class = irdl.is i32
    irdl.results(class: %class)
  }

  // Writes a map byte (attn.classify's) for (b, h, m_block, n_block): args byte, then those.
  irdl.operation @map_store {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
  }

  // The tile table's own program (attn-mask-kernels; Note [The tile table's program] in
  // attnc/passes/mask_kernels.py): what fills the table of document-aligned query tiles
  // the attention kernel and the map kernel read with attn.tile_table_read, one region run
  // for batch %b and head slot %h (region arguments), in the steps of Note [Tile table
  // kernel] (attnc/backend/qtiles.py):
  //   %aligned, %count = "attn.id_runs"(%b, %h) {param}   the runs of equal ids over the
  //       query rows: whether they are non-decreasing and their tiles (one at each run's
  //       start and every block_m rows after it) fit the table; how many tiles
  //   %used = scf.if %aligned { "attn.table_runs"(%b, %h, %count)   those tiles' entries
  //                             "attn.table_order"(%b, %h, %count)  the last batch's first
  //                                 entries longest last, as many as the kernel's tail_waves say
  //                             scf.yield %count }
  //           else { %grid = "attn.table_grid"(%b, %h)   the grid's tiles; scf.yield %grid }
  //   "attn.table_rest"(%b, %h, %used)                     the entries past the last tile
  irdl.operation @table_kernel {
    %i32 = irdl.is i32
    %body = irdl.region(%i32, %i32) with size 1
    irdl.regions(body: %body)
  }
  irdl.operation @id_runs {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
    %param = irdl.base "#builtin.string"
    irdl.attributes { "param" = %param }
    %i1 = irdl.is i1
    %count = irdl.is i32
    irdl.results(aligned: %i1, count: %count)
  }
  irdl.operation @table_runs {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
  }
  irdl.operation @table_order {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
  }
  irdl.operation @table_grid {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
    %count = irdl.is i32
    irdl.results(count: %count)
  }
  irdl.operation @table_rest {
    %i32 = irdl.is i32
    irdl.operands(args: variadic %i32)
  }

  // --- L3-L5: roles, buffers and synchronization on the tile program ------------
  // (attnc/ir/roles.py builds and reads them; header of that file: the IR per level).
  // A channel: a value crossing from a producer role to a consumer role in `stages`
  // slots; a !attn.mbar: an array of `stages` mbarriers.
  irdl.type @chan {
    irdl.parameters()
  }
  irdl.type @mbar {
    irdl.parameters()
  }

  // L3: the CTA's roles. Its one block declares the channels (and, at L5, the
  // mbarriers) and then holds one attn.role per role; it ends in gpu.yield.
  irdl.operation @warp_specialize {
    %body = irdl.region with size 1
    irdl.regions(body: %body)
  }
  // One role: the program its warps run (one block ending in gpu.yield).
  irdl.operation @role {
    %body = irdl.region with size 1
    irdl.regions(body: %body)
    %name = irdl.base "#builtin.string"
    %warps = irdl.base "#builtin.array"
    %regs = irdl.base "#builtin.integer"
    irdl.attributes { "name" = %name, "warps" = %warps, "regs" = %regs }
  }
  // A channel declaration: tiles (`tile`, their types `types`) from `producer` to
  // `consumer` through `stages` slots moved by `transport`; at L4 its `buffers`.
  irdl.operation @channel {
    %name = irdl.base "#builtin.string"
    %producer = irdl.base "#builtin.string"
    %consumer = irdl.base "#builtin.string"
    %transport = irdl.base "#builtin.string"
    %space = irdl.base "#builtin.string"
    %stages = irdl.base "#builtin.integer"
    %tile = irdl.base "#builtin.array"
    %types = irdl.base "#builtin.array"
    irdl.attributes { "name" = %name, "producer" = %producer, "consumer" = %consumer,
                      "transport" = %transport, "space" = %space, "stages" = %stages,
                      "tile" = %tile, "types" = %types }
    %chan = irdl.base @attn::@chan
    irdl.results(channel: %chan)
  }
  // L3 (persistent CTAs, Note [The walk over query blocks] in attnc/schedule/walk.py; sm_80's
  // pair of blocks, Note [Two query blocks in the IR] there): how many rounds the CTA's walk
  // over query blocks takes.
  irdl.operation @walk_rounds {
    %i32 = irdl.is i32
    irdl.results(rounds: %i32)
  }
  // L3: the query block of the CTA's round `round`: whether there is one, then its
  // (b, h, m_block); `order`: how the CTAs take the blocks ("snake", "linear", "pairs").
  irdl.operation @walk_block {
    %i32 = irdl.is i32
    irdl.operands(round: %i32)
    %order = irdl.base "#builtin.string"
    irdl.attributes { "order" = %order }
    %i1 = irdl.is i1
    %index = irdl.is i32
    irdl.results(has: %i1, b: %index, h: %index, m_block: %index)
  }
  // L3: the producer role hands `value` (tile `tile` of the channel) to the channel.
  irdl.operation @put {
    %chan = irdl.base @attn::@chan
    %value = irdl.base @attn::@tile
    irdl.operands(channel: %chan, value: %value)
    %tile = irdl.base "#builtin.string"
    irdl.attributes { "tile" = %tile }
  }
  // L3: the consumer role takes tile `tile` of the channel's next slot.
  irdl.operation @get {
    %chan = irdl.base @attn::@chan
    irdl.operands(channel: %chan)
    %tile = irdl.base "#builtin.string"
    irdl.attributes { "tile" = %tile }
    %value = irdl.base @attn::@tile
    irdl.results(value: %value)
  }

  // L5: `stages` mbarriers of arrive count `count` (`channel`, `side`: full or empty;
  // `tile`: the one tile of the channel's slots they guard, where each tile has its own).
  irdl.operation @mbarrier_init {
    %name = irdl.base "#builtin.string"
    %count = irdl.base "#builtin.integer"
    %stages = irdl.base "#builtin.integer"
    irdl.attributes { "name" = %name, "count" = %count, "stages" = %stages }
    %bar = irdl.base @attn::@mbar
    irdl.results(barrier: %bar)
  }
  // L5 (sm_90a): wait until at most `pending` of the role's async attn.mma ops are in
  // flight (wgmma.wait_group); the operands, GEMMs that have landed then, are the results
  // as landed (Note [Asynchronous GEMMs] in attnc/schedule/verify.py).
  irdl.operation @mma_wait {
    %tile = irdl.base @attn::@tile
    irdl.operands(tiles: variadic %tile)
    %pending = irdl.base "#builtin.integer"
    irdl.attributes { "pending" = %pending }
    %landed = irdl.base @attn::@tile
    irdl.results(landed: variadic %landed)
  }
  // L5: try_wait.parity on mbarrier[stage] until the phase of `parity` completed.
  irdl.operation @mbarrier_wait {
    %bar = irdl.base @attn::@mbar
    %i32 = irdl.is i32
    irdl.operands(barrier: %bar, stage: %i32, parity: %i32)
  }
  // L5: arrive on mbarrier[stage]: once per warp of the role (`per` = "warp") or once
  // (`per` = "elected").
  irdl.operation @mbarrier_arrive {
    %bar = irdl.base @attn::@mbar
    %i32 = irdl.is i32
    irdl.operands(barrier: %bar, stage: %i32)
    %per = irdl.base "#builtin.string"
    irdl.attributes { "per" = %per }
  }
  // L5: one elected thread's arrive.expect_tx(bytes) on mbarrier[stage].
  irdl.operation @mbarrier_expect_tx {
    %bar = irdl.base @attn::@mbar
    %i32 = irdl.is i32
    irdl.operands(barrier: %bar, stage: %i32)
    %bytes = irdl.base "#builtin.integer"
    irdl.attributes { "bytes" = %bytes }
  }
  // L5: each thread of the role: cp.async.mbarrier.arrive.noinc on mbarrier[stage], one
  // arrival per thread (the barrier's count includes them), made once the thread's
  // earlier cp.async copies (slot writes that complete "arrive") have landed.
  irdl.operation @cp_async_mbarrier_arrive {
    %bar = irdl.base @attn::@mbar
    %i32 = irdl.is i32
    irdl.operands(barrier: %bar, stage: %i32)
  }
  // L5: tcgen05.commit: mbarrier[stage] gets one arrival once the MMAs issued land.
  irdl.operation @tcgen05_commit {
    %bar = irdl.base @attn::@mbar
    %i32 = irdl.is i32
    irdl.operands(barrier: %bar, stage: %i32)
  }
  // L5: the ring state (stage, phase) of the next slot of a ring of `stages` slots.
  irdl.operation @ring_advance {
    %i32 = irdl.is i32
    irdl.operands(stage: %i32, phase: %i32)
    %stages = irdl.base "#builtin.integer"
    irdl.attributes { "stages" = %stages }
    %next = irdl.is i32
    irdl.results(next_stage: %next, next_phase: %next)
  }
  // L5: `value` written into slot `stage` of the channel; `completes`: how its bytes
  // land ("mbarrier": complete_tx on the channel's full mbarrier `barrier`, "group": a
  // cp.async group, "arrive": cp.async copies whose landing the role's next
  // attn.cp_async_mbarrier_arrive reports, "store": st.shared, done when the op is).
  // `rewrite` (the miss of a guessed first block): the write replaces the fill the
  // slot holds, unread, once its copies have landed (attn-verify-pipeline checks both).
  irdl.operation @slot_write {
    %chan = irdl.base @attn::@chan
    %i32 = irdl.is i32
    %value = irdl.base @attn::@tile
    %bar = irdl.base @attn::@mbar
    irdl.operands(channel: %chan, stage: %i32, value: %value, barrier: optional %bar)
    %tile = irdl.base "#builtin.string"
    %completes = irdl.base "#builtin.string"
    irdl.attributes { "tile" = %tile, "completes" = %completes }
  }
  // L5: tile `tile` read from slot `stage` of the channel.
  irdl.operation @slot_read {
    %chan = irdl.base @attn::@chan
    %i32 = irdl.is i32
    irdl.operands(channel: %chan, stage: %i32)
    %tile = irdl.base "#builtin.string"
    irdl.attributes { "tile" = %tile }
    %value = irdl.base @attn::@tile
    irdl.results(value: %value)
  }
  // L5 (sm_80): cp.async.commit_group (`channel`: whose copies the group holds);
  // cp.async.wait_group(pending): every group of the thread but the `pending` youngest
  // has landed; bar.sync 0.
  irdl.operation @cp_async_commit {
  }
  irdl.operation @cp_async_wait {
    %pending = irdl.base "#builtin.integer"
    irdl.attributes { "pending" = %pending }
  }
  irdl.operation @cta_barrier {
  }
  // L5: named barrier `id` of `threads` threads: bar.arrive (no wait) and bar.sync, which
  // waits until `threads` threads arrived or synced (sm_90a's ping-pong turns).
  irdl.operation @named_barrier_arrive {
    %id = irdl.base "#builtin.integer"
    %threads = irdl.base "#builtin.integer"
    irdl.attributes { "id" = %id, "threads" = %threads }
  }
  irdl.operation @named_barrier_sync {
    %id = irdl.base "#builtin.integer"
    %threads = irdl.base "#builtin.integer"
    irdl.attributes { "id" = %id, "threads" = %threads }
  }
}
