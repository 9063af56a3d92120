// attn-warp-specialize, attn-alloc-smem, attn-alloc-tmem and attn-insert-pipelines, each
// after the one before: role regions exchanging tiles through put/get on channels (L3),
// the channels' buffers (L4), then the synchronization ops with their (stage, phase)
// values (L5), for the sm_80 recipe (one cooperative role, cp.async channels), a
// producer/consumer plan (sm_90a with one consumer warpgroup and two K/V stages), the
// default sm_90a plan at head dim 128 (a producer and two consumer warpgroups), sm_90a's
// cooperative plan of a 64-row tile, three consumer warpgroups (a 192-row tile), ping-pong,
// a producer putting V before K (the user pass examples/passes/v_before_k.py), the FA4
// roles of sm_100a, and persistent CTAs (sm_90a's and sm_100a's); sm_80's plan is the
// same with producer=0 pingpong=0 persistent=0, what it does anyway.
//
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize" | filecheck %s --check-prefix=WS80
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize{producer=0 pingpong=0 persistent=0}" | filecheck %s --check-prefix=WS80
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize" | filecheck %s --check-prefix=WS90
// RUN: attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-warp-specialize" | filecheck %s --check-prefix=WS100
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem" | filecheck %s --check-prefix=ALLOC80
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem{kv_layout=separate}" | filecheck %s --check-prefix=SEPARATE80
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem" | filecheck %s --check-prefix=ALLOC90
// RUN: attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem" | filecheck %s --check-prefix=ALLOC100
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines" | filecheck %s --check-prefix=SYNC80
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize{q_blocks_per_cta=2}" | filecheck %s --check-prefix=PAIRS
// RUN: attnc opt %s -arch sm_80 --pass-pipeline "attn-tile,attn-warp-specialize{q_blocks_per_cta=2},attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines" | filecheck %s --check-prefix=PAIRSYNC
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile{num_warps=8 block_m=64 block_n=128 stages=2},attn-warp-specialize{consumers=1 producer=1},attn-alloc-smem,attn-insert-pipelines" | filecheck %s --check-prefix=RING
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile{block_m=64},attn-warp-specialize" | filecheck %s --check-prefix=COOP90
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize{pingpong=1}" | filecheck %s --check-prefix=PINGPONG
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile{block_m=192},attn-warp-specialize,attn-alloc-smem,attn-insert-pipelines" | filecheck %s --check-prefix=THREE
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize{pingpong=1},attn-alloc-smem,attn-insert-pipelines" | filecheck %s --check-prefix=TURNS
// RUN: attnc opt %s -arch sm_90a --load-pass examples/passes/v_before_k.py --pass-pipeline "attn-tile,attn-warp-specialize,v-before-k,attn-alloc-smem,attn-insert-pipelines" | filecheck %s --check-prefix=VFIRST
// RUN: attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines" | filecheck %s --check-prefix=SYNC100
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize{persistent=1}" | filecheck %s --check-prefix=WALK
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize{persistent=1},attn-alloc-smem,attn-insert-pipelines" | filecheck %s --check-prefix=WALKSYNC
// RUN: attnc opt %s -arch sm_90a --pass-pipeline "attn-tile,attn-warp-specialize{persistent=1},attn-alloc-smem,attn-insert-pipelines,attn-overlap-gemms,attn-verify-pipeline" | filecheck %s --check-prefix=AHEAD
// RUN: attnc opt %s -arch sm_100a --pass-pipeline "attn-tile,attn-warp-specialize{persistent=1 walk_order=linear},attn-alloc-smem,attn-alloc-tmem,attn-insert-pipelines,attn-verify-pipeline" | filecheck %s --check-prefix=WALK100

// L3, sm_80: one cooperative role whose loads go through its own cp.async channels, K
// and V issued ahead of their steps as the kernel issues them (Note [cp.async prefetch] in
// attnc/schedule/prefetch.py, two stages): before the loop Q, K and V of step 0 and K of
// step 1; at step t, V of step t + 1 once K(t) is got, K of step t + 2 once V(t) is got.
// WS80: "attn.warp_specialize"() ({
// WS80-NEXT: %[[Q:[0-9]+]] = "attn.channel"() {consumer = "compute", name = "q", producer = "compute", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async", types = [!attn.tile<[128, 128], bf16, "smem">]}
// WS80-NEXT: %[[KV:[0-9]+]] = "attn.channel"() {consumer = "compute", name = "kv", producer = "compute", space = "smem", stages = 2 : i64, tile = ["k", "v"], transport = "cp.async"
// WS80-NEXT: "attn.role"() ({
// WS80: "attn.put"(%[[Q]], %{{[0-9]+}}) {tile = "q"}
// WS80-NOT: "attn.get"
// WS80: %[[K0:[0-9]+]] = "attn.load"(%arg1, %arg3, %arg4, %[[LO:[a-z0-9_]+]]) {ahead = 0 : i64, operand = "k"}
// WS80-NEXT: "attn.put"(%[[KV]], %[[K0]]) {tile = "k"}
// WS80-NEXT: %[[V0:[0-9]+]] = "attn.load"(%arg2, %arg3, %arg4, %[[LO]]) {ahead = 0 : i64, operand = "v"}
// WS80-NEXT: "attn.put"(%[[KV]], %[[V0]]) {tile = "v"}
// WS80-NEXT: %[[K1:[0-9]+]] = "attn.load"(%arg1, %arg3, %arg4, %[[LO]]) {ahead = 1 : i64, operand = "k"}
// WS80-NEXT: "attn.put"(%[[KV]], %[[K1]]) {tile = "k"}
// WS80-NEXT: scf.for %[[T:arg[0-9]+]] = %c0_i32 to
// WS80-NEXT: %[[N:[0-9]+]] = arith.subi %[[LO]], %[[T]]
// WS80-NEXT: %[[K:[0-9]+]] = "attn.get"(%[[KV]]) {tile = "k"}
// WS80-NEXT: %[[QT:[0-9]+]] = "attn.get"(%[[Q]]) {tile = "q"}
// WS80-NEXT: %[[VA:[0-9]+]] = "attn.load"(%arg2, %arg3, %arg4, %[[N]]) {ahead = 1 : i64, operand = "v"}
// WS80-NEXT: "attn.put"(%[[KV]], %[[VA]]) {tile = "v"}
// WS80-NEXT: "attn.mma"(%[[QT]], %[[K]]) {kind = "qk"}
// WS80-NEXT: "attn.softmax_step"
// WS80-NEXT: %[[V:[0-9]+]] = "attn.get"(%[[KV]]) {tile = "v"}
// WS80-NEXT: %[[KA:[0-9]+]] = "attn.load"(%arg1, %arg3, %arg4, %[[N]]) {ahead = 2 : i64, operand = "k"}
// WS80-NEXT: "attn.put"(%[[KV]], %[[KA]]) {tile = "k"}
// WS80-NEXT: "attn.rescale"
// WS80-NEXT: "attn.mma"(%{{[0-9]+}}#0, %[[V]], %{{[0-9]+}}) {kind = "pv"}
// WS80: }) {name = "compute", regs = 0 : i64, warps = [0, 1, 2, 3]}
// WS80-NOT: "attn.role"

