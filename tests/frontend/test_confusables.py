"""A character of another script where the language is ASCII is named, with its code
point, at the character itself -- also inside a name the parser refuses before the lexer
reaches the character (`attеntion` with a Cyrillic `е` was "unexpected name 'att'")."""
from __future__ import annotations

import pytest

from attnc.frontend import load
from attnc.frontend.characters import ascii_lookalike
from frontend_diagnostics import expect_error

NAMES = "names use ASCII letters, digits and '_'"

BODY = """\
attention t {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  mask_mod(b, h, i, j) = i >= j and i - j < 64
  out o: bf16[B, H, M, 64]
}
"""


def _edited(old: str, new: str) -> str:
    assert old in BODY
    return BODY.replace(old, new, 1)


CASES = [
    # (source, line, col, message)
    pytest.param(_edited("attention", "att\u0435ntion"), 1, 4,
                 f"unexpected character '\u0435' (U+0435 CYRILLIC SMALL LETTER IE), which looks like the "
                 f"ASCII 'e': {NAMES}", id="keyword-cut-short"),
    pytest.param(_edited("attention t", "attention t\u0430"), 1, 12,
                 f"unexpected character '\u0430' (U+0430 CYRILLIC SMALL LETTER A), which looks like the "
                 f"ASCII 'a': {NAMES}", id="variant-name-end"),
    pytest.param(_edited("and", "\u0430nd"), 5, 33,
                 f"unexpected character '\u0430' (U+0430 CYRILLIC SMALL LETTER A), which looks like the "
                 f"ASCII 'a': {NAMES}", id="keyword-start"),
    pytest.param(_edited("out o", "\u043eut o"), 6, 3,
                 f"unexpected character '\u043e' (U+043E CYRILLIC SMALL LETTER O), which looks like the "
                 f"ASCII 'o': {NAMES}", id="declaration-keyword"),
    pytest.param(_edited("[B, H, M, 64]", "[B, \u0397, M, 64]"), 2, 14,
                 f"unexpected character '\u0397' (U+0397 GREEK CAPITAL LETTER ETA), which looks like the "
                 f"ASCII 'H': {NAMES}", id="greek-dim"),
    pytest.param(_edited("q: bf16[B, H, M, 64]", "q: bf16[B, H, M, \uff16\uff14]"), 2, 20,
                 "unexpected character '\uff16' (U+FF16 FULLWIDTH DIGIT SIX), which looks like the "
                 "ASCII '6': numbers use ASCII digits", id="full-width-digits"),
    pytest.param(_edited("mask_mod", "mask_mo\U0001d41d"), 5, 10,
                 f"unexpected character '\U0001d41d' (U+1D41D MATHEMATICAL BOLD SMALL D), which looks "
                 f"like the ASCII 'd': {NAMES}", id="mathematical-letter"),
    pytest.param(_edited("i - j < 64", "i - j < 64\u00a0"), 5, 47,
                 "unexpected character U+00A0 NO-BREAK SPACE: outside comments the language is ASCII",
                 id="no-break-space"),
    pytest.param(_edited("attention t", "attention caf\u00e9"), 1, 14,
                 f"unexpected character '\u00e9' (U+00E9 LATIN SMALL LETTER E WITH ACUTE): {NAMES}",
                 id="accented-letter"),
    pytest.param(_edited("attention t", "attention t\U0001f600"), 1, 12,
                 "unexpected character '\U0001f600' (U+1F600 GRINNING FACE): outside comments the "
                 "language is ASCII", id="emoji"),
]


@pytest.mark.parametrize("source, line, col, message", CASES)
def test_a_foreign_character_is_named_at_its_place(source, line, col, message):
    err = expect_error(source)
    assert (err.message, err.span.line, err.span.col) == (message, line, col)


def test_comments_may_hold_any_character():
    variant = load(_edited("attention t {", "attention t {  # attеntion, café, \U0001f600, \uff16\uff14"))
    assert variant.name == "t"


@pytest.mark.parametrize("ch, ascii", [("\u0435", "e"), ("\u0406", "I"), ("\u039f", "O"), ("\u0131", "i"),
                                       ("\uff21", "A"), ("\ufb01", "fi"), ("\u00e9", None), ("\u03c3", None)])
def test_lookalikes(ch, ascii):
    assert ascii_lookalike(ch) == ascii
