"""Parse the PTX that attnc emits into kernels of plain instruction records.

    module = parse_module(text)
    kernel = module.kernels["attnc_mha_fwd"]
    kernel.body[0]      # Instruction(opcode='ld.param.b64', operands=(Reg('%rd12'), Addr(...)), ...)

The parser knows PTX's statement syntax, not its instructions: an instruction is an
opcode (its dot-separated components), an optional guard predicate and operands.
What an opcode means is the handlers' business (isa.py). Registers declared inside an
inline-asm scope (`{ .reg .pred p; ... }`) are renamed to a kernel-unique name, so a
kernel has one flat register namespace.
"""
from __future__ import annotations

import functools
import gc
import re
from dataclasses import dataclass, field

from attnc_sim.errors import SimError


# --- operands -------------------------------------------------------------------

@dataclass(frozen=True)
class Reg:
    name: str               # '%r12', '%tid.x' (a special register), 'p@3' (a scoped one)


@dataclass(frozen=True)
class Imm:
    value: int | float
    is_float: bool          # written 0f..., 0d... or with a decimal point
    bits: int | None = None  # for 0f / 0d: the raw bit pattern (32 or 64 bits)


@dataclass(frozen=True)
class Sym:
    name: str               # a variable or parameter name used as a value


@dataclass(frozen=True)
class Addr:
    base: Reg | Sym | None  # [%rd4+16], [param_0], [1024]
    offset: int
    coords: tuple | None = None     # [tmap, {%r1, %r3}]: a tensor map and its coordinates (Reg, Imm)


@dataclass(frozen=True)
class Vec:
    items: tuple            # {%r1, %r2, ...}: Reg, Imm or Sink


@dataclass(frozen=True)
class Sink:
    pass                    # `_`: a result nobody reads


@dataclass(frozen=True)
class Label:
    name: str               # a branch target


Operand = Reg | Imm | Sym | Addr | Vec | Sink | Label


# --- statements -----------------------------------------------------------------

@dataclass(frozen=True)
class Loc:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Instruction:
    opcode: str                         # 'mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32'
    operands: tuple
    guard: tuple[Reg, bool] | None      # (predicate, negated) of `@%p1` / `@!%p1`
    line: int                           # 1-based line in the PTX text
    text: str                           # the statement as written
    loc: Loc | None = None              # the kernel source location, where the PTX has .loc

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.opcode.split("."))

    def where(self) -> str:
        at = f"PTX line {self.line}: {self.text}"
        return at + (f" (source {self.loc})" if self.loc else "")


@dataclass(frozen=True)
class Param:
    name: str
    type: str       # 'u64', 'u32', 'b8' ...
    size: int       # bytes (an array param: element size times count)
    align: int


@dataclass(frozen=True)
class SharedVar:
    name: str
    align: int
    size: int       # bytes; 0 for `.extern .shared` (the dynamic shared memory)
    extern: bool


@dataclass
class Kernel:
    name: str
    params: list[Param]
    regs: dict[str, str]                    # register name -> declared type ('b32', 'pred' ...)
    body: list[Instruction]
    labels: dict[str, int]                  # label -> index in body of the next instruction
    shared: list[SharedVar]                 # module-level and kernel-level .shared variables
    maxntid: tuple[int, ...] | None = None
    local: list[SharedVar] = field(default_factory=list)    # .local variables (per thread)


@dataclass
class Module:
    version: str
    target: str
    kernels: dict[str, Kernel] = field(default_factory=dict)


# --- the parser -----------------------------------------------------------------

_REG_RANGE = re.compile(r"^(%?[\w$]+)<(\d+)>$")
_LABEL = re.compile(r"^([\w$]+):")
_INT = re.compile(r"^-?(0[xX][0-9a-fA-F]+|\d+)U?$")
_FLOAT_BITS = re.compile(r"^0([fFdD])([0-9a-fA-F]+)$")
_ADDR = re.compile(r"^(?:([%A-Za-z_$][\w$.@]*)([+-]-?(?:0x[0-9a-fA-F]+|\d+))?|(-?(?:0x[0-9a-fA-F]+|\d+)))$")
_LINE_DIRECTIVES = {".version", ".target", ".address_size", ".loc", ".file", ".maxntid", ".minnctapersm",
                    ".reqntid", ".maxnreg", ".pragma"}


