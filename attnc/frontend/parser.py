"""Source text -> `ast.AttentionDecl`, with every syntax error as an `AttncError`.

Hostile input is handled before Lark sees it: undecodable bytes, empty files and
bracket nesting deeper than `MAX_NESTING` are reported with a position, and after it:
an expression deeper than `MAX_HOOK_DEPTH`, so that no input can drive the parser or
the later recursive stages into a Python traceback (Note [Deep expressions] in
depth.py; the tree is turned into the AST under `run_deep`).

Note [Bracket nesting]: Lark's LALR parser and its tree building do not recurse (100,000
nested parentheses parse, in about 6 s), so brackets need no limit of their own for
Lark. Parentheses add no level to an expression, but nothing useful nests brackets
deeper than a hook may be deep: `MAX_NESTING` = MAX_HOOK_DEPTH refuses deeper bracket
nesting before parsing, at the bracket, which keeps the parse of hostile input short.
"""
from __future__ import annotations

import functools
import importlib.util
import math
import re
import sys
from fractions import Fraction
from importlib import resources
from pathlib import Path

import lark
from lark import Token, Transformer, v_args

from attnc.errors import AttncError, Span
from attnc.frontend import ast
from attnc.frontend.characters import continues_a_name, describe_non_ascii
from attnc.frontend.depth import MAX_HOOK_DEPTH, run_deep

MAX_NESTING = MAX_HOOK_DEPTH        # brackets (Note [Bracket nesting])
INT_MAX = 2**31 - 1
MAX_SIZE = 2**30                    # the largest fixed size in a shape

_TOKEN_NAMES = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number",
    "COMP_OP": "a comparison", "ADD_OP": "'+' or '-'", "MUL_OP": "'*', '/', '//' or '%'",
    "$END": "end of file", "<END-OF-FILE>": "end of file",
}


@functools.lru_cache(maxsize=1)
def _lark() -> lark.Lark:
    text = resources.files("attnc.frontend").joinpath("grammar.lark").read_text()
    # The basic (not contextual) lexer makes keywords reserved everywhere, so a
    # dangling `mask_mod(...) = j <=` reports the `out` of the next line.
    return lark.Lark(text, parser="lalr", lexer="basic", propagate_positions=True,
                     maybe_placeholders=True, cache=tables_file() or False)


# Note [The grammar's tables]: Lark builds its LALR tables from the grammar's text in
# every process that parses (0.05 s, a tenth of a compile's Python work before LLVM);
# kept in a file, they load in 0.005 s. They are kept as Python keeps bytecode, in the
# `__pycache__` folder of this module's own bytecode (sys.pycache_prefix and the
# interpreter's tag honoured), and not made where Python writes no bytecode. Lark
# files them under a digest of the grammar, its options, its own release and the
# interpreter's, and builds them again (and rewrites the file) on any change; a file it
# cannot read or write costs only the time.
def tables_file() -> str | None:
    """Where the grammar's parser tables are kept (Note [The grammar's tables]), or None."""
    try:
        folder = Path(importlib.util.cache_from_source(__file__)).parent
    except (NotImplementedError, ValueError):       # no bytecode kept for this interpreter or file
        return None
    path = folder / f"grammar.{sys.implementation.cache_tag}.lark-tables"
    if sys.dont_write_bytecode and not path.is_file():
        return None
    return str(path)


def parse(source: str | bytes, filename: str = "<input>") -> ast.AttentionDecl:
    """Parse `.attn` source; raises `AttncError` located in `filename`."""
    try:
        text = _decode(source)
        _check_not_empty(text)
        _check_nesting(text)
        _check_numbers(text)
        tree = _parse_tree(text)
        _check_tree_depth(tree)
        return _to_ast(tree)
    except AttncError as e:
        shown = source if isinstance(source, str) else source.decode("utf-8", errors="replace")
        raise e.located(filename, shown) from None


