"""Declarations beyond the examples: dims, names, GQA/MQA shapes, and the known gaps.

Tests marked xfail(strict=True) show frontend bugs; each asserts the correct
behaviour and is removed from xfail by the fix.
"""
from __future__ import annotations

import math

import pytest

from attnc.errors import AttncError
from attnc.frontend import load
from frontend_diagnostics import expect_error

QKV = """  q: bf16[B, H, M, 128]
  k: bf16[B, HKV, N, 128]
  v: bf16[B, HKV, N, 128]
"""
O = "  out o: bf16[B, H, M, 128]\n"


def source(*lines: str, qkv: str = QKV, out: str = O) -> str:
    """Line 1 `attention t {`, lines 2-4 q/k/v, then `lines` from line 5, then `out o`."""
    return "attention t {\n" + qkv + "".join(f"  {ln}\n" for ln in lines) + out + "}\n"


def test_runtime_dims_from_dim_declarations_and_param_shapes():
    v = load(source("dim P, Q", "param table: f32[H, NB]", "dim R"))
    assert v.dims == ("B", "H", "M", "HKV", "N", "NB", "P", "Q", "R")


def test_declaring_a_shape_dim_again_is_allowed():
    assert load(source("dim N")).dims == ("B", "H", "M", "HKV", "N")


def test_declaration_order_is_free():
    text = "attention t {\n" + O + "  mask_mod(b, h, i, j) = j <= i\n" + QKV + "}\n"
    v = load(text)
    assert (v.q.shape, v.mask_mod.body.ty) == (("B", "H", "M", 128), "bool")


def test_hook_parameters_may_be_renamed():
    v = load(source("score_mod(score, batch, head, row, col) = score + float(col - row)",
                    "mask_mod(x0, x1, x2, x3) = x3 <= x2"))
    assert v.score_mod.params == ("score", "batch", "head", "row", "col")
    assert v.score_mod.body.ty == "float"


@pytest.mark.parametrize("h, hkv", [(8, 8), (8, 2), (8, 1), ("H", 2), (6, "HKV")])
def test_gqa_head_counts_that_divide(h, hkv):
    qkv = (f"  q: f16[B, {h}, M, 64]\n  k: f16[B, {hkv}, N, 64]\n  v: f16[B, {hkv}, N, 64]\n")
    v = load(source(qkv=qkv, out=f"  out o: f32[B, {h}, M, 64]\n"))
    assert (v.heads, v.heads_kv, v.output("o").dtype) == (h, hkv, "f32")


@pytest.mark.parametrize("d", [64, 96, 128, 256])
def test_supported_head_dims(d):
    qkv = f"  q: bf16[B, H, M, {d}]\n  k: bf16[B, H, N, {d}]\n  v: bf16[B, H, N, {d}]\n"
    v = load(source(qkv=qkv, out=f"  out o: bf16[B, H, M, {d}]\n"))
    assert (v.head_dim_qk, v.scale) == (d, pytest.approx(1 / math.sqrt(d)))


def test_fixed_sizes_in_shapes():
    qkv = "  q: bf16[2, 16, 4096, 128]\n  k: bf16[2, 4, 4096, 128]\n  v: bf16[2, 4, 4096, 128]\n"
    v = load(source(qkv=qkv, out="  out o: bf16[2, 16, 4096, 128]\n  out lse: f32[2, 16, 4096]\n"))
    assert (v.dims, v.batch, v.heads, v.heads_kv, v.seq_q) == ((), 2, 16, 4, 4096)


