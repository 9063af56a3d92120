"""The meaning of a `.attn` variant in numpy: the oracle of every GPU test. q, k and v
hold values of their declared dtype (f16 or bf16: arrays of another float dtype are
rounded to it first, to nearest); the hooks compute in f32 and 64-bit integers, as
dsl.md says (attnc.reference_eval); the scores' dot products, the softmax and P.V in
float64, more exactly than any kernel.

    out = reference(source, q=q, k=k, v=v, slopes=slopes, P=100)
    out["o"]      # float64 [B, H, M, DV]
    out["lse"]    # float64 [B, H, M], when the variant declares it

This module is the definition of the language (design.md section 7). It follows
dsl.md "Semantics" line by line, for every batch b, query head h, row i, key j:

    hk     = h // (H / HKV)
    s      = scale * dot(q[b, h, i], k[b, hk, j])
    s      = score_mod(s, b, h, i, j)                    # identity when absent
    keep   = mask_mod(b, h, i, j)                        # true when absent
    m      = max(max_{j: keep} s, sink(h))               # sink only when declared
    l      = sum_{j: keep} exp(s - m) + exp(sink(h) - m)
    o      = sum_{j: keep} exp(s - m) / l * v[b, hk, j]
    lse    = m + log(l)

and shares nothing with the kernel path: no MLIR, no tiles, no exp2 folding. The
index space is walked in blocks of whole rows (softmax is per row) of about
BLOCK_ELEMENTS scores, so that B*H*M*N of 1e7 and more runs in a fraction of a second
in bounded memory; hook bodies are evaluated vectorized over each block by
`attnc.reference_eval`.

Inputs are given by their DSL names; every symbolic dim is read off the shapes, and a
dim no input carries (`dim P`) is passed as an integer keyword. Everything is checked
before anything is computed; a mistake raises `AttncError` naming the tensors.
"""
from __future__ import annotations

import math
import operator
import os
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from attnc.errors import AttncError
from attnc.frontend import load, load_file
from attnc.frontend.ast import FLOAT
from attnc.frontend.variant import Tensor, Variant
from attnc.reference_eval import DTYPES, Evaluator

# Elements of the score matrix per block: hook bodies create a few temporaries of
# this size each, so it bounds the working set (about 8 MiB per float64 temporary).
BLOCK_ELEMENTS = 1 << 20


def reference(source, /, *qkv, **inputs) -> dict[str, np.ndarray]:
    """The outputs of the variant `source` on `inputs`, as float64 arrays by name.

    `source` is `.attn` text, a path to a `.attn` file, or a loaded `Variant`; q, k and v
    may also come positionally, in that order (params by name).
    """
    variant = _variant(source)
    if len(qkv) > 3:
        raise AttncError(f"reference takes q, k and v positionally ({len(qkv)} arrays given): pass params by name")
    for name, array in zip(("q", "k", "v"), qkv):
        if name in inputs:
            raise AttncError(f"'{name}' is given both positionally and by name")
        inputs[name] = array
    run = bind(variant, inputs)
    return _attention(variant, run)


class _CallableModule(types.ModuleType):
    """Lets `attnc.reference(source, ...)` keep working once this module is imported.

    Importing the submodule `attnc.reference` rebinds the package attribute of the same
    name from the function in attnc/__init__.py to this module; making the module
    callable keeps the README's `attnc.reference(...)` valid either way.
    """

    def __call__(self, source, /, *qkv, **inputs) -> dict[str, np.ndarray]:
        return reference(source, *qkv, **inputs)


sys.modules[__name__].__class__ = _CallableModule


def _variant(source) -> Variant:
    if isinstance(source, Variant):
        return source
    if not isinstance(source, (str, bytes, os.PathLike)):
        raise AttncError(f"reference takes a variant's text, the path of its .attn file or a loaded "
                         f"Variant, not {type(source).__name__}")
    if isinstance(source, os.PathLike):
        return load_file(source)
    if isinstance(source, str) and "{" not in source and source.endswith(".attn"):
        return load_file(source)
    return load(source)


