"""Hand-written L2 IR for mask tests: one attn.attention whose mask_mod is given as text.

The mask body uses %b, %h, %i, %j for the block arguments and must define %keep.
`dim_ops(...)` spells the `attn.dim` reads.
"""
from __future__ import annotations

TENSOR = "tensor<?x?x?x128xbf16>"


def dim_ops(*names: str) -> str:
    return "\n".join(f'    %{n} = "attn.dim"() {{name = "{n}"}} : () -> i32' for n in names)


def module_text(name: str, mask_body: str | None, *, dims=("B", "H", "M", "N"), block_m=64,
                block_n=64, seq_q="M", seq_k="N", tile=True, params: str = "") -> str:
    """An L2 module around `mask_body` (None: no mask_mod)."""
    has_mask = mask_body is not None
    if not has_mask:
        mask_body = "    %keep = arith.constant true"

    def shape(axis):
        return "[" + ", ".join(f'"{x}"' if isinstance(x, str) else f"{x} : i64"
                               for x in ("B", "H", axis, 128)) + "]"
    tile_attrs = f"block_m = {block_m} : i64, block_n = {block_n} : i64, " if tile else ""
    dims_attr = "[" + ", ".join(f'"{d}"' for d in dims) + "]"
    param_args = "".join(f", %{p.split(':')[0].strip()}: {p.split(':')[1].strip()}"
                         for p in params.split(",") if p)
    param_operands = "".join(f", %{p.split(':')[0].strip()}" for p in params.split(",") if p)
    param_types = "".join(f", {p.split(':')[1].strip()}" for p in params.split(",") if p)
    return f'''
func.func @{name}(%q: {TENSOR}, %k: {TENSOR}, %v: {TENSOR}{param_args}) -> {TENSOR} {{
  %o = "attn.attention"(%q, %k, %v{param_operands}) ({{
  ^bb0(%s: f32, %sb: i32, %sh: i32, %si: i32, %sj: i32):
    "gpu.yield"(%s) : (f32) -> ()
  }}, {{
  ^bb0(%b: i32, %h: i32, %i: i32, %j: i32):
{mask_body}
    "gpu.yield"(%keep) : (i1) -> () loc("{name}.attn":6:26)
  }}, {{
  ^bb0(%zh: i32):
    %zero = arith.constant 0.0 : f32
    "gpu.yield"(%zero) : (f32) -> ()
  }}) {{variant = "{name}", dtype = "bf16", head_dim_qk = 128 : i64, head_dim_v = 128 : i64,
       scale = 0.08838834764831845 : f64, dims = {dims_attr}, q_shape = {shape(seq_q)},
       k_shape = {shape(seq_k)}, v_shape = {shape(seq_k)}, params = [], param_shapes = [], param_dtypes = [],
       outputs = ["o"], gqa = false, has_score_mod = false, has_mask_mod = {str(has_mask).lower()},
       has_sink = false, {tile_attrs}target = "sm_90a"}}
     : ({TENSOR}, {TENSOR}, {TENSOR}{param_types}) -> {TENSOR} loc("{name}.attn":2:1)
  return %o : {TENSOR}
}}
'''
