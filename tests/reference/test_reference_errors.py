"""The reference rejects inconsistent inputs with located errors, and never needs MLIR."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from attnc.errors import AttncError
from attnc.reference import reference

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def zeros(*shape, dtype=np.float16):
    return np.zeros(shape, dtype)


def mha(**overrides):
    args = dict(q=zeros(1, 2, 3, 128), k=zeros(1, 2, 5, 128), v=zeros(1, 2, 5, 128))
    args.update(overrides)
    return args


def error_of(source, **inputs) -> AttncError:
    with pytest.raises(AttncError) as info:
        reference(source, **inputs)
    return info.value


def test_unknown_argument():
    e = error_of(EXAMPLES / "mha.attn", **mha(x=zeros(1)))
    assert e.message == "unknown argument 'x' for mha; expected q, k, v, B, H, M, N"


def test_missing_input_points_at_its_declaration():
    args = mha()
    del args["v"]
    e = error_of(EXAMPLES / "mha.attn", **args)
    assert e.message == "missing input 'v': bf16[B, H, N, 128]"
    assert e.render().splitlines() == [
        f"{EXAMPLES / 'mha.attn'}:5:3: error: missing input 'v': bf16[B, H, N, 128]",
        "  v: bf16[B, H, N, 128]",
        "  ^"]


def test_missing_param():
    e = error_of(EXAMPLES / "alibi.attn", q=zeros(1, 2, 3, 64), k=zeros(1, 2, 3, 64),
                 v=zeros(1, 2, 3, 64))
    assert e.message == "missing input 'slopes': f32[H]"
    assert (e.span.line, e.span.col) == (6, 9)


def test_missing_runtime_dim():
    e = error_of(EXAMPLES / "prefix_lm.attn", **mha())
    assert e.message == "missing dim 'P': no input shape carries it; pass it as P=<int>"


def test_a_dim_nothing_uses_is_not_required():
    """As the kernel's launch (found by a review: the reference still asked for it)."""
    source = (EXAMPLES / "prefix_lm.attn").read_text().replace("j < P or ", "")
    rng = np.random.default_rng(3)          # not zeros, whose output is 0 whatever the mask
    q, k, v = (rng.standard_normal(shape) for shape in ((1, 2, 3, 128), (1, 2, 5, 128), (1, 2, 5, 128)))
    out = reference(source, q=q, k=k, v=v)
    assert np.abs(out["o"]).max() > 0
    assert np.array_equal(out["o"], reference(source, q=q, k=k, v=v, P=7)["o"])
    causal = (EXAMPLES / "prefix_lm.attn").read_text().replace("j < P or ", "j < 0 or ")
    assert np.array_equal(out["o"], reference(causal, q=q, k=k, v=v, P=7)["o"])


@pytest.mark.parametrize("value, shown", [(2.5, "2.5"), (True, "True"), ("3", "'3'")])
def test_runtime_dim_must_be_an_integer(value, shown):
    e = error_of(EXAMPLES / "prefix_lm.attn", **mha(P=value))
    assert e.message == f"dim 'P' must be an integer, got {shown}"


def test_runtime_dim_must_not_be_negative():
    e = error_of(EXAMPLES / "prefix_lm.attn", **mha(P=-1))
    assert e.message == "dim 'P' must not be negative, got -1"


def test_dim_bound_twice_by_two_tensors():
    e = error_of(EXAMPLES / "mha.attn", **mha(k=zeros(1, 3, 5, 128)))
    assert e.message == "dim 'H' is 2 from 'q' (axis 1) but 3 from 'k' (axis 1)"
    assert (e.span.line, e.span.col) == (4, 3)


def test_dim_bound_twice_by_a_param():
    e = error_of(EXAMPLES / "alibi.attn", q=zeros(1, 2, 3, 64), k=zeros(1, 2, 3, 64),
                 v=zeros(1, 2, 3, 64), slopes=zeros(4, dtype=np.float32))
    assert e.message == "dim 'H' is 2 from 'q' (axis 1) but 4 from 'slopes' (axis 0)"


def test_dim_bound_twice_by_a_keyword():
    e = error_of(EXAMPLES / "mha.attn", **mha(M=4))
    assert e.message == "dim 'M' is 4 from the argument M=4 but 3 from 'q' (axis 2)"


def test_fixed_size_that_does_not_match():
    e = error_of(EXAMPLES / "mha.attn", **mha(q=zeros(1, 2, 3, 64)))
    assert e.message == "axis 3 of 'q' is declared 128 but the array has 64 (shape (1, 2, 3, 64))"


def test_mqa_fixes_one_kv_head():
    e = error_of(EXAMPLES / "mqa.attn", q=zeros(1, 4, 3, 128), k=zeros(1, 2, 3, 128),
                 v=zeros(1, 2, 3, 128))
    assert e.message == "axis 1 of 'k' is declared 1 but the array has 2 (shape (1, 2, 3, 128))"