// Two query blocks per CTA (Note [Two query blocks in the IR] in attnc/schedule/walk.py):
// the role's program stands in the walk over the pair, its loads at the round's block.
// PAIRS: "attn.role"() ({
// PAIRS: %[[ROUNDS:[0-9]+]] = "attn.walk_rounds"()
// PAIRS: scf.for %[[R:arg[0-9]+]] = %{{.*}} to %[[ROUNDS]]
// PAIRS-NEXT: %[[ITEM:[0-9]+]]:4 = "attn.walk_block"(%[[R]]) {order = "pairs"}
// PAIRS-NEXT: scf.if %[[ITEM]]#0 {
// PAIRS-NEXT: "attn.load"(%arg0, %[[ITEM]]#1, %[[ITEM]]#2, %[[ITEM]]#3) {operand = "q"}
// PAIRS: "attn.store"({{.*}}, %[[ITEM]]#1, %[[ITEM]]#2, %[[ITEM]]#3) {operand = "o"}
// PAIRS: }) {name = "compute", regs = 0 : i64, warps = [0, 1, 2, 3]}

// With the synchronization (Note [The next block's loads in the IR] in walk_pairs.py): the
// rings start over in each round, the epilogue of the last round's block follows the
// round's first loads, the round ends with a wait for every copy and a CTA barrier, and
// the last block's epilogue follows the walk.
// PAIRSYNC: %[[ROUNDS:[0-9]+]] = "attn.walk_rounds"()
// PAIRSYNC: scf.for %[[R:arg[0-9]+]] = %{{.*}} to %[[ROUNDS]] step %{{.*}} iter_args(%[[PREV:arg[0-9]+]] = %c-1_i32, %[[M:arg[0-9]+]] = %{{[0-9]+}}, %[[L:arg[0-9]+]] = %{{[0-9]+}}, %[[O:arg[0-9]+]] = %{{[0-9]+}})
// PAIRSYNC-NEXT: %[[ITEM:[0-9]+]]:4 = "attn.walk_block"(%[[R]]) {order = "pairs"}
// PAIRSYNC-NEXT: scf.if %[[ITEM]]#0
// PAIRSYNC-NEXT: "attn.load"(%arg0, %[[ITEM]]#1, %[[ITEM]]#2, %[[ITEM]]#3) {operand = "q"}
// PAIRSYNC-NEXT: "attn.slot_write"(%{{[0-9]+}}, %c0_i32, %{{[0-9]+}}) {completes = "group", tile = "q"}
// PAIRSYNC: "attn.load"({{.*}}) {ahead = 1 : i64, operand = "k"}
// PAIRSYNC: %[[GO:[0-9]+]] = arith.cmpi sge, %[[PREV]], %{{.*}}
// PAIRSYNC-NEXT: scf.if %[[GO]] {
// PAIRSYNC-NEXT: %[[BLOCK:[0-9]+]]:4 = "attn.walk_block"(%[[PREV]]) {order = "pairs"}
// PAIRSYNC-NEXT: %[[FIN:[0-9]+]]:2 = "attn.finalize"(%[[O]], %[[M]], %[[L]], %[[BLOCK]]#2)
// PAIRSYNC: "attn.store"(%[[FIN]]#0, %[[BLOCK]]#1, %[[BLOCK]]#2, %[[BLOCK]]#3) {operand = "o"}
// PAIRSYNC: %[[LAST:[0-9]+]]:11 = scf.for
// PAIRSYNC: "attn.cp_async_wait"() {pending = 0 : i64}
// PAIRSYNC-NEXT: "attn.cta_barrier"()
// PAIRSYNC-NEXT: scf.yield %[[R]], %[[LAST]]#0, %[[LAST]]#1, %[[LAST]]#2
// PAIRSYNC: } else {
// PAIRSYNC-NEXT: scf.yield %[[PREV]], %[[M]], %[[L]], %[[O]]
// PAIRSYNC: %[[GO2:[0-9]+]] = arith.cmpi sge
// PAIRSYNC-NEXT: scf.if %[[GO2]] {
// PAIRSYNC-NEXT: "attn.walk_block"
// PAIRSYNC-NEXT: "attn.finalize"
// PAIRSYNC: "attn.store"

