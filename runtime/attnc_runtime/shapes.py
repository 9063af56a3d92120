"""Evaluating the manifest's size expressions: grids and scratch sizes.

A size is a product of factors; a factor is a fixed int, a dim,
`Cdiv(dim, by)` = ceil(dim / by) or (grids) `MinSms(factors)` = min(their product, the
device's SM count). An empty product is 1.
"""
from __future__ import annotations

from typing import Mapping

from attnc_runtime.manifest import Cdiv, Factor, MinSms


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def factor_value(factor: Factor, dims: Mapping[str, int], sms: int | None = None) -> int:
    if isinstance(factor, Cdiv):
        return cdiv(dims[factor.dim], factor.by)
    if isinstance(factor, MinSms):
        if sms is None:
            raise ValueError(f"{describe((factor,))}: the SM count is not known here")
        return min(product(factor.factors, dims), sms)
    if isinstance(factor, str):
        return dims[factor]
    return factor


def product(factors: tuple[Factor, ...], dims: Mapping[str, int], sms: int | None = None) -> int:
    value = 1
    for factor in factors:
        value *= factor_value(factor, dims, sms)
    return value


def describe(factors: tuple[Factor, ...]) -> str:
    """`(Cdiv('M', 128), 'H')` -> `'cdiv(M, 128) * H'`, for messages."""
    def one(f: Factor) -> str:
        if isinstance(f, MinSms):
            return f"min({describe(f.factors)}, SMs)"
        return f"cdiv({f.dim}, {f.by})" if isinstance(f, Cdiv) else str(f)
    return " * ".join(one(f) for f in factors) or "1"