def test_heads_not_a_multiple_of_kv_heads():
    e = error_of(EXAMPLES / "gemma2.attn", q=zeros(1, 3, 4, 128), k=zeros(1, 2, 4, 128),
                 v=zeros(1, 2, 4, 128))
    assert e.message == ("the 3 query heads of 'q' must be a multiple of the 2 key/value heads "
                         "of 'k' (GQA)")
    assert e.span.line == 4


def test_wrong_rank():
    e = error_of(EXAMPLES / "mha.attn", **mha(q=zeros(2, 3, 128)))
    assert e.message == ("'q' is declared [B, H, M, 128] (4 dims) but the array has shape "
                         "(2, 3, 128)")


def test_non_numeric_input():
    e = error_of(EXAMPLES / "mha.attn", **mha(v=np.array(["a"])))
    assert e.message == "input 'v' must be a numeric array"


@pytest.mark.parametrize("name, dtype", [("q", np.int32), ("k", np.uint8), ("v", np.bool_)])
def test_integer_and_bool_qkv_are_refused_at_their_declaration(name, dtype):
    e = error_of(EXAMPLES / "mha.attn", **mha(**{name: np.ones(mha()[name].shape, dtype)}))
    assert e.message == (f"input '{name}' holds {np.dtype(dtype)} values but is declared bf16: q, k and v take "
                         f"a float array (any float dtype, rounded to bf16); convert it, e.g. "
                         f"{name}.astype(np.float32)")
    assert e.span.line == 3 + "qkv".index(name)


def test_integer_params_are_still_taken():
    q = zeros(1, 1, 2, 64)
    out = reference(EXAMPLES / "docs_sink.attn", q=q, k=q, v=q, doc=np.array([[0, 1]], np.int64),
                    sinks=zeros(1, dtype=np.float32))
    assert out["o"].shape == (1, 1, 2, 64)


def test_integer_param_with_fractional_values():
    q = zeros(1, 1, 2, 64)
    e = error_of(EXAMPLES / "docs_sink.attn", q=q, k=q, v=q, doc=np.array([[0.0, 0.5]]),
                 sinks=zeros(1, dtype=np.float32))
    assert e.message == "param 'doc' is i32 but the array holds non-integer values"


def test_param_with_an_empty_axis():
    e = error_of(EXAMPLES / "relative_bias.attn", q=zeros(1, 1, 2, 64), k=zeros(1, 1, 2, 64),
                 v=zeros(1, 1, 2, 64), bias=np.zeros((1, 0), np.float32))
    assert e.message == "axis 1 of 'bias' is declared 32 but the array has 0 (shape (1, 0))"
    source = (EXAMPLES / "alibi.attn").read_text().replace("f32[H]", "f32[T]")
    q = zeros(1, 2, 2, 64)
    e = error_of(source, q=q, k=q, v=q, slopes=np.zeros(0, np.float32))
    assert e.message == ("param 'slopes' has shape (0,): a clamped read needs at least one "
                         "element per axis")


@pytest.mark.parametrize("shape", [(0, 2, 3), (1, 2, 0)])
def test_with_no_query_rows_an_empty_param_is_no_error(shape):
    """B * H * M = 0 (shape: B, H, M): no hook reads a param; documents at B = 0 give an
    empty output, as the runtime does."""
    b, h, m = shape
    q = zeros(b, h, m, 64)
    out = reference((EXAMPLES / "docs_sink.attn").read_text(), q, q, q,
                    doc=np.zeros((b, m), np.int32), sinks=zeros(h, dtype=np.float32))
    assert out["o"].shape == (b, h, m, 64)


def test_source_errors_come_from_the_frontend():
    e = error_of("attention bad {\n  q: bf16[B, H, M, 128]\n}\n", q=zeros(1))
    assert e.message.startswith("missing input 'k'")


def test_import_and_run_without_mlir():
    """attnc.reference must work on a machine with no MLIR bindings (design.md section 8)."""
    script = textwrap.dedent(f"""
        import sys
        class BlockMLIR:
            def find_spec(self, name, path=None, target=None):
                if name == "mlir" or name.startswith("mlir."):
                    raise ImportError("mlir is blocked in this test")
                return None
        sys.meta_path.insert(0, BlockMLIR())
        import numpy as np
        import attnc.reference
        q = np.ones((1, 2, 3, 128), np.float16)
        out = attnc.reference.reference({str(EXAMPLES / 'gemma2.attn')!r}, q=q, k=q, v=q)
        assert out["o"].shape == (1, 2, 3, 128) and out["lse"].shape == (1, 2, 3)
        assert not any(m == "mlir" or m.startswith("mlir.") for m in sys.modules)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