// L3, sm_90a at head dim 128: the producer warpgroup loads and puts K and V; two consumer
// warpgroups get them, run the GEMMs, hooks and softmax and store their rows of O: 64 of
// the block's 128 rows each, whose tiles (Q, S, P, the row statistics, O) have 64 rows
// while K and V stay whole (Note [Consumer rows]).
// WS90: %[[Q:[0-9]+]] = "attn.channel"() {consumer = "consumer0", name = "q", producer = "producer", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async.mbarrier", types = [!attn.tile<[128, 128], bf16, "smem">]}
// WS90: %[[KV:[0-9]+]] = "attn.channel"() {consumer = "consumer0", name = "kv", producer = "producer", space = "smem", stages = 3 : i64, tile = ["k", "v"], transport = "cp.async.mbarrier"
// WS90-NEXT: "attn.role"() ({
// WS90: scf.for
// WS90: "attn.put"(%[[KV]], %{{[0-9]+}}) {tile = "k"}
// WS90: "attn.put"(%[[KV]], %{{[0-9]+}}) {tile = "v"}
// WS90-NOT: "attn.store"
// WS90: }) {name = "producer", regs = 24 : i64, warps = [0, 1, 2, 3]}
// WS90: "attn.get"(%[[Q]]) {tile = "q"} : (!attn.chan) -> !attn.tile<[64, 128], bf16, "smem">
// WS90: "attn.fill"() {value = 0xFF800000 : f32} : () -> !attn.tile<[64], f32, "reg">
// WS90: "attn.get"(%[[KV]]) {tile = "k"} : (!attn.chan) -> !attn.tile<[128, 128], bf16, "smem">
// WS90-NEXT: "attn.mma"({{.*}}) {kind = "qk"} : (!attn.tile<[64, 128], bf16, "smem">, !attn.tile<[128, 128], bf16, "smem">) -> !attn.tile<[64, 128], f32, "reg">
// WS90: "attn.softmax_step"({{.*}}) -> (!attn.tile<[64, 128], bf16, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">, !attn.tile<[64], f32, "reg">)
// WS90: %[[O0:[0-9]+]]:2 = "attn.finalize"
// WS90: "attn.store"(%[[O0]]#0, {{.*}}) {operand = "o"} : (!attn.tile<[64, 128], bf16, "reg">
// WS90-NOT: "attn.put"
// WS90: }) {name = "consumer0", regs = 240 : i64, rows = [0, 64], warps = [4, 5, 6, 7]}
// WS90: "attn.get"(%[[KV]]) {tile = "k"}
// WS90: %[[O1:[0-9]+]]:2 = "attn.finalize"
// WS90: "attn.store"(%[[O1]]#0, {{.*}}) {operand = "o"} : (!attn.tile<[64, 128], bf16, "reg">
// WS90-NOT: "attn.put"
// WS90: }) {name = "consumer1", regs = 240 : i64, rows = [64, 128], warps = [8, 9, 10, 11]}

// L3, sm_100a: FA4's roles; S and P between the MMA warp and the softmax warpgroups, O
// between the MMA warp and the correction warpgroup, all in TMEM. Two Q tiles (Note [Q
// tiles of a CTA] in attnc/passes/tile_program.py): each softmax warpgroup runs its
// tile's ops, on its tile's channels; the MMA warp issues both tiles' S before it waits
// for P0; the correction warpgroup rescales and finalizes both O, the epilogue stores both.
// WS100: %[[Q:[0-9]+]] = "attn.channel"() {consumer = "mma", name = "q", producer = "load", space = "smem", stages = 2 : i64
// WS100: %[[S0:[0-9]+]] = "attn.channel"() {consumer = "softmax0", name = "s0", producer = "mma", space = "tmem", stages = 1 : i64, tile = ["s"], transport = "tcgen05"
// WS100: %[[S1:[0-9]+]] = "attn.channel"() {consumer = "softmax1", name = "s1", producer = "mma"
// WS100: %[[P0:[0-9]+]] = "attn.channel"() {consumer = "mma", name = "p0", producer = "softmax0", space = "tmem"
// WS100: %[[P1:[0-9]+]] = "attn.channel"() {consumer = "mma", name = "p1", producer = "softmax1", space = "tmem"
// WS100: %[[O:[0-9]+]] = "attn.channel"() {consumer = "epilogue", name = "o", producer = "correction"
// WS100: %[[ACC:[0-9]+]] = "attn.channel"() {consumer = "correction", name = "o0_acc", producer = "mma", space = "tmem"
// WS100: %[[ACC1:[0-9]+]] = "attn.channel"() {consumer = "correction", name = "o1_acc", producer = "mma", space = "tmem"
// WS100: "attn.get"(%[[S0]]) {tile = "s"}
// WS100-NEXT: "attn.softmax_step"({{.*}}) {q_tile = 0 : i64}
// WS100: "attn.put"(%[[P0]], %{{[0-9]+}}#0) {tile = "p"}
// WS100-NOT: q_tile = 1
// WS100: }) {name = "softmax0", regs = 200 : i64, warps = [0, 1, 2, 3]}
// WS100: "attn.get"(%[[S1]]) {tile = "s"}
// WS100-NEXT: "attn.softmax_step"({{.*}}) {q_tile = 1 : i64}
// WS100: "attn.put"(%[[P1]], %{{[0-9]+}}#0) {tile = "p"}
// WS100-NOT: q_tile = 0
// WS100: }) {name = "softmax1", regs = 200 : i64, warps = [4, 5, 6, 7]}
// WS100: "attn.get"(%[[ACC]]) {tile = "o"}
// WS100: "attn.get"(%[[ACC1]]) {tile = "o"}
// WS100: "attn.rescale"({{.*}}) {q_tile = 0 : i64}
// WS100: "attn.rescale"({{.*}}) {q_tile = 1 : i64}
// WS100: "attn.finalize"
// WS100: }) {q_tile = 0 : i64}
// WS100-NEXT: "attn.put"(%[[O]], %{{[0-9]+}}#0) {tile = "o"}
// WS100: "attn.finalize"
// WS100: }) {q_tile = 1 : i64}
// WS100-NEXT: "attn.put"(%[[O]], %{{[0-9]+}}#0) {tile = "o"}
// WS100: }) {name = "correction", regs = 64 : i64, warps = [8, 9, 10, 11]}
// WS100: "attn.get"(%[[Q]]) {tile = "q"}
// WS100-NEXT: "attn.get"(%[[Q]]) {tile = "q"}
// WS100: "attn.put"(%[[ACC]], %arg{{[0-9]+}}) {tile = "o"}
// WS100: "attn.mma"({{.*}}) {kind = "qk", q_tile = 0 : i64}
// WS100-NEXT: "attn.put"(%[[S0]], %{{[0-9]+}}) {tile = "s"}
// WS100-NEXT: "attn.mma"({{.*}}) {kind = "qk", q_tile = 1 : i64}
// WS100-NEXT: "attn.put"(%[[S1]], %{{[0-9]+}}) {tile = "s"}
// WS100-NEXT: "attn.get"(%[[P0]]) {tile = "p"}
// WS100: "attn.mma"({{.*}}) {kind = "pv", q_tile = 0 : i64}
// WS100-NEXT: "attn.mma"({{.*}}) {kind = "pv", q_tile = 1 : i64}
// WS100: }) {name = "mma", regs = 48 : i64, warps = [12]}
// WS100: }) {name = "load", regs = 48 : i64, warps = [13]}
// WS100: "attn.store"({{.*}}) {operand = "o", q_tile = 0 : i64}
// WS100: "attn.store"({{.*}}) {operand = "o", q_tile = 1 : i64}
// WS100: }) {name = "epilogue", regs = 48 : i64, warps = [14]}
// WS100: "attn.role"() ({
// WS100-NEXT: gpu.yield
// WS100-NEXT: }) {name = "empty", regs = 24 : i64, warps = [15]}

