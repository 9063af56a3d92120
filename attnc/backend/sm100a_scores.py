"""attn-lower-sm100a's patterns of a softmax warpgroup's scores (Note [The sm_100a kernel,
op by op] in sm100a.py): the score_mod and the mask on the thread's row of S, and the
online softmax step that makes P of it."""
from __future__ import annotations

from mlir import ir

from attnc.backend.nvgpu_builders import Emit, _asm, branches
from attnc.backend.sm100a_tiles import first_key, first_row, q_tile_of
from attnc.backend.sm100a_values import Lowering, Rows
from attnc.backend.softmax import SoftmaxState
from attnc.backend.tcgen05 import Tmem
from attnc.ir import get_int, get_shape, get_str
from attnc.passes.tile_program import kv_block


def _scores(cx: Lowering, value) -> list:
    """This thread's row of S: from the S slot in tensor memory, or the registers a hook
    op left it in."""
    if isinstance(value, Rows):
        return value.values
    e = cx.e
    base = cx.tmem_address(value, True)
    return [x for col in range(0, get_int(cx.kernel, "block_n"), 32) for x in Tmem(e).load(e.add(base, col), 32)]


def _hook_coords(cx: Lowering, op) -> tuple:
    """(b, h, i, [j of each column]) of this thread's row of a score_mod or mask op."""
    e, kernel = cx.e, cx.kernel
    b, h, m_block, n = (cx.value(v) for v in list(op.operands)[1:5])
    q_tile = q_tile_of(op)
    i = e.add(first_row(cx, op, m_block, q_tile), cx.row)
    j0 = first_key(cx, n)
    return b, h, i, [e.add(j0, k) for k in range(get_int(kernel, "block_n"))]


def _hook(cx: Lowering, op):
    from attnc.backend.hooks import RegionCode, ScoreCode, role_dims
    from attnc.backend.variant_hooks import _TILE_ROLES
    kind = ScoreCode if op.name == "attn.score_mod" else RegionCode
    return kind(op.regions[0].blocks[0], cx.names, role_dims(cx.names.variant, _TILE_ROLES))


def _score_mod(cx: Lowering, op):
    """score_mod(scale * s, b, h, i, j) on each score of the row, CHUNK scores at a time."""
    code = _hook(cx, op)
    b, h, i, js = _hook_coords(cx, op)
    scores = _scores(cx, cx.value(op.operands[0]))
    return [Rows([x for c0 in range(0, len(js), CHUNK)
                  for x in _scored_chunk(cx, code, b, h, i, list(zip(scores[c0:c0 + CHUNK], js[c0:c0 + CHUNK])))])]


CHUNK = 16      # scores per branch at the flat diagonals


def _scored_chunk(cx: Lowering, code, b, h, i, chunk: list) -> list:
    """score_mod on each (s, j) of `chunk`; where all its keys lie beyond the hook's flat
    diagonals, with their values computed once (Note [Flat diagonals] in
    attnc/ir/diagonals.py), in a branch that yields the chunk's scores: one branch over
    the row's 128 spilled."""
    e = cx.e

    def scored(given=None):
        return [code(e, e.fmul(s, cx.scale), b, h, i, j, given=given) for s, j in chunk]

    spots = {c: (0, c) for c in range(len(chunk))}      # the row's diagonals: key c at column c
    far = code.far_test(e, spots, lambda r: i, lambda c: chunk[c][1])
    if far is None:
        return scored()
    test, d0 = far
    return branches(test, lambda: scored(code.hoist_at(e, code.hoist(e, {}, {"b": b, "h": h}), d0)),
                    scored, [s.type for s, _ in chunk])


def _mask(cx: Lowering, op):
    """-inf where mask_mod(b, h, i, j) is false (on every block: a block map's class, where
    the op takes one, is MIXED: Note [Block map on sm_100a] in sm100a.py)."""
    e = cx.e
    code = _hook(cx, op)
    b, h, i, js = _hook_coords(cx, op)
    scores = _scores(cx, cx.value(op.operands[0]))
    return [Rows([e.select(code(e, b, h, i, j), s, e.neg_inf()) for s, j in zip(scores, js)])]


def _softmax_step(cx: Lowering, op):
    e, kernel = cx.e, cx.kernel
    scores = _scores(cx, cx.value(op.operands[0]))
    m, l = cx.value(op.operands[1]), cx.value(op.operands[2])
    # Keys past N (the last block's) score -inf.
    n_keys = cx.size(get_shape(kernel, "k_shape")[2])
    valid = e.sub(n_keys, first_key(cx, cx.value(kv_block(cx.loops[-1]))))
    scores = [e.select(e.lt(e.c32(j), valid), s, e.neg_inf()) for j, s in enumerate(scores)]
    (probs,), state, (alpha,) = cx.softmax.step([scores], SoftmaxState([m], [l]), check_inf=True,
                                                on_fma=_exp2_fma(op))
    words = [pack_pair(e, get_str(kernel, "dtype"), lo, hi) for lo, hi in zip(probs[::2], probs[1::2])]
    return [Rows(words), state.m[0], state.l[0], alpha]


def _no_scores(cx: Lowering, op):
    """A score_mod or mask op of a skeleton role (Note [Q tiles without rows]): no scores."""
    return [Rows([])]


def _no_step(cx: Lowering, op):
    """A softmax step of a skeleton role (Note [Q tiles without rows]): no P, the row's
    statistics as they were, a factor of 1 (which the lazy rescale skips)."""
    m, l = cx.value(op.operands[1]), cx.value(op.operands[2])
    return [Rows([]), m, l, cx.e.cf(1.0)]


def _exp2_fma(op) -> int:
    """The softmax step's own exp2_fma (Note [Choices op by op] in
    attnc/passes/kernel_choices.py; checked with the kernel's choices, `sm100a_choices`),
    the default where it holds none: of every 8 scores of the thread's row, those whose
    exp2 the FMA pipe takes (Note [Exponentials on the FMA pipe] in softmax.py)."""
    from attnc.passes.choice_defaults import sm100a_defaults
    from attnc.passes.kernel_choices import op_choices

    return dict(op_choices(op)).get("exp2_fma", sm100a_defaults()["exp2_fma"])


def pack_pair(e: Emit, dtype: str, lo, hi) -> ir.Value:
    """One register of two f32s rounded to `dtype` (bf16 or f16), `lo` in its low half."""
    kind = "bf16x2" if dtype == "bf16" else "f16x2"
    return _asm([e.i32], [hi, lo], f"cvt.rn.{kind}.f32 $0, $1, $2;", "=r,f,f").result
