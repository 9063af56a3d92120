"""attn-analyze-masks never misclassifies: random masks, random sizes, every tile.

Random `mask_mod` expressions over i, j, b, h, dims and constants (+ - * // % min max abs
where, comparisons, and/or/not) are written as `.attn` source, lowered to L1 by the
frontend, given random tile sizes (as attn-tile would), analysed by the pass, and the
functions the pass recorded are run (arith interpreter) on every tile and every query
block. They are compared with the reference's own evaluation of mask_mod
(`attnc.reference_eval`, which shares no code with the analysis): a tile may be called
mixed conservatively, but never skip or full wrongly, and no kept key block may lie
outside the KV segments. Masks with `let`s whose values are used several times check
the analysis where the region is a DAG, not a tree (Note [One target per value]).
"""
from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings, strategies as st
from mask_oracle import analyze_source, check, keep_matrix

INT_LEAVES = ["i", "j", "b", "h", "M", "N", "P", "Q"]


def int_exprs(depth: int, leaves: tuple = tuple(INT_LEAVES)):
    leaf = st.one_of(st.sampled_from(leaves), st.integers(0, 40).map(str),
                     st.integers(0, 400).map(str))
    if depth == 0:
        return leaf
    sub = int_exprs(depth - 1, leaves)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(["+", "-", "*", "//", "%"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(sub, st.sampled_from(["//", "%"]), st.integers(1, 300)).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["min", "max"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        sub.map(lambda a: f"abs({a})"),
        sub.map(lambda a: f"(-{a})"),
        st.tuples(bool_exprs(depth - 1, leaves), sub, sub).map(lambda t: f"where({t[0]}, {t[1]}, {t[2]})"),
    )


def bool_exprs(depth: int, leaves: tuple = tuple(INT_LEAVES)):
    ints = int_exprs(min(depth, 2), leaves)
    compare = st.tuples(ints, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), ints) \
        .map(lambda t: f"({t[0]} {t[1]} {t[2]})")
    if depth == 0:
        return compare
    sub = bool_exprs(depth - 1, leaves)
    return st.one_of(
        compare,
        st.tuples(sub, st.sampled_from(["and", "or"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        sub.map(lambda a: f"(not {a})"),
    )


def shared_masks():
    """`let x = e in let y = f(x) in mask(x, y)`, with x and y as likely as any other leaf."""
    first = int_exprs(2)
    second = int_exprs(2, (*INT_LEAVES, "x", "x", "x"))
    body = bool_exprs(3, (*INT_LEAVES, *["x", "y"] * 4))
    return st.tuples(first, second, body).map(lambda t: f"let x = {t[0]} in let y = {t[1]} in {t[2]}")


def source(mask: str) -> str:
    return f"""attention random_mask {{
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  dim P, Q
  mask_mod(b, h, i, j) = {mask}
  out o: bf16[B, H, M, 64]
}}"""


blocks = st.sampled_from([16, 32, 64, 128])
sizes = st.one_of(st.integers(1, 300), st.integers(100, 300))     # hypothesis favours small ones


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mask=bool_exprs(3), M=sizes, N=sizes, bm=blocks, bn=blocks,
       P=st.integers(-50, 350), Q=st.integers(-50, 350), B=st.integers(1, 3), H=st.integers(1, 3),
       data=st.data())
def test_random_masks_are_never_misclassified(mask, M, N, bm, bn, P, Q, B, H, data):
    check_random_mask(mask, M, N, bm, bn, P, Q, B, H, data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mask=shared_masks(), M=sizes, N=sizes, bm=blocks, bn=blocks,
       P=st.integers(-50, 350), Q=st.integers(-50, 350), B=st.integers(1, 3), H=st.integers(1, 3),
       data=st.data())
def test_random_masks_with_shared_values_are_never_misclassified(mask, M, N, bm, bn, P, Q, B, H, data):
    check_random_mask(mask, M, N, bm, bn, P, Q, B, H, data)


def check_random_mask(mask, M, N, bm, bn, P, Q, B, H, data):
    variant, rec = analyze_source(source(mask), bm, bn)
    assert rec.kind == "static"
    b, h = data.draw(st.integers(0, B - 1)), data.draw(st.integers(0, H - 1))
    dims = {"B": B, "H": H, "M": M, "N": N, "P": P, "Q": Q}
    report = check(rec, keep_matrix(variant, dims, b, h), dims, b, h)
    assert not report.unsound, f"{mask}\n{report}"
    tiles = -(-M // bm) * -(-N // bn)
    event(f"tiles: {'>= 20' if tiles >= 20 else '< 20'}")
    event(f"exact tiles: {'all' if not report.inexact else 'some mixed conservatively'}")