// L4: the buffers on the channels.
// ALLOC80: "attn.channel"() {buffers = [{align = 128 : i64, name = "sQ", offset = 0 : i64, size = 32768 : i64, space = "smem", stages = 1 : i64, swizzle = "xor128B"}], {{.*}}name = "q"
// Note [K/V slots]: by default stage s of K and V side by side, each stepping by the slot
// (32 KB); kv_layout=separate gives each its own ring.
// ALLOC80-NEXT: "attn.channel"() {buffers = [{align = 128 : i64, name = "sK", offset = 32768 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, stride = 32768 : i64, swizzle = "xor128B"}, {align = 128 : i64, name = "sV", offset = 49152 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, stride = 32768 : i64, swizzle = "xor128B"}], {{.*}}name = "kv"
// ALLOC80-NOT: space = "tmem"
// SEPARATE80: "attn.channel"() {buffers = [{align = 128 : i64, name = "sK", offset = 32768 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, swizzle = "xor128B"}, {align = 128 : i64, name = "sV", offset = 65536 : i64, size = 32768 : i64, space = "smem", stages = 2 : i64, swizzle = "xor128B"}], {{.*}}name = "kv"
// sm_90a's wgmma reads whole swizzle patterns: 1024-byte alignment
// ALLOC90: "attn.channel"() {buffers = [{align = 1024 : i64, name = "sQ", offset = 0 : i64
// ALLOC90: "attn.channel"() {buffers = [{align = 1024 : i64, name = "sK", offset = 32768 : i64, size = 98304 : i64, space = "smem", stages = 3 : i64, stride = 65536 : i64, swizzle = "xor128B"}, {align = 1024 : i64, name = "sV", offset = 65536 : i64, {{.*}}stride = 65536 : i64
// ALLOC100: "attn.channel"() {alternating = true, buffers = [{align = 128 : i64, name = "sKV", {{.*}}size = 98304 : i64, space = "smem", stages = 3 : i64
// ALLOC100: "attn.channel"() {buffers = [{align = 32 : i64, name = "tS0", offset = 0 : i64, size = 128 : i64, space = "tmem"
// ALLOC100: "attn.channel"() {buffers = [{alias_of = "tS0", align = 32 : i64, name = "tP0", offset = 64 : i64, size = 64 : i64, space = "tmem"
// ALLOC100: "attn.channel"() {buffers = [{align = 32 : i64, name = "tO0", offset = 256 : i64, size = 128 : i64, space = "tmem"{{.*}}name = "o0_acc"

// L5, sm_80: the kernel's cp.async schedule. Each copy is a group of its own; a step waits
// until at most the groups of the step ahead (2 * stages - 2 = 2) are in flight, then a
// CTA barrier, before it reads K (and Q, from its one slot at every step without
// advancing its ring) and again before V; the copies of later steps go into slots the
// barrier just released, K's and V's each on a write ring of its own; every copy lands
// before the epilogue.
// SYNC80: %[[Q:[0-9]+]] = "attn.channel"() {{.*}}name = "q"
// SYNC80: %[[KV:[0-9]+]] = "attn.channel"() {{.*}}name = "kv"
// SYNC80: %[[C0:c0_i32[_0-9]*]] = arith.constant 0 : i32
// SYNC80: "attn.slot_write"(%[[Q]], %[[C0]], %{{[0-9]+}}) {completes = "group", tile = "q"}
// SYNC80-NEXT: "attn.cp_async_commit"() {channel = "q"}
// SYNC80-NOT: "attn.cp_async_wait"
// SYNC80: "attn.slot_write"(%[[KV]], %[[C0]], %{{[0-9]+}}) {completes = "group", tile = "k"}
// SYNC80-NEXT: "attn.cp_async_commit"() {channel = "kv"}
// SYNC80-NEXT: %[[K1:[0-9]+]]:2 = "attn.ring_advance"(%[[C0]], %[[C0]]) {stages = 2 : i64}
// SYNC80: "attn.slot_write"(%[[KV]], %[[C0]], %{{[0-9]+}}) {completes = "group", tile = "v"}
// SYNC80-NEXT: "attn.cp_async_commit"() {channel = "kv"}
// SYNC80-NEXT: %[[V1:[0-9]+]]:2 = "attn.ring_advance"(%[[C0]], %[[C0]]) {stages = 2 : i64}
// SYNC80: "attn.slot_write"(%[[KV]], %[[K1]]#0, %{{[0-9]+}}) {completes = "group", tile = "k"}
// SYNC80-NEXT: "attn.cp_async_commit"() {channel = "kv"}
// SYNC80-NEXT: %[[K2:[0-9]+]]:2 = "attn.ring_advance"(%[[K1]]#0, %[[K1]]#1) {stages = 2 : i64}
// SYNC80-NEXT: scf.for %{{.*}} iter_args({{.*}}%[[RS:arg[0-9]+]] = %[[C0]], %[[RP:arg[0-9]+]] = %[[C0]], %[[KS:arg[0-9]+]] = %[[K2]]#0, %[[KP:arg[0-9]+]] = %[[K2]]#1, %[[VS:arg[0-9]+]] = %[[V1]]#0, %[[VP:arg[0-9]+]] = %[[V1]]#1, %[[QS:arg[0-9]+]] = %[[C0]], %[[QP:arg[0-9]+]] = %[[C0]])
// SYNC80-NEXT: arith.subi %{{[0-9]+}}, %arg{{[0-9]+}}
// SYNC80-NEXT: "attn.cp_async_wait"() {pending = 2 : i64}
// SYNC80-NEXT: "attn.cta_barrier"()
// SYNC80-NEXT: "attn.slot_read"(%[[KV]], %[[RS]]) {tile = "k"}
// SYNC80-NEXT: "attn.slot_read"(%[[Q]], %[[QS]]) {tile = "q"}
// SYNC80-NEXT: "attn.load"{{.*}}{ahead = 1 : i64, operand = "v"}
// SYNC80-NEXT: "attn.slot_write"(%[[KV]], %[[VS]], %{{[0-9]+}}) {completes = "group", tile = "v"}
// SYNC80-NEXT: "attn.cp_async_commit"() {channel = "kv"}
// SYNC80-NEXT: "attn.ring_advance"(%[[VS]], %[[VP]]) {stages = 2 : i64}
// SYNC80-NEXT: "attn.mma"
// SYNC80-NEXT: "attn.softmax_step"
// SYNC80-NEXT: "attn.cp_async_wait"() {pending = 2 : i64}
// SYNC80-NEXT: "attn.cta_barrier"()
// SYNC80-NEXT: "attn.slot_read"(%[[KV]], %[[RS]]) {tile = "v"}
// SYNC80-NEXT: "attn.ring_advance"(%[[RS]], %[[RP]]) {stages = 2 : i64}
// SYNC80-NEXT: "attn.load"{{.*}}{ahead = 2 : i64, operand = "k"}
// SYNC80-NEXT: "attn.slot_write"(%[[KV]], %[[KS]], %{{[0-9]+}}) {completes = "group", tile = "k"}
// SYNC80-NEXT: "attn.cp_async_commit"() {channel = "kv"}
// SYNC80-NEXT: "attn.ring_advance"(%[[KS]], %[[KP]]) {stages = 2 : i64}
// SYNC80-NEXT: "attn.rescale"
// SYNC80-NEXT: "attn.mma"
// SYNC80-NEXT: scf.yield {{.*}}, %[[QS]], %[[QP]] :
// SYNC80-NEXT: }
// SYNC80-NEXT: "attn.cp_async_wait"() {pending = 0 : i64}
// SYNC80-NOT: mbarrier

