"""Random `.attn` variants for the GPU property test.

    from variant_gen import generate
    v = generate(17)        # the same variant for the same seed, on any machine
    v.source                # `.attn` text that attnc.frontend.load accepts
    v.params                # each param's name, dtype, shape and how to fill it (gpu_support)

A variant draws, from one `random.Random(seed)`: the dtype, head dims (QK and V may
differ), MHA / GQA / MQA or fixed head counts, symbolic or fixed sequence lengths,
extra runtime dims (`dim P`), an optional `scale`, `lse`, the o dtype, and any of
`score_mod`, `mask_mod` and `sink` (at least one) over the hook arguments (renamed at
random), dims, constants, `param` tensors of f32 and i32 (`f32[H]`, `f32[H, 32]`,
`i32[B, N]`, ...), `+ - * / // %`, comparisons, `and or not`, `where`, `min max abs`,
`exp exp2 log log2 sqrt rsqrt tanh sigmoid floor ceil`, `int`/`float` casts and `let`.
Standard library only: it runs where the compiler does and on the GPU machine.

Note [Numerically sane variants]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Kernels evaluate hooks in f32 with approximate math; the oracle (attnc.reference) in
float64. A mismatch must mean a bug, so the generator keeps to three rules:
1. Nothing discontinuous sees a float that rounding could move across a jump: comparisons
   are between integers, or between a raw f32 param value and a constant; floor, ceil
   and int() only see `(float(n % K) + 0.5) / C` (n an integer, K and C positive integer
   constants), which lies at least 0.5/C from every integer. The score enters only
   continuous functions.
2. Every float expression carries an upper bound on its magnitude (for index values up to
   IDX_MAX and scores up to S_MAX) and is rescaled when it would exceed LIMIT; exp and
   exp2 only see non-positive or small arguments. A score_mod is the score plus a term
   of at most 4, a soft-cap, a bounded rescaling, a clamp, an ALiBi-like linear bias, or
   (rarely) a score of positions alone, so scores stay within a few hundred and no exp
   overflows. Terms stay small because approximate math errs relative to its result
   (tanh.approx to 2**-11): a term of 4 moves a score by 2e-3 at most, about what rounding
   P to bf16 costs (gpu_support.SCORE_MOD_ATOL allows for it in f16).
3. Integer arithmetic stays far inside int32: products only by small constants, and
   divisors are non-zero constants or dims (sizes are at least 1).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

IDX_MAX = 1024          # largest index / dim value the bounds assume (the GPU tests use less)
S_MAX = 20.0            # largest |scaled score| assumed (q, k ~ N(0, 1), scale <= 1.5/sqrt(d))
LIMIT = 60.0            # largest |value| of any float subexpression
INT_LIMIT = 1 << 20     # largest |value| of any integer subexpression
PARAM_INT_MAX = 8       # i32 params hold values in [0, 8) (gpu_support fills them)

KEYWORDS = {"attention", "param", "out", "dim", "scale", "let", "in", "and", "or", "not"}
BUILTINS = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "floor", "ceil",
            "abs", "min", "max", "int", "float", "where"}
TENSORS = {"q", "k", "v", "o", "lse"}

SCORE_ARGS = [("s", "b", "h", "i", "j"), ("score", "b", "h", "q_idx", "kv_idx"),
              ("x", "batch", "head", "row", "col"), ("sc", "z", "hh", "qi", "kj")]
MASK_ARGS = [("b", "h", "i", "j"), ("batch", "head", "q_idx", "kv_idx"), ("z", "hh", "qi", "kj")]
SINK_ARGS = ["h", "head", "hh"]
LET_NAMES = ["t", "u", "w", "d", "r", "tmp", "delta", "acc", "lo", "hi"]
HEAD_DIMS = [((64, 64), 6), ((128, 128), 6), ((128, 64), 2), ((64, 128), 2), ((96, 96), 2),
             ((256, 256), 1), ((96, 128), 1)]
FILLS = ("uniform", "sorted_ids", "bits", "small_int")


@dataclass(frozen=True)
class ParamSpec:
    """A declared param and how the tests fill it (gpu_support.fill_param):
    uniform: f32 in [-1, 1]; sorted_ids: i32 in [0, 4), sorted along the last axis
    (document ids); bits: i32 0 or 1; small_int: i32 in [0, PARAM_INT_MAX)."""
    name: str
    dtype: str
    shape: tuple
    fill: str


@dataclass(frozen=True)
class GeneratedVariant:
    seed: int
    name: str
    source: str
    params: tuple[ParamSpec, ...]
    features: tuple[str, ...]

    def fills(self) -> dict[str, str]:
        return {p.name: p.fill for p in self.params}


def generate(seed: int) -> GeneratedVariant:
    """The variant of `seed` (any int); deterministic."""
    return _Variant(seed).build()


def _fl(x: float) -> str:
    text = repr(round(float(x), 4))
    return f"({text})" if text.startswith("-") else text


def _int(n: int) -> str:
    return f"({n})" if n < 0 else str(n)


@dataclass(frozen=True)
class _E:
    """A generated expression: its text and an upper bound on its magnitude."""
    text: str
    bound: float


class _Scope:
    """What a hook body can name: the hook's arguments by role, and the lets in scope."""

    def __init__(self, args: dict[str, str], lets: tuple = ()):
        self.args = args                  # role ('s', 'b', 'h', 'i', 'j') -> name
        self.lets = lets                  # (name, kind, bound): kind 'int' | 'float'

    def with_let(self, name: str, kind: str, bound: float) -> "_Scope":
        return _Scope(self.args, self.lets + ((name, kind, bound),))

    def names(self) -> set[str]:
        return set(self.args.values()) | {n for n, _, _ in self.lets}


