"""Passes by name: the built-in ones and those a user loads from a Python file.

A pass is a frozen dataclass whose fields are its options, with a class-level
`name` (its name in a pipeline, e.g. `attn-tile`), whose instances MLIR's
`PassManager` calls as `pass_obj(op, pass_)` on the module. Deriving from `Pass`
gives that call for free (it calls `run(module)`); any class with the same shape
is accepted, so a pass file need not import anything from attnc:

    # my_pass.py -- attnc compile v.attn --load-pass my_pass.py \\
    #                 --pass-pipeline "attn-tile,my-pass{tag=x},attn-analyze-masks"
    from dataclasses import dataclass
    from typing import ClassVar
    from attnc.passes import Pass, register

    @register
    @dataclass(frozen=True)
    class MyPass(Pass):
        '''Tag every attn.attention (one-line summary shown by `attnc passes`).'''
        name: ClassVar[str] = "my-pass"
        tag: str = "x"

        def run(self, module):
            ...

A file may instead list its classes in `PASSES = [MyPass, ...]`. Built-in
passes are looked up lazily (importing a pass imports MLIR), from `BUILTIN`.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import importlib.util
import math
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from attnc.errors import AttncError

# pass name -> "module:Class"; one file per pass, file and class named after the pass.
BUILTIN: dict[str, str] = {
    "attn-tile": "attnc.passes.tile:Tile",
    "attn-analyze-masks": "attnc.passes.analyze_masks:AnalyzeMasks",
    "attn-mask-kernels": "attnc.passes.mask_kernels:MaskKernels",
    "attn-hoist": "attnc.passes.hoist:Hoist",
    "attn-warp-specialize": "attnc.passes.warp_specialize:WarpSpecialize",
    "attn-alloc-smem": "attnc.passes.alloc_smem:AllocSmem",
    "attn-alloc-tmem": "attnc.passes.alloc_tmem:AllocTmem",
    "attn-insert-pipelines": "attnc.passes.insert_pipelines:InsertPipelines",
    "attn-overlap-gemms": "attnc.passes.overlap_gemms:OverlapGemms",
    "attn-verify-pipeline": "attnc.passes.verify_pipeline:VerifyPipeline",
    "attn-kernel-choices": "attnc.passes.kernel_choices:KernelChoices",
    "attn-lower-sm80": "attnc.passes.lower_sm80:LowerSm80",
    "attn-lower-sm90a": "attnc.passes.lower_sm90a:LowerSm90a",
    "attn-lower-sm100a": "attnc.passes.lower_sm100a:LowerSm100a",
}

_user_passes: dict[str, type] = {}       # name -> class, from register()/load_pass_file()
_user_origins: dict[str, str] = {}       # name -> where it was defined


class Pass:
    """Convenience base of a pass: MLIR's PassManager calls the object, which runs
    `run(module)` on the module it is given. Subclasses are frozen dataclasses."""

    name: ClassVar[str] = ""

    def run(self, module) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define run(module)")

    def __call__(self, op, pass_=None) -> None:
        self.run(op)


@dataclass(frozen=True)
class Option:
    """One option of a pass, read off a dataclass field."""
    name: str
    type: Any
    default: Any
    doc: str = ""

    @property
    def type_name(self) -> str:
        base = _base_type(self.type)
        return getattr(base, "__name__", str(base))


@dataclass(frozen=True)
class PassInfo:
    name: str
    cls: type
    origin: str                  # "built-in" or the file/module it came from

    @property
    def summary(self) -> str:
        """The first line of the class's `description` or docstring."""
        text = getattr(self.cls, "description", "") or (self.cls.__doc__ or "")
        return text.strip().split("\n")[0]

    @property
    def options(self) -> tuple[Option, ...]:
        return options_of(self.cls)


# --- registration -----------------------------------------------------------------------
def register(cls: type) -> type:
    """Class decorator: make `cls` available by its `name` in pipelines."""
    _check_pass_class(cls)
    name = cls.name
    if name in BUILTIN:
        raise AttncError(f"pass '{name}' ({cls.__qualname__}) clashes with the built-in pass "
                         f"of that name; choose another name")
    origin = getattr(sys.modules.get(cls.__module__), "__file__", None) or cls.__module__
    if name in _user_passes and _user_origins[name] != origin and _replaceable(name):
        del _user_passes[name], _user_origins[name]
    if name in _user_passes and _user_origins[name] != origin:
        raise AttncError(f"pass '{name}' is defined twice: in {_user_origins[name]} and in {origin}")
    _user_passes[name] = cls
    _user_origins[name] = origin
    if _batch is not None:
        _batch.add(name)
    return cls