// L5, two roles on mbarrier rings of 2 slots, one pair of barriers per tile (Note
// [Barriers per tile] in sync.py): the producer waits for the tile's slot to be released
// on the flipped phase, copies the tile with cp.async and has each of its 128 threads
// arrive on the tile's full barrier once its copies landed (.noinc); the consumer waits
// for K before QK^T and releases K's slot after it, then V before P.V and V's slot after.
// RING: %[[Q:[0-9]+]] = "attn.channel"() {{.*}}name = "q", producer = "producer", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async.mbarrier"
// RING: %[[KV:[0-9]+]] = "attn.channel"() {{.*}}name = "kv", producer = "producer", space = "smem", stages = 2 : i64, tile = ["k", "v"], transport = "cp.async.mbarrier"
// RING: %[[QFULL:[0-9]+]] = "attn.mbarrier_init"() {channel = "q", count = 128 : i64, name = "mbar_q_full", side = "full", stages = 1 : i64, tile = "q"}
// RING-NEXT: %[[KFULL:[0-9]+]] = "attn.mbarrier_init"() {channel = "kv", count = 128 : i64, name = "mbar_k_full", side = "full", stages = 2 : i64, tile = "k"}
// RING-NEXT: %[[VFULL:[0-9]+]] = "attn.mbarrier_init"() {channel = "kv", count = 128 : i64, name = "mbar_v_full", side = "full", stages = 2 : i64, tile = "v"}
// RING-NEXT: %[[KEMPTY:[0-9]+]] = "attn.mbarrier_init"() {channel = "kv", count = 4 : i64, name = "mbar_k_empty", side = "empty", stages = 2 : i64, tile = "k"}
// RING-NEXT: %[[VEMPTY:[0-9]+]] = "attn.mbarrier_init"() {channel = "kv", count = 4 : i64, name = "mbar_v_empty", side = "empty", stages = 2 : i64, tile = "v"}
// RING-NOT: mbar_q_empty
// RING: "attn.slot_write"(%[[Q]], %c0_i32, %{{[0-9]+}}) {completes = "arrive", tile = "q"}
// RING-NEXT: "attn.cp_async_mbarrier_arrive"(%[[QFULL]], %c0_i32)
// RING: scf.for {{.*}} iter_args(%[[S:arg[0-9]+]] = %c0_i32, %[[P:arg[0-9]+]] = %c0_i32) -> (i32, i32)
// RING-NEXT: arith.subi %{{[0-9]+}}, %arg{{[0-9]+}}
// RING-NEXT: "attn.load"{{.*}}{operand = "k"}
// RING-NEXT: %[[FLIP:[0-9]+]] = arith.xori %[[P]], %c1_i32
// RING-NEXT: "attn.mbarrier_wait"(%[[KEMPTY]], %[[S]], %[[FLIP]])
// RING-NEXT: "attn.slot_write"(%[[KV]], %[[S]], %{{[0-9]+}}) {completes = "arrive", tile = "k"}
// RING-NEXT: "attn.cp_async_mbarrier_arrive"(%[[KFULL]], %[[S]])
// RING-NEXT: "attn.load"{{.*}}{operand = "v"}
// RING-NEXT: %[[FLIPV:[0-9]+]] = arith.xori %[[P]], %c1_i32
// RING-NEXT: "attn.mbarrier_wait"(%[[VEMPTY]], %[[S]], %[[FLIPV]])
// RING-NEXT: "attn.slot_write"(%[[KV]], %[[S]], %{{[0-9]+}}) {completes = "arrive", tile = "v"}
// RING-NEXT: "attn.cp_async_mbarrier_arrive"(%[[VFULL]], %[[S]])
// RING-NEXT: %[[NEXT:[0-9]+]]:2 = "attn.ring_advance"(%[[S]], %[[P]]) {stages = 2 : i64}
// RING-NEXT: scf.yield %[[NEXT]]#0, %[[NEXT]]#1
// RING: }) {name = "producer"
// RING: "attn.mbarrier_wait"(%[[QFULL]], %c0_i32, %c0_i32)
// RING-NEXT: "attn.slot_read"(%[[Q]], %c0_i32) {tile = "q"}
// RING: scf.for {{.*}}, %[[CS:arg[0-9]+]] = %c0_i32, %[[CP:arg[0-9]+]] = %c0_i32)
// RING-NEXT: arith.subi %{{[0-9]+}}, %arg{{[0-9]+}}
// RING-NEXT: "attn.mbarrier_wait"(%[[KFULL]], %[[CS]], %[[CP]])
// RING-NEXT: "attn.slot_read"(%[[KV]], %[[CS]]) {tile = "k"}
// RING-NEXT: "attn.mma"{{.*}}{kind = "qk"}
// RING-NEXT: "attn.mbarrier_arrive"(%[[KEMPTY]], %[[CS]]) {per = "warp"}
// RING: "attn.mbarrier_wait"(%[[VFULL]], %[[CS]], %[[CP]])
// RING-NEXT: "attn.slot_read"(%[[KV]], %[[CS]]) {tile = "v"}
// RING-NEXT: "attn.ring_advance"(%[[CS]], %[[CP]]) {stages = 2 : i64}
// RING-NEXT: "attn.mma"{{.*}}{kind = "pv"}
// RING-NEXT: "attn.mbarrier_arrive"(%[[VEMPTY]], %[[CS]]) {per = "warp"}
// RING-NOT: %[[QFULL]]
// RING: "attn.store"{{.*}}{operand = "o"}
// RING-NOT: "attn.named_barrier
// RING: }) {name = "consumer0"