def _without_bom(text: str) -> str:
    return " " + text[1:] if text.startswith("\ufeff") else text


def _to_ast(tree: lark.Tree) -> ast.AttentionDecl:
    try:
        decl = run_deep(_ToAst().transform, tree)       # recursive (Note [Deep expressions])
    except lark.exceptions.VisitError as e:
        if isinstance(e.orig_exc, AttncError):
            raise e.orig_exc from None
        raise
    _check_int_literals(decl)
    return decl


def _check_int_literals(decl: ast.AttentionDecl) -> None:
    """2147483648 is an i32 only as `-2147483648` (which `unary` folds): refuse it bare."""
    stack = [d.body if isinstance(d, ast.HookDecl) else d.expr for d in decl.decls
             if isinstance(d, (ast.HookDecl, ast.ScaleDecl))]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Num) and not e.is_float and e.value > INT_MAX:
            raise AttncError(f"integer literal {e.value} does not fit in 32 bits", e.span)
        stack.extend(ast.children(e))


def _decode(source: str | bytes) -> str:
    """The source as text; a UTF-8 byte-order mark (which editors on Windows write) reads
    as a space, so that columns stay those an editor shows."""
    if isinstance(source, str):
        return _without_bom(source)
    try:
        return _without_bom(source.decode("utf-8"))
    except UnicodeDecodeError as e:
        before = source[: e.start]
        line = before.count(b"\n") + 1
        line_start = before.rfind(b"\n") + 1
        col = len(source[line_start: e.start].decode("utf-8", errors="replace")) + 1
        raise AttncError(f"source is not valid UTF-8 text (byte 0x{source[e.start]:02x})",
                         Span(line, col)) from None


_MEANINGFUL_LINE = re.compile(r"^[^\S\n]*[^\s#]", re.MULTILINE)     # a line with more than blanks and a comment


def _check_not_empty(text: str) -> None:
    if not _MEANINGFUL_LINE.search(text):
        raise AttncError("empty file: expected 'attention NAME { ... }'", Span(1, 1))


# A bracket, a newline, or a run of comment lines (and the indentation after each).
_NESTING_MARKS = re.compile(r"[()\[\]\n]|(?:#[^\n]*\n[ \t]*)+|#")


def _check_nesting(text: str) -> None:
    """Reject bracket nesting deeper than MAX_NESTING before parsing (Note [Bracket
    nesting]): a scan of the brackets, newlines and comments only, a run of comment
    lines skipped as one match, so that long comments cost no Python work per
    character or per line."""
    depth, line, line_start, pos = 0, 1, 0, 0
    while True:
        m = _NESTING_MARKS.search(text, pos)
        if m is None or m.group() == "#":           # none left, or a comment up to the end
            return
        mark, pos = m.group(), m.end()
        if mark[0] == "#":                              # comment lines and indentation
            line, line_start = line + mark.count("\n"), m.start() + mark.rfind("\n") + 1
        elif mark == "\n":
            line, line_start = line + 1, pos
        elif mark in "([":
            depth += 1
            if depth > MAX_NESTING:
                raise AttncError(f"expression nested too deeply (more than {MAX_NESTING} levels)",
                                 Span(line, pos - line_start))
        else:
            depth -= 1


# A number run into letters (`0x10`, `1_000`, `3px`): the lexer would read a number and a
# name, and the error would land on the next token, often the next line.
_RUN_ON_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?)([A-Za-z_]\w*)")


_COMMENT = re.compile(r"#[^\n]*")


