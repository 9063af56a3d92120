"""The walk of a persistent CTA over query blocks, as code: the lowering of
`attn.walk_rounds` and `attn.walk_block` (Note [The walk over query blocks] in
attnc/schedule/walk.py) for every target that has persistent CTAs (sm90a_ws.py's
producer kernel, sm100a.py's roles).
"""
from __future__ import annotations

from mlir.dialects import nvvm

from attnc.backend.nvgpu_builders import Emit


class BlockWalk:
    """A persistent CTA's query blocks (Note [Persistent CTAs] in sm90a_ws.py): round r takes
    item w = r G + (ctaid.x, or, with the snake order, G - 1 - ctaid.x in odd rounds), G =
    gridDim.x, which is (m_block, head, batch) with m_block fastest, the last m_block first.
    `m_blocks`, `heads` and `batches` count the query blocks of a head, the heads and the
    batches (i32 values)."""

    def __init__(self, e: Emit, m_blocks, heads, batches, order: str):
        self.e, self.m_blocks, self.heads = e, m_blocks, heads
        self.items = e.mul(m_blocks, e.mul(heads, batches))
        self.ctas, self.cta = nvvm.read_ptx_sreg_nctaid_x(e.i32), nvvm.read_ptx_sreg_ctaid_x(e.i32)
        self.rounds = e.div(e.add(self.items, e.sub(self.ctas, 1)), self.ctas)
        self.snake = order == "snake"

    def item(self, rnd):
        """(i1: round `rnd` has a block, its (m_block, head, batch))."""
        e = self.e
        if self.snake:
            odd = e.and_(rnd, 1)
            w = e.add(e.mul(rnd, self.ctas), e.select(e.eq(odd, 1), e.sub(e.sub(self.ctas, 1), self.cta), self.cta))
        else:
            w = e.add(e.mul(rnd, self.ctas), self.cta)
        head = e.div(w, self.m_blocks)
        m_block = e.sub(e.sub(self.m_blocks, 1), e.rem(w, self.m_blocks))
        return e.lt(w, self.items), (m_block, e.rem(head, self.heads), e.div(head, self.heads))