// L5, sm_100a: the MMA warp signals through tcgen05 commits; K and V alternate in one
// ring, each fill announcing its own bytes.
// SYNC100: "attn.mbarrier_init"() {channel = "kv", count = 1 : i64, name = "mbar_kv_full", side = "full", stages = 3 : i64}
// SYNC100: "attn.mbarrier_init"() {channel = "s0", count = 1 : i64, name = "mbar_s0_full"
// SYNC100-NEXT: "attn.mbarrier_init"() {channel = "s0", count = 4 : i64, name = "mbar_s0_empty"
// SYNC100: "attn.mbarrier_arrive"({{.*}}) {per = "warp"}
// SYNC100: }) {name = "softmax0"
// SYNC100: "attn.tcgen05_commit"
// SYNC100: }) {name = "mma"
// SYNC100: "attn.mbarrier_expect_tx"({{.*}}) {bytes = 32768 : i64}
// SYNC100: }) {name = "load"

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

// sm_90a, a 64-row tile: one consumer warpgroup, and by default no producer: one
// cooperative role of 4 warps that loads through cp.async, as on sm_80. The roles state
// the warps (attn-tile counted a producer's warpgroup in), and attn.kernel no more
// (Note [Sizes the plan states]).
// COOP90: "attn.channel"() {consumer = "compute", name = "q", producer = "compute", space = "smem", stages = 1 : i64, tile = ["q"], transport = "cp.async"
// COOP90: }) {name = "compute", regs = 0 : i64, warps = [0, 1, 2, 3]}
// COOP90-NOT: "attn.role"
// COOP90-NOT: num_warps

// sm_90a, a 192-row tile: three consumer warpgroups and, by default, the producer, which
// keeps 32 registers of a thread and leaves them 160 each (setmaxnreg); a K/V slot is free
// once the 12 consumer warps released it.
// THREE: "attn.mbarrier_init"() {channel = "kv", count = 128 : i64, name = "mbar_k_full"
// THREE: "attn.mbarrier_init"() {channel = "kv", count = 12 : i64, name = "mbar_k_empty"
// THREE: }) {name = "producer", regs = 32 : i64, warps = [0, 1, 2, 3]}
// THREE: }) {name = "consumer0", regs = 160 : i64, rows = [0, 64], warps = [4, 5, 6, 7]}
// THREE: }) {name = "consumer1", regs = 160 : i64, rows = [64, 128], warps = [8, 9, 10, 11]}
// THREE: }) {name = "consumer2", regs = 160 : i64, rows = [128, 192], warps = [12, 13, 14, 15]}
// THREE: }) {block_m = 192 : i64

// Ping-pong: recorded on attn.warp_specialize, beside the producer and two consumers.
// PINGPONG: }) {name = "producer", regs = 24 : i64, warps = [0, 1, 2, 3]}
// PINGPONG: }) {name = "consumer0", regs = 240 : i64, rows = [0, 64], warps = [4, 5, 6, 7]}
// PINGPONG: }) {name = "consumer1", regs = 240 : i64, rows = [64, 128], warps = [8, 9, 10, 11]}
// PINGPONG: }) {pingpong = true, ranges = {