def test_a_fixed_size_of_2_30_is_the_largest_accepted():
    """The kernels take sizes up to 2^30 (Note [Exact integers]); a fixed size above it is
    refused here, as the runtime refuses a dim above it (found by a review: fixed sizes up
    to 2^31 - 1 compiled, and their keys past 2^30 were masked wrongly)."""
    qkv = ("  q: bf16[B, H, {m}, 128]\n  k: bf16[B, H, N, 128]\n  v: bf16[B, H, N, 128]\n")
    assert load(source(qkv=qkv.format(m=2**30), out="  out o: bf16[B, H, 1073741824, 128]\n")).seq_q == 2**30
    err = expect_error(source(qkv=qkv.format(m=2**30 + 1), out="  out o: bf16[B, H, M, 128]\n"))
    assert err.message == "dimension 1073741825 is above 2^30 = 1073741824, the largest size the kernels take"


def test_first_error_wins():
    err = expect_error(source("dim p", "bias: f32[H]"))
    assert err.message == "dim name 'p' must start with a capital letter"


# --- known bugs ---------------------------------------------------------------------

def test_param_named_o_is_not_the_output():
    err = expect_error(source("param o: f32[B, H, M, 128]", out=""))
    assert "out o" in err.message


def test_param_named_lse_is_not_an_output():
    try:
        v = load(source("param lse: f32[B, H, M]"))
    except AttncError:
        return  # rejecting the name is a correct fix too
    assert not v.has_lse and v.outputs == (v.output("o"),)


def test_param_named_like_a_dim_is_a_duplicate():
    err = expect_error(source("param H: f32[H]", "score_mod(s, b, h, i, j) = s + H[h] * float(H)"))
    assert (err.span.line, err.span.col) == (5, 9)


def test_a_dim_nothing_uses_is_a_warning_not_an_error():
    """A `dim` that no shape and no hook uses is legal but likely a leftover: a warning at
    its name (found by a review: the launch then had to pass it, for nothing)."""
    v = load(source("dim P, Q", "param table: f32[H, R]", "dim R, N",
                    "mask_mod(b, h, i, j) = j < P or j <= i"), "t.attn")
    assert [w.render() for w in v.warnings] == [
        "t.attn:5:10: warning: dim 'Q' is declared but never used: no kernel reads it, and a launch "
        "need not pass it\n  dim P, Q\n         ^"]
    assert v.dims == ("B", "H", "M", "HKV", "N", "R", "P", "Q")     # still a dim of the variant
    assert load(source("dim P", "score_mod(s, b, h, i, j) = s + float(P)")).warnings == ()


@pytest.mark.parametrize("call", ["foo(2)", "sink(1)"])
def test_an_unknown_function_in_scale_is_named(call):
    """It was reported as "where() has no place in it" (found by a review)."""
    err = expect_error(source(f"scale = {call}"))
    assert err.message == f"unknown function '{call.split('(')[0]}'" and (err.span.line, err.span.col) == (5, 11)


@pytest.mark.parametrize("line, at, message", [
    ("param bias f32[H]", "f32", "unexpected name 'f32', expected ':'"),
    ("dim P Q", "Q", "name 'Q' after a dim's name: the names of a 'dim' are separated by commas ('dim P, Q')"),
    ("sink h = 1.0", "sink", "'sink' starts a hook: its parameters go in parentheses ('sink(...) = ...')"),
    ("score_mod(s, b, h, i, j) = s + float(i => j)", "=>", "unexpected '=>': did you mean '>='?"),
])
def test_parse_errors_name_the_mistake_after_a_hook(line, at, message):
    """Each used to be "name ... after a complete expression" or "equality is '=='" (found by
    a review): the line follows a hook, so the parser read it as that hook's expression."""
    err = expect_error(source("mask_mod(b, h, i, j) = j <= i", line))
    assert (err.message, err.span.line, err.span.col) == (message, 6, line.index(at) + 3)


def test_a_line_ending_in_an_operator_is_reported_there():
    err = expect_error(source("mask_mod(b, h, i, j) = i <", "score_mod(s, b, h, i, j) = s"))
    assert err.message == "the expression ends at '<', with nothing after it (the next line starts the hook 'score_mod')"
    assert (err.span.line, err.span.col) == (5, 28)
