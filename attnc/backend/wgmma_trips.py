"""What the op-by-op patterns of sm_90a's kernels (sm90a.py, sm90a_ws.py) share while they
build one step: a consumer trip's (`Trip`, Note [Overlapped steps op by op] in
wgmma_steps.py), the cooperative kernel's (`CoopTrip`, Note [Cooperative steps op by
op] in coop_steps.py), the first step's (`FirstTrip`), the last P.V's (`LastPv`), and a
producer load's (`Load`, Note [Loads op by op] in load_steps.py)."""
from __future__ import annotations

from dataclasses import dataclass

from attnc.backend.forward import ScoredStep


class Trip(ScoredStep):
    """What the patterns of one overlapped trip share (Note [Overlapped steps op by op]):
    the step, what came in flight, the values the ops leave for the next, and, made once
    before the first GEMM is issued (`fence`), the step's tile_skip answer and slots."""

    def __init__(self, kernel, u, kv, state, flight, mode: str, body: tuple):
        self.kernel, self.u, self.kv, self.state, self.flight, self.mode = kernel, u, kv, state, flight, mode
        self.n_block = kv.block(kernel.e, u)
        self.acc_o = self.acc_s = self.p = self.landed_probs = None
        self.probs = self.alpha = None
        self.fenced = False
        self.skip = self.slot = self.prev = None
        # after the last of the score_mod and the mask, S is masked (finish_scores)
        self.scores_end = next((op for op in reversed(body) if op.name in ("score_mod", "mask")), None)

    def fence(self) -> None:
        """Before a GEMM is issued: once, the trip's tile_skip answer (where asked) and its
        slots; wgmma.fence where registers a GEMM reads were written since the last one
        (`wrote`: O landed or rescaled, P packed)."""
        if self.slot is None:
            self._skip_and_slots()
        if not self.fenced:
            self.kernel.wgmma.fence()
            self.fenced = True

    def _skip_and_slots(self) -> None:
        if self.mode != "full" and self.kernel.spec.hooks.tile_skip is not None:
            self.skip = self.kernel.skip(self.n_block)
        self._slots()

    def _slots(self) -> None:
        k = self.kernel
        self.slot, self.prev = k.slot_offset(0, self.u), k.slot_offset(k.spec.plan.stages - 1, self.u)

    def wrote(self) -> None:
        self.fenced = False

    def skip_answer(self):
        return self.skip

    def qk_slot(self):
        return self.slot


class CoopTrip(Trip):
    """What the patterns of one trip of sm_90a's cooperative kernel share (Note
    [Cooperative steps op by op] in coop_steps.py): a trip's, and each load's `ahead`;
    the tile_skip answer and the slots are made before the first load (after the CTA
    barrier, as the copies zero-fill a skipped block), and the GEMMs' slots again before
    the first GEMM is issued."""

    def __init__(self, *args):
        super().__init__(*args)
        self.ahead: dict[str, int] = {}
        self.issued = False

    def load_slots(self) -> None:
        if self.slot is None:
            self._skip_and_slots()

    def fence(self) -> None:
        if not self.issued:
            if self.slot is None:
                self._skip_and_slots()
            else:
                self._slots()
            self.issued = True
        if not self.fenced:
            self.kernel.wgmma.fence()
            self.fenced = True


class FirstTrip(Trip):
    """Step 0, built from the IR's first step with the trips' patterns: its tile_skip
    answer is asked before the first GEMM, and its slot where QK^T takes it."""

    asked = False

    def fence(self) -> None:
        k, s = self.kernel, self.kernel.spec
        if not self.asked:
            if s.hooks.tile_skip is not None:
                self.skip = k.skip(self.n_block)
            self.asked = True
        if not self.fenced:
            k.wgmma.fence()
            self.fenced = True

    def qk_slot(self):
        return self.kernel.slot_offset(0, self.u)


class LastPv:
    """What the patterns of the last P.V share: what the loops left in flight, the last
    step (made where first needed), and what the ops leave for the next."""

    def __init__(self, kernel, total, flight):
        self.kernel, self.total, self.flight = kernel, total, flight
        self._step = None
        self.acc_o = self.p = self.landed_probs = self.acc = None
        self.fenced = False
        self.scores_end = None          # no scores here

    @property
    def step(self):
        if self._step is None:
            self._step = self.kernel.e.sub(self.total, 1)
        return self._step

    def fence(self) -> None:
        if not self.fenced:
            self.kernel.wgmma.fence()
            self.fenced = True

    def wrote(self) -> None:
        self.fenced = False


@dataclass
class Load:
    """One tile's load of step t in a producer trip: its slot, the parity of the slot's
    full phase, the key schedule."""
    slot: object
    parity: object
    kv: object
    t: object