// Ping-pong at L5 (Note [Ping-pong turns] in attnc/schedule/sync.py): consumer0 takes its
// turns on named barrier 1 and hands them over on 2, consumer1 the other way round, both
// counting the two warpgroups' 256 threads; a turn runs from before one step's P.V to after
// the next step's QK^T. consumer1 arrives once first, consumer0 syncs once more last.
// TURNS-NOT: "attn.named_barrier
// TURNS: }) {name = "producer"
// TURNS: "attn.named_barrier_sync"() {id = 1 : i64, threads = 256 : i64}
// TURNS-NEXT: scf.for
// TURNS: "attn.mma"{{.*}}{kind = "qk"}
// TURNS-NEXT: "attn.named_barrier_arrive"() {id = 2 : i64, threads = 256 : i64}
// TURNS: "attn.slot_read"{{.*}}{tile = "v"}
// TURNS: "attn.named_barrier_sync"() {id = 1 : i64, threads = 256 : i64}
// TURNS-NEXT: "attn.mma"{{.*}}{kind = "pv"}
// TURNS: scf.yield
// TURNS-NEXT: }
// TURNS-NEXT: "attn.named_barrier_arrive"() {id = 2 : i64, threads = 256 : i64}
// TURNS-NEXT: "attn.named_barrier_sync"() {id = 1 : i64, threads = 256 : i64}
// TURNS-NEXT: "attn.finalize"
// TURNS: }) {name = "consumer0"
// TURNS-NEXT: "attn.role"() ({
// TURNS-NEXT: "attn.named_barrier_arrive"() {id = 1 : i64, threads = 256 : i64}
// TURNS: "attn.named_barrier_sync"() {id = 2 : i64, threads = 256 : i64}
// TURNS-NEXT: scf.for
// TURNS: "attn.mma"{{.*}}{kind = "qk"}
// TURNS-NEXT: "attn.named_barrier_arrive"() {id = 1 : i64, threads = 256 : i64}
// TURNS: "attn.named_barrier_sync"() {id = 2 : i64, threads = 256 : i64}
// TURNS-NEXT: "attn.mma"{{.*}}{kind = "pv"}
// TURNS: scf.yield
// TURNS-NEXT: }
// TURNS-NEXT: "attn.named_barrier_arrive"() {id = 1 : i64, threads = 256 : i64}
// TURNS-NEXT: "attn.finalize"
// TURNS: }) {name = "consumer1"

// V before K: the producer fills V's slot first, on V's own barriers, then K's; the
// last (K) advances the ring.
// VFIRST: %[[KFULL:[0-9]+]] = "attn.mbarrier_init"() {{{.*}}name = "mbar_k_full"
// VFIRST-NEXT: %[[VFULL:[0-9]+]] = "attn.mbarrier_init"() {{{.*}}name = "mbar_v_full"
// VFIRST-NEXT: %[[KEMPTY:[0-9]+]] = "attn.mbarrier_init"() {{{.*}}name = "mbar_k_empty"
// VFIRST-NEXT: %[[VEMPTY:[0-9]+]] = "attn.mbarrier_init"() {{{.*}}name = "mbar_v_empty"
// VFIRST: scf.for {{.*}} iter_args(%[[S:arg[0-9]+]] = %c0_i32, %[[P:arg[0-9]+]] = %c0_i32) -> (i32, i32)
// VFIRST-NEXT: arith.subi %{{[0-9]+}}, %arg{{[0-9]+}}
// VFIRST-NEXT: "attn.load"{{.*}}{operand = "v"}
// VFIRST-NEXT: %[[FLIP:[0-9]+]] = arith.xori %[[P]], %c1_i32
// VFIRST-NEXT: "attn.mbarrier_wait"(%[[VEMPTY]], %[[S]], %[[FLIP]])
// VFIRST-NEXT: "attn.slot_write"({{.*}}) {completes = "arrive", tile = "v"}
// VFIRST-NEXT: "attn.cp_async_mbarrier_arrive"(%[[VFULL]], %[[S]])
// VFIRST-NEXT: "attn.load"{{.*}}{operand = "k"}
// VFIRST-NEXT: %[[FLIPK:[0-9]+]] = arith.xori %[[P]], %c1_i32
// VFIRST-NEXT: "attn.mbarrier_wait"(%[[KEMPTY]], %[[S]], %[[FLIPK]])
// VFIRST-NEXT: "attn.slot_write"({{.*}}) {completes = "arrive", tile = "k"}
// VFIRST-NEXT: "attn.cp_async_mbarrier_arrive"(%[[KFULL]], %[[S]])
// VFIRST-NEXT: "attn.ring_advance"(%[[S]], %[[P]])

// L3, sm_90a with persistent CTAs (Note [The walk over query blocks] in
// attnc/schedule/walk.py): every role runs its program in the walk over query blocks, on
// the round's block (b, h, m_block) rather than the kernel's arguments.
// WALK: "attn.role"() ({
// WALK: %[[ROUNDS:[0-9]+]] = "attn.walk_rounds"() : () -> i32
// WALK-NEXT: scf.for %[[R:arg[0-9]+]] = %{{.*}} to %[[ROUNDS]] step %{{.*}} : i32 {
// WALK-NEXT: %[[W:[0-9]+]]:4 = "attn.walk_block"(%[[R]]) {order = "snake"} : (i32) -> (i1, i32, i32, i32)
// WALK-NEXT: scf.if %[[W]]#0 {
// WALK-NEXT: "attn.load"(%arg0, %[[W]]#1, %[[W]]#2, %[[W]]#3) {operand = "q"}
// WALK: "attn.load"(%arg1, %[[W]]#1, %[[W]]#2, %{{.*}}) {operand = "k"}
// WALK: }) {name = "producer"
// WALK: "attn.walk_block"
// WALK: "attn.store"(%{{.*}}, %[[C:[0-9]+]]#1, %[[C]]#2, %[[C]]#3) {operand = "o"}
// WALK: }) {name = "consumer0"

// L5, persistent CTAs: the walk carries the K/V ring and Q's ring from block to block, and
// the round without a block passes them on; the producer waits for Q's slot with the
// phase the ring has reached.
// WALKSYNC: "attn.walk_rounds"
// WALKSYNC-NEXT: scf.for %{{.*}} iter_args(%[[KS:arg[0-9]+]] = %c0_i32, %[[KP:arg[0-9]+]] = %c0_i32, %[[QS:arg[0-9]+]] = %c0_i32, %[[QP:arg[0-9]+]] = %c0_i32) -> (i32, i32, i32, i32)
// WALKSYNC-NEXT: "attn.walk_block"
// WALKSYNC-NEXT: scf.if %{{.*}}#0 -> (i32, i32, i32, i32) {
// WALKSYNC: %[[FLIP:[0-9]+]] = arith.xori %[[QP]], %c1_i32
// WALKSYNC-NEXT: "attn.mbarrier_wait"(%{{[0-9]+}}, %[[QS]], %[[FLIP]])
// WALKSYNC: %[[Q:[0-9]+]]:2 = "attn.ring_advance"(%[[QS]], %[[QP]]) {stages = 1 : i64}
// WALKSYNC: scf.for %{{.*}} iter_args(%{{.*}} = %[[KS]], %{{.*}} = %[[KP]]) -> (i32, i32)
// WALKSYNC: scf.yield %[[K:[0-9]+]]#0, %[[K]]#1, %[[Q]]#0, %[[Q]]#1 : i32, i32, i32, i32
// WALKSYNC-NEXT: } else {
// WALKSYNC-NEXT: scf.yield %[[KS]], %[[KP]], %[[QS]], %[[QP]] : i32, i32, i32, i32
// WALKSYNC: }) {name = "producer"

