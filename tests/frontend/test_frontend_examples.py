"""Every shipped example loads, and its `Variant` says what the file says."""
from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

from attnc.frontend import Variant, load, load_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# name -> (dtype, dims, (head dim qk, head dim v), (H, HKV), hooks, {param: (dtype, shape)}, outputs)
EXPECTED = {
    "mha": ("bf16", ("B", "H", "M", "N"), (128, 128), ("H", "H"), (), {}, ("o",)),
    "gemma2": ("bf16", ("B", "H", "M", "HKV", "N"), (128, 128), ("H", "HKV"),
               ("score_mod", "mask_mod"), {}, ("o", "lse")),
    "alibi": ("f16", ("B", "H", "M", "N"), (64, 64), ("H", "H"), ("score_mod", "mask_mod"),
              {"slopes": ("f32", ("H",))}, ("o",)),
    "docs_sink": ("bf16", ("B", "H", "M", "N"), (64, 64), ("H", "H"), ("mask_mod", "sink"),
                  {"doc": ("i32", ("B", "N")), "sinks": ("f32", ("H",))}, ("o",)),
    "prefix_lm": ("bf16", ("B", "H", "M", "N", "P"), (128, 128), ("H", "H"), ("mask_mod",), {}, ("o",)),
    "relative_bias": ("bf16", ("B", "H", "M", "N"), (64, 64), ("H", "H"), ("score_mod",),
                      {"bias": ("f32", ("H", 32))}, ("o",)),
    "sliding_window": ("bf16", ("B", "H", "M", "N"), (128, 128), ("H", "H"), ("mask_mod",), {}, ("o",)),
    "softcap": ("bf16", ("B", "H", "M", "N"), (128, 128), ("H", "H"), ("score_mod",), {}, ("o",)),
    "mqa": ("f16", ("B", "H", "M", "N"), (128, 128), ("H", 1), ("mask_mod",), {}, ("o", "lse")),
    "diff_head_dims": ("bf16", ("B", "H", "M", "HKV", "N"), (128, 64), ("H", "HKV"), (), {}, ("o",)),
}


def test_every_example_is_covered():
    assert {p.stem for p in EXAMPLES.glob("*.attn")} == set(EXPECTED)


@pytest.fixture(params=sorted(EXPECTED))
def example(request) -> tuple[str, Variant]:
    return request.param, load_file(EXAMPLES / f"{request.param}.attn")


def test_example_declarations(example):
    name, v = example
    dtype, dims, head_dims, heads, hooks, params, outputs = EXPECTED[name]
    assert v.name == name
    assert v.dtype == v.q.dtype == v.k.dtype == v.v.dtype == dtype
    assert v.dims == dims
    assert (v.head_dim_qk, v.head_dim_v) == head_dims
    assert (v.heads, v.heads_kv) == heads
    assert (v.batch, v.seq_q, v.seq_k) == ("B", "M", "N")
    assert tuple(h.name for h in v.hooks()) == hooks
    assert {p.name: (p.dtype, p.shape) for p in v.params} == params
    assert all(p.role == "param" for p in v.params)
    assert tuple(t.name for t in v.outputs) == outputs
    assert v.has_lse == ("lse" in outputs)


def test_example_outputs(example):
    _, v = example
    o = v.output("o")
    assert (o.role, o.dtype, o.shape) == ("o", v.dtype, (v.batch, v.heads, v.seq_q, v.head_dim_v))
    if v.has_lse:
        lse = v.output("lse")
        assert (lse.role, lse.dtype, lse.shape) == ("lse", "f32", (v.batch, v.heads, v.seq_q))


def test_example_scale_defaults_to_rsqrt_of_qk_head_dim(example):
    # gemma2 spells the default out; diff_head_dims shows it is the QK head dim, not V's.
    _, v = example
    assert v.scale == pytest.approx(1 / math.sqrt(v.head_dim_qk), rel=1e-7)
    assert v.scale == struct.unpack("f", struct.pack("f", v.scale))[0]      # an f32 (Note [Scale in f32])


def test_example_hook_bodies_are_typed(example):
    _, v = example
    for hook in v.hooks():
        assert hook.body.ty == ("bool" if hook.name == "mask_mod" else "float")


def test_example_hook_parameter_names():
    v = load_file(EXAMPLES / "gemma2.attn")
    assert v.score_mod.params == ("s", "b", "h", "i", "j")
    assert v.mask_mod.params == ("b", "h", "i", "j")
    assert load_file(EXAMPLES / "docs_sink.attn").sink.params == ("h",)


def test_example_positions():
    """Declarations remember where they are (line, column) for later diagnostics."""
    v = load_file(EXAMPLES / "gemma2.attn")
    assert (v.q.span.line, v.q.span.col) == (3, 3)
    assert (v.output("lse").span.line, v.output("lse").span.col) == (10, 7)
    assert (v.score_mod.span.line, v.score_mod.span.col) == (7, 3)
    assert (v.mask_mod.body.span.line, v.mask_mod.body.span.col) == (8, 26)


def test_load_file_and_load_agree():
    path = EXAMPLES / "alibi.attn"
    from_file = load_file(path)
    from_text = load(path.read_text(), str(path))
    assert from_file.filename == from_text.filename == str(path)
    assert from_file.source == from_text.source == path.read_text()
    assert (from_file.dims, from_file.params, from_file.outputs) == \
        (from_text.dims, from_text.params, from_text.outputs)


def test_source_variations_load_the_same():
    """CRLF line ends, tabs and trailing comments do not change the meaning."""
    text = (EXAMPLES / "gemma2.attn").read_text()
    base = load(text)
    for variant in (text.replace("\n", "\r\n"), text.replace("  ", "\t"), text + "# trailing\n",
                    text.rstrip("\n")):
        v = load(variant)
        assert v.dims == base.dims and v.scale == base.scale
        assert [(t.name, t.dtype, t.shape) for t in (*v.inputs, *v.outputs)] == \
            [(t.name, t.dtype, t.shape) for t in (*base.inputs, *base.outputs)]
        assert [(h.name, h.params, h.body.ty) for h in v.hooks()] == \
            [(h.name, h.params, h.body.ty) for h in base.hooks()]
