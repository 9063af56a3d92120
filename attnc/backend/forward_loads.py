"""The forward kernel's copies from global to shared memory (forward.py's kernel state,
`KernelState`, has them from `ForwardLoads`): the Q tile, each step's K and V into their slots, and the
prologue that issues the first ones before the steps.

Note [Skipped blocks]: a block that the mask's `tile_skip` rules out inside [lo, hi) is
not read from global memory (its K/V tiles are zero-filled by cp.async, which keeps the
group counting); its step still runs QK^T on the zero K tile, the softmax on an all -inf
row (the mask drops every score, whatever S holds) and P.V with P = 0 and V = 0, which
changes nothing. Such blocks are rare (the kv range is the hull of the kept keys, and
holes between the segments of a mask, KvRange.segments, are never visited), so no
branch is spent on them: one around QK^T alone cost 61 SASS instructions per partial
step of window1024 and made it slower (results/sm80_h200.md, "Skipped blocks"); one
around the whole step would carry the O accumulators through an scf.if, which spilled at
128x64 tiles, head dim 128.

Note [Lean step loads]: only the last key block, cdiv(N, block_n) - 1, may hold rows >= N,
and a step visits blocks in strictly decreasing order, so the block a step loads for a
later step (V of step t + S - 1, K of t + S) ends below N whenever the schedule's top
block is below cdiv(N, block_n): then no load but the prologue's (and, with one stage, a
step's V of its own block) needs row predicates. The `lean_loads` choice makes
the steps of two kinds of kernel lean, on sm_80:

* a block map's, whose range lies inside the map's row (cdiv(N, block_n) blocks, or from a
  table tile's key origin on, cdiv(N - key0, block_n)); a block the map skips is then all
  or nothing, one predicate for every copy (documents + causal at head dim 128 4 %
  faster, at 64 the same);
* a band's (ForwardSpec.banded), whose range `schedule` clamps below cdiv(N, block_n),
  and whose steps do not ask tile_skip either (asks_tile_skip): a band's few blocks
  nearly always keep keys, and one that keeps none is still computed right, masked whole
  as tile_partial (every class but FULL) says (window 1024 1-3 % faster).

The same loads in every other sm_80 kernel (the range clamped) measured slower for causal
and, still asking tile_skip, for the window at head dim 128, where ptxas then spilled
(results/sm80_h200.md, "Lean step loads").

Note [First block before the map]: a block map's range is known only once the map's row
has been read and scanned (Note [Full range from the map], blockmap_hooks.py), and the first
K/V loads wait for it. The static analysis' hull of the same mask (`kv_hint`) contains the
map's range and is plain arithmetic, and its top block is often the map's first one
(documents + causal: always, the diagonal block), so its K and V are issued right after
Q, before the map is read (with one stage, as the prologue's loads always are, K alone).
A tile table's tile guesses its diagonal block, with a map or with the table's runs,
whose range is a scan of computed classes (Note [Ranges from the runs], run_ranges.py).
Where the map's range starts at another block, the prologue waits for every copy
(cp.async.wait_group 0) and loads that block's K and V into slot 0 again, in new groups:
the groups before them have landed, so no wait count changes (Note [cp.async group
counting]). The first visited block is never SKIP (a map's range ends at its last
non-SKIP block), so neither load asks tile_skip. With N = 0 every guessed copy is empty
(rows >= N) and points at Q's first row, as an empty copy must point in bounds (a branch
around the copies instead cost the gain at head dim 128). An empty range reads its
guessed block and never uses it. Documents + causal ran 1.3-2 % faster at head dim 128,
the same at 64 (results/sm80_h200.md, "First block before the map"). The schedule is
the IR's (Note [The guessed first block in the IR] in attnc/schedule/first_guess.py); the
guess's arithmetic is `_first_guess`'s.

Note [cp.async group counting]: every step commits exactly one group even when it has
nothing to load (an empty group), so the K of step t is always followed by exactly
2S-2 younger groups when step t waits for it, and so is its V: `cp.async.wait_group
2S-2` is a constant. For S = 1 this is FA2's alternating K/V schedule.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm, scf

from attnc.backend.kv_schedule import KvSchedule
from attnc.backend.nvgpu_builders import GlobalPtr
from attnc.errors import AttncError


class ForwardLoads:
    """The loads of the forward kernel, as methods of its state (`KernelState`): they use its
    spec, emitter and copy state (`spec`, `e`, `cp`, `bar`, `loader`, the tiles, `kv_ptr`,
    `slot_bytes`, `n_keys`, `b`, `h`, `row_end`, `key0`) and its `tensor`, `first_row`,
    `ctx` and `kv_range`."""

    # ------------------------------------------------------------ the steps' loads
    def load_q(self, m_block) -> None:
        e = self.e
        q = self.tensor("q", self.b, self.h)
        first = self.first_row(m_block)
        q = q.offset(e.mul(e.to_i64(first), e.arg("stride_q_2")))
        self.loader.load(self.q_tile, 0, q, e.arg("stride_q_2"), e.sub(e.dim("M"), first))

    def load_kv(self, name: str, n_block, slot_offset, ragged: bool, skip=None,
                 base: GlobalPtr | None = None) -> None:
        """Load block n_block of K or V (from `base`, default the head's K or V); `ragged`:
        the block may hold rows >= N; `skip` (i1): the mask keeps nothing there, so nothing
        is read and the tile is zeroed (Note [Skipped blocks])."""
        e, s = self.e, self.spec
        first = e.mul(n_block, s.block_n)
        stride = e.arg(f"stride_{name}_2")
        src = (base or self.kv_ptr[name]).offset(e.mul(e.to_i64(first), stride))
        tile = self.k_tile if name == "k" else self.v_tile
        if not ragged and skip is not None:
            # Every row is below N (Note [Lean step loads]): a skipped block is all or
            # nothing, one predicate.
            self.loader.load(tile, slot_offset, src, stride, valid=arith.xori(skip, e.true()))
            return
        rows = e.sub(self.n_keys, first) if ragged or skip is not None else None
        if skip is not None:
            rows = e.select(skip, e.c32(0), rows)
        self.loader.load(tile, slot_offset, src, stride, rows)

    def load_kv_if(self, name: str, n_block, slot_offset, exists, ragged: bool, ask_skip: bool = False,
                    m_block=None) -> None:
        """Load when `exists(n_block)` (the step is in the schedule), then commit a group
        either way (Note [cp.async group counting]); with `ask_skip`, a block the mask
        skips (for query block `m_block`, default the current one) is zero-filled
        instead of read."""
        self.load_kv_guarded(name, n_block, slot_offset, exists, ragged, ask_skip, m_block)
        self.cp.commit()

    def load_kv_guarded(self, name: str, n_block, slot_offset, exists, ragged: bool, ask_skip: bool = False,
                         m_block=None) -> None:
        """`load_kv_if`'s load, without the commit."""
        guard = scf.IfOp(exists(n_block))
        with ir.InsertionPoint(guard.then_block):
            self.load_kv(name, n_block, slot_offset, ragged, self.skip(n_block, m_block) if ask_skip else None)
            scf.yield_([])

    def skip(self, n_block, m_block=None):
        return self.spec.hooks.tile_skip(self.e, self.ctx(m_block), self.e.max(n_block, 0))

    def global_step(self, t):
        """Step t of the current block counted from the CTA's first (Note [Persistent CTAs]
        in sm90a_ws.py: `t_base`, the steps of the CTA's earlier blocks)."""
        return t if self.t_base is None else self.e.add(t, self.t_base)

    def slot_offset(self, t_plus: int, t):
        """Byte offset of the K/V slot of step t + t_plus (of the current block)."""
        t = self.global_step(t)
        stages = self.spec.plan.stages
        if stages == 1:
            return 0
        return self.e.mul(self.e.rem(self.e.add(t, t_plus), stages), self.slot_bytes)

    def wait_v_and_load_k(self, t, n_block, kv: KvSchedule, slot, ragged, ask_skip) -> None:
        """Wait for V[n]; after the barrier no warp reads K[n]'s slot: refill it."""
        s = self.spec
        self.cp.wait(2 * s.plan.stages - 2)
        self.bar.sync()
        k_block, exists = kv.ahead(self.e, t, n_block, s.plan.stages)
        self.load_kv_if("k", k_block, slot, exists, ragged, ask_skip)

    # ------------------------------------------------------------ the prologue
    def prologue(self, m_block) -> KvSchedule:
        """The cooperative role's ops before its KV loops for query block `m_block`
        (`prologue_ops`), in their order (Note [The role op by op] in role_prologue.py): Q's
        copies, the key range and the first steps' K and V -- by default groups Q, then
        K0, V0, K1, ..., V_{S-2}, K_{S-1}. With a guessed first block, K0 and V0 are the
        guess's, issued before the range is read, and its miss branch adds K0, V0 again
        after a wait for every group (Note [First block before the map]). The block's
        schedule.

        Note [Q before the range]: Q's address does not depend on the key range, and a
        range read from a block map (blockmap_hooks) waits for global loads, so Q's copies
        are issued first, as their own cp.async group, and fly while the range is
        computed. The commit matters: ptxas sank uncommitted copies below the map's row
        scan. A group older than every K/V group changes no wait count (a step waits
        until at most its 2S - 2 younger groups are pending, which also lands Q's)."""
        e, s = self.e, self.spec
        state = _Prologue(m_block)
        for op in self.prologue_ops:
            if op.name == "load":
                state.ahead[op.what] = op.count
            elif op.name == "slot_write" and op.what == "q":
                self.load_q(m_block)
            elif op.name == "first_block_guess":
                state.guess = self._first_guess(m_block)
            elif op.name == "slot_write" and state.kv is None and state.guess is not None:
                if state.q_row0 is None:
                    state.q_row0 = self.tensor("q", self.b, self.h).ptr
                self._load_first(op.what, state.guess, state.q_row0)
            elif op.name == "slot_write":
                if state.kv is None:            # no attn.kv_range: the range of no mask
                    state.kv = self.kv_range(m_block)
                ahead = state.ahead[op.what]
                if ahead not in state.first:
                    state.first[ahead] = state.kv.first(e, ahead)
                n_block, exists = state.first[ahead]
                self.load_kv_guarded(op.what, n_block, ahead * self.slot_bytes, exists, True, s.asks_tile_skip,
                                      m_block)
            elif op.name == "cp_async_commit":
                self.cp.commit()
            elif op.name == "kv_range":
                state.kv = self.kv_range(m_block)
            elif op.name == "guess_missed":
                self._guess_missed(state, op.body)
        return state.kv

    def _guess_missed(self, state: "_Prologue", body) -> None:
        """Where the range's top is not the guess, its steps `body`: a wait for every copy,
        then the first block's tiles again into slot 0, a group each."""
        e = self.e
        n_block, exists = state.kv.first(e, 0)
        missed = scf.IfOp(e.land(exists(n_block), e.ne(n_block, state.guess)))
        with ir.InsertionPoint(missed.then_block):
            for op in body:
                if op.name == "cp_async_wait":
                    self.cp.wait(op.count)      # the guessed copies land before their slot is refilled
                elif op.name == "slot_write":
                    self._load_first(op.what, n_block)
                elif op.name == "cp_async_commit":
                    self.cp.commit()
            scf.yield_([])

    def _first_guess(self, m_block):
        """The top block of the static hull (kv_hint), clamped into the blocks of the keys
        [key0, N) (key0 = 0 but for a table's tile): Note [First block before the map]."""
        e, s = self.e, self.spec
        if not s.aligned_tiles and s.hooks.kv_hint is None:
            raise AttncError("attn.first_block_guess: this kernel has no static key range to guess its first "
                             "block from, nor a table tile's diagonal (Note [First block before the map])")
        if s.aligned_tiles:
            # The hull is of grid blocks; a table's tile guesses the block of its last row's
            # key (the diagonal: a documents + causal tile's top block).
            top = e.div(e.sub(e.sub(e.min(self.row_end, e.dim("N")), 1), self.key0), s.block_n)
        else:
            top = e.sub(s.hooks.kv_hint(e, self.ctx(m_block)).hi, 1)
        return e.max(e.min(top, e.sub(e.cdiv(self.n_keys, s.block_n), 1)), 0)

    def _load_first(self, name: str, n_block, q_row0=None) -> None:
        """Tile `name` (K or V) of block n_block into slot 0, rows >= N predicated. The first
        visited block is never SKIP (it is the map's last non-SKIP one), so tile_skip is not
        asked. With `q_row0` (a guess's copy, issued before the range is known, so also
        where N = 0), the copies of an empty key sequence point at Q's first row."""
        e = self.e
        base = self.kv_ptr[name]
        if q_row0 is not None:
            base = GlobalPtr(e, llvm.select(e.gt(self.n_keys, 0), base.ptr, q_row0), 16)
        self.load_kv(name, n_block, 0, True, base=base)


class _Prologue:
    """What the patterns of the prologue share: the block, each tile's `ahead`, the guessed
    first block (and Q's first row, where its empty copies point), the schedule once read,
    and each step's first block and its test."""

    def __init__(self, m_block):
        self.m_block = m_block
        self.ahead: dict[str, int] = {}
        self.guess = self.kv = self.q_row0 = None
        self.first: dict[int, tuple] = {}