# --- binding the inputs ------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """The inputs of one call, checked: q/k/v as given, typed params, every dim's size."""
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    params: dict[str, np.ndarray]
    dims: dict[str, int]

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """(B, H, HKV, M, N)."""
        b, h, m, _ = self.q.shape
        return b, h, self.k.shape[1], m, self.k.shape[2]


def bind(variant: Variant, inputs: Mapping[str, object]) -> Run:
    """Check `inputs` against the declarations of `variant` and size every dim."""
    try:
        return _Binder(variant).bind(inputs)
    except AttncError as e:
        raise e.located(variant.filename, variant.source) from None


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


class _Binder:
    def __init__(self, variant: Variant):
        self.variant = variant
        self.sizes: dict[str, int] = {}
        self.origin: dict[str, str] = {}      # dim -> where its size came from, for messages

    def bind(self, inputs: Mapping[str, object]) -> Run:
        tensors = {t.name: t for t in self.variant.inputs}
        for name in inputs:
            if name not in tensors and name not in self.variant.dims:
                expected = ", ".join([*tensors, *self.variant.dims])
                raise AttncError(f"unknown argument '{name}' for {self.variant.name}; "
                                 f"expected {expected}")
        for name in self.variant.dims:
            if name in inputs:
                self._dim_argument(name, inputs[name])
        arrays = {name: self._array(t, inputs) for name, t in tensors.items()}
        for name in self.variant.dims:
            if name not in self.sizes and name not in self.variant.unused_dims:
                raise AttncError(f"missing dim '{name}': no input shape carries it; "
                                 f"pass it as {name}=<int>")
        self._check_heads(arrays["q"], arrays["k"])
        rows = math.prod(arrays["q"].shape[:-1])     # B * H * M: with none, no hook reads a param
        params = {t.name: self._param(t, arrays[t.name], rows) for t in self.variant.params}
        return Run(*(arrays[n] for n in "qkv"), params=params, dims=dict(self.sizes))

    def _dim_argument(self, name: str, value: object) -> None:
        if isinstance(value, (bool, np.bool_)):
            raise AttncError(f"dim '{name}' must be an integer, got {value!r}")
        try:
            size = operator.index(value)
        except TypeError:
            raise AttncError(f"dim '{name}' must be an integer, got {value!r}") from None
        if size < 0:
            raise AttncError(f"dim '{name}' must not be negative, got {size}")
        self.sizes[name] = size
        self.origin[name] = f"the argument {name}={size}"

    def _array(self, t: Tensor, inputs: Mapping[str, object]) -> np.ndarray:
        if t.name not in inputs:
            raise AttncError(f"missing input '{t.name}': {t.dtype}{_fmt_shape(t.shape)}", t.span)
        try:
            array = np.asarray(inputs[t.name])
            numeric = array.dtype.kind in "biuf" or array.dtype.name == "bfloat16"
        except (TypeError, ValueError):
            numeric = False
        if not numeric:
            raise AttncError(f"input '{t.name}' must be a numeric array", t.span)
        if t.role in ("q", "k", "v") and array.dtype.kind in "biu":
            # Rounded to the declared dtype, integers would pass for scores silently.
            raise AttncError(f"input '{t.name}' holds {array.dtype} values but is declared {t.dtype}: q, k and v "
                             f"take a float array (any float dtype, rounded to {t.dtype}); convert it, e.g. "
                             f"{t.name}.astype(np.float32)", t.span)
        if array.ndim != len(t.shape):
            raise AttncError(f"'{t.name}' is declared {_fmt_shape(t.shape)} ({len(t.shape)} dims) "
                             f"but the array has shape {array.shape}", t.span)
        for axis, (dim, size) in enumerate(zip(t.shape, array.shape)):
            self._size(t, axis, dim, size, array.shape)
        return array

    def _size(self, t: Tensor, axis: int, dim, size: int, shape) -> None:
        where = f"'{t.name}' (axis {axis})"
        if isinstance(dim, int):
            if size != dim:
                raise AttncError(f"axis {axis} of '{t.name}' is declared {dim} but the array "
                                 f"has {size} (shape {shape})", t.span)
            return
        if dim not in self.sizes:
            self.sizes[dim], self.origin[dim] = size, where
        elif self.sizes[dim] != size:
            raise AttncError(f"dim '{dim}' is {self.sizes[dim]} from {self.origin[dim]} "
                             f"but {size} from {where}", t.span)

    def _check_heads(self, q: np.ndarray, k: np.ndarray) -> None:
        heads, heads_kv = q.shape[1], k.shape[1]
        if heads_kv == 0 and heads == 0:
            return              # H = HKV = 0: nothing to compute, as on the GPU
        if heads_kv == 0 or heads % heads_kv:
            raise AttncError(f"the {heads} query heads of 'q' must be a multiple of the "
                             f"{heads_kv} key/value heads of 'k' (GQA)", self.variant.k.span)

    def _param(self, t: Tensor, array: np.ndarray, rows: int) -> np.ndarray:
        if 0 in array.shape and rows:
            raise AttncError(f"param '{t.name}' has shape {array.shape}: a clamped read "
                             f"needs at least one element per axis", t.span)
        if t.dtype == "f32":
            with np.errstate(over="ignore"):
                return array.astype(np.float32)         # what the kernels read
        if array.dtype.kind in "biu":
            values = array.astype(np.int64)
        else:
            values = array.astype(np.float64)
            if not np.all(np.isfinite(values) & (values == np.trunc(values))):
                raise AttncError(f"param '{t.name}' is i32 but the array holds non-integer values",
                                 t.span)
        if values.size and not (-2 ** 31 <= values.min() and values.max() < 2 ** 31):
            raise AttncError(f"param '{t.name}' is i32 but the array holds values outside its range "
                             f"({values.min()} to {values.max()})", t.span)
        return values.astype(np.int64)