# Note [Pass files of one compile]: the registry lives as long as the process, and a
# program that compiles twice, with `load_passes=["v32.py"]` and then `["v64.py"]`, both
# defining `set-block-n`, means the second file's pass the second time (it was refused as
# defined twice: found by a review). So a file loaded by `load_pass_files` may replace a
# pass that an earlier call's file defined; two files of the same call defining one name
# are still refused, as are a name defined twice in a script and a built-in's name.
_batch: set[str] | None = None          # the names the current load_pass_files call defined
_from_files: set[str] = set()           # names defined by a file load_pass_files loaded


def _replaceable(name: str) -> bool:
    return _batch is not None and name in _from_files and name not in _batch


def load_pass_files(paths) -> list[Path]:
    """Load the pass files of one compile (Note [Pass files of one compile]); the Python
    files that ran: the pass files, and the modules of the user's that they imported
    (what the kernel cache's key must cover besides attnc and the installed packages:
    Note [The kernel cache first] in cli.py)."""
    global _batch
    _batch = set()
    before = set(sys.modules)
    try:
        for path in paths:
            load_pass_file(path)
    finally:
        _from_files.update(_batch)      # a later file's failure leaves the earlier ones loaded
        _batch = None
    files = list(dict.fromkeys(Path(p).resolve() for p in paths))
    files += sorted({file for name in set(sys.modules) - before
                     if (file := _user_file(sys.modules[name])) is not None} - set(files))
    return files


def _user_file(module) -> Path | None:
    """The file of a module of the user's; None for one of attnc's (the cache key's compiler
    digest covers them), the standard library's or an installed package's (whose versions,
    where they make code, are the key's toolchain)."""
    name = getattr(module, "__file__", None)
    if not name:
        return None
    file = Path(name).resolve()
    return None if any(file.is_relative_to(root) for root in _not_the_users()) else file


@functools.lru_cache(maxsize=1)
def _not_the_users() -> tuple[Path, ...]:
    import sysconfig
    libraries = ("stdlib", "platstdlib", "purelib", "platlib")
    return (Path(__file__).resolve().parents[1], *(Path(sysconfig.get_path(n)).resolve() for n in libraries))


def load_pass_file(path: str | Path) -> list[str]:
    """Import a Python file of passes (`@register` or `PASSES = [...]`); the names it added.
    Errors name the file."""
    path = Path(path)
    try:
        return _load_pass_file(path)
    except AttncError as e:
        if e.source is None and e.span is None:
            e.filename = str(path)
        raise


def _load_pass_file(path: Path) -> list[str]:
    if not path.is_file():
        raise AttncError(f"cannot load passes from '{path}': "
                         f"{'a directory, not a Python file' if path.is_dir() else 'no such file'}")
    # The file loaded again (edited since) defines its passes anew: a pass it no longer
    # defines is gone, as in a fresh process (found by a review).
    for name in [n for n, origin in _user_origins.items() if origin == str(path.resolve())]:
        del _user_passes[name], _user_origins[name]
        _from_files.discard(name)
    module = _import_file(path)
    listed = [register(cls).name for cls in getattr(module, "PASSES", ())]
    decorated = [n for n, origin in _user_origins.items() if origin == module.__file__]
    names = list(dict.fromkeys(decorated + listed))
    if not names:
        raise AttncError(f"'{path}' defines no pass: decorate a pass class with "
                         f"@attnc.passes.register or list the classes in PASSES = [...]")
    return names