def _check_numbers(text: str) -> None:
    code = _COMMENT.sub("", text)           # the same lines and columns, without comments
    for m in _RUN_ON_NUMBER.finditer(code):
        line_start = code.rfind("\n", 0, m.start()) + 1
        line_end = code.find("\n", m.end())
        rest = code[m.end():line_end if line_end >= 0 else len(code)]
        if re.fullmatch(r"[eE]\d+", m.group(2)) or (re.fullmatch(r"[eE]", m.group(2)) and re.match(r"[+-]\d", rest)):
            continue                    # an exponent: the lexer's FLOAT
        span = Span(code.count("\n", 0, m.start()) + 1, m.start() - line_start + 1)
        if re.fullmatch(r"[eE]", m.group(2)):
            raise AttncError(f"'{m.group(0)}{rest[:1].strip()}' is not a number: an exponent "
                             f"needs digits, like 1.5e3 or 2e-4", span)
        raise AttncError(f"'{m.group(0)}' is not a number: numbers are decimal, like 16 or 0.5 "
                         f"(no hex, no '_' separators, no suffixes)", span)


def _check_tree_depth(tree: lark.Tree) -> None:
    """Refuse an expression deeper than MAX_HOOK_DEPTH levels (operations, calls, indexing
    and `let`s; parentheses add none) at the first sub-expression, bottom up, that is:
    Note [Deep expressions] in depth.py. Heights are computed with a stack."""
    roots = [d.children[-1] for d in tree.iter_subtrees_topdown() if d.data in ("hook_decl", "scale_decl")]
    for root in roots:
        if not isinstance(root, lark.Tree):
            continue
        height: dict[int, int] = {}
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            kids = [c for c in node.children if isinstance(c, lark.Tree)]
            if not expanded:
                stack.append((node, True))
                stack.extend((c, False) for c in kids)
                continue
            height[id(node)] = 1 + max((height[id(c)] for c in kids), default=0)
            if height[id(node)] > MAX_HOOK_DEPTH:
                raise AttncError(f"expression too deep: more than {MAX_HOOK_DEPTH} levels of operations "
                                 f"(split a long chain into independent parts, e.g. a sum into sums of "
                                 f"fewer terms)", Span.of(node.meta))


def _parse_tree(text: str) -> lark.Tree:
    try:
        return _lark().parse(text)
    except lark.UnexpectedCharacters as e:
        raise AttncError(_unexpected_char_message(text[e.pos_in_stream]), Span(e.line, e.column)) from None
    except lark.UnexpectedToken as e:
        known = _name_cut_short(e.token, text) or _misplaced(e, text)
        if known is not None:
            raise known from None
        raise AttncError(_unexpected_token_message(e, text), _token_span(e.token, text)) from None
    except lark.UnexpectedEOF:
        raise AttncError("unexpected end of file", _end_span(text)) from None


@functools.lru_cache(maxsize=1)
def reserved_words() -> frozenset[str]:
    """The grammar's keywords (its word terminals), which the basic lexer reserves everywhere."""
    return frozenset(t.pattern.value for t in _lark().terminals
                     if isinstance(t.pattern, lark.lexer.PatternStr) and t.pattern.value.isalpha())


_OPERATOR_HINTS = {"&": "'and'", "|": "'or'", "!": "'not', or '!=' for inequality"}


def _unexpected_char_message(ch: str) -> str:
    if ch in _OPERATOR_HINTS:
        return f"unexpected character '{ch}': the language writes {_OPERATOR_HINTS[ch]}"
    if not ch.isascii():
        return describe_non_ascii(ch)
    if ch.isprintable() and not ch.isspace():
        return f"unexpected character '{ch}'"
    return f"unexpected character U+{ord(ch):04X}"


def _name_cut_short(tok: Token, text: str) -> AttncError | None:
    """A name the lexer ended at a letter of another script (`att` of `attеntion`, whose
    `е` is Cyrillic): the parser refuses the name before the lexer reaches that letter,
    which is the mistake. Reported at the letter."""
    if tok.type != "NAME" or tok.end_pos is None or tok.end_pos >= len(text):
        return None
    ch = text[tok.end_pos]
    if not continues_a_name(ch):
        return None
    return AttncError(_unexpected_char_message(ch), Span(tok.end_line, tok.end_column))


HOOK_NAMES = ("score_mod", "mask_mod", "sink")


