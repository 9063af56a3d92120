"""The pass pipeline of each target, as plain data, and its textual form.

A pipeline is a list of `(pass name, options)`; `attnc compile --pass-pipeline`
replaces the target's list with one written as text:

    attn-tile{block_m=64 block_n=64},attn-analyze-masks

(elements separated by commas; options inside braces as `key=value`, separated by
spaces or commas, as in MLIR's pipeline syntax). A pass whose options include
`target` and that is not given one gets the `-arch` of the compile.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from attnc.errors import AttncError, Span

TARGETS = ("sm_80", "sm_90a", "sm_100a")

# Every target plans with the same passes; they differ in the recipes and tables the
# passes consult (attnc/schedule/recipes.py, tile_table.py), then record the kernel's
# other choices; each target's lowering then builds its kernel from the plan (L6).
_PLAN = [
    ("attn-tile", {}),
    ("attn-analyze-masks", {}),
    ("attn-mask-kernels", {}),
    ("attn-hoist", {}),
    ("attn-warp-specialize", {}),
    ("attn-alloc-smem", {}),
    ("attn-alloc-tmem", {}),
    ("attn-insert-pipelines", {}),
    ("attn-verify-pipeline", {}),
]

# The targets with code generation, and the pass that lowers their plan to a kernel.
LOWERING: dict[str, str] = {"sm_80": "attn-lower-sm80", "sm_90a": "attn-lower-sm90a",
                            "sm_100a": "attn-lower-sm100a"}
# What the lowering chooses beyond the plan, recorded on the ops first (Note [Kernel choices]).
CHOICES_PASS = "attn-kernel-choices"

# sm_90a's consumer warpgroups overlap their GEMMs (Note [Overlapped steps in the IR]),
# written after the synchronization and checked with it.
_TARGET_PASSES = {"sm_90a": {"attn-insert-pipelines": "attn-overlap-gemms"}}


def pass_target(name: str) -> str | None:
    """The target whose pipeline alone holds the pass `name` (a lowering,
    attn-overlap-gemms), or None for a pass of every target's."""
    for target, lowering in LOWERING.items():
        if name == lowering or name in _TARGET_PASSES.get(target, {}).values():
            return target
    return None


def _plan(target: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for name, options in _PLAN:
        out.append((name, options))
        if name in _TARGET_PASSES.get(target, {}):
            out.append((_TARGET_PASSES[target][name], {}))
    return out


PIPELINES: dict[str, list[tuple[str, dict[str, str]]]] = {
    target: [*_plan(target), (CHOICES_PASS, {}), (LOWERING[target], {})]
    for target in TARGETS}

PIPELINE_SOURCE = "--pass-pipeline"      # the "file name" errors in a pipeline text render with


@dataclass(frozen=True)
class PassSpec:
    """One element of a pipeline: a pass name, its options as text, where it was written."""
    name: str
    options: dict[str, str] = field(default_factory=dict)
    col: int = 1                          # 1-based column in the pipeline text

    def text(self) -> str:
        if not self.options:
            return self.name
        return self.name + "{" + " ".join(f"{k}={v}" for k, v in self.options.items()) + "}"


def target_pipeline(target: str) -> list[PassSpec]:
    if target not in PIPELINES:
        raise AttncError(f"unsupported target '{target}'; supported targets are "
                         f"{', '.join(TARGETS)}")
    return [PassSpec(name, dict(options)) for name, options in PIPELINES[target]]


def format_pipeline(specs: list[PassSpec]) -> str:
    return ",".join(s.text() for s in specs)


def pipeline_with(target: str, options: dict[str, dict]) -> str:
    """The pipeline of `target` as text, with `options[pass name]` (values written with
    str()) set on those passes."""
    return format_pipeline([PassSpec(p.name, {**p.options, **{k: str(v) for k, v in options.get(p.name, {}).items()}})
                            for p in target_pipeline(target)])


def pipeline_with_options(target: str, options: dict) -> str:
    """The pipeline of `target` with each of `options` set on the pass of that pipeline
    that has an option of its name (attn-tile first, so `stages` is attn-tile's); one no
    pass has goes to the last pass, whose error names it."""
    from attnc.passes.registry import lookup

    specs = target_pipeline(target)
    owners = {}
    for spec in reversed(specs):
        owners.update({o.name: spec.name for o in lookup(spec.name).options})
    by_pass: dict[str, dict] = {}
    for name, value in options.items():
        by_pass.setdefault(owners.get(name, specs[-1].name), {})[name] = value
    return pipeline_with(target, by_pass)


def parse_pipeline(text: str) -> list[PassSpec]:
    """`a{k=v},b` -> [PassSpec('a', {'k': 'v'}), PassSpec('b')]; errors point into `text`.
    An empty text is the empty pipeline (the IR is left as it is)."""
    return [_parse_element(text, start, end) for start, end in _split_top_level(text)]


def _split_top_level(text: str) -> list[tuple[int, int]]:
    """(start, end) of each comma-separated element outside braces."""
    pieces, depth, start = [], 0, 0
    for pos, ch in enumerate(text):
        if ch == "{":
            depth += 1
            if depth > 1:
                raise _error(text, pos + 1, "nested '{' in pass options")
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise _error(text, pos + 1, "'}' without a matching '{'")
        elif ch == "," and depth == 0:
            pieces.append((start, pos))
            start = pos + 1
    if depth:
        raise _error(text, text.rindex("{") + 1, "'{' without a matching '}'")
    pieces.append((start, len(text)))
    if len(pieces) == 1 and not text.strip():
        return []
    return pieces


def _parse_element(text: str, start: int, end: int) -> PassSpec:
    element = text[start:end]
    stripped = element.strip()
    col = start + len(element) - len(element.lstrip()) + 1
    if not stripped:
        raise _error(text, col, "empty pass name in the pipeline")
    name, _, rest = stripped.partition("{")
    name = name.strip()
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise _error(text, col, f"'{name or stripped}' is not a pass name")
    if rest and not rest.endswith("}"):
        raise _error(text, col, f"unexpected text after the options of '{name}'")
    options = _parse_options(text, col + stripped.index("{") + 1 if rest else col, rest[:-1], name)
    return PassSpec(name, options, col)


def _parse_options(text: str, col: int, body: str, pass_name: str) -> dict[str, str]:
    """`body` is the text inside the braces, starting at column `col` of `text`."""
    options: dict[str, str] = {}
    for item in body.replace(",", " ").split():
        key, eq, value = item.partition("=")
        where = col + body.find(item)
        if not eq or not key or not value:
            raise _error(text, where, f"option '{item}' of {pass_name} must be written key=value")
        if key in options:
            raise _error(text, where, f"option '{key}' of {pass_name} is given twice")
        options[key] = value
    return options


def _error(text: str, col: int, message: str) -> AttncError:
    return AttncError(message, Span(1, col), filename=PIPELINE_SOURCE, source=text)