def _import_file(path: Path):
    module_name = f"attnc_user_passes.{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path.resolve())
    if spec is None or spec.loader is None:
        raise AttncError(f"cannot load passes from '{path}': not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except AttncError:
        raise
    except Exception as e:
        del sys.modules[module_name]
        raise AttncError(f"cannot load passes from '{path}': {type(e).__name__}: {e}") from e
    return module


def _check_pass_class(cls: Any) -> None:
    where = getattr(cls, "__qualname__", repr(cls))
    if not isinstance(cls, type):
        raise AttncError(f"{where} is not a pass class")
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name:
        raise AttncError(f"pass class {where} needs a class attribute `name` (its pipeline name)")
    if not all(c.isalnum() or c in "-_." for c in name):
        # What a pipeline can name (pipelines.parse_pipeline); found by a review.
        raise AttncError(f"pass class {where}: '{name}' cannot be written in a pipeline; a pass "
                         f"name has letters, digits and - _ . only")
    if not dataclasses.is_dataclass(cls):
        raise AttncError(f"pass class {where} must be a dataclass (its fields are its options)")
    defines_call = any("__call__" in vars(k) for k in cls.__mro__ if k is not Pass)
    defines_run = any("run" in vars(k) for k in cls.__mro__ if k is not Pass)
    if not (defines_run if issubclass(cls, Pass) else defines_call):
        raise AttncError(f"pass class {where} must define run(module) (derive from "
                         f"attnc.passes.Pass) or __call__(op, pass_)")


# --- lookup -----------------------------------------------------------------------------
def lookup(name: str) -> PassInfo | None:
    """The pass called `name`, or None when attnc has none of that name."""
    if name in _user_passes:
        return PassInfo(name, _user_passes[name], _user_origins[name])
    if name in BUILTIN:
        return PassInfo(name, _load_builtin(name), "built-in")
    return None


def known_names() -> list[str]:
    return sorted({*BUILTIN, *_user_passes})


def all_passes() -> list[PassInfo]:
    return [lookup(n) for n in known_names()]


def suggestion(name: str) -> str:
    """' (did you mean 'x'?)' for a near miss, else ''."""
    close = difflib.get_close_matches(name, known_names(), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _load_builtin(name: str) -> type:
    module_name, class_name = BUILTIN[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        raise AttncError(f"pass '{name}' is not available: its module {module_name} "
                         f"({module_name.replace('.', '/')}.py) is missing", filename="attnc") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise AttncError(f"pass '{name}' is not available: {module_name} defines no "
                         f"class {class_name}", filename="attnc")
    _check_pass_class(cls)
    return cls


# --- options ----------------------------------------------------------------------------
def options_of(cls: type) -> tuple[Option, ...]:
    hints = typing.get_type_hints(cls)
    return tuple(Option(f.name, hints.get(f.name, str), _default(f), f.metadata.get("doc", ""))
                 for f in dataclasses.fields(cls) if f.init)


def instantiate(info: PassInfo, options: dict[str, str]) -> Any:
    """A pass object with `options` (text values from a pipeline) converted to the
    types of the fields; AttncError for an unknown option or a malformed value."""
    known = {o.name: o for o in info.options}
    values = {}
    for key, text in options.items():
        if key not in known:
            names = ", ".join(known) or "none"
            owners = [name for name in BUILTIN if name != info.name
                      and any(o.name == key for o in lookup(name).options)]
            where = f"; {' and '.join(owners)} {'has' if len(owners) == 1 else 'have'} it" if owners else ""
            raise AttncError(f"pass '{info.name}' has no option '{key}' (its options: {names}){where}")
        values[key] = parse_option(info.name, known[key], text)
    try:
        return info.cls(**values)
    except AttncError:
        raise
    except Exception as e:
        # A user's pass with a required option, or one its __post_init__ refuses: the
        # pipeline's mistake, not the compiler's (found by a review).
        raise AttncError(f"pass '{info.name}' cannot be made with these options: "
                         f"{type(e).__name__}: {e}") from None


def option_text(value: Any) -> str:
    """An option's value as a pipeline writes it (`parse_option` reads it back): true, 2."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_option(pass_name: str, option: Option, text: str) -> Any:
    base = _base_type(option.type)
    if not isinstance(text, str):
        return text
    if base is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise AttncError(f"option '{option.name}' of {pass_name} expects true or false, got '{text}'")
    if base is int:
        try:
            return int(text, 0)
        except ValueError:
            raise AttncError(f"option '{option.name}' of {pass_name} expects an integer, "
                             f"got '{text}'") from None
    if base is float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):            # inf, nan and 1e400 too: no pass means them
            raise AttncError(f"option '{option.name}' of {pass_name} expects a finite number, "
                             f"got '{text}'") from None
        return value
    if base is str or base is typing.Any:
        return text
    raise AttncError(f"option '{option.name}' of {pass_name} is declared {getattr(base, '__name__', base)}, "
                     f"which a pipeline cannot give: options are str, int, float or bool")


def _base_type(ty: Any) -> Any:
    """int for `int | None` / Optional[int]; the type itself otherwise."""
    args = [a for a in typing.get_args(ty) if a is not type(None)]
    return args[0] if len(args) == 1 else ty


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None
