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
from attnc.passes.tile import TMEM_CHUNK
from attnc.passes.tile_program import kv_block


def _scores(cx: Lowering, value) -> list:
    """This thread's row of S: from the S slot in tensor memory, or the registers a hook
    op left it in."""
    if isinstance(value, Rows):
        return value.values
    e = cx.e
    base = cx.tmem_address(value, True)
    return [x for col in range(0, get_int(cx.kernel, "block_n"), TMEM_CHUNK)
            for x in Tmem(e).load(e.add(base, col), TMEM_CHUNK)]


def _hook_coords(cx: Lowering, op) -> tuple:
    """(b, h, i, [j of each column]) of this thread's row of a score_mod or mask op."""
    e, kernel = cx.e, cx.kernel
    b, h, m_block, n = (cx.value(v) for v in list(op.operands)[1:5])
    q_tile = q_tile_of(op)
    i = e.add(first_row(cx, op, m_block, q_tile), cx.row)
    j0 = first_key(cx, n)
    return b, h, i, [e.add(j0, k) for k in range(get_int(kernel, "block_n"))]


def _tile_dims(cx: Lowering) -> frozenset[str]:
    """The dims that are >= 1 wherever a score's hook runs (RegionCode's never_empty)."""
    from attnc.backend.hooks import role_dims
    from attnc.backend.variant_hooks import _TILE_ROLES
    return role_dims(cx.names.variant, _TILE_ROLES)


def _hook(cx: Lowering, op):
    from attnc.backend.hooks import RegionCode, ScoreCode
    kind = ScoreCode if op.name == "attn.score_mod" else RegionCode
    return kind(op.regions[0].blocks[0], cx.names, _tile_dims(cx))


def _offsets(value) -> list | None:
    """The offsets a score_mod left on the row of scores `value` (Rows), or None."""
    return value.offsets if isinstance(value, Rows) else None


# Note [Affine scores on sm_100a]: a score_mod s + f (`affine_bias` in score_forms.py: T5's
# and ALiBi's biases) leaves the scores in QK^T's units, as the other targets do: each is
# s + f / scale, one FFMA as scale * s + f was, and the softmax folds the scale into its
# exp2 (Note [Folded scale] in softmax.py). Where f is computed from d = j - i alone, a
# chunk of the row beyond f's flat diagonals (Note [Flat diagonals] in
# attnc/ir/diagonals.py) has one f, which the softmax takes as the chunk's offset (Note
# [Offsets of far tiles] in softmax.py): the chunk's scores are left as they are.
def raw_scores(kernel) -> bool:
    """Whether the softmax takes the scores in QK^T's units: without a score_mod, or with
    an affine one (Note [Affine scores on sm_100a]); else it takes the score_mod's."""
    from attnc.backend.score_forms import affine_bias
    from attnc.ir import SCORE_MOD, get_bool, region_block

    return not get_bool(kernel, "has_score_mod") or affine_bias(region_block(kernel, SCORE_MOD)) is not None


def _score_mod(cx: Lowering, op):
    """score_mod(scale * s, b, h, i, j) on each score of the row, CHUNK scores at a time;
    an affine one's s + f / scale, with the offsets of its far chunks (Note [Affine scores
    on sm_100a])."""
    from attnc.backend.score_forms import BiasCode, affine_bias

    b, h, i, js = _hook_coords(cx, op)
    scores = _scores(cx, cx.value(op.operands[0]))
    affine = affine_bias(op.regions[0].blocks[0])
    code = _hook(cx, op) if affine is None else BiasCode(op.regions[0].blocks[0], cx.names, *affine,
                                                          never_empty=_tile_dims(cx))
    outer, given = _hoisted(cx.e, code, b, h, i, js)
    chunks = [list(zip(scores[c0:c0 + CHUNK], js[c0:c0 + CHUNK], given[c0:c0 + CHUNK]))
              for c0 in range(0, len(js), CHUNK)]
    if affine is None:
        return [Rows([x for chunk in chunks for x in _scored_chunk(cx, code, outer, b, h, i, chunk)])]
    parts = [_biased_chunk(cx, code, outer, b, h, i, chunk) for chunk in chunks]
    offsets = [k for _, k in parts]
    return [Rows([x for values, _ in parts for x in values], None if any(k is None for k in offsets) else offsets)]


CHUNK = 32      # scores per branch at the flat diagonals: a tcgen05.ld's (Note [Flat diagonals])


# Note [Hoisted values of a row]: a softmax thread holds one row of S, so a hook's values
# placed per CTA or per query row (attn-hoist's attn.level) are emitted once for the row's
# 128 scores, and those placed per key column once per column, before the scores' own
# ops (Note [Hoisted hook values] in hooks.py). Emitted per score instead, a score_mod
# of 150 per-head param reads gave LLVM 19,200 loads to fold and took minutes to reach PTX.
def _hoisted(e: Emit, code, b, h, i, js: list) -> tuple[dict, list[dict]]:
    """(the hook's values placed per CTA, those known at each key of the row: the CTA's,
    the row's and the key column's), emitted here (Note [Hoisted values of a row])."""
    outer, (row,), cols = code.hoist_tile(e, b, h, 1, lambda r: i, len(js), lambda c: js[c])
    return outer, [{**row, **col} for col in cols]