def _misplaced(e: lark.UnexpectedToken, text: str) -> AttncError | None:
    """The error at the token where the mistake is, where the parser only notices it later.
    Newlines are whitespace, so a name after a whole expression starts a declaration
    (`= s * 2 x` fails at the token after `x`, often on the next line), and a line that
    ends in an operator takes the next line's hook head as its operand (`= i <` then
    `score_mod(...) = s` fails at that `=`)."""
    if e.token.type == "$END":
        return None
    before = list(_lark().lex(text[:e.token.start_pos]))
    if e.token.type == "EQUAL" and before and before[-1].type == "RPAR":
        return _dangling_operator(before, text)
    declaration = _declaration_after_operator(e.token, before, text)
    if declaration is not None:
        return declaration
    if not set(e.expected) <= {"COLON", "LPAR"} or len(before) < 2 or before[-1].type != "NAME":
        return None
    stray = before[-1]
    # What the name follows: inside an expression when the last '=' (a hook's, scale's or
    # let's) comes after the last ':', '{' or declaration keyword; in a `dim` list after `dim`.
    opener = next((t.type for t in reversed(before[:-1])
                   if t.type in ("EQUAL", "COLON", "LBRACE", "DIM", "PARAM", "OUT")), None)
    if opener == "DIM":
        return AttncError(f"name '{_short(stray)}' after a dim's name: the names of a 'dim' are "
                          f"separated by commas ('dim P, Q')", _token_span(stray, text))
    if opener != "EQUAL":
        return None
    if str(stray) in HOOK_NAMES:
        return AttncError(f"'{stray}' starts a hook: its parameters go in parentheses "
                          f"('{stray}(...) = ...')", _token_span(stray, text))
    return AttncError(f"name '{_short(stray)}' after a complete expression: is an operator missing? "
                      f"(a declaration would go on as '{_short(stray)}: ...' or "
                      f"'{_short(stray)}(...) = ...')", _token_span(stray, text))


def _dangling_operator(before: list[Token], text: str) -> AttncError | None:
    """`... = i <` followed by a line `score_mod(s, b, h, i, j) = ...`: the operator took the
    hook's head as its right side. Reported at the operator."""
    depth = 0
    for n in range(len(before) - 1, -1, -1):
        depth += {"RPAR": 1, "LPAR": -1}.get(before[n].type, 0)
        if depth == 0:
            break
    else:
        return None
    if n < 2 or before[n - 1].type != "NAME" or str(before[n - 1]) not in HOOK_NAMES:
        return None
    head, op = before[n - 1], before[n - 2]
    if op.type in ("NAME", "INT", "FLOAT", "RPAR", "RSQB", "EQUAL") or op.line == head.line:
        return None
    return AttncError(f"the expression ends at '{op}', with nothing after it (the next line starts the "
                      f"hook '{head}')", _token_span(op, text))


OPERATORS = ("ADD_OP", "MUL_OP", "COMP_OP", "AND", "OR", "NOT")


def _declaration_after_operator(tok: Token, before: list[Token], text: str) -> AttncError | None:
    """`... = j <=` followed by a declaration line (`q: ...`, `out o: ...`, `param ...`,
    `dim ...`, `scale = ...`): the operator has no right side; the parser notices only at
    the declaration's ':' or keyword. Reported at the operator."""
    if tok.type in ("OUT", "PARAM", "DIM", "SCALE") and before:
        op, what = before[-1], f"'{tok}'"
    elif tok.type == "COLON" and len(before) >= 2 and before[-1].type == "NAME":
        op, what = before[-2], f"'{before[-1]}:'"
    else:
        return None
    if op.type not in OPERATORS or op.line == tok.line:
        return None
    return AttncError(f"the expression ends at '{op}', with nothing after it (the next line starts "
                      f"with the declaration {what})", _token_span(op, text))