def split_operands(text: str) -> list[str]:
    """An instruction's operand list split at the commas outside [...] and {...}:
    `[tmap, {%r1, %r3}], [%r5]` is two operands."""
    if "[" not in text and "{" not in text:
        return text.split(",")
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def collector_paused(fn):
    """`fn` run with Python's cyclic garbage collector paused.

    Note [Decoding without the collector]: parsing and decoding a kernel build a graph that
    lives as long as the kernel -- instruction records, operands, the handlers' closures, some
    ten objects an instruction -- and nothing of it becomes cyclic garbage. The collector's
    full passes, which these allocations set off, each scan the whole heap: in an sm_100a
    kernel of 32,000 instructions 12 of them took 2.0 s of the emulator's 7.7 s. So parse_module
    and program.decode run with the collector paused, and restore it after. What they built
    then goes straight to the oldest generation (gc.freeze and gc.unfreeze, where nothing else
    is frozen) instead of being scanned as young objects by the next passes: 0.6 s more of
    that kernel, which its later full pass would still scan once."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
    return run


@collector_paused
def parse_module(text: str, name: str = "<ptx>") -> Module:
    """The kernels of a PTX module; raises SimError naming the line of what it cannot read."""
    return _Parser(text, name).parse()


class _Parser:
    def __init__(self, text: str, name: str):
        self.text, self.name = text, name
        self.module_shared: list[SharedVar] = []
        self.files: dict[int, str] = {}

    def error(self, line: int, msg: str) -> SimError:
        return SimError(f"{self.name}:{line}: {msg}")

    def parse(self) -> Module:
        module = Module(version="", target="")
        statements = list(self._statements())
        i = 0
        while i < len(statements):
            line, stmt = statements[i]
            i += 1
            if stmt.startswith(".version"):
                module.version = stmt.split()[1]
            elif stmt.startswith(".target"):
                module.target = stmt.split()[1].rstrip(",")
            elif stmt.startswith(".file"):
                m = re.match(r'\.file\s+(\d+)\s+"([^"]*)"', stmt)
                if m:
                    self.files[int(m.group(1))] = m.group(2)
            elif ".shared" in stmt.split()[0:4] and "(" not in stmt:
                self.module_shared.append(self._shared(line, stmt))
            elif re.search(r"\.(entry|func)\b", stmt):
                kernel, i = self._kernel(statements, i - 1)
                if kernel is not None:
                    module.kernels[kernel.name] = kernel
        return module

    def _statements(self):
        """(line, statement) pairs: `;`-terminated statements, `{`, `}` and `label:`."""
        buf, start = [], 0
        for lineno, raw in enumerate(self.text.splitlines(), 1):
            code = raw.split("//", 1)[0].strip()
            while code:
                if not buf:
                    start = lineno
                    m = _LABEL.match(code)
                    if m and not code.startswith("."):
                        yield lineno, m.group(0)
                        code = code[m.end():].strip()
                        continue
                    if code[0] in "{}":
                        yield lineno, code[0]
                        code = code[1:].strip()
                        continue
                    if code.split()[0] in _LINE_DIRECTIVES:
                        yield lineno, code.rstrip(";")
                        code = ""
                        continue
                semi = code.find(";")
                paren = code.find(")")
                if semi < 0:
                    # an .entry header ends at its ')' with no ';'
                    if buf and code == ")" or (not buf and paren >= 0 and code.endswith(")")):
                        buf.append(code)
                        yield start, " ".join(buf)
                        buf = []
                        code = ""
                        continue
                    buf.append(code)
                    break
                buf.append(code[:semi])
                yield start, " ".join(buf).strip()
                buf = []
                code = code[semi + 1:].strip()
        if buf:
            yield start, " ".join(buf)

    def _shared(self, line: int, stmt: str) -> SharedVar:
        m = re.match(r"^(?:\.extern\s+)?\.shared\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+([\w$]+)\s*((?:\[\d*\])*)", stmt)
        if not m:
            raise self.error(line, f"cannot read the shared variable declaration: {stmt}")
        align, ty, name, dims = int(m.group(1) or 1), m.group(2), m.group(3), m.group(4)
        count = 1
        extern = stmt.startswith(".extern") or dims == "[]"
        for d in re.findall(r"\[(\d*)\]", dims):
            count *= int(d) if d else 0
        return SharedVar(name, align, _type_size(ty) * count, extern)

    def _kernel(self, statements: list, i: int):
        line, header = statements[i]
        m = re.search(r"\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)\s*\((.*)\)", header)
        if not m:
            raise self.error(line, f"cannot read the kernel header: {header[:120]}")
        is_entry, name, params = m.group(1) == "entry", m.group(2), m.group(3)
        kernel = Kernel(name=name, params=[self._param(line, p) for p in params.split(",") if p.strip()],
                        regs={}, body=[], labels={}, shared=list(self.module_shared))
        i += 1
        while i < len(statements) and statements[i][1] != "{":
            directive = statements[i][1]
            if directive.startswith(".maxntid") or directive.startswith(".reqntid"):
                kernel.maxntid = tuple(int(x) for x in re.findall(r"\d+", directive))
            i += 1
        if i == len(statements):            # a declaration without a body
            return None, i
        depth, scopes, loc, uniq = 0, [], None, 0
        while i < len(statements):
            line, stmt = statements[i]
            i += 1
            if stmt == "{":
                depth += 1
                scopes.append({})
                continue
            if stmt == "}":
                depth -= 1
                scopes.pop()
                if depth == 0:
                    break
                continue
            if stmt.endswith(":") and _LABEL.match(stmt):
                kernel.labels[stmt[:-1]] = len(kernel.body)
                continue
            if stmt.startswith(".reg"):
                for reg_name, ty in self._regs(line, stmt):
                    if depth > 1:
                        uniq += 1
                        scopes[-1][reg_name] = f"{reg_name}@{uniq}"
                        reg_name = scopes[-1][reg_name]
                    kernel.regs[reg_name] = ty
                continue
            if stmt.split()[0] == ".loc":
                f, ln, col = (re.findall(r"\d+", stmt) + ["0", "0", "0"])[:3]
                loc = Loc(self.files.get(int(f), f), int(ln), int(col))
                continue
            if ".shared" in stmt.split()[:3]:
                kernel.shared.append(self._shared(line, stmt))
                continue
            if stmt.startswith(".local"):
                kernel.local.append(self._shared(line, stmt.replace(".local", ".shared", 1)))
                continue
            if stmt.startswith("."):
                continue                        # .pragma and other directives change no semantics here
            kernel.body.append(self._instruction(line, stmt, scopes, loc))
        if not is_entry:
            return None, i
        return kernel, i

    def _param(self, line: int, text: str) -> Param:
        words = text.split()
        m = re.match(r"([\w$]+)(?:\[(\d+)\])?", words[-1])
        ty = next((w[1:] for w in words[1:] if w[1:] in _SIZES), None)
        align = int(words[words.index(".align") + 1]) if ".align" in words else 0
        if ty is None or m is None:
            raise self.error(line, f"cannot read the parameter {text.strip()!r}")
        size = _type_size(ty) * int(m.group(2) or 1)
        return Param(m.group(1), ty, size, align or _type_size(ty))

    def _regs(self, line: int, stmt: str):
        words = stmt.replace(",", " ").split()
        ty = words[1].lstrip(".")
        if words[1] == ".v2" or words[1] == ".v4":
            raise self.error(line, f"vector registers are not supported: {stmt}")
        for w in words[2:]:
            m = _REG_RANGE.match(w)
            if m:
                for k in range(int(m.group(2))):
                    yield f"{m.group(1)}{k}", ty
            else:
                yield w, ty

    def _instruction(self, line: int, stmt: str, scopes: list, loc) -> Instruction:
        text = stmt
        guard = None
        if stmt.startswith("@"):
            g, stmt = stmt[1:].split(None, 1)
            neg = g.startswith("!")
            guard = (Reg(self._rename(g.lstrip("!"), scopes)), neg)
        parts = stmt.split(None, 1)
        opcode = parts[0]
        ops = tuple(self._operand(line, o.strip(), scopes) for o in split_operands(parts[1])) if len(parts) > 1 else ()
        return Instruction(opcode, ops, guard, line, text, loc)

    def _rename(self, name: str, scopes: list) -> str:
        for scope in reversed(scopes):
            if name in scope:
                return scope[name]
        return name

    def _operand(self, line: int, text: str, scopes: list):
        if text[:1] == "%" and "|" not in text:            # a register: most operands
            return Reg(self._rename(text, scopes))
        if text.startswith("{"):
            return Vec(tuple(self._operand(line, t.strip(), scopes) for t in text.strip("{} ").split(",")))
        if text.startswith("[") and "{" in text:
            head, _, vec = text[1:-1].partition(",")
            coords = self._operand(line, vec.strip(), scopes)
            base = self._operand(line, head.strip(), scopes)
            if not isinstance(coords, Vec) or not isinstance(base, (Reg, Sym)):
                raise self.error(line, f"cannot read the tensor address {text}")
            return Addr(base, 0, coords.items)
        if text.startswith("["):
            inner = text[1:-1].replace(" ", "")
            m = _ADDR.match(inner)
            if not m:
                raise self.error(line, f"cannot read the address {text}")
            if m.group(3) is not None:
                return Addr(None, int(m.group(3), 0))
            base, off = m.group(1), int(m.group(2).replace("+", ""), 0) if m.group(2) else 0
            return Addr(Reg(self._rename(base, scopes)) if base.startswith("%") or self._rename(base, scopes) != base
                        else Sym(base), off)
        if text == "_":
            return Sink()
        if "|" in text:                         # d|p: two destinations (setp, shfl.sync)
            return Reg("|".join(self._rename(t.strip(), scopes) for t in text.split("|")))
        m = _FLOAT_BITS.match(text)
        if m:
            bits = int(m.group(2), 16)
            import struct
            if m.group(1) in "fF":
                return Imm(struct.unpack("<f", struct.pack("<I", bits))[0], True, bits)
            return Imm(struct.unpack("<d", struct.pack("<Q", bits))[0], True, bits)
        if _INT.match(text):
            return Imm(int(text.rstrip("U"), 0), False)
        if re.match(r"^-?\d+\.\d*(e[-+]?\d+)?$", text):
            return Imm(float(text), True)
        negated = text.startswith("!")
        name = self._rename(text.lstrip("!"), scopes)
        if name.startswith("%") or name != text.lstrip("!"):
            return Reg(("!" if negated else "") + name)
        return Sym(text)


_SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
          "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4,
          "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16, "pred": 1}


def _type_size(ty: str) -> int:
    return _SIZES[ty]
