"""Note [Canonical dims] (sema.py): B, H, M, HKV and N are usable in every variant, as
dsl.md says, also where the shapes give numbers or other names in their places."""
from __future__ import annotations

import numpy as np
import pytest

from attnc.frontend import ast, load
from attnc.reference import reference
from frontend_diagnostics import expect_error


def variant(q: str, k: str, mask: str) -> str:
    return (f"attention t {{\n  q: f16[{q}, 64]\n  k: f16[{k}, 64]\n  v: f16[{k}, 64]\n"
            f"  mask_mod(b, h, i, j) = {mask}\n  out o: f16[{q}, 64]\n}}\n")


def names(expr: ast.Expr) -> list[ast.Name]:
    if isinstance(expr, ast.Name):
        return [expr]
    children = [getattr(expr, f) for f in ("lhs", "rhs", "operand", "value", "body") if hasattr(expr, f)]
    children += list(getattr(expr, "args", ()))
    return [n for c in children if isinstance(c, ast.Expr) for n in names(c)]


@pytest.mark.parametrize("q, k, want", [
    ("B, H, 12", "B, H, 20", {"M": 12, "N": 20, "HKV": "H"}),
    ("2, 4, M", "2, 1, N", {"B": 2, "H": 4, "HKV": 1}),
    ("Batch, Heads, S", "Batch, Heads, T", {"B": "Batch", "H": "Heads", "M": "S", "HKV": "Heads", "N": "T"}),
])
def test_a_canonical_name_stands_for_what_its_place_holds(q, k, want):
    body = load(variant(q, k, "j <= i + (N - M) and h < HKV + H and b < B")).mask_mod.body
    seen = {n.id: n.stands_for for n in names(body)}
    assert {name: seen[name] for name in want} == want
    assert all(seen[name] is None for name in seen.keys() - want.keys())


def test_a_dim_the_shapes_use_is_itself():
    body = load(variant("B, H, M", "B, HKV, N", "j <= i + (N - M)")).mask_mod.body
    assert {n.id: n.stands_for for n in names(body)} == {"i": None, "j": None, "N": None, "M": None}


def test_bottom_right_causal_over_fixed_lengths_is_the_explicit_one():
    """The reference of `j <= i + (N - M)` at M = 12, N = 20 fixed equals `j <= i + 8`."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, 12, 64)).astype(np.float16)
    k, v = (rng.standard_normal((2, 3, 20, 64)).astype(np.float16) for _ in range(2))
    named = reference(variant("B, H, 12", "B, H, 20", "j <= i + (N - M) and h < HKV"), q, k, v)
    explicit = reference(variant("B, H, 12", "B, H, 20", "j <= i + 8 and h < H"), q, k, v)
    np.testing.assert_array_equal(named["o"], explicit["o"])
    assert np.isfinite(named["o"]).all() and not np.array_equal(named["o"][0, 0, 0], named["o"][0, 0, 11])


def test_a_canonical_name_is_a_dim_for_hook_parameters():
    source = variant("B, H, 12", "B, H, 20", "j <= i").replace("mask_mod(b, h, i, j)", "mask_mod(b, h, N, j)")
    assert "parameter 'N' of mask_mod shadows the dim 'N'" in str(expect_error(source))


def test_a_canonical_name_in_a_param_shape_is_what_its_place_holds():
    """`param slopes: f32[H]` with q's heads given as 8 is f32[8], not a new dim H that the
    launch would take from the param's length (found by a review: slopes of length 3 were
    accepted for 8 heads, and float(H) was 3)."""
    source = ("attention t {\n  q: f16[B, 8, M, 64]\n  k: f16[B, 8, 16, 64]\n  v: f16[B, 8, 16, 64]\n"
              "  param slopes: f32[H]\n  param bias: f32[HKV, N]\n"
              "  score_mod(s, b, h, i, j) = s + slopes[h] + bias[h, j] + float(H)\n  out o: f16[B, 8, M, 64]\n}\n")
    v = load(source)
    assert [p.shape for p in v.params] == [(8,), (8, 16)] and v.dims == ("B", "M")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 8, 5, 64)).astype(np.float16)
    k = rng.standard_normal((1, 8, 16, 64)).astype(np.float16)
    with pytest.raises(Exception, match="axis 0 of 'slopes' is declared 8 but the array has 3"):
        reference(source, q, k, k, slopes=np.zeros(3, np.float32), bias=np.zeros((8, 16), np.float32))


def test_a_dim_declared_with_a_canonical_name_the_shapes_fix_is_refused():
    source = variant("B, H, 12", "B, H, 16", "j < N").replace("  mask_mod", "  dim N\n  mask_mod")
    assert str(expect_error(source)).startswith(
        "t.attn:5:7: error: 'N' is k's rows, which the shapes give as 16: a dim of that name would be "
        "another value (write 16, or put 'N' in that place of the shape)")