def _far(cx: Lowering, code, outer: dict, i, chunk: list):
    """(an i1: every key of `chunk` lies beyond the hook's flat diagonals, a function
    giving the hook's values there) or None where it has none (Note [Flat diagonals])."""
    e = cx.e
    spots = {c: (0, c) for c in range(len(chunk))}      # the row's diagonals: key c at column c
    far = code.far_test(e, spots, lambda r: i, lambda c: chunk[c][1])
    if far is None:
        return None
    test, d0 = far
    return test, lambda: code.hoist_at(e, outer, d0)


def _scored_chunk(cx: Lowering, code, outer: dict, b, h, i, chunk: list) -> list:
    """score_mod on each (s, j, values given) of `chunk`; where all its keys lie beyond the
    hook's flat diagonals, with their values computed once (Note [Flat diagonals] in
    attnc/ir/diagonals.py), in a branch that yields the chunk's scores: one branch over
    the row's 128 spilled."""
    e = cx.e

    def scored(once=None):
        return [code(e, e.fmul(s, cx.scale), b, h, i, j, given={**g, **once} if once else g) for s, j, g in chunk]

    far = _far(cx, code, outer, i, chunk)
    if far is None:
        return scored()
    test, once = far
    return branches(test, lambda: scored(once()), scored, [s.type for s, _, _ in chunk])


def _biased_chunk(cx: Lowering, bias, outer: dict, b, h, i, chunk: list) -> tuple[list, ir.Value | None]:
    """(s + f / scale for each (s, j, values given) of `chunk`, None), or where f is one
    value beyond its flat diagonals, a branch yielding (the scores as they are, f / scale)
    there and (s + f / scale, 0) elsewhere (Note [Affine scores on sm_100a])."""
    e = cx.e
    inv_scale = e.cf(1.0 / cx.scale)

    def biased(once=None):
        return [e.fma(bias(e, b, h, i, j, given={**g, **once} if once else g), inv_scale, s) for s, j, g in chunk]

    far = _far(cx, bias, outer, i, chunk)
    types = [s.type for s, _, _ in chunk]
    if far is None:
        return biased(), None
    test, once = far
    if not bias.of_diagonal:
        return branches(test, lambda: biased(once()), biased, types), None

    def far_chunk():
        _, j0, g0 = chunk[0]
        return [s for s, _, _ in chunk] + [e.fmul(bias(e, b, h, i, j0, given={**g0, **once()}), inv_scale)]
    flat = branches(test, far_chunk, lambda: biased() + [e.cf(0.0)], types + [e.f32])
    return flat[:-1], flat[-1]


def _mask(cx: Lowering, op):
    """-inf where mask_mod(b, h, i, j) is false (on every block: a block map's class, where
    the op takes one, is MIXED: Note [Block map on sm_100a] in sm100a.py)."""
    e = cx.e
    code = _hook(cx, op)
    b, h, i, js = _hook_coords(cx, op)
    value = cx.value(op.operands[0])
    scores = _scores(cx, value)
    _, given = _hoisted(e, code, b, h, i, js)
    return [Rows([e.select(code(e, b, h, i, j, given=g), s, e.neg_inf()) for s, j, g in zip(scores, js, given)],
                 _offsets(value))]


def _softmax_step(cx: Lowering, op):
    e, kernel = cx.e, cx.kernel
    value = cx.value(op.operands[0])
    scores = _scores(cx, value)
    m, l = cx.value(op.operands[1]), cx.value(op.operands[2])
    # Keys past N (the last block's) score -inf.
    n_keys = cx.size(get_shape(kernel, "k_shape")[2])
    valid = e.sub(n_keys, first_key(cx, cx.value(kv_block(cx.loops[-1]))))
    scores = [e.select(e.lt(e.c32(j), valid), s, e.neg_inf()) for j, s in enumerate(scores)]
    (probs,), state, (alpha,) = cx.softmax.step([scores], SoftmaxState([m], [l]), check_inf=True,
                                                on_fma=_exp2_fma(op),
                                                offsets=_offsets(value))
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


# The patterns of a softmax role's scores, and of a skeleton role's (Note [Q tiles without rows])
SCORE_PATTERNS = {"attn.score_mod": _score_mod, "attn.mask": _mask, "attn.softmax_step": _softmax_step}
SKELETON_SCORE_PATTERNS = {"attn.score_mod": _no_scores, "attn.mask": _no_scores, "attn.softmax_step": _no_step}