// attn-overlap-gemms on persistent consumers without ping-pong (Note [The next block's
// first QK^T in the IR] in attnc/schedule/walk_ahead.py): the walk carries the last
// block's round (-1 before the first), m, l and O; a block issues its first QK^T, then
// finalizes and stores the last block's O, then lands its S; the last block's epilogue
// follows the walk. attn-verify-pipeline finds it sound.
// AHEAD-LABEL: name = "producer"
// AHEAD: %[[NONE:c-1_i32]] = arith.constant -1 : i32
// AHEAD-NEXT: %[[ROUNDS_LOOP:[0-9]+]]:8 = scf.for %[[R:arg[0-9]+]] = {{.*}} iter_args({{.*}}, %[[PREV:arg[0-9]+]] = %[[NONE]], %[[M:arg[0-9]+]] = %{{[0-9]+}}, %[[L:arg[0-9]+]] = %{{[0-9]+}}, %[[O:arg[0-9]+]] = %{{[0-9]+}})
// AHEAD: %[[S:[0-9]+]] = "attn.mma"(%{{[0-9]+}}, %{{[0-9]+}}) {async, kind = "qk"}
// AHEAD-NEXT: %[[ZERO:c0_i32[_0-9]*]] = arith.constant 0 : i32
// AHEAD-NEXT: %[[SOME:[0-9]+]] = arith.cmpi sge, %[[PREV]], %[[ZERO]]
// AHEAD-NEXT: scf.if %[[SOME]] {
// AHEAD-NEXT: %[[B:[0-9]+]]:4 = "attn.walk_block"(%[[PREV]]) {order = "snake"}
// AHEAD-NEXT: %[[F:[0-9]+]]:2 = "attn.finalize"(%[[O]], %[[M]], %[[L]], %[[B]]#2)
// AHEAD: "attn.store"(%[[F]]#0, %[[B]]#1, %[[B]]#2, %[[B]]#3) {operand = "o"}
// AHEAD-NEXT: }
// AHEAD-NEXT: "attn.mma_wait"(%[[S]]) {pending = 0 : i64}
// AHEAD: } else {
// AHEAD-NEXT: "attn.mbarrier_arrive"
// AHEAD-NEXT: arith.constant 0
// AHEAD-NEXT: arith.cmpi sge, %[[PREV]]
// AHEAD: scf.yield {{.*}}, %[[R]], %{{[0-9]+}}#0, %{{[0-9]+}}#1, %{{[0-9]+}}#2 :
// AHEAD: %[[LAST:[0-9]+]] = arith.cmpi sge, %[[ROUNDS_LOOP]]#4, %c0_i32
// AHEAD-NEXT: scf.if %[[LAST]] {
// AHEAD-NEXT: %[[LB:[0-9]+]]:4 = "attn.walk_block"(%[[ROUNDS_LOOP]]#4) {order = "snake"}
// AHEAD-NEXT: "attn.finalize"(%[[ROUNDS_LOOP]]#7, %[[ROUNDS_LOOP]]#5, %[[ROUNDS_LOOP]]#6, %[[LB]]#2)
// AHEAD: }) {name = "consumer0"

// L5, sm_100a's persistent CTAs: each FA4 role stands in the walk (here in the linear
// order); the load role's Q ring of two slots is carried from block to block (its waits on
// the empty side flip the phase the ring has reached), and the round without a block
// passes it on. attn-verify-pipeline finds it sound.
// WALK100: "attn.walk_block"(%{{.*}}) {order = "linear"}
// WALK100: }) {name = "softmax0"
// WALK100: "attn.walk_block"(%{{.*}}) {order = "linear"}
// WALK100: }) {name = "softmax1"
// WALK100: "attn.walk_block"(%{{.*}}) {order = "linear"}
// WALK100: }) {name = "correction"
// WALK100: "attn.walk_block"(%{{.*}}) {order = "linear"}
// WALK100: }) {name = "mma"
// WALK100: %[[ROUNDS:[0-9]+]] = "attn.walk_rounds"
// WALK100-NEXT: scf.for %{{.*}} to %[[ROUNDS]] step %{{.*}} iter_args(%{{.*}} = %c0_i32, %{{.*}} = %c0_i32, %[[QS:arg[0-9]+]] = %c0_i32, %[[QP:arg[0-9]+]] = %c0_i32) -> (i32, i32, i32, i32)
// WALK100-NEXT: %[[W:[0-9]+]]:4 = "attn.walk_block"(%{{.*}}) {order = "linear"}
// WALK100-NEXT: scf.if %[[W]]#0 -> (i32, i32, i32, i32) {
// WALK100-NEXT: "attn.load"(%arg0, %[[W]]#1, %[[W]]#2, %[[W]]#3) {operand = "q", q_tile = 0 : i64}
// WALK100-NEXT: %[[FLIP:[0-9]+]] = arith.xori %[[QP]], %c1_i32
// WALK100-NEXT: "attn.mbarrier_wait"(%{{[0-9]+}}, %[[QS]], %[[FLIP]])
// WALK100: "attn.ring_advance"(%[[QS]], %[[QP]]) {stages = 2 : i64}
// WALK100: } else {
// WALK100-NEXT: scf.yield %{{.*}}, %{{.*}}, %[[QS]], %[[QP]] : i32, i32, i32, i32
// WALK100: }) {name = "load"
// WALK100: "attn.walk_block"(%{{.*}}) {order = "linear"}
// WALK100: "attn.store"
// WALK100: }) {name = "epilogue"