# --- the computation ---------------------------------------------------------------

def _attention(variant: Variant, run: Run) -> dict[str, np.ndarray]:
    batch, heads, heads_kv, rows, keys = run.shape
    q, k, v = (_declared(getattr(run, n), getattr(variant, n).dtype) for n in "qkv")
    kv_head = np.arange(heads) // max(1, heads // max(heads_kv, 1))
    o = np.zeros((batch, heads, rows, v.shape[3]))
    lse = np.full((batch, heads, rows), -np.inf)
    evaluator = Evaluator(run.dims, run.params)
    for bs, hs, rs in _blocks(batch, heads, rows, keys):
        qb = q[bs, hs, rs]
        kb, vb = k[bs][:, kv_head[hs]], v[bs][:, kv_head[hs]]
        s = variant.scale * np.matmul(qb, kb.swapaxes(-1, -2))
        grid = _grid(bs, hs, rs, keys)
        o[bs, hs, rs], lse[bs, hs, rs] = _softmax_rows(variant, evaluator, s, grid, vb)
    outputs = {"o": o}
    if variant.has_lse:
        outputs["lse"] = lse
    return outputs


def _declared(array: np.ndarray, dtype: str) -> np.ndarray:
    """`array` as float64 holding the values of the declared `dtype` (f16 or bf16), each
    rounded to its nearest (ties to even), as a conversion to that dtype would: q, k and v
    are declared f16 or bf16, so that is what the variant computes on, whatever array holds
    them. Values already of that dtype are unchanged."""
    x = array.astype(np.float64)
    if dtype == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float64)
    # bf16: 8 significant bits, f32's exponent range; below 2**-126 a fixed step of 2**-133.
    with np.errstate(over="ignore", invalid="ignore"):
        _, exponent = np.frexp(x)
        step = np.ldexp(1.0, np.maximum(exponent - 8, -133))
        rounded = np.rint(x / step) * step
        return np.where(np.abs(rounded) >= 2.0 ** 128, np.copysign(np.inf, x), rounded)


