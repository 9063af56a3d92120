"""Evaluating the manifest's size expressions: grids and scratch sizes.

A size is a product of factors; a factor is a fixed int, a dim, or
`Cdiv(dim, by)` = ceil(dim / by). An empty product is 1.
"""
from __future__ import annotations

from typing import Mapping

from attnc_runtime.manifest import Cdiv, Factor


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def factor_value(factor: Factor, dims: Mapping[str, int]) -> int:
    if isinstance(factor, Cdiv):
        return cdiv(dims[factor.dim], factor.by)
    if isinstance(factor, str):
        return dims[factor]
    return factor


def product(factors: tuple[Factor, ...], dims: Mapping[str, int]) -> int:
    value = 1
    for factor in factors:
        value *= factor_value(factor, dims)
    return value


def describe(factors: tuple[Factor, ...]) -> str:
    """`(Cdiv('M', 128), 'H')` -> `'cdiv(M, 128) * H'`, for messages."""
    def one(f: Factor) -> str:
        return f"cdiv({f.dim}, {f.by})" if isinstance(f, Cdiv) else str(f)
    return " * ".join(one(f) for f in factors) or "1"