def _unexpected_token_message(e: lark.UnexpectedToken, text: str = "") -> str:
    tok = e.token
    if tok.type == "$END":
        what = "end of file"
    elif tok.type == "NAME":
        what = f"name '{tok}'"
    elif tok.type in ("INT", "FLOAT"):
        what = f"number '{tok}'"
    else:
        what = f"'{tok}'"
    if tok.type == "COMP_OP" and "AND" in e.expected:
        return f"unexpected '{tok}': comparisons do not chain; write 'a < b and b < c'"
    if str(tok) in reserved_words() and "NAME" in e.expected and set(e.expected) <= {"NAME", "RPAR"}:
        return f"'{tok}' is a reserved word and cannot be a name"
    if str(tok) == "scale" and "NAME" in e.expected and "LPAR" in e.expected:
        # `s * scale` in a hook: the declaration's keyword, no value a hook reads
        return ("'scale' is a reserved word, not a value: a hook's s is scaled already "
                "(s = scale * q.k, dsl.md)")
    if tok.type == "EQUAL" and "COMP_OP" in e.expected:
        if text[tok.end_pos:tok.end_pos + 1] in ("<", ">"):
            return f"unexpected '={text[tok.end_pos]}': did you mean '{text[tok.end_pos]}='?"
        return "unexpected '=': equality is '=='"
    terminals = set(e.expected)
    if {"INT", "FLOAT"} <= terminals:
        terminals.discard("INT")            # "a number" says both
    expected = sorted({_describe_terminal(t) for t in terminals})
    if 0 < len(expected) <= 6:
        return f"unexpected {what}, expected {' or '.join(expected)}"
    return f"unexpected {what}"


def _describe_terminal(name: str) -> str:
    if name in _TOKEN_NAMES:
        return _TOKEN_NAMES[name]
    try:
        pattern = _lark().get_terminal(name).pattern
    except KeyError:
        return name.lower()
    if isinstance(pattern, lark.lexer.PatternStr):
        return f"'{pattern.value}'"
    return name.lower()


def _token_span(tok: Token, text: str) -> Span:
    if tok.type == "$END" or tok.line is None:
        return _end_span(text)
    return Span(tok.line, tok.column, tok.end_line, tok.end_column)


def _end_span(text: str) -> Span:
    lines = text.rstrip().split("\n")
    return Span(len(lines), len(lines[-1]) + 1)


def _span(x) -> Span:
    return Span.of(x.meta if isinstance(x, lark.Tree) else x)


