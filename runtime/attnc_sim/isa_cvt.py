"""cvt: conversions between integer and floating types with PTX's rounding modes.

    cvt.rn.bf16x2.f32 d, a, b     d = bf16(a) << 16 | bf16(b)  (a in the upper half)
    cvt.rzi.s32.f32 d, a          round toward zero to an integer, saturating; NaN -> 0

Float to integer always saturates to the destination's range (NaN gives 0). bf16 has no
numpy type: its values travel as their 16 bits (uint16).
"""
from __future__ import annotations

import numpy as np

from attnc_sim import isa
from attnc_sim.isa_float import flush, round_f32, saturate
from attnc_sim.state import DTYPE, WIDTH

_FLOAT = {"f16", "bf16", "f32", "f64"}
_INT_ROUND = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}


def f32_to_bf16_bits(x: np.ndarray, mode: str = "rn") -> np.ndarray:
    """float32 -> bf16 bits (uint16) in rounding mode rn (nearest even), rz, rm or rp; a NaN
    stays a quiet NaN, an overflow goes to infinity or the largest finite value as the mode
    says."""
    u = np.asarray(x, np.float32).view(np.uint32)
    if mode == "rn":
        r = (u + (np.uint32(0x7FFF) + ((u >> 16) & 1))) >> 16
    elif mode in ("rz", "rm", "rp"):
        r = u >> 16                                         # toward zero: drop the low bits
        dropped = (u & 0xFFFF) != 0
        negative = (u >> 31) != 0
        away = {"rz": np.zeros_like(dropped), "rm": dropped & negative, "rp": dropped & ~negative}[mode]
        r = r + away.astype(np.uint32)                      # one bf16 ulp away from zero
    else:
        raise ValueError(mode)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 0x40, r).astype(np.uint16)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b).astype(np.uint32) << 16).view(np.float32)


def f32_to_f16_bits(x: np.ndarray, mode: str = "rn") -> np.ndarray:
    """float32 -> f16 bits (uint16) in rounding mode rn, rz, rm or rp (numpy's cast is rn;
    a directed mode steps the rn result one f16 ulp back where it went past the value)."""
    x = np.asarray(x, np.float32)
    h = x.astype(np.float16)
    if mode == "rn":
        return h.view(np.uint16)
    back = h.astype(np.float32)
    if mode == "rz":
        past = np.abs(back) > np.abs(x)
        h = np.where(past, np.nextafter(h, np.float16(0)), h)
    elif mode == "rm":
        h = np.where(back > x, np.nextafter(h, np.float16(-np.inf)), h)
    elif mode == "rp":
        h = np.where(back < x, np.nextafter(h, np.float16(np.inf)), h)
    else:
        raise ValueError(mode)
    return h.astype(np.float16).view(np.uint16)


def _to_float(x: np.ndarray, src: str) -> np.ndarray:
    if src == "bf16":
        return bf16_bits_to_f32(x)
    return x


@isa.register("cvt")
def cvt(ins, ctx):
    parts = ins.parts
    dst_t, src_t = parts[-2], parts[-1]
    mods = set(parts[1:-2])
    ftz, sat = "ftz" in mods, "sat" in mods
    mode = next((m for m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi") if m in mods), None)
    if dst_t in ("bf16x2", "f16x2"):
        a = ctx.reader(ins.operands[1], src_t)
        b = ctx.reader(ins.operands[2], src_t)
        d = ctx.writer(ins.operands[0], "b32")
        pack = f32_to_bf16_bits if dst_t == "bf16x2" else f32_to_f16_bits
        m = mode or "rn"

        def packed(w):
            x, y = a(w), b(w)
            if sat or "relu" in mods:
                x, y = (saturate(x), saturate(y)) if sat else (np.maximum(x, 0), np.maximum(y, 0))
            d(w, (pack(x, m).astype(np.uint32) << 16) | pack(y, m).astype(np.uint32))
        return packed
    a = ctx.reader(ins.operands[1], src_t)
    d = ctx.writer(ins.operands[0], dst_t)
    if dst_t in _FLOAT:
        fn = _to_float_fn(ctx, src_t, dst_t, mode, ftz, sat)
    else:
        fn = _to_int_fn(ctx, src_t, dst_t, mode, ftz, sat)
    return lambda w: d(w, fn(a(w)))


def _to_float_fn(ctx, src, dst, mode, ftz, sat):
    def fn(x):
        v = _to_float(x, src)
        if src in _FLOAT and ftz and v.dtype == np.float32:
            v = flush(v)
        if dst == "bf16":
            v = v.astype(np.float32)
            if sat:
                v = saturate(v)
            return f32_to_bf16_bits(v, mode or "rn")
        if dst == "f16":
            v = v.astype(np.float32)
            if sat:
                v = saturate(v)
            return f32_to_f16_bits(v, mode or "rn").view(np.float16)
        if mode in _INT_ROUND and src in _FLOAT:     # cvt.rmi.f32.f32: round to an integral value
            r = _INT_ROUND[mode](v).astype(DTYPE[dst])
            return saturate(r) if sat else r
        if dst == "f32":
            if src in ("s64", "u64") and mode in (None, "rn"):
                r = x.astype(np.float32)            # the integer cast itself rounds to nearest
            elif src in ("s64", "u64", "f64") or (src in ("s32", "u32") and mode not in (None, "rn")):
                r = round_f32(v.astype(np.float64), mode or "rn")
            else:
                r = v.astype(np.float32)
            if ftz:
                r = flush(r)
            return saturate(r) if sat else r
        return v.astype(np.float64)
    return fn


def _to_int_fn(ctx, src, dst, mode, ftz, sat):
    dt = DTYPE[dst]
    if src in _FLOAT:
        rnd = _INT_ROUND.get(mode or "rzi")
        if rnd is None:
            raise ctx.error(f"float to integer cvt needs an integer rounding mode, not .{mode}")
        info = np.iinfo(dt)

        def f2i(x):
            v = _to_float(x, src).astype(np.float64)
            if ftz:
                v = flush(v)
            v = np.clip(rnd(v), info.min, info.max)
            return np.where(np.isnan(v), 0, v).astype(dt)
        return f2i
    if sat:
        info = np.iinfo(dt)
        return lambda x: np.clip(x.astype(np.int64) if x.dtype.kind == "i" or WIDTH[src] < 64 else x,
                                 info.min, info.max).astype(dt)
    # integer to integer: truncate or extend by the source's signedness
    return lambda x: x.astype(dt)