def _blocks(batch: int, heads: int, rows: int, keys: int):
    """(batch, head, row) slices covering the index space, about BLOCK_ELEMENTS scores each.

    Whole rows always: a row's softmax needs all of its keys at once.
    """
    row_step = max(1, min(rows, BLOCK_ELEMENTS // max(keys, 1)))
    head_step = max(1, min(heads, BLOCK_ELEMENTS // max(rows * keys, 1))) if row_step == rows else 1
    batch_step = (max(1, BLOCK_ELEMENTS // max(heads * rows * keys, 1))
                  if head_step == heads else 1)
    for b0 in range(0, batch, batch_step):
        for h0 in range(0, heads, head_step):
            for i0 in range(0, rows, row_step):
                yield (slice(b0, min(batch, b0 + batch_step)),
                       slice(h0, min(heads, h0 + head_step)),
                       slice(i0, min(rows, i0 + row_step)))


def _grid(bs: slice, hs: slice, rs: slice, keys: int) -> tuple[np.ndarray, ...]:
    """The global (b, h, i, j) indices of a block, shaped to broadcast against each other."""
    b = np.arange(bs.start, bs.stop, dtype=np.int64).reshape(-1, 1, 1, 1)
    h = np.arange(hs.start, hs.stop, dtype=np.int64).reshape(1, -1, 1, 1)
    i = np.arange(rs.start, rs.stop, dtype=np.int64).reshape(1, 1, -1, 1)
    j = np.arange(keys, dtype=np.int64).reshape(1, 1, 1, -1)
    return b, h, i, j


# Note [Empty rows]
# ~~~~~~~~~~~~~~~~~
# A row with nothing kept and no sink (or a sink of -inf) has m = -inf, and dsl.md
# defines its o as 0 and its lse as -inf. Shifting such a row by 0 instead of m keeps
# every exp() at exp(-inf) = 0, so l = 0 marks it, and o and lse are set without a NaN
# or a warning. Elsewhere exp() of scores far below m underflows to 0, as intended. A
# score of +inf is the one case left undefined: inf - inf gives NaN, quietly.


def _softmax_rows(variant: Variant, evaluator: Evaluator, s: np.ndarray, grid, vb: np.ndarray):
    """(o, lse) of one block of rows; `s` is the scaled score block, `grid` its indices."""
    b, h, i, j = grid
    if variant.score_mod is not None:
        s = np.broadcast_to(_score(evaluator.hook(variant.score_mod, (s, b, h, i, j))), s.shape)
    if variant.mask_mod is not None:
        keep = np.broadcast_to(evaluator.hook(variant.mask_mod, (b, h, i, j)), s.shape)
        s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1, initial=-np.inf)
    if variant.sink is not None:
        sink = _score(evaluator.hook(variant.sink, (h,)))
        sink = np.broadcast_to(sink, (*s.shape[:-1], 1))[..., 0]
        m = np.maximum(m, sink)
    shift = np.where(m == -np.inf, 0.0, m)        # see Note [Empty rows]
    with np.errstate(under="ignore", invalid="ignore"):
        p = np.exp(s - shift[..., None])
        l = p.sum(axis=-1)
        if variant.sink is not None:
            l = l + np.exp(sink - shift)
        empty = l == 0
        l_safe = np.where(empty, 1.0, l)
        o = np.matmul(p, vb) / l_safe[..., None]
        lse = np.where(empty, -np.inf, shift + np.log(l_safe))
    return o, lse


def _score(value: np.ndarray) -> np.ndarray:
    """A score_mod or sink body may be an integer expression; scores are f32 (dsl.md), so
    an integer is rounded to f32 first, to nearest as the kernels' sitofp rounds it
    (16777217 is the score 16777216)."""
    return value.astype(DTYPES[FLOAT], copy=False).astype(np.float64)