class _ToAst(Transformer):
    """Lark tree -> ast nodes, recursively: depth bounded by `_check_tree_depth`, run
    under `run_deep`."""

    @v_args(meta=True)
    def start(self, meta, children):
        return children[0]

    @v_args(meta=True)
    def attention(self, meta, children):
        name, *decls = children
        return ast.AttentionDecl(str(name), tuple(decls), Span.of(meta), Span.of(name))

    def tensor_decl(self, children):
        name, ty = children
        return ast.TensorDecl("input", str(name), ty, Span.of(name))

    def param_decl(self, children):
        name, ty = children
        return ast.TensorDecl("param", str(name), ty, Span.of(name))

    def out_decl(self, children):
        name, ty = children
        return ast.TensorDecl("out", str(name), ty, Span.of(name))

    def dim_decl(self, children):
        return ast.DimDecl(tuple(map(str, children)), tuple(map(Span.of, children)))

    @v_args(meta=True)
    def scale_decl(self, meta, children):
        return ast.ScaleDecl(children[0], Span.of(meta))

    def hook_decl(self, children):
        name, *params, body = children
        params = [p for p in params if p is not None]
        return ast.HookDecl(str(name), tuple(map(str, params)), tuple(map(Span.of, params)),
                            body, Span.of(name))

    def tensor_type(self, children):
        dtype, *items = children
        items = [i for i in items if i is not None]
        shape = tuple(_shape_item(i) for i in items)
        return ast.TensorType(str(dtype), Span.of(dtype), shape, tuple(map(Span.of, items)))

    # --- expressions -------------------------------------------------------
    @v_args(meta=True)
    def let(self, meta, children):
        name, value, body = children
        return ast.Let(Span.of(meta), name=str(name), name_span=Span.of(name), value=value, body=body)

    @v_args(meta=True)
    def binary(self, meta, children):
        lhs, op, rhs = children
        return ast.Binary(Span.of(meta), op=str(op), lhs=lhs, rhs=rhs, op_span=Span.of(op))

    @v_args(meta=True)
    def unary(self, meta, children):
        op, operand = children
        if str(op) == "-" and isinstance(operand, ast.Num) and not operand.is_float and operand.value == INT_MAX + 1:
            return ast.Num(Span.of(meta), value=-operand.value, is_float=False)     # the i32 minimum
        return ast.Unary(Span.of(meta), op=str(op), operand=operand)

    def int_lit(self, children):
        tok = children[0]
        value = _int(tok)
        if value > INT_MAX + 1:     # INT_MAX + 1: only under a minus (_check_int_literals)
            raise AttncError(f"integer literal {_short(tok)} does not fit in 32 bits", Span.of(tok))
        return ast.Num(Span.of(tok), value=value, is_float=False)

    def float_lit(self, children):
        tok = children[0]
        value = _f32_of_decimal(str(tok))
        if value is None:
            raise AttncError(f"number {_short(tok)} is out of range for f32", Span.of(tok))
        return ast.Num(Span.of(tok), value=value, is_float=True)

    def name(self, children):
        tok = children[0]
        return ast.Name(Span.of(tok), id=str(tok))

    def index(self, children):
        name, *args = children
        return ast.Index(Span.of(name), name=str(name), args=tuple(a for a in args if a is not None))

    def call(self, children):
        name, *args = children
        return ast.Call(Span.of(name), fn=str(name), args=tuple(a for a in args if a is not None))


def _f32_of_decimal(text: str) -> float | None:
    """The f32 nearest to the decimal `text`, rounded once (through f64 it is rounded
    twice, which is not always once: found by a review); None past f32's range. The
    literal's value is then the same f32 in the kernels (an f32 constant) and in the
    reference."""
    wide = float(text)                  # settles the far ends without a huge Fraction
    if math.isinf(wide):
        return None
    return 0.0 if wide == 0.0 else nearest_f32(Fraction(text))


def nearest_f32(exact: Fraction | int) -> float | None:
    """The f32 nearest to the exact number `exact`, ties to even, subnormals included;
    None past f32's range."""
    magnitude = abs(Fraction(exact))
    if magnitude == 0:
        return 0.0
    scale = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()   # 2^scale ~ magnitude
    if magnitude < Fraction(2) ** scale:
        scale -= 1
    quantum = Fraction(2) ** (max(scale, -126) - 23)      # an f32's last place here (subnormals: 2^-149)
    units, rest = divmod(magnitude / quantum, 1)
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and units % 2):
        units += 1
    value = units * quantum
    return None if value >= Fraction(2) ** 128 else math.copysign(float(value), exact)


def _shape_item(tok: Token) -> ast.ShapeItem:
    if tok.type != "INT":
        return str(tok)
    value = _int(tok)
    if value > MAX_SIZE:
        # The kernels plan their integers for sizes up to 2^30 (Note [Exact integers]), and the
        # runtime refuses a larger dim.
        raise AttncError(f"dimension {_short(tok)} is above 2^30 = {MAX_SIZE}, the largest size the "
                         "kernels take", Span.of(tok))
    return value


def _int(tok: Token) -> int:
    """The value of an integer token; anything longer than 12 digits is out of range anyway
    (and Python refuses int() of very long digit strings)."""
    digits = str(tok).lstrip("0") or "0"
    return int(digits) if len(digits) <= 12 else 10 ** 12


def _short(tok: Token) -> str:
    s = str(tok)
    return s if len(s) <= 24 else s[:12] + "..." + s[-6:]