class _Variant:
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.params: dict[str, ParamSpec] = {}
        self.features: set[str] = set()

    # -- declarations ------------------------------------------------------------------
    def build(self) -> GeneratedVariant:
        r = self.rng
        self.dtype = r.choice(["bf16", "f16"])
        (self.dqk, self.dv), = r.choices([hd for hd, _ in HEAD_DIMS], [w for _, w in HEAD_DIMS])
        self._shapes()
        hooks = self._hooks()
        name = f"prop_{self.seed}"
        lines = [f"# generated by tests/gpu/variant_gen.py, seed {self.seed}",
                 f"attention {name} {{",
                 f"  q: {self.dtype}[{self.batch}, {self.heads}, {self.seq_q}, {self.dqk}]",
                 f"  k: {self.dtype}[{self.batch}, {self.heads_kv}, {self.seq_k}, {self.dqk}]",
                 f"  v: {self.dtype}[{self.batch}, {self.heads_kv}, {self.seq_k}, {self.dv}]"]
        if self.extra_dims:
            lines.append(f"  dim {', '.join(self.extra_dims)}")
            self.features.add("extra_dim")
        if r.random() < 0.05:
            self._param("f32", (self.heads,), "uniform", "unused")
            self.features.add("unused_param")
        for p in self.params.values():
            lines.append(f"  param {p.name}: {p.dtype}[{', '.join(map(str, p.shape))}]")
        if r.random() < 0.3:
            lines.append(f"  scale = {self._scale()}")
            self.features.add("scale")
        lines.extend(f"  {h}" for h in hooks)
        o_dtype = r.choices([self.dtype, "f32", "f16" if self.dtype == "bf16" else "bf16"], [8, 1, 1])[0]
        lines.append(f"  out o: {o_dtype}[{self.batch}, {self.heads}, {self.seq_q}, {self.dv}]")
        if r.random() < 0.5:
            lines.append(f"  out lse: f32[{self.batch}, {self.heads}, {self.seq_q}]")
            self.features.add("lse")
        self.features.update({f"dtype_{self.dtype}", f"o_{o_dtype}", f"hd_{self.dqk}x{self.dv}"})
        lines.append("}")
        return GeneratedVariant(self.seed, name, "\n".join(lines) + "\n", tuple(self.params.values()),
                                tuple(sorted(self.features)))

    def _shapes(self) -> None:
        r = self.rng
        self.batch = "B" if r.random() < 0.95 else 2
        if self.batch == 2:
            self.features.add("fixed_batch")
        if r.random() < 0.9:
            self.heads = "H"
            self.heads_kv = r.choices(["H", "HKV", 1], [4, 4, 2])[0]
        else:
            self.heads, self.heads_kv = 4, r.choice([4, 2, 1])
        kv = {"H": "mha", "HKV": "gqa", 1: "mqa"}.get(self.heads_kv, "fixed_heads")
        self.features.add(kv if self.heads == "H" else "fixed_heads")
        if r.random() < 0.9:
            self.seq_q, self.seq_k = "M", "N"
        else:
            self.seq_q, self.seq_k = r.choice([(200, 333), (77, 77), ("M", 256), (160, "N")])
            self.features.add("fixed_seq")
        self.extra_dims = [d for d, p in (("P", 0.3), ("W", 0.1)) if r.random() < p]

    def _scale(self) -> str:
        r = self.rng
        c = r.uniform(0.5, 1.5)
        return r.choice([f"{_fl(c)} / sqrt({self.dqk})", f"{_fl(c)} * rsqrt({self.dqk}.0)",
                         _fl(c / self.dqk ** 0.5)])

    def _hooks(self) -> list[str]:
        r = self.rng
        want = {"score_mod": r.random() < 0.75, "mask_mod": r.random() < 0.75, "sink": r.random() < 0.3}
        if not any(want.values()):
            want[r.choice(list(want))] = True
        hooks = []
        if want["score_mod"]:
            args = r.choice(SCORE_ARGS)
            body = self._score_mod(_Scope(dict(zip("sbhij", args))))
            hooks.append(f"score_mod({', '.join(args)}) = {body}")
            self.features.add("score_mod")
        if want["mask_mod"]:
            args = r.choice(MASK_ARGS)
            body = self._mask_mod(_Scope(dict(zip("bhij", args))))
            hooks.append(f"mask_mod({', '.join(args)}) = {body}")
            self.features.add("mask_mod")
        if want["sink"]:
            arg = r.choice(SINK_ARGS)
            hooks.append(f"sink({arg}) = {self._sink(_Scope({'h': arg}))}")
            self.features.add("sink")
        return hooks

    def _param(self, dtype: str, shape: tuple, fill: str, stem: str) -> ParamSpec:
        """A param of this dtype, shape and fill: an existing one (half the time) or a new one."""
        same = [p for p in self.params.values() if (p.dtype, p.shape, p.fill) == (dtype, shape, fill)]
        if same and self.rng.random() < 0.5:
            return self.rng.choice(same)
        name = stem
        while name in self.params:
            name = f"{stem}{len(self.params)}"
        self.params[name] = ParamSpec(name, dtype, shape, fill)
        self.features.add(f"param_{dtype}")
        return self.params[name]

    def _dim(self, role: str) -> _E:
        """A dim's name where it is symbolic, its number where the shapes fix it."""
        value = {"B": self.batch, "H": self.heads, "HKV": self.heads_kv, "M": self.seq_q,
                 "N": self.seq_k}.get(role, role)
        if isinstance(value, int):
            return _E(str(value), value)
        return _E(value, IDX_MAX)

    # -- hooks -------------------------------------------------------------------------
    def _score_mod(self, scope: _Scope) -> str:
        r = self.rng
        s = scope.args["s"]
        form = r.choices(["add", "softcap", "rescale", "clamp", "where", "nonlinear", "let",
                          "position", "alibi"], [6, 3, 2, 2, 2, 2, 2, 1, 2])[0]
        self.features.add(f"score_{form}")
        if form == "add":
            return f"{s} + {self._term(scope, r.choice([0.5, 1.0, 2.0, 4.0]))}"
        if form == "softcap":
            cap = r.choice([5.0, 10.0, 20.0, 30.0, 50.0])
            inner = s if r.random() < 0.5 else f"({s} + {self._term(scope, 2.0)})"
            return f"{_fl(cap)} * tanh({inner} / {_fl(cap)})"
        if form == "rescale":
            unit = self._unit(scope, 2)
            return f"{s} * (1.0 + {_fl(r.uniform(0.1, 0.5))} * {unit})"
        if form == "clamp":
            lim = r.choice([3.0, 6.0, 15.0])
            return f"min(max({s} + {self._term(scope, 2.0)}, {_fl(-lim)}), {_fl(lim)})"
        if form == "where":
            cond = self._cond(scope, 2)
            return (f"where({cond}, {s} + {self._term(scope, 2.0)}, "
                    f"{s} * {_fl(r.uniform(0.5, 1.5))} + {self._term(scope, 2.0)})")
        if form == "nonlinear":
            return r.choice([f"{s} + 0.5 * tanh({s})", f"{s} - {_fl(r.uniform(0.05, 0.5))} * abs({s})",
                             f"log(1.0 + exp({s}))", f"{s} + 0.3 * sigmoid({s} * 2.0)",
                             f"sqrt({s} * {s} + 1.0) - 1.0 + {s} * 0.5"])
        if form == "let":
            name = self._let_name(scope)
            value = self._float(scope.with_let(name, "x", 0), 2)
            inner = scope.with_let(name, "float", value.bound)
            body = f"{s} + {self._term(inner, 4.0)}"
            return f"let {name} = {value.text} in {body}"
        if form == "alibi":
            slope = self._param_read_f32(scope, prefer_heads=True)
            diff = r.choice([f"({scope.args['j']} - {scope.args['i']})",
                             f"abs({scope.args['i']} - {scope.args['j']})"])
            return f"{s} + {_fl(r.uniform(0.01, 0.06))} * {slope.text} * {diff}"
        # a score of positions alone (no dependence on q and k), now and then an integer one
        if r.random() < 0.3:
            self.features.add("score_int")
            e = self._int(scope, 2)
            return f"{e.text} % {r.randint(2, 6)}"
        return self._term(scope, 3.0)

    def _unit(self, scope: _Scope, depth: int) -> str:
        """A float expression within [-1, 1]."""
        e = self._float(scope, depth)
        return self.rng.choice([f"tanh({e.text} / {_fl(max(1.0, e.bound / 2))})",
                                f"(2.0 * sigmoid({e.text}) - 1.0)",
                                f"{_fl(1.0 / max(e.bound, 1.0))} * {e.text}"])

    def _term(self, scope: _Scope, size: float) -> str:
        """A float expression of magnitude at most about `size`."""
        e = self._float(scope, self.rng.randint(1, 3))
        factor = size / max(e.bound, 1e-3)
        return f"{_fl(factor)} * {e.text}" if abs(factor - 1.0) > 1e-3 else e.text

    def _mask_mod(self, scope: _Scope) -> str:
        r = self.rng
        if r.random() < 0.15:
            name = self._let_name(scope)
            value = self._int(scope, 1)
            inner = scope.with_let(name, "int", value.bound)
            self.features.add("let")
            return f"let {name} = {value.text} in {self._cond(inner, 2)}"
        return self._cond(scope, r.randint(1, 3))

    def _sink(self, scope: _Scope) -> str:
        r = self.rng
        h = scope.args["h"]
        choice = r.randrange(5)
        if choice == 0:
            return self._param_read_f32(scope, prefer_heads=True, stem="sinks").text
        if choice == 1:
            return f"{_fl(r.uniform(-2, 2))}"
        if choice == 2:
            self.features.add("sink_int")
            return f"{h} % {r.randint(2, 4)}"
        if choice == 3:
            return f"{_fl(r.uniform(0.5, 2.0))} * {self._param_read_f32(scope, True, 'sinks').text} + {_fl(r.uniform(-1, 1))}"
        return self._term(scope, 2.0)

    # -- booleans (never on floats computed from scores or indices) ----------------------
    def _cond(self, scope: _Scope, depth: int) -> str:
        r = self.rng
        if depth <= 0 or r.random() < 0.35:
            return self._atom(scope)
        kind = r.choices(["and", "or", "not", "where", "eq"], [5, 4, 2, 1, 1])[0]
        self.features.add(f"bool_{kind}")
        if kind in ("and", "or"):
            return f"({self._cond(scope, depth - 1)} {kind} {self._cond(scope, depth - 1)})"
        if kind == "not":
            return f"not {self._cond(scope, depth - 1)}"
        if kind == "where":
            return (f"where({self._cond(scope, depth - 1)}, {self._cond(scope, depth - 1)}, "
                    f"{self._cond(scope, depth - 1)})")
        return f"(({self._cond(scope, depth - 1)}) {r.choice(['==', '!='])} ({self._cond(scope, depth - 1)}))"

    def _atom(self, scope: _Scope) -> str:
        r = self.rng
        a = scope.args
        if "i" not in a:            # sink: only the head
            return f"{a['h']} % {r.randint(2, 4)} == {r.randint(0, 1)}"
        i, j = a["i"], a["j"]
        w = r.choice([16, 64, 100, 128, 300])
        atoms = [
            ("causal", f"{j} <= {i}"),
            ("causal", f"{i} >= {j}"),
            ("bottom_right", f"{j} <= {i} + ({self._dim('N').text} - {self._dim('M').text})"),
            ("window", f"{i} - {j} < {self._dim('P').text if 'P' in self.extra_dims and r.random() < 0.5 else w}"),
            ("two_sided", f"abs({i} - {j}) <= {w}"),
            ("prefix", f"{j} < {self._dim('P').text if 'P' in self.extra_dims else r.randint(1, 200)}"),
            ("global", f"{j} < {r.randint(1, 40)} or {i} < {r.randint(1, 40)}"),
            ("block_diag", f"{i} // {w} == {j} // {w}"),
            ("chunked", f"{i} // {w} == {j} // {w} and {j} <= {i}"),
            ("dilated", f"({i} - {j}) % {r.randint(2, 5)} == 0"),
            ("stride", f"({i} + {j}) % {r.randint(2, 7)} != 1"),
            ("head", f"{a['h']} % 2 == {r.randint(0, 1)}"),
            ("batch", f"{a['b']} < 1"),
            ("documents", lambda: f"{self._doc(scope, i)} == {self._doc(scope, j)}"),
            ("key_bits", lambda: f"{self._bits(scope)} != 0"),
            ("param_gate", lambda: f"{self._param_read_f32(scope, prefer_heads=True, stem='gate').text} "
                                   f"{r.choice(['>', '<', '>=', '<='])} {_fl(r.uniform(-0.8, 0.8))}"),
            ("per_head_window", lambda: f"{i} - {j} < {self._small_int_read(scope)} * 32"),
            ("int_compare", lambda: f"{self._int(scope, 2).text} {r.choice(['<', '<=', '>', '>=', '==', '!='])} "
                                    f"{self._int(scope, 2).text}"),
            ("let", lambda: self._let_cond(scope)),
        ]
        name, text = r.choice(atoms)
        self.features.add(f"mask_{name}")
        return f"({text() if callable(text) else text})"

    def _let_cond(self, scope: _Scope) -> str:
        name = self._let_name(scope)
        diff = f"{scope.args['i']} - {scope.args['j']}"
        lo, hi = sorted(self.rng.sample(range(-64, 400), 2))
        return f"let {name} = {diff} in {name} >= {lo} and {name} < {hi}"

    def _doc(self, scope: _Scope, index: str) -> str:
        p = self._param("i32", (self._dim("B").text, self._dim("N").text), "sorted_ids", "doc")
        return f"{p.name}[{scope.args['b']}, {index}]"

    def _bits(self, scope: _Scope) -> str:
        r = self.rng
        if r.random() < 0.5:
            p = self._param("i32", (self._dim("N").text,), "bits", "keep")
            return f"{p.name}[{scope.args['j']}]"
        p = self._param("i32", (self._dim("B").text, self._dim("N").text), "bits", "valid")
        return f"{p.name}[{scope.args['b']}, {scope.args['j']}]"

    def _small_int_read(self, scope: _Scope) -> str:
        p = self._param("i32", (self._dim("H").text,), "small_int", "win")
        return f"{p.name}[{scope.args['h']}]"

    # -- integers ----------------------------------------------------------------------
    def _int(self, scope: _Scope, depth: int) -> _E:
        r = self.rng
        if depth <= 0 or r.random() < 0.3:
            return self._int_leaf(scope)
        op = r.choices(["+", "-", "*", "//", "%", "abs", "min", "max", "where", "int", "neg"],
                       [4, 4, 2, 2, 3, 1, 1, 1, 1, 1, 1])[0]
        self.features.add(f"int_{op}")
        a = self._int(scope, depth - 1)
        if op in ("+", "-"):
            b = self._int(scope, depth - 1)
            return _E(f"({a.text} {op} {b.text})", a.bound + b.bound)
        if op == "*":
            c = r.choice([-3, -2, 2, 3, 4, 5])
            if a.bound * abs(c) > INT_LIMIT:
                return a
            return _E(f"({a.text} * {_int(c)})", a.bound * abs(c))
        if op in ("//", "%"):
            d = self._divisor(scope)
            return _E(f"({a.text} {op} {d.text})", a.bound + 1 if op == "//" else d.bound)
        if op == "abs":
            return _E(f"abs({a.text})", a.bound)
        if op in ("min", "max"):
            b = self._int(scope, depth - 1)
            return _E(f"{op}({a.text}, {b.text})", max(a.bound, b.bound))
        if op == "where":
            b = self._int(scope, depth - 1)
            return _E(f"where({self._cond(scope, 1)}, {a.text}, {b.text})", max(a.bound, b.bound))
        if op == "int":
            f = self._safe_step(scope)
            return _E(f"int({f.text})", f.bound)
        return _E(f"(-{a.text})", a.bound)

    def _divisor(self, scope: _Scope) -> _E:
        r = self.rng
        if r.random() < 0.15:
            dims = [d for d in ("N", "M", "H", "B") if not self._dim(d).text.isdigit()]
            if dims:
                return self._dim(r.choice(dims))
        c = r.choice([2, 3, 4, 5, 7, 8, 16, 32, 64, -3, -4])
        return _E(_int(c), abs(c))

    def _int_leaf(self, scope: _Scope) -> _E:
        r = self.rng
        a = scope.args
        choices = [("arg", 6), ("dim", 2), ("const", 2), ("let", 2), ("param", 1)]
        kind = r.choices([k for k, _ in choices], [w for _, w in choices])[0]
        lets = [(n, b) for n, k, b in scope.lets if k == "int"]
        if kind == "let" and lets:
            name, bound = r.choice(lets)
            return _E(name, bound)
        if kind == "dim":
            return self._dim(r.choice(["M", "N", "H", "B"] + self.extra_dims))
        if kind == "const":
            c = r.randint(0, 64)
            return _E(str(c), c)
        if kind == "param":
            self.features.add("int_param_read")
            if "j" in a and r.random() < 0.5:
                return _E(self._doc(scope, a[r.choice("ij")]), PARAM_INT_MAX)
            return _E(self._small_int_read(scope), PARAM_INT_MAX)
        role = r.choice([x for x in "bhijjii" if x in a])
        return _E(a[role], IDX_MAX if role in "ij" else 64)

    # -- floats --------------------------------------------------------------------------
    def _float(self, scope: _Scope, depth: int) -> _E:
        """A float expression with a bound on its magnitude (at most LIMIT)."""
        e = self._float_raw(scope, depth)
        if e.bound <= LIMIT:
            return e
        factor = LIMIT / e.bound
        return _E(f"({e.text} * {_fl(factor)})", LIMIT)

    def _float_raw(self, scope: _Scope, depth: int) -> _E:
        r = self.rng
        if depth <= 0 or r.random() < 0.25:
            return self._float_leaf(scope)
        op = r.choices(["tanh", "sigmoid", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "floor",
                        "ceil", "+", "-", "*", "/", "min", "max", "abs", "neg", "where", "let",
                        "int_mix"],
                       [3, 3, 2, 1, 2, 1, 1, 1, 1, 1, 3, 3, 2, 2, 1, 1, 1, 1, 2, 1, 1])[0]
        self.features.add(f"float_{op}")
        if op in ("floor", "ceil"):
            return self._safe_step(scope, op)
        a = self._float(scope, depth - 1)
        if op == "tanh":
            return _E(f"tanh({a.text} / {_fl(max(1.0, a.bound / 3))})", 1.0)
        if op == "sigmoid":
            return _E(f"sigmoid({a.text})", 1.0)
        if op == "exp":
            if r.random() < 0.5:
                return _E(f"exp(-abs({a.text}))", 1.0)
            c = 3.0 / max(a.bound, 1.0)
            return _E(f"exp({a.text} * {_fl(c)})", 2.72 ** (c * a.bound) + 0.01)
        if op == "exp2":
            return _E(f"exp2(min({a.text}, 2.0))", 4.0)
        if op == "log":
            return _E(f"log(1.0 + abs({a.text}))", 5.0)
        if op == "log2":
            return _E(f"log2(2.0 + sigmoid({a.text}))", 2.0)
        if op == "sqrt":
            return _E(f"sqrt(abs({a.text}))", a.bound ** 0.5 + 0.01)
        if op == "rsqrt":
            return _E(f"rsqrt(1.0 + {a.text} * {a.text})", 1.0)
        if op == "abs":
            return _E(f"abs({a.text})", a.bound)
        if op == "neg":
            return _E(f"(-{a.text})", a.bound)
        if op == "where":
            b = self._float(scope, depth - 1)
            return _E(f"where({self._cond(scope, 1)}, {a.text}, {b.text})", max(a.bound, b.bound))
        if op == "let":
            name = self._let_name(scope)
            inner = scope.with_let(name, "float", a.bound)
            body = self._float(inner, depth - 1)
            self.features.add("let")
            return _E(f"(let {name} = {a.text} in {body.text})", body.bound)
        if op == "int_mix":       # float with an int: implicit promotion
            n = self._int(scope, 1)
            c = 1.0 / max(n.bound, 1.0)
            return _E(f"({a.text} + {n.text} * {_fl(c)})", a.bound + c * n.bound + 0.01)
        b = self._float(scope, depth - 1)
        if op in ("+", "-"):
            return _E(f"({a.text} {op} {b.text})", a.bound + b.bound)
        if op == "*":
            return _E(f"({a.text} * {b.text})", a.bound * b.bound)
        if op == "/":
            return _E(f"({a.text} / (1.0 + abs({b.text})))", a.bound)
        return _E(f"{op}({a.text}, {b.text})", max(a.bound, b.bound))

    def _float_leaf(self, scope: _Scope) -> _E:
        r = self.rng
        a = scope.args
        kinds = [("const", 2), ("score", 4 if "s" in a else 0), ("index", 4), ("param", 2),
                 ("let", 2), ("dim", 1), ("mod", 2)]
        kind = r.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        lets = [(n, b) for n, k, b in scope.lets if k == "float"]
        if kind == "let" and lets:
            name, bound = r.choice(lets)
            return _E(name, bound)
        if kind == "score":
            return _E(a["s"], S_MAX)
        if kind == "index":
            n = self._int(scope, 1)
            c = r.choice([32.0, 64.0, 100.0, 256.0])
            if r.random() < 0.5:
                return _E(f"float({n.text}) / {_fl(c)}", n.bound / c)
            return _E(f"{n.text} / {_fl(c)}", n.bound / c)
        if kind == "param":
            return self._param_read_f32(scope)
        if kind == "dim":
            d = self._dim(r.choice(["M", "N", "H"]))
            return _E(f"float({d.text}) / 512.0", d.bound / 512.0)
        if kind == "mod":
            n = self._int(scope, 2)
            k = r.choice([3, 5, 8, 13, 32])
            return _E(f"float({n.text} % {k}) / {_fl(k)}", 1.0)
        c = r.uniform(-2, 2)
        return _E(_fl(c), abs(c) + 0.01)

    def _safe_step(self, scope: _Scope, fn: str = "") -> _E:
        """floor/ceil/int-ready: `(float(n % K) + 0.5) / C`, never within 0.5/C of an integer."""
        n = self._int(scope, 2)
        k, c = self.rng.choice([7, 16, 33, 64]), self.rng.choice([2, 3, 4, 8])
        inner = f"(float({n.text} % {k}) + 0.5) / {_fl(c)}"
        return _E(f"{fn}({inner})" if fn else f"({inner})", k / c + 1)

    def _param_read_f32(self, scope: _Scope, prefer_heads: bool = False, stem: str = "") -> _E:
        r = self.rng
        a = scope.args
        shapes = [("heads", 6 if prefer_heads else 2), ("table", 0 if prefer_heads else 2),
                  ("keys", 0 if prefer_heads or "j" not in a else 1),
                  ("rows", 0 if prefer_heads or "i" not in a else 1)]
        kind = r.choices([k for k, _ in shapes], [w for _, w in shapes])[0]
        self.features.add(f"param_f32_{kind}")
        if kind == "heads":
            p = self._param("f32", (self._dim("H").text,), "uniform", stem or "bias")
            index = a["h"] if r.random() < 0.8 else self._int(scope, 1).text      # clamped read
            return _E(f"{p.name}[{index}]", 1.0)
        if kind == "table":
            p = self._param("f32", (self._dim("H").text, 32), "uniform", stem or "tab")
            return _E(f"{p.name}[{a['h']}, {self._int(scope, 2).text}]", 1.0)
        if kind == "keys":
            p = self._param("f32", (self._dim("B").text, self._dim("N").text), "uniform", stem or "colb")
            return _E(f"{p.name}[{a['b']}, {a['j']}]", 1.0)
        p = self._param("f32", (self._dim("M").text,), "uniform", stem or "rowb")
        return _E(f"{p.name}[{a['i']}]", 1.0)

    def _let_name(self, scope: _Scope) -> str:
        taken = scope.names() | set(self.params) | TENSORS | KEYWORDS | BUILTINS
        free = [n for n in LET_NAMES if n not in taken]
        return self.rng.choice(free) if free else f"t{len(scope.lets)}"
