"""The grammar's parser tables kept in a file (Note [The grammar's tables] in parser.py):
a parser loaded from the file reads every example and rejects every corpus error exactly
as the one built from the grammar does, and no file is made where Python writes no
bytecode."""
from __future__ import annotations

import sys
from pathlib import Path

import lark
import pytest

from attnc.errors import AttncError
from attnc.frontend import parser

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "examples").glob("*.attn")) + sorted((Path(__file__).parent / "errors").glob("*.attn"))


def _outcome(source: bytes, path: Path):
    try:
        return repr(parser.parse(source, str(path)))     # some AST nodes compare by identity
    except AttncError as e:
        return e.render()


def _outcomes(monkeypatch, build) -> list:
    made = build()
    monkeypatch.setattr(parser, "_lark", lambda: made)
    try:
        return [_outcome(path.read_bytes(), path) for path in SOURCES]
    finally:
        monkeypatch.undo()


def test_tables_loaded_from_their_file_parse_as_the_grammar_built_anew(tmp_path, monkeypatch):
    text = (ROOT / "attnc" / "frontend" / "grammar.lark").read_text()
    options = dict(parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True)
    tables = tmp_path / "grammar.lark-tables"
    built = _outcomes(monkeypatch, lambda: lark.Lark(text, **options))
    written = _outcomes(monkeypatch, lambda: lark.Lark(text, cache=str(tables), **options))
    assert tables.is_file()
    loaded_from = []
    real_load = lark.Lark._load

    def spy(self, *args, **kwargs):
        loaded_from.append(tables)
        return real_load(self, *args, **kwargs)

    monkeypatch.setattr(lark.Lark, "_load", spy)
    made = lark.Lark(text, cache=str(tables), **options)
    monkeypatch.undo()
    assert loaded_from, "the second parser was built again, not loaded from the tables' file"
    loaded = _outcomes(monkeypatch, lambda: made)
    assert len(SOURCES) > 100
    parsed = sum(o.startswith("AttentionDecl(") for o in built)
    assert len(list((ROOT / "examples").glob("*.attn"))) <= parsed < len(SOURCES)
    assert written == built
    assert loaded == built


def test_the_tables_file_lies_with_the_bytecode_and_is_not_made_where_python_writes_none(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = parser.tables_file()
    assert path is not None and Path(path).is_relative_to(tmp_path)
    assert Path(path).name == f"grammar.{sys.implementation.cache_tag}.lark-tables"
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert parser.tables_file() is None
    Path(path).parent.mkdir(parents=True)
    Path(path).write_bytes(b"")
    assert parser.tables_file() == path             # read where it is, as bytecode is


@pytest.mark.parametrize("content", [b"", b"not the digest\n", b"\x00" * 64])
def test_a_damaged_tables_file_is_built_again(tmp_path, monkeypatch, content):
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = Path(parser.tables_file())
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    monkeypatch.setattr(parser, "_lark", parser._lark.__wrapped__)
    decl = parser.parse((ROOT / "examples" / "mha.attn").read_bytes(), "mha.attn")
    assert decl.name == "mha"
    assert path.read_bytes() != content and path.stat().st_size > 1000
